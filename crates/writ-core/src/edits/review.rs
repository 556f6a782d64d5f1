//! Edits proposed for review (`review`, `WRIT_REVIEW`): the edited files become a change set
//! instead of writes, recorded with the request in one commit.

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::one::Edited;
use super::{Editor, Edits, EditsError, EditsResponse, answered};
use crate::audit::{AuditStore, AuditWrite, FileKind, NewRequest, RequestStatus, Selection};
use crate::changes::{ProposedFile, Proposer, propose};
use crate::files::{Provenance, WriteError};
use crate::workspace::Workspace;

#[expect(
    clippy::too_many_arguments,
    reason = "a proposal answers as the edits would have, and records as their request would"
)]
pub(super) async fn propose_edits(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    editor: Editor,
    edits: &Edits,
    ttl: Duration,
    edited: Vec<Edited>,
    validated: Option<bool>,
    started: Instant,
) -> Result<EditsResponse, EditsError> {
    let files: Vec<ProposedFile> = edited
        .iter()
        .map(|e| ProposedFile {
            path: e.path.clone(),
            kind: FileKind::Direct,
            base: e.before.clone(),
            content: e.after.clone().unwrap_or_default(),
            provenance: Provenance {
                selection: Some(Selection::Direct),
                detail: serde_json::to_value(&e.change)
                    .ok()
                    .map(|change| serde_json::json!({ "change": change })),
                ..Provenance::default()
            },
        })
        .collect();
    let summary = format!(
        "Edit {}",
        edited
            .iter()
            .map(|e| e.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let made = propose(
        Proposer {
            change_id: Uuid::now_v7(),
            request_id: editor.request_id,
            route: editor.route.clone(),
            caller: editor.caller.clone(),
            workspace: workspace.name().to_owned(),
            summary: Some(summary),
            commit: edits.commit,
            ttl,
        },
        files,
    );
    let change_id = made.change.as_ref().map(|c| c.id);
    let status = match change_id {
        Some(_) => RequestStatus::AwaitingReview,
        None => RequestStatus::Success,
    };
    let mut answer = EditsResponse {
        request_id: editor.request_id,
        dry_run: false,
        files: Vec::new(),
        validated,
        duration_ms: 0,
        status: change_id.map(|_| status),
        change_id,
        overlaps: Vec::new(),
    };
    for (e, outcome) in edited.into_iter().zip(made.files) {
        let mut file = answered(e, outcome.operation, Some(outcome.operation_id), None);
        if let Some(f) = file.first_mut() {
            f.proposal = outcome.proposal;
        }
        answer.files.extend(file);
    }
    answer.duration_ms = started.elapsed().as_millis() as u64;
    let mut writes = vec![AuditWrite::InsertRequest(
        NewRequest::opened(
            editor.request_id,
            editor.route,
            editor.caller,
            editor.scope,
            workspace.name(),
        )
        .with_body(edits.body_sha256.clone()),
    )];
    writes.extend(made.writes);
    writes.push(AuditWrite::FinishRequest {
        id: answer.request_id,
        status,
        duration_ms: answer.duration_ms as i64,
        response: serde_json::to_value(&answer).ok(),
    });
    store
        .commit(writes)
        .await
        .map_err(|e| EditsError::Write(WriteError::AuditUnavailable(e)))?;
    Ok(answer)
}
