//! `GET /search`: the query string translated to [`crate::service::search`].

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::search::{SearchParams, search};
use crate::state::AppState;

/// Search the workspace's files for a literal string or a regular expression.
pub async fn search_files(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<SearchParams>,
) -> Result<Response, ApiError> {
    Ok(Json(search(&state, params).await?).into_response())
}
