//! Reading the arbiter's answer: which of the `n` distinct candidates it
//! chose (numbered from 1) and why, from `{"choice": N, "reason": "…"}` in
//! whatever wrapping a model puts around it.

use serde_json::{Map, Value};

use crate::extract::{fenced_blocks, tag_matches};
use crate::language::Language;

/// Only this much of an arbiter's answer is read: a verdict is a short JSON
/// object, and the bound keeps hostile answers from costing much.
const MAX_VERDICT_BYTES: usize = 64 * 1024;

/// At most this many `{…}` spans are tried as JSON, for the same reason.
const MAX_OBJECT_ATTEMPTS: usize = 64;

/// The reason kept from a prose-only answer, in bytes.
const MAX_PROSE_REASON_BYTES: usize = 1000;

/// The arbiter's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The chosen candidate, from 1 to the number of candidates.
    pub choice: usize,
    /// The arbiter's explanation; empty when it gave none.
    pub reason: String,
}

/// Parse an arbiter's answer into a verdict among `n` candidates.
///
/// Tried in order, the first that finds a verdict object deciding:
/// 1. the whole answer as a JSON object;
/// 2. each balanced `{…}` in the answer (braces inside JSON strings
///    respected), in order of appearance;
/// 3. the content of each ```` ```json ```` fence;
/// 4. prose: "Candidate 2", "candidate #2", "choice: 2", when exactly one
///    number from 1 to `n` is named that way (the reason is then the answer).
///
/// A verdict object is a JSON object with a `choice` key (any case) holding
/// an integer or a string of digits; `reason` may be missing (empty string).
/// A verdict object whose choice is outside `1..=n` gives `None`, as does
/// an answer in which nothing is found.
pub fn parse_verdict(answer: &str, n: usize) -> Option<Verdict> {
    if n == 0 {
        return None;
    }
    let answer = answer
        .get(..answer.floor_char_boundary(MAX_VERDICT_BYTES))
        .unwrap_or(answer);
    let whole = std::iter::once(answer.trim());
    let spans = object_spans(answer).into_iter().take(MAX_OBJECT_ATTEMPTS);
    let fences = fenced_blocks(answer)
        .into_iter()
        .filter(|block| tag_matches(&block.tag, Language::Json))
        .map(|block| block.content(answer));
    let found = whole
        .map(str::to_owned)
        .chain(spans.filter_map(|(start, end)| answer.get(start..end).map(str::to_owned)))
        .chain(fences)
        .find_map(|text| verdict_object(&text));
    match found {
        Some(object) => verdict_from_object(&object, n),
        None => choice_in_prose(answer, n).map(|choice| Verdict {
            choice,
            reason: answer
                .trim()
                .get(..answer.trim().floor_char_boundary(MAX_PROSE_REASON_BYTES))
                .unwrap_or_default()
                .to_owned(),
        }),
    }
}

/// The text as a JSON object that has a usable `choice`.
fn verdict_object(text: &str) -> Option<Map<String, Value>> {
    let text = text.trim();
    if !text.starts_with('{') {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => choice_number(&object).is_some().then_some(object),
        _ => None,
    }
}

fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value)
}

/// The choice as a number, whether or not it is in range; `None` when the
/// object has no choice or it is not a whole number.
fn choice_number(object: &Map<String, Value>) -> Option<u64> {
    match field(object, "choice")? {
        Value::Number(number) => number.as_u64().or_else(|| {
            // `2.0` is a whole number too; negative and fractional are not.
            number
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= 1e15)
                .map(|f| f as u64)
        }),
        Value::String(text) => {
            let text = text.trim();
            if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            text.parse().ok()
        }
        _ => None,
    }
}

fn verdict_from_object(object: &Map<String, Value>, n: usize) -> Option<Verdict> {
    let choice = usize::try_from(choice_number(object)?).ok()?;
    if !(1..=n).contains(&choice) {
        return None;
    }
    let reason = match field(object, "reason") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(reason)) => reason.clone(),
        Some(other) => other.to_string(),
    };
    Some(Verdict { choice, reason })
}

/// Byte ranges of balanced `{…}` spans, by start. Double-quoted strings are
/// skipped only inside braces, so an apostrophe or a stray quote in the
/// surrounding prose cannot hide the JSON.
fn object_spans(text: &str) -> Vec<(usize, usize)> {
    let mut open = Vec::new();
    let mut spans = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (index, byte) in text.bytes().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' if !open.is_empty() => in_string = true,
            b'{' => open.push(index),
            b'}' => {
                if let Some(start) = open.pop() {
                    spans.push((start, index + 1));
                }
            }
            _ => {}
        }
    }
    spans.sort_unstable();
    spans
}

/// The one candidate number in `1..=n` that the prose names as "candidate N"
/// or "choice N" (with `:`, `#`, `=`, quotes, brackets or `*` allowed
/// between); `None` when there is none or more than one.
fn choice_in_prose(text: &str, n: usize) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut chosen = None;
    for keyword in ["candidate", "choice"] {
        for (position, _) in lower.match_indices(keyword) {
            let starts_word = position
                .checked_sub(1)
                .and_then(|before| bytes.get(before))
                .is_none_or(|b| !b.is_ascii_alphanumeric());
            if !starts_word {
                continue;
            }
            let Some(number) = number_after(bytes, position + keyword.len()) else {
                continue;
            };
            if !(1..=n).contains(&number) {
                continue;
            }
            match chosen {
                None => chosen = Some(number),
                Some(previous) if previous == number => {}
                Some(_) => return None,
            }
        }
    }
    chosen
}

/// The number that follows a keyword at `from`, past a few separators.
fn number_after(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let separators = rest
        .iter()
        .take(8)
        .take_while(|b| {
            matches!(
                b,
                b' ' | b'\t' | b':' | b'=' | b'#' | b'"' | b'\'' | b'*' | b'(' | b'['
            )
        })
        .count();
    let digits = rest.get(separators..)?;
    let length = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if length == 0 || length > 6 {
        return None;
    }
    std::str::from_utf8(digits.get(..length)?)
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(choice: usize, reason: &str) -> Option<Verdict> {
        Some(Verdict {
            choice,
            reason: reason.to_owned(),
        })
    }

    #[test]
    fn object_spans_skip_braces_inside_strings() {
        let text = r#"x {"a": "}{", "b": {"c": 1}} y"#;
        let spans: Vec<&str> = object_spans(text)
            .into_iter()
            .filter_map(|(s, e)| text.get(s..e))
            .collect();
        assert_eq!(spans, [r#"{"a": "}{", "b": {"c": 1}}"#, r#"{"c": 1}"#]);
    }

    #[test]
    fn keys_are_matched_in_any_case_and_whole_floats_count() {
        assert_eq!(
            parse_verdict(r#"{"Choice": 2.0, "Reason": "r"}"#, 2),
            verdict(2, "r")
        );
    }

    #[test]
    fn a_non_string_reason_is_kept_as_json() {
        assert_eq!(
            parse_verdict(r#"{"choice": 1, "reason": ["a"]}"#, 1),
            verdict(1, r#"["a"]"#)
        );
    }

    #[test]
    fn a_nested_verdict_object_is_found() {
        let answer = r#"{"verdict": {"choice": 2, "reason": "r"}}"#;
        assert_eq!(parse_verdict(answer, 3), verdict(2, "r"));
    }

    #[test]
    fn a_non_numeric_json_choice_falls_back_to_the_prose() {
        let answer = r#"{"choice": "Candidate 2", "reason": "shorter"}"#;
        assert_eq!(parse_verdict(answer, 3).map(|v| v.choice), Some(2));
    }

    #[test]
    fn prose_naming_two_candidates_is_ambiguous() {
        assert_eq!(
            parse_verdict("Candidate 1 is worse than candidate 2.", 2),
            None
        );
        assert_eq!(
            parse_verdict("I pick **Candidate #2**; candidate 2 handles errors.", 3)
                .map(|v| v.choice),
            Some(2)
        );
        assert_eq!(parse_verdict("All candidates 1 to 3 are fine.", 3), None);
    }

    #[test]
    fn no_candidates_means_no_verdict() {
        assert_eq!(parse_verdict(r#"{"choice": 1}"#, 0), None);
    }
}
