//! The writing file route: a raw-body write, checked (path, encoding, `If-Match`) and recorded
//! through [`writ_core::direct`] in a task of its own.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;
use writ_core::RepoPath;
use writ_core::audit::OperationKind;
use writ_core::content::{invalid_utf8_sequences, numbered_preview};
use writ_core::direct;
use writ_core::files::{WriteMode, WriteSpec};
use writ_core::keys::Scope;

use super::header_value;
use crate::error::{ApiError, ErrorCode, path_error, write_error};
use crate::extract::{ApiQuery, body_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Lines of the numbered preview returned for an update.
const PREVIEW_LINES: usize = 40;
/// Invalid UTF-8 sequences listed in a 422 answer.
const MAX_INVALID_REPORTED: usize = 20;

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
    let path = RepoPath::parse_nonempty(&raw).map_err(|e| path_error(&e, "path"))?;

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
