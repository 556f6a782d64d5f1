//! What a session operation answers when it cannot do what was asked.

use super::{SessionState, WriteSession};
use crate::files::WriteError;
use crate::path::PathError;
use crate::store::StoreError;
use crate::workspace::WorkspaceError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no write session '{0}'")]
    NotFound(String),
    #[error("{0}")]
    Path(#[from] PathError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("'{path}' already exists (operation=create)")]
    AlreadyExists { path: String },
    /// The session is not in a state that takes this request.
    #[error("{message}")]
    Conflict {
        state: SessionState,
        message: String,
    },
    #[error("{message}")]
    TooLarge {
        field: &'static str,
        limit_name: &'static str,
        limit: usize,
        message: String,
    },
    #[error(
        "{open} write sessions are open for this caller, the limit is {limit} (WRITE_SESSION_MAX_OPEN); finish or abandon one first"
    )]
    TooManyOpen { open: u64, limit: u32 },
    #[error("{message}")]
    Invalid { field: String, message: String },
    /// The finalising write was refused; the session is `failed`.
    #[error(transparent)]
    Write(WriteError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub(super) fn not_taking_content(session: &WriteSession) -> SessionError {
    let message = match session.state {
        SessionState::Done => "the session is done; its file is written; begin a new session for more content".to_string(),
        SessionState::NeedsCorrections => "the session needs corrections, not content: send them to /write_sessions/{id}/corrections".to_string(),
        state => format!("the session is {state} and takes no more content"),
    };
    SessionError::Conflict {
        state: session.state,
        message,
    }
}

pub(super) fn not_finishable(session: &WriteSession) -> SessionError {
    let message = match session.state {
        SessionState::NeedsCorrections => {
            "the session needs corrections before it can be written".to_string()
        }
        SessionState::Finalizing => "the session is being finalised by another request".to_string(),
        SessionState::Failed => format!(
            "the session failed: {}",
            session.error.as_deref().unwrap_or("unknown error")
        ),
        state => format!("the session is {state} and cannot be finalised"),
    };
    SessionError::Conflict {
        state: session.state,
        message,
    }
}
