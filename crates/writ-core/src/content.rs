//! Content helpers shared by every route that writes or shows a file.

use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256, the form used in `If-Match`, `expected_sha256` and the audit log.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One invalid UTF-8 sequence: where it is and a little of what surrounds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct InvalidUtf8 {
    /// Byte offset of the first invalid byte.
    pub offset: usize,
    /// The invalid bytes, hex.
    pub bytes_hex: String,
    /// Up to 16 bytes either side, lossily decoded, so a caller can find the spot.
    pub context: String,
}

/// Finds every invalid UTF-8 sequence (at most `max` of them).
pub fn invalid_utf8_sequences(bytes: &[u8], max: usize) -> Vec<InvalidUtf8> {
    let mut found = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() && found.len() < max {
        match std::str::from_utf8(&bytes[pos..]) {
            Ok(_) => break,
            Err(e) => {
                let bad_at = pos + e.valid_up_to();
                let bad_len = e.error_len().unwrap_or(bytes.len() - bad_at);
                let lo = bad_at.saturating_sub(16);
                let hi = (bad_at + bad_len + 16).min(bytes.len());
                found.push(InvalidUtf8 {
                    offset: bad_at,
                    bytes_hex: hex::encode(&bytes[bad_at..bad_at + bad_len]),
                    context: String::from_utf8_lossy(&bytes[lo..hi]).into_owned(),
                });
                pos = bad_at + bad_len;
            }
        }
    }
    found
}

/// A `cat -n`-style numbered preview of at most `max_lines` lines, the way `cat -n` shows a file.
pub fn numbered_preview(text: &str, max_lines: usize) -> String {
    let mut out = String::new();
    for (i, line) in text.lines().enumerate().take(max_lines) {
        out.push_str(&format!("{:>6}\t{}\n", i + 1, line));
    }
    let total = text.lines().count();
    if total > max_lines {
        out.push_str(&format!("… ({} more lines)\n", total - max_lines));
    }
    out
}

/// Cuts `text` to at most `max_chars` characters; returns the cut text and whether it was cut.
pub fn truncate_chars(text: &str, max_chars: usize) -> (&str, bool) {
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => (&text[..byte], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_sequences_are_located_by_byte_offset() {
        let bytes = b"abc\xffdef\xc3(xyz";
        let bad = invalid_utf8_sequences(bytes, 10);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].offset, 3);
        assert_eq!(bad[0].bytes_hex, "ff");
        assert_eq!(bad[1].offset, 7);
        assert!(bad[1].context.contains("xyz"));
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let (cut, was_cut) = truncate_chars("ééé", 2);
        assert_eq!(cut, "éé");
        assert!(was_cut);
        assert_eq!(truncate_chars("ab", 2), ("ab", false));
    }

    #[test]
    fn preview_numbers_lines_and_says_what_it_left_out() {
        let p = numbered_preview("a\nb\nc\n", 2);
        assert_eq!(p, "     1\ta\n     2\tb\n… (1 more lines)\n");
    }
}
