//! `GET /search`: the query string translated to [`crate::service::search`].

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use writ_core::Workspace;

use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::service::search::{SearchParams, search};

/// Search the workspace's files for a literal string or a regular expression.
pub async fn search_files(
    State(workspace): State<Arc<dyn Workspace>>,
    ApiQuery(params): ApiQuery<SearchParams>,
) -> Result<Response, ApiError> {
    Ok(Json(search(workspace.as_ref(), params).await?).into_response())
}
