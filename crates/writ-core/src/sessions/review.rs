//! A session's content proposed for review (`review`, `WRIT_REVIEW`): checked against its
//! target as a write would be (the target, `create`, an append's whole file), then made a change
//! set instead of written, recorded with its request in one commit.

use std::time::Duration;

use uuid::Uuid;

use super::{SessionCaller, SessionReceipt, WriteSession, finalising_route};
use crate::audit::{AuditStore, AuditWrite, FileKind, NewRequest, RequestStatus, Selection};
use crate::changes::{ProposedFile, Proposer, propose};
use crate::content::sha256_hex;
use crate::files::{Provenance, WriteError, WriteMode};
use crate::path::RepoPath;
use crate::workspace::Workspace;

pub(super) async fn propose_content(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    who: &SessionCaller,
    session: &WriteSession,
    path: RepoPath,
    content: Vec<u8>,
    ttl: Duration,
) -> Result<SessionReceipt, WriteError> {
    workspace.check_target(&path, session.create_dirs).await?;
    let base = workspace.read(&path).await?;
    let content = match (session.operation, &base) {
        (WriteMode::Create, Some(_)) => {
            return Err(WriteError::AlreadyExists {
                path: path.to_string(),
            });
        }
        (WriteMode::Append, Some(before)) => [before.as_slice(), content.as_slice()].concat(),
        _ => content,
    };
    if let Some(limit) = workspace.max_file_bytes()
        && content.len() > limit
    {
        return Err(WriteError::TooLarge {
            path: path.to_string(),
            bytes: content.len(),
            limit,
        });
    }
    let route = finalising_route(session.id);
    let summary = match session.intent.as_deref().map(str::trim) {
        Some(intent) if !intent.is_empty() => intent.chars().take(200).collect(),
        _ => format!("Write {path}"),
    };
    let body_sha256 = sha256_hex(&content);
    let made = propose(
        Proposer {
            change_id: Uuid::now_v7(),
            request_id: who.request_id,
            route: route.clone(),
            caller: who.caller.clone(),
            workspace: workspace.name().to_owned(),
            summary: Some(summary),
            commit: session.commit,
            ttl,
        },
        vec![ProposedFile {
            path: path.clone(),
            kind: FileKind::Direct,
            base,
            content,
            provenance: Provenance {
                selection: Some(Selection::Direct),
                ..Provenance::default()
            },
        }],
    );
    let change_id = made.change.as_ref().map(|c| c.id);
    let Some(outcome) = made.files.first().cloned() else {
        return Err(WriteError::AuditUnavailable(
            crate::store::StoreError::Other("a proposal without its file".into()),
        ));
    };
    let receipt = SessionReceipt {
        path: path.to_string(),
        operation: outcome.operation,
        sha256: outcome.sha256,
        bytes: outcome.bytes,
        operation_id: outcome.operation_id,
        request_id: who.request_id,
        replaced_invalid: 0,
        change_id,
    };
    let mut writes = vec![AuditWrite::InsertRequest(
        NewRequest::opened(
            who.request_id,
            route,
            who.caller.clone(),
            who.scope,
            workspace.name(),
        )
        .with_body(body_sha256),
    )];
    writes.extend(made.writes);
    writes.push(AuditWrite::FinishRequest {
        id: who.request_id,
        status: match change_id {
            Some(_) => RequestStatus::AwaitingReview,
            None => RequestStatus::Success,
        },
        duration_ms: 0,
        response: serde_json::to_value(&receipt).ok(),
    });
    store
        .commit(writes)
        .await
        .map_err(WriteError::AuditUnavailable)?;
    Ok(receipt)
}
