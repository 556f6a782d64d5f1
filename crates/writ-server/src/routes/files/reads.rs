//! The reading file routes: a directory's listing and a file's content (text cut at a character
//! limit, or the raw bytes), with its size and SHA-256 in the headers; read by
//! [`crate::service::files`].

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use writ_core::Workspace;

use super::FilePath;
use crate::config::Settings;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::headers::header_map;
use crate::service::files::{FileContent, ListParams, list_dir, read};

/// List the entries of a directory of the workspace.
pub async fn list_files(
    State(workspace): State<Arc<dyn Workspace>>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    Ok(Json(list_dir(workspace.as_ref(), params).await?).into_response())
}

/// The query of `GET /files/{path}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Characters to return (default 10000, at most WRIT_READ_MAX_CHARS, 1000000 by default).
    #[schemars(range(min = 1))]
    max_chars: Option<usize>,
}

/// The headers of a file's content.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ReadHeaders {
    /// The file's SHA-256 in quotes; send it back as If-Match. Absent when the file is longer
    /// than 4 x max_chars bytes (only its head was read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Full size in bytes.
    #[serde(rename = "x-writ-size-bytes")]
    pub size_bytes: u64,
    /// Full size in characters, for text whose whole was read.
    #[serde(rename = "x-writ-size-chars", skip_serializing_if = "Option::is_none")]
    pub size_chars: Option<u64>,
    /// Whether the content was cut.
    #[serde(rename = "x-writ-truncated")]
    pub truncated: bool,
}

/// Read a file. Text is cut at `max_chars` characters with a marker saying so; the headers give
/// the full size and the SHA-256 to send back as `If-Match`.
pub async fn read_file(
    State(workspace): State<Arc<dyn Workspace>>,
    State(settings): State<Arc<Settings>>,
    Path(FilePath { path }): Path<FilePath>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> Result<Response, ApiError> {
    let read = read(workspace.as_ref(), &settings, &path, params.max_chars).await?;
    let etag = read.sha256.as_deref().map(super::etag);
    let (media, headers, body) = match read.content {
        FileContent::Binary(bytes) => {
            let headers = ReadHeaders {
                etag,
                size_bytes: read.size_bytes,
                size_chars: None,
                truncated: (bytes.len() as u64) < read.size_bytes,
            };
            (OCTET_STREAM, headers, Body::from(bytes))
        }
        FileContent::Text {
            shown,
            total_chars,
            truncated,
        } => {
            let headers = ReadHeaders {
                etag,
                size_bytes: read.size_bytes,
                size_chars: total_chars.map(|n| n as u64),
                truncated,
            };
            (TEXT, headers, Body::from(shown))
        }
    };
    Ok((
        StatusCode::OK,
        header_map(&headers),
        [(header::CONTENT_TYPE, media)],
        body,
    )
        .into_response())
}

const OCTET_STREAM: &str = "application/octet-stream";
const TEXT: &str = "text/plain; charset=utf-8";
