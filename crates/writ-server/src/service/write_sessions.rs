//! Write sessions, for the HTTP routes and the tools alike: one call at a time over
//! [`writ_core::sessions`], its refusals in the API's words.

use serde_json::json;
use writ_core::commits::RequestCommit;
use writ_core::sessions::{
    BeginSession, Correction, SessionCaller, SessionError, SessionView, Sessions,
};

use crate::error::{ApiError, ErrorCode, path_error, store_error, workspace_error, write_error};
use crate::state::AppState;

/// What a session call is about.
pub enum SessionCall {
    Begin(BeginSession),
    Get,
    Append(Vec<u8>),
    Finish,
    Correct(Vec<Correction>),
}

/// Runs one session call, for the HTTP routes and the tools alike.
pub async fn run(
    state: &AppState,
    who: SessionCaller,
    id: Option<String>,
    call: SessionCall,
) -> Result<SessionView, ApiError> {
    let sessions = Sessions {
        store: state.store.as_ref(),
        workspace: state.workspace.as_ref(),
        settings: &state.settings.sessions,
        review: &state.settings.review,
    };
    let id = id.unwrap_or_default();
    if state.settings.respect_claims {
        refuse_claimed(state, &sessions, &who, &id, &call).await?;
    }
    let mut view = match call {
        SessionCall::Begin(begin) => sessions.begin(&who, begin).await,
        SessionCall::Get => sessions.get(&who, &id).await,
        SessionCall::Append(chunk) => sessions.append(&who, &id, &chunk).await,
        SessionCall::Finish => sessions.finish(&who, &id).await,
        SessionCall::Correct(corrections) => sessions.correct(&who, &id, &corrections).await,
    }
    .map_err(session_error)?;
    // The call that wrote the file (a `DONE` chunk, a finish, the last correction) commits it;
    // a later call answering the receipt again does not.
    if let Some(receipt) = &view.receipt
        && receipt.request_id == who.request_id
    {
        let subject = match view.intent.as_deref().map(str::trim) {
            Some(intent) if !intent.is_empty() => intent.to_string(),
            _ => format!("Write {}", receipt.path),
        };
        super::git::commit_request(
            state,
            view.commit,
            RequestCommit {
                request_id: receipt.request_id,
                caller: who.caller.clone(),
                subject,
                body: format!("Written through write session {}.", view.id),
                trailers: Vec::new(),
                files: super::git::file(&receipt.path, Some(receipt.sha256.clone()), "direct")
                    .into_iter()
                    .collect(),
            },
        )
        .await;
        let path = receipt.path.clone();
        view.overlaps =
            crate::service::workspaces::overlaps_written(state, &[path], who.caller.as_deref())
                .await;
    }
    Ok(view)
}

/// Refuses a session call that may write, when another workspace of the repository has claimed
/// the session's file: when it begins (naming `target_file`) and at every later call but a read
/// (content, finish, corrections), since each may write it. A call on a session that cannot be
/// read goes on to be refused as it would be anyway.
async fn refuse_claimed(
    state: &AppState,
    sessions: &Sessions<'_>,
    who: &SessionCaller,
    id: &str,
    call: &SessionCall,
) -> Result<(), ApiError> {
    let (path, field) = match call {
        SessionCall::Get => return Ok(()),
        SessionCall::Begin(begin) => (begin.target_file.clone(), "target_file"),
        SessionCall::Append(_) | SessionCall::Finish | SessionCall::Correct(_) => {
            match sessions.get(who, id).await {
                Ok(view) => (view.target_file, "id"),
                Err(_) => return Ok(()),
            }
        }
    };
    // An invalid path is refused by the session itself, naming why.
    let Ok(path) = writ_core::RepoPath::parse_nonempty(&path) else {
        return Ok(());
    };
    crate::service::workspaces::refuse_claimed(
        &state.workspaces,
        state.workspace.name(),
        &[(path.as_str(), field)],
        who.caller.as_deref(),
    )
    .await
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
