//! The route table. Every route is listed once in [`api_routes`]; the router is built from it
//! and the OpenAPI test walks the same list, so a route cannot be added without the spec noticing.
//!
//! One module per resource: [`synthesis`] (`POST /write_codebase`), [`files`] (the direct file
//! routes), [`run`] (`POST /run`), [`jobs`] (jobs and their event stream), [`operations`] (the
//! audit log), [`tools`] (function-calling declarations and dispatch), [`service`] (health,
//! readiness, metrics, the spec, the dashboard).

pub mod files;
pub mod jobs;
pub mod operations;
pub mod run;
pub mod service;
pub mod synthesis;
pub mod tools;

use axum::Router;
use axum::routing::{MethodRouter, get};

use crate::state::AppState;

/// One route: method, axum path, handler.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
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
            handler: get(service::dashboard),
        },
        Route {
            method: "GET",
            path: "/healthz",
            handler: get(service::healthz),
        },
        Route {
            method: "GET",
            path: "/readyz",
            handler: get(service::readyz),
        },
        Route {
            method: "GET",
            path: "/metrics",
            handler: get(service::metrics),
        },
        Route {
            method: "GET",
            path: "/openapi.yaml",
            handler: get(service::openapi),
        },
        Route {
            method: "GET",
            path: "/files",
            handler: get(files::list_files),
        },
        Route {
            method: "GET",
            path: "/files/{*path}",
            handler: get(files::read_file),
        },
        Route {
            method: "PUT",
            path: "/files/{*path}",
            handler: put(files::put_file),
        },
        Route {
            method: "POST",
            path: "/write_codebase",
            handler: post(synthesis::write_codebase),
        },
        Route {
            method: "POST",
            path: "/run",
            handler: post(run::run_command),
        },
        Route {
            method: "GET",
            path: "/jobs",
            handler: get(jobs::list_jobs),
        },
        Route {
            method: "GET",
            path: "/jobs/{id}",
            handler: get(jobs::get_job),
        },
        Route {
            method: "GET",
            path: "/jobs/{id}/events",
            handler: get(jobs::job_events),
        },
        Route {
            method: "GET",
            path: "/operations",
            handler: get(operations::list_operations),
        },
        Route {
            method: "GET",
            path: "/operations/{id}",
            handler: get(operations::get_operation),
        },
        Route {
            method: "GET",
            path: "/tools",
            handler: get(tools::list_tools),
        },
        Route {
            method: "POST",
            path: "/tools/call",
            handler: post(tools::call_tool),
        },
        // MCP's streamable HTTP transport: POST carries messages, GET opens the server's
        // stream, DELETE ends a session. rmcp answers all three.
        Route {
            method: "POST",
            path: "/mcp",
            handler: post(crate::tools::mcp::serve_http),
        },
        Route {
            method: "GET",
            path: "/mcp",
            handler: get(crate::tools::mcp::serve_http),
        },
        Route {
            method: "DELETE",
            path: "/mcp",
            handler: delete(crate::tools::mcp::serve_http),
        },
    ]
}

pub fn router() -> Router<AppState> {
    api_routes()
        .into_iter()
        .fold(Router::new(), |r, route| r.route(route.path, route.handler))
}
