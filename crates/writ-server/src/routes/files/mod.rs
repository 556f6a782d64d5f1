//! The direct file routes: list, read, and raw-body writes (recorded through [`writ_core::direct`]).
//!
//! Content travels as the raw body, never inside a JSON string, so large files cannot be
//! truncated or mangled by JSON encoding on the way in.
//!
//! Reads and listings live in `reads`, writes in `writes`; both are re-exported here, where
//! the route table finds them. What they do is [`crate::service::files`], shared with the tools.

mod reads;
mod writes;

pub use reads::{ReadParams, list_files, read_file};
pub use writes::put_file;

use axum::http::HeaderValue;

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
