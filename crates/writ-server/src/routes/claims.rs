//! A workspace's claims on paths of its repository: `POST`, `GET` and `DELETE
//! /workspaces/{name}/claims`, `DELETE /workspaces/{name}/claims/{id}`, over
//! [`crate::service::workspaces`]. Making and releasing need `write`, listing `read`; a key bound
//! to workspaces reaches only the claims routes of those, as every workspace route.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::workspaces::usable;
use crate::access::{Caller, KeyWorkspaces};
use crate::error::ApiError;
use crate::service::workspaces::{self, ClaimList, ClaimView, MakeClaim, ReleasedClaims};
use crate::state::AppState;

/// The path of a workspace's claims.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ClaimsRef {
    /// The workspace; `default` is REPO_DIR.
    pub name: String,
}

/// The path of one claim.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ClaimRef {
    /// The workspace holding the claim; `default` is REPO_DIR.
    pub name: String,
    /// The claim's id, as made.
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
}

/// Claims paths of the workspace's repository for the workspace, for a while: 201.
pub async fn post_claim(
    State(state): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(ClaimsRef { name }): Path<ClaimsRef>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<ClaimView>), ApiError> {
    usable(bound.as_ref(), &name)?;
    let Json(request) =
        Json::<MakeClaim>::from_bytes(&body).map_err(|e| crate::extract::json_error(&e))?;
    let caller = caller.map(|axum::Extension(Caller(id))| id);
    let made = workspaces::make_claim(&state.workspaces, &name, request, caller.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

/// The live claims of every workspace of the workspace's repository, its own included.
pub async fn list_claims(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(ClaimsRef { name }): Path<ClaimsRef>,
) -> Result<Json<ClaimList>, ApiError> {
    usable(bound.as_ref(), &name)?;
    let bound = bound.map(|axum::Extension(b)| b);
    Ok(Json(
        workspaces::list_claims(&state.workspaces, &name, bound.as_ref()).await?,
    ))
}

/// Releases one of the workspace's claims.
pub async fn delete_claim(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(ClaimRef { name, id }): Path<ClaimRef>,
) -> Result<Json<ReleasedClaims>, ApiError> {
    usable(bound.as_ref(), &name)?;
    Ok(Json(
        workspaces::release_claim(&state.workspaces, &name, &id).await?,
    ))
}

/// Releases every claim the workspace holds.
pub async fn delete_claims(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(ClaimsRef { name }): Path<ClaimsRef>,
) -> Result<Json<ReleasedClaims>, ApiError> {
    usable(bound.as_ref(), &name)?;
    Ok(Json(
        workspaces::release_claims(&state.workspaces, &name).await?,
    ))
}
