//! Normalisation of extracted code, so that candidates differing only in
//! encoding accidents compare equal and files land on disk in one shape.

use std::borrow::Cow;

use crate::mojibake::repair_mojibake;

/// Normalise code: repair mojibake, strip leading byte-order marks, use `\n`
/// for every line ending (`\r\n` and lone `\r` alike), and trim trailing
/// whitespace-only lines so that the code ends in exactly one `\n`.
///
/// Code that is empty or only whitespace becomes `""`. Trailing spaces on the
/// last real line are kept (Markdown gives them meaning). Idempotent.
pub fn normalise(code: &str) -> String {
    normalise_reporting_repair(code).0
}

/// [`normalise`], also telling whether mojibake was repaired.
pub(crate) fn normalise_reporting_repair(code: &str) -> (String, bool) {
    let repaired = repair_mojibake(code);
    let was_repaired = matches!(repaired, Cow::Owned(_));
    // Repair first: a garbled BOM (`ï»¿`) only becomes a BOM once repaired.
    let text = repaired.trim_start_matches('\u{FEFF}');
    let text = if text.contains('\r') {
        Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(text)
    };
    let content_end = text.trim_end().len();
    if content_end == 0 {
        return (String::new(), was_repaired);
    }
    let line_end = text
        .get(content_end..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |newline| content_end + newline);
    let mut normalised = String::with_capacity(line_end + 1);
    normalised.push_str(text.get(..line_end).unwrap_or_default());
    normalised.push('\n');
    (normalised, was_repaired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_endings_bom_and_trailing_blank_lines_are_normalised() {
        assert_eq!(normalise("\u{FEFF}a\r\nb\rc\n\n  \n\t\n"), "a\nb\nc\n");
        assert_eq!(normalise("x = 1"), "x = 1\n");
        assert_eq!(normalise("x = 1\n"), "x = 1\n");
    }

    #[test]
    fn trailing_spaces_on_the_last_line_are_kept() {
        assert_eq!(normalise("line  \n\n"), "line  \n");
    }

    #[test]
    fn blank_code_normalises_to_nothing() {
        assert_eq!(normalise(""), "");
        assert_eq!(normalise(" \r\n\t\n"), "");
        assert_eq!(normalise("\u{FEFF}"), "");
    }

    #[test]
    fn a_garbled_bom_is_repaired_then_stripped() {
        assert_eq!(normalise("\u{EF}\u{BB}\u{BF}x"), "x\n");
    }

    #[test]
    fn mojibake_repair_is_reported() {
        assert_eq!(
            normalise_reporting_repair("cafÃ©"),
            ("café\n".to_owned(), true)
        );
        assert_eq!(
            normalise_reporting_repair("café"),
            ("café\n".to_owned(), false)
        );
    }
}
