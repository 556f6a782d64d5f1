//! The reading file routes: a directory's listing and a file's content (text cut at a character
//! limit, or the raw bytes), with its size and SHA-256 in the headers; read by
//! [`crate::service::files`].

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use writ_core::Workspace;

use super::header_value;
use crate::config::Settings;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::files::{FileContent, ListParams, list_dir, read};

/// List the entries of a directory of the workspace.
pub async fn list_files(
    State(workspace): State<Arc<dyn Workspace>>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    Ok(Json(list_dir(workspace.as_ref(), params).await?).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    max_chars: Option<usize>,
}

/// Read a file. Text is cut at `max_chars` characters with a marker saying so; the headers give
/// the full size and the SHA-256 to send back as `If-Match`.
pub async fn read_file(
    State(workspace): State<Arc<dyn Workspace>>,
    State(settings): State<Arc<Settings>>,
    Path(raw): Path<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> Result<Response, ApiError> {
    let read = read(workspace.as_ref(), &settings, &raw, params.max_chars).await?;
    let mut headers = HeaderMap::new();
    if let Some(sha256) = &read.sha256 {
        headers.insert(header::ETAG, header_value(&format!("\"{sha256}\"")));
    }
    headers.insert("x-writ-size-bytes", HeaderValue::from(read.size_bytes));
    match read.content {
        FileContent::Binary(bytes) => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            let cut = (bytes.len() as u64) < read.size_bytes;
            headers.insert(
                "x-writ-truncated",
                HeaderValue::from_static(if cut { "true" } else { "false" }),
            );
            Ok((StatusCode::OK, headers, bytes).into_response())
        }
        FileContent::Text {
            shown,
            total_chars,
            truncated,
        } => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            if let Some(total_chars) = total_chars {
                headers.insert("x-writ-size-chars", HeaderValue::from(total_chars as u64));
            }
            headers.insert(
                "x-writ-truncated",
                HeaderValue::from_static(if truncated { "true" } else { "false" }),
            );
            Ok((StatusCode::OK, headers, shown).into_response())
        }
    }
}
