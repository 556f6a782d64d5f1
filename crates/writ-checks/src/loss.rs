//! What a candidate for an existing file must not lose: the checks that make a lazy or cut-off
//! answer non-viable instead of written.
//!
//! - [`elision`]: a placeholder the candidate added where code was — a comment such as
//!   `# ... rest of the code unchanged ...` or `// existing methods here`, or a bare `...` /
//!   `// ...` line in place of removed lines. Only lines the candidate added count, so a file
//!   that already held such a line is not held against it.
//! - [`removed_definitions`]: functions, classes, methods, types, module constants the
//!   candidate dropped ([`crate::analysis`], where writ has a grammar), except those the
//!   description names.
//! - [`shrunk`]: a file of at least [`SHRINK_MIN_LINES`] non-blank lines that keeps fewer than
//!   [`SHRINK_KEEP_PERCENT`] % of them — the shape of an answer cut off at its output limit.
//!
//! The last two are waived when the request allows removals.

use crate::analysis::definition_names;
use crate::language::Language;
use crate::shape::added_lines;

/// Files with fewer non-blank lines than this are not held to the shrink check.
pub const SHRINK_MIN_LINES: usize = 20;
/// A candidate must keep at least this share of the file's non-blank lines.
pub const SHRINK_KEEP_PERCENT: usize = 60;

/// Phrases that, in a comment the candidate added, stand for code it did not write.
const PLACEHOLDER_PHRASES: &[&str] = &[
    "rest of",
    "existing code",
    "existing method",
    "existing function",
    "existing import",
    "existing implementation",
    "existing content",
    "existing logic",
    "existing test",
    "remaining code",
    "remaining method",
    "remaining function",
    "remaining implementation",
    "remaining content",
    "remaining test",
    "unchanged",
    "omitted",
    "for brevity",
    "same as before",
    "previous code",
    "previous implementation",
    "original code",
    "original implementation",
    "other methods",
    "other functions",
    "code here",
    "implementation here",
    "stays the same",
    "remains the same",
    "as before",
    "no changes",
    "keep existing",
    "keep the existing",
];

const COMMENT_OPENERS: &[&str] = &["<!--", "/*", "//", "--", "#", ";", "*", "%"];
const COMMENT_CLOSERS: &[&str] = &["-->", "*/"];

/// The text of `line` if it is a comment, without its markers.
fn comment_text(line: &str) -> Option<&str> {
    let t = line.trim();
    let opener = COMMENT_OPENERS.iter().find(|o| t.starts_with(**o))?;
    let mut body = t[opener.len()..].trim_start_matches(['/', '#', '*', '-', '!']);
    for closer in COMMENT_CLOSERS {
        body = body.trim_end().trim_end_matches(closer);
    }
    Some(body.trim())
}

fn only_dots(text: &str) -> bool {
    let t = text.trim();
    !t.is_empty() && t.chars().all(|c| c == '.' || c == '…' || c.is_whitespace())
}

/// Why `line`, added by a candidate, reads as a placeholder; `replaces` says whether its hunk
/// also removed lines (so it stands where code was).
fn placeholder(line: &str, replaces: bool) -> bool {
    let t = line.trim();
    let has_dots = t.contains("...") || t.contains('…');
    // `...`, `…`, `// ...`, `# …`, `/* ... */` in place of removed lines.
    if replaces && (only_dots(t) || comment_text(t).is_some_and(|c| c.is_empty() || only_dots(c))) {
        return true;
    }
    let Some(text) = comment_text(t) else {
        return false;
    };
    let lower = text.to_lowercase();
    (has_dots || replaces) && PLACEHOLDER_PHRASES.iter().any(|p| lower.contains(p))
}

/// The first placeholder the candidate `new` added to `old` (both in view form), with its line
/// number in `new` (from 1).
pub fn elision(old: &str, new: &str) -> Option<(usize, String)> {
    let found = added_lines(old, new)
        .into_iter()
        .find(|(line, replaces)| placeholder(line, *replaces))?;
    let number = new
        .lines()
        .position(|l| std::ptr::eq(l.as_ptr(), found.0.as_ptr()))
        .map_or(0, |i| i + 1);
    Some((number, found.0.trim().to_string()))
}

/// Whether `description` names `qualified`'s last part as a word (so removing it was asked).
fn mentioned(description: &str, qualified: &str) -> bool {
    let name = qualified.rsplit('.').next().unwrap_or(qualified);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    description.match_indices(name).any(|(at, _)| {
        let before = description[..at].chars().next_back();
        let after = description[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Definitions of `old` that `new` no longer has and `description` does not name, in order.
pub fn removed_definitions(old: &str, new: &str, lang: Language, description: &str) -> Vec<String> {
    let (Some(before), Some(after)) = (definition_names(old, lang), definition_names(new, lang))
    else {
        return Vec::new();
    };
    before
        .into_iter()
        .filter(|n| after.binary_search(n).is_err() && !mentioned(description, n))
        .collect()
}

fn non_blank(text: &str) -> usize {
    text.lines().filter(|l| !l.trim().is_empty()).count()
}

/// `Some((kept, had))` when `new` keeps too few of `old`'s non-blank lines.
pub fn shrunk(old: &str, new: &str) -> Option<(usize, usize)> {
    let had = non_blank(old);
    let kept = non_blank(new);
    (had >= SHRINK_MIN_LINES && kept * 100 < had * SHRINK_KEEP_PERCENT).then_some((kept, had))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn functions(n: usize) -> String {
        (0..n)
            .map(|i| format!("def f{i}(x):\n    return x + {i}\n\n\n"))
            .collect()
    }

    #[test]
    fn a_rest_of_the_file_comment_is_an_elision_in_every_comment_style() {
        let old = functions(10);
        for marker in [
            "# ... rest of the file unchanged ...",
            "// ... existing code ...",
            "/* remaining methods omitted for brevity */",
            "<!-- rest of the page -->",
            "-- ... unchanged ...",
        ] {
            let new = format!("def f0(x):\n    return x + 0\n\n{marker}\n\ndef g():\n    pass\n");
            let found = elision(&old, &new);
            assert_eq!(
                found.as_ref().map(|f| f.1.as_str()),
                Some(marker),
                "{marker}"
            );
            assert_eq!(found.map(|f| f.0), Some(4), "{marker}");
        }
    }

    #[test]
    fn a_bare_ellipsis_counts_only_where_code_was() {
        let old = "class A:\n    def f(self):\n        return 1\n";
        let replaced = "class A:\n    def f(self):\n        ...\n";
        assert!(elision(old, replaced).is_some());
        let added = "class A:\n    def f(self):\n        return 1\n\nclass P(Protocol):\n    def g(self): ...\n    ...\n";
        assert_eq!(elision(old, added), None);
    }

    #[test]
    fn a_placeholder_the_file_already_had_is_not_held_against_the_candidate() {
        let old = "x = 1\n# ... rest of the code unchanged ...\n";
        let new = "x = 2\n# ... rest of the code unchanged ...\n";
        assert_eq!(elision(old, new), None);
    }

    #[test]
    fn an_ordinary_new_comment_is_not_an_elision() {
        let old = "x = 1\n";
        let new = "x = 1\n# keep this in sync with the server's limit\ny = 2\n";
        assert_eq!(elision(old, new), None);
    }

    #[test]
    fn removed_functions_and_methods_are_named_unless_the_description_asks() {
        let old = "class Stack:\n    def push(self, x):\n        pass\n    def pop(self):\n        pass\n\ndef helper():\n    pass\n\ndef legacy():\n    pass\n";
        let new = "class Stack:\n    def push(self, x):\n        pass\n\ndef helper():\n    pass\n";
        assert_eq!(
            removed_definitions(old, new, Language::Python, "add a peek method"),
            vec!["Stack.pop".to_string(), "legacy".to_string()]
        );
        assert_eq!(
            removed_definitions(
                old,
                new,
                Language::Python,
                "remove legacy() and Stack's pop"
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_file_halved_has_shrunk_and_a_small_file_is_not_judged() {
        let old = functions(20);
        let half: String = old
            .lines()
            .take(old.lines().count() / 2)
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(shrunk(&old, &half), Some((20, 40)));
        assert_eq!(shrunk(&old, &old), None);
        assert_eq!(shrunk("a\nb\n", ""), None);
    }
}
