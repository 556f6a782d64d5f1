//! Direct edits for agents (`POST /edits`, the `edit_files` tool): changes to up to
//! [`MAX_EDIT_FILES`] files in the two forms agents already produce — `str_replace`
//! (`{old, new, replace_all}` per file) and the `apply_patch` format — applied all-or-nothing.
//!
//! Every file is read and every edit applied in memory first (strictly: an old text must match
//! once, with the one whitespace fallback of [`writ_checks::edit`]); a refusal names the file
//! and the edit and shows the closest lines, and nothing is written. With `validation`, the
//! caller's tests run on a scratch copy with the edits applied, and a failure writes nothing.
//! Then the files are written as one recorded group, each only over the content the edits were
//! made from; if one write is refused, the others are put back. A changed file keeps its own
//! line endings, BOM and final newline on every line the edits did not touch.

mod one;
mod request;
mod review;

use std::time::Instant;

use serde::{Deserialize, Serialize};
use uuid::Uuid;
pub use writ_checks::edit::Fallback;
use writ_checks::shape::Change;

use crate::audit::{AuditStore, FileKind, NewRequest, OperationKind, RequestStatus, Selection};
use crate::content::sha256_hex;
use crate::execution::{CommandRunner, tail};
use crate::files::{
    GroupedWrite, Provenance, WriteError, WriteMode, WriteReceipt, WriteSpec, recorded_delete,
    recorded_remove, recorded_write, write_group_deferring_completion,
};
use crate::path::RepoPath;
use crate::workspace::Workspace;

use one::{Edited, edit_one};
pub use request::{EditValidation, Edits, EditsRequest, FileEdits, StrReplace};

/// Most files one edit request may change.
pub const MAX_EDIT_FILES: usize = 5;
/// Most `str_replace` edits for one file.
pub const MAX_EDITS_PER_FILE: usize = 100;
/// Bytes of a failing check's output returned.
const OUTPUT_TAIL_BYTES: usize = 4_000;
/// Why an edit request changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum EditsError {
    /// The request itself is malformed: the field and why.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// An edit does not apply to its file.
    #[error("{message}")]
    EditFailed {
        path: String,
        edit: usize,
        message: String,
    },
    /// A file does not hold what the request expects.
    #[error(transparent)]
    Precondition(WriteError),
    /// The checks failed on the edited files.
    #[error("the edits failed the check `{command}`; nothing was written")]
    ValidationFailed {
        command: String,
        exit_code: Option<i32>,
        timed_out: bool,
        output_tail: String,
    },
    #[error("{0}")]
    Unavailable(String),
    /// A target the workspace refuses (outside it, protected, a directory, …), blamed on `field`.
    #[error("{source}")]
    Target {
        field: String,
        source: crate::workspace::WorkspaceError,
    },
    #[error(transparent)]
    Write(WriteError),
}

/// Who asks, and through which surface (`POST /edits`, `mcp edit_files`, …).
#[derive(Debug, Clone)]
pub struct Editor {
    pub request_id: Uuid,
    pub caller: Option<String>,
    pub scope: Option<crate::keys::Scope>,
    pub route: String,
}

/// One file of the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EditedFile {
    pub path: String,
    /// `created`, `updated`, `unchanged` or `deleted` (for a dry run: what would be). A move
    /// is two files: its source `deleted` (with `moved_to`) and its destination `created` (with
    /// `moved_from`).
    pub operation: OperationKind,
    /// What the file holds now (absent once deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub previous_sha256: Option<String>,
    pub bytes: usize,
    /// What changed: lines added and removed, and the unified diff (bounded).
    pub change: Change,
    /// Set when an edit matched only loosely: `whitespace` (trailing whitespace and indentation
    /// ignored) or `punctuation` (typographic dashes, quotes and spaces read as ASCII too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_fallback: Option<Fallback>,
    /// The audit record of the write or the deletion (absent for a dry run).
    pub operation_id: Option<Uuid>,
    /// For a move's destination: where the file was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
    /// For a move's source: where the file went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
    /// With `review`: the change proposed (not written), its base's SHA-256 and its hunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<crate::changes::FileProposal>,
}

/// The answer to an edit request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EditsResponse {
    pub request_id: Uuid,
    pub dry_run: bool,
    pub files: Vec<EditedFile>,
    /// Whether the checks ran and passed (absent without validation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validated: Option<bool>,
    pub duration_ms: u64,
    /// With `review`: `awaiting_review` (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RequestStatus>,
    /// With `review`: the change set holding the edited files, proposed and not written. Apply
    /// or reject it at `/changes/{change_id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<Uuid>,
    /// When the workspace is a git checkout: each path written that another workspace of its
    /// repository, or the branch it goes back to, changed too since they share a base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<crate::overlaps::Overlap>,
}

/// Applies `edits`; see the module docs.
pub async fn apply(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    runner: Option<&dyn CommandRunner>,
    editor: Editor,
    edits: Edits,
) -> Result<EditsResponse, EditsError> {
    let started = Instant::now();
    // Every file's target, then every move's destination (which must hold nothing): one read.
    let mut targets: Vec<(RepoPath, bool)> =
        edits.files.iter().map(|f| (f.path.clone(), true)).collect();
    targets.extend(
        edits
            .files
            .iter()
            .filter_map(|f| f.move_to.as_ref().map(|(to, _)| (to.clone(), true))),
    );
    let mut reads = workspace.read_targets(&targets).await.into_iter();
    let currents: Vec<_> = reads.by_ref().take(edits.files.len()).collect();
    let mut edited = Vec::with_capacity(edits.files.len());
    for (f, read) in edits.files.iter().zip(currents) {
        let current = read.map_err(|source| EditsError::Target {
            field: f.field.clone(),
            source,
        })?;
        let destination = match &f.move_to {
            Some((_, field)) => {
                Some(
                    reads
                        .next()
                        .unwrap_or(Ok(None))
                        .map_err(|source| EditsError::Target {
                            field: field.clone(),
                            source,
                        })?,
                )
            }
            None => None,
        };
        edited.push(edit_one(f, current, destination)?);
    }
    let mut validated = None;
    if let (Some((calls, timeout)), Some(runner)) = (&edits.validation, runner) {
        // Requests that delete or move are refused validation when parsed: every file here is
        // written where it is.
        let staged: Vec<(RepoPath, Vec<u8>)> = edited
            .iter()
            .filter_map(|e| e.after.clone().map(|a| (e.path.clone(), a)))
            .collect();
        let outcomes = runner
            .run(&staged, calls, *timeout)
            .await
            .map_err(|e| EditsError::Unavailable(format!("the checks could not run: {e}")))?;
        if let Some((call, o)) = calls.iter().zip(&outcomes).find(|(_, o)| !o.passed()) {
            let output = format!("{}{}", o.stdout, o.stderr);
            return Err(EditsError::ValidationFailed {
                command: std::iter::once(call.name.as_str())
                    .chain(call.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
                exit_code: o.exit_code,
                timed_out: o.timed_out,
                output_tail: tail(&output, OUTPUT_TAIL_BYTES).to_string(),
            });
        }
        validated = Some(true);
    }
    if let Some(ttl) = edits.review {
        return review::propose_edits(
            store, workspace, editor, &edits, ttl, edited, validated, started,
        )
        .await;
    }
    if edits.dry_run {
        let files = edited
            .into_iter()
            .flat_map(|e| {
                let operation = match (&e.before, &e.after) {
                    (_, None) => OperationKind::Deleted,
                    (None, _) => OperationKind::Created,
                    (Some(_), Some(_)) if e.move_to.is_some() => OperationKind::Created,
                    (Some(b), Some(a)) if b == a => OperationKind::Unchanged,
                    (Some(_), Some(_)) => OperationKind::Updated,
                };
                answered(e, operation, None, None)
            })
            .collect();
        return Ok(EditsResponse {
            request_id: editor.request_id,
            dry_run: true,
            files,
            validated,
            duration_ms: started.elapsed().as_millis() as u64,
            status: None,
            change_id: None,
            overlaps: Vec::new(),
        });
    }
    write_all(
        store,
        workspace,
        editor,
        &edits.body_sha256,
        edited,
        validated,
        started,
    )
    .await
}

/// One file of the answer for an edited file: a deletion; a move (its source deleted, its
/// destination created); or a write where it is.
fn answered(
    e: Edited,
    operation: OperationKind,
    written: Option<Uuid>,
    removed: Option<Uuid>,
) -> Vec<EditedFile> {
    let previous_sha256 = e.before.as_deref().map(sha256_hex);
    let source = |moved_to: Option<String>, change: Change| EditedFile {
        path: e.path.to_string(),
        operation: OperationKind::Deleted,
        sha256: None,
        previous_sha256: previous_sha256.clone(),
        bytes: 0,
        change,
        edit_fallback: None,
        operation_id: removed,
        moved_from: None,
        moved_to,
        proposal: None,
    };
    match (&e.after, &e.move_to) {
        (None, _) => vec![source(None, e.change.clone())],
        (Some(after), Some(to)) => vec![
            source(
                Some(to.to_string()),
                Change {
                    lines_added: 0,
                    lines_removed: 0,
                    diff: String::new(),
                    truncated: false,
                },
            ),
            EditedFile {
                path: to.to_string(),
                operation,
                sha256: Some(sha256_hex(after)),
                previous_sha256: None,
                bytes: after.len(),
                change: e.change.clone(),
                edit_fallback: e.fallback,
                operation_id: written,
                moved_from: Some(e.path.to_string()),
                moved_to: None,
                proposal: None,
            },
        ],
        (Some(after), None) => vec![EditedFile {
            path: e.path.to_string(),
            operation,
            sha256: Some(sha256_hex(after)),
            previous_sha256,
            bytes: after.len(),
            change: e.change.clone(),
            edit_fallback: e.fallback,
            operation_id: written,
            moved_from: None,
            moved_to: None,
            proposal: None,
        }],
    }
}

/// Writes every edited file as one recorded group, then removes the deleted files and the
/// sources of moves one by one; if any of it is refused, puts back what was done.
async fn write_all(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    editor: Editor,
    body_sha256: &str,
    edited: Vec<Edited>,
    validated: Option<bool>,
    started: Instant,
) -> Result<EditsResponse, EditsError> {
    let request_id = editor.request_id;
    store
        .insert_request(
            &NewRequest::opened(
                request_id,
                editor.route,
                editor.caller,
                editor.scope,
                workspace.name(),
            )
            .with_body(body_sha256),
        )
        .await
        .map_err(|e| EditsError::Write(WriteError::AuditUnavailable(e)))?;
    let writing: Vec<usize> = (0..edited.len())
        .filter(|&i| edited[i].after.is_some())
        .collect();
    let writes: Vec<GroupedWrite> = writing
        .iter()
        .map(|&i| {
            let e = &edited[i];
            let mut detail = serde_json::Map::new();
            if let Ok(c) = serde_json::to_value(&e.change) {
                detail.insert("change".into(), c);
            }
            if e.move_to.is_some() {
                detail.insert("moved_from".into(), e.path.as_str().into());
            }
            GroupedWrite {
                kind: FileKind::Direct,
                spec: WriteSpec {
                    path: e.move_to.clone().unwrap_or_else(|| e.path.clone()),
                    content: e.after.clone().unwrap_or_default(),
                    // A move's destination, like an added file, must not exist.
                    mode: if e.before.is_none() || e.move_to.is_some() {
                        WriteMode::Create
                    } else {
                        WriteMode::Overwrite
                    },
                    // Only over what the edits were made from.
                    expected_sha256: match e.move_to {
                        Some(_) => None,
                        None => e.before.as_deref().map(sha256_hex),
                    },
                    create_dirs: true,
                },
                provenance: Provenance {
                    selection: Some(Selection::Direct),
                    detail: Some(serde_json::Value::Object(detail)),
                    ..Provenance::default()
                },
            }
        })
        .collect();
    let outcomes = write_group_deferring_completion(store, workspace, request_id, writes).await;
    let mut completions = Vec::new();
    let mut written: Vec<(usize, WriteReceipt)> = Vec::new();
    let mut refused = None;
    for (&i, outcome) in writing.iter().zip(outcomes) {
        match outcome {
            Ok((receipt, completion)) => {
                completions.extend(completion);
                written.push((i, receipt));
            }
            Err(failed) => {
                refused.get_or_insert(failed.error);
            }
        }
    }
    if !completions.is_empty()
        && let Err(err) = store.commit(completions).await
    {
        tracing::warn!(error = %err, "edits written but their records are still pending; reconciliation will settle them");
    }
    // The removals, each only over what the file was read as.
    let mut removed: Vec<(usize, Uuid)> = Vec::new();
    if refused.is_none() {
        for (i, e) in edited.iter().enumerate() {
            if e.after.is_some() && e.move_to.is_none() {
                continue;
            }
            let Some(before) = &e.before else { continue };
            let provenance = Provenance {
                selection: Some(Selection::Direct),
                detail: e
                    .move_to
                    .as_ref()
                    .map(|to| serde_json::json!({ "moved_to": to.as_str() })),
                ..Provenance::default()
            };
            match recorded_delete(
                store,
                workspace,
                request_id,
                FileKind::Direct,
                &e.path,
                &sha256_hex(before),
                provenance,
            )
            .await
            {
                Ok(id) => removed.push((i, id)),
                Err(err) => {
                    refused = Some(err);
                    break;
                }
            }
        }
    }
    let status = if refused.is_some() {
        RequestStatus::Error
    } else {
        RequestStatus::Success
    };
    let result = match refused {
        Some(err) => {
            roll_back(store, workspace, request_id, &edited, &written, &removed).await;
            Err(match err {
                e @ WriteError::PreconditionFailed { .. } => EditsError::Precondition(e),
                e => EditsError::Write(e),
            })
        }
        None => {
            let files = edited
                .into_iter()
                .enumerate()
                .flat_map(|(i, e)| {
                    let write = written.iter().find(|(w, _)| *w == i).map(|(_, r)| r);
                    let removal = removed.iter().find(|(r, _)| *r == i).map(|(_, id)| *id);
                    let operation = write.map_or(OperationKind::Deleted, |r| r.operation);
                    answered(e, operation, write.map(|r| r.operation_id), removal)
                })
                .collect();
            Ok(EditsResponse {
                request_id,
                dry_run: false,
                files,
                validated,
                duration_ms: started.elapsed().as_millis() as u64,
                status: None,
                change_id: None,
                overlaps: Vec::new(),
            })
        }
    };
    let elapsed = started.elapsed().as_millis() as i64;
    if let Err(e) = store
        .finish_request(request_id, status, elapsed, None)
        .await
    {
        tracing::warn!(error = %e, "could not close the request record of an edit");
    }
    result
}

/// Puts back what a refused request did: each written file as it was (removed if it did not
/// exist), only if it still holds what was written; each removed file written back, only if
/// nothing took its place.
async fn roll_back(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    edited: &[Edited],
    written: &[(usize, WriteReceipt)],
    removed: &[(usize, Uuid)],
) {
    let note = "rolled back: another file of the same edit request was refused";
    let provenance = || Provenance {
        selection: Some(Selection::Rollback),
        ..Provenance::default()
    };
    for (i, receipt) in written {
        let e = &edited[*i];
        let target = e.move_to.as_ref().unwrap_or(&e.path);
        let undone = match &receipt.previous {
            Some(previous) => recorded_write(
                store,
                workspace,
                request_id,
                FileKind::Direct,
                WriteSpec {
                    path: target.clone(),
                    content: previous.clone(),
                    mode: WriteMode::Overwrite,
                    expected_sha256: Some(receipt.sha256.clone()),
                    create_dirs: false,
                },
                provenance(),
            )
            .await
            .map(|_| ()),
            None => recorded_remove(
                store,
                workspace,
                request_id,
                FileKind::Direct,
                target,
                &receipt.sha256,
                note,
                provenance(),
            )
            .await
            .map(|_| ()),
        };
        if let Err(err) = undone {
            tracing::error!(path = %target, error = %err, "an edit could not be rolled back");
        }
    }
    for (i, _) in removed {
        let e = &edited[*i];
        let Some(before) = &e.before else { continue };
        let undone = recorded_write(
            store,
            workspace,
            request_id,
            FileKind::Direct,
            WriteSpec {
                path: e.path.clone(),
                content: before.clone(),
                mode: WriteMode::Create,
                expected_sha256: None,
                create_dirs: true,
            },
            provenance(),
        )
        .await;
        if let Err(err) = undone {
            tracing::error!(path = %e.path, error = %err, "a deleted file could not be put back");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::synthesis::doubles::{MemoryStore, MemoryWorkspace};

    fn editor() -> Editor {
        Editor {
            request_id: Uuid::now_v7(),
            caller: None,
            scope: None,
            route: "test".into(),
        }
    }

    #[tokio::test]
    async fn a_move_whose_destination_cannot_be_written_deletes_nothing_and_puts_back_the_rest() {
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default()
            .with_file("a.py", "x = 1\n")
            .with_file("b.py", "y = 1\n")
            .failing_on("c.py");
        let request: EditsRequest = serde_json::from_value(serde_json::json!({"files": [
            {"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 2"}]},
            {"path": "b.py", "move_to": "c.py"},
            {"path": "d.py", "delete": false, "edits": [{"old": "z", "new": "w"}]},
        ]}))
        .unwrap();
        // d.py does not exist: refused before anything is written.
        let edits = request.clone().parse("sha".into(), None).unwrap();
        let refused = apply(&store, &workspace, None, editor(), edits).await;
        assert!(matches!(refused, Err(EditsError::EditFailed { .. })));
        assert!(store.operations.lock().unwrap().is_empty());

        let mut request = request;
        request.files.as_mut().unwrap().pop();
        let edits = request.parse("sha".into(), None).unwrap();
        let refused = apply(&store, &workspace, None, editor(), edits).await;
        assert!(refused.is_err());
        assert_eq!(workspace.content("a.py").as_deref(), Some("x = 1\n"));
        assert_eq!(workspace.content("b.py").as_deref(), Some("y = 1\n"));
        assert_eq!(workspace.content("c.py"), None);
        let ops = store.operations.lock().unwrap();
        assert!(
            !ops.iter().any(|op| op.operation == OperationKind::Deleted),
            "no removal is made once a write was refused"
        );
    }

    #[tokio::test]
    async fn edits_under_review_write_nothing_and_propose_their_hunks() {
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default().with_file("a.py", "x = 1\ny = 2\n");
        let request: EditsRequest = serde_json::from_value(serde_json::json!({
            "files": [{"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 3"}]}],
            "review": true,
        }))
        .unwrap();
        let settings = crate::changes::ReviewSettings::default();
        let edits = request
            .parse("sha".into(), None)
            .unwrap()
            .reviewed(&settings)
            .unwrap();

        let answer = apply(&store, &workspace, None, editor(), edits)
            .await
            .unwrap();

        assert_eq!(answer.status, Some(RequestStatus::AwaitingReview));
        let change_id = answer.change_id.expect("a change set");
        assert_eq!(answer.files[0].operation, OperationKind::Proposed);
        let proposal = answer.files[0].proposal.as_ref().unwrap();
        assert_eq!(proposal.base_sha256, Some(sha256_hex(b"x = 1\ny = 2\n")));
        assert_eq!(proposal.hunks.len(), 1);
        assert_eq!(workspace.content("a.py").as_deref(), Some("x = 1\ny = 2\n"));
        let set = crate::changes::ChangeStore::get_change(&store, change_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(set.files[0].path, "a.py");
    }

    #[test]
    fn a_deletion_is_not_proposed_for_review_and_says_how_to_send_it() {
        let request: EditsRequest = serde_json::from_value(serde_json::json!({
            "patch": "*** Begin Patch\n*** Delete File: old.py\n*** End Patch",
        }))
        .unwrap();
        let by_default = crate::changes::ReviewSettings {
            by_default: true,
            ..Default::default()
        };
        let refused = request
            .parse("sha".into(), None)
            .unwrap()
            .reviewed(&by_default);
        assert!(matches!(refused, Err(EditsError::Invalid { ref field, .. }) if field == "review"));
    }

    #[tokio::test]
    async fn a_deletion_keeps_what_the_file_held_and_settles_as_deleted() {
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default().with_file("old.py", "gone = 1\n");
        let request: EditsRequest = serde_json::from_value(
            serde_json::json!({"patch": "*** Begin Patch\n*** Delete File: old.py\n*** End Patch"}),
        )
        .unwrap();
        let edits = request.parse("sha".into(), None).unwrap();
        let answer = apply(&store, &workspace, None, editor(), edits)
            .await
            .unwrap();
        assert_eq!(answer.files[0].operation, OperationKind::Deleted);
        assert_eq!(answer.files[0].sha256, None);
        assert_eq!(workspace.content("old.py"), None);
        let ops = store.operations.lock().unwrap();
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].operation, OperationKind::Deleted);
        assert_eq!(ops[0].status, crate::audit::OperationStatus::Succeeded);
        assert_eq!(
            ops[0].previous_sha256.as_deref(),
            Some(sha256_hex(b"gone = 1\n").as_str())
        );
    }
}
