//! A change split into hunks that a reviewer takes or leaves one by one: each hunk with an id
//! that stays the same for the same change ([`split`]); any subset of them applied to the text
//! they were made from, or merged into a text that has changed since ([`merge`], a three-way
//! merge: the other side's changes are kept, and a hunk whose lines the other side changed too
//! is a conflict, named by its id).
//!
//! Texts are in view form ([`crate::shape::view`]: `\n` endings, no BOM); the caller renders the
//! result in the file's own shape. Lines are compared with their endings, so a last line without
//! a newline is a line of its own.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use similar::{Algorithm, DiffOp, TextDiff};

/// Lines of unchanged context around each hunk, as in `git diff`: changes closer than twice this
/// are one hunk.
pub const CONTEXT_LINES: usize = 3;

/// How long a diff may search for the shortest edit script before taking a longer (still
/// correct) one, so that a hostile pair of texts cannot hold a thread.
const DIFF_DEADLINE: Duration = Duration::from_millis(500);

/// One hunk of a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hunk {
    /// The same for the same change of the same text, whoever computes it: derived from the
    /// hunk's place and lines.
    pub id: String,
    /// Its first line in the text before (1-based; 0 for an insertion at the start of an
    /// empty text) and how many lines it spans there, context included.
    pub old_start: usize,
    pub old_lines: usize,
    /// The same in the text after.
    pub new_start: usize,
    pub new_lines: usize,
    pub lines_added: usize,
    pub lines_removed: usize,
    /// The hunk as unified diff text, its `@@` header first.
    pub diff: String,
    /// What it does, without its context: applied by [`merge`].
    pub edits: Vec<LineEdit>,
}

/// Lines `at..at + remove` of the text before (0-based) replaced by `insert` (each line with its
/// ending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineEdit {
    pub at: usize,
    pub remove: usize,
    pub insert: Vec<String>,
}

/// A subset of hunks that could not be merged into the current text: the ids of those whose
/// lines were changed there too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub hunks: Vec<String>,
}

/// The change from `old` to `new` as hunks, in order (none when they are equal).
pub fn split(old: &str, new: &str) -> Vec<Hunk> {
    let diff = line_diff(old, new);
    let mut hunks: Vec<Hunk> = Vec::new();
    for ops in diff.grouped_ops(CONTEXT_LINES) {
        let (Some(first), Some(last)) = (ops.first(), ops.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        let mut edits = Vec::new();
        let (mut added, mut removed) = (0, 0);
        for op in &ops {
            if matches!(op, DiffOp::Equal { .. }) {
                continue;
            }
            let (o, n) = (op.old_range(), op.new_range());
            removed += o.len();
            added += n.len();
            edits.push(LineEdit {
                at: o.start,
                remove: o.len(),
                insert: n
                    .filter_map(|i| diff.new_slice(i))
                    .map(str::to_string)
                    .collect(),
            });
        }
        let text = similar::udiff::UnifiedDiffHunk::new(ops, &diff, true).to_string();
        let mut id = hunk_id(&text);
        // Two hunks of one change never have the same text (their headers differ), but an id
        // is a prefix of a hash: keep them apart all the same.
        while hunks.iter().any(|h| h.id == id) {
            id.push('x');
        }
        hunks.push(Hunk {
            id,
            old_start: start_line(&old_range),
            old_lines: old_range.len(),
            new_start: start_line(&new_range),
            new_lines: new_range.len(),
            lines_added: added,
            lines_removed: removed,
            diff: text,
            edits,
        });
    }
    hunks
}

/// The 1-based line a unified diff header gives a range: the line before an empty one.
fn start_line(range: &std::ops::Range<usize>) -> usize {
    if range.is_empty() {
        range.start
    } else {
        range.start + 1
    }
}

fn hunk_id(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    hex::encode(&digest[..5])
}

fn line_diff<'a>(old: &'a str, new: &'a str) -> TextDiff<'a, 'a, str> {
    TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .deadline(Instant::now() + DIFF_DEADLINE)
        .diff_lines(old, new)
}

/// `hunks` (made from `base`) applied to `current`: `base` itself, or `base` as it has changed
/// since. Every change `current` holds is kept; each hunk's lines are put where they now stand.
/// A hunk whose changed lines `current` changed too — or touched, at the same place — is a
/// conflict, unless `current` made exactly the same change (then it is already there). Nothing
/// is merged when any hunk conflicts.
pub fn merge(base: &str, current: &str, hunks: &[&Hunk]) -> Result<String, Conflict> {
    // The regions of `base` that `current` changed, each with the lines it holds instead.
    let theirs: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = if base == current {
        Vec::new()
    } else {
        line_diff(base, current)
            .ops()
            .iter()
            .filter(|op| !matches!(op, DiffOp::Equal { .. }))
            .map(|op| (op.old_range(), op.new_range()))
            .collect()
    };
    let current_lines: Vec<&str> = current.split_inclusive('\n').collect();
    let mut placed: Vec<(usize, usize, &[String])> = Vec::new();
    let mut conflicts: Vec<String> = Vec::new();
    for hunk in hunks {
        let mut conflicted = false;
        for edit in &hunk.edits {
            let ours = edit.at..edit.at + edit.remove;
            let mut shift: isize = 0;
            let mut same = false;
            for (old, new) in &theirs {
                let touches = ours.start <= old.end && old.start <= ours.end;
                if touches {
                    let identical = *old == ours
                        && current_lines[new.clone()]
                            .iter()
                            .copied()
                            .eq(edit.insert.iter().map(String::as_str));
                    if identical {
                        same = true;
                    } else {
                        conflicted = true;
                    }
                    continue;
                }
                if old.end <= ours.start {
                    shift += new.len() as isize - old.len() as isize;
                }
            }
            if !conflicted && !same {
                let at = (edit.at as isize + shift).max(0) as usize;
                placed.push((at, edit.remove, edit.insert.as_slice()));
            }
        }
        if conflicted {
            conflicts.push(hunk.id.clone());
        }
    }
    if !conflicts.is_empty() {
        return Err(Conflict { hunks: conflicts });
    }
    // From the end backwards, so that each edit's place is not moved by the ones after it.
    placed.sort_by_key(|(at, _, _)| std::cmp::Reverse(*at));
    let mut lines: Vec<&str> = current_lines;
    for (at, remove, insert) in placed {
        let end = (at + remove).min(lines.len());
        let at = at.min(end);
        lines.splice(at..end, insert.iter().map(String::as_str));
    }
    Ok(lines.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    /// `numbered(n)` with lines `changed` (1-based) rewritten.
    fn with_changes(n: usize, changed: &[usize]) -> String {
        (1..=n)
            .map(|i| {
                if changed.contains(&i) {
                    format!("line {i} changed\n")
                } else {
                    format!("line {i}\n")
                }
            })
            .collect()
    }

    #[test]
    fn changes_far_apart_are_separate_hunks_and_close_ones_are_one() {
        let old = numbered(40);
        let hunks = split(&old, &with_changes(40, &[2, 20, 22, 38]));
        let spans: Vec<(usize, usize, usize, usize)> = hunks
            .iter()
            .map(|h| (h.old_start, h.old_lines, h.lines_removed, h.lines_added))
            .collect();
        assert_eq!(spans, [(1, 5, 1, 1), (17, 9, 2, 2), (35, 6, 1, 1)]);
        assert!(hunks[0].diff.starts_with("@@ -1,5 +1,5 @@\n"));
        assert!(hunks[0].diff.contains("-line 2\n+line 2 changed\n"));
    }

    #[test]
    fn the_same_change_gives_the_same_ids_and_different_changes_different_ones() {
        let old = numbered(30);
        let new = with_changes(30, &[3, 15, 27]);
        let ids = |h: Vec<Hunk>| h.into_iter().map(|h| h.id).collect::<Vec<_>>();
        let first = ids(split(&old, &new));
        assert_eq!(first, ids(split(&old, &new)));
        assert_eq!(first.len(), 3);
        let mut unique = first.clone();
        unique.dedup();
        assert_eq!(unique.len(), 3);
        let other = ids(split(&old, &with_changes(30, &[3, 15, 28])));
        assert_eq!(
            other[..2],
            first[..2],
            "the hunks left alone keep their ids"
        );
        assert_ne!(other[2], first[2]);
    }

    #[test]
    fn every_subset_of_hunks_applies_exactly_those_changes() {
        let old = numbered(30);
        let new = with_changes(30, &[3, 15, 27]);
        let hunks = split(&old, &new);
        let pick = |which: &[usize]| -> Vec<&Hunk> { which.iter().map(|&i| &hunks[i]).collect() };
        assert_eq!(merge(&old, &old, &pick(&[])).ok(), Some(old.clone()));
        assert_eq!(merge(&old, &old, &pick(&[0, 1, 2])).ok(), Some(new.clone()));
        assert_eq!(
            merge(&old, &old, &pick(&[0, 2])).ok(),
            Some(with_changes(30, &[3, 27]))
        );
        assert_eq!(
            merge(&old, &old, &pick(&[1])).ok(),
            Some(with_changes(30, &[15]))
        );
    }

    #[test]
    fn a_text_changed_elsewhere_keeps_its_change_and_takes_the_hunks_where_they_now_stand() {
        let base = numbered(30);
        let hunks = split(&base, &with_changes(30, &[5, 25]));
        // Someone inserted two lines at the top and changed line 15 since.
        let current = format!("new a\nnew b\n{}", with_changes(30, &[15]));
        let merged = merge(&base, &current, &hunks.iter().collect::<Vec<_>>()).ok();
        assert_eq!(
            merged,
            Some(format!("new a\nnew b\n{}", with_changes(30, &[5, 15, 25])))
        );
    }

    #[test]
    fn a_hunk_whose_lines_changed_since_is_a_conflict_named_by_its_id() {
        let base = numbered(30);
        let hunks = split(&base, &with_changes(30, &[5, 25]));
        let current = base.replace("line 25\n", "line 25 theirs\n");
        let conflict = merge(&base, &current, &hunks.iter().collect::<Vec<_>>());
        assert_eq!(
            conflict,
            Err(Conflict {
                hunks: vec![hunks[1].id.clone()]
            })
        );
        // The other hunk alone merges.
        assert_eq!(
            merge(&base, &current, &[&hunks[0]]).ok(),
            Some(with_changes(30, &[5]).replace("line 25\n", "line 25 theirs\n"))
        );
    }

    #[test]
    fn a_change_already_made_the_same_way_is_not_a_conflict() {
        let base = numbered(10);
        let new = with_changes(10, &[4]);
        let hunks = split(&base, &new);
        assert_eq!(merge(&base, &new, &[&hunks[0]]).ok(), Some(new.clone()));
    }

    #[test]
    fn a_new_file_is_one_hunk_and_a_last_line_without_a_newline_is_kept_as_it_is() {
        let hunks = split("", "a\nb");
        assert_eq!(hunks.len(), 1);
        assert_eq!((hunks[0].old_start, hunks[0].new_lines), (0, 2));
        assert!(hunks[0].diff.contains("\\ No newline at end of file"));
        assert_eq!(merge("", "", &[&hunks[0]]).ok().as_deref(), Some("a\nb"));

        let hunks = split("x\ny", "x\ny\nz\n");
        assert_eq!(
            merge("x\ny", "x\ny", &[&hunks[0]]).ok().as_deref(),
            Some("x\ny\nz\n")
        );
    }

    #[test]
    fn equal_texts_have_no_hunks() {
        assert!(split("a\n", "a\n").is_empty());
    }

    proptest::proptest! {
        #[test]
        fn all_hunks_give_the_new_text_and_any_subset_applies_cleanly(
            old in proptest::collection::vec("[abc]{0,3}\n?", 0..40),
            new in proptest::collection::vec("[abc]{0,3}\n?", 0..40),
            mask in proptest::collection::vec(proptest::bool::ANY, 40),
        ) {
            let (old, new) = (old.concat(), new.concat());
            let hunks = split(&old, &new);
            let all: Vec<&Hunk> = hunks.iter().collect();
            proptest::prop_assert_eq!(merge(&old, &old, &all).ok(), Some(new.clone()));
            let some: Vec<&Hunk> = hunks.iter().zip(&mask).filter(|(_, m)| **m).map(|(h, _)| h).collect();
            let part = merge(&old, &old, &some);
            proptest::prop_assert!(part.is_ok());
            // What a subset leaves out, the rest supplies: applied on top, they give the new text.
            let rest: Vec<&Hunk> = hunks.iter().zip(&mask).filter(|(_, m)| !**m).map(|(h, _)| h).collect();
            let part = part.unwrap_or_default();
            proptest::prop_assert_eq!(merge(&old, &part, &rest).ok(), Some(new));
        }
    }
}
