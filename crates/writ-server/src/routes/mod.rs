//! The route table. Every route is listed once in [`api_routes`]; the router is built from it
//! and the OpenAPI test walks the same list, so a route cannot be added without the spec noticing.
//!
//! One module per resource: [`synthesis`] (`POST /write_codebase`), [`files`] (the direct file
//! routes), [`search`] (`GET /search`), [`edits`] (`POST /edits`), [`run`] (`POST /run`), [`jobs`] (jobs and their event stream), [`operations`] (the
//! audit log), [`history`] (undo and restore), [`workspaces`] (named workspaces), [`tools`] (function-calling declarations and dispatch), [`meta`] (health,
//! readiness, metrics, the spec, the dashboard). Each handler translates HTTP to
//! [`crate::service`]; [`hang_ups`] runs every mutating one beyond its client's hang-up.

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
use axum::routing::{MethodRouter, get};
use writ_core::keys::Scope;

use crate::access::{Access, AccessTable};
use crate::state::AppState;

/// One route: method, axum path, what a key needs to call it, handler.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub handler: MethodRouter<AppState>,
}

impl Route {
    /// The path as OpenAPI writes it (`{*path}` → `{path}`).
    pub fn openapi_path(&self) -> String {
        self.path.replace("{*", "{")
    }
}

pub fn api_routes() -> Vec<Route> {
    use axum::routing::{delete, post, put};
    vec![
        Route {
            method: "GET",
            path: "/",
            access: Access::Open,
            handler: get(meta::dashboard),
        },
        Route {
            method: "GET",
            path: "/healthz",
            access: Access::Open,
            handler: get(meta::healthz),
        },
        Route {
            method: "GET",
            path: "/readyz",
            access: Access::Open,
            handler: get(meta::readyz),
        },
        Route {
            method: "GET",
            path: "/metrics",
            access: Access::Scope(Scope::Read),
            handler: get(meta::metrics),
        },
        Route {
            method: "GET",
            path: "/openapi.yaml",
            access: Access::Scope(Scope::Read),
            handler: get(meta::openapi),
        },
        Route {
            method: "GET",
            path: "/files",
            access: Access::Scope(Scope::Read),
            handler: get(files::list_files),
        },
        Route {
            method: "GET",
            path: "/files/{*path}",
            access: Access::Scope(Scope::Read),
            handler: get(files::read_file),
        },
        Route {
            method: "GET",
            path: "/search",
            access: Access::Scope(Scope::Read),
            handler: get(search::search_files),
        },
        Route {
            method: "PUT",
            path: "/files/{*path}",
            access: Access::Scope(Scope::Write),
            handler: put(files::put_file),
        },
        Route {
            method: "POST",
            path: "/write_codebase",
            access: Access::Scope(Scope::Write),
            handler: post(synthesis::write_codebase),
        },
        Route {
            method: "POST",
            path: "/edits",
            access: Access::Scope(Scope::Write),
            handler: post(edits::post_edits),
        },
        Route {
            method: "POST",
            path: "/run",
            access: Access::Scope(Scope::Run),
            handler: post(run::run_command),
        },
        Route {
            method: "POST",
            path: "/write_sessions",
            access: Access::Scope(Scope::Write),
            handler: post(write_sessions::begin_session),
        },
        Route {
            method: "GET",
            path: "/write_sessions/{id}",
            access: Access::Scope(Scope::Read),
            handler: get(write_sessions::get_session),
        },
        Route {
            method: "POST",
            path: "/write_sessions/{id}/content",
            access: Access::Scope(Scope::Write),
            handler: post(write_sessions::append_content),
        },
        Route {
            method: "POST",
            path: "/write_sessions/{id}/finish",
            access: Access::Scope(Scope::Write),
            handler: post(write_sessions::finish_session),
        },
        Route {
            method: "POST",
            path: "/write_sessions/{id}/corrections",
            access: Access::Scope(Scope::Write),
            handler: post(write_sessions::correct_session),
        },
        Route {
            method: "GET",
            path: "/jobs",
            access: Access::Scope(Scope::Read),
            handler: get(jobs::list_jobs),
        },
        Route {
            method: "GET",
            path: "/jobs/{id}",
            access: Access::Scope(Scope::Read),
            handler: get(jobs::get_job),
        },
        Route {
            method: "GET",
            path: "/jobs/{id}/events",
            access: Access::Scope(Scope::Read),
            handler: get(jobs::job_events),
        },
        Route {
            method: "GET",
            path: "/operations",
            access: Access::Scope(Scope::Read),
            handler: get(operations::list_operations),
        },
        Route {
            method: "GET",
            path: "/operations/{id}",
            access: Access::Scope(Scope::Read),
            handler: get(operations::get_operation),
        },
        Route {
            method: "POST",
            path: "/operations/{id}/restore",
            access: Access::Scope(Scope::Write),
            handler: post(history::post_restore),
        },
        Route {
            method: "POST",
            path: "/requests/{id}/undo",
            access: Access::Scope(Scope::Write),
            handler: post(history::post_undo),
        },
        Route {
            method: "GET",
            path: "/stats/models",
            access: Access::Scope(Scope::Read),
            handler: get(stats::model_stats),
        },
        Route {
            method: "GET",
            path: "/keys/{id}/spend",
            access: Access::Scope(Scope::Read),
            handler: get(keys::get_spend),
        },
        Route {
            method: "PUT",
            path: "/keys/{id}/budget",
            access: Access::Scope(Scope::Admin),
            handler: put(keys::put_budget),
        },
        Route {
            method: "POST",
            path: "/workspaces",
            access: Access::Scope(Scope::Admin),
            handler: post(workspaces::create_workspace),
        },
        // A key lists the workspaces it may use (the dashboard's picker); making, changing and
        // removing them is administration.
        Route {
            method: "GET",
            path: "/workspaces",
            access: Access::Scope(Scope::Read),
            handler: get(workspaces::list_workspaces),
        },
        Route {
            method: "GET",
            path: "/workspaces/{name}",
            access: Access::Scope(Scope::Admin),
            handler: get(workspaces::get_workspace),
        },
        Route {
            method: "PUT",
            path: "/workspaces/{name}/budget",
            access: Access::Scope(Scope::Admin),
            handler: put(workspaces::put_workspace_budget),
        },
        Route {
            method: "POST",
            path: "/workspaces/{name}/merge",
            access: Access::Scope(Scope::Admin),
            handler: post(workspaces::merge_workspace),
        },
        Route {
            method: "DELETE",
            path: "/workspaces/{name}",
            access: Access::Scope(Scope::Admin),
            handler: delete(workspaces::delete_workspace),
        },
        // The routes of `workspace_routes`, in the named workspace: a valid key here, its scope
        // for the route inside checked there (`auth::require_scope_within`).
        Route {
            method: "GET",
            path: "/workspaces/{name}/{*rest}",
            access: Access::PerTool,
            handler: get(workspaces::serve_within),
        },
        Route {
            method: "PUT",
            path: "/workspaces/{name}/{*rest}",
            access: Access::PerTool,
            handler: put(workspaces::serve_within),
        },
        Route {
            method: "POST",
            path: "/workspaces/{name}/{*rest}",
            access: Access::PerTool,
            handler: post(workspaces::serve_within),
        },
        Route {
            method: "GET",
            path: "/tools",
            access: Access::Scope(Scope::Read),
            handler: get(tools::list_tools),
        },
        Route {
            method: "POST",
            path: "/tools/call",
            access: Access::PerTool,
            handler: post(tools::call_tool),
        },
        // MCP's streamable HTTP transport: POST carries messages, GET opens the server's
        // stream, DELETE ends a session. rmcp answers all three.
        Route {
            method: "POST",
            path: "/mcp",
            access: Access::PerTool,
            handler: post(crate::tools::mcp::serve_http),
        },
        Route {
            method: "GET",
            path: "/mcp",
            access: Access::PerTool,
            handler: get(crate::tools::mcp::serve_http),
        },
        Route {
            method: "DELETE",
            path: "/mcp",
            access: Access::PerTool,
            handler: delete(crate::tools::mcp::serve_http),
        },
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
