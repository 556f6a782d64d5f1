//! Changes to files that exist: what a candidate is checked against, and how the chosen change
//! is written back in the file's own shape.
//!
//! A model sees the file whole in view form (`\n` endings, no BOM; [`writ_checks::shape`]) and
//! answers with edits or a whole file; [`judge`] turns any answer into a candidate or a
//! non-viable record (`edit_failed`, `elided`, `removed_definitions`, `shrunk`), so nothing it
//! left out or cut can be chosen. Candidates stay in view form through selection and
//! validation; [`Existing::render`] gives the bytes to write: untouched lines byte for byte.

use writ_checks::{Language, UpdateRejection, UpdateTarget};

use crate::audit::CandidateRecord;
use crate::model::ErrorClass;

/// Longest unified diff an answer or an operation record carries; past it, `truncated`.
pub const MAX_DIFF_BYTES: usize = 64 * 1024;

/// A file's content when its batch began, as text.
#[derive(Debug, Clone)]
pub struct Existing {
    /// The file as it is on disk (BOM, line endings and all).
    pub original: String,
    /// What the models see and what their edits apply to.
    pub view: String,
}

impl Existing {
    /// The file's bytes as text; `Err` names why a model cannot change it.
    pub fn read(bytes: &[u8]) -> Result<Existing, String> {
        let original = std::str::from_utf8(bytes)
            .map_err(|e| {
                format!(
                    "it is not UTF-8 text (invalid byte at offset {}); writ changes only UTF-8 text files through models",
                    e.valid_up_to()
                )
            })?
            .to_string();
        let view = writ_checks::shape::view(&original);
        Ok(Existing { original, view })
    }

    /// A candidate (view form) as the bytes to write, in this file's shape.
    pub fn render(&self, candidate: &str) -> String {
        writ_checks::shape::render(&self.original, candidate)
    }

    /// What a candidate changes, for the answer and the audit record.
    pub fn change(&self, path: &str, candidate: &str) -> writ_checks::shape::Change {
        writ_checks::shape::Change::between(path, &self.view, candidate, MAX_DIFF_BYTES)
    }
}

/// What an answer must be: a new file in `language`, or a change of an existing one.
#[derive(Clone, Copy)]
pub struct Expect<'a> {
    pub language: Language,
    pub update: Option<UpdateTarget<'a>>,
}

impl<'a> Expect<'a> {
    pub fn new_file(language: Language) -> Self {
        Expect {
            language,
            update: None,
        }
    }

    /// The same, with the answer's edits applied to `base` (a candidate sent back for repair).
    pub fn on_base(self, base: &'a str) -> Self {
        Expect {
            update: self.update.map(|t| UpdateTarget { base, ..t }),
            ..self
        }
    }
}

/// Checks one answer as the provider returned it: one that stopped at its token cap inside its
/// code is refused before its text is judged, since a lenient parser (or an edit that applies)
/// could accept a file whose end is missing. Then as [`judge`].
pub fn judge_response(
    resp: &crate::model::ChatResponse,
    expect: &Expect<'_>,
    record: &mut CandidateRecord,
) -> Option<String> {
    if resp.finish_reason.as_deref() == Some("length")
        && writ_checks::extract::cut_inside_code(&resp.content)
    {
        record.error_class = Some(ErrorClass::Truncated);
        record.error = Some(format!(
            "the answer stopped at its token cap (finish_reason \"length\"{}) with its code unfinished; a cut file is not a candidate",
            resp.usage
                .completion_tokens
                .map(|n| format!(", {n} completion tokens"))
                .unwrap_or_default()
        ));
        return None;
    }
    judge(&resp.content, expect, record)
}

/// Checks one answer: fills `record` (`ok`, `parsed`, the error class and message, how an
/// update was answered) and returns the candidate's code when it is viable.
pub fn judge(answer: &str, expect: &Expect<'_>, record: &mut CandidateRecord) -> Option<String> {
    let Some(target) = expect.update else {
        return match writ_checks::check_candidate(answer, expect.language) {
            Ok(checked) => {
                record.ok = true;
                record.parsed = checked.parsed;
                Some(checked.code)
            }
            Err(rejection) => {
                record.error_class = Some(ErrorClass::NoCode);
                record.error = Some(rejection.to_string());
                None
            }
        };
    };
    match writ_checks::check_update(answer, expect.language, target) {
        Ok(checked) => {
            record.ok = true;
            record.parsed = checked.parsed;
            record.answer_form = Some(checked.form);
            record.edit_fallback = checked.fallback;
            Some(checked.code)
        }
        Err(rejection) => {
            record.error_class = Some(match &rejection {
                UpdateRejection::Plain(_) => ErrorClass::NoCode,
                UpdateRejection::EditFailed(_) => ErrorClass::EditFailed,
                UpdateRejection::Elided { .. } => ErrorClass::Elided,
                UpdateRejection::RemovedDefinitions(_) => ErrorClass::RemovedDefinitions,
                UpdateRejection::Shrunk { .. } => ErrorClass::Shrunk,
            });
            if let UpdateRejection::RemovedDefinitions(names) = &rejection {
                record.removed_definitions = names.clone();
            }
            record.error = Some(rejection.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_utf8_is_refused_with_the_offset() {
        let err = Existing::read(b"ok\n\xff\xfe").unwrap_err();
        assert!(err.contains("offset 3"), "{err}");
    }

    #[test]
    fn a_lazy_answer_is_recorded_as_elided_and_yields_nothing() {
        let original: String = (0..30)
            .map(|i| format!("def f{i}():\n    return {i}\n\n"))
            .collect();
        let existing = Existing::read(original.as_bytes()).unwrap();
        let expect = Expect {
            language: Language::Python,
            update: Some(UpdateTarget {
                original: &existing.view,
                base: &existing.view,
                description: "add g",
                allow_removals: false,
            }),
        };
        let mut record = CandidateRecord::default();
        let answer = "```python\ndef f0():\n    return 0\n\n# ... rest of the file unchanged ...\n\ndef g():\n    pass\n```";
        assert_eq!(judge(answer, &expect, &mut record), None);
        assert_eq!(record.error_class, Some(ErrorClass::Elided));
        assert!(!record.ok);
    }
}
