//! Recorded writes: the one way writ changes a file.
//!
//! Order of events, so that no file is ever written without its audit record:
//! 1. take the path's lock, check the target (sandbox, directory, parent) and read its current
//!    content, check `create`/`If-Match` and the size the file will have against the
//!    workspace's bound — nothing touched yet;
//! 2. record the operation as `pending`, with the new content, while the content is staged (a
//!    synced temp file no reader sees) — if the store fails, the staged write is dropped and
//!    nothing changed (503);
//! 3. publish the staged write (rename into place, directory synced), once the path's lock is
//!    known to be still held — where replicas share `REPO_DIR`, a lock whose database session
//!    dropped no longer excludes them, and the write is then failed instead;
//! 4. mark the operation `succeeded` (or `failed`). If this last update fails the file is
//!    written and its pending record holds its hash and content: [`reconcile_pending`] settles it.
//!
//! A batch defers step 4 of its successful writes ([`write_deferring_completion`]) to its
//! closing commit, so the completions, the request's closing and its stored answer cost one
//! commit instead of one each; the durable `pending` record still precedes every file write.

use std::time::Instant;

use chrono::Utc;
use uuid::Uuid;

use crate::audit::{
    AuditStore, AuditWrite, CandidateRecord, FileKind, Operation, OperationKind, OperationOutcome,
    OperationStatus, Selection, WriteStore,
};
use crate::content::sha256_hex;
use crate::path::RepoPath;
use crate::store::StoreError;
use crate::workspace::{PathLock, ToStage, Workspace, WorkspaceError};

mod reconcile;
mod remove;

pub use reconcile::{ReconcileReport, reconcile_pending, settle_pending};
pub use remove::{RemoveOutcome, recorded_delete, recorded_remove};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Fails if the file exists.
    Create,
    /// Creates or replaces.
    #[default]
    Overwrite,
    /// Appends to the existing content (creates the file if absent).
    Append,
}

/// What the caller wants written.
#[derive(Debug, Clone)]
pub struct WriteSpec {
    pub path: RepoPath,
    pub content: Vec<u8>,
    pub mode: WriteMode,
    /// Refuse unless the current content has this SHA-256 (hex).
    pub expected_sha256: Option<String>,
    pub create_dirs: bool,
}

/// Provenance recorded with the operation (which models, how the winner was chosen).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Provenance {
    pub chosen_model: Option<String>,
    pub selection: Option<Selection>,
    pub arbiter_reason: Option<String>,
    pub candidates: Vec<CandidateRecord>,
    /// Recorded as the operation's `detail`.
    pub detail: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WriteReceipt {
    pub operation_id: Uuid,
    pub operation: OperationKind,
    pub bytes: usize,
    pub sha256: String,
    pub previous_sha256: Option<String>,
    /// The content the file held before, read under the path lock (`None`: it did not exist).
    pub previous: Option<Vec<u8>>,
    /// The full content now in the file (after an append, the whole file).
    pub content: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("'{path}' already exists (mode=create)")]
    AlreadyExists { path: String },
    #[error("'{path}' changed: expected sha256 {expected}, found {actual}")]
    PreconditionFailed {
        path: String,
        expected: String,
        actual: String,
    },
    #[error(
        "'{path}' would be {bytes} bytes, above the limit of {limit} bytes; nothing was written"
    )]
    TooLarge {
        path: String,
        bytes: usize,
        limit: usize,
    },
    #[error("the audit log cannot record this write, so it was not made: {0}")]
    AuditUnavailable(#[source] StoreError),
    #[error(
        "the lock on '{path}' shared with the other replicas is not held (its database session dropped, or could not be opened), so nothing was written; retry"
    )]
    LockLost { path: String },
    #[error(
        "no workspace named '{name}': it was deleted as the write was made, so nothing was written"
    )]
    WorkspaceDeleted { name: String },
}

/// Writes `spec` through `workspace`, recording it in `store` first. See the module docs.
pub async fn recorded_write(
    store: &dyn WriteStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    kind: FileKind,
    spec: WriteSpec,
    provenance: Provenance,
) -> Result<WriteReceipt, WriteError> {
    let (receipt, completion) =
        write_deferring_completion(store, workspace, request_id, kind, spec, provenance)
            .await
            .map_err(|failed| failed.error)?;
    if let Some(completion) = completion
        && let Err(store_err) = store.commit(vec![completion]).await
    {
        tracing::warn!(operation_id = %receipt.operation_id, error = %store_err, "write done but its record is still pending; reconciliation will settle it");
    }
    Ok(receipt)
}

/// [`recorded_write`] up to and including the file write; the completion of a write that
/// happened is returned (`None` when there is none to make) for the caller to commit. Until it
/// is committed the operation reads `pending`, and reconciliation settles it if the process
/// stops first.
pub async fn write_deferring_completion(
    store: &dyn WriteStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    kind: FileKind,
    spec: WriteSpec,
    provenance: Provenance,
) -> DeferredWrite {
    let path = spec.path.to_string();
    let one = GroupedWrite {
        kind,
        spec,
        provenance,
    };
    write_group_deferring_completion(store, workspace, request_id, vec![one])
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| {
            Err(WriteError::from(WorkspaceError::Io {
                path,
                source: std::io::Error::other("the write was lost"),
            })
            .into())
        })
}

/// One file of a [`write_group_deferring_completion`].
#[derive(Debug, Clone)]
pub struct GroupedWrite {
    pub kind: FileKind,
    pub spec: WriteSpec,
    pub provenance: Provenance,
}

/// A write made up to its deferred completion (see [`write_deferring_completion`]).
pub type DeferredWrite = Result<(WriteReceipt, Option<AuditWrite>), FailedWrite>;

/// A write that was not made: why, and the operation recording it when its `pending` record was
/// committed before the write failed (that record is then completed as `failed`, so the caller
/// must not record the failure again). `None`: refused before any record was made.
#[derive(Debug)]
pub struct FailedWrite {
    pub error: WriteError,
    pub operation_id: Option<Uuid>,
}

impl From<WriteError> for FailedWrite {
    fn from(error: WriteError) -> Self {
        FailedWrite {
            error,
            operation_id: None,
        }
    }
}

/// Several files (distinct paths) written as [`write_deferring_completion`] writes one, in
/// lockstep: every path locked (in path order, so two groups never wait on each other) and
/// read, then the pending records of all of them in one commit while their contents are staged
/// together, then published together. Files that finish together so cost one commit and one
/// group of syncs, instead of queueing behind each other's. Each file keeps its own outcome; a
/// refused commit (the store is down) refuses every file of the group, and none is written.
pub async fn write_group_deferring_completion(
    store: &dyn WriteStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    writes: Vec<GroupedWrite>,
) -> Vec<DeferredWrite> {
    write_group(store, workspace, request_id, writes, None).await
}

/// Records made from a group's pending operations, committed with them.
pub type WithRecords<'a> = &'a (dyn Fn(&[&Operation]) -> Vec<AuditWrite> + Send + Sync);

/// Why a group written all or nothing wrote nothing: the file that refused it (its place in
/// the group) and why. The records the group was to carry were not committed, or were taken
/// back by the caller's own records of the failure.
#[derive(Debug)]
pub struct GroupRefused {
    pub index: usize,
    pub error: WriteError,
}

/// Every one of `writes` or none, as [`write_group_deferring_completion`] writes a group, with
/// two differences: a file refused when it is checked (changed since, too large, …) refuses the
/// whole group before anything is recorded; and `with` — records made from the group's pending
/// operations — commits with them, so that those records exist only if the writes go ahead (a
/// conflict in them refuses the group, nothing written). A file that fails once others are
/// published has the others put back, each only where it still holds what was written, and
/// its records say so. Returns each file's receipt and completion, in the order given.
pub async fn write_all_or_nothing(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    writes: Vec<GroupedWrite>,
    with: WithRecords<'_>,
) -> Result<Vec<(WriteReceipt, Option<AuditWrite>)>, GroupRefused> {
    let kinds: Vec<(FileKind, RepoPath)> = writes
        .iter()
        .map(|w| (w.kind, w.spec.path.clone()))
        .collect();
    let outcomes = write_group(store, workspace, request_id, writes, Some(with)).await;
    let mut done: Vec<(usize, (WriteReceipt, Option<AuditWrite>))> =
        Vec::with_capacity(outcomes.len());
    let mut refused = None;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(written) => done.push((i, written)),
            Err(failed) => {
                refused.get_or_insert(GroupRefused {
                    index: i,
                    error: failed.error,
                });
            }
        }
    }
    let Some(refused) = refused else {
        return Ok(done.into_iter().map(|(_, w)| w).collect());
    };
    // Files of a refused group that were published all the same: recorded, then put back.
    let completions: Vec<AuditWrite> = done.iter().filter_map(|(_, (_, c))| c.clone()).collect();
    if let Err(e) = store.commit(completions).await {
        tracing::warn!(error = %e, "a refused group's writes are recorded pending; reconciliation will settle them");
    }
    for (i, (receipt, completion)) in done {
        if completion.is_none() {
            // Unchanged: nothing was written.
            continue;
        }
        let (kind, path) = &kinds[i];
        put_back(store, workspace, request_id, *kind, path, &receipt).await;
    }
    Err(refused)
}

/// Puts a written file back as it was, only if it still holds what was written.
async fn put_back(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    kind: FileKind,
    path: &RepoPath,
    receipt: &WriteReceipt,
) {
    let provenance = Provenance {
        selection: Some(Selection::Rollback),
        ..Provenance::default()
    };
    let undone = match &receipt.previous {
        Some(previous) => recorded_write(
            store,
            workspace,
            request_id,
            kind,
            WriteSpec {
                path: path.clone(),
                content: previous.clone(),
                mode: WriteMode::Overwrite,
                expected_sha256: Some(receipt.sha256.clone()),
                create_dirs: false,
            },
            provenance,
        )
        .await
        .map(|_| ()),
        None => recorded_remove(
            store,
            workspace,
            request_id,
            kind,
            path,
            &receipt.sha256,
            "rolled back: another file of the same group could not be written",
            provenance,
        )
        .await
        .map(|_| ()),
    };
    if let Err(e) = undone {
        tracing::error!(path = %path, error = %e, "a file of a refused group could not be put back");
    }
}

async fn write_group(
    store: &dyn WriteStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    writes: Vec<GroupedWrite>,
    all_or_nothing: Option<WithRecords<'_>>,
) -> Vec<DeferredWrite> {
    let started = Instant::now();
    let mut order: Vec<usize> = (0..writes.len()).collect();
    order.sort_by(|&a, &b| {
        writes[a]
            .spec
            .path
            .as_str()
            .cmp(writes[b].spec.path.as_str())
    });
    order.dedup_by(|a, b| writes[*a].spec.path == writes[*b].spec.path);
    if order.len() < writes.len() {
        // Same path twice: its two locks would wait on each other. One after the other instead.
        if all_or_nothing.is_some() {
            // One group cannot write one path twice all or nothing: refused, nothing touched.
            let twice = writes.len() - 1;
            return writes
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    Err(FailedWrite::from(WriteError::from(WorkspaceError::Io {
                        path: w.spec.path.to_string(),
                        source: std::io::Error::other(if i == twice {
                            "named twice in one group"
                        } else {
                            "not written: its group was refused"
                        }),
                    })))
                })
                .collect();
        }
        let mut outcomes = Vec::with_capacity(writes.len());
        for w in writes {
            outcomes.extend(
                Box::pin(write_group_deferring_completion(
                    store,
                    workspace,
                    request_id,
                    vec![w],
                ))
                .await,
            );
        }
        return outcomes;
    }
    let mut locks = Vec::with_capacity(order.len());
    for &i in &order {
        let path = &writes[i].spec.path;
        locks.push((workspace.lock(path).await, path.clone()));
    }

    let targets: Vec<(RepoPath, bool)> = writes
        .iter()
        .map(|w| (w.spec.path.clone(), w.spec.create_dirs))
        .collect();
    let currents = workspace.read_targets(&targets).await;
    let mut outcomes: Vec<Option<DeferredWrite>> = writes.iter().map(|_| None).collect();
    let mut planned: Vec<(usize, Planned)> = Vec::with_capacity(writes.len());
    for (i, (w, current)) in writes.into_iter().zip(currents).enumerate() {
        match current
            .map_err(WriteError::from)
            .and_then(|current| plan(workspace, request_id, w, current))
        {
            Ok(p) => planned.push((i, p)),
            Err(e) => outcomes[i] = Some(Err(e.into())),
        }
    }
    if all_or_nothing.is_some() && outcomes.iter().any(Option::is_some) {
        // One refused: none is recorded or staged.
        for (i, p) in planned {
            outcomes[i] = Some(Err(WriteError::from(WorkspaceError::Io {
                path: p.path.to_string(),
                source: std::io::Error::other("not written: another file of its group was refused"),
            })
            .into()));
        }
        return outcomes.into_iter().flatten().collect();
    }

    // The pending records are committed while the contents are written to their temp files and
    // synced; no file changes (the renames) until both are durable. Staging is not moved ahead
    // of the reads to overlap them: on one disk the staging's syncs and the commit's WAL flush
    // queue for the device either way.
    let mut records: Vec<AuditWrite> = Vec::with_capacity(planned.len() + 1);
    let mut kept: Vec<AuditWrite> = Vec::new();
    for (_, p) in planned.iter_mut() {
        if p.unchanged {
            // Nothing to write: the outcome is recorded in one step.
            p.op.status = OperationStatus::Succeeded;
            p.op.finished_at = Some(Utc::now());
            p.op.duration_ms = Some(started.elapsed().as_millis() as i64);
        }
        records.push(AuditWrite::InsertOperation {
            operation: p.op.clone(),
            content: Some(p.content.clone()),
        });
        // The bytes an update replaces, so that it can be undone byte for byte whoever wrote
        // them; kept by hash, so a state already kept costs nothing more.
        if p.op.operation == OperationKind::Updated
            && let (Some(previous), Some(sha256)) = (&p.current, &p.op.previous_sha256)
        {
            kept.push(AuditWrite::KeepContent {
                sha256: sha256.clone(),
                content: previous.clone(),
            });
        }
    }
    // After the operations: one statement never holds two parts on one table.
    records.extend(kept);
    if let Some(with) = all_or_nothing {
        let ops: Vec<&Operation> = planned.iter().map(|(_, p)| &p.op).collect();
        records.extend(with(&ops));
    }
    let to_stage: Vec<ToStage<'_>> = planned
        .iter()
        .filter(|(_, p)| !p.unchanged)
        .map(|(_, p)| ToStage {
            path: &p.path,
            content: &p.content,
            create_dirs: p.create_dirs,
        })
        .collect();
    let to_stage_count = to_stage.len();
    let (recorded, staged) =
        futures::future::join(store.commit(records), workspace.stage_all(&to_stage)).await;
    if let Err(refused) = recorded {
        // Dropping the staged writes discards them: no file changes.
        drop(staged);
        for (i, _) in planned {
            outcomes[i] = Some(Err(WriteError::AuditUnavailable(refused.clone()).into()));
        }
        return outcomes.into_iter().flatten().collect();
    }
    // The last moment before anything becomes visible. A lock lost since it was taken no longer
    // excludes the other replicas' writers, so nothing of the group is published; nor is it
    // into a workspace deleted since the write found it.
    let refusal = match first_lost(&locks).await {
        Some(path) => {
            tracing::warn!(path = %path, "a shared path lock was lost before its write was published; the group's writes are failed");
            Some(Refusal::LockLost(path.to_string()))
        }
        None => workspace_refusal(store, workspace).await,
    };
    let published: Vec<Result<(), WriteError>> = match refusal {
        None => staged
            .publish()
            .await
            .into_iter()
            .map(|r| r.map_err(WriteError::from))
            .collect(),
        Some(refusal) => {
            drop(staged);
            std::iter::repeat_with(|| refusal.error())
                .take(to_stage_count)
                .collect()
        }
    };
    let mut published = published.into_iter();
    let mut failures = Vec::new();
    for (i, p) in planned {
        let published = if p.unchanged {
            None
        } else {
            Some(published.next().unwrap_or_else(|| {
                Err(WorkspaceError::Io {
                    path: p.path.to_string(),
                    source: std::io::Error::other("the write was lost"),
                }
                .into())
            }))
        };
        let outcome = match published {
            None => Ok((receipt(&p.op, p.content, p.current), None)),
            Some(Ok(())) => {
                let outcome = OperationOutcome {
                    status: OperationStatus::Succeeded,
                    operation: p.op.operation,
                    error: None,
                    finished_at: Utc::now(),
                    duration_ms: Some(started.elapsed().as_millis() as i64),
                };
                let completion = AuditWrite::CompleteOperation {
                    id: p.op.id,
                    outcome,
                };
                Ok((receipt(&p.op, p.content, p.current), Some(completion)))
            }
            Some(Err(err)) => {
                failures.push(AuditWrite::CompleteOperation {
                    id: p.op.id,
                    outcome: OperationOutcome {
                        status: OperationStatus::Failed,
                        operation: OperationKind::Failed,
                        error: Some(err.to_string()),
                        finished_at: Utc::now(),
                        duration_ms: Some(started.elapsed().as_millis() as i64),
                    },
                });
                Err(FailedWrite {
                    error: err,
                    operation_id: Some(p.op.id),
                })
            }
        };
        outcomes[i] = Some(outcome);
    }
    if !failures.is_empty()
        && let Err(store_err) = store.commit(failures).await
    {
        // The pending records stay; reconciliation will find the files unchanged and fail them.
        tracing::warn!(error = %store_err, "could not record failed writes");
    }
    drop(locks);
    outcomes.into_iter().flatten().collect()
}

/// Why a staged group is not published.
enum Refusal {
    /// The path whose shared lock was lost.
    LockLost(String),
    /// The workspace is no longer stored.
    WorkspaceDeleted(String),
    /// The store could not say whether the workspace is.
    StoreUnavailable(StoreError),
}

impl Refusal {
    fn error(&self) -> Result<(), WriteError> {
        Err(match self {
            Refusal::LockLost(path) => WriteError::LockLost { path: path.clone() },
            Refusal::WorkspaceDeleted(name) => WriteError::WorkspaceDeleted { name: name.clone() },
            Refusal::StoreUnavailable(e) => WriteError::AuditUnavailable(e.clone()),
        })
    }
}

/// `Some` when `workspace` may no longer be written: a named workspace that is not stored any
/// more (deleted after the request found it, on this replica or another, whose opened handle
/// can outlive the deletion), or whose row the store cannot read. Asked under the group's path
/// locks, after its records are committed: a deletion that lands later still finds those
/// records, and the files are kept, so a deleted workspace never has a write refused silently.
/// `default` is never stored, and cannot be deleted: it costs no query.
async fn workspace_refusal(store: &dyn WriteStore, workspace: &dyn Workspace) -> Option<Refusal> {
    let name = workspace.name();
    if name == crate::workspace_registry::WorkspaceName::DEFAULT {
        return None;
    }
    match store.find_workspace(name).await {
        Ok(Some(_)) => None,
        Ok(None) => {
            tracing::info!(workspace = %name, "a write into a deleted workspace was refused before it was published");
            Some(Refusal::WorkspaceDeleted(name.to_owned()))
        }
        Err(e) => Some(Refusal::StoreUnavailable(e)),
    }
}

/// The path of the first of `locks` no longer held, if any; their checks run together.
async fn first_lost(locks: &[(PathLock, RepoPath)]) -> Option<&RepoPath> {
    let held = futures::future::join_all(locks.iter().map(|(lock, _)| lock.still_held())).await;
    locks
        .iter()
        .zip(held)
        .find(|(_, held)| !held)
        .map(|((_, path), _)| path)
}

/// A write checked against its target's current content, ready to be recorded.
struct Planned {
    op: Operation,
    path: RepoPath,
    create_dirs: bool,
    /// The content the file will hold (after an append, the whole file).
    content: Vec<u8>,
    /// What the file held, read under its lock.
    current: Option<Vec<u8>>,
    /// The file already holds `content`: recorded, not written.
    unchanged: bool,
}

/// Checks `write` against the target's `current` content (`create`, `If-Match`, the size the
/// file will have) and builds its pending record — nothing touched yet.
fn plan(
    workspace: &dyn Workspace,
    request_id: Uuid,
    write: GroupedWrite,
    current: Option<Vec<u8>>,
) -> Result<Planned, WriteError> {
    let GroupedWrite {
        kind,
        spec,
        provenance,
    } = write;
    let previous_sha256 = current.as_deref().map(sha256_hex);
    if spec.mode == WriteMode::Create && current.is_some() {
        return Err(WriteError::AlreadyExists {
            path: spec.path.to_string(),
        });
    }
    if let Some(expected) = &spec.expected_sha256 {
        let actual = previous_sha256
            .clone()
            .unwrap_or_else(|| "absent".to_string());
        if !expected.eq_ignore_ascii_case(&actual) {
            return Err(WriteError::PreconditionFailed {
                path: spec.path.to_string(),
                expected: expected.clone(),
                actual,
            });
        }
    }

    let content = match (spec.mode, current.as_deref()) {
        (WriteMode::Append, Some(old)) => [old, spec.content.as_slice()].concat(),
        _ => spec.content,
    };
    // Bounded here, on the file as it will be, so an append cannot grow a file past what a
    // single write may.
    if let Some(limit) = workspace.max_file_bytes()
        && content.len() > limit
    {
        return Err(WriteError::TooLarge {
            path: spec.path.to_string(),
            bytes: content.len(),
            limit,
        });
    }
    let sha256 = sha256_hex(&content);
    let operation = match &current {
        None => OperationKind::Created,
        Some(old) if *old == content => OperationKind::Unchanged,
        Some(_) => OperationKind::Updated,
    };
    let op = Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: Utc::now(),
        finished_at: None,
        filename: spec.path.as_str().to_string(),
        kind,
        operation,
        status: OperationStatus::Pending,
        chosen_model: provenance.chosen_model,
        selection: provenance.selection,
        arbiter_reason: provenance.arbiter_reason,
        candidates: provenance.candidates,
        previous_sha256,
        sha256: Some(sha256),
        bytes: Some(content.len() as i64),
        error: None,
        duration_ms: None,
        detail: provenance.detail,
        workspace: workspace.name().to_owned(),
    };
    Ok(Planned {
        op,
        path: spec.path,
        create_dirs: spec.create_dirs,
        content,
        current,
        unchanged: operation == OperationKind::Unchanged,
    })
}

fn receipt(op: &Operation, content: Vec<u8>, previous: Option<Vec<u8>>) -> WriteReceipt {
    WriteReceipt {
        operation_id: op.id,
        operation: op.operation,
        bytes: content.len(),
        sha256: op.sha256.clone().unwrap_or_default(),
        previous_sha256: op.previous_sha256.clone(),
        previous,
        content,
    }
}

/// Records an operation that failed before anything could be written (e.g. no candidate).
pub async fn record_failure(
    store: &dyn WriteStore,
    request_id: Uuid,
    kind: FileKind,
    filename: &str,
    error: &str,
    provenance: Provenance,
) -> Result<Uuid, StoreError> {
    let op = failed_operation(request_id, kind, filename, error, provenance);
    store.insert_operation(&op, None).await?;
    Ok(op.id)
}

/// The failed operation [`record_failure`] records, for a caller that commits it with more.
pub(crate) fn failed_operation(
    request_id: Uuid,
    kind: FileKind,
    filename: &str,
    error: &str,
    provenance: Provenance,
) -> Operation {
    let now = Utc::now();
    Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: now,
        finished_at: Some(now),
        filename: filename.to_string(),
        kind,
        operation: OperationKind::Failed,
        status: OperationStatus::Failed,
        chosen_model: provenance.chosen_model,
        selection: provenance.selection,
        arbiter_reason: provenance.arbiter_reason,
        candidates: provenance.candidates,
        previous_sha256: None,
        sha256: None,
        bytes: None,
        error: Some(error.to_string()),
        duration_ms: Some(0),
        detail: provenance.detail,
        // Not known here: the store records the request's workspace.
        workspace: crate::workspace_registry::WorkspaceName::DEFAULT.to_owned(),
    }
}
