//! Write sessions over HTTP: begin with the target, send the content as raw chunks (never JSON),
//! finish with a `DONE` line or explicitly. The rules live in [`writ_core::sessions`]; each route
//! translates its request to [`crate::service::write_sessions::run`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use uuid::Uuid;
use writ_core::sessions::{BeginSession, Correction, SessionCaller};

use crate::error::ApiError;
use crate::extract::{body_error, json_error};
use crate::service::write_sessions::{SessionCall, run};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// The body of `POST /write_sessions/{id}/corrections`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Corrections {
    /// One entry per invalid sequence to fix, by the byte offset the session listed.
    pub corrections: Vec<Correction>,
}

/// The path of `/write_sessions/{id}` and the routes beneath it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SessionId {
    /// The session id.
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
}

fn who(request_id: Uuid, audited: crate::access::AuditedCaller) -> SessionCaller {
    SessionCaller {
        request_id,
        caller: audited.caller,
        scope: audited.scope,
    }
}

/// Begin a write session for one target file; the target is checked now.
pub async fn begin_session(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: crate::access::AuditedCaller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let Json(begin) = Json::<BeginSession>::from_bytes(&body).map_err(|e| json_error(&e))?;
    let view = run(
        &state,
        who(request_id, caller),
        None,
        SessionCall::Begin(begin),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// A write session's state, counters and, once done, its write's receipt.
pub async fn get_session(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: crate::access::AuditedCaller,
    Path(SessionId { id }): Path<SessionId>,
) -> Result<Response, ApiError> {
    let view = run(&state, who(request_id, caller), Some(id), SessionCall::Get).await?;
    Ok(Json(view).into_response())
}

/// Append a raw chunk of content (any content type); a chunk ending with a `DONE` line finishes.
pub async fn append_content(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: crate::access::AuditedCaller,
    Path(SessionId { id }): Path<SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let view = run(
        &state,
        who(request_id, caller),
        Some(id),
        SessionCall::Append(body.to_vec()),
    )
    .await?;
    Ok(Json(view).into_response())
}

/// Finish a write session: check the content and write the file.
pub async fn finish_session(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: crate::access::AuditedCaller,
    Path(SessionId { id }): Path<SessionId>,
) -> Result<Response, ApiError> {
    let view = run(
        &state,
        who(request_id, caller),
        Some(id),
        SessionCall::Finish,
    )
    .await?;
    Ok(Json(view).into_response())
}

/// Correct the invalid UTF-8 sequences a finalisation found, then finish again.
pub async fn correct_session(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: crate::access::AuditedCaller,
    Path(SessionId { id }): Path<SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let Json(Corrections { corrections }) =
        Json::<Corrections>::from_bytes(&body).map_err(|e| json_error(&e))?;
    let view = run(
        &state,
        who(request_id, caller),
        Some(id),
        SessionCall::Correct(corrections),
    )
    .await?;
    Ok(Json(view).into_response())
}
