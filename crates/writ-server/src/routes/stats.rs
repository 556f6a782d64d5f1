//! `GET /stats/models`, over [`crate::service::stats`].

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use writ_core::AuditStore;

use crate::access::Viewer;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::stats::{ModelStatsPage, StatsParams, models};

/// Each model's candidates, viable, chosen, passed validation, cost and latency over a window.
pub async fn model_stats(
    State(store): State<Arc<dyn AuditStore>>,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<StatsParams>,
) -> Result<Json<ModelStatsPage>, ApiError> {
    Ok(Json(models(store.as_ref(), &viewer, p).await?))
}
