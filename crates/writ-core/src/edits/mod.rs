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

use std::time::Instant;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_checks::edit::Fallback;
use writ_checks::shape::Change;

use crate::audit::{AuditStore, FileKind, NewRequest, OperationKind, RequestStatus, Selection};
use crate::content::sha256_hex;
use crate::execution::{CommandRunner, tail};
use crate::files::{
    GroupedWrite, Provenance, WriteError, WriteMode, WriteSpec, recorded_remove, recorded_write,
    write_group_deferring_completion,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditedFile {
    pub path: String,
    /// `created`, `updated` or `unchanged` (for a dry run: what would be).
    pub operation: OperationKind,
    pub sha256: String,
    pub previous_sha256: Option<String>,
    pub bytes: usize,
    /// What changed: lines added and removed, and the unified diff (bounded).
    pub change: Change,
    /// Set (`whitespace`) when an edit matched only by ignoring trailing whitespace and
    /// indentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_fallback: Option<Fallback>,
    /// The audit record of the write (absent for a dry run).
    pub operation_id: Option<Uuid>,
}

/// The answer to an edit request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditsResponse {
    pub request_id: Uuid,
    pub dry_run: bool,
    pub files: Vec<EditedFile>,
    /// Whether the checks ran and passed (absent without validation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validated: Option<bool>,
    pub duration_ms: u64,
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
    let targets: Vec<(RepoPath, bool)> =
        edits.files.iter().map(|f| (f.path.clone(), true)).collect();
    let reads = workspace.read_targets(&targets).await;
    let mut edited = Vec::with_capacity(edits.files.len());
    for (f, read) in edits.files.iter().zip(reads) {
        let current = read.map_err(|source| EditsError::Target {
            field: f.field.clone(),
            source,
        })?;
        edited.push(edit_one(f, current)?);
    }
    let mut validated = None;
    if let (Some((calls, timeout)), Some(runner)) = (&edits.validation, runner) {
        let staged: Vec<(RepoPath, Vec<u8>)> = edited
            .iter()
            .map(|e| (e.path.clone(), e.after.as_bytes().to_vec()))
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
    if edits.dry_run {
        let files = edited
            .into_iter()
            .map(|e| {
                let operation = match &e.before {
                    None => OperationKind::Created,
                    Some(b) if b.as_slice() == e.after.as_bytes() => OperationKind::Unchanged,
                    Some(_) => OperationKind::Updated,
                };
                EditedFile {
                    path: e.path.to_string(),
                    operation,
                    sha256: sha256_hex(e.after.as_bytes()),
                    previous_sha256: e.before.as_deref().map(sha256_hex),
                    bytes: e.after.len(),
                    change: e.change,
                    edit_fallback: e.fallback,
                    operation_id: None,
                }
            })
            .collect();
        return Ok(EditsResponse {
            request_id: editor.request_id,
            dry_run: true,
            files,
            validated,
            duration_ms: started.elapsed().as_millis() as u64,
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

/// Writes every edited file as one recorded group; puts back those written if one is refused.
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
        .insert_request(&NewRequest {
            id: request_id,
            received_at: Utc::now(),
            route: editor.route,
            caller: editor.caller,
            scope: editor.scope,
            idempotency_key: None,
            body_sha256: Some(body_sha256.to_string()),
        })
        .await
        .map_err(|e| EditsError::Write(WriteError::AuditUnavailable(e)))?;
    let writes: Vec<GroupedWrite> = edited
        .iter()
        .map(|e| GroupedWrite {
            kind: FileKind::Direct,
            spec: WriteSpec {
                path: e.path.clone(),
                content: e.after.as_bytes().to_vec(),
                mode: if e.before.is_none() {
                    WriteMode::Create
                } else {
                    WriteMode::Overwrite
                },
                // Only over what the edits were made from.
                expected_sha256: e.before.as_deref().map(sha256_hex),
                create_dirs: true,
            },
            provenance: Provenance {
                selection: Some(Selection::Direct),
                detail: serde_json::to_value(&e.change)
                    .ok()
                    .map(|c| serde_json::json!({ "change": c })),
                ..Provenance::default()
            },
        })
        .collect();
    let outcomes = write_group_deferring_completion(store, workspace, request_id, writes).await;
    let mut completions = Vec::new();
    let mut done = Vec::new();
    let mut refused = None;
    for (e, outcome) in edited.into_iter().zip(outcomes) {
        match outcome {
            Ok((receipt, completion)) => {
                completions.extend(completion);
                done.push((e, receipt));
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
    let status = if refused.is_some() {
        RequestStatus::Error
    } else {
        RequestStatus::Success
    };
    let result = match refused {
        Some(err) => {
            roll_back(store, workspace, request_id, &done).await;
            Err(match err {
                e @ WriteError::PreconditionFailed { .. } => EditsError::Precondition(e),
                e => EditsError::Write(e),
            })
        }
        None => Ok(EditsResponse {
            request_id,
            dry_run: false,
            files: done
                .into_iter()
                .map(|(e, r)| EditedFile {
                    path: e.path.to_string(),
                    operation: r.operation,
                    sha256: r.sha256,
                    previous_sha256: r.previous_sha256,
                    bytes: r.bytes,
                    change: e.change,
                    edit_fallback: e.fallback,
                    operation_id: Some(r.operation_id),
                })
                .collect(),
            validated,
            duration_ms: started.elapsed().as_millis() as u64,
        }),
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

/// Puts back the files of a refused group that were written — each only if it still holds
/// what was written.
async fn roll_back(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    request_id: Uuid,
    done: &[(Edited, crate::files::WriteReceipt)],
) {
    let note = "rolled back: another file of the same edit request was refused";
    for (e, receipt) in done {
        let provenance = Provenance {
            selection: Some(Selection::Rollback),
            ..Provenance::default()
        };
        let undone = match &e.before {
            Some(before) => recorded_write(
                store,
                workspace,
                request_id,
                FileKind::Direct,
                WriteSpec {
                    path: e.path.clone(),
                    content: before.clone(),
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
                FileKind::Direct,
                &e.path,
                &receipt.sha256,
                note,
                provenance,
            )
            .await
            .map(|_| ()),
        };
        if let Err(err) = undone {
            tracing::error!(path = %e.path, error = %err, "an edit could not be rolled back");
        }
    }
}
