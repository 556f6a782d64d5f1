//! Taking a request back (`POST /requests/{id}/undo`, the `undo_request` tool): every file the
//! request wrote is put back as it was before it — an updated file to the bytes it replaced
//! (kept with its operation), a created file removed, a deleted file written back (its removed
//! content is the deletion's kept content) — all or nothing, as one new recorded request that can
//! itself be undone (a redo).
//!
//! Nobody's later work is lost: a file that changed since the request (by anyone) refuses the
//! undo and names the file, unless the caller forces it, and then the answer lists what later
//! changes were replaced. Each file is written only over the content it was read as, under its
//! path lock, through the same recorded writes as `POST /edits` (`edits::write_all`), so an undo
//! racing a write never tears a file: one of them is refused.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_checks::shape::Change;

use crate::audit::{
    AuditStore, Operation, OperationFilter, OperationKind, OperationStatus, StoreError,
};
use crate::content::sha256_hex;
use crate::edits::{Edited, EditedFile, Editor, EditsError, answered, write_all};
use crate::path::RepoPath;
use crate::synthesis::update::MAX_DIFF_BYTES;
use crate::workspace::Workspace;

/// Most operations one request may have for it to be undone in one call (a batch has at most
/// five files; a request of more is not one writ makes).
const MAX_OPERATIONS: u32 = 200;

/// How to undo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoOptions {
    /// Undo even over files that changed since the request: their later content is replaced
    /// (and the answer lists them). Without it such files refuse the undo.
    #[serde(default)]
    pub force: bool,
    /// Answer what the undo would change; write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A file that changed since the request being undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedSince {
    pub path: String,
    /// What the request left (absent: it deleted the file).
    pub left_sha256: Option<String>,
    /// What the file holds now (absent: it is gone).
    pub now_sha256: Option<String>,
}

/// The answer to an undo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UndoResponse {
    /// This undo's own request (undo it to redo).
    pub request_id: Uuid,
    /// The request taken back.
    pub undone_request_id: Uuid,
    pub dry_run: bool,
    /// Every file put back (or, for a dry run, that would be): `updated` to its previous bytes,
    /// `deleted` (it was created), `created` (it was deleted). Files already as they were
    /// before the request are not listed.
    pub files: Vec<EditedFile>,
    /// With `force`: the files whose later changes the undo replaced.
    pub replaced_later_changes: Vec<ChangedSince>,
    pub duration_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("no request {0}")]
    NotFound(Uuid),
    /// Files changed since the request: nothing was written.
    #[error("{} changed since the request; nothing was undone (pass force to replace the later changes)", names(.0))]
    ChangedSince(Vec<ChangedSince>),
    /// What a file held before the request is no longer kept.
    #[error("what {} held before the request is no longer kept; nothing was undone", .0.join(", "))]
    NotKept(Vec<String>),
    #[error(transparent)]
    Edits(EditsError),
    #[error(transparent)]
    Store(StoreError),
}

fn names(files: &[ChangedSince]) -> String {
    files
        .iter()
        .map(|f| f.path.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What one path went through in the request: its first and last succeeded operations.
struct Touched {
    first: Operation,
    last: Operation,
}

/// Undoes request `target`; see the module docs. The caller has checked that `editor` may see
/// it.
pub async fn undo(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    editor: Editor,
    body_sha256: &str,
    target: Uuid,
    options: UndoOptions,
) -> Result<UndoResponse, UndoError> {
    let started = Instant::now();
    if store
        .get_request(target)
        .await
        .map_err(UndoError::Store)?
        .is_none()
    {
        return Err(UndoError::NotFound(target));
    }
    let touched = touched_by(store, target).await?;

    // What each file held before the request, and what the request left.
    let mut paths = Vec::with_capacity(touched.len());
    let mut befores = Vec::with_capacity(touched.len());
    let mut not_kept = Vec::new();
    for (path, t) in &touched {
        let Ok(repo_path) = RepoPath::parse(path) else {
            continue;
        };
        match before_request(store, &t.first).await? {
            Some(before) => befores.push(before),
            None => {
                not_kept.push(path.clone());
                befores.push(None);
            }
        }
        paths.push((repo_path, t));
    }
    let reads = workspace
        .read_targets(
            &paths
                .iter()
                .map(|(p, _)| (p.clone(), true))
                .collect::<Vec<_>>(),
        )
        .await;

    let mut changed = Vec::new();
    let mut edited = Vec::new();
    for (((path, t), before), read) in paths.iter().zip(befores).zip(reads) {
        let now = read.map_err(|source| {
            UndoError::Edits(EditsError::Target {
                field: "path".into(),
                source,
            })
        })?;
        let left = match t.last.operation {
            OperationKind::Deleted => None,
            _ => t.last.sha256.clone(),
        };
        let now_sha256 = now.as_deref().map(sha256_hex);
        if now_sha256 != left {
            changed.push(ChangedSince {
                path: path.to_string(),
                left_sha256: left,
                now_sha256,
            });
        }
        if now == before {
            continue;
        }
        let text = |b: &Option<Vec<u8>>| {
            b.as_deref()
                .map(|b| writ_checks::shape::view(&String::from_utf8_lossy(b)))
                .unwrap_or_default()
        };
        edited.push(Edited {
            change: Change::between(path.as_str(), &text(&now), &text(&before), MAX_DIFF_BYTES),
            path: path.clone(),
            before: now,
            after: before,
            move_to: None,
            fallback: None,
        });
    }
    if !changed.is_empty() && !options.force {
        return Err(UndoError::ChangedSince(changed));
    }
    if !not_kept.is_empty() {
        return Err(UndoError::NotKept(not_kept));
    }
    let replaced_later_changes = if options.force { changed } else { Vec::new() };

    if options.dry_run || edited.is_empty() {
        let files = edited
            .into_iter()
            .flat_map(|e| {
                let operation = match (&e.before, &e.after) {
                    (_, None) => OperationKind::Deleted,
                    (None, _) => OperationKind::Created,
                    _ => OperationKind::Updated,
                };
                answered(e, operation, None, None)
            })
            .collect();
        return Ok(UndoResponse {
            request_id: editor.request_id,
            undone_request_id: target,
            dry_run: options.dry_run,
            files,
            replaced_later_changes,
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }
    let done = write_all(store, workspace, editor, body_sha256, edited, None, started)
        .await
        .map_err(UndoError::Edits)?;
    Ok(UndoResponse {
        request_id: done.request_id,
        undone_request_id: target,
        dry_run: false,
        files: done.files,
        replaced_later_changes,
        duration_ms: done.duration_ms,
    })
}

/// The files request `target` changed, each with its first and last succeeded operation, in
/// path order.
async fn touched_by(
    store: &dyn AuditStore,
    target: Uuid,
) -> Result<BTreeMap<String, Touched>, UndoError> {
    let filter = OperationFilter {
        request_id: Some(target),
        status: Some(OperationStatus::Succeeded),
        ..OperationFilter::default()
    };
    let page = store
        .list_operations(&filter, None, MAX_OPERATIONS)
        .await
        .map_err(UndoError::Store)?;
    let mut touched: BTreeMap<String, Touched> = BTreeMap::new();
    // The listing is newest first.
    for op in page.operations.into_iter().rev() {
        if !matches!(
            op.operation,
            OperationKind::Created | OperationKind::Updated | OperationKind::Deleted
        ) {
            continue;
        }
        match touched.get_mut(&op.filename) {
            Some(t) => t.last = op,
            None => {
                touched.insert(
                    op.filename.clone(),
                    Touched {
                        first: op.clone(),
                        last: op,
                    },
                );
            }
        }
    }
    Ok(touched)
}

/// What the file of `first` (a request's first change of it) held before: `Some(None)` when it
/// did not exist, `None` when its bytes are no longer kept.
async fn before_request(
    store: &dyn AuditStore,
    first: &Operation,
) -> Result<Option<Option<Vec<u8>>>, UndoError> {
    match first.operation {
        OperationKind::Created => Ok(Some(None)),
        // A deletion keeps the bytes it removed as its content.
        OperationKind::Deleted => Ok(store
            .get_operation(first.id)
            .await
            .map_err(UndoError::Store)?
            .and_then(|(_, content)| content)
            .map(Some)),
        _ => {
            if let Some(previous) = store
                .previous_content(first.id)
                .await
                .map_err(UndoError::Store)?
            {
                return Ok(Some(Some(previous)));
            }
            // Recorded before writes kept what they replaced: the version writ itself wrote, if
            // it was one of its writes.
            Ok(match &first.previous_sha256 {
                Some(sha) => written_version(store, &first.filename, sha)
                    .await?
                    .map(Some),
                None => None,
            })
        }
    }
}

/// The content of the newest succeeded write of `path` whose bytes hash to `sha256`.
async fn written_version(
    store: &dyn AuditStore,
    path: &str,
    sha256: &str,
) -> Result<Option<Vec<u8>>, UndoError> {
    let filter = OperationFilter {
        filename: Some(path.to_string()),
        status: Some(OperationStatus::Succeeded),
        ..OperationFilter::default()
    };
    let page = store
        .list_operations(&filter, None, MAX_OPERATIONS)
        .await
        .map_err(UndoError::Store)?;
    for op in page.operations {
        if op.sha256.as_deref() == Some(sha256) && op.operation != OperationKind::Deleted {
            let content = store
                .get_operation(op.id)
                .await
                .map_err(UndoError::Store)?
                .and_then(|(_, c)| c);
            if content.is_some() {
                return Ok(content);
            }
        }
    }
    Ok(None)
}
