//! A batch's `context` entries and `constraints` texts, checked lexically: what could never name
//! a file of the workspace, or is too long, is refused by its field.

use super::*;

/// One entry of a `context` list, checked lexically: a path (a file or a folder, told apart on
/// disk) or a glob. Whether it names anything is checked before any model is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextEntry {
    /// The field that named it, for refusals (`context[2]`, `files[0].context[1]`).
    pub field: String,
    pub target: ContextTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextTarget {
    Path(RepoPath),
    /// A gitignore-style glob from the workspace root.
    Glob(String),
}

/// A `context` list as entries, each refused by its field when it could never name a file in
/// the workspace.
pub(super) fn context_entries(
    list: &[String],
    field: &str,
) -> Result<Vec<ContextEntry>, BatchError> {
    if list.len() > MAX_CONTEXT_ENTRIES {
        return Err(refuse(
            field,
            format!("at most {MAX_CONTEXT_ENTRIES} entries, got {}", list.len()),
        ));
    }
    let mut entries: Vec<ContextEntry> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(refuse(field, "must not be empty"));
        }
        let target = if raw.contains(['*', '?', '[', '{']) {
            let as_path = raw.replace(['*', '?', '[', ']', '{', '}', ','], "x");
            if raw.starts_with('!') || raw.starts_with('/') || raw.len() > 1_000 {
                return Err(refuse(
                    field,
                    "a glob names files from the workspace root (no leading '!' or '/', at most 1,000 bytes)",
                ));
            }
            RepoPath::parse_dir(as_path.trim_end_matches('/'))
                .map_err(|e| refuse(field.clone(), e.to_string()))?;
            ContextTarget::Glob(raw.to_owned())
        } else {
            let path = RepoPath::parse_dir(raw.trim_end_matches('/'))
                .map_err(|e| refuse(field.clone(), e.to_string()))?;
            ContextTarget::Path(path)
        };
        entries.push(ContextEntry { field, target });
    }
    Ok(entries)
}

pub(super) fn constraints_text(
    text: Option<String>,
    field: &str,
) -> Result<Option<String>, BatchError> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let n = text.chars().count();
    if n > MAX_CONSTRAINTS_CHARS {
        return Err(refuse(
            field,
            format!("at most {MAX_CONSTRAINTS_CHARS} characters, got {n}"),
        ));
    }
    Ok(Some(text.trim().to_owned()))
}
