//! `POST /requests/{id}/undo`, over [`crate::service::history`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use writ_core::content::sha256_hex;
use writ_core::edits::Editor;
use writ_core::history::{UndoOptions, UndoResponse};

use crate::access::{AuditedCaller, Viewer};
use crate::error::ApiError;
use crate::extract::{body_error, json_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Put back every file a request wrote as it was before it, all or nothing.
pub async fn undo_request(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    viewer: Viewer,
    who: AuditedCaller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<UndoResponse>, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    // An empty body is the defaults: neither forced nor a dry run.
    let options = if body.iter().all(u8::is_ascii_whitespace) {
        UndoOptions::default()
    } else {
        Json::<UndoOptions>::from_bytes(&body)
            .map_err(|e| json_error(&e))?
            .0
    };
    let editor = Editor {
        request_id,
        caller: who.caller,
        scope: who.scope,
        route: format!("POST /requests/{id}/undo"),
    };
    let answer =
        crate::service::history::undo(&state, &viewer, editor, &sha256_hex(&body), &id, options)
            .await?;
    Ok(Json(answer))
}
