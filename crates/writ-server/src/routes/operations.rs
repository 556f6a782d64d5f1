//! The audit log, read back: `GET /operations` and `GET /operations/{id}`, over
//! [`crate::service::operations`].

use axum::Json;
use axum::extract::{Path, State};

use crate::access::Viewer;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::operations::{
    ListParams, OperationId, OperationsPage, RecordedOperation, get, list,
};
use crate::state::AppState;

/// List operations newest first, filtered, one page at a time.
pub async fn list_operations(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<OperationsPage>, ApiError> {
    Ok(Json(list(&state, &viewer, p).await?))
}

/// One operation with the content it wrote.
pub async fn get_operation(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<OperationId>,
) -> Result<Json<RecordedOperation>, ApiError> {
    Ok(Json(get(&state, &viewer, id).await?))
}
