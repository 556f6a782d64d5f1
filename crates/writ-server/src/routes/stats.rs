//! `GET /stats/models`, over [`crate::service::stats`].

use axum::Json;
use axum::extract::State;

use crate::access::Viewer;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::stats::{ModelStatsPage, StatsParams, models};
use crate::state::AppState;

/// Each model's candidates, viable, chosen, passed validation, cost and latency over a window.
pub async fn model_stats(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<StatsParams>,
) -> Result<Json<ModelStatsPage>, ApiError> {
    Ok(Json(models(&state, &viewer, p).await?))
}
