//! The direct file routes: list, read, and raw-body writes (through [`writ_core::direct`]).
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
use writ_core::direct::{self, DirectWrite};
use writ_core::files::{WriteMode, WriteReceipt, WriteSpec};
use writ_core::workspace::DirEntry;

use crate::error::{ApiError, path_error, workspace_error, write_error};
use crate::extract::{ApiQuery, body_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Lines of the numbered preview returned for an update.
const PREVIEW_LINES: usize = 40;
/// Invalid UTF-8 sequences listed in a 422 answer.
const MAX_INVALID_REPORTED: usize = 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    dir: Option<String>,
}

#[derive(Debug, Serialize)]
struct Listing {
    dir: String,
    entries: Vec<DirEntry>,
}

/// List the entries of a directory of the workspace.
pub async fn list_files(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let raw = params.dir.unwrap_or_default();
    let dir = SandboxPath::parse_dir(&raw).map_err(|e| path_error(&e, "dir"))?;
    let entries = state
        .workspace
        .list(&dir)
        .await
        .map_err(|e| workspace_error(e, "dir"))?;
    Ok(Json(Listing {
        dir: dir.to_string(),
        entries,
    })
    .into_response())
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
    let path = SandboxPath::parse_nonempty(&raw).map_err(|e| path_error(&e, "path"))?;
    let limit = params
        .max_chars
        .unwrap_or(state.settings.read_default_chars);
    if limit == 0 || limit > state.settings.read_max_chars {
        return Err(ApiError::bad_request(
            "invalid_parameter",
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
    if (bytes.len() as u64) < size {
        return Ok(head_only(
            &path,
            bytes,
            size,
            limit,
            state.settings.read_max_chars,
        ));
    }
    let sha = sha256_hex(&bytes);
    let size = bytes.len();
    let mut headers = HeaderMap::new();
    headers.insert(header::ETAG, header_value(&format!("\"{sha}\"")));
    headers.insert("x-writ-size-bytes", HeaderValue::from(size as u64));

    let Ok(text) = std::str::from_utf8(&bytes) else {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert("x-writ-truncated", HeaderValue::from_static("false"));
        return Ok((StatusCode::OK, headers, bytes).into_response());
    };
    let total_chars = text.chars().count();
    let (shown, cut) = truncate_chars(text, limit);
    let mut body = shown.to_string();
    if cut {
        body.push_str(&format!(
            "\n[writ: '{path}' truncated at {limit} of {total_chars} characters ({size} bytes); \
             ask with ?max_chars= up to {} for more]\n",
            state.settings.read_max_chars
        ));
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert("x-writ-size-chars", HeaderValue::from(total_chars as u64));
    headers.insert(
        "x-writ-truncated",
        HeaderValue::from_static(if cut { "true" } else { "false" }),
    );
    Ok((StatusCode::OK, headers, body).into_response())
}

/// The answer for a file of which only the head was read: cut at `limit` characters (or, for
/// bytes that are not UTF-8, at the head's end). Without the whole file there is no hash to give
/// as ETag and no character count; a caller who needs them asks for more characters.
fn head_only(path: &SandboxPath, head: Vec<u8>, size: u64, limit: usize, max: usize) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert("x-writ-size-bytes", HeaderValue::from(size));
    headers.insert("x-writ-truncated", HeaderValue::from_static("true"));
    // The head may end inside a character: that cut is not an encoding error.
    let text = match std::str::from_utf8(&head) {
        Ok(text) => Some(text),
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    let Some(text) = text else {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        return (StatusCode::OK, headers, head).into_response();
    };
    let (shown, _) = truncate_chars(text, limit);
    let body = format!(
        "{shown}\n[writ: '{path}' truncated at {limit} characters ({size} bytes in all); ask with \
         ?max_chars= up to {max} for more]\n"
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    (StatusCode::OK, headers, body).into_response()
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum InvalidUtf8Policy {
    #[default]
    Reject,
    Replace,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    #[serde(default)]
    mode: WriteMode,
    #[serde(default)]
    on_invalid_utf8: InvalidUtf8Policy,
    #[serde(default)]
    create_dirs: bool,
}

#[derive(Debug, Serialize)]
struct WriteAnswer {
    path: String,
    operation: String,
    bytes: usize,
    characters: usize,
    sha256: String,
    previous_sha256: Option<String>,
    operation_id: Uuid,
    request_id: Uuid,
    /// `cat -n`-style view of the start of the file, for updates.
    preview: Option<String>,
}

/// Write a file from the raw request body, recording it in the audit log first.
pub async fn put_file(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<crate::auth::Caller>>,
    Path(raw): Path<String>,
    ApiQuery(params): ApiQuery<WriteParams>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let path = SandboxPath::parse_nonempty(&raw).map_err(|e| path_error(&e, "path"))?;
    let expected_sha256 = parse_if_match(&headers)?;

    let content: Vec<u8> = match std::str::from_utf8(&body) {
        Ok(_) => body.to_vec(),
        Err(_) if params.on_invalid_utf8 == InvalidUtf8Policy::Replace => {
            String::from_utf8_lossy(&body).into_owned().into_bytes()
        }
        Err(_) => {
            let invalid = invalid_utf8_sequences(&body, MAX_INVALID_REPORTED);
            let offsets: Vec<String> = invalid.iter().map(|i| i.offset.to_string()).collect();
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_utf8",
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
    let write = DirectWrite {
        request_id,
        caller: caller.map(|axum::Extension(c)| c.0),
        route: "PUT /files/{path}".to_string(),
        spec,
    };
    // Its own task: a client hanging up must not cancel the write half-way between the audit
    // record and the file.
    let task = tokio::spawn(async move {
        direct::write(state.store.as_ref(), state.workspace.as_ref(), write).await
    });
    let receipt = task
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| write_error(e, "path"))?;
    Ok(write_answer(request_id, &path, &receipt))
}

/// The answer to a direct write.
fn write_answer(request_id: Uuid, path: &SandboxPath, receipt: &WriteReceipt) -> Response {
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
    let code = if receipt.operation == OperationKind::Created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (
        code,
        [(
            header::ETAG,
            header_value(&format!("\"{}\"", receipt.sha256)),
        )],
        Json(answer),
    )
        .into_response()
}

fn parse_if_match(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let raw = value
        .to_str()
        .map_err(|_| {
            ApiError::bad_request("invalid_header", "If-Match must be ASCII").with_field("If-Match")
        })?
        .trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_ascii_lowercase();
    if raw.len() != 64 || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request(
            "invalid_header",
            format!("If-Match must be the file's SHA-256 as 64 hex digits, got '{raw}'"),
        )
        .with_field("If-Match"));
    }
    Ok(Some(raw))
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
