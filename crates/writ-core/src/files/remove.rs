//! Recorded removals: a file an atomic batch created taken away again ([`recorded_remove`]),
//! and a deletion as an operation of its own ([`recorded_delete`]) — each recorded before the
//! file is touched, under the path's lock, and only while the file holds what the caller expects.

use std::time::Instant;

use super::{Provenance, WriteError, workspace_refusal};
use crate::audit::{
    AuditStore, FileKind, Operation, OperationKind, OperationOutcome, OperationStatus, WriteStore,
};
use crate::content::sha256_hex;
use crate::path::RepoPath;
use crate::workspace::Workspace;
use chrono::Utc;
use uuid::Uuid;

/// What [`recorded_remove`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoveOutcome {
    Removed,
    /// The file no longer holds the expected content (`absent` if it is gone): left as it is.
    Changed {
        actual: String,
    },
}

/// Removes a file only if it still holds `expected_sha256`, under its path lock, recording the
/// removal first (with `note` as its message). Used to undo a file an atomic batch created.
#[expect(
    clippy::too_many_arguments,
    reason = "a recorded removal needs its record's fields as well as the file's"
)]
pub async fn recorded_remove(
    store: &dyn WriteStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    kind: FileKind,
    path: &RepoPath,
    expected_sha256: &str,
    note: &str,
    provenance: Provenance,
) -> Result<RemoveOutcome, WriteError> {
    let started = Instant::now();
    let lock = workspace.lock(path).await;
    let actual = workspace
        .read(path)
        .await?
        .map(|b| sha256_hex(&b))
        .unwrap_or_else(|| "absent".to_string());
    if !actual.eq_ignore_ascii_case(expected_sha256) {
        return Ok(RemoveOutcome::Changed { actual });
    }
    let op = Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: Utc::now(),
        finished_at: None,
        filename: path.as_str().to_string(),
        kind,
        operation: OperationKind::Failed,
        status: OperationStatus::Pending,
        chosen_model: provenance.chosen_model,
        selection: provenance.selection,
        arbiter_reason: provenance.arbiter_reason,
        candidates: provenance.candidates,
        previous_sha256: Some(actual),
        sha256: None,
        bytes: None,
        error: Some(note.to_string()),
        duration_ms: None,
        detail: provenance.detail,
        workspace: workspace.name().to_owned(),
    };
    store
        .insert_operation(&op, None)
        .await
        .map_err(WriteError::AuditUnavailable)?;
    let removed = if lock.still_held().await {
        workspace.remove(path).await.map_err(WriteError::from)
    } else {
        Err(WriteError::LockLost {
            path: path.to_string(),
        })
    };
    let outcome = OperationOutcome {
        status: OperationStatus::Failed,
        operation: OperationKind::Failed,
        error: Some(match &removed {
            Ok(()) => note.to_string(),
            Err(e) => format!("{note}; but the removal failed: {e}"),
        }),
        finished_at: Utc::now(),
        duration_ms: Some(started.elapsed().as_millis() as i64),
    };
    if let Err(e) = store.complete_operation(op.id, &outcome).await {
        tracing::warn!(operation_id = %op.id, error = %e, "could not complete the record of a removal");
    }
    removed?;
    Ok(RemoveOutcome::Removed)
}

/// Deletes a file as an operation of its own (`deleted`), only if it holds `expected_sha256`:
/// recorded `pending` with the content it holds (kept, so that the deletion can be taken back),
/// removed under its path lock, then `succeeded`. A file that changed is refused and nothing is
/// recorded. Returns the operation's id.
pub async fn recorded_delete(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    kind: FileKind,
    path: &RepoPath,
    expected_sha256: &str,
    provenance: Provenance,
) -> Result<Uuid, WriteError> {
    let started = Instant::now();
    let lock = workspace.lock(path).await;
    let current = workspace.read(path).await?;
    let actual = current
        .as_deref()
        .map(sha256_hex)
        .unwrap_or_else(|| "absent".to_string());
    let content = match current {
        Some(c) if actual.eq_ignore_ascii_case(expected_sha256) => c,
        _ => {
            return Err(WriteError::PreconditionFailed {
                path: path.to_string(),
                expected: expected_sha256.to_string(),
                actual,
            });
        }
    };
    let op = Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: Utc::now(),
        finished_at: None,
        filename: path.as_str().to_string(),
        kind,
        operation: OperationKind::Deleted,
        status: OperationStatus::Pending,
        chosen_model: provenance.chosen_model,
        selection: provenance.selection,
        arbiter_reason: provenance.arbiter_reason,
        candidates: provenance.candidates,
        previous_sha256: Some(actual),
        sha256: None,
        bytes: Some(content.len() as i64),
        error: None,
        duration_ms: None,
        detail: provenance.detail,
        workspace: workspace.name().to_owned(),
    };
    store
        .insert_operation(&op, Some(&content))
        .await
        .map_err(WriteError::AuditUnavailable)?;
    let removed = if !lock.still_held().await {
        Err(WriteError::LockLost {
            path: path.to_string(),
        })
    } else if let Some(refusal) = workspace_refusal(store, workspace).await {
        refusal.error()
    } else {
        workspace.remove(path).await.map_err(WriteError::from)
    };
    let outcome = match &removed {
        Ok(()) => OperationOutcome {
            status: OperationStatus::Succeeded,
            operation: OperationKind::Deleted,
            error: None,
            finished_at: Utc::now(),
            duration_ms: Some(started.elapsed().as_millis() as i64),
        },
        Err(e) => OperationOutcome {
            status: OperationStatus::Failed,
            operation: OperationKind::Failed,
            error: Some(format!("the removal failed: {e}")),
            finished_at: Utc::now(),
            duration_ms: Some(started.elapsed().as_millis() as i64),
        },
    };
    if let Err(e) = store.complete_operation(op.id, &outcome).await {
        tracing::warn!(operation_id = %op.id, error = %e, "could not complete the record of a deletion; reconciliation will settle it");
    }
    removed.map(|()| op.id)
}
