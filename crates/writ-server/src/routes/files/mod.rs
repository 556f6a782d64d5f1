//! The direct file routes: list, read, and raw-body writes (recorded through [`writ_core::direct`]).
//!
//! Content travels as the raw body, never inside a JSON string, so large files cannot be
//! truncated or mangled by JSON encoding on the way in.
//!
//! Reads and listings live in `reads`, writes in `writes`; both are re-exported here, where
//! the route table finds them. What they do is [`crate::service::files`], shared with the tools.

mod reads;
mod writes;

pub use reads::{ReadHeaders, ReadParams, list_files, read_file};
pub use writes::{WriteHeaders, WrittenHeaders, put_file};

/// The path of `/files/{path}`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct FilePath {
    /// File path relative to REPO_DIR; may contain slashes.
    pub path: String,
}

/// An `ETag` of a file: its SHA-256 in quotes.
fn etag(sha256: &str) -> String {
    format!("\"{sha256}\"")
}
