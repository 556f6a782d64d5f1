//! `POST /requests/{id}/undo` and `POST /operations/{id}/restore`, over
//! [`crate::service::history`]. The body is optional: none means the defaults.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use serde::de::DeserializeOwned;
use writ_core::history::{RestoreOptions, RestoreResponse, UndoOptions, UndoResponse};

use crate::access::{AuditedCaller, Viewer};
use crate::error::ApiError;
use crate::extract::{body_error, json_error};
use crate::service::history::{history_caller, restore, undo};
use crate::service::operations::OperationId;
use crate::state::AppState;
use crate::telemetry::RequestId;

fn options<T: DeserializeOwned + Default>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let Json(options) = Json::<T>::from_bytes(&body).map_err(|e| json_error(&e))?;
    Ok(options)
}

/// The path of `/requests/{id}/undo`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct RequestRef {
    /// The request's id: its `request_id` (the `X-Request-Id` of its answer).
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
}

/// Put every file a request wrote back as it was before it.
pub async fn post_undo(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    Path(RequestRef { id }): Path<RequestRef>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<UndoResponse>, ApiError> {
    let opts: UndoOptions = options(&state, body)?;
    let caller = history_caller(
        request_id,
        who.caller,
        who.scope,
        "POST /requests/{id}/undo",
    );
    Ok(Json(undo(&state, &viewer, caller, &id, "id", opts).await?))
}

/// Write the content an operation wrote back to its path.
pub async fn post_restore(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    Path(OperationId { id }): Path<OperationId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RestoreResponse>, ApiError> {
    let opts: RestoreOptions = options(&state, body)?;
    let caller = history_caller(
        request_id,
        who.caller,
        who.scope,
        "POST /operations/{id}/restore",
    );
    Ok(Json(
        restore(&state, &viewer, caller, &id, "id", opts).await?,
    ))
}
