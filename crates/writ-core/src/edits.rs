//! Direct edits for agents (`POST /edits`, the `edit_files` tool): changes to up to
//! [`MAX_EDIT_FILES`] files in the two forms agents already produce — `str_replace`
//! (`{old, new, replace_all}` per file) and the `apply_patch` format — applied all-or-nothing.
//!
//! Every file is read and every edit applied in memory first (strictly: an old text must match
//! once, with the one whitespace fallback of [`writ_checks::edit`]); a refusal names the file
//! and the edit and shows the closest lines, and nothing is written. With `validation`, the
//! caller's checks run on a scratch copy with the edits applied, and a failure writes nothing.
//! Then the files are written as one recorded group, each only over the content the edits were
//! made from; if one write is refused, the others are put back. A changed file keeps its own
//! line endings, BOM and final newline on every line the edits did not touch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_checks::edit::{Fallback, apply_one};
use writ_checks::patch::{self, FileOp};
use writ_checks::shape::Change;

use crate::audit::{AuditStore, FileKind, NewRequest, OperationKind, RequestStatus, Selection};
use crate::content::sha256_hex;
use crate::execution::{CommandCall, RunError, Runner, tail};
use crate::files::{
    GroupedWrite, Provenance, WriteError, WriteMode, WriteSpec, recorded_remove, recorded_write,
    write_group_deferring_completion,
};
use crate::path::SandboxPath;
use crate::synthesis::batch::MAX_VALIDATION_COMMANDS;
use crate::synthesis::update::{Existing, MAX_DIFF_BYTES};
use crate::workspace::Workspace;

/// Most files one edit request may change.
pub const MAX_EDIT_FILES: usize = 5;
/// Most `str_replace` edits for one file.
pub const MAX_EDITS_PER_FILE: usize = 100;
/// Bytes of a failing check's output returned.
const OUTPUT_TAIL_BYTES: usize = 4_000;

/// `POST /edits` as sent: exactly one of `files` and `patch`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditsRequest {
    /// `str_replace` edits, grouped by file.
    #[serde(default)]
    pub files: Option<Vec<FileEdits>>,
    /// An `apply_patch` patch (`*** Begin Patch` … `*** End Patch`).
    #[serde(default)]
    pub patch: Option<String>,
    /// For `patch`: the SHA-256 (hex) each named file must hold, by path.
    #[serde(default)]
    pub expected_sha256: Option<BTreeMap<String, String>>,
    /// Checks run on a scratch copy with the edits applied; nothing is written if one fails.
    #[serde(default)]
    pub validation: Option<EditValidation>,
    /// Apply and check, and answer with the changes, without writing.
    #[serde(default)]
    pub dry_run: bool,
}

/// One file's `str_replace` edits, applied in order.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEdits {
    pub path: String,
    /// Refuse unless the file holds this SHA-256 (hex).
    #[serde(default)]
    pub expected_sha256: Option<String>,
    pub edits: Vec<StrReplace>,
}

/// Replace `old` by `new`: `old` must occur exactly once, or at least once with `replace_all`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StrReplace {
    pub old: String,
    pub new: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// The checks an edit must pass before it is written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditValidation {
    /// Configured command names (`WRIT_COMMANDS`) with their arguments, run in order.
    pub commands: Vec<CommandCall>,
    /// Per command; at most `WRIT_RUN_MAX_TIMEOUT_SECS`.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// What is done to one file.
#[derive(Debug, Clone)]
enum Action {
    Replace(Vec<StrReplace>),
    Hunks(Vec<patch::Hunk>),
    Add(String),
}

/// One file of a parsed request.
#[derive(Debug, Clone)]
struct Planned {
    path: SandboxPath,
    field: String,
    expected_sha256: Option<String>,
    action: Action,
}

/// A parsed, bounded edit request.
#[derive(Debug, Clone)]
pub struct Edits {
    files: Vec<Planned>,
    validation: Option<(Vec<CommandCall>, Duration)>,
    dry_run: bool,
    body_sha256: String,
}

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

fn invalid(field: impl Into<String>, message: impl Into<String>) -> EditsError {
    EditsError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn parse_path(raw: &str, field: &str) -> Result<SandboxPath, EditsError> {
    SandboxPath::parse_nonempty(raw).map_err(|e| invalid(field, e.to_string()))
}

impl EditsRequest {
    /// Validates the request into [`Edits`]; `body_sha256` identifies it in the audit log.
    pub fn parse(
        self,
        body_sha256: String,
        runner: Option<&dyn Runner>,
    ) -> Result<Edits, EditsError> {
        let files = match (self.files, self.patch) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "patch",
                    "give either files (str_replace edits) or patch, not both",
                ));
            }
            (None, None) => {
                return Err(invalid("files", "give files (str_replace edits) or patch"));
            }
            (Some(files), None) => {
                if self.expected_sha256.is_some() {
                    return Err(invalid(
                        "expected_sha256",
                        "goes with patch; with files, give each file's expected_sha256",
                    ));
                }
                files
                    .into_iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let field = format!("files[{i}]");
                        if f.edits.is_empty() || f.edits.len() > MAX_EDITS_PER_FILE {
                            return Err(invalid(
                                format!("{field}.edits"),
                                format!(
                                    "between 1 and {MAX_EDITS_PER_FILE} edits, got {}",
                                    f.edits.len()
                                ),
                            ));
                        }
                        if let Some(j) = f.edits.iter().position(|e| e.old.is_empty()) {
                            return Err(invalid(
                                format!("{field}.edits[{j}].old"),
                                "must not be empty (to create a file, use a patch's *** Add File)",
                            ));
                        }
                        Ok(Planned {
                            path: parse_path(&f.path, &format!("{field}.path"))?,
                            field: format!("{field}.path"),
                            expected_sha256: f.expected_sha256,
                            action: Action::Replace(f.edits),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            (None, Some(text)) => {
                let ops = patch::parse(&text).map_err(|e| invalid("patch", e.to_string()))?;
                let mut expected = self.expected_sha256.unwrap_or_default();
                let mut planned = Vec::with_capacity(ops.len());
                for op in ops {
                    let field = format!("patch ({})", op.path());
                    let path = parse_path(op.path(), &field)?;
                    let action = match op {
                        FileOp::Add { content, .. } => Action::Add(content),
                        FileOp::Update { hunks, .. } => Action::Hunks(hunks),
                        FileOp::Delete { .. } => {
                            return Err(invalid(
                                field,
                                "*** Delete File is not supported: edits change and add files; nothing was changed",
                            ));
                        }
                    };
                    planned.push(Planned {
                        expected_sha256: expected.remove(path.as_str()),
                        path,
                        field,
                        action,
                    });
                }
                if let Some(path) = expected.keys().next() {
                    return Err(invalid(
                        "expected_sha256",
                        format!("names '{path}', which the patch does not change"),
                    ));
                }
                planned
            }
        };
        if files.len() > MAX_EDIT_FILES {
            return Err(invalid(
                "files",
                format!(
                    "at most {MAX_EDIT_FILES} files per request, got {}",
                    files.len()
                ),
            ));
        }
        for (i, f) in files.iter().enumerate() {
            if files[..i].iter().any(|o| o.path == f.path) {
                return Err(invalid(
                    f.field.clone(),
                    format!(
                        "'{}' is named twice; put all of a file's edits in one entry",
                        f.path
                    ),
                ));
            }
        }
        let validation = self
            .validation
            .map(|v| parse_validation(v, runner))
            .transpose()?;
        Ok(Edits {
            files,
            validation,
            dry_run: self.dry_run,
            body_sha256,
        })
    }
}

fn parse_validation(
    v: EditValidation,
    runner: Option<&dyn Runner>,
) -> Result<(Vec<CommandCall>, Duration), EditsError> {
    let Some(runner) = runner else {
        return Err(EditsError::Unavailable(
            "validation needs commands to run, and none are configured: set WRIT_COMMANDS".into(),
        ));
    };
    if v.commands.is_empty() || v.commands.len() > MAX_VALIDATION_COMMANDS {
        return Err(invalid(
            "validation.commands",
            format!(
                "between 1 and {MAX_VALIDATION_COMMANDS} commands, got {}",
                v.commands.len()
            ),
        ));
    }
    let max = runner.limits().max_timeout;
    let timeout = Duration::from_secs(v.timeout_secs.unwrap_or(30).max(1));
    if timeout > max {
        return Err(invalid(
            "validation.timeout_secs",
            format!(
                "at most {} (WRIT_RUN_MAX_TIMEOUT_SECS), got {}",
                max.as_secs(),
                timeout.as_secs()
            ),
        ));
    }
    for (i, call) in v.commands.iter().enumerate() {
        runner
            .check(call, &format!("validation.commands[{i}]"))
            .map_err(|e| match e {
                RunError::Invalid { field, message } => invalid(field, message),
                RunError::Unavailable(why)
                | RunError::Failed(why)
                | RunError::Limit(why)
                | RunError::Busy { message: why, .. } => {
                    EditsError::Unavailable(format!("validation cannot run here: {why}"))
                }
            })?;
    }
    Ok((v.commands, timeout))
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

/// A file after its edits, ready to be checked and written.
struct Edited {
    path: SandboxPath,
    before: Option<Vec<u8>>,
    after: String,
    change: Change,
    fallback: Option<Fallback>,
}

/// Applies one file's edits in memory.
fn edit_one(f: &Planned, current: Option<Vec<u8>>) -> Result<Edited, EditsError> {
    let path = f.path.as_str();
    let actual = current.as_deref().map(sha256_hex);
    if let Some(expected) = &f.expected_sha256 {
        let found = actual.clone().unwrap_or_else(|| "absent".into());
        if !found.eq_ignore_ascii_case(expected) {
            return Err(EditsError::Precondition(WriteError::PreconditionFailed {
                path: path.to_string(),
                expected: expected.clone(),
                actual: found,
            }));
        }
    }
    let existing = match (&f.action, &current) {
        (Action::Add(_), Some(_)) => {
            return Err(EditsError::EditFailed {
                path: path.to_string(),
                edit: 1,
                message: format!(
                    "'{path}' already exists: *** Add File creates new files only; use *** Update File"
                ),
            });
        }
        (Action::Add(_), None) => None,
        (_, None) => {
            return Err(EditsError::EditFailed {
                path: path.to_string(),
                edit: 1,
                message: format!(
                    "'{path}' does not exist; create it with a patch's *** Add File or PUT /files/{{path}}"
                ),
            });
        }
        (_, Some(bytes)) => Some(Existing::read(bytes).map_err(|why| EditsError::EditFailed {
            path: path.to_string(),
            edit: 1,
            message: format!("'{path}' cannot be edited: {why}"),
        })?),
    };
    let failed = |e: writ_checks::edit::EditError| EditsError::EditFailed {
        path: path.to_string(),
        edit: e.edit,
        message: format!("'{path}': {}", e.message),
    };
    let (view, fallback) = match (&f.action, &existing) {
        (Action::Add(content), _) => (content.clone(), None),
        (Action::Replace(edits), Some(e)) => {
            let mut text = e.view.clone();
            let mut fallback = None;
            for (i, edit) in edits.iter().enumerate() {
                let old = edit.old.replace("\r\n", "\n");
                let new = edit.new.replace("\r\n", "\n");
                let applied = apply_one(&text, &old, &new, edit.replace_all, i + 1, "edit")
                    .map_err(failed)?;
                fallback = fallback.or(applied.fallback);
                text = applied.text;
            }
            (text, fallback)
        }
        (Action::Hunks(hunks), Some(e)) => {
            patch::apply_hunks(path, &e.view, hunks).map_err(failed)?
        }
        (_, None) => {
            return Err(EditsError::EditFailed {
                path: path.to_string(),
                edit: 1,
                message: format!("'{path}' does not exist"),
            });
        }
    };
    let (after, change) = match &existing {
        Some(e) => (e.render(&view), e.change(path, &view)),
        None => (
            view.clone(),
            Change::between(path, "", &view, MAX_DIFF_BYTES),
        ),
    };
    Ok(Edited {
        path: f.path.clone(),
        before: current,
        after,
        change,
        fallback,
    })
}

/// Applies `edits`; see the module docs.
pub async fn apply(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    runner: Option<&dyn Runner>,
    editor: Editor,
    edits: Edits,
) -> Result<EditsResponse, EditsError> {
    let started = Instant::now();
    let targets: Vec<(SandboxPath, bool)> =
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
        let staged: Vec<(SandboxPath, Vec<u8>)> = edited
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
            Err(err) => {
                refused.get_or_insert(err);
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
