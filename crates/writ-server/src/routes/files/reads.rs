//! The reading file routes: a directory's listing and a file's content (text cut at a character
//! limit, or the raw bytes), with its size and SHA-256 in the headers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use writ_core::RepoPath;
use writ_core::content::{sha256_hex, truncate_chars};
use writ_core::workspace::DirEntry;

use super::header_value;
use crate::error::{ApiError, ErrorCode, path_error, workspace_error};
use crate::extract::ApiQuery;
use crate::state::AppState;

/// The query of `GET /files`, and the input of the `list_files` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Directory relative to the workspace root; empty or absent for the root.
    #[serde(default)]
    pub dir: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Listing {
    pub dir: String,
    pub entries: Vec<DirEntry>,
}

/// List the entries of a directory of the workspace.
pub async fn list_files(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    Ok(Json(list_dir(&state, params).await?).into_response())
}

/// The listing behind `GET /files` and the `list_files` tool.
pub async fn list_dir(state: &AppState, params: ListParams) -> Result<Listing, ApiError> {
    let raw = params.dir.unwrap_or_default();
    let dir = RepoPath::parse_dir(&raw).map_err(|e| path_error(&e, "dir"))?;
    let entries = state
        .workspace
        .list(&dir)
        .await
        .map_err(|e| workspace_error(e, "dir"))?;
    Ok(Listing {
        dir: dir.to_string(),
        entries,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    max_chars: Option<usize>,
}

/// Read a file. Text is cut at `max_chars` characters with a marker saying so; the headers give
/// the full size and the SHA-256 to send back as `If-Match`.
pub async fn read_file(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> Result<Response, ApiError> {
    let read = read(&state, &raw, params.max_chars).await?;
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

/// A file as read for `GET /files/{path}` and the `read_file` tool. A file longer than what can
/// be returned is read no further (its head only): then there is no hash and no character count.
#[derive(Debug)]
pub struct FileRead {
    pub path: String,
    /// The SHA-256 of the whole file (`None` when only its head was read).
    pub sha256: Option<String>,
    pub size_bytes: u64,
    pub content: FileContent,
}

#[derive(Debug)]
pub enum FileContent {
    /// UTF-8 text, cut at the character limit with a marker saying so.
    Text {
        shown: String,
        /// `None` when only the file's head was read.
        total_chars: Option<usize>,
        truncated: bool,
    },
    /// Not UTF-8: the bytes as they are (the head only, for a long file).
    Binary(Vec<u8>),
}

/// Reads a file, cutting text at `max_chars` (default `WRIT_READ_DEFAULT_CHARS`).
pub async fn read(
    state: &AppState,
    raw: &str,
    max_chars: Option<usize>,
) -> Result<FileRead, ApiError> {
    let path = RepoPath::parse_nonempty(raw).map_err(|e| path_error(&e, "path"))?;
    let limit = max_chars.unwrap_or(state.settings.read_default_chars);
    if limit == 0 || limit > state.settings.read_max_chars {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!(
                "max_chars must be between 1 and {}, got {limit}",
                state.settings.read_max_chars
            ),
        )
        .with_field("max_chars"));
    }
    // A character is at most four bytes, so this many hold `limit` characters whatever they are;
    // a file longer than that is read no further than what can be returned.
    let (bytes, size) = state
        .workspace
        .read_head(&path, limit.saturating_mul(4))
        .await
        .map_err(|e| workspace_error(e, "path"))?
        .ok_or_else(|| ApiError::not_found(format!("'{path}' does not exist")))?;
    let max = state.settings.read_max_chars;
    if (bytes.len() as u64) < size {
        return Ok(head_only(&path, bytes, size, limit, max));
    }
    let sha256 = Some(sha256_hex(&bytes));
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Ok(FileRead {
            path: path.to_string(),
            sha256,
            size_bytes: size,
            content: FileContent::Binary(bytes),
        });
    };
    let total_chars = text.chars().count();
    let (shown, cut) = truncate_chars(text, limit);
    let mut shown = shown.to_string();
    if cut {
        shown.push_str(&format!(
            "\n[writ: '{path}' truncated at {limit} of {total_chars} characters ({size} bytes); \
             ask with ?max_chars= up to {max} for more]\n"
        ));
    }
    Ok(FileRead {
        path: path.to_string(),
        sha256,
        size_bytes: size,
        content: FileContent::Text {
            shown,
            total_chars: Some(total_chars),
            truncated: cut,
        },
    })
}

/// A file of which only the head was read: cut at `limit` characters (or, for bytes that are not
/// UTF-8, at the head's end). Without the whole file there is no hash to give as ETag and no
/// character count; a caller who needs them asks for more characters.
fn head_only(path: &RepoPath, head: Vec<u8>, size: u64, limit: usize, max: usize) -> FileRead {
    // The head may end inside a character: that cut is not an encoding error.
    let text = match std::str::from_utf8(&head) {
        Ok(text) => Some(text),
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    let content = match text {
        None => FileContent::Binary(head),
        Some(text) => {
            let (shown, _) = truncate_chars(text, limit);
            FileContent::Text {
                shown: format!(
                    "{shown}\n[writ: '{path}' truncated at {limit} characters ({size} bytes in all); ask with \
                     ?max_chars= up to {max} for more]\n"
                ),
                total_chars: None,
                truncated: true,
            }
        }
    };
    FileRead {
        path: path.to_string(),
        sha256: None,
        size_bytes: size,
        content,
    }
}
