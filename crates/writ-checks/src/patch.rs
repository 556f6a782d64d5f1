//! The `apply_patch` format coding agents already speak:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: path/new.py
//! +line of the new file
//! *** Delete File: path/old.py
//! *** Update File: path/changed.py
//! @@ def the_function_it_is_in():
//!  context line
//! -removed line
//! +added line
//! *** End of File
//! *** End Patch
//! ```
//!
//! [`parse`] reads it into one [`FileOp`] per file; [`apply_hunks`] applies an update's hunks
//! to a text in view form. A hunk's old lines (context and removed) are looked for in order,
//! each hunk after the previous one (and after its `@@` line, when that names one): as given,
//! then ignoring trailing whitespace, then ignoring indentation too. A hunk that matches nowhere
//! is refused with the closest lines. `*** Move to:` is not supported (refused by name).

use crate::edit::{EditError, Fallback, closest_note};

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    Add { path: String, content: String },
    Delete { path: String },
    Update { path: String, hunks: Vec<Hunk> },
}

impl FileOp {
    pub fn path(&self) -> &str {
        match self {
            FileOp::Add { path, .. } | FileOp::Delete { path } | FileOp::Update { path, .. } => {
                path
            }
        }
    }
}

/// One `@@` hunk of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hunk {
    /// The text after `@@`: a line to find first (usually the enclosing definition).
    pub anchor: Option<String>,
    /// Context and removed lines, in order.
    pub old: Vec<String>,
    /// Context and added lines, in order.
    pub new: Vec<String>,
    /// `*** End of File` followed: the old lines end the file.
    pub at_end: bool,
}

/// Why a patch could not be read: the line (from 1) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patch line {line}: {message}")]
pub struct PatchError {
    pub line: usize,
    pub message: String,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

/// Reads a patch; see the module docs.
pub fn parse(patch: &str) -> Result<Vec<FileOp>, PatchError> {
    let text = patch.replace("\r\n", "\n");
    let lines: Vec<&str> = text.lines().collect();
    let err = |line: usize, message: String| PatchError { line, message };
    let start = lines
        .iter()
        .position(|l| l.trim() == BEGIN)
        .ok_or_else(|| err(1, format!("the patch must start with \"{BEGIN}\"")))?;
    let end = lines
        .iter()
        .rposition(|l| l.trim() == END)
        .filter(|&e| e > start)
        .ok_or_else(|| err(lines.len(), format!("the patch must end with \"{END}\"")))?;
    let mut ops = Vec::new();
    let mut i = start + 1;
    while i < end {
        let line = lines[i];
        if let Some(path) = line.strip_prefix(ADD) {
            let mut content = String::new();
            i += 1;
            while i < end && !lines[i].starts_with("*** ") {
                let Some(body) = lines[i].strip_prefix('+') else {
                    return Err(err(
                        i + 1,
                        format!(
                            "a line of an added file must start with '+': {:?}",
                            lines[i]
                        ),
                    ));
                };
                content.push_str(body);
                content.push('\n');
                i += 1;
            }
            ops.push(FileOp::Add {
                path: path.trim().to_string(),
                content,
            });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: path.trim().to_string(),
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = path.trim().to_string();
            i += 1;
            if i < end && lines[i].starts_with(MOVE) {
                return Err(err(
                    i + 1,
                    format!(
                        "\"{}\" (moving a file) is not supported: delete it and add it under the new path",
                        MOVE.trim()
                    ),
                ));
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            while i < end && !(lines[i].starts_with("*** ") && lines[i] != END_OF_FILE) {
                let l = lines[i];
                if let Some(anchor) = l.strip_prefix("@@") {
                    let anchor = anchor.trim();
                    hunks.push(Hunk {
                        anchor: (!anchor.is_empty()).then(|| anchor.to_string()),
                        ..Hunk::default()
                    });
                } else if l == END_OF_FILE {
                    match hunks.last_mut() {
                        Some(h) => h.at_end = true,
                        None => {
                            return Err(err(i + 1, format!("\"{END_OF_FILE}\" before any hunk")));
                        }
                    }
                } else {
                    if hunks.is_empty() {
                        hunks.push(Hunk::default());
                    }
                    let Some(h) = hunks.last_mut() else { break };
                    match l.chars().next() {
                        Some('+') => h.new.push(l[1..].to_string()),
                        Some('-') => h.old.push(l[1..].to_string()),
                        Some(' ') => {
                            h.old.push(l[1..].to_string());
                            h.new.push(l[1..].to_string());
                        }
                        // An empty line inside a hunk is an empty context line (editors strip
                        // the lone space).
                        None => {
                            h.old.push(String::new());
                            h.new.push(String::new());
                        }
                        Some(_) => {
                            return Err(err(
                                i + 1,
                                format!("a hunk line must start with ' ', '-' or '+': {l:?}"),
                            ));
                        }
                    }
                }
                i += 1;
            }
            if hunks.is_empty() {
                return Err(err(i, format!("the update of '{path}' has no hunk")));
            }
            ops.push(FileOp::Update { path, hunks });
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(err(
                i + 1,
                format!("expected \"{ADD}\", \"{DELETE}\" or \"{UPDATE}\", found {line:?}"),
            ));
        }
    }
    if ops.is_empty() {
        return Err(err(start + 1, "the patch changes no file".into()));
    }
    Ok(ops)
}

/// How strictly a hunk's lines are compared.
#[derive(Clone, Copy, PartialEq)]
enum Compare {
    Exact,
    TrimEnd,
    Trim,
}

impl Compare {
    fn eq(self, a: &str, b: &str) -> bool {
        match self {
            Compare::Exact => a == b,
            Compare::TrimEnd => a.trim_end() == b.trim_end(),
            Compare::Trim => a.trim() == b.trim(),
        }
    }
}

fn find(lines: &[&str], wanted: &[String], from: usize, at_end: bool) -> Option<(usize, Compare)> {
    if wanted.len() > lines.len() {
        return None;
    }
    for how in [Compare::Exact, Compare::TrimEnd, Compare::Trim] {
        let matches = |start: usize| {
            wanted
                .iter()
                .zip(&lines[start..])
                .all(|(w, l)| how.eq(l, w))
        };
        let last = lines.len() - wanted.len();
        if at_end {
            if last >= from && matches(last) {
                return Some((last, how));
            }
            continue;
        }
        if let Some(start) = (from..=last).find(|&s| matches(s)) {
            return Some((start, how));
        }
    }
    None
}

/// Applies an update's hunks to `text` (view form); `path` names the file in a refusal.
pub fn apply_hunks(
    path: &str,
    text: &str,
    hunks: &[Hunk],
) -> Result<(String, Option<Fallback>), EditError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 8);
    let mut cursor = 0usize;
    let mut fallback = None;
    for (n, hunk) in hunks.iter().enumerate() {
        let edit = n + 1;
        let mut from = cursor;
        if let Some(anchor) = &hunk.anchor {
            let found = (cursor..lines.len())
                .find(|&i| lines[i] == anchor)
                .or_else(|| (cursor..lines.len()).find(|&i| lines[i].trim() == anchor.trim()));
            match found {
                Some(i) => from = i + usize::from(hunk.old.first().is_none_or(|o| o != anchor)),
                None => {
                    return Err(EditError {
                        edit,
                        message: format!(
                            "'{path}' hunk {edit}: its @@ line {anchor:?} was not found{}",
                            closest_note(&lines[cursor.min(lines.len())..].join("\n"), anchor)
                        ),
                    });
                }
            }
        }
        let start = if hunk.old.is_empty() {
            // Only additions: after the anchor, else at the end of the file.
            if hunk.anchor.is_some() {
                from
            } else {
                lines.len()
            }
        } else {
            match find(&lines, &hunk.old, from, hunk.at_end) {
                Some((start, how)) => {
                    if how != Compare::Exact {
                        fallback = Some(Fallback::Whitespace);
                    }
                    start
                }
                None => {
                    let old = hunk.old.join("\n");
                    let mut message = format!(
                        "'{path}' hunk {edit}: its context and removed lines were not found{}",
                        if from > 0 {
                            format!(" after line {from}")
                        } else {
                            String::new()
                        }
                    );
                    message.push_str(&closest_note(text, &old));
                    return Err(EditError { edit, message });
                }
            }
        };
        out.extend(lines[cursor..start].iter().map(|l| l.to_string()));
        out.extend(hunk.new.iter().cloned());
        cursor = start + hunk.old.len();
    }
    out.extend(
        lines[cursor.min(lines.len())..]
            .iter()
            .map(|l| l.to_string()),
    );
    let mut joined = out.join("\n");
    if !joined.is_empty() && (text.ends_with('\n') || text.is_empty()) {
        joined.push('\n');
    }
    Ok((joined, fallback))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "*** Begin Patch\n*** Add File: src/new.py\n+def new():\n+    return 1\n*** Update File: src/app.py\n@@ def handler():\n-    return 1\n+    return 2\n*** Delete File: src/old.py\n*** End Patch\n";

    #[test]
    fn a_patch_reads_into_one_operation_per_file() {
        let ops = parse(PATCH).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0],
            FileOp::Add {
                path: "src/new.py".into(),
                content: "def new():\n    return 1\n".into()
            }
        );
        let FileOp::Update { path, hunks } = &ops[1] else {
            panic!()
        };
        assert_eq!(path, "src/app.py");
        assert_eq!(hunks[0].anchor.as_deref(), Some("def handler():"));
        assert_eq!(hunks[0].old, vec!["    return 1"]);
        assert_eq!(
            ops[2],
            FileOp::Delete {
                path: "src/old.py".into()
            }
        );
    }

    #[test]
    fn malformed_patches_name_the_line() {
        assert_eq!(parse("hello").unwrap_err().line, 1);
        let e = parse("*** Begin Patch\n*** Update File: a\n@@\n?x\n*** End Patch").unwrap_err();
        assert_eq!(e.line, 4);
        let e = parse("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch")
            .unwrap_err();
        assert!(e.message.contains("not supported"), "{e}");
    }

    #[test]
    fn hunks_apply_after_their_anchor_and_keep_the_rest() {
        let text = "def other():\n    return 1\n\ndef handler():\n    return 1\n";
        let FileOp::Update { hunks, .. } = &parse(PATCH).unwrap()[1] else {
            panic!()
        };
        let (out, fallback) = apply_hunks("src/app.py", text, hunks).unwrap();
        assert_eq!(
            out,
            "def other():\n    return 1\n\ndef handler():\n    return 2\n"
        );
        assert_eq!(fallback, None);
    }

    #[test]
    fn a_hunk_that_matches_nowhere_is_refused_with_the_closest_lines() {
        let hunks = [Hunk {
            old: vec!["def handler():".into(), "    return 7".into()],
            new: vec!["def handler():".into(), "    return 8".into()],
            ..Hunk::default()
        }];
        let e = apply_hunks("a.py", "def handler():\n    return 1\n", &hunks).unwrap_err();
        assert!(e.message.starts_with("'a.py' hunk 1:"), "{}", e.message);
        assert!(
            e.message.contains("closest text is at lines 1-2"),
            "{}",
            e.message
        );
    }

    #[test]
    fn indentation_differences_apply_through_the_fallback() {
        let hunks = [Hunk {
            old: vec!["return 1".into()],
            new: vec!["    return 2".into()],
            ..Hunk::default()
        }];
        let (out, fallback) = apply_hunks("a.py", "def f():\n    return 1\n", &hunks).unwrap();
        assert_eq!(out, "def f():\n    return 2\n");
        assert_eq!(fallback, Some(Fallback::Whitespace));
    }

    #[test]
    fn additions_without_context_go_to_the_end() {
        let hunks = [Hunk {
            new: vec!["z = 3".into()],
            ..Hunk::default()
        }];
        let (out, _) = apply_hunks("a.py", "x = 1\n", &hunks).unwrap();
        assert_eq!(out, "x = 1\nz = 3\n");
    }
}
