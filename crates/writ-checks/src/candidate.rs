//! One model answer checked as a candidate file: its code extracted and
//! normalised, rejected when there is none, and parsed where writ can.

use crate::extract::extract_code;
use crate::language::Language;
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

#[cfg(test)]
mod tests {
    use super::*;

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
