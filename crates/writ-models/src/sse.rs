//! A small incremental Server-Sent Events parser: bytes in, `data` payloads and comments out.
//!
//! Hand-written rather than `eventsource-stream` so that comments stay visible (OpenRouter's
//! `: OPENROUTER PROCESSING` keep-alives are logged and must never reach the JSON parser) and
//! so that the caller keeps the byte stream, where the first-byte and idle timeouts live.
//! Follows the WHATWG rules we need: `\n` or `\r\n` line ends, `:` comments, multi-line `data`
//! joined by `\n`, one optional space after the colon, other fields ignored.

/// One thing the stream said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseEvent {
    /// The `data` of one event (lines joined by `\n`).
    Data(String),
    /// A comment line, e.g. a keep-alive.
    Comment(String),
}

#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already known to hold no newline, so long lines are scanned once.
    scanned: usize,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(offset) = memchr::memchr(b'\n', &self.buf[from..]) {
            let end = from + offset;
            let line = &self.buf[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // A provider streams one small event per token, so this runs for every token of
            // every candidate: valid UTF-8 (the rule) is read in place, only a broken line is
            // copied to replace its bad bytes.
            match std::str::from_utf8(line) {
                Ok(line) => on_line(&mut self.data, line, &mut events),
                Err(_) => on_line(&mut self.data, &String::from_utf8_lossy(line), &mut events),
            }
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        events
    }

    /// The end of the stream: an event without its closing blank line is still delivered, since
    /// some servers end with `data: [DONE]\n` and a cut-off JSON payload fails to parse anyway.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(rest.strip_suffix(b"\r").unwrap_or(&rest));
            on_line(&mut self.data, &line, &mut events);
        }
        self.scanned = 0;
        on_line(&mut self.data, "", &mut events);
        events
    }
}

/// One line of the stream; `data` holds the event being assembled.
fn on_line(data: &mut Option<String>, line: &str, events: &mut Vec<SseEvent>) {
    if line.is_empty() {
        if let Some(data) = data.take() {
            events.push(SseEvent::Data(data));
        }
        return;
    }
    if let Some(comment) = line.strip_prefix(':') {
        events.push(SseEvent::Comment(comment.trim().to_owned()));
        return;
    }
    let (field, value) = line.split_once(':').unwrap_or((line, ""));
    let value = value.strip_prefix(' ').unwrap_or(value);
    if field == "data" {
        match data {
            Some(data) => {
                data.push('\n');
                data.push_str(value);
            }
            None => *data = Some(value.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &str, piece: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            events.extend(parser.push(chunk));
        }
        events.extend(parser.finish());
        events
    }

    #[test]
    fn keep_alive_comments_are_comments_not_data() {
        let input = ": OPENROUTER PROCESSING\n\ndata: {\"a\":1}\n\n: OPENROUTER PROCESSING\n\ndata: [DONE]\n\n";
        let expected = vec![
            SseEvent::Comment("OPENROUTER PROCESSING".into()),
            SseEvent::Data("{\"a\":1}".into()),
            SseEvent::Comment("OPENROUTER PROCESSING".into()),
            SseEvent::Data("[DONE]".into()),
        ];
        for piece in [1, 2, 3, 7, 1000] {
            assert_eq!(
                parse_in_pieces(input, piece),
                expected,
                "pieces of {piece} bytes"
            );
        }
    }

    #[test]
    fn crlf_multiline_data_and_other_fields() {
        let input = "event: message\r\nid: 7\r\ndata: line one\r\ndata:line two\r\n\r\n";
        assert_eq!(
            parse_in_pieces(input, 5),
            vec![SseEvent::Data("line one\nline two".into())]
        );
    }

    #[test]
    fn a_last_event_without_blank_line_is_delivered() {
        assert_eq!(
            parse_in_pieces("data: [DONE]", 4),
            vec![SseEvent::Data("[DONE]".into())]
        );
    }

    #[test]
    fn a_line_with_bytes_that_are_not_utf8_keeps_the_rest_of_its_text() {
        assert_eq!(
            parse_in_pieces("data: a\u{0}b\n\n", 3),
            vec![SseEvent::Data("a\u{0}b".into())]
        );
        let mut parser = SseParser::default();
        let mut events = parser.push(b"data: caf\xe9 ok\n\ndata: next\n\n");
        events.extend(parser.finish());
        assert_eq!(
            events,
            vec![
                SseEvent::Data("caf\u{FFFD} ok".into()),
                SseEvent::Data("next".into())
            ]
        );
    }

    #[test]
    fn multibyte_characters_split_across_chunks_survive() {
        let input = "data: {\"c\":\"héllo — 世界\"}\n\n";
        assert_eq!(
            parse_in_pieces(input, 1),
            vec![SseEvent::Data("{\"c\":\"héllo — 世界\"}".into())]
        );
    }
}
