//! Named workspaces (`admin`): `POST /workspaces`, `GET /workspaces`, `GET` and `DELETE
//! /workspaces/{name}`, over [`crate::service::workspaces`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::access::Caller;
use crate::error::ApiError;
use crate::service::workspaces::{self, CreateWorkspace, DeletedWorkspace, WorkspaceInfo};
use crate::state::AppState;

/// Makes a workspace (empty, from a directory, or a git worktree on a new branch): 201.
pub async fn create_workspace(
    State(state): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<WorkspaceInfo>), ApiError> {
    let Json(request) =
        Json::<CreateWorkspace>::from_bytes(&body).map_err(|e| crate::extract::json_error(&e))?;
    let caller = caller.map(|axum::Extension(Caller(id))| id);
    let made = workspaces::create(&state.workspaces, request, caller.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

/// Every workspace, `default` first.
pub async fn list_workspaces(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let all = workspaces::list(&state.workspaces).await?;
    Ok(Json(serde_json::json!({ "workspaces": all })))
}

pub async fn get_workspace(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WorkspaceInfo>, ApiError> {
    Ok(Json(workspaces::find(&state.workspaces, &name).await?))
}

/// Forgets the workspace (and prunes git's record of a worktree); its files are kept.
pub async fn delete_workspace(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<DeletedWorkspace>, ApiError> {
    Ok(Json(workspaces::delete(&state.workspaces, &name).await?))
}
