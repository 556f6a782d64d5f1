//! Abandoned sessions: expired after the TTL, lazily when touched and in the periodic sweep, each
//! expiry recorded in the audit log; a finalisation the process did not live to finish is failed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    SessionSettings, SessionState, SessionTransition, Sessions, WriteSession, finalising_route,
};
use crate::audit::{AuditStore, AuditWrite, FileKind, NewRequest, RequestStatus};
use crate::store::StoreError;

impl Sessions<'_> {
    /// Expires `session` if it was abandoned, or fails it if its finalisation was interrupted
    /// (the process stopped between claiming it and recording the write); returns it as it now is.
    pub(super) async fn expire_if_abandoned(
        &self,
        session: WriteSession,
    ) -> Result<WriteSession, StoreError> {
        let now = Utc::now();
        if session.updated_at >= self.expiry_cutoff(now) {
            return Ok(session);
        }
        if session.state.is_open() {
            expire(self.store, &session, self.settings.ttl).await?;
        } else if session.state == SessionState::Finalizing {
            let message = format!(
                "the finalisation of this session was interrupted (the server stopped); whether the file was written is in the audit log, under route {}",
                finalising_route(session.id)
            );
            self.store
                .transition_write_session(
                    session.id,
                    &SessionTransition {
                        at: now,
                        error: Some(&message),
                        ..SessionTransition::new(&[SessionState::Finalizing], SessionState::Failed)
                    },
                )
                .await?;
        } else {
            return Ok(session);
        }
        Ok(self
            .store
            .get_write_session(session.id)
            .await?
            .unwrap_or(session))
    }

    pub(super) fn expiry_cutoff(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now - chrono::Duration::from_std(self.settings.ttl).unwrap_or(chrono::Duration::MAX)
    }

    pub(super) fn effective_state(
        &self,
        session: &WriteSession,
        now: DateTime<Utc>,
    ) -> SessionState {
        let idle = chrono::Duration::from_std(self.settings.idle).unwrap_or(chrono::Duration::MAX);
        if session.state == SessionState::AwaitingContent && now - session.updated_at >= idle {
            SessionState::AwaitingDoneOrMoreContent
        } else {
            session.state
        }
    }
}

/// Expires one abandoned session and records it in the audit log: a request and a failed
/// operation on the target, so the log shows content that was begun and never written. The
/// records are written in the expiry's own transaction, so only the caller that moves the session
/// records it (replicas may sweep at once), and a crash never leaves one without the other.
async fn expire(
    store: &dyn AuditStore,
    session: &WriteSession,
    ttl: Duration,
) -> Result<bool, StoreError> {
    let now = Utc::now();
    let message = format!(
        "write session {} expired after {} s without activity ({} bytes in {} chunks received); nothing was written",
        session.id,
        ttl.as_secs(),
        session.bytes_received,
        session.chunks
    );
    let request_id = Uuid::now_v7();
    let operation = crate::files::failed_operation(
        request_id,
        FileKind::Direct,
        &session.target_file,
        &message,
        crate::files::Provenance {
            detail: Some(serde_json::json!({"write_session": {
                "id": session.id,
                "state": SessionState::Expired,
                "operation": session.operation,
                "bytes_received": session.bytes_received,
                "chunks": session.chunks,
                "created_at": session.created_at,
                "updated_at": session.updated_at,
            }})),
            ..crate::files::Provenance::default()
        },
    );
    let records = [
        AuditWrite::InsertRequest(NewRequest {
            received_at: now,
            // Nobody's key did this (no scope): writ expired the session.
            ..NewRequest::opened(
                request_id,
                "write session expiry",
                session.caller.clone(),
                None,
                session.workspace.clone(),
            )
        }),
        AuditWrite::InsertOperation {
            operation,
            content: None,
        },
        AuditWrite::FinishRequest {
            id: request_id,
            status: RequestStatus::Error,
            duration_ms: 0,
            response: None,
        },
    ];
    store
        .transition_write_session(
            session.id,
            &SessionTransition {
                at: now,
                error: Some(&message),
                drop_content: true,
                records: &records,
                ..SessionTransition::new(&SessionState::OPEN_STORED, SessionState::Expired)
            },
        )
        .await
}

/// Expires every session abandoned for longer than the TTL (the periodic sweep); returns how
/// many this call expired.
pub async fn expire_abandoned(
    store: &dyn AuditStore,
    settings: &SessionSettings,
) -> Result<usize, StoreError> {
    let before =
        Utc::now() - chrono::Duration::from_std(settings.ttl).unwrap_or(chrono::Duration::MAX);
    let mut expired = 0;
    for session in store.abandoned_write_sessions(before, 500).await? {
        if expire(store, &session, settings.ttl).await? {
            expired += 1;
        }
    }
    Ok(expired)
}
