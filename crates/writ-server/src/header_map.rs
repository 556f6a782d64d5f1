//! An answer's headers written from a struct (the other half of [`crate::headers`]), apart from
//! the reading half so that the error type, which writes its headers here, and the readers, which
//! answer with the error type, do not import each other.

use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use serde_json::Value;

/// The headers `headers` holds, one per field that is not `None`: text as it is, numbers and
/// booleans as they print.
pub fn header_map<T: Serialize>(headers: &T) -> HeaderMap {
    let mut map = HeaderMap::new();
    let Ok(Value::Object(fields)) = serde_json::to_value(headers) else {
        return map;
    };
    for (name, value) in fields {
        let text = match value {
            Value::Null => continue,
            Value::String(s) => s,
            other => other.to_string(),
        };
        // A value that cannot be a header (a control character) is left out rather than sent
        // broken; the types written here hold ids, digests and numbers.
        if let (Ok(name), Ok(value)) = (HeaderName::from_str(&name), HeaderValue::from_str(&text)) {
            map.insert(name, value);
        }
    }
    map
}
