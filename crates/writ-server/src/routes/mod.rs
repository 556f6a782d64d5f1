//! The route table. Every route is listed once in [`api_routes`]; the router is built from it
//! and the OpenAPI test walks the same list, so a route cannot be added without the spec noticing.
//!
//! One module per resource: [`synthesis`] (`POST /write_codebase`), [`files`] (the direct file
//! routes), [`search`] (`GET /search`), [`edits`] (`POST /edits`), [`run`] (`POST /run`), [`jobs`] (jobs and their event stream), [`operations`] (the
//! audit log), [`history`] (undo and restore), [`changes`] (change sets held for review), [`workspaces`] (named workspaces), [`claims`] (a workspace's claims on paths of its repository), [`tools`] (function-calling declarations and dispatch), [`meta`] (health,
//! readiness, metrics, the spec, the dashboard). Each handler translates HTTP to
//! [`crate::service`]; [`hang_ups`] runs every mutating one beyond its client's hang-up.

pub mod changes;
pub mod claims;
pub mod edits;
pub mod files;
pub mod hang_ups;
pub mod history;
pub mod jobs;
pub mod keys;
pub mod meta;
pub mod operations;
pub mod run;
pub mod search;
pub mod stats;
pub mod synthesis;
pub mod tools;
pub mod workspaces;
pub mod write_sessions;

use axum::Router;
use axum::handler::Handler;
use axum::routing::{MethodFilter, MethodRouter, on};
use writ_core::keys::Scope;

use crate::access::{Access, AccessTable};
use crate::openapi::inputs::{Documented, Inputs};
use crate::state::AppState;

/// One route: method, axum path, what a key needs to call it, handler, and what the handler's
/// arguments say of it in the OpenAPI document.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub handler: MethodRouter<AppState>,
    pub inputs: fn(&mut Inputs<'_>),
}

impl Route {
    fn new<H, T, A>(
        method: &'static str,
        filter: MethodFilter,
        path: &'static str,
        access: Access,
        handler: H,
    ) -> Self
    where
        H: Handler<T, AppState> + Documented<A>,
        T: 'static,
    {
        Route {
            method,
            path,
            access,
            handler: on(filter, handler),
            inputs: <H as Documented<A>>::inputs,
        }
    }

    pub fn get<H, T, A>(path: &'static str, access: Access, handler: H) -> Self
    where
        H: Handler<T, AppState> + Documented<A>,
        T: 'static,
    {
        Self::new("GET", MethodFilter::GET, path, access, handler)
    }

    pub fn put<H, T, A>(path: &'static str, access: Access, handler: H) -> Self
    where
        H: Handler<T, AppState> + Documented<A>,
        T: 'static,
    {
        Self::new("PUT", MethodFilter::PUT, path, access, handler)
    }

    pub fn post<H, T, A>(path: &'static str, access: Access, handler: H) -> Self
    where
        H: Handler<T, AppState> + Documented<A>,
        T: 'static,
    {
        Self::new("POST", MethodFilter::POST, path, access, handler)
    }

    pub fn delete<H, T, A>(path: &'static str, access: Access, handler: H) -> Self
    where
        H: Handler<T, AppState> + Documented<A>,
        T: 'static,
    {
        Self::new("DELETE", MethodFilter::DELETE, path, access, handler)
    }

    /// The path as OpenAPI writes it (`{*path}` → `{path}`).
    pub fn openapi_path(&self) -> String {
        self.path.replace("{*", "{")
    }
}

pub fn api_routes() -> Vec<Route> {
    vec![
        Route::get("/", Access::Open, meta::dashboard),
        Route::get("/healthz", Access::Open, meta::healthz),
        Route::get("/readyz", Access::Open, meta::readyz),
        Route::get("/metrics", Access::Scope(Scope::Read), meta::metrics),
        Route::get("/openapi.yaml", Access::Scope(Scope::Read), meta::openapi),
        Route::get("/files", Access::Scope(Scope::Read), files::list_files),
        Route::get(
            "/files/{*path}",
            Access::Scope(Scope::Read),
            files::read_file,
        ),
        Route::get("/search", Access::Scope(Scope::Read), search::search_files),
        Route::put(
            "/files/{*path}",
            Access::Scope(Scope::Write),
            files::put_file,
        ),
        Route::post(
            "/write_codebase",
            Access::Scope(Scope::Write),
            synthesis::write_codebase,
        ),
        Route::post("/edits", Access::Scope(Scope::Write), edits::post_edits),
        Route::post("/run", Access::Scope(Scope::Run), run::run_command),
        Route::post(
            "/write_sessions",
            Access::Scope(Scope::Write),
            write_sessions::begin_session,
        ),
        Route::get(
            "/write_sessions/{id}",
            Access::Scope(Scope::Read),
            write_sessions::get_session,
        ),
        Route::post(
            "/write_sessions/{id}/content",
            Access::Scope(Scope::Write),
            write_sessions::append_content,
        ),
        Route::post(
            "/write_sessions/{id}/finish",
            Access::Scope(Scope::Write),
            write_sessions::finish_session,
        ),
        Route::post(
            "/write_sessions/{id}/corrections",
            Access::Scope(Scope::Write),
            write_sessions::correct_session,
        ),
        Route::get("/jobs", Access::Scope(Scope::Read), jobs::list_jobs),
        Route::get("/jobs/{id}", Access::Scope(Scope::Read), jobs::get_job),
        Route::get(
            "/jobs/{id}/events",
            Access::Scope(Scope::Read),
            jobs::job_events,
        ),
        Route::get(
            "/operations",
            Access::Scope(Scope::Read),
            operations::list_operations,
        ),
        Route::get(
            "/operations/{id}",
            Access::Scope(Scope::Read),
            operations::get_operation,
        ),
        Route::post(
            "/operations/{id}/restore",
            Access::Scope(Scope::Write),
            history::post_restore,
        ),
        Route::post(
            "/requests/{id}/undo",
            Access::Scope(Scope::Write),
            history::post_undo,
        ),
        Route::get(
            "/changes",
            Access::Scope(Scope::Read),
            changes::list_changes,
        ),
        Route::get(
            "/changes/{id}",
            Access::Scope(Scope::Read),
            changes::get_change,
        ),
        Route::get(
            "/changes/{id}/events",
            Access::Scope(Scope::Read),
            changes::change_events,
        ),
        Route::post(
            "/changes/{id}/apply",
            Access::Scope(Scope::Write),
            changes::post_apply,
        ),
        Route::post(
            "/changes/{id}/reject",
            Access::Scope(Scope::Write),
            changes::post_reject,
        ),
        Route::get(
            "/stats/models",
            Access::Scope(Scope::Read),
            stats::model_stats,
        ),
        Route::get(
            "/keys/{id}/spend",
            Access::Scope(Scope::Read),
            keys::get_spend,
        ),
        Route::put(
            "/keys/{id}/budget",
            Access::Scope(Scope::Admin),
            keys::put_budget,
        ),
        Route::post(
            "/workspaces",
            Access::Scope(Scope::Admin),
            workspaces::create_workspace,
        ),
        // A key lists the workspaces it may use (the dashboard's picker); making, changing and
        // removing them is administration.
        Route::get(
            "/workspaces",
            Access::Scope(Scope::Read),
            workspaces::list_workspaces,
        ),
        Route::get(
            "/workspaces/{name}",
            Access::Scope(Scope::Admin),
            workspaces::get_workspace,
        ),
        Route::put(
            "/workspaces/{name}/budget",
            Access::Scope(Scope::Admin),
            workspaces::put_workspace_budget,
        ),
        Route::post(
            "/workspaces/{name}/merge",
            Access::Scope(Scope::Admin),
            workspaces::merge_workspace,
        ),
        // A task's agent keeps its own branch current: `write` in it (its key's binding holds).
        Route::post(
            "/workspaces/{name}/rebase",
            Access::Scope(Scope::Write),
            workspaces::rebase_workspace,
        ),
        Route::get(
            "/workspaces/{name}/overlaps",
            Access::Scope(Scope::Read),
            workspaces::get_overlaps,
        ),
        Route::delete(
            "/workspaces/{name}",
            Access::Scope(Scope::Admin),
            workspaces::delete_workspace,
        ),
        // A task's agent claims paths of its repository and releases them: `write` in its
        // workspace (its key's binding holds); reading the claims of the repository, `read`.
        // Before the catch-all below, which would otherwise take them.
        Route::post(
            "/workspaces/{name}/claims",
            Access::Scope(Scope::Write),
            claims::post_claim,
        ),
        Route::get(
            "/workspaces/{name}/claims",
            Access::Scope(Scope::Read),
            claims::list_claims,
        ),
        Route::delete(
            "/workspaces/{name}/claims",
            Access::Scope(Scope::Write),
            claims::delete_claims,
        ),
        Route::delete(
            "/workspaces/{name}/claims/{id}",
            Access::Scope(Scope::Write),
            claims::delete_claim,
        ),
        // The routes of `workspace_routes`, in the named workspace: a valid key here, its scope
        // for the route inside checked there (`auth::require_scope_within`).
        Route::get(
            "/workspaces/{name}/{*rest}",
            Access::PerTool,
            workspaces::serve_within,
        ),
        Route::put(
            "/workspaces/{name}/{*rest}",
            Access::PerTool,
            workspaces::serve_within,
        ),
        Route::post(
            "/workspaces/{name}/{*rest}",
            Access::PerTool,
            workspaces::serve_within,
        ),
        Route::get("/tools", Access::Scope(Scope::Read), tools::list_tools),
        Route::post("/tools/call", Access::PerTool, tools::call_tool),
        // MCP's streamable HTTP transport: POST carries messages, GET opens the server's
        // stream, DELETE ends a session. rmcp answers all three.
        Route::post("/mcp", Access::PerTool, crate::tools::mcp::serve_http),
        Route::get("/mcp", Access::PerTool, crate::tools::mcp::serve_http),
        Route::delete("/mcp", Access::PerTool, crate::tools::mcp::serve_http),
    ]
}

/// What every route requires, for the auth layer.
pub fn access_table() -> AccessTable {
    AccessTable::new(
        api_routes()
            .into_iter()
            .map(|r| (r.method, r.path, r.access)),
    )
}

/// The routes also served inside a named workspace, under `/workspaces/{name}`: every route
/// whose effect or record belongs to one workspace. The listings there show that workspace's
/// records only.
pub const WORKSPACE_ROUTES: &[(&str, &str)] = &[
    ("GET", "/files"),
    ("GET", "/files/{*path}"),
    ("PUT", "/files/{*path}"),
    ("GET", "/search"),
    ("POST", "/edits"),
    ("POST", "/write_codebase"),
    ("POST", "/run"),
    ("POST", "/write_sessions"),
    ("GET", "/write_sessions/{id}"),
    ("POST", "/write_sessions/{id}/content"),
    ("POST", "/write_sessions/{id}/finish"),
    ("POST", "/write_sessions/{id}/corrections"),
    ("POST", "/operations/{id}/restore"),
    ("POST", "/requests/{id}/undo"),
    ("GET", "/jobs"),
    ("GET", "/jobs/{id}"),
    ("GET", "/jobs/{id}/events"),
    ("GET", "/operations"),
    ("GET", "/operations/{id}"),
    ("GET", "/changes"),
    ("GET", "/changes/{id}"),
    ("GET", "/changes/{id}/events"),
    ("POST", "/changes/{id}/apply"),
    ("POST", "/changes/{id}/reject"),
];

/// The router of [`WORKSPACE_ROUTES`].
pub fn workspace_router() -> Router<AppState> {
    api_routes()
        .into_iter()
        .filter(|r| WORKSPACE_ROUTES.contains(&(r.method, r.path)))
        .fold(Router::new(), |r, route| r.route(route.path, route.handler))
}

pub fn router() -> Router<AppState> {
    api_routes()
        .into_iter()
        .fold(Router::new(), |r, route| r.route(route.path, route.handler))
        .route_layer(axum::middleware::from_fn(hang_ups::immune_to_hang_ups))
}
