//! Named workspaces: `POST /workspaces`, `GET` and `DELETE /workspaces/{name}`,
//! `PUT /workspaces/{name}/budget` (`admin`), `GET /workspaces` (`read`: the key's own), over
//! [`crate::service::workspaces`] and, for a workspace's budget and spend,
//! [`crate::service::spend`].

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use tower::ServiceExt;
use writ_core::Workspace;
use writ_core::budgets::Budget;
use writ_core::workspace_registry::WorkspaceName;

use crate::access::{Caller, Grant, InWorkspace, KeyWorkspaces, may_use};
use crate::error::{ApiError, ErrorCode};
use crate::routes::hang_ups::HungUp;
use crate::service::workspaces::{self, CreateWorkspace, DeletedWorkspace, WorkspaceInfo};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// The path of `/workspaces/{name}` and the routes beneath it.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct WorkspaceRef {
    /// The workspace; `default` is REPO_DIR.
    pub name: String,
}

/// The path of a route inside a workspace.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct WithinWorkspace {
    /// The workspace; `default` is REPO_DIR.
    pub name: String,
    /// The route inside, as the routes without a prefix are written (`files/{path}`, `jobs`,
    /// `edits`, …).
    pub rest: String,
}

/// `GET /workspaces`'s answer.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct WorkspaceList {
    pub workspaces: Vec<WorkspaceInfo>,
}

/// Makes a workspace (empty, from a directory, or a git worktree on a new branch): 201.
///
/// A key bound to workspaces makes only those it is bound to: any other name is refused the same
/// way whether or not a workspace of that name exists, so the answer tells it nothing of the
/// workspaces it may not use.
pub async fn create_workspace(
    State(state): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<WorkspaceInfo>), ApiError> {
    let Json(request) =
        Json::<CreateWorkspace>::from_bytes(&body).map_err(|e| crate::extract::json_error(&e))?;
    if let Some(axum::Extension(bound)) = &bound
        && !bound.allows(&request.name)
    {
        return Err(ApiError::new(
            ErrorCode::InsufficientScope,
            "a key bound to workspaces makes only the workspaces it is bound to; this name is not one of them (issue the key with --workspace NAME, or use a key issued without --workspace)",
        )
        .with_field("name"));
    }
    let caller = caller.map(|axum::Extension(Caller(id))| id);
    let made = workspaces::create(&state.workspaces, request, caller.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(with_spend(&state, made).await?)))
}

/// `info` with its budget and this day's and month's spend.
async fn with_spend(state: &AppState, mut info: WorkspaceInfo) -> Result<WorkspaceInfo, ApiError> {
    let budget = state
        .store
        .workspace_budget(&info.name)
        .await
        .map_err(crate::error::store_error)?;
    info.spend = Some(
        crate::service::spend::workspace_windows(state.store.as_ref(), &info.name, &budget).await?,
    );
    info.budget = Some(budget);
    Ok(info)
}

/// Sets what the batches in the workspace may spend (an empty object removes the budget) and
/// answers the workspace with its budget and spend.
pub async fn put_workspace_budget(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(WorkspaceRef { name }): Path<WorkspaceRef>,
    body: axum::body::Bytes,
) -> Result<Json<WorkspaceInfo>, ApiError> {
    if !may_use(bound.map(|axum::Extension(b)| b).as_ref(), &name) {
        return Err(unknown_workspace(&name));
    }
    let Json(budget) =
        Json::<Budget>::from_bytes(&body).map_err(|e| crate::extract::json_error(&e))?;
    workspaces::set_budget(&state.workspaces, &name, &budget).await?;
    let info = workspaces::find(&state.workspaces, &name).await?;
    Ok(Json(with_spend(&state, info).await?))
}

/// Every workspace, `default` first.
pub async fn list_workspaces(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
) -> Result<Json<WorkspaceList>, ApiError> {
    let bound = bound.map(|axum::Extension(b)| b);
    let mut all = workspaces::list(&state.workspaces).await?;
    all.retain(|w| may_use(bound.as_ref(), &w.name));
    Ok(Json(WorkspaceList { workspaces: all }))
}

pub async fn get_workspace(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(WorkspaceRef { name }): Path<WorkspaceRef>,
) -> Result<Json<WorkspaceInfo>, ApiError> {
    if !may_use(bound.map(|axum::Extension(b)| b).as_ref(), &name) {
        return Err(unknown_workspace(&name));
    }
    let info = workspaces::find(&state.workspaces, &name).await?;
    Ok(Json(with_spend(&state, info).await?))
}

/// Forgets the workspace (and prunes git's record of a worktree); its files are kept.
pub async fn delete_workspace(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(WorkspaceRef { name }): Path<WorkspaceRef>,
) -> Result<Json<DeletedWorkspace>, ApiError> {
    if !may_use(bound.map(|axum::Extension(b)| b).as_ref(), &name) {
        return Err(unknown_workspace(&name));
    }
    let deleted = workspaces::delete(&state.workspaces, &name).await?;
    Ok(Json(deleted))
}

/// Merges the workspace's branch into another branch of its repository.
pub async fn merge_workspace(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<Caller>>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(WorkspaceRef { name }): Path<WorkspaceRef>,
    body: axum::body::Bytes,
) -> Result<Json<workspaces::MergedWorkspace>, ApiError> {
    usable(bound.as_ref(), &name)?;
    let Json(request) = Json::<workspaces::MergeWorkspace>::from_bytes(&body)
        .map_err(|e| crate::extract::json_error(&e))?;
    let caller = caller.map(|axum::Extension(Caller(id))| id);
    let merged = workspaces::merge(
        &state.workspaces,
        &name,
        request,
        caller.as_deref(),
        names(bound.as_ref()),
        request_id,
    )
    .await?;
    Ok(Json(merged))
}

/// The workspaces the key is bound to (`None`: all).
fn names(bound: Option<&axum::Extension<KeyWorkspaces>>) -> Option<&[String]> {
    bound.map(|axum::Extension(KeyWorkspaces(b))| &b[..])
}

/// A workspace the key may not use answers as one that does not exist.
pub(super) fn usable(
    bound: Option<&axum::Extension<KeyWorkspaces>>,
    name: &str,
) -> Result<(), ApiError> {
    if may_use(bound.map(|axum::Extension(b)| b), name) {
        Ok(())
    } else {
        Err(unknown_workspace(name))
    }
}

/// Replays a git-worktree workspace's branch on its target's tip (or `onto`) and re-runs the
/// checks of the files it touched; 409 with the conflicting hunks, and nothing moved, when it
/// does not replay cleanly.
pub async fn rebase_workspace(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<Caller>>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(WorkspaceRef { name }): Path<WorkspaceRef>,
    body: axum::body::Bytes,
) -> Result<Json<workspaces::RebasedWorkspace>, ApiError> {
    usable(bound.as_ref(), &name)?;
    // An empty body rebases onto the workspace's target.
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        workspaces::RebaseWorkspace::default()
    } else {
        let Json(request) = Json::<workspaces::RebaseWorkspace>::from_bytes(&body)
            .map_err(|e| crate::extract::json_error(&e))?;
        request
    };
    let caller = caller.map(|axum::Extension(Caller(id))| id);
    let rebased = workspaces::rebase(
        &state,
        &name,
        request,
        caller.as_deref(),
        names(bound.as_ref()),
        request_id,
    )
    .await?;
    Ok(Json(rebased))
}

/// The paths a workspace changed that another workspace of its repository, or its target
/// branch, changed too since they share a base.
pub async fn get_overlaps(
    State(state): State<AppState>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    Path(WorkspaceRef { name }): Path<WorkspaceRef>,
) -> Result<Json<workspaces::OverlapList>, ApiError> {
    usable(bound.as_ref(), &name)?;
    let list = workspaces::list_overlaps(&state.workspaces, &name, names(bound.as_ref())).await?;
    Ok(Json(list))
}

/// The router of the routes served inside the workspace `name` ([`crate::routes::WORKSPACE_ROUTES`]),
/// built once per workspace with that workspace in its state, so that every handler and service
/// below it reads the workspace as it always has (`state.workspace`).
fn router_within(state: &AppState, name: &str, workspace: Arc<dyn Workspace>) -> Router {
    if let Some(router) = state.within.get(name, &workspace) {
        return router;
    }
    let inner = state_within(state, name, workspace.clone());
    let router = crate::routes::workspace_router()
        .fallback(|| async {
            ApiError::not_found(
                "no such route in a workspace; see /workspaces/{name} in openapi.yaml for the routes served there",
            )
        })
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            inner.clone(),
            crate::auth::require_scope_within,
        ))
        .with_state(inner);
    state.within.insert(name, workspace, router.clone());
    router
}

/// The state the routes and tools inside the workspace `name` are served with: that workspace,
/// and a sandbox runner over its root (a run there sees nothing else). Batches go through the
/// one `Jobs`, which runs each with its workspace's synthesizer.
pub fn state_within(state: &AppState, name: &str, workspace: Arc<dyn Workspace>) -> AppState {
    if name == WorkspaceName::DEFAULT {
        return state.clone();
    }
    AppState {
        commands: workspaces::runner_in(state.commands.as_ref(), workspace.as_ref()),
        workspace,
        ..state.clone()
    }
}

/// `/workspaces/{name}/{*rest}`: the route `/{rest}` answered in the workspace `name`. A
/// workspace that does not exist answers 404 before anything else.
pub async fn serve_within(
    State(state): State<AppState>,
    Path(WithinWorkspace { name, .. }): Path<WithinWorkspace>,
    bound: Option<axum::Extension<KeyWorkspaces>>,
    req: Request,
) -> Response {
    if !may_use(bound.map(|axum::Extension(b)| b).as_ref(), &name) {
        return unknown_workspace(&name).into_response();
    }
    let workspace = match state.workspaces.open(&name).await {
        Ok(Some(workspace)) => workspace,
        Ok(None) => return unknown_workspace(&name).into_response(),
        Err(e) => return e.into_response(),
    };
    // The route inside, from the raw path (the name as sent, encoded or not) and the query.
    let raw = req.uri().path();
    let after = raw.get("/workspaces/".len()..).unwrap_or("");
    let inner = after.find('/').map_or("/", |at| &after[at..]);
    let inner = match req.uri().query() {
        Some(query) => format!("{inner}?{query}"),
        None => inner.to_owned(),
    };
    let Ok(uri) = inner.parse::<Uri>() else {
        return ApiError::not_found("no such route").into_response();
    };
    // A request of its own for the router inside, which matches its own route and reads its
    // own path parameters; it carries what the layers outside found (the request id, the
    // caller and its grant, the hang-up signal).
    let (parts, body) = req.into_parts();
    let mut req = Request::new(body);
    *req.method_mut() = parts.method;
    *req.uri_mut() = uri;
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers;
    let carried = req.extensions_mut();
    if let Some(id) = parts.extensions.get::<RequestId>() {
        carried.insert(*id);
    }
    if let Some(caller) = parts.extensions.get::<Caller>() {
        carried.insert(caller.clone());
    }
    if let Some(grant) = parts.extensions.get::<Grant>() {
        carried.insert(*grant);
    }
    if let Some(hung_up) = parts.extensions.get::<HungUp>() {
        carried.insert(hung_up.clone());
    }
    if let Some(bound) = parts.extensions.get::<KeyWorkspaces>() {
        carried.insert(bound.clone());
    }
    carried.insert(InWorkspace(name.clone()));
    let router = router_within(&state, &name, workspace);
    match router.oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn unknown_workspace(name: &str) -> ApiError {
    ApiError::not_found(format!("no workspace named '{name}'")).with_field("name")
}
