//! The direct file routes: list, read, and raw-body writes (recorded through [`writ_core::direct`]).
//!
//! Content travels as the raw body, never inside a JSON string, so large files cannot be
//! truncated or mangled by JSON encoding on the way in.
//!
//! Reads and listings live in `reads`, writes in `writes`; both are re-exported here, where
//! the route table and the tools find them.

mod reads;
mod writes;

pub use reads::{
    FileContent, FileRead, ListParams, Listing, ReadParams, list_dir, list_files, read, read_file,
};
pub use writes::{
    DirectWrite, InvalidUtf8Policy, WriteAnswer, WriteParams, Written, parse_expected_sha256,
    put_file, write,
};

use axum::http::HeaderValue;

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
