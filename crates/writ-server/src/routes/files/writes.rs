//! The writing file route: a raw-body write, its `If-Match` read from the header, done by
//! [`crate::service::files::write`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::FilePath;
use crate::error::ApiError;
use crate::extract::{ApiQuery, body_error};
use crate::headers::{ApiHeaders, header_map};
use crate::service::files::{FileWrite, WriteParams, parse_expected_sha256, write};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// The headers `PUT /files/{path}` reads.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteHeaders {
    /// The SHA-256 the file must still have (hex, optionally quoted); 412 otherwise.
    #[serde(rename = "if-match")]
    pub if_match: Option<String>,
}

/// The headers of a written file's answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct WrittenHeaders {
    /// The SHA-256 the file now holds, in quotes: the `If-Match` of the next write.
    pub etag: String,
}

/// Write a file from the raw request body, recording it in the audit log first.
pub async fn put_file(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: crate::access::AuditedCaller,
    Path(FilePath { path }): Path<FilePath>,
    ApiQuery(params): ApiQuery<WriteParams>,
    ApiHeaders(headers): ApiHeaders<WriteHeaders>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let expected_sha256 = headers
        .if_match
        .as_deref()
        .map(parse_expected_sha256)
        .transpose()?;
    let written = write(
        &state,
        FileWrite {
            route: "PUT /files/{path}",
            request_id,
            caller: who.caller,
            scope: who.scope,
            path,
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
    let headers = WrittenHeaders {
        etag: super::etag(&written.answer.sha256),
    };
    Ok((status, header_map(&headers), Json(written.answer)).into_response())
}
