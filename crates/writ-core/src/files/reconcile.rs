//! Crash reconciliation: operations a crash left `pending` are settled against the disk (at
//! start-up, periodically, and by a replica resuming a dead replica's batch).

use chrono::Utc;

use crate::audit::{
    AuditStore, Operation, OperationKind, OperationOutcome, OperationStatus, WriteStore,
};
use crate::content::sha256_hex;
use crate::path::RepoPath;
use crate::store::StoreError;
use crate::workspace::Workspace;
use crate::workspace_registry::WorkspaceOpener;

/// What reconciliation decided for each pending operation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub confirmed: usize,
    pub failed: usize,
    /// Left pending: their workspace no longer exists.
    pub orphaned: usize,
}

/// Settles operations left `pending` by a crash: if the file on disk has the recorded hash the
/// write happened (`succeeded`), otherwise it did not (`failed`, "interrupted").
///
/// Each operation is settled in its own workspace (the file it names is that workspace's). One
/// whose workspace was deleted is left pending: its files are kept, but writ no longer knows
/// where. Only operations older than `min_age` are touched, so that a replica does not settle a
/// write another replica is making right now; at start-up a single replica may pass zero.
pub async fn reconcile_pending(
    store: &dyn AuditStore,
    workspaces: &dyn WorkspaceOpener,
    min_age: std::time::Duration,
) -> Result<ReconcileReport, StoreError> {
    let mut report = ReconcileReport::default();
    let cutoff =
        Utc::now() - chrono::Duration::from_std(min_age).unwrap_or(chrono::Duration::zero());
    for op in store.pending_operations().await? {
        if op.created_at > cutoff {
            continue;
        }
        let Some(workspace) = workspaces.open_workspace(&op.workspace).await? else {
            report.orphaned += 1;
            continue;
        };
        match settle_pending(store, workspace.as_ref(), &op).await? {
            Some(OperationStatus::Succeeded) => report.confirmed += 1,
            Some(_) => report.failed += 1,
            None => {}
        }
    }
    Ok(report)
}

/// Settles one `pending` operation against the disk, under its path's lock: `succeeded` if the
/// file holds the recorded content (a deletion: if the file is gone), else `failed`
/// ("interrupted"). `None` when it was no longer
/// pending (its write finished meanwhile). A replica resuming a dead replica's batch settles the
/// batch's pending operations this way before deciding which files are still to write.
pub async fn settle_pending(
    store: &dyn WriteStore,
    workspace: &dyn Workspace,
    op: &Operation,
) -> Result<Option<OperationStatus>, StoreError> {
    let on_disk = match RepoPath::parse(&op.filename) {
        Ok(path) => {
            let lock = workspace.lock(&path).await;
            // The write may have finished while we waited for its lock: look again.
            match store.get_operation(op.id).await? {
                Some((now, _)) if now.status == OperationStatus::Pending => {}
                _ => return Ok(None),
            }
            let read = workspace.read(&path).await;
            drop(lock);
            // `None`: unreadable; `Some(None)`: absent.
            read.ok().map(|b| b.map(|b| sha256_hex(&b)))
        }
        Err(_) => None,
    };
    let landed = match (op.operation, on_disk) {
        (OperationKind::Deleted, Some(None)) => true,
        (OperationKind::Deleted, _) => false,
        (_, Some(hash)) => hash.is_some() && hash == op.sha256,
        (_, None) => false,
    };
    let outcome = if landed {
        OperationOutcome {
            status: OperationStatus::Succeeded,
            operation: op.operation,
            error: None,
            finished_at: Utc::now(),
            duration_ms: op.duration_ms,
        }
    } else {
        OperationOutcome {
            status: OperationStatus::Failed,
            operation: OperationKind::Failed,
            error: Some(
                "interrupted before the write completed; the file on disk was left as it was"
                    .to_string(),
            ),
            finished_at: Utc::now(),
            duration_ms: op.duration_ms,
        }
    };
    let status = outcome.status;
    store.complete_operation(op.id, &outcome).await?;
    Ok(Some(status))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::audit::{AuditLog, FileKind, Operation};
    use crate::synthesis::doubles::{MemoryStore, MemoryWorkspace};
    use uuid::Uuid;

    fn pending_deletion(path: &str) -> Operation {
        Operation {
            id: Uuid::now_v7(),
            request_id: Uuid::now_v7(),
            created_at: Utc::now(),
            finished_at: None,
            filename: path.to_string(),
            kind: FileKind::Direct,
            operation: OperationKind::Deleted,
            status: OperationStatus::Pending,
            chosen_model: None,
            selection: None,
            arbiter_reason: None,
            candidates: Vec::new(),
            previous_sha256: Some(sha256_hex(b"x = 1\n")),
            sha256: None,
            bytes: Some(6),
            error: None,
            duration_ms: None,
            detail: None,
            workspace: "default".to_string(),
        }
    }

    /// Two workspaces by name, as the server's registry answers them.
    struct Two(std::sync::Arc<dyn Workspace>, std::sync::Arc<dyn Workspace>);

    #[async_trait::async_trait]
    impl WorkspaceOpener for Two {
        async fn open_workspace(
            &self,
            name: &str,
        ) -> Result<Option<std::sync::Arc<dyn Workspace>>, StoreError> {
            Ok(match name {
                "default" => Some(self.0.clone()),
                "b" => Some(self.1.clone()),
                _ => None,
            })
        }
    }

    #[tokio::test]
    async fn a_pending_write_is_settled_against_its_own_workspace_and_one_of_a_deleted_workspace_is_left()
     {
        let store = MemoryStore::default();
        let default = std::sync::Arc::new(MemoryWorkspace::default());
        let b = std::sync::Arc::new(MemoryWorkspace::default().with_file("a.py", "x = 1\n"));
        let mut written_in_b = pending_deletion("a.py");
        written_in_b.operation = OperationKind::Created;
        written_in_b.sha256 = Some(sha256_hex(b"x = 1\n"));
        written_in_b.workspace = "b".to_string();
        let mut in_deleted = written_in_b.clone();
        in_deleted.id = Uuid::now_v7();
        in_deleted.workspace = "gone".to_string();
        for op in [&written_in_b, &in_deleted] {
            store.insert_operation(op, Some(b"x = 1\n")).await.unwrap();
        }
        let report = reconcile_pending(&store, &Two(default, b), std::time::Duration::ZERO)
            .await
            .unwrap();
        // `default` has no a.py: checked there, the write in `b` would have read as lost.
        assert_eq!(
            report,
            ReconcileReport {
                confirmed: 1,
                failed: 0,
                orphaned: 1
            }
        );
    }

    #[tokio::test]
    async fn a_pending_deletion_succeeded_if_the_file_is_gone_and_failed_if_it_is_still_there() {
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default().with_file("kept.py", "x = 1\n");
        let gone = pending_deletion("gone.py");
        let kept = pending_deletion("kept.py");
        for op in [&gone, &kept] {
            store.insert_operation(op, Some(b"x = 1\n")).await.unwrap();
        }
        assert_eq!(
            settle_pending(&store, &workspace, &gone).await.unwrap(),
            Some(OperationStatus::Succeeded)
        );
        assert_eq!(
            settle_pending(&store, &workspace, &kept).await.unwrap(),
            Some(OperationStatus::Failed)
        );
        let ops = store.operations.lock().unwrap().clone();
        assert_eq!(ops[0].operation, OperationKind::Deleted);
        assert_eq!(ops[1].operation, OperationKind::Failed);
        assert_eq!(workspace.content("kept.py").as_deref(), Some("x = 1\n"));
    }
}
