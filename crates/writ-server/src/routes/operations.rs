//! The audit log, read back: `GET /operations` and `GET /operations/{id}`, over
//! [`crate::service::operations`].

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use writ_core::AuditStore;

use crate::access::Viewer;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::operations::{
    ListParams, OperationId, OperationsPage, RecordedOperation, get, list,
};

/// List operations newest first, filtered, one page at a time.
pub async fn list_operations(
    State(store): State<Arc<dyn AuditStore>>,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<OperationsPage>, ApiError> {
    Ok(Json(list(store.as_ref(), &viewer, p).await?))
}

/// One operation with the content it wrote.
pub async fn get_operation(
    State(store): State<Arc<dyn AuditStore>>,
    viewer: Viewer,
    Path(id): Path<OperationId>,
) -> Result<Json<RecordedOperation>, ApiError> {
    Ok(Json(get(store.as_ref(), &viewer, id).await?))
}
