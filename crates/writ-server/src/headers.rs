//! Headers as types: a request's headers read into a struct ([`ApiHeaders`]), an answer's
//! written from one ([`header_map`]). The OpenAPI document lists a route's header parameters and
//! an answer's headers from the same structs (their serde names are the header names, in lower
//! case as HTTP/2 sends them; their doc comments are the descriptions), so a header read or
//! written is a header documented.

use std::str::FromStr;

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::error::{ApiError, ErrorCode};
pub use crate::header_map::header_map;

/// The request's headers that `T` names, read as serde reads a struct: each field a header,
/// an absent header an absent field. A value that does not read is 400 `invalid_header` naming
/// the header.
pub struct ApiHeaders<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiHeaders<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        read(&parts.headers).map(ApiHeaders)
    }
}

fn read<T: DeserializeOwned>(headers: &HeaderMap) -> Result<T, ApiError> {
    let mut fields = Map::new();
    for name in headers.keys() {
        // A header sent on several lines is one list (RFC 9110, 5.3).
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        fields.insert(name.as_str().to_owned(), Value::String(values.join(", ")));
    }
    serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
        let name = e.path().to_string();
        ApiError::new(
            ErrorCode::InvalidHeader,
            format!("{name}: {}", e.into_inner()),
        )
        .with_field(name)
    })
}

/// The `Authorization` header of a route that needs no key but says more to a caller with one
/// (`/readyz`): the document marks the key optional there.
pub struct PresentedKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for PresentedKey {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(PresentedKey(
            parts
                .headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ))
    }
}

/// Reads a header's text as a number (or any `FromStr` value), for a field such as
/// `last_event_id: Option<u64>` whose schema is then an integer.
pub fn parsed<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let text = String::deserialize(deserializer)?;
    text.trim()
        .parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{text:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Sent {
        #[serde(rename = "if-match")]
        if_match: Option<String>,
        #[serde(rename = "last-event-id", default, deserialize_with = "parsed")]
        last_event_id: Option<u64>,
        prefer: Option<String>,
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, axum::http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn named_headers_are_read_into_their_fields_whatever_else_is_sent() {
        let sent: Sent = read(&headers(&[
            ("If-Match", "\"abc\""),
            ("Last-Event-ID", "7"),
            ("Prefer", "wait=5"),
            ("Prefer", "respond-async"),
            ("User-Agent", "curl"),
        ]))
        .unwrap();
        assert_eq!(
            sent,
            Sent {
                if_match: Some("\"abc\"".into()),
                last_event_id: Some(7),
                prefer: Some("wait=5, respond-async".into()),
            }
        );
        let none: Sent = read(&HeaderMap::new()).unwrap();
        assert_eq!(none.if_match, None);
        assert_eq!(none.last_event_id, None);
    }

    #[test]
    fn a_header_that_does_not_read_is_refused_by_name() {
        let err = read::<Sent>(&headers(&[("Last-Event-ID", "-1")])).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidHeader);
        assert_eq!(err.field.as_deref(), Some("last-event-id"));
        assert!(err.message.contains("\"-1\""), "{}", err.message);
    }

    #[test]
    fn answers_headers_are_written_from_their_fields_leaving_out_none() {
        #[derive(serde::Serialize)]
        struct Answer {
            etag: Option<String>,
            #[serde(rename = "x-writ-size-bytes")]
            size: u64,
            #[serde(rename = "x-writ-truncated")]
            truncated: bool,
            location: Option<String>,
        }
        let map = header_map(&Answer {
            etag: Some("\"e\"".into()),
            size: 12,
            truncated: false,
            location: None,
        });
        assert_eq!(map["etag"], "\"e\"");
        assert_eq!(map["x-writ-size-bytes"], "12");
        assert_eq!(map["x-writ-truncated"], "false");
        assert!(!map.contains_key("location"));
    }
}
