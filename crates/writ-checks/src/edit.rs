//! Edits to an existing text, applied strictly: each edit's old text must match exactly once.
//!
//! Two shapes reach this module: a model's answer in SEARCH/REPLACE blocks ([`parse_blocks`])
//! and an agent's `str_replace` ([`apply_one`] with `replace_all`). Both apply through
//! [`apply_one`], which tries the text as given, then — the documented fallbacks — line by
//! line ignoring trailing whitespace and indentation ([`Fallback::Whitespace`]), then also
//! reading typographic dashes, quotes and spaces as ASCII ([`Fallback::Punctuation`]), and
//! re-indents the replacement by the indentation the match had. Anything else (no match, several matches)
//! is a refusal naming the edit and showing the closest lines, so the caller can retry in one
//! step.
//!
//! Texts here are in the view form: `\n` line ends, no BOM (see [`crate::shape`]).

use std::fmt::Write as _;

/// One SEARCH/REPLACE block of a model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditBlock {
    pub search: String,
    pub replace: String,
}

/// Why an answer's blocks could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error(
        "SEARCH/REPLACE block {block} is not closed (no {missing} line): the answer was cut off or malformed"
    )]
    Unclosed { block: usize, missing: &'static str },
}

/// How an edit's old text was found; the later a variant, the looser the match (an answer
/// reports the loosest any of its edits needed).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Matched only when trailing whitespace and indentation were ignored.
    Whitespace,
    /// Matched only when, besides whitespace, typographic punctuation (dashes, curly quotes,
    /// non-breaking and other wide spaces) was read as its ASCII form.
    Punctuation,
}

/// A line as the punctuation fallback compares it: trimmed, typographic dashes, quotes and
/// spaces read as their ASCII forms.
pub fn fold_punctuation(line: &str) -> String {
    line.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

/// Why an edit does not apply: the edit's number (from 1), what went wrong and where the
/// closest text is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EditError {
    /// The edit, from 1, in the order given.
    pub edit: usize,
    pub message: String,
}

/// A text after its edits, and whether the fallback was needed for any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub text: String,
    pub fallback: Option<Fallback>,
}

const SEARCH: &str = "SEARCH";
const DIVIDER: &str = "=======";
const REPLACE: &str = "REPLACE";

fn is_marker(line: &str, ch: char, word: &str) -> bool {
    let line = line.trim_end();
    let run = line.chars().take_while(|&c| c == ch).count();
    (5..=9).contains(&run) && line[run..].trim() == word
}

fn is_divider(line: &str) -> bool {
    let line = line.trim_end();
    (5..=9).contains(&line.len()) && line.chars().all(|c| c == '=')
}

/// The SEARCH/REPLACE blocks of an answer, in order; `Ok(None)` when the answer has none (it is
/// then a whole file, or no code at all). Text outside the blocks (file names, fences, prose)
/// is ignored.
pub fn parse_blocks(answer: &str) -> Result<Option<Vec<EditBlock>>, BlockError> {
    let text = answer.replace("\r\n", "\n");
    let mut blocks = Vec::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        if !is_marker(line, '<', SEARCH) {
            continue;
        }
        let block = blocks.len() + 1;
        let mut search = String::new();
        let mut found_divider = false;
        for l in lines.by_ref() {
            if is_divider(l) {
                found_divider = true;
                break;
            }
            search.push_str(l);
        }
        if !found_divider {
            return Err(BlockError::Unclosed {
                block,
                missing: DIVIDER,
            });
        }
        let mut replace = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            if is_marker(l, '>', REPLACE) {
                closed = true;
                break;
            }
            replace.push_str(l);
        }
        if !closed {
            return Err(BlockError::Unclosed {
                block,
                missing: ">>>>>>> REPLACE",
            });
        }
        blocks.push(EditBlock { search, replace });
    }
    Ok((!blocks.is_empty()).then_some(blocks))
}

/// Applies `blocks` one after another to `text`. An empty SEARCH appends its REPLACE text at the
/// end of the file.
pub fn apply_blocks(text: &str, blocks: &[EditBlock]) -> Result<Applied, EditError> {
    let mut current = text.to_string();
    let mut fallback = None;
    for (i, block) in blocks.iter().enumerate() {
        let applied = if block.search.trim().is_empty() {
            let mut t = current;
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            t.push_str(&block.replace);
            Applied {
                text: t,
                fallback: None,
            }
        } else {
            apply_one(
                &current,
                &block.search,
                &block.replace,
                false,
                i + 1,
                "SEARCH block",
            )?
        };
        fallback = fallback.max(applied.fallback);
        current = applied.text;
    }
    Ok(Applied {
        text: current,
        fallback,
    })
}

/// Replaces `old` by `new` in `text`: `old` must occur exactly once (every occurrence with
/// `replace_all`), as given or, failing that, line by line ignoring trailing whitespace and
/// indentation. `edit` and `what` name the edit in a refusal ("SEARCH block 2", "edit 1").
pub fn apply_one(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    edit: usize,
    what: &str,
) -> Result<Applied, EditError> {
    if old.is_empty() {
        return Err(EditError {
            edit,
            message: format!("{what} {edit}: the text to replace is empty"),
        });
    }
    let exact: Vec<usize> = text.match_indices(old).map(|(at, _)| at).collect();
    match exact.len() {
        1 => {
            return Ok(Applied {
                text: splice(text, exact[0], old.len(), new),
                fallback: None,
            });
        }
        n if n > 1 && replace_all => {
            return Ok(Applied {
                text: text.replace(old, new),
                fallback: None,
            });
        }
        n if n > 1 => {
            let lines: Vec<String> = exact
                .iter()
                .map(|&at| (line_of(text, at) + 1).to_string())
                .collect();
            return Err(EditError {
                edit,
                message: format!(
                    "{what} {edit}: the text to replace occurs {n} times (at lines {}); it must match exactly once — include more surrounding lines to make it unique",
                    lines.join(", ")
                ),
            });
        }
        _ => {}
    }
    let loose = loose_matches(text, old);
    match loose.as_slice() {
        [only] => Ok(Applied {
            text: splice_lines(text, only, new),
            fallback: Some(only.how),
        }),
        [] => Err(EditError {
            edit,
            message: format!(
                "{what} {edit}: the text to replace was not found{}",
                closest_note(text, old)
            ),
        }),
        several => Err(EditError {
            edit,
            message: format!(
                "{what} {edit}: ignoring whitespace{}, the text to replace occurs {} times (at lines {}); it must match exactly once",
                if several[0].how == Fallback::Punctuation {
                    " and typographic punctuation"
                } else {
                    ""
                },
                several.len(),
                several
                    .iter()
                    .map(|m| (m.first + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

fn splice(text: &str, at: usize, len: usize, new: &str) -> String {
    let mut out = String::with_capacity(text.len() + new.len());
    out.push_str(&text[..at]);
    out.push_str(new);
    out.push_str(&text[at + len..]);
    out
}

fn line_of(text: &str, byte: usize) -> usize {
    text.as_bytes()[..byte]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// A whitespace-insensitive match: lines `first..first + len` of the text, and the indentation
/// the text had where the old text's first non-blank line had its own.
struct LooseMatch {
    first: usize,
    len: usize,
    /// (indentation in the text, indentation in the old text) of the first non-blank line.
    indent: (String, String),
    how: Fallback,
}

fn lines_of(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

fn indentation(line: &str) -> &str {
    let trimmed = line.trim_start();
    &line[..line.len() - trimmed.len()]
}

fn loose_matches(text: &str, old: &str) -> Vec<LooseMatch> {
    let hay = lines_of(text);
    let needle: Vec<&str> = lines_of(old);
    // Blank lines at either end of the old text say nothing about where it is.
    let start = needle.iter().position(|l| !l.trim().is_empty());
    let end = needle.iter().rposition(|l| !l.trim().is_empty());
    let (Some(start), Some(end)) = (start, end) else {
        return Vec::new();
    };
    let needle = &needle[start..=end];
    if needle.len() > hay.len() {
        return Vec::new();
    }
    // Whitespace first; typographic punctuation read as ASCII only when that finds nothing.
    let folded: Vec<String> = needle.iter().map(|l| fold_punctuation(l)).collect();
    for how in [Fallback::Whitespace, Fallback::Punctuation] {
        let mut found = Vec::new();
        for first in 0..=hay.len() - needle.len() {
            let equal = match how {
                Fallback::Whitespace => needle
                    .iter()
                    .zip(&hay[first..])
                    .all(|(n, h)| n.trim() == h.trim()),
                Fallback::Punctuation => folded
                    .iter()
                    .zip(&hay[first..])
                    .all(|(n, h)| *n == fold_punctuation(h)),
            };
            if equal {
                found.push(LooseMatch {
                    first,
                    len: needle.len(),
                    indent: (
                        indentation(hay[first]).to_string(),
                        indentation(needle[0]).to_string(),
                    ),
                    how,
                });
            }
        }
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// Replaces the matched lines by `new`, each of `new`'s lines re-indented as the match was: the
/// old text's indentation swapped for the text's where it starts with it.
fn splice_lines(text: &str, m: &LooseMatch, new: &str) -> String {
    let hay = lines_of(text);
    let (have, gave) = &m.indent;
    let mut out = String::with_capacity(text.len() + new.len());
    for l in &hay[..m.first] {
        out.push_str(l);
    }
    for l in new.split_inclusive('\n') {
        if l.trim().is_empty() {
            out.push_str(l);
        } else if let Some(rest) = l.strip_prefix(gave.as_str()) {
            out.push_str(have);
            out.push_str(rest);
        } else {
            out.push_str(l);
        }
    }
    if !new.is_empty() && !new.ends_with('\n') && m.first + m.len < hay.len() {
        out.push('\n');
    }
    for l in &hay[m.first + m.len..] {
        out.push_str(l);
    }
    out
}

/// Where the text comes closest to `old`: the window of as many lines with the most lines equal
/// (ignoring whitespace) at the same place, shown with its line numbers.
pub fn closest_note(text: &str, old: &str) -> String {
    let hay = lines_of(text);
    let needle: Vec<&str> = lines_of(old)
        .into_iter()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if hay.is_empty() || needle.is_empty() {
        return String::new();
    }
    let width = needle.len().min(hay.len());
    let mut best: Option<(usize, usize)> = None;
    for first in 0..=hay.len() - width {
        let score = needle
            .iter()
            .zip(&hay[first..first + width])
            .filter(|(n, h)| n.trim() == h.trim())
            .count();
        if score > 0 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, first));
        }
    }
    // No line in common: the line most like the old text's first line.
    let (first, how) = match best {
        Some((score, first)) => (first, format!("{score} of {} lines equal", needle.len())),
        None => {
            let Some(first) = most_similar_line(&hay, needle[0]) else {
                return String::new();
            };
            (first, "the line most like its first line".to_string())
        }
    };
    let shown = &hay[first..(first + width).min(hay.len())];
    let mut note = format!(
        ". The closest text is at lines {}-{} ({how}):\n",
        first + 1,
        first + shown.len()
    );
    for (i, l) in shown.iter().take(12).enumerate() {
        let _ = writeln!(note, "{:>6} | {}", first + i + 1, l.trim_end_matches('\n'));
    }
    if shown.len() > 12 {
        let _ = writeln!(note, "       | … {} more lines", shown.len() - 12);
    }
    // What differs, line by line: the file's lines against the text that was asked for.
    let window: String = shown.concat();
    let asked: String = needle.concat();
    let diff = similar::TextDiff::from_lines(window.as_str(), asked.as_str());
    let unified = diff
        .unified_diff()
        .context_radius(1)
        .header("the file", "the text to replace")
        .to_string();
    if !unified.is_empty() {
        note.push_str("How they differ:\n");
        for l in unified.lines().take(MAX_DIFF_LINES) {
            let _ = writeln!(note, "{l}");
        }
        if unified.lines().count() > MAX_DIFF_LINES {
            note.push_str("…\n");
        }
    }
    note
}

/// Lines of the short diff a refusal shows.
const MAX_DIFF_LINES: usize = 24;

fn most_similar_line(hay: &[&str], line: &str) -> Option<usize> {
    let target = line.trim();
    hay.iter()
        .enumerate()
        .map(|(i, h)| {
            let r = similar::TextDiff::from_chars(h.trim(), target).ratio();
            (i, r)
        })
        .filter(|(_, r)| *r > 0.3)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "def a():\n    return 1\n\n\ndef b():\n    return 2\n";

    #[test]
    fn blocks_are_read_from_an_answer_with_fences_and_prose() {
        let answer = "Here is the change:\n\nsrc/x.py\n```python\n<<<<<<< SEARCH\ndef b():\n    return 2\n=======\ndef b():\n    return 3\n>>>>>>> REPLACE\n```\n";
        let blocks = parse_blocks(answer).unwrap().unwrap();
        assert_eq!(
            blocks,
            vec![EditBlock {
                search: "def b():\n    return 2\n".into(),
                replace: "def b():\n    return 3\n".into()
            }]
        );
        assert_eq!(parse_blocks("```python\nx = 1\n```").unwrap(), None);
    }

    #[test]
    fn a_block_cut_off_before_its_end_is_an_error_naming_it() {
        let answer =
            "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nc\n=======\nd\n";
        assert_eq!(
            parse_blocks(answer),
            Err(BlockError::Unclosed {
                block: 2,
                missing: ">>>>>>> REPLACE"
            })
        );
    }

    #[test]
    fn an_exact_unique_match_is_replaced_and_everything_else_kept() {
        let blocks = [EditBlock {
            search: "    return 2\n".into(),
            replace: "    return 20\n".into(),
        }];
        let out = apply_blocks(FILE, &blocks).unwrap();
        assert_eq!(out.text, FILE.replace("return 2\n", "return 20\n"));
        assert_eq!(out.fallback, None);
    }

    #[test]
    fn an_empty_search_appends() {
        let blocks = [EditBlock {
            search: String::new(),
            replace: "\n\ndef c():\n    return 3\n".into(),
        }];
        let out = apply_blocks(FILE, &blocks).unwrap();
        assert_eq!(out.text, format!("{FILE}\n\ndef c():\n    return 3\n"));
    }

    #[test]
    fn a_text_found_twice_is_refused_with_its_lines() {
        let err = apply_one(FILE, "    return", "    yield", false, 2, "SEARCH block").unwrap_err();
        assert_eq!(err.edit, 2);
        assert!(
            err.message.contains("occurs 2 times (at lines 2, 6)"),
            "{}",
            err.message
        );
        let all = apply_one(FILE, "    return", "    yield", true, 1, "edit").unwrap();
        assert_eq!(all.text.matches("yield").count(), 2);
    }

    #[test]
    fn indentation_and_trailing_spaces_are_the_one_fallback_and_reindent_the_replacement() {
        let file = "class A:\n    def f(self):  \n        return 1\n";
        let out = apply_one(
            file,
            "def f(self):\n    return 1\n",
            "def f(self):\n    return 2\n",
            false,
            1,
            "SEARCH block",
        )
        .unwrap();
        assert_eq!(out.text, "class A:\n    def f(self):\n        return 2\n");
        assert_eq!(out.fallback, Some(Fallback::Whitespace));
    }

    #[test]
    fn typographic_punctuation_is_the_fallback_after_whitespace() {
        let file = "def f():\n    msg = \u{201C}it\u{2019}s done\u{201D}  # a\u{2013}b\n";
        let out = apply_one(
            file,
            "msg = \"it's done\"  # a-b\n",
            "msg = \"done\"\n",
            false,
            1,
            "edit",
        )
        .unwrap();
        assert_eq!(out.text, "def f():\n    msg = \"done\"\n");
        assert_eq!(out.fallback, Some(Fallback::Punctuation));
    }

    #[test]
    fn a_missing_text_is_refused_with_the_closest_lines() {
        let err = apply_one(
            FILE,
            "def b():\n    return 22\n",
            "x",
            false,
            1,
            "SEARCH block",
        )
        .unwrap_err();
        assert!(err.message.contains("was not found"), "{}", err.message);
        assert!(
            err.message.contains("lines 5-6 (1 of 2 lines equal)"),
            "{}",
            err.message
        );
        assert!(err.message.contains("     5 | def b():"), "{}", err.message);
        assert!(
            err.message.contains("-    return 2\n+    return 22\n"),
            "{}",
            err.message
        );
    }
}
