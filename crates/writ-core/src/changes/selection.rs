//! Which hunks a decision names: every open hunk when it names nothing; a file named, each of
//! its open hunks; a hunk named, that hunk. A path the change set does not hold, or a hunk its
//! file's change does not have, is refused by name; so is a hunk already decided.

use std::collections::BTreeMap;

use super::{ChangeError, ChangeSet, HunkState};

/// One file of a decision: its place in the change set and the hunks taken, in the file's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Chosen {
    pub(super) file: usize,
    pub(super) hunks: Vec<String>,
}

pub(super) fn select(
    set: &ChangeSet,
    files: &[String],
    hunks: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<Chosen>, ChangeError> {
    let mut wanted: Vec<Vec<String>> = set.files.iter().map(|_| Vec::new()).collect();
    let everything = files.is_empty() && hunks.is_empty();
    let index = |path: &str, field: String| {
        set.files
            .iter()
            .position(|f| f.path == path)
            .ok_or_else(|| ChangeError::Invalid {
                field,
                message: format!(
                    "'{path}' is not a file of change set {}; its files are {}",
                    set.id,
                    set.files
                        .iter()
                        .map(|f| format!("'{}'", f.path))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    };
    for (i, path) in files.iter().enumerate() {
        let at = index(path, format!("files[{i}]"))?;
        let open = set.hunks_in(&set.files[at], HunkState::Open);
        if open.is_empty() {
            return Err(decided(set, &set.files[at].path, None));
        }
        wanted[at].extend(open);
    }
    for (path, ids) in hunks {
        let at = index(path, format!("hunks.{path}"))?;
        let file = &set.files[at];
        for (j, id) in ids.iter().enumerate() {
            if file.hunk(id).is_none() {
                return Err(ChangeError::UnknownHunk {
                    field: format!("hunks.{path}[{j}]"),
                    path: path.clone(),
                    hunk: id.clone(),
                });
            }
            if set.hunk_state(path, id) != HunkState::Open {
                return Err(decided(set, path, Some(id)));
            }
            wanted[at].push(id.clone());
        }
    }
    if everything {
        for (at, f) in set.files.iter().enumerate() {
            wanted[at] = set.hunks_in(f, HunkState::Open);
        }
    }
    let chosen: Vec<Chosen> = wanted
        .into_iter()
        .enumerate()
        .filter(|(_, w)| !w.is_empty())
        .map(|(at, w)| Chosen {
            file: at,
            // In the file's order, each once.
            hunks: set.files[at]
                .hunks
                .iter()
                .filter(|h| w.contains(&h.id))
                .map(|h| h.id.clone())
                .collect(),
        })
        .collect();
    if chosen.is_empty() {
        return Err(ChangeError::Decided {
            state: set.state(chrono::Utc::now()),
            message: format!(
                "change set {} has no open hunk left: it is {}",
                set.id,
                set.state(chrono::Utc::now())
            ),
        });
    }
    Ok(chosen)
}

/// The refusal of a file (or one of its hunks) already decided.
fn decided(set: &ChangeSet, path: &str, hunk: Option<&str>) -> ChangeError {
    let state = match hunk {
        Some(id) => set.hunk_state(path, id),
        None => match set.file(path) {
            Some(f) if set.hunks_in(f, HunkState::Applied).is_empty() => HunkState::Rejected,
            _ => HunkState::Applied,
        },
    };
    let (what, change_state) = match state {
        HunkState::Rejected => ("rejected", super::ChangeState::Rejected),
        _ => ("applied", super::ChangeState::Applied),
    };
    let message = match hunk {
        Some(id) => format!("hunk '{id}' of '{path}' was already {what}; nothing was changed"),
        None => format!("every hunk of '{path}' was already decided; nothing was changed"),
    };
    ChangeError::Decided {
        state: change_state,
        message,
    }
}
