//! `POST /run`: the body translated to [`crate::service::run`]. A run whose caller hangs up is
//! stopped: the hang-up layer ([`super::hang_ups`]) says when.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use writ_core::content::sha256_hex;

use super::hang_ups::HungUp;
use crate::error::ApiError;
use crate::extract::{body_error, json_error};
use crate::service::run::{RunCall, RunRequest, execute};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Run a configured command in the sandbox on a scratch copy of the workspace.
pub async fn run_command(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: crate::access::AuditedCaller,
    axum::Extension(HungUp(hung_up)): axum::Extension<HungUp>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let Json(req) = Json::<RunRequest>::from_bytes(&body).map_err(|e| json_error(&e))?;
    let run = execute(
        &state,
        RunCall {
            route: "POST /run",
            request_id,
            caller: who.caller,
            scope: who.scope,
            body_sha256: sha256_hex(&body),
            request: req,
            hung_up,
        },
    )
    .await?;
    Ok((StatusCode::OK, Json(run)).into_response())
}
