//! One model answer checked as a candidate file: its code extracted and
//! normalised, rejected when there is none, and parsed where writ can.
//!
//! For a file that exists ([`check_update`]) the answer is edits (SEARCH/REPLACE blocks,
//! applied strictly) or, from a model that ignores the ask, a whole file; either way the result
//! must not lose what the file had ([`crate::loss`]).

use crate::edit::{Fallback, apply_blocks, parse_blocks};
use crate::extract::extract_code;
use crate::language::Language;
use crate::loss::{SHRINK_KEEP_PERCENT, elision, removed_definitions, shrunk};
use crate::normalise::normalise;
use crate::syntax::syntax_ok;

/// A candidate that passed the checks: ready to be compared with the others
/// and shown to the arbiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedCandidate {
    /// The normalised code; candidates with equal `code` are the same candidate.
    pub code: String,
    /// Whether the code parses (`None`: no parser for the language, or too large).
    /// Candidates that do not parse rank below those that do.
    pub parsed: Option<bool>,
}

/// Why an answer yields no candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No code block, and the answer reads as prose.
    #[error("the answer contains no code")]
    NoCode,
    /// A code block, but nothing in it except whitespace.
    #[error("the code is empty")]
    Empty,
}

/// Check one model's answer for a file in `lang`: extract the code, normalise
/// it, reject it if empty, and parse it.
pub fn check_candidate(answer: &str, lang: Language) -> Result<CheckedCandidate, Rejection> {
    let extracted = extract_code(answer, lang).ok_or(Rejection::NoCode)?;
    let code = normalise(&extracted);
    if code.is_empty() {
        return Err(Rejection::Empty);
    }
    let parsed = syntax_ok(&code, lang);
    Ok(CheckedCandidate { code, parsed })
}

/// What an answer for an existing file is checked against.
#[derive(Clone, Copy, Debug)]
pub struct UpdateTarget<'a> {
    /// The file as it was, in view form ([`crate::shape::view`]): what nothing may be lost from.
    pub original: &'a str,
    /// What the answer's edits apply to: the original, or in a repair round the candidate that
    /// was sent back.
    pub base: &'a str,
    /// The file's description: a definition it names may be removed.
    pub description: &'a str,
    /// The request allows removing definitions and shrinking the file.
    pub allow_removals: bool,
}

/// How an update answer was given.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AnswerForm {
    /// SEARCH/REPLACE blocks.
    Edits,
    /// The whole file.
    WholeFile,
}

/// An update candidate that passed the checks: the whole new content in view form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedUpdate {
    pub code: String,
    pub parsed: Option<bool>,
    pub form: AnswerForm,
    /// Set when an edit matched only through the whitespace fallback.
    pub fallback: Option<Fallback>,
}

/// Why an answer for an existing file yields no candidate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateRejection {
    #[error(transparent)]
    Plain(#[from] Rejection),
    /// An edit did not apply (or its blocks could not be read).
    #[error("{0}")]
    EditFailed(String),
    /// A placeholder stands where code was.
    #[error("the candidate elides code: line {line} is a placeholder where code was: {text}")]
    Elided { line: usize, text: String },
    /// Definitions gone that the description does not ask to remove.
    #[error(
        "the candidate removes definitions the description does not ask to remove: {}",
        .0.join(", ")
    )]
    RemovedDefinitions(Vec<String>),
    /// Too few of the file's lines kept.
    #[error(
        "the candidate keeps {kept} of the file's {had} non-blank lines (less than {SHRINK_KEEP_PERCENT} %): it looks cut off"
    )]
    Shrunk { kept: usize, had: usize },
}

/// Check one model's answer for an existing file in `lang`: apply its edits (or take its whole
/// file), then refuse it if it loses anything of the original; see the module docs.
pub fn check_update(
    answer: &str,
    lang: Language,
    target: UpdateTarget<'_>,
) -> Result<CheckedUpdate, UpdateRejection> {
    let (code, form, fallback) = match parse_blocks(answer) {
        Err(e) => return Err(UpdateRejection::EditFailed(e.to_string())),
        Ok(Some(blocks)) => {
            let applied = apply_blocks(target.base, &blocks)
                .map_err(|e| UpdateRejection::EditFailed(e.message))?;
            (applied.text, AnswerForm::Edits, applied.fallback)
        }
        Ok(None) => {
            let extracted = extract_code(answer, lang).ok_or(Rejection::NoCode)?;
            let code = normalise(&extracted);
            if code.is_empty() {
                return Err(Rejection::Empty.into());
            }
            (code, AnswerForm::WholeFile, None)
        }
    };
    if let Some((line, text)) = elision(target.original, &code) {
        return Err(UpdateRejection::Elided { line, text });
    }
    if !target.allow_removals {
        let removed = removed_definitions(target.original, &code, lang, target.description);
        if !removed.is_empty() {
            return Err(UpdateRejection::RemovedDefinitions(removed));
        }
        if let Some((kept, had)) = shrunk(target.original, &code) {
            return Err(UpdateRejection::Shrunk { kept, had });
        }
    }
    let parsed = syntax_ok(&code, lang);
    Ok(CheckedUpdate {
        code,
        parsed,
        form,
        fallback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(original: &'a str) -> UpdateTarget<'a> {
        UpdateTarget {
            original,
            base: original,
            description: "add a function g at the end",
            allow_removals: false,
        }
    }

    fn module(n: usize) -> String {
        (0..n)
            .map(|i| format!("def f{i}(x):\n    return x + {i}\n\n\n"))
            .collect()
    }

    #[test]
    fn edits_apply_to_the_whole_file_and_keep_every_line() {
        let original = module(300);
        let answer = "<<<<<<< SEARCH\ndef f299(x):\n    return x + 299\n=======\ndef f299(x):\n    return x + 299\n\n\ndef g():\n    return 0\n>>>>>>> REPLACE\n";
        let c = check_update(answer, Language::Python, target(&original)).unwrap();
        assert_eq!(c.form, AnswerForm::Edits);
        assert!(c.code.starts_with(&original[..original.len() - 2]));
        assert!(
            c.code.ends_with("def g():\n    return 0\n\n\n"),
            "{}",
            &c.code[c.code.len() - 60..]
        );
        assert_eq!(c.parsed, Some(true));
    }

    #[test]
    fn a_lazy_whole_file_is_refused_as_elided() {
        let original = module(300);
        let answer = format!(
            "```python\n{}\n# ... rest of the file unchanged ...\n\ndef g():\n    return 0\n```",
            module(1)
        );
        let err = check_update(&answer, Language::Python, target(&original)).unwrap_err();
        assert!(matches!(err, UpdateRejection::Elided { .. }), "{err}");
    }

    #[test]
    fn a_silently_halved_whole_file_is_refused_naming_what_it_removes() {
        let original = module(300);
        let answer = format!("```python\n{}def g():\n    return 0\n```", module(150));
        match check_update(&answer, Language::Python, target(&original)).unwrap_err() {
            UpdateRejection::RemovedDefinitions(names) => {
                assert_eq!(names.len(), 150);
                assert_eq!(names[0], "f150");
            }
            other => panic!("{other}"),
        }
        let allowed = UpdateTarget {
            allow_removals: true,
            ..target(&original)
        };
        assert!(check_update(&answer, Language::Python, allowed).is_ok());
    }

    #[test]
    fn a_complete_whole_file_passes() {
        let original = module(30);
        let answer = format!("```python\n{original}def g():\n    return 0\n```");
        let c = check_update(&answer, Language::Python, target(&original)).unwrap();
        assert_eq!(c.form, AnswerForm::WholeFile);
    }

    #[test]
    fn an_edit_that_does_not_apply_is_an_edit_failure_naming_the_block() {
        let original = module(3);
        let answer = "<<<<<<< SEARCH\ndef nope():\n=======\nx\n>>>>>>> REPLACE\n";
        match check_update(answer, Language::Python, target(&original)).unwrap_err() {
            UpdateRejection::EditFailed(m) => assert!(m.starts_with("SEARCH block 1"), "{m}"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_fenced_python_answer_becomes_a_parsed_candidate() {
        let checked = check_candidate("Here:\n```python\nx = 1\n```\n", Language::Python);
        assert_eq!(
            checked,
            Ok(CheckedCandidate {
                code: "x = 1\n".into(),
                parsed: Some(true),
            })
        );
    }

    #[test]
    fn prose_only_and_blank_blocks_are_rejected_with_their_reason() {
        assert_eq!(
            check_candidate("Sorry, I cannot help.", Language::Rust),
            Err(Rejection::NoCode)
        );
        assert_eq!(
            check_candidate("```rust\n  \n```", Language::Rust),
            Err(Rejection::Empty)
        );
        assert_eq!(Rejection::NoCode.to_string(), "the answer contains no code");
        assert_eq!(Rejection::Empty.to_string(), "the code is empty");
    }
}
