//! The W3C trace context (`traceparent`, `tracestate`) of the span a call runs in, for the
//! headers of a request writ sends on: a model provider that traces joins the caller's trace.
//!
//! The core knows no tracing backend: the one that keeps spans' ids (the server's OTLP layer)
//! installs where to read them at start-up; without it there is no context to send.

use std::sync::OnceLock;

/// A span's context as W3C Trace Context headers carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
    /// The vendors' state that came with the trace, passed on as it came.
    pub tracestate: Option<String>,
}

static SOURCE: OnceLock<fn() -> Option<TraceContext>> = OnceLock::new();

/// Sets where [`current`] reads the context; the first call wins (one backend per process).
pub fn install(source: fn() -> Option<TraceContext>) {
    let _ = SOURCE.set(source);
}

/// The context of the current span, when a tracing backend keeps one.
pub fn current() -> Option<TraceContext> {
    SOURCE.get().and_then(|source| source())
}

/// A `traceparent` header's parts: trace id, parent span id, sampled. `None` for a value the
/// W3C format refuses (version `ff`, a wrong length, ids all zeros, not hex); a later version's
/// extra fields are ignored, as the specification asks.
pub fn parse_traceparent(value: &str) -> Option<(u128, u64, bool)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    let extra = parts.next();
    let hex = |s: &str, len: usize| {
        (s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then_some(())
    };
    hex(version, 2)?;
    hex(trace, 32)?;
    hex(span, 16)?;
    hex(flags, 2)?;
    if version == "ff" || (version == "00" && extra.is_some()) {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok()?;
    let span = u64::from_str_radix(span, 16).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (trace != 0 && span != 0).then_some((trace, span, flags & 1 == 1))
}

/// The `traceparent` of span `span` of trace `trace`.
pub fn format_traceparent(trace: u128, span: u64, sampled: bool) -> String {
    format!("00-{trace:032x}-{span:016x}-{:02x}", u8::from(sampled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_the_w3c_format_writes_it_and_a_bad_one_is_not() {
        let (trace, span, sampled) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(span, 0x00f067aa0ba902b7);
        assert!(sampled);
        assert_eq!(
            format_traceparent(trace, span, sampled),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .map(|p| p.2),
            Some(false)
        );
        // A later version's extra field is ignored.
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what")
                .is_some()
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }
}
