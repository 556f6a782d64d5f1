//! An edit request as sent, and its parsing into bounded, checked [`Edits`]: exactly one of
//! `str_replace` files and a patch, paths checked, at most [`super::MAX_EDIT_FILES`] files, every
//! path (move destinations included) named once, validation commands checked against the
//! runner.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use writ_checks::patch::{self, FileOp};

use super::{EditsError, MAX_EDIT_FILES, MAX_EDITS_PER_FILE};
use crate::execution::{CommandCall, CommandRunner, RunError};
use crate::path::RepoPath;
use crate::synthesis::batch::MAX_VALIDATION_COMMANDS;

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
    /// Commit what the edits wrote, where the workspace is a git repository (one commit of
    /// exactly its files). Overrides the workspace's setting and `WRIT_GIT_COMMIT`.
    #[serde(default)]
    pub commit: Option<bool>,
    /// Write nothing: propose the edited files for review, as a change set to apply or reject
    /// per file and per hunk (`GET /changes/{id}`). Absent: as the server is set
    /// (`WRIT_REVIEW`). Deletions and moves are not proposed: send them with `review: false`.
    #[serde(default)]
    pub review: Option<bool>,
}

/// One file's `str_replace` edits, applied in order; or its deletion; or its move (with or
/// without edits).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEdits {
    pub path: String,
    /// Refuse unless the file holds this SHA-256 (hex).
    #[serde(default)]
    pub expected_sha256: Option<String>,
    /// Applied in order; may be empty only with `delete` or `move_to`.
    #[serde(default)]
    pub edits: Vec<StrReplace>,
    /// Delete the file (no `edits`, no `move_to`); the audit keeps what it held.
    #[serde(default)]
    pub delete: bool,
    /// Write the file, edited, under this path instead, and remove it from `path`; the
    /// destination must not exist.
    #[serde(default)]
    pub move_to: Option<String>,
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
pub(super) enum Action {
    Replace(Vec<StrReplace>),
    Hunks(Vec<patch::Hunk>),
    Add(String),
    Delete,
}

/// One file of a parsed request.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) path: RepoPath,
    pub(super) field: String,
    pub(super) expected_sha256: Option<String>,
    pub(super) action: Action,
    /// Where the result is written instead (the file is then removed from `path`), and the
    /// field that named it.
    pub(super) move_to: Option<(RepoPath, String)>,
}

/// A parsed, bounded edit request.
#[derive(Debug, Clone)]
pub struct Edits {
    pub(super) files: Vec<Planned>,
    pub(super) validation: Option<(Vec<CommandCall>, Duration)>,
    pub(super) dry_run: bool,
    pub(super) body_sha256: String,
    /// `review` as sent (`None`: as the server is set; see [`Edits::reviewed`]).
    pub(super) review_asked: Option<bool>,
    /// How long the change set may be applied, when the edits are proposed for review.
    pub(super) review: Option<Duration>,
    /// `commit` as sent, for the change set's apply.
    pub(super) commit: Option<bool>,
}

impl Edits {
    /// Every path the edits change — each file edited, added or deleted, and where a move puts
    /// it — with the field that named it; none for a dry run, which changes nothing.
    pub fn changed_paths(&self) -> Vec<(&str, &str)> {
        if self.dry_run {
            return Vec::new();
        }
        let mut paths = Vec::new();
        for f in &self.files {
            paths.push((f.path.as_str(), f.field.as_str()));
            if let Some((to, field)) = &f.move_to {
                paths.push((to.as_str(), field.as_str()));
            }
        }
        paths
    }

    /// The edits with the server's review settings applied: proposed for review when the
    /// request asked, or did not say and the server proposes by default. A request that
    /// deletes or moves files is not proposed (a change set holds writes): refused naming
    /// `review`, nothing changed.
    pub fn reviewed(
        mut self,
        settings: &crate::changes::ReviewSettings,
    ) -> Result<Self, EditsError> {
        if self.dry_run || !settings.wanted(self.review_asked) {
            return Ok(self);
        }
        if self
            .files
            .iter()
            .any(|f| f.move_to.is_some() || matches!(f.action, Action::Delete))
        {
            return Err(invalid(
                "review",
                "deletions and moves are not proposed for review (a change set holds writes): send them with review: false, apart from the rest",
            ));
        }
        self.review = Some(settings.ttl);
        Ok(self)
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> EditsError {
    EditsError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn parse_path(raw: &str, field: &str) -> Result<RepoPath, EditsError> {
    RepoPath::parse_nonempty(raw).map_err(|e| invalid(field, e.to_string()))
}

impl EditsRequest {
    /// Validates the request into [`Edits`]; `body_sha256` identifies it in the audit log.
    pub fn parse(
        self,
        body_sha256: String,
        runner: Option<&dyn CommandRunner>,
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
                        if f.delete && (!f.edits.is_empty() || f.move_to.is_some()) {
                            return Err(invalid(
                                format!("{field}.delete"),
                                "a deleted file takes no edits and no move_to",
                            ));
                        }
                        let bare = f.edits.is_empty() && (f.delete || f.move_to.is_some());
                        if !bare && (f.edits.is_empty() || f.edits.len() > MAX_EDITS_PER_FILE) {
                            return Err(invalid(
                                format!("{field}.edits"),
                                format!(
                                    "between 1 and {MAX_EDITS_PER_FILE} edits (none only with delete or move_to), got {}",
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
                        let move_to = match &f.move_to {
                            Some(to) => {
                                let to_field = format!("{field}.move_to");
                                Some((parse_path(to, &to_field)?, to_field))
                            }
                            None => None,
                        };
                        Ok(Planned {
                            path: parse_path(&f.path, &format!("{field}.path"))?,
                            field: format!("{field}.path"),
                            expected_sha256: f.expected_sha256,
                            action: if f.delete {
                                Action::Delete
                            } else {
                                Action::Replace(f.edits)
                            },
                            move_to,
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
                    let (action, move_to) = match op {
                        FileOp::Add { content, .. } => (Action::Add(content), None),
                        FileOp::Update { hunks, move_to, .. } => {
                            let move_to = match move_to {
                                Some(to) => {
                                    let to_field = format!("patch ({to})");
                                    Some((parse_path(&to, &to_field)?, to_field))
                                }
                                None => None,
                            };
                            (Action::Hunks(hunks), move_to)
                        }
                        FileOp::Delete { .. } => (Action::Delete, None),
                    };
                    planned.push(Planned {
                        expected_sha256: expected.remove(path.as_str()),
                        path,
                        field,
                        action,
                        move_to,
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
        // Every path a request touches (sources and move destinations) once.
        let mut touched: Vec<(&RepoPath, &str)> = Vec::new();
        for f in &files {
            let dest = f.move_to.as_ref().map(|(p, field)| (p, field.as_str()));
            for (path, field) in std::iter::once((&f.path, f.field.as_str())).chain(dest) {
                if touched.iter().any(|(p, _)| *p == path) {
                    return Err(invalid(
                        field,
                        format!(
                            "'{path}' is named twice (as a file or a move's destination); put all of a file's edits in one entry"
                        ),
                    ));
                }
                touched.push((path, field));
            }
        }
        if self.validation.is_some()
            && files
                .iter()
                .any(|f| f.move_to.is_some() || matches!(f.action, Action::Delete))
        {
            return Err(invalid(
                "validation",
                "cannot check a request that deletes or moves files: the checks' scratch copy only adds and changes files; send the deletes and moves on their own",
            ));
        }
        let validation = self
            .validation
            .map(|v| parse_validation(v, runner))
            .transpose()?;
        if self.review == Some(true) && self.dry_run {
            return Err(invalid(
                "review",
                "a dry run keeps nothing to review: ask for dry_run or for review, not both",
            ));
        }
        Ok(Edits {
            files,
            validation,
            dry_run: self.dry_run,
            body_sha256,
            review_asked: self.review,
            review: None,
            commit: self.commit,
        })
    }
}

fn parse_validation(
    v: EditValidation,
    runner: Option<&dyn CommandRunner>,
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
