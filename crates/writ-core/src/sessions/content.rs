//! The content's end: the `DONE` line that finishes a session, and the tail kept to see it.

/// Bytes of the content's end kept on the session row: enough to see a `DONE` line that a chunk
/// boundary split (`\r\nDONE\r\n` is eight).
const TAIL_BYTES: usize = 16;

/// Where a `DONE` line ends the content: the content without it, or `None`.
pub fn strip_done(content: &[u8]) -> Option<&[u8]> {
    let body = content
        .strip_suffix(b"\r\n")
        .or_else(|| content.strip_suffix(b"\n"))
        .unwrap_or(content);
    let before = body.strip_suffix(b"DONE")?;
    (before.is_empty() || before.ends_with(b"\n")).then_some(before)
}

/// The last [`TAIL_BYTES`] of `tail` followed by `chunk`.
pub(super) fn next_tail(tail: &[u8], chunk: &[u8]) -> Vec<u8> {
    let joined = [tail, chunk].concat();
    joined[joined.len().saturating_sub(TAIL_BYTES)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_line_is_found_with_or_without_its_newline() {
        assert_eq!(strip_done(b"a\nb\nDONE"), Some(&b"a\nb\n"[..]));
        assert_eq!(strip_done(b"a\nDONE\n"), Some(&b"a\n"[..]));
        assert_eq!(strip_done(b"a\r\nDONE\r\n"), Some(&b"a\r\n"[..]));
        assert_eq!(strip_done(b"DONE"), Some(&b""[..]));
        assert_eq!(strip_done(b"NOT DONE"), None);
        assert_eq!(strip_done(b"a\nDONE\n\n"), None);
        assert_eq!(strip_done(b"a\nDONE!"), None);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_across_chunks() {
        let tail = next_tail(b"0123456789abcdef", b"\nDO");
        assert_eq!(tail.len(), TAIL_BYTES);
        let tail = next_tail(&tail, b"NE\n");
        assert_eq!(strip_done(&tail).map(<[u8]>::len), Some(TAIL_BYTES - 5));
    }
}
