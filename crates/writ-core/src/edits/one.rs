//! One file's edits applied in memory: the precondition, the file read as text, the edits (or
//! hunks) applied strictly, and the result rendered in the file's own shape; or its deletion,
//! or its move.

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
    /// What the file becomes; `None`: it is deleted.
    pub(super) after: Option<Vec<u8>>,
    /// Where `after` is written instead of `path` (a move); `path` is then removed.
    pub(super) move_to: Option<RepoPath>,
    pub(super) change: Change,
    pub(super) fallback: Option<Fallback>,
}

/// Applies one file's edits in memory. `destination` is what a move's destination holds now
/// (it must hold nothing).
pub(super) fn edit_one(
    f: &Planned,
    current: Option<Vec<u8>>,
    destination: Option<Option<Vec<u8>>>,
) -> Result<Edited, EditsError> {
    let path = f.path.as_str();
    let refused = |message: String| EditsError::EditFailed {
        path: path.to_string(),
        edit: 1,
        message,
    };
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
    let move_to = f.move_to.as_ref().map(|(to, _)| to.clone());
    if let (Some(to), Some(Some(_))) = (&move_to, &destination) {
        return Err(EditsError::EditFailed {
            path: to.to_string(),
            edit: 1,
            message: format!(
                "'{to}' already exists: a move never replaces a file; delete it first or move elsewhere"
            ),
        });
    }
    let no_edits = match &f.action {
        Action::Replace(edits) => edits.is_empty(),
        Action::Hunks(hunks) => hunks.is_empty(),
        _ => false,
    };
    match (&f.action, &current) {
        (Action::Add(_), Some(_)) => {
            return Err(refused(format!(
                "'{path}' already exists: *** Add File creates new files only; use *** Update File"
            )));
        }
        (Action::Add(content), None) => {
            return Ok(Edited {
                path: f.path.clone(),
                before: None,
                after: Some(content.clone().into_bytes()),
                move_to: None,
                change: Change::between(path, "", content, MAX_DIFF_BYTES),
                fallback: None,
            });
        }
        (_, None) => {
            return Err(refused(format!(
                "'{path}' does not exist; create it with a patch's *** Add File or PUT /files/{{path}}"
            )));
        }
        (Action::Delete, Some(bytes)) => {
            let text = String::from_utf8_lossy(bytes);
            return Ok(Edited {
                path: f.path.clone(),
                before: current.clone(),
                after: None,
                move_to: None,
                change: Change::between(path, &writ_checks::shape::view(&text), "", MAX_DIFF_BYTES),
                fallback: None,
            });
        }
        (Action::Replace(_) | Action::Hunks(_), Some(bytes)) if no_edits => {
            // A move alone: the bytes as they are, whatever they are.
            return Ok(Edited {
                path: f.path.clone(),
                before: current.clone(),
                after: Some(bytes.clone()),
                move_to,
                change: Change::between(path, "", "", MAX_DIFF_BYTES),
                fallback: None,
            });
        }
        _ => {}
    }
    let Some(bytes) = &current else {
        return Err(refused(format!("'{path}' does not exist")));
    };
    let existing = Existing::read(bytes)
        .map_err(|why| refused(format!("'{path}' cannot be edited: {why}")))?;
    let failed = |e: writ_checks::edit::EditError| EditsError::EditFailed {
        path: path.to_string(),
        edit: e.edit,
        message: format!("'{path}': {}", e.message),
    };
    let (after, view, fallback) = match &f.action {
        Action::Replace(edits) => {
            let mut text = existing.view.clone();
            let mut fallback = None;
            for (i, edit) in edits.iter().enumerate() {
                let old = edit.old.replace("\r\n", "\n");
                let new = edit.new.replace("\r\n", "\n");
                let applied = apply_one(&text, &old, &new, edit.replace_all, i + 1, "edit")
                    .map_err(failed)?;
                fallback = fallback.max(applied.fallback);
                text = applied.text;
            }
            (existing.render(&text), text, fallback)
        }
        // A patch's hunks give the bytes to write themselves (only the lines they touch
        // change).
        Action::Hunks(hunks) => {
            let p = patch::apply_hunks(path, &existing.original, hunks).map_err(failed)?;
            (p.text, p.view, p.fallback)
        }
        Action::Add(_) | Action::Delete => {
            return Err(refused(format!("'{path}' cannot be edited")));
        }
    };
    Ok(Edited {
        path: f.path.clone(),
        before: current.clone(),
        after: Some(after.into_bytes()),
        move_to,
        change: existing.change(path, &view),
        fallback,
    })
}
