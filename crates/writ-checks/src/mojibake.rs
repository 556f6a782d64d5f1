//! Repair of mojibake: UTF-8 text that was decoded as Windows-1252 or
//! Latin-1 somewhere on its way (`cafÃ©` for `café`, `â€™` for `’`,
//! `ðŸ˜€` for `😀`), as Python's ftfy does.
//!
//! # Approach
//!
//! Each character that Windows-1252 or Latin-1 produces from a byte at or
//! above 0x80 is mapped back to that byte; a run of such characters that
//! forms one well-formed UTF-8 sequence (a lead byte and its continuation
//! bytes, checked by `std::str::from_utf8`) is a *candidate sequence*. A
//! candidate is replaced by the character it encodes only when it is
//! *telling*, i.e. when real text would practically never contain it:
//!
//! - it holds a C1 control character (U+0080–U+009F): those are raw bytes
//!   decoded as Latin-1, or the bytes Windows-1252 leaves undefined;
//! - it is four characters long (emoji: `ðŸ˜€`);
//! - it is three characters long, unless a continuation is a no-break space
//!   after an ordinary lead letter: French puts one between a word and `»`,
//!   so `fermé »` must stay;
//! - it is two characters long and its lead is one of `Â Ã Ä Å Î Ï Ð Ñ Ø Ù`
//!   (the leads of Latin-1, Latin Extended-A, Greek, Cyrillic and Arabic, by
//!   far the commonest mojibake) or is no letter (`×`, Hebrew's lead), or its
//!   second character is not punctuation that ordinarily follows a word
//!   (`Gruß“` is German, not mojibake).
//!
//! Repair works **sequence by sequence**, not on whole lines or the whole
//! text: correct non-ASCII characters next to mojibake (`café` on one line,
//! `cafÃ©` on the next, or in the same word) are left alone, and a line that
//! mixes both is half repaired rather than skipped. Every replacement removes
//! a suspicious sequence, so the count of those always drops, which is the
//! "keep only if it reduces suspicious sequences" rule applied per sequence.
//!
//! The scan keeps its output on a stack and re-examines the top after each
//! replacement, so text mojibaked twice (`Ã\u{83}Â©` for `é`) is repaired in
//! the same single pass, the work stays linear in the input, and the repair
//! is idempotent: its output has no telling sequence left.
//!
//! No Unicode normalisation (NFC) is applied afterwards: code may rely on the
//! exact code points of its string literals.
//!
//! The Windows-1252 table is written out here (27 characters) rather than
//! taken from `encoding_rs`, which would add a dependency for one lookup; a
//! test checks it against `encoding_rs`'s WHATWG table.

use std::borrow::Cow;

/// Repair mojibake in `text`, as described in this module's documentation.
///
/// Text with nothing to repair, and in particular pure ASCII, comes back
/// borrowed.
pub fn repair_mojibake(text: &str) -> Cow<'_, str> {
    // Every repair starts from a lead character (Â to ô) in the input.
    if !text.chars().any(|c| ('\u{C2}'..='\u{F4}').contains(&c)) {
        return Cow::Borrowed(text);
    }
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    let mut changed = false;
    for c in text.chars() {
        out.push(c);
        while let Some((decoded, len)) = telling_sequence_at_end(&out) {
            out.truncate(out.len() - len);
            out.push(decoded);
            changed = true;
        }
    }
    if changed {
        Cow::Owned(out.into_iter().collect())
    } else {
        Cow::Borrowed(text)
    }
}

/// The character a telling sequence ending the slice encodes, and the
/// sequence's length in characters.
fn telling_sequence_at_end(chars: &[char]) -> Option<(char, usize)> {
    let last = byte_of(*chars.last()?)?;
    if !is_continuation(last) {
        return None;
    }
    // UTF-8 is self-synchronising: at most one of these lengths can fit.
    for len in 2..=4 {
        let Some(start) = chars.len().checked_sub(len) else {
            break;
        };
        let sequence = chars.get(start..)?;
        let Some(lead) = sequence.first().copied().and_then(byte_of) else {
            continue;
        };
        if sequence_length(lead) != len {
            continue;
        }
        let mut bytes = [lead, 0, 0, 0];
        for (slot, c) in bytes.iter_mut().zip(sequence).skip(1) {
            *slot = byte_of(*c).filter(|b| is_continuation(*b))?;
        }
        let decoded = std::str::from_utf8(bytes.get(..len)?)
            .ok()?
            .chars()
            .next()?;
        return is_telling(sequence).then_some((decoded, len));
    }
    None
}

fn is_telling(sequence: &[char]) -> bool {
    let (lead, continuations) = match sequence {
        [lead, rest @ ..] => (*lead, rest),
        [] => return false,
    };
    if continuations
        .iter()
        .any(|c| ('\u{80}'..='\u{9F}').contains(c))
    {
        return true;
    }
    match sequence.len() {
        4 => true,
        3 => matches!(lead, 'â' | 'ã' | 'ï') || !continuations.contains(&'\u{A0}'),
        2 => {
            matches!(
                lead,
                'Â' | 'Ã' | 'Ä' | 'Å' | 'Î' | 'Ï' | 'Ð' | 'Ñ' | 'Ø' | 'Ù'
            ) || !lead.is_alphabetic()
                || continuations.iter().all(|c| !follows_words(*c))
        }
        _ => false,
    }
}

/// Punctuation and marks that real text puts right after a letter.
fn follows_words(c: char) -> bool {
    matches!(
        c,
        '\u{A0}' // no-break space
            | '\u{AD}' // soft hyphen
            | '\u{2019}' | '\u{2018}' | '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201A}' // quotes
            | '\u{AB}' | '\u{BB}' | '\u{2039}' | '\u{203A}' // guillemets
            | '\u{2026}' | '\u{2013}' | '\u{2014}' | '\u{2022}' | '\u{B7}' // … – — • ·
            | '\u{B0}' | '\u{B2}' | '\u{B3}' | '\u{B9}' // ° ² ³ ¹
    )
}

/// How many bytes a UTF-8 sequence starting with `lead` has (0: not a lead).
fn sequence_length(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

fn is_continuation(byte: u8) -> bool {
    (0x80..=0xBF).contains(&byte)
}

/// The byte at or above 0x80 that Windows-1252 or Latin-1 decodes to `c`.
///
/// U+0080–U+00FF stand for themselves (Latin-1, and the five bytes
/// Windows-1252 leaves undefined, which WHATWG decoders pass through as C1
/// controls); the other 27 are Windows-1252's 0x80–0x9F.
fn byte_of(c: char) -> Option<u8> {
    if let Ok(byte) = u8::try_from(c) {
        return (byte >= 0x80).then_some(byte);
    }
    let byte = match c {
        '\u{20AC}' => 0x80, // €
        '\u{201A}' => 0x82, // ‚
        '\u{0192}' => 0x83, // ƒ
        '\u{201E}' => 0x84, // „
        '\u{2026}' => 0x85, // …
        '\u{2020}' => 0x86, // †
        '\u{2021}' => 0x87, // ‡
        '\u{02C6}' => 0x88, // ˆ
        '\u{2030}' => 0x89, // ‰
        '\u{0160}' => 0x8A, // Š
        '\u{2039}' => 0x8B, // ‹
        '\u{0152}' => 0x8C, // Œ
        '\u{017D}' => 0x8E, // Ž
        '\u{2018}' => 0x91, // ‘
        '\u{2019}' => 0x92, // ’
        '\u{201C}' => 0x93, // “
        '\u{201D}' => 0x94, // ”
        '\u{2022}' => 0x95, // •
        '\u{2013}' => 0x96, // –
        '\u{2014}' => 0x97, // —
        '\u{02DC}' => 0x98, // ˜
        '\u{2122}' => 0x99, // ™
        '\u{0161}' => 0x9A, // š
        '\u{203A}' => 0x9B, // ›
        '\u{0153}' => 0x9C, // œ
        '\u{017E}' => 0x9E, // ž
        '\u{0178}' => 0x9F, // Ÿ
        _ => return None,
    };
    Some(byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mojibake as the broken pipeline makes it: UTF-8 bytes read as Windows-1252.
    fn garble(text: &str) -> String {
        encoding_rs::WINDOWS_1252
            .decode_without_bom_handling(text.as_bytes())
            .0
            .into_owned()
    }

    #[test]
    fn the_byte_table_agrees_with_whatwg_windows_1252() {
        for byte in 0x80..=0xFF_u8 {
            let bytes = [byte];
            let (decoded, _) = encoding_rs::WINDOWS_1252.decode_without_bom_handling(&bytes);
            let c = decoded.chars().next().unwrap_or_default();
            assert_eq!(byte_of(c), Some(byte), "byte {byte:#x} decodes to {c:?}");
        }
        assert_eq!(byte_of('a'), None);
        assert_eq!(byte_of('中'), None);
    }

    #[test]
    fn garbled_text_in_many_scripts_is_restored() {
        for original in [
            "café",
            "naïve façade",
            "“quoted” ‘single’ — dash… €5 ™",
            "Zażółć gęślą jaźń",
            "Привет, мир",
            "Καλημέρα",
            "日本語のテキスト",
            "😀 👍 🎉",
            "שלום",
            "مرحبا بالعالم",
            "Gruß “Über”",
            "non\u{A0}breaking",
        ] {
            let garbled = garble(original);
            assert_ne!(garbled, original);
            assert_eq!(repair_mojibake(&garbled), original, "{garbled}");
        }
    }

    #[test]
    fn text_garbled_twice_is_restored_in_one_call() {
        let twice = garble(&garble("café ’"));
        assert_eq!(repair_mojibake(&twice), "café ’");
    }

    #[test]
    fn latin_1_mojibake_with_c1_controls_is_restored() {
        // "’" read as Latin-1 rather than Windows-1252: â U+0080 U+0099.
        assert_eq!(repair_mojibake("it\u{E2}\u{80}\u{99}s"), "it’s");
    }

    #[test]
    fn correct_text_that_resembles_mojibake_is_left_alone() {
        for correct in [
            "Gruß“ sagte er",
            "C’est fermé\u{A0}»",
            "« ÉTÉ\u{A0}»",
            "Ü’s",
            "déjà vu…",
            "señor",
            "中文",
        ] {
            assert!(
                matches!(repair_mojibake(correct), Cow::Borrowed(_)),
                "{correct}"
            );
        }
    }

    #[test]
    fn repair_is_idempotent_on_its_own_output() {
        let text = format!("{} and café", garble(&garble("naïve “x”")));
        let once = repair_mojibake(&text).into_owned();
        assert_eq!(repair_mojibake(&once), once);
    }
}
