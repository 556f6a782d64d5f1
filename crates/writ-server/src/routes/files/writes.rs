//! The writing file route: a raw-body write, its `If-Match` read from the header, done by
//! [`crate::service::files::write`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::header_value;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{ApiQuery, body_error};
use crate::service::files::{FileWrite, WriteParams, parse_expected_sha256, write};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// Write a file from the raw request body, recording it in the audit log first.
pub async fn put_file(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: crate::access::AuditedCaller,
    Path(raw): Path<String>,
    ApiQuery(params): ApiQuery<WriteParams>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let expected_sha256 = parse_if_match(&headers)?;
    let written = write(
        &state,
        FileWrite {
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
    let status = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        [(
            header::ETAG,
            header_value(&format!("\"{}\"", written.answer.sha256)),
        )],
        Json(written.answer),
    )
        .into_response())
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
