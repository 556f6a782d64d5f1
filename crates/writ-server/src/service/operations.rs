//! The audit log, read back: the pages of `GET /operations` and `list_operations`, the one
//! operation of `GET /operations/{id}` and `get_operation`.

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_core::AuditStore;
use writ_core::audit::{Cursor, Operation, OperationFilter, OperationStatus};

use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error};

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// The query of `GET /operations`, and the input of the `list_operations` tool.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only the operations of this request (a UUID: the `request_id` of a write's answer).
    pub request_id: Option<String>,
    /// Only operations on this path (relative to the workspace root).
    pub filename: Option<String>,
    /// Only operations in this state.
    #[schemars(extend("enum" = ["pending", "succeeded", "failed"]))]
    pub status: Option<String>,
    /// Only operations whose content this model wrote.
    pub model: Option<String>,
    /// Only operations in this workspace (by default, every workspace the key may use; inside
    /// `/workspaces/{name}`, that one).
    pub workspace: Option<String>,
    /// Only operations at or after this RFC 3339 time, e.g. 2026-11-22T10:00:00Z.
    pub since: Option<String>,
    /// Only operations before this RFC 3339 time.
    pub until: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Operations per page, 1 to 500 (default 50).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<u32>,
}

/// The path of `GET /operations/{id}`, and the input of the `get_operation` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationId {
    /// The operation's id (a UUID), as `list_operations` or a write's answer gives it.
    pub id: String,
}

/// One page of operations, newest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct OperationsPage {
    pub operations: Vec<Operation>,
    /// The `cursor` of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// One operation with the content it wrote: text as `content`, anything else base64-encoded as
/// `content_base64` (then `content` is null).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RecordedOperation {
    #[serde(flatten)]
    pub operation: Operation,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
}

/// The page behind `GET /operations` and the `list_operations` tool: the viewer's own operations
/// unless it may see all.
pub async fn list(
    store: &dyn AuditStore,
    viewer: &Viewer,
    p: ListParams,
) -> Result<OperationsPage, ApiError> {
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
        )
        .with_field("limit"));
    }
    let filter = OperationFilter {
        caller: viewer.only().map(|own| Some(own.to_string())),
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
                    ApiError::new(
                        ErrorCode::InvalidParameter,
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
        workspaces: visible_workspaces(viewer, p.workspace.as_deref()),
    };
    let cursor = p.cursor.map(Cursor);
    let page = store
        .list_operations(&filter, cursor.as_ref(), limit)
        .await
        .map_err(store_error)?;
    Ok(OperationsPage {
        operations: page.operations,
        next_cursor: page.next_cursor.map(|c| c.0),
    })
}

/// The operation behind `GET /operations/{id}` and the `get_operation` tool; another key's
/// operation is answered as absent.
pub async fn get(
    store: &dyn AuditStore,
    viewer: &Viewer,
    OperationId { id }: OperationId,
) -> Result<RecordedOperation, ApiError> {
    let id = parse_uuid(&id, "id")?;
    let not_found = || ApiError::not_found(format!("no operation {id}"));
    let (op, content) = store
        .get_operation(id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    if !viewer.sees_workspace(&op.workspace)
        || !super::jobs::sees_request(store, viewer, op.request_id)
            .await
            .map_err(store_error)?
    {
        return Err(not_found());
    }
    let (content, content_base64) = match content.map(String::from_utf8) {
        None => (None, None),
        Some(Ok(text)) => (Some(text), None),
        Some(Err(e)) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())),
        ),
    };
    Ok(RecordedOperation {
        operation: op,
        content,
        content_base64,
    })
}

/// The workspaces a listing reads: those `viewer` may see, narrowed to `asked` when the caller
/// named one (a workspace it may not see, or that does not exist, lists nothing).
pub(crate) fn visible_workspaces(viewer: &Viewer, asked: Option<&str>) -> Option<Vec<String>> {
    match asked {
        Some(name) => Some(if viewer.sees_workspace(name) {
            vec![name.to_owned()]
        } else {
            Vec::new()
        }),
        None => viewer.workspaces().map(<[String]>::to_vec),
    }
}

pub(crate) fn parse_uuid(v: &str, field: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(v).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!("{field} must be a UUID, got '{v}'"),
        )
        .with_field(field)
    })
}

pub(crate) fn parse_time(v: &str, field: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                format!("{field} must be an RFC 3339 time like 2026-11-22T10:00:00Z, got '{v}'"),
            )
            .with_field(field)
        })
}
