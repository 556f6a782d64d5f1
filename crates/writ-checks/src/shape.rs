//! A text file's shape — byte-order mark, line endings, final newline, trailing blank lines —
//! kept apart from its lines, so that models see and edit plain `\n` text ([`view`]) and what
//! is written back ([`render`]) keeps the file's own bytes on every line the change did not
//! touch: a CRLF file stays CRLF (a mixed one stays mixed), a BOM stays, a missing final newline
//! stays missing. Also the unified diff of a change ([`Change`]).

use std::time::{Duration, Instant};

use similar::{Algorithm, DiffOp};

/// How long a line diff may search for the shortest edit script; past it, a longer (still
/// correct) script is taken, so a hostile pair of texts cannot hold a thread.
const DIFF_DEADLINE: Duration = Duration::from_millis(500);

pub(crate) const BOM: char = '\u{FEFF}';

/// One line of a file: its text and its terminator (`"\r\n"`, `"\n"`, `"\r"` or `""` for a
/// last line without one).
pub(crate) fn split_lines(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                out.push((&text[start..i], &text[i..i + 1]));
                i += 1;
                start = i;
            }
            b'\r' => {
                let len = if bytes.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                out.push((&text[start..i], &text[i..i + len]));
                i += len;
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < bytes.len() {
        out.push((&text[start..], ""));
    }
    out
}

/// What a model is shown of a file, and what edits apply to: no BOM, every line ending `\n`.
pub fn view(original: &str) -> String {
    let body = original.strip_prefix(BOM).unwrap_or(original);
    if !body.contains('\r') {
        return body.to_string();
    }
    let mut out = String::with_capacity(body.len());
    for (line, end) in split_lines(body) {
        out.push_str(line);
        if !end.is_empty() {
            out.push('\n');
        }
    }
    out
}

/// The line ending most of the file's lines use (`\n` for a file with none).
pub(crate) fn dominant_ending(lines: &[(&str, &str)]) -> &'static str {
    let (mut crlf, mut lf, mut cr) = (0usize, 0usize, 0usize);
    for (_, end) in lines {
        match *end {
            "\r\n" => crlf += 1,
            "\n" => lf += 1,
            "\r" => cr += 1,
            _ => {}
        }
    }
    if crlf > lf && crlf >= cr {
        "\r\n"
    } else if cr > lf && cr > crlf {
        "\r"
    } else {
        "\n"
    }
}

fn trailing_blank(lines: &[(&str, &str)]) -> usize {
    lines
        .iter()
        .rev()
        .take_while(|(l, _)| l.trim().is_empty())
        .count()
}

fn line_diff<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<DiffOp> {
    similar::capture_diff_slices_deadline(
        Algorithm::Myers,
        old,
        new,
        Some(Instant::now() + DIFF_DEADLINE),
    )
}

/// `new_view` (the changed file in view form) written in `original`'s shape: the lines a line
/// diff finds unchanged keep their original bytes and endings, new lines take the file's
/// dominant ending, and the BOM, the trailing blank lines and the presence of a final newline
/// are kept as the original had them.
pub fn render(original: &str, new_view: &str) -> String {
    let had_bom = original.starts_with(BOM);
    let body = original.strip_prefix(BOM).unwrap_or(original);
    let old = split_lines(body);
    let ending = dominant_ending(&old);
    let old_tail = trailing_blank(&old);
    let old_body = &old[..old.len() - old_tail];
    let new = split_lines(new_view);
    let new_body = &new[..new.len() - trailing_blank(&new)];

    let old_text: Vec<&str> = old_body.iter().map(|(l, _)| *l).collect();
    let new_text: Vec<&str> = new_body.iter().map(|(l, _)| *l).collect();
    let mut lines: Vec<(&str, &str)> = Vec::with_capacity(new_text.len() + old_tail);
    for op in line_diff(&old_text, &new_text) {
        match op {
            DiffOp::Equal { old_index, len, .. } => {
                lines.extend_from_slice(&old_body[old_index..old_index + len]);
            }
            DiffOp::Delete { .. } => {}
            DiffOp::Insert {
                new_index, new_len, ..
            }
            | DiffOp::Replace {
                new_index, new_len, ..
            } => {
                lines.extend(
                    new_text[new_index..new_index + new_len]
                        .iter()
                        .map(|l| (*l, ending)),
                );
            }
        }
    }
    lines.extend_from_slice(&old[old.len() - old_tail..]);
    // A line that lost its place at the end (text appended after a last line without an
    // ending) needs one now; the file's last line ends as the original's did.
    let final_newline = match old.last() {
        Some((_, end)) => !end.is_empty(),
        None => new_view.ends_with('\n'),
    };
    let count = lines.len();
    let mut out = String::with_capacity(new_view.len() + count + 3);
    if had_bom {
        out.push(BOM);
    }
    for (i, (line, end)) in lines.into_iter().enumerate() {
        out.push_str(line);
        let last = i + 1 == count;
        match (last, end.is_empty()) {
            (false, true) => out.push_str(ending),
            (true, _) if !final_newline => {}
            (true, true) => out.push_str(ending),
            _ => out.push_str(end),
        }
    }
    out
}

/// What a change did to a file: lines added and removed and a unified diff (bounded).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Change {
    pub lines_added: usize,
    pub lines_removed: usize,
    /// The unified diff (three lines of context), cut at a line boundary past the bound.
    pub diff: String,
    /// The diff was cut.
    pub truncated: bool,
}

impl Change {
    /// The change from `old` to `new` (both in view form), the diff bounded to `max_bytes`.
    pub fn between(path: &str, old: &str, new: &str, max_bytes: usize) -> Change {
        let diff = similar::TextDiff::configure()
            .algorithm(Algorithm::Myers)
            .deadline(Instant::now() + DIFF_DEADLINE)
            .diff_lines(old, new);
        let (mut added, mut removed) = (0, 0);
        for change in diff.iter_all_changes() {
            match change.tag() {
                similar::ChangeTag::Insert => added += 1,
                similar::ChangeTag::Delete => removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
        let full = diff
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string();
        let (diff, truncated) = bound_at_line(full, max_bytes);
        Change {
            lines_added: added,
            lines_removed: removed,
            diff,
            truncated,
        }
    }
}

fn bound_at_line(text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = text[..cut].rfind('\n').map_or(0, |i| i + 1);
    (text[..cut].to_string(), true)
}

/// Lines that `new` has and `old` has not, each with whether the hunk it stands in also removed
/// lines of `old` (it then stands where code was). Both in view form.
pub fn added_lines<'a>(old: &'a str, new: &'a str) -> Vec<(&'a str, bool)> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out = Vec::new();
    for op in line_diff(&old_lines, &new_lines) {
        match op {
            DiffOp::Insert {
                new_index, new_len, ..
            } => out.extend(
                new_lines[new_index..new_index + new_len]
                    .iter()
                    .map(|l| (*l, false)),
            ),
            DiffOp::Replace {
                new_index, new_len, ..
            } => out.extend(
                new_lines[new_index..new_index + new_len]
                    .iter()
                    .map(|l| (*l, true)),
            ),
            DiffOp::Equal { .. } | DiffOp::Delete { .. } => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_drops_the_bom_and_makes_every_ending_lf() {
        assert_eq!(view("\u{FEFF}a\r\nb\rc\nd"), "a\nb\nc\nd");
        assert_eq!(view("plain\n"), "plain\n");
    }

    #[test]
    fn a_crlf_file_with_a_bom_stays_so_and_only_the_edited_line_changes() {
        let original = "\u{FEFF}one\r\ntwo\r\nthree\r\n";
        let edited = view(original).replace("two", "TWO");
        assert_eq!(render(original, &edited), "\u{FEFF}one\r\nTWO\r\nthree\r\n");
    }

    #[test]
    fn mixed_endings_are_kept_on_untouched_lines_and_new_lines_take_the_dominant_one() {
        let original = "a\r\nb\nc\r\nd\r\n";
        let edited = "a\nb\nnew\nc\nd\n";
        assert_eq!(render(original, edited), "a\r\nb\nnew\r\nc\r\nd\r\n");
    }

    #[test]
    fn a_missing_final_newline_stays_missing_and_trailing_blank_lines_stay() {
        assert_eq!(render("x = 1\ny = 2", "x = 1\ny = 3\n"), "x = 1\ny = 3");
        assert_eq!(render("x = 1", "x = 1\nz = 2\n"), "x = 1\nz = 2");
        assert_eq!(render("x\n\n\n", "x\ny\n"), "x\ny\n\n\n");
    }

    #[test]
    fn an_unchanged_view_renders_the_original_byte_for_byte() {
        for original in ["\u{FEFF}a\r\n\r\nb\r\n  \r\n", "a\rb\r", "", "\n", "only"] {
            assert_eq!(render(original, &view(original)), original, "{original:?}");
        }
    }

    #[test]
    fn a_change_counts_lines_and_bounds_its_diff() {
        let c = Change::between("f.py", "a\nb\nc\n", "a\nB\nc\nd\n", 10_000);
        assert_eq!((c.lines_added, c.lines_removed), (2, 1));
        assert!(c.diff.starts_with("--- a/f.py\n+++ b/f.py\n"), "{}", c.diff);
        assert!(c.diff.contains("-b\n+B\n"), "{}", c.diff);
        assert!(!c.truncated);
        let cut = Change::between("f.py", "a\nb\nc\n", "a\nB\nc\nd\n", 30);
        assert!(cut.truncated && cut.diff.len() <= 30 && cut.diff.ends_with('\n'));
    }

    #[test]
    fn added_lines_say_whether_they_replace_code() {
        let added = added_lines("a\nb\nc\n", "a\n# ...\nc\nd\n");
        assert_eq!(added, vec![("# ...", true), ("d", false)]);
    }
}
