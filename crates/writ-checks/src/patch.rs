//! The `apply_patch` format coding agents already speak:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: path/new.py
//! +line of the new file
//! *** Delete File: path/old.py
//! *** Update File: path/changed.py
//! *** Move to: path/renamed.py
//! @@ def the_function_it_is_in():
//!  context line
//! -removed line
//! +added line
//! *** End of File
//! *** End Patch
//! ```
//!
//! [`parse`] reads it into one [`FileOp`] per file; [`apply_hunks`] applies an update's hunks
//! to a file's text. A hunk's old lines (context and removed) are looked for in order, each
//! hunk after the previous one (and after its `@@` lines, when it names some): as given, then
//! ignoring trailing whitespace, then ignoring indentation too, then also reading typographic
//! punctuation as ASCII. A hunk that matches nowhere is refused with the closest lines. Only
//! the lines a hunk removes or adds change: every other line keeps its bytes, a context line
//! matched loosely stays as the file has it, and a line that replaces another takes that
//! line's ending.

use crate::edit::{EditError, Fallback, closest_note, fold_punctuation};
use crate::shape::{BOM, dominant_ending, split_lines, view};

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    /// Hunks to apply, and (`*** Move to:`) the path the result is written to instead; a move
    /// may have no hunk.
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
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

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// ` line`: kept (as the file has it).
    Context(String),
    /// `-line`
    Removed(String),
    /// `+line`
    Added(String),
}

/// One `@@` hunk of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hunk {
    /// The texts after its `@@` lines: lines to find first, in order (usually the enclosing
    /// definitions, outermost first).
    pub anchors: Vec<String>,
    pub lines: Vec<HunkLine>,
    /// `*** End of File` followed: the old lines end the file.
    pub at_end: bool,
}

impl Hunk {
    /// Context and removed lines, in order: what must be found.
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Removed(t) => Some(t.as_str()),
                HunkLine::Added(_) => None,
            })
            .collect()
    }
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

/// A line that starts a file's part (leading and trailing whitespace ignored, as for the
/// Begin and End markers).
fn is_file_header(line: &str) -> bool {
    let line = line.trim();
    [ADD, DELETE, UPDATE]
        .iter()
        .any(|h| line.starts_with(h.trim_end()))
}

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
        let line = lines[i].trim();
        if let Some(path) = line.strip_prefix(ADD) {
            let mut content = String::new();
            i += 1;
            while i < end && !is_file_header(lines[i]) {
                let l = lines[i];
                i += 1;
                if let Some(body) = l.strip_prefix('+') {
                    content.push_str(body);
                    content.push('\n');
                } else if l.trim().is_empty() {
                    // A bare empty line is an empty line of the file, unless only blank lines
                    // follow it (what models leave before the next marker).
                    let more = lines[i..end]
                        .iter()
                        .take_while(|l| !is_file_header(l))
                        .any(|l| !l.trim().is_empty());
                    if more {
                        content.push('\n');
                    }
                } else {
                    return Err(err(
                        i,
                        format!("a line of an added file must start with '+': {l:?}"),
                    ));
                }
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
            let header = i + 1;
            i += 1;
            let mut move_to = None;
            if i < end
                && let Some(dest) = lines[i].trim().strip_prefix(MOVE)
            {
                move_to = Some(dest.trim().to_string());
                i += 1;
            }
            let (hunks, next) = parse_hunks(&lines, i, end, &path)?;
            i = next;
            if hunks.is_empty() && move_to.is_none() {
                return Err(err(header, format!("the update of '{path}' has no hunk")));
            }
            ops.push(FileOp::Update {
                path,
                move_to,
                hunks,
            });
        } else if line.is_empty() {
            i += 1;
        } else {
            return Err(err(
                i + 1,
                format!(
                    "expected \"{ADD}\", \"{DELETE}\" or \"{UPDATE}\", found {:?}",
                    lines[i]
                ),
            ));
        }
    }
    if ops.is_empty() {
        return Err(err(start + 1, "the patch changes no file".into()));
    }
    Ok(ops)
}

/// The hunks of an update, from line `i` up to the next file's part or `end`; and where
/// they stop.
fn parse_hunks(
    lines: &[&str],
    mut i: usize,
    end: usize,
    path: &str,
) -> Result<(Vec<Hunk>, usize), PatchError> {
    let err = |line: usize, message: String| PatchError { line, message };
    let mut hunks: Vec<Hunk> = Vec::new();
    // The line each hunk starts at, to name it when it turns out empty.
    let mut starts: Vec<usize> = Vec::new();
    while i < end && !is_file_header(lines[i]) {
        let l = lines[i];
        let open = hunks.last().is_some_and(|h| !h.at_end);
        if let Some(anchor) = l.strip_prefix("@@") {
            // `@@` lines in a row narrow one hunk (a class, then a method of it).
            if !hunks
                .last()
                .is_some_and(|h| h.lines.is_empty() && !h.at_end)
            {
                hunks.push(Hunk::default());
                starts.push(i + 1);
            }
            // The text after `@@ `, its own indentation kept (a method under its class).
            let anchor = anchor.strip_prefix(' ').unwrap_or(anchor).trim_end();
            if let (Some(h), false) = (hunks.last_mut(), anchor.trim().is_empty()) {
                h.anchors.push(anchor.to_string());
            }
        } else if l.trim() == END_OF_FILE {
            match hunks.last_mut() {
                Some(h) if open && !h.lines.is_empty() => h.at_end = true,
                _ => {
                    return Err(err(
                        i + 1,
                        format!("\"{END_OF_FILE}\" must end a hunk that has lines"),
                    ));
                }
            }
        } else if l.trim().is_empty() && !open {
            // Blank lines between hunks.
        } else {
            if !open {
                if !hunks.is_empty() {
                    return Err(err(
                        i + 1,
                        format!("a hunk after \"{END_OF_FILE}\" must start with \"@@\""),
                    ));
                }
                hunks.push(Hunk::default());
                starts.push(i + 1);
            }
            let Some(h) = hunks.last_mut() else { break };
            let line = match l.chars().next() {
                Some('+') => HunkLine::Added(l[1..].to_string()),
                Some('-') => HunkLine::Removed(l[1..].to_string()),
                Some(' ') => HunkLine::Context(l[1..].to_string()),
                // An empty line inside a hunk is an empty context line (editors strip the
                // lone space).
                None => HunkLine::Context(String::new()),
                Some(_) => {
                    return Err(err(
                        i + 1,
                        format!("a hunk line must start with ' ', '-' or '+': {l:?}"),
                    ));
                }
            };
            h.lines.push(line);
        }
        i += 1;
    }
    if let Some(n) = hunks.iter().position(|h| h.lines.is_empty()) {
        return Err(err(
            starts[n],
            format!("hunk {} of '{path}' has no lines", n + 1),
        ));
    }
    Ok((hunks, i))
}

/// How strictly lines are compared, strictest first.
#[derive(Clone, Copy, PartialEq)]
enum Compare {
    Exact,
    TrimEnd,
    Trim,
    Punctuation,
}

const COMPARES: [Compare; 4] = [
    Compare::Exact,
    Compare::TrimEnd,
    Compare::Trim,
    Compare::Punctuation,
];

impl Compare {
    fn same(self, a: &str, b: &str) -> bool {
        match self {
            Compare::Exact => a == b,
            Compare::TrimEnd => a.trim_end() == b.trim_end(),
            Compare::Trim => a.trim() == b.trim(),
            Compare::Punctuation => fold_punctuation(a) == fold_punctuation(b),
        }
    }

    fn fallback(self) -> Option<Fallback> {
        match self {
            Compare::Exact => None,
            Compare::TrimEnd | Compare::Trim => Some(Fallback::Whitespace),
            Compare::Punctuation => Some(Fallback::Punctuation),
        }
    }
}

fn find(lines: &[&str], wanted: &[&str], from: usize, at_end: bool) -> Option<(usize, Compare)> {
    if wanted.len() > lines.len() {
        return None;
    }
    let last = lines.len() - wanted.len();
    for how in COMPARES {
        let matches = |start: usize| {
            wanted
                .iter()
                .zip(&lines[start..])
                .all(|(w, l)| how.same(l, w))
        };
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

/// An update applied: the bytes to write, the same in view form, and the loosest fallback a
/// hunk needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patched {
    pub text: String,
    pub view: String,
    pub fallback: Option<Fallback>,
}

/// Where a hunk applies: its old lines at `start..start + len` of the file (the hunk's
/// trailing blank context lines dropped, `dropped` of them, when only that made it match).
struct Placed<'h> {
    start: usize,
    len: usize,
    hunk: &'h Hunk,
    dropped: usize,
}

/// Applies an update's hunks to `original` (the file's text as it is on disk: BOM, line
/// endings and all); `path` names the file in a refusal.
pub fn apply_hunks(path: &str, original: &str, hunks: &[Hunk]) -> Result<Patched, EditError> {
    let had_bom = original.starts_with(BOM);
    let body = original.strip_prefix(BOM).unwrap_or(original);
    let file = split_lines(body);
    let lines: Vec<&str> = file.iter().map(|(l, _)| *l).collect();
    let mut placed: Vec<Placed> = Vec::with_capacity(hunks.len());
    let mut cursor = 0usize;
    let mut fallback = None;
    for (n, hunk) in hunks.iter().enumerate() {
        let edit = n + 1;
        let mut from = cursor;
        let old = hunk.old_lines();
        for anchor in &hunk.anchors {
            let found = COMPARES.iter().find_map(|how| {
                (from..lines.len())
                    .find(|&i| how.same(lines[i], anchor))
                    .map(|i| (i, *how))
            });
            match found {
                Some((i, how)) => {
                    fallback = fallback.max(how.fallback());
                    // The anchor may be the hunk's own first line.
                    let is_first = old.first().is_some_and(|o| o.trim() == anchor.trim());
                    from = i + usize::from(!is_first);
                }
                None => {
                    return Err(EditError {
                        edit,
                        message: format!(
                            "'{path}' hunk {edit}: its @@ line {anchor:?} was not found{}",
                            closest_note(&lines[from.min(lines.len())..].join("\n"), anchor)
                        ),
                    });
                }
            }
        }
        if old.is_empty() {
            // Only additions: after the anchor, else at the end of the file — then without
            // moving the cursor, so the next hunk is still looked for where this one was.
            let start = if hunk.anchors.is_empty() {
                lines.len()
            } else {
                cursor = from;
                from
            };
            placed.push(Placed {
                start,
                len: 0,
                hunk,
                dropped: 0,
            });
            continue;
        }
        let mut found = find(&lines, &old, from, hunk.at_end).map(|f| (f, 0));
        // A blank line before the next marker reads as an empty context line; the file need
        // not have it.
        let blank_tail = hunk
            .lines
            .iter()
            .rev()
            .take_while(|l| matches!(l, HunkLine::Context(t) if t.is_empty()))
            .count();
        if found.is_none() && blank_tail > 0 && blank_tail < old.len() {
            found = find(&lines, &old[..old.len() - blank_tail], from, hunk.at_end)
                .map(|f| (f, blank_tail));
        }
        match found {
            Some(((start, how), dropped)) => {
                fallback = fallback.max(how.fallback());
                let len = old.len() - dropped;
                placed.push(Placed {
                    start,
                    len,
                    hunk,
                    dropped,
                });
                cursor = start + len;
            }
            None => {
                let mut message = format!(
                    "'{path}' hunk {edit}: its context and removed lines were not found{}",
                    if from > 0 {
                        format!(" after line {from}")
                    } else {
                        String::new()
                    }
                );
                message.push_str(&closest_note(&lines.join("\n"), &old.join("\n")));
                return Err(EditError { edit, message });
            }
        }
    }
    // Additions at the end of the file come after every other change.
    placed.sort_by_key(|p| p.start);
    if let Some(w) = placed
        .windows(2)
        .position(|w| w[1].start < w[0].start + w[0].len)
    {
        return Err(EditError {
            edit: w + 2,
            message: format!("'{path}': two hunks change the same lines; merge them into one"),
        });
    }
    let text = render(&file, had_bom, &placed);
    let view = view(&text);
    Ok(Patched {
        text,
        view,
        fallback,
    })
}

/// The file with its hunks applied: untouched and context lines as the file has them, added
/// lines with the ending of the removed line they stand for (the file's most common ending
/// where they replace none), and the final newline present or missing as it was.
fn render(file: &[(&str, &str)], had_bom: bool, placed: &[Placed]) -> String {
    let ending = dominant_ending(file);
    let mut out: Vec<(&str, &str)> = Vec::with_capacity(file.len() + 8);
    let mut at = 0usize;
    for p in placed {
        out.extend_from_slice(&file[at..p.start]);
        let mut k = p.start;
        // Endings of the lines removed since the last context line, and how many lines were
        // added in their place so far.
        let mut removed: Vec<&str> = Vec::new();
        let mut added = 0usize;
        let kept = p.hunk.lines.len() - p.dropped;
        for line in &p.hunk.lines[..kept] {
            match line {
                HunkLine::Context(_) => {
                    out.push(file[k]);
                    k += 1;
                    removed.clear();
                    added = 0;
                }
                HunkLine::Removed(_) => {
                    removed.push(file[k].1);
                    k += 1;
                }
                HunkLine::Added(t) => {
                    let end = removed
                        .get(added)
                        .or(removed.last())
                        .copied()
                        .unwrap_or(ending);
                    out.push((t.as_str(), end));
                    added += 1;
                }
            }
        }
        at = p.start + p.len;
    }
    out.extend_from_slice(&file[at.min(file.len())..]);
    let final_newline = file.last().is_none_or(|(_, end)| !end.is_empty());
    let mut text =
        String::with_capacity(out.iter().map(|(l, e)| l.len() + e.len()).sum::<usize>() + 3);
    if had_bom {
        text.push(BOM);
    }
    let count = out.len();
    for (i, (line, end)) in out.into_iter().enumerate() {
        text.push_str(line);
        let last = i + 1 == count;
        if last && !final_newline {
            break;
        }
        text.push_str(if end.is_empty() { ending } else { end });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "*** Begin Patch\n*** Add File: src/new.py\n+def new():\n+    return 1\n*** Update File: src/app.py\n@@ def handler():\n-    return 1\n+    return 2\n*** Delete File: src/old.py\n*** End Patch\n";

    fn hunks_of(patch: &str) -> Vec<Hunk> {
        match parse(patch).unwrap().into_iter().next() {
            Some(FileOp::Update { hunks, .. }) => hunks,
            other => panic!("not an update: {other:?}"),
        }
    }

    fn patched(text: &str, body: &str) -> Patched {
        let patch = format!("*** Begin Patch\n*** Update File: f\n{body}\n*** End Patch");
        apply_hunks("f", text, &hunks_of(&patch)).unwrap()
    }

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
        let FileOp::Update {
            path,
            hunks,
            move_to,
        } = &ops[1]
        else {
            panic!()
        };
        assert_eq!(path, "src/app.py");
        assert_eq!(move_to, &None);
        assert_eq!(hunks[0].anchors, vec!["def handler():"]);
        assert_eq!(hunks[0].old_lines(), vec!["    return 1"]);
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
    }

    #[test]
    fn a_move_names_its_destination_and_may_have_no_hunk() {
        let ops =
            parse("*** Begin Patch\n*** Update File: a.txt\n*** Move to: b/c.txt\n*** End Patch")
                .unwrap();
        assert_eq!(
            ops,
            vec![FileOp::Update {
                path: "a.txt".into(),
                move_to: Some("b/c.txt".into()),
                hunks: vec![]
            }]
        );
    }

    #[test]
    fn headers_with_leading_whitespace_are_read_as_headers() {
        let ops =
            parse("*** Begin Patch\n  *** Update File: foo.txt\n@@\n-old\n+new\n*** End Patch")
                .unwrap();
        assert_eq!(ops[0].path(), "foo.txt");
    }

    #[test]
    fn an_empty_hunk_is_refused_naming_its_line() {
        for (body, line) in [
            ("@@\n*** End Patch", 3),
            ("@@\n*** End of File\n*** End Patch", 4),
        ] {
            let e = parse(&format!("*** Begin Patch\n*** Update File: a\n{body}")).unwrap_err();
            assert_eq!(e.line, line, "{body}: {e}");
        }
        let e =
            parse("*** Begin Patch\n*** Update File: a\n@@\n-x\n@@\n*** End Patch").unwrap_err();
        assert!(e.message.contains("hunk 2 of 'a' has no lines"), "{e}");
    }

    #[test]
    fn at_lines_in_a_row_narrow_one_hunk() {
        let hunks = hunks_of(
            "*** Begin Patch\n*** Update File: a.py\n@@ class A:\n@@     def f(self):\n-        return 1\n+        return 2\n*** End Patch",
        );
        assert_eq!(hunks.len(), 1);
        assert_eq!(hunks[0].anchors, vec!["class A:", "    def f(self):"]);
        let text = "class B:\n    def f(self):\n        return 1\nclass A:\n    def f(self):\n        return 1\n";
        let out = apply_hunks("a.py", text, &hunks).unwrap();
        assert_eq!(
            out.text,
            "class B:\n    def f(self):\n        return 1\nclass A:\n    def f(self):\n        return 2\n"
        );
    }

    #[test]
    fn hunks_apply_after_their_anchor_and_keep_the_rest() {
        let text = "def other():\n    return 1\n\ndef handler():\n    return 1\n";
        let FileOp::Update { hunks, .. } = &parse(PATCH).unwrap()[1] else {
            panic!()
        };
        let out = apply_hunks("src/app.py", text, hunks).unwrap();
        assert_eq!(
            out.text,
            "def other():\n    return 1\n\ndef handler():\n    return 2\n"
        );
        assert_eq!(out.view, out.text);
        assert_eq!(out.fallback, None);
    }

    #[test]
    fn a_hunk_that_matches_nowhere_is_refused_with_the_closest_lines() {
        let hunks = [Hunk {
            lines: vec![
                HunkLine::Context("def handler():".into()),
                HunkLine::Removed("    return 7".into()),
                HunkLine::Added("    return 8".into()),
            ],
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
    fn indentation_differences_apply_through_the_fallback_and_context_keeps_the_files_bytes() {
        let out = patched(
            "def f():\n    x = 0\n    return 1\n",
            " x = 0\n-return 1\n+    return 2",
        );
        assert_eq!(out.text, "def f():\n    x = 0\n    return 2\n");
        assert_eq!(out.fallback, Some(Fallback::Whitespace));
    }

    #[test]
    fn typographic_punctuation_matches_its_ascii_form_as_the_last_fallback() {
        let out = patched(
            "import asyncio  # local import \u{2013} avoids top\u{2011}level dep\nx = \u{201C}a\u{201D}\u{00A0}\n",
            "-import asyncio  # local import - avoids top-level dep\n+import asyncio  # HELLO\n x = \"a\"",
        );
        assert_eq!(
            out.text,
            "import asyncio  # HELLO\nx = \u{201C}a\u{201D}\u{00A0}\n"
        );
        assert_eq!(out.fallback, Some(Fallback::Punctuation));
    }

    #[test]
    fn additions_without_context_go_to_the_end_and_leave_the_cursor() {
        let out = patched("x = 1\ny = 2\n", "+z = 3\n@@\n-x = 1\n+x = 10");
        assert_eq!(out.text, "x = 10\ny = 2\nz = 3\n");
    }

    #[test]
    fn a_blank_line_before_the_end_marker_need_not_be_in_the_file() {
        let out = patched("foo\nbar\nbaz\n", "@@\n-foo\n+FOO\n bar\n");
        assert_eq!(out.text, "FOO\nbar\nbaz\n");
        let out = patched("foo\nbar\nbaz\n", "@@\n foo\n bar\n-baz\n+BAZ\n");
        assert_eq!(out.text, "foo\nbar\nBAZ\n");
    }

    #[test]
    fn untouched_lines_keep_their_endings_and_a_replaced_line_keeps_its_own() {
        let text = "same\r\nold\nsame\r\nlast\r\n";
        let out = patched(text, "@@\n same\n-old\n+new\n+extra");
        assert_eq!(out.text, "same\r\nnew\nextra\nsame\r\nlast\r\n");
        let out = patched(text, "@@\n-same\n-old\n+same\n+same");
        assert_eq!(out.text, "same\r\nsame\nsame\r\nlast\r\n");
        assert_eq!(out.view, "same\nsame\nsame\nlast\n");
    }

    #[test]
    fn a_bom_and_a_missing_final_newline_stay() {
        let out = patched("\u{FEFF}a\r\nb", "@@\n a\n-b\n+c\n+d");
        assert_eq!(out.text, "\u{FEFF}a\r\nc\r\nd");
        let out = patched("a", "@@\n+b");
        assert_eq!(out.text, "a\nb");
    }
}
