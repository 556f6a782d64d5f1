//! Which [`ErrorClass`] a failed attempt belongs to, and the provider's message for it.
//!
//! The table, as built (retried = may be retried within the call's attempts and deadline):
//!
//! | what the provider did                          | class             | retried |
//! |------------------------------------------------|-------------------|---------|
//! | 408                                            | `RequestTimeout`  | yes     |
//! | 429                                            | `RateLimited`     | yes     |
//! | 402 **with** `Retry-After`                     | `RateLimited`     | yes     |
//! | 500–599                                        | `ServerError`     | yes     |
//! | no answer within a timeout                     | `Timeout`         | yes     |
//! | connect failure, connection reset              | `Network`         | yes     |
//! | SSE error event after the stream began         | `MidStream`       | yes     |
//! | empty, truncated or malformed body             | `BadResponse`     | yes     |
//! | 400 and other 4xx not listed                   | `BadRequest`      | no      |
//! | 401                                            | `Unauthorized`    | no      |
//! | 402 without `Retry-After`                      | `PaymentRequired` | no      |
//! | 403                                            | `Forbidden`       | no      |
//! | 404                                            | `NotFound`        | no      |
//! | HTTP 200 with `{"error": {"code": N}}`         | as HTTP status N  | as N    |
//! | HTTP 200 with a non-numeric `error.code`       | `ServerError`     | yes     |
//!
//! A 402 with `Retry-After` is a spending limit that resets (a per-key budget window), not an
//! empty account: the provider tells us when to come back, so we do, and readiness stays green.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;
use writ_core::model::ErrorClass;

use crate::retry::retry_after;

/// Why one attempt failed. Becomes a [`writ_core::model::ModelError`] when the call gives up.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AttemptError {
    pub class: ErrorClass,
    pub status: Option<u16>,
    /// The provider's own words where there are any (already scrubbed of the key).
    pub message: String,
    /// When the provider asked us to come back.
    pub retry_after: Option<Duration>,
}

impl AttemptError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            status: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A non-2xx answer.
    pub fn from_status(status: u16, headers: &HeaderMap, body: &[u8]) -> Self {
        let retry_after = retry_after(headers);
        Self {
            class: class_for_status(status, retry_after.is_some()),
            status: Some(status),
            message: provider_message(body),
            retry_after,
        }
    }

    /// A 2xx answer whose body is an `error` object (OpenRouter mirrors HTTP codes in
    /// `error.code`).
    pub fn error_in_body(error: &Value, headers: &HeaderMap) -> Self {
        let code = error
            .get("code")
            .and_then(|c| c.as_u64().or_else(|| c.as_str()?.parse().ok()));
        let retry_after = retry_after(headers);
        let (class, status) = match code
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (400..600).contains(c))
        {
            Some(code) => (class_for_status(code, retry_after.is_some()), Some(code)),
            None => (ErrorClass::ServerError, None),
        };
        let code_text = error
            .get("code")
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".to_owned());
        Self {
            class,
            status,
            message: format!(
                "error inside an HTTP 200 (code {code_text}): {}",
                error_message(error)
            ),
            retry_after,
        }
    }

    /// A failure of the HTTP exchange itself.
    pub fn transport(err: reqwest::Error) -> Self {
        let err = err.without_url();
        let class = if err.is_timeout() {
            ErrorClass::Timeout
        } else if is_connection_reset(&err) || err.is_connect() {
            ErrorClass::Network
        } else if err.is_body() || err.is_decode() {
            // The connection closed before the announced end of the body.
            ErrorClass::BadResponse
        } else {
            ErrorClass::Network
        };
        Self::new(class, error_chain(&err))
    }
}

/// The class of an HTTP status; see the module table.
pub(crate) fn class_for_status(status: u16, has_retry_after: bool) -> ErrorClass {
    match status {
        401 => ErrorClass::Unauthorized,
        402 if has_retry_after => ErrorClass::RateLimited,
        402 => ErrorClass::PaymentRequired,
        403 => ErrorClass::Forbidden,
        404 => ErrorClass::NotFound,
        408 => ErrorClass::RequestTimeout,
        429 => ErrorClass::RateLimited,
        500..=599 => ErrorClass::ServerError,
        400..=499 => ErrorClass::BadRequest,
        // A redirect we did not follow, or an informational status: not a usable answer.
        _ => ErrorClass::BadResponse,
    }
}

/// The provider's message from an error body: OpenRouter's `error.message` (plus the
/// upstream provider's raw error when OpenRouter passes one on), other common shapes, or the
/// body itself, shortened.
pub(crate) fn provider_message(body: &[u8]) -> String {
    if body.iter().all(u8::is_ascii_whitespace) {
        return "(empty body)".to_owned();
    }
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        if let Some(error) = json.get("error") {
            return error_message(error);
        }
        for key in ["message", "detail"] {
            if let Some(text) = json.get(key).and_then(Value::as_str) {
                return shorten(text);
            }
        }
    }
    shorten(&String::from_utf8_lossy(body))
}

fn error_message(error: &Value) -> String {
    let Some(obj) = error.as_object() else {
        return shorten(error.as_str().unwrap_or(&error.to_string()));
    };
    let mut message = obj
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("(no message)")
        .to_owned();
    if let Some(meta) = obj.get("metadata") {
        let provider = meta.get("provider_name").and_then(Value::as_str);
        let raw = meta
            .get("raw")
            .map(|raw| raw.as_str().map_or_else(|| raw.to_string(), str::to_owned));
        match (provider, raw) {
            (Some(p), Some(raw)) => message.push_str(&format!(" [{p}: {raw}]")),
            (None, Some(raw)) => message.push_str(&format!(" [{raw}]")),
            (Some(p), None) => message.push_str(&format!(" [{p}]")),
            (None, None) => {}
        }
        if let Some(reasons) = meta.get("reasons") {
            message.push_str(&format!(" (reasons: {reasons})"));
        }
    }
    shorten(&message)
}

/// Error messages end up in logs and API answers; a provider's HTML error page should not.
fn shorten(text: &str) -> String {
    const MAX: usize = 1000;
    let text = text.trim();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The error and its causes on one line, without the URL (a base URL may carry credentials).
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn is_connection_reset(err: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    use super::*;

    #[test]
    fn statuses_map_to_the_documented_classes() {
        let table = [
            (400, ErrorClass::BadRequest),
            (401, ErrorClass::Unauthorized),
            (402, ErrorClass::PaymentRequired),
            (403, ErrorClass::Forbidden),
            (404, ErrorClass::NotFound),
            (408, ErrorClass::RequestTimeout),
            (413, ErrorClass::BadRequest),
            (422, ErrorClass::BadRequest),
            (429, ErrorClass::RateLimited),
            (500, ErrorClass::ServerError),
            (502, ErrorClass::ServerError),
            (503, ErrorClass::ServerError),
            (504, ErrorClass::ServerError),
            (302, ErrorClass::BadResponse),
        ];
        for (status, class) in table {
            assert_eq!(class_for_status(status, false), class, "HTTP {status}");
        }
    }

    #[test]
    fn a_402_with_retry_after_is_a_rate_limit() {
        assert_eq!(class_for_status(402, true), ErrorClass::RateLimited);
    }

    #[test]
    fn openrouter_error_bodies_keep_the_provider_message() {
        let body = br#"{"error":{"code":400,"message":"Provider returned error","metadata":{"provider_name":"Anthropic","raw":"prompt is too long"}}}"#;
        assert_eq!(
            provider_message(body),
            "Provider returned error [Anthropic: prompt is too long]"
        );
        assert_eq!(provider_message(b"  "), "(empty body)");
        assert_eq!(
            provider_message(b"<html>Bad Gateway</html>"),
            "<html>Bad Gateway</html>"
        );
        assert_eq!(
            provider_message(br#"{"detail":"model not loaded"}"#),
            "model not loaded"
        );
    }

    #[test]
    fn an_error_in_a_200_is_classified_by_its_code() {
        let mut headers = HeaderMap::new();
        let e = AttemptError::error_in_body(
            &serde_json::json!({"code": 429, "message": "slow down"}),
            &headers,
        );
        assert_eq!((e.class, e.status), (ErrorClass::RateLimited, Some(429)));
        assert!(e.message.contains("slow down"));
        let e = AttemptError::error_in_body(
            &serde_json::json!({"code": "401", "message": "bad key"}),
            &headers,
        );
        assert_eq!(e.class, ErrorClass::Unauthorized);
        let e = AttemptError::error_in_body(
            &serde_json::json!({"code": "server_error", "message": "boom"}),
            &headers,
        );
        assert_eq!((e.class, e.status), (ErrorClass::ServerError, None));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        let e = AttemptError::error_in_body(
            &serde_json::json!({"code": 402, "message": "budget"}),
            &headers,
        );
        assert_eq!(
            (e.class, e.retry_after),
            (ErrorClass::RateLimited, Some(Duration::from_secs(3)))
        );
    }

    #[test]
    fn long_messages_are_shortened() {
        let body = "x".repeat(5000);
        assert!(provider_message(body.as_bytes()).chars().count() <= 1001);
    }
}
