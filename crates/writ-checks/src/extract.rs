//! Getting the file's code out of a model's plain-text answer: finding the
//! fenced code blocks, choosing the one that holds the file, and deciding
//! whether an answer without any fence is code or prose.
//!
//! # Rules
//!
//! **Fences.** A fence line is up to three spaces of indentation, then three or
//! more backticks or tildes, then an optional info string (`python`, `py`,
//! `Python`, `python3`, `{.python}`, `python title="x.py"`, `rust,ignore`,
//! `src/app.py`, …). A backtick fence's info string may hold no backtick,
//! so a line of inline code opening with three backticks is no fence. A
//! block is closed by a bare fence
//! (no info string) of the same character that is at least as long as the
//! opening one, as in CommonMark.
//!
//! **Nested fences.** Files that themselves contain fences (a Markdown README
//! with ```` ```bash ```` examples, a Python docstring with a ```` ```python ````
//! example) must not be cut at their first inner fence. Inside a block, a fence
//! line of the same character *with* an info string opens a nested level and
//! the next bare fence closes that level instead of the block; the block ends at the bare fence
//! that brings the nesting back to zero. An outer fence longer than the inner
//! ones (```` ```` ````) works too, because a shorter bare fence cannot close
//! it. Limit: an inner block opened by a *bare* fence inside an outer block of
//! the same length is indistinguishable from the outer block's end; the answer
//! is then cut there (ask models for a longer outer fence).
//!
//! **Choosing a block.** The longest block whose tag names the language wins
//! (models sometimes add a short usage example after the file); if no tag
//! matches, the longest untagged block; failing that, the longest block of any
//! tag. Ties go to the earlier block.
//!
//! **Missing closing fence.** The block runs to the end of the answer, less a
//! last line that is a fence cut short (fewer fence characters than the
//! opening), as an answer truncated by a token limit has.
//!
//! **No fence.** The answer is taken whole (less leading blank lines) when its
//! first non-blank line does not read as prose; otherwise there is no code.
//! Prose is a line opening the way chat answers do ("Here is…", "Sure!",
//! "Sorry, …", "I've …") or, except for Markdown and plain text whose files
//! are prose themselves, a capitalised sentence of four or more words ending
//! in `.`, `!`, `?` or `:` without code punctuation. For Markdown the same test
//! decides whether an answer with fences but no Markdown-tagged block is the
//! file itself (a README whose only fences are its own examples).
//!
//! **Not stripped.** A first line naming the file (`# src/app.py`,
//! `// file: main.rs`) stays: it may be a legitimate comment, and a wrong
//! guess would change the file.

use crate::language::Language;

/// Extract the code of a file in `lang` from a model's plain-text answer,
/// following the rules in this module's documentation.
///
/// `None` means the answer holds no code; `Some("")` means it holds an empty
/// code block. The code is returned as written: no normalisation.
pub fn extract_code(answer: &str, lang: Language) -> Option<String> {
    let blocks = fenced_blocks(answer);
    if blocks.is_empty() {
        return unfenced_code(answer, lang);
    }
    let matching = longest(blocks.iter().filter(|block| tag_matches(&block.tag, lang)));
    if let Some(block) = matching {
        return Some(block.content(answer));
    }
    if lang == Language::Markdown && !starts_with_fence(answer) {
        // A README with its own example fences but no outer fence at all.
        if let Some(code) = unfenced_code(answer, lang) {
            return Some(code);
        }
    }
    longest(blocks.iter().filter(|block| block.tag.is_empty()))
        .or_else(|| longest(blocks.iter()))
        .map(|block| block.content(answer))
}

/// One fenced code block: where its content lies in the answer and how its
/// opening fence tagged it.
#[derive(Debug)]
pub(crate) struct Block {
    /// The normalised tag from the info string ("" for none); see [`tag_of`].
    pub(crate) tag: String,
    /// Byte range of the content lines, line terminators included.
    start: usize,
    end: usize,
    /// Indentation of the opening fence, removed from content lines as
    /// CommonMark does (blocks inside list items).
    indent: usize,
}

impl Block {
    fn len(&self) -> usize {
        self.end - self.start
    }

    /// The block's content without the line break before its closing fence.
    pub(crate) fn content(&self, answer: &str) -> String {
        let raw = answer.get(self.start..self.end).unwrap_or_default();
        let mut content = if self.indent == 0 {
            raw.to_owned()
        } else {
            raw.split_inclusive('\n')
                .map(|line| strip_spaces(line, self.indent))
                .collect()
        };
        if content.ends_with('\n') {
            content.pop();
            if content.ends_with('\r') {
                content.pop();
            }
        }
        content
    }
}

/// A fence line, parsed.
struct Fence<'a> {
    /// `` ` `` or `~`.
    ch: u8,
    /// Number of fence characters.
    len: usize,
    indent: usize,
    /// The rest of the line, trimmed.
    info: &'a str,
}

/// Split the answer into lines with their byte offsets, terminators kept.
fn lines_with_offsets(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive('\n').scan(0, |offset, line| {
        let start = *offset;
        *offset += line.len();
        Some((start, line))
    })
}

fn parse_fence(line: &str) -> Option<Fence<'_>> {
    let line = line.trim_end_matches(['\n', '\r']);
    let indent = line.bytes().take_while(|b| *b == b' ').count();
    if indent > 3 {
        return None;
    }
    let rest = line.get(indent..)?;
    let ch = *rest.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = rest.bytes().take_while(|b| *b == ch).count();
    if len < 3 {
        return None;
    }
    let info = rest.get(len..)?.trim();
    if ch == b'`' && info.contains('`') {
        return None;
    }
    Some(Fence {
        ch,
        len,
        indent,
        info,
    })
}

/// Whether an answer that stopped at its token cap lost part of its code: a code block is still
/// open, or it has none (the code ran unfenced into the cap). Prose cut after the last closed
/// block loses nothing of the code.
pub fn cut_inside_code(answer: &str) -> bool {
    let fences = answer
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    fences == 0 || fences % 2 == 1
}

/// Every fenced block of the answer, in order, with nested fences handled as
/// described in the module documentation.
pub(crate) fn fenced_blocks(answer: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = lines_with_offsets(answer);
    while let Some((offset, line)) = lines.next() {
        let Some(open) = parse_fence(line) else {
            continue;
        };
        let start = offset + line.len();
        // Open levels as (fence char, fence length); the outer block is the first.
        let mut levels = vec![(open.ch, open.len)];
        let mut end = answer.len();
        let mut closed = false;
        for (inner_offset, inner_line) in lines.by_ref() {
            let Some(fence) = parse_fence(inner_line) else {
                continue;
            };
            let Some(&(ch, len)) = levels.last() else {
                break;
            };
            if fence.info.is_empty() && fence.ch == ch && fence.len >= len {
                levels.pop();
                if levels.is_empty() {
                    end = inner_offset;
                    closed = true;
                    break;
                }
            } else if !fence.info.is_empty() && fence.ch == open.ch {
                // Only same-character fences need nesting: a `~~~` line can
                // never close a ``` block anyway.
                levels.push((fence.ch, fence.len));
            }
        }
        if !closed {
            end = without_partial_fence(answer, start, open.ch, open.len);
        }
        blocks.push(Block {
            tag: tag_of(open.info),
            start,
            end,
            indent: open.indent,
        });
    }
    blocks
}

/// The end of an unclosed block's content: the answer's end, or the start of
/// a last line that is a truncated closing fence.
fn without_partial_fence(answer: &str, start: usize, ch: u8, len: usize) -> usize {
    let content = answer.get(start..).unwrap_or_default();
    let trimmed = content.trim_end();
    let last_line_start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let last_line = trimmed
        .get(last_line_start..)
        .unwrap_or_default()
        .trim_start();
    let is_partial_fence =
        !last_line.is_empty() && last_line.len() < len && last_line.bytes().all(|b| b == ch);
    if is_partial_fence {
        start + last_line_start
    } else {
        answer.len()
    }
}

fn strip_spaces(line: &str, max: usize) -> &str {
    let spaces = line.bytes().take(max).take_while(|b| *b == b' ').count();
    line.get(spaces..).unwrap_or(line)
}

fn longest<'a>(blocks: impl Iterator<Item = &'a Block>) -> Option<&'a Block> {
    blocks.fold(None, |best: Option<&Block>, block| match best {
        Some(best) if best.len() >= block.len() => Some(best),
        _ => Some(block),
    })
}

/// The language tag of an info string, lower-cased: its first word with
/// attribute syntax (`{.python}`, `language-python`, `rust,ignore`,
/// `python:app.py`) peeled off. "" when there is none.
pub(crate) fn tag_of(info: &str) -> String {
    let word = info
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '{' | '}' | ':'))
        .find(|word| !word.is_empty())
        .unwrap_or_default();
    let word = word.trim_start_matches('.').to_lowercase();
    match word.strip_prefix("language-") {
        Some(rest) => rest.to_owned(),
        None => word,
    }
}

/// Whether a block's tag names `lang`: one of its fence tags, one of them with
/// a version number (`python3.12`), or a file name in the language (`app.py`).
pub(crate) fn tag_matches(tag: &str, lang: Language) -> bool {
    if tag.is_empty() || lang == Language::Other {
        return false;
    }
    let tags = lang.fence_tags();
    let unversioned = tag.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    tags.contains(&tag)
        || tags.contains(&unversioned)
        || (tag.contains('.') && Language::from_path(tag) == lang)
}

fn starts_with_fence(answer: &str) -> bool {
    first_non_blank_line(answer).is_some_and(|line| parse_fence(line).is_some())
}

fn first_non_blank_line(text: &str) -> Option<&str> {
    text.lines().find(|line| !line.trim().is_empty())
}

/// An answer without fences is code when it does not open with prose.
fn unfenced_code(answer: &str, lang: Language) -> Option<String> {
    let first = first_non_blank_line(answer)?;
    if is_prose_line(first, lang) {
        return None;
    }
    // Drop the blank lines before the first real line, keep the rest verbatim.
    let start = lines_with_offsets(answer)
        .find(|(_, line)| !line.trim().is_empty())
        .map_or(0, |(offset, _)| offset);
    answer.get(start..).map(str::to_owned)
}

/// Phrases models open a chatty answer with; matched at the start of the
/// line, case-insensitively, and followed by a word boundary.
const PROSE_OPENINGS: &[&str] = &[
    "here is",
    "here's",
    "here\u{2019}s",
    "here are",
    "here you go",
    "below is",
    "below are",
    "the following",
    "the updated",
    "the complete",
    "the full",
    "this is the",
    "this file",
    "this code",
    "of course",
    "as requested",
    "let me",
    "i've",
    "i\u{2019}ve",
    "i have",
    "i'll",
    "i\u{2019}ll",
    "i will",
    "i'm",
    "i\u{2019}m",
    "i am",
    "i cannot",
    "i can't",
    "i can\u{2019}t",
    "unfortunately",
    "as an ai",
];

/// One-word openings, prose only when punctuation follows ("Sure!"), since
/// the bare word could be an identifier (`ok = True`).
const PROSE_INTERJECTIONS: &[&str] = &[
    "sure",
    "certainly",
    "absolutely",
    "okay",
    "ok",
    "alright",
    "great",
    "understood",
    "sorry",
    "thanks",
];

/// Whether a line reads as a chat answer's English rather than the file.
pub(crate) fn is_prose_line(line: &str, lang: Language) -> bool {
    let line = line.trim();
    let lower = line.to_lowercase();
    let opens_with = |phrase: &str, boundary: fn(char) -> bool| {
        lower
            .strip_prefix(phrase)
            .is_some_and(|rest| rest.chars().next().is_none_or(boundary))
    };
    if PROSE_OPENINGS
        .iter()
        .any(|phrase| opens_with(phrase, |c| !c.is_alphanumeric() && c != '_'))
    {
        return true;
    }
    if PROSE_INTERJECTIONS
        .iter()
        .any(|word| opens_with(word, |c| matches!(c, ',' | '!' | '.' | ':')))
    {
        return true;
    }
    if matches!(lang, Language::Markdown | Language::Other) {
        return false;
    }
    // "The file below implements the parser:" — a capitalised sentence.
    // Code punctuation rules it out.
    let words = line.split_whitespace().count();
    line.ends_with(['.', '!', '?', ':'])
        && words >= 4
        && line.chars().next().is_some_and(char::is_uppercase)
        && !line.contains([
            '(', ')', '{', '}', '[', ']', '=', ';', '<', '>', '"', '`', '#', '$',
        ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_strings_reduce_to_their_language_tag() {
        let cases = [
            ("python", "python"),
            ("Python", "python"),
            ("{.python}", "python"),
            ("{.python .numberLines}", "python"),
            ("python title=\"x.py\"", "python"),
            ("rust,ignore", "rust"),
            ("python:src/app.py", "python"),
            ("language-python", "python"),
            ("src/app.py", "src/app.py"),
            ("", ""),
            ("   ", ""),
        ];
        for (info, tag) in cases {
            assert_eq!(tag_of(info), tag, "{info:?}");
        }
    }

    #[test]
    fn tags_match_by_name_version_or_file_name() {
        assert!(tag_matches("python3", Language::Python));
        assert!(tag_matches("python3.12", Language::Python));
        assert!(tag_matches("py", Language::Python));
        assert!(tag_matches("src/app.py", Language::Python));
        assert!(tag_matches("typescript", Language::Tsx));
        assert!(!tag_matches("tsx", Language::TypeScript));
        assert!(!tag_matches("bash", Language::Python));
        assert!(!tag_matches("", Language::Python));
        assert!(!tag_matches("text", Language::Other));
    }

    #[test]
    fn fence_lines_follow_commonmark() {
        assert!(parse_fence("```").is_some());
        assert!(parse_fence("   ~~~~ python").is_some());
        assert!(
            parse_fence("    ```").is_none(),
            "four spaces make an indented code line"
        );
        assert!(parse_fence("``").is_none());
        assert!(parse_fence("```inline```").is_none());
        assert!(parse_fence("~~~ with `backticks`").is_some());
    }

    #[test]
    fn prose_openings_are_recognised_and_code_is_not() {
        for prose in [
            "Here is the file:",
            "Here's the updated code",
            "Sure! Here you go.",
            "Certainly, the code follows.",
            "The file below implements the parser:",
            "I've rewritten the module.",
            "Sorry, I cannot help with that.",
            "The module was rewritten to use async.",
        ] {
            assert!(is_prose_line(prose, Language::Python), "{prose}");
        }
        for code in [
            "import os",
            "ok = True",
            "def here(is_): pass",
            "fn main() {",
            "# Title",
            "class Parser(Base):",
            "name: writ",
            "certainly_not = 1",
            "SELECT id FROM users WHERE name = 'x';",
            "Hello world",
        ] {
            assert!(!is_prose_line(code, Language::Python), "{code}");
        }
    }

    #[test]
    fn a_sentence_is_content_in_markdown_and_plain_text_but_prose_elsewhere() {
        let line = "This project turns prompts into files.";
        assert!(is_prose_line(line, Language::Rust));
        assert!(!is_prose_line(line, Language::Markdown));
        assert!(!is_prose_line(line, Language::Other));
        assert!(is_prose_line("Here is the README:", Language::Markdown));
    }

    #[test]
    fn an_indented_fence_has_its_indentation_removed_from_the_content() {
        let answer = "1. Create it:\n   ```python\n   def f():\n       return 1\n   ```\n";
        assert_eq!(
            extract_code(answer, Language::Python).as_deref(),
            Some("def f():\n    return 1")
        );
    }

    #[test]
    fn a_crlf_answer_loses_the_line_break_before_its_closing_fence() {
        let answer = "```rust\r\nfn main() {}\r\n```\r\n";
        assert_eq!(
            extract_code(answer, Language::Rust).as_deref(),
            Some("fn main() {}")
        );
    }

    #[test]
    fn an_empty_block_is_empty_code_not_no_code() {
        assert_eq!(
            extract_code("```python\n```", Language::Python).as_deref(),
            Some("")
        );
        assert_eq!(
            extract_code("```python", Language::Python).as_deref(),
            Some("")
        );
    }

    #[test]
    fn a_docstring_example_with_a_tagged_fence_does_not_cut_the_file() {
        let code = "\"\"\"Usage:\n\n```python\nimport app\n```\n\"\"\"\nimport os";
        let answer = format!("Here:\n```python\n{code}\n```\nDone.");
        assert_eq!(
            extract_code(&answer, Language::Python).as_deref(),
            Some(code)
        );
    }

    #[test]
    fn a_readme_without_an_outer_fence_is_taken_whole() {
        let answer = "# Project\n\nInstall:\n\n```bash\nnpm i\n```\n";
        assert_eq!(
            extract_code(answer, Language::Markdown).as_deref(),
            Some(answer)
        );
    }
}
