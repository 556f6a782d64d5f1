//! One file's edits applied in memory: the precondition, the file read as text, the edits (or
//! hunks) applied strictly, and the result rendered in the file's own shape.

use writ_checks::edit::{Fallback, apply_one};
use writ_checks::patch;
use writ_checks::shape::Change;

use super::EditsError;
use super::request::{Action, Planned};
use crate::content::sha256_hex;
use crate::files::WriteError;
use crate::path::RepoPath;
use crate::synthesis::update::{Existing, MAX_DIFF_BYTES};

/// A file after its edits, ready to be checked and written.
pub(super) struct Edited {
    pub(super) path: RepoPath,
    pub(super) before: Option<Vec<u8>>,
    pub(super) after: String,
    pub(super) change: Change,
    pub(super) fallback: Option<Fallback>,
}

/// Applies one file's edits in memory.
pub(super) fn edit_one(f: &Planned, current: Option<Vec<u8>>) -> Result<Edited, EditsError> {
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
