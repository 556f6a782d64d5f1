//! Why a change set could not be read, applied or rejected. Every refusal changes nothing.

use serde::Serialize;

use super::{ChangeState, HunkView};
use crate::files::WriteError;
use crate::store::StoreError;

/// A file that no longer holds what the change was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ChangedFile {
    pub path: String,
    /// What the change was made from (null: the file did not exist).
    pub base_sha256: Option<String>,
    /// What the file holds now (null: it does not exist).
    pub current_sha256: Option<String>,
}

/// A file whose hunks could not be merged into what it holds now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ConflictedFile {
    pub path: String,
    pub current_sha256: Option<String>,
    /// The hunks whose lines were changed since too.
    pub hunks: Vec<HunkView>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// No such change set, or one the caller may not see: the same answer for both.
    #[error("no change set {0}")]
    NotFound(String),
    #[error(
        "change set {id} expired at {at} (WRIT_REVIEW_TTL) with hunks still open; nothing was changed"
    )]
    Expired { id: String, at: String },
    /// Everything it names was decided already.
    #[error("{message}")]
    Decided { state: ChangeState, message: String },
    /// The request is malformed: the field and why.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A hunk id the file's change does not have.
    #[error("{field}: '{path}' has no hunk '{hunk}'; nothing was changed")]
    UnknownHunk {
        field: String,
        path: String,
        hunk: String,
    },
    #[error(
        "{} changed since the change was made; nothing was applied (pass rebase to merge the hunks into what the files hold now)",
        names(.0.iter().map(|c| c.path.as_str()))
    )]
    ChangedSince(Vec<ChangedFile>),
    #[error(
        "the hunks {} conflict with changes made since to {}; nothing was applied",
        names(.0.iter().flat_map(|c| c.hunks.iter().map(|h| h.id.as_str()))),
        names(.0.iter().map(|c| c.path.as_str()))
    )]
    Conflict(Vec<ConflictedFile>),
    #[error("'{path}': {source}")]
    Write {
        path: String,
        #[source]
        source: WriteError,
    },
    #[error("the audit log cannot be read or written, so nothing was changed: {0}")]
    Audit(#[from] StoreError),
    /// Other decisions on the same change set kept landing first.
    #[error(
        "change set {0} was being decided by other requests at the same time; nothing was changed, read it again and retry"
    )]
    Busy(String),
}

fn names<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items
        .map(|p| format!("'{p}'"))
        .collect::<Vec<_>>()
        .join(", ")
}
