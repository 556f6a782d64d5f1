//! The direct file routes: list, read, and raw-body writes (recorded through [`writ_core::direct`]).
//!
//! Content travels as the raw body, never inside a JSON string, so large files cannot be
//! truncated or mangled by JSON encoding on the way in.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;
use writ_core::SandboxPath;
use writ_core::audit::OperationKind;
use writ_core::content::{invalid_utf8_sequences, numbered_preview, sha256_hex, truncate_chars};
use writ_core::direct;
use writ_core::files::{WriteMode, WriteSpec};
use writ_core::keys::Scope;
use writ_core::workspace::DirEntry;

use crate::error::{ApiError, ErrorCode, path_error, workspace_error, write_error};
use crate::extract::{ApiQuery, body_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Lines of the numbered preview returned for an update.
const PREVIEW_LINES: usize = 40;
/// Invalid UTF-8 sequences listed in a 422 answer.
const MAX_INVALID_REPORTED: usize = 20;

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
    let dir = SandboxPath::parse_dir(&raw).map_err(|e| path_error(&e, "dir"))?;
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
    let path = SandboxPath::parse_nonempty(raw).map_err(|e| path_error(&e, "path"))?;
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
fn head_only(path: &SandboxPath, head: Vec<u8>, size: u64, limit: usize, max: usize) -> FileRead {
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

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InvalidUtf8Policy {
    #[default]
    Reject,
    Replace,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    #[serde(default)]
    pub mode: WriteMode,
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8Policy,
    #[serde(default)]
    pub create_dirs: bool,
}

#[derive(Debug, Serialize)]
pub struct WriteAnswer {
    pub path: String,
    pub operation: String,
    pub bytes: usize,
    pub characters: usize,
    pub sha256: String,
    pub previous_sha256: Option<String>,
    pub operation_id: Uuid,
    pub request_id: Uuid,
    /// `cat -n`-style view of the start of the file, for updates.
    pub preview: Option<String>,
}

/// Write a file from the raw request body, recording it in the audit log first.
pub async fn put_file(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: crate::auth::AuditedCaller,
    Path(raw): Path<String>,
    ApiQuery(params): ApiQuery<WriteParams>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let expected_sha256 = parse_if_match(&headers)?;
    let written = write(
        state,
        DirectWrite {
            route: "PUT /files/{path}",
            request_id,
            caller: who.caller,
            scope: who.scope,
            path: raw,
            params,
            expected_sha256,
            body: body.to_vec(),
        },
    )
    .await?;
    Ok((
        written.status,
        [(
            header::ETAG,
            header_value(&format!("\"{}\"", written.answer.sha256)),
        )],
        Json(written.answer),
    )
        .into_response())
}

/// One direct write, as `PUT /files/{path}` and the `write_file` tool ask for it.
pub struct DirectWrite {
    /// Recorded on the request row: which surface asked.
    pub route: &'static str,
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the write, when auth is on.
    pub scope: Option<Scope>,
    pub path: String,
    pub params: WriteParams,
    pub expected_sha256: Option<String>,
    pub body: Vec<u8>,
}

pub struct Written {
    /// 201 for a new file, 200 otherwise.
    pub status: StatusCode,
    pub answer: WriteAnswer,
}

/// Checks and performs a recorded direct write.
pub async fn write(state: AppState, w: DirectWrite) -> Result<Written, ApiError> {
    let DirectWrite {
        route,
        request_id,
        caller,
        scope,
        path: raw,
        params,
        expected_sha256,
        body,
    } = w;
    let path = SandboxPath::parse_nonempty(&raw).map_err(|e| path_error(&e, "path"))?;

    let content: Vec<u8> = match std::str::from_utf8(&body) {
        Ok(_) => body,
        Err(_) if params.on_invalid_utf8 == InvalidUtf8Policy::Replace => {
            String::from_utf8_lossy(&body).into_owned().into_bytes()
        }
        Err(_) => {
            let invalid = invalid_utf8_sequences(&body, MAX_INVALID_REPORTED);
            let offsets: Vec<String> = invalid.iter().map(|i| i.offset.to_string()).collect();
            return Err(ApiError::new(
                ErrorCode::InvalidUtf8,
                format!(
                    "the body is not valid UTF-8 (invalid bytes at offsets {}); fix the encoding or pass on_invalid_utf8=replace",
                    offsets.join(", ")
                ),
            )
            .with_field("body")
            .with_details(json!({ "invalid": invalid })));
        }
    };

    let spec = WriteSpec {
        path: path.clone(),
        content,
        mode: params.mode,
        expected_sha256,
        create_dirs: params.create_dirs,
    };
    // Run the recorded write in its own task: a client hanging up must not cancel it half-way
    // between the audit record and the file.
    let task = tokio::spawn(async move {
        write_recorded(state, route, request_id, (caller, scope), spec).await
    });
    task.await.map_err(ApiError::internal)?
}

async fn write_recorded(
    state: AppState,
    route: &'static str,
    request_id: Uuid,
    (caller, scope): (Option<String>, Option<Scope>),
    spec: WriteSpec,
) -> Result<Written, ApiError> {
    let path = spec.path.clone();
    let write = direct::DirectWrite {
        request_id,
        caller,
        scope,
        route: route.to_string(),
        spec,
    };
    let receipt = direct::write(state.store.as_ref(), state.workspace.as_ref(), write)
        .await
        .map_err(|e| write_error(e, "path"))?;
    let text = String::from_utf8_lossy(&receipt.content);
    let answer = WriteAnswer {
        path: path.to_string(),
        operation: receipt.operation.as_str().to_string(),
        bytes: receipt.bytes,
        characters: text.chars().count(),
        sha256: receipt.sha256.clone(),
        previous_sha256: receipt.previous_sha256.clone(),
        operation_id: receipt.operation_id,
        request_id,
        preview: (receipt.operation == OperationKind::Updated)
            .then(|| numbered_preview(&text, PREVIEW_LINES)),
    };
    let status = if receipt.operation == OperationKind::Created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Written { status, answer })
}

fn parse_if_match(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let raw = value.to_str().map_err(|_| {
        ApiError::new(ErrorCode::InvalidHeader, "If-Match must be ASCII").with_field("If-Match")
    })?;
    parse_expected_sha256(raw).map(Some)
}

/// The expected SHA-256 of a conditional write (`If-Match`, with or without quotes).
pub fn parse_expected_sha256(value: &str) -> Result<String, ApiError> {
    let raw = value
        .trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_ascii_lowercase();
    if raw.len() != 64 || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::new(
            ErrorCode::InvalidHeader,
            format!("If-Match must be the file's SHA-256 as 64 hex digits, got '{raw}'"),
        )
        .with_field("If-Match"));
    }
    Ok(raw)
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
