//! `POST /edits`: the body translated to [`crate::service::edits`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use writ_core::content::sha256_hex;
use writ_core::edits::{Editor, EditsRequest};

use crate::error::ApiError;
use crate::extract::{body_error, json_error};
use crate::service::edits::apply;
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Apply edits to up to five files, all or nothing.
pub async fn post_edits(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: crate::access::AuditedCaller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let Json(req) = Json::<EditsRequest>::from_bytes(&body).map_err(|e| json_error(&e))?;
    let editor = Editor {
        request_id,
        caller: who.caller,
        scope: who.scope,
        route: "POST /edits".into(),
    };
    let answer = apply(&state, editor, sha256_hex(&body), req).await?;
    Ok((StatusCode::OK, Json(answer)).into_response())
}
