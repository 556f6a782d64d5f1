//! Write sessions over HTTP: begin with the target, send the content as raw chunks (never JSON),
//! finish with a `DONE` line or explicitly. The rules live in [`writ_core::sessions`]; this file
//! only translates requests and errors, and runs each call that may write in its own task so a
//! client hanging up never cancels a write between its audit record and the file.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;
use writ_core::sessions::{
    BeginSession, Correction, SessionCaller, SessionError, SessionView, Sessions,
};

use crate::error::{ApiError, ErrorCode, path_error, store_error, workspace_error, write_error};
use crate::extract::{body_error, json_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// The body of `POST /write_sessions/{id}/corrections`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Corrections {
    /// One entry per invalid sequence to fix, by the byte offset the session listed.
    pub corrections: Vec<Correction>,
}

/// What a session call is about.
pub enum SessionCall {
    Begin(BeginSession),
    Get,
    Append(Vec<u8>),
    Finish,
    Correct(Vec<Correction>),
}

/// Runs one session call, for the HTTP routes and the tools alike, in its own task.
pub async fn run(
    state: &AppState,
    who: SessionCaller,
    id: Option<String>,
    call: SessionCall,
) -> Result<SessionView, ApiError> {
    let state = state.clone();
    let task = tokio::spawn(async move {
        let sessions = Sessions {
            store: state.store.as_ref(),
            workspace: state.workspace.as_ref(),
            settings: &state.settings.sessions,
        };
        let id = id.unwrap_or_default();
        match call {
            SessionCall::Begin(begin) => sessions.begin(&who, begin).await,
            SessionCall::Get => sessions.get(&who, &id).await,
            SessionCall::Append(chunk) => sessions.append(&who, &id, &chunk).await,
            SessionCall::Finish => sessions.finish(&who, &id).await,
            SessionCall::Correct(corrections) => sessions.correct(&who, &id, &corrections).await,
        }
    });
    task.await
        .map_err(ApiError::internal)?
        .map_err(session_error)
}

fn who(request_id: Uuid, audited: crate::auth::AuditedCaller) -> SessionCaller {
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
    caller: crate::auth::AuditedCaller,
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
    caller: crate::auth::AuditedCaller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = run(&state, who(request_id, caller), Some(id), SessionCall::Get).await?;
    Ok(Json(view).into_response())
}

/// Append a raw chunk of content (any content type); a chunk ending with a `DONE` line finishes.
pub async fn append_content(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: crate::auth::AuditedCaller,
    Path(id): Path<String>,
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
    caller: crate::auth::AuditedCaller,
    Path(id): Path<String>,
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
    caller: crate::auth::AuditedCaller,
    Path(id): Path<String>,
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

/// The API's words for a session's refusals.
pub fn session_error(err: SessionError) -> ApiError {
    let message = err.to_string();
    match err {
        SessionError::NotFound(_) => ApiError::not_found(message).with_field("id"),
        SessionError::Path(p) => path_error(&p, "target_file"),
        SessionError::Workspace(w) => workspace_error(w, "target_file"),
        SessionError::AlreadyExists { .. } => {
            ApiError::new(ErrorCode::AlreadyExists, message).with_field("operation")
        }
        SessionError::Conflict { state, .. } => {
            ApiError::new(ErrorCode::SessionState, message).with_details(json!({ "state": state }))
        }
        SessionError::TooLarge {
            field,
            limit_name,
            limit,
            ..
        } => ApiError::new(ErrorCode::TooLarge, message)
            .with_field(field)
            .with_details(json!({ "limit": limit, "limit_name": limit_name })),
        SessionError::TooManyOpen { limit, .. } => {
            ApiError::new(ErrorCode::TooManyWriteSessions, message)
                .with_details(json!({ "limit": limit, "limit_name": "WRITE_SESSION_MAX_OPEN" }))
        }
        SessionError::Invalid { field, .. } => {
            ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
        }
        SessionError::Write(w) => write_error(w, "target_file"),
        SessionError::Store(s) => store_error(s),
    }
}
