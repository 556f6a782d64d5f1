//! The audit log, read back: `GET /operations` and `GET /operations/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;
use writ_core::audit::{Cursor, OperationFilter, OperationStatus};

use crate::error::{ApiError, store_error};
use crate::extract::ApiQuery;
use crate::state::AppState;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    request_id: Option<String>,
    filename: Option<String>,
    status: Option<String>,
    model: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// List operations newest first, filtered, one page at a time.
pub async fn list_operations(
    State(state): State<AppState>,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad_request(
            "invalid_parameter",
            format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
        )
        .with_field("limit"));
    }
    let filter = OperationFilter {
        caller: None,
        request_id: p
            .request_id
            .as_deref()
            .map(|v| parse_uuid(v, "request_id"))
            .transpose()?,
        filename: p.filename,
        status: p
            .status
            .as_deref()
            .map(|s| {
                s.parse::<OperationStatus>().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_parameter",
                        format!("status must be pending, succeeded or failed, got '{s}'"),
                    )
                    .with_field("status")
                })
            })
            .transpose()?,
        model: p.model,
        since: p
            .since
            .as_deref()
            .map(|v| parse_time(v, "since"))
            .transpose()?,
        until: p
            .until
            .as_deref()
            .map(|v| parse_time(v, "until"))
            .transpose()?,
    };
    let cursor = p.cursor.map(Cursor);
    let page = state
        .store
        .list_operations(&filter, cursor.as_ref(), limit)
        .await
        .map_err(store_error)?;
    Ok(Json(json!({
        "operations": page.operations,
        "next_cursor": page.next_cursor.map(|c| c.0),
    })))
}

/// One operation with the content it wrote.
pub async fn get_operation(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_uuid(&id, "id")?;
    let (op, content) = state
        .store
        .get_operation(id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no operation {id}")))?;
    let mut body = serde_json::to_value(&op).map_err(ApiError::internal)?;
    match content {
        None => {
            body["content"] = Value::Null;
        }
        Some(bytes) => match String::from_utf8(bytes) {
            Ok(text) => body["content"] = json!(text),
            Err(e) => {
                body["content"] = Value::Null;
                body["content_base64"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(e.as_bytes()));
            }
        },
    }
    Ok(Json(body))
}

fn parse_uuid(v: &str, field: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(v).map_err(|_| {
        ApiError::bad_request(
            "invalid_parameter",
            format!("{field} must be a UUID, got '{v}'"),
        )
        .with_field(field)
    })
}

fn parse_time(v: &str, field: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::bad_request(
                "invalid_parameter",
                format!("{field} must be an RFC 3339 time like 2026-11-22T10:00:00Z, got '{v}'"),
            )
            .with_field(field)
        })
}
