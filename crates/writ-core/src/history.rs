//! History a caller can act on: undo a request, restore the content an operation wrote.
//!
//! Both read the audit log (the operations of a request, the contents kept with them) and write
//! through the recorded write machinery ([`crate::files`]), so an undo or a restore is itself a
//! request with operations, and can be undone in turn (redo).
//!
//! A file's state *before* a request is what its first operation of the request found: absent
//! for `created`, the kept content of `previous_sha256` for `updated` (kept by hash when the
//! update was made), the kept content of the operation for `deleted`. Its state *after* is what
//! the last one left: absent for `deleted`, else the operation's `sha256`. An undo puts each file
//! back to its *before*, and refuses a file whose current content is neither its *after* nor its
//! *before* (someone changed it since) unless forced.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::audit::{
    AuditStore, AuditWrite, FileKind, NewRequest, Operation, OperationFilter, OperationKind,
    OperationStatus, RequestStatus, Selection,
};
use crate::content::sha256_hex;
use crate::files::{
    GroupedWrite, Provenance, WriteError, WriteMode, WriteSpec, recorded_delete, recorded_write,
    write_group_deferring_completion,
};
use crate::path::RepoPath;
use crate::store::StoreError;
use crate::workspace::Workspace;

/// Who asks to undo or restore, and through which surface (as recorded on the new request).
#[derive(Debug, Clone)]
pub struct HistoryCaller {
    /// The id of the new request the undo or restore is recorded as.
    pub request_id: Uuid,
    pub caller: Option<String>,
    pub scope: Option<crate::keys::Scope>,
    pub route: String,
}

impl HistoryCaller {
    /// The undo's or restore's own request, recorded before anything is written.
    async fn record(&self, store: &dyn AuditStore, workspace: &str) -> Result<(), HistoryError> {
        store
            .insert_request(&NewRequest::opened(
                self.request_id,
                self.route.clone(),
                self.caller.clone(),
                self.scope,
                workspace,
            ))
            .await
            .map_err(HistoryError::Audit)
    }
}

/// `POST /requests/{id}/undo` and the `undo` tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoOptions {
    /// Undo even files changed since the request; the answer lists the later changes replaced.
    #[serde(default)]
    pub force: bool,
    /// Answer what the undo would change; write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Commit what the undo wrote (a revert commit), where the workspace is a git repository;
    /// absent: as the workspace is set.
    #[serde(default)]
    pub commit: Option<bool>,
}

/// What an undo does to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UndoAction {
    /// Written back to the bytes it held before the request.
    Restore,
    /// Created by the request: removed.
    Remove,
    /// Deleted (or moved away) by the request: written again.
    Recreate,
}

/// One file of an undo's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UndoneFile {
    pub path: String,
    pub action: UndoAction,
    /// What the file holds now (before the undo); absent when it does not exist.
    pub current_sha256: Option<String>,
    /// What it holds after the undo; absent when the undo removes it.
    pub sha256: Option<String>,
    /// The file was changed after the request, and `force` replaced that later change.
    pub replaced_later_change: bool,
    /// The operation that recorded this file's undo (absent in a dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<Uuid>,
}

/// The answer of an undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UndoResponse {
    /// The request this undo is recorded as (undo it to redo); in a dry run, nothing is recorded.
    pub request_id: Uuid,
    /// The request undone.
    pub undone_request_id: Uuid,
    pub dry_run: bool,
    /// Every file the undo changes (or would). Empty when the request wrote nothing, or every
    /// file it wrote is already back as it was.
    pub files: Vec<UndoneFile>,
}

/// A file changed since the request, as a refused undo names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangedFile {
    pub path: String,
    /// What the request left (null: it removed the file).
    pub expected_sha256: Option<String>,
    /// What the file holds now (null: it does not exist).
    pub actual_sha256: Option<String>,
}

/// `POST /operations/{id}/restore` and the `restore` tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreOptions {
    /// Refuse unless the file's current content has this SHA-256 (`absent`: it must not exist).
    #[serde(default)]
    pub expected_sha256: Option<String>,
    /// Commit the restored file, where the workspace is a git repository; absent: as the
    /// workspace is set.
    #[serde(default)]
    pub commit: Option<bool>,
}

/// The answer of a restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RestoreResponse {
    /// The request this restore is recorded as (undo it to take the restore back).
    pub request_id: Uuid,
    /// The operation whose content was written back.
    pub restored_operation_id: Uuid,
    pub path: String,
    /// `created`, `updated` or `unchanged`.
    pub operation: OperationKind,
    pub operation_id: Uuid,
    pub sha256: String,
    pub previous_sha256: Option<String>,
    pub bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("no request {0} is recorded")]
    RequestNotFound(Uuid),
    #[error("no operation {0} is recorded")]
    OperationNotFound(Uuid),
    #[error("request {0} is still running; undo it once it has finished")]
    StillRunning(Uuid),
    #[error(
        "{} changed since the request; nothing was undone (pass force to replace the later changes)",
        names(.0.iter().map(|c| c.path.as_str()))
    )]
    Changed(Vec<ChangedFile>),
    #[error(
        "the content needed for {} is no longer kept (history retention); nothing was changed",
        names(.0.iter().map(String::as_str))
    )]
    Expired(Vec<String>),
    #[error("operation {id} wrote no content to restore (it was {operation})")]
    NothingToRestore { id: Uuid, operation: OperationKind },
    #[error("the audit log cannot be read or written, so nothing was changed: {0}")]
    Audit(#[source] StoreError),
    #[error("{path}: {source}")]
    Write {
        path: String,
        #[source]
        source: WriteError,
    },
}

fn names<'a>(paths: impl Iterator<Item = &'a str>) -> String {
    paths
        .map(|p| format!("'{p}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A file's place in an undo: what the request found and left, and what it holds now.
struct Plan {
    path: RepoPath,
    /// The content before the request (`None`: the file did not exist).
    before: Option<Vec<u8>>,
    before_sha256: Option<String>,
    after_sha256: Option<String>,
    current_sha256: Option<String>,
}

/// Every succeeded operation of `request_id` that changed a file, oldest first.
async fn operations_of(
    store: &dyn AuditStore,
    request_id: Uuid,
) -> Result<Vec<Operation>, StoreError> {
    let filter = OperationFilter {
        request_id: Some(request_id),
        ..OperationFilter::default()
    };
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_operations(&filter, cursor.as_ref(), 500).await?;
        all.extend(page.operations);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    all.reverse();
    all.retain(|op| {
        op.status == OperationStatus::Succeeded
            && matches!(
                op.operation,
                OperationKind::Created | OperationKind::Updated | OperationKind::Deleted
            )
    });
    Ok(all)
}

/// Reads what the request's operations found and left for each file, and what each holds now.
async fn plan_undo(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
) -> Result<Vec<Plan>, HistoryError> {
    let ops = operations_of(store, request_id)
        .await
        .map_err(HistoryError::Audit)?;
    let mut by_path: BTreeMap<String, (Operation, Operation)> = BTreeMap::new();
    for op in ops {
        by_path
            .entry(op.filename.clone())
            .and_modify(|(_, last)| *last = op.clone())
            .or_insert_with(|| (op.clone(), op));
    }
    let mut plans = Vec::with_capacity(by_path.len());
    let mut expired = Vec::new();
    for (path, (first, last)) in by_path {
        let Ok(repo_path) = RepoPath::parse(&path) else {
            continue;
        };
        let after_sha256 = match last.operation {
            OperationKind::Deleted => None,
            _ => last.sha256.clone(),
        };
        let (before, before_sha256) = match first.operation {
            OperationKind::Created => (None, None),
            OperationKind::Updated => {
                let Some(sha) = first.previous_sha256.clone() else {
                    continue;
                };
                let kept = store
                    .kept_content(&sha)
                    .await
                    .map_err(HistoryError::Audit)?;
                if kept.is_none() {
                    expired.push(path.clone());
                }
                (kept, Some(sha))
            }
            _ => {
                let kept = store
                    .get_operation(first.id)
                    .await
                    .map_err(HistoryError::Audit)?
                    .and_then(|(_, content)| content);
                if kept.is_none() {
                    expired.push(path.clone());
                }
                (kept, first.previous_sha256.clone())
            }
        };
        let current_sha256 = workspace
            .read(&repo_path)
            .await
            .map_err(|e| HistoryError::Write {
                path: path.clone(),
                source: e.into(),
            })?
            .as_deref()
            .map(sha256_hex);
        plans.push(Plan {
            path: repo_path,
            before,
            before_sha256,
            after_sha256,
            current_sha256,
        });
    }
    if !expired.is_empty() {
        return Err(HistoryError::Expired(expired));
    }
    // A file already back as it was has nothing to undo.
    plans.retain(|p| p.current_sha256 != p.before_sha256);
    Ok(plans)
}

/// Puts every file `undone` wrote back as it was before it, as one new request (see the module
/// docs). Refused, with nothing changed, when a file changed since (unless `force`) or a content
/// it needs is no longer kept.
pub async fn undo(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    who: HistoryCaller,
    undone: Uuid,
    options: UndoOptions,
) -> Result<UndoResponse, HistoryError> {
    let started = Instant::now();
    let record = store
        .get_request(undone)
        .await
        .map_err(HistoryError::Audit)?
        .ok_or(HistoryError::RequestNotFound(undone))?;
    // Its files are another workspace's: undone there, never here under the same paths.
    if record.workspace != workspace.name() {
        return Err(HistoryError::RequestNotFound(undone));
    }
    if record.status == RequestStatus::Running {
        return Err(HistoryError::StillRunning(undone));
    }
    let plans = plan_undo(store, workspace, undone).await?;
    let changed: Vec<ChangedFile> = plans
        .iter()
        .filter(|p| p.current_sha256 != p.after_sha256)
        .map(|p| ChangedFile {
            path: p.path.to_string(),
            expected_sha256: p.after_sha256.clone(),
            actual_sha256: p.current_sha256.clone(),
        })
        .collect();
    if !changed.is_empty() && !options.force {
        return Err(HistoryError::Changed(changed));
    }
    let mut files: Vec<UndoneFile> = plans
        .iter()
        .map(|p| UndoneFile {
            path: p.path.to_string(),
            action: match (&p.before, &p.current_sha256) {
                (None, _) => UndoAction::Remove,
                (Some(_), None) => UndoAction::Recreate,
                (Some(_), Some(_)) => UndoAction::Restore,
            },
            current_sha256: p.current_sha256.clone(),
            sha256: p.before_sha256.clone(),
            replaced_later_change: p.current_sha256 != p.after_sha256,
            operation_id: None,
        })
        .collect();
    if options.dry_run || plans.is_empty() {
        return Ok(UndoResponse {
            request_id: who.request_id,
            undone_request_id: undone,
            dry_run: options.dry_run,
            files,
        });
    }

    who.record(store, workspace.name()).await?;
    let provenance = || Provenance {
        selection: Some(Selection::Direct),
        detail: Some(serde_json::json!({ "undo_of": undone })),
        ..Provenance::default()
    };
    // Each write is conditional on the content the plan saw, so a change made since the check
    // (by a writer that took the lock in between) refuses that file instead of being lost.
    let expected = |p: &Plan| {
        p.current_sha256
            .clone()
            .unwrap_or_else(|| "absent".to_string())
    };
    let writes: Vec<(usize, GroupedWrite)> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            p.before.as_ref().map(|content| {
                (
                    i,
                    GroupedWrite {
                        kind: FileKind::Direct,
                        spec: WriteSpec {
                            path: p.path.clone(),
                            content: content.clone(),
                            mode: WriteMode::Overwrite,
                            expected_sha256: Some(expected(p)),
                            create_dirs: true,
                        },
                        provenance: provenance(),
                    },
                )
            })
        })
        .collect();
    let (indices, group): (Vec<usize>, Vec<GroupedWrite>) = writes.into_iter().unzip();
    let outcomes = write_group_deferring_completion(store, workspace, who.request_id, group).await;
    let mut completions: Vec<AuditWrite> = Vec::new();
    let mut done: Vec<(usize, Option<Vec<u8>>, String)> = Vec::new();
    let mut failure: Option<HistoryError> = None;
    for (i, outcome) in indices.into_iter().zip(outcomes) {
        match outcome {
            Ok((receipt, completion)) => {
                completions.extend(completion);
                files[i].operation_id = Some(receipt.operation_id);
                done.push((i, receipt.previous, receipt.sha256));
            }
            Err(failed) => {
                failure.get_or_insert(HistoryError::Write {
                    path: plans[i].path.to_string(),
                    source: failed.error,
                });
            }
        }
    }
    if !completions.is_empty()
        && let Err(e) = store.commit(std::mem::take(&mut completions)).await
    {
        tracing::warn!(error = %e, "undo written but its records are still pending; reconciliation will settle them");
    }
    let mut removed: Vec<(usize, Vec<u8>)> = Vec::new();
    if failure.is_none() {
        for (i, p) in plans.iter().enumerate() {
            if p.before.is_some() {
                continue;
            }
            let Some(current) = &p.current_sha256 else {
                continue;
            };
            let content = workspace.read(&p.path).await.ok().flatten();
            match recorded_delete(
                store,
                workspace,
                who.request_id,
                FileKind::Direct,
                &p.path,
                current,
                provenance(),
            )
            .await
            {
                Ok(id) => {
                    files[i].operation_id = Some(id);
                    removed.extend(content.map(|c| (i, c)));
                }
                Err(e) => {
                    failure = Some(HistoryError::Write {
                        path: p.path.to_string(),
                        source: e,
                    });
                    break;
                }
            }
        }
    }
    let status = if let Some(err) = failure {
        // All or nothing: what was already put back goes back to what the request left.
        roll_back(store, workspace, who.request_id, &plans, done, removed).await;
        finish(store, who.request_id, RequestStatus::Error, started, None).await;
        return Err(err);
    } else {
        RequestStatus::Success
    };
    let answer = UndoResponse {
        request_id: who.request_id,
        undone_request_id: undone,
        dry_run: false,
        files,
    };
    finish(
        store,
        who.request_id,
        status,
        started,
        serde_json::to_value(&answer).ok(),
    )
    .await;
    Ok(answer)
}

/// Takes back the writes and removals an undo made before one of its files failed.
async fn roll_back(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    plans: &[Plan],
    written: Vec<(usize, Option<Vec<u8>>, String)>,
    removed: Vec<(usize, Vec<u8>)>,
) {
    let provenance = || Provenance {
        selection: Some(Selection::Rollback),
        ..Provenance::default()
    };
    for (i, previous, sha256) in written {
        let path = &plans[i].path;
        let result = match previous {
            Some(content) => recorded_write(
                store,
                workspace,
                request_id,
                FileKind::Direct,
                WriteSpec {
                    path: path.clone(),
                    content,
                    mode: WriteMode::Overwrite,
                    expected_sha256: Some(sha256),
                    create_dirs: false,
                },
                provenance(),
            )
            .await
            .map(|_| ()),
            None => recorded_delete(
                store,
                workspace,
                request_id,
                FileKind::Direct,
                path,
                &sha256,
                provenance(),
            )
            .await
            .map(|_| ()),
        };
        if let Err(e) = result {
            tracing::warn!(path = %path, error = %e, "could not take back part of a failed undo");
        }
    }
    for (i, content) in removed {
        let path = &plans[i].path;
        let result = recorded_write(
            store,
            workspace,
            request_id,
            FileKind::Direct,
            WriteSpec {
                path: path.clone(),
                content,
                mode: WriteMode::Create,
                expected_sha256: None,
                create_dirs: true,
            },
            provenance(),
        )
        .await;
        if let Err(e) = result {
            tracing::warn!(path = %path, error = %e, "could not take back part of a failed undo");
        }
    }
}

async fn finish(
    store: &dyn AuditStore,
    request_id: Uuid,
    status: RequestStatus,
    started: Instant,
    response: Option<serde_json::Value>,
) {
    let elapsed = started.elapsed().as_millis() as i64;
    if let Err(e) = store
        .finish_request(request_id, status, elapsed, response.as_ref())
        .await
    {
        tracing::warn!(error = %e, "could not close the request record of an undo or restore");
    }
}

/// Writes the content operation `id` wrote back to its path, as one new request.
pub async fn restore(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    who: HistoryCaller,
    id: Uuid,
    options: RestoreOptions,
) -> Result<RestoreResponse, HistoryError> {
    let started = Instant::now();
    let (op, content) = store
        .get_operation(id)
        .await
        .map_err(HistoryError::Audit)?
        .ok_or(HistoryError::OperationNotFound(id))?;
    if op.workspace != workspace.name() {
        return Err(HistoryError::OperationNotFound(id));
    }
    if op.status != OperationStatus::Succeeded
        || !matches!(
            op.operation,
            OperationKind::Created | OperationKind::Updated | OperationKind::Unchanged
        )
    {
        return Err(HistoryError::NothingToRestore {
            id,
            operation: op.operation,
        });
    }
    let content = content.ok_or_else(|| HistoryError::Expired(vec![op.filename.clone()]))?;
    let path = RepoPath::parse(&op.filename).map_err(|e| HistoryError::Write {
        path: op.filename.clone(),
        source: crate::workspace::WorkspaceError::from(e).into(),
    })?;
    who.record(store, workspace.name()).await?;
    let written = recorded_write(
        store,
        workspace,
        who.request_id,
        FileKind::Direct,
        WriteSpec {
            path,
            content,
            mode: WriteMode::Overwrite,
            expected_sha256: options.expected_sha256,
            create_dirs: true,
        },
        Provenance {
            selection: Some(Selection::Direct),
            detail: Some(serde_json::json!({ "restore_of": id })),
            ..Provenance::default()
        },
    )
    .await;
    match written {
        Ok(receipt) => {
            let answer = RestoreResponse {
                request_id: who.request_id,
                restored_operation_id: id,
                path: op.filename,
                operation: receipt.operation,
                operation_id: receipt.operation_id,
                sha256: receipt.sha256,
                previous_sha256: receipt.previous_sha256,
                bytes: receipt.bytes,
            };
            finish(
                store,
                who.request_id,
                RequestStatus::Success,
                started,
                serde_json::to_value(&answer).ok(),
            )
            .await;
            Ok(answer)
        }
        Err(source) => {
            finish(store, who.request_id, RequestStatus::Error, started, None).await;
            Err(HistoryError::Write {
                path: op.filename,
                source,
            })
        }
    }
}
