//! The HTTP surface of writ and the `writ` binary's commands.
//!
//! - [`config`]: settings from the environment and `writ.toml`, each declared once
//!   ([`config::declared`]); [`docs`]: the parts of the docs generated from the code.
//! - [`startup`]: [`startup::Application`] — build (store, migrations, workspace, listener) and run.
//! - [`routes`]: the route table and one module per resource; handlers translate HTTP to [`service`].
//! - [`service`]: what routes and tools share, one typed function per thing writ does.
//! - [`error`]: the API error type and its JSON body; [`extract`]: extractors that name bad fields;
//!   [`headers`]: headers read into and written from structs.
//! - [`access`]: what each route requires and who the caller is (a leaf every layer reads);
//!   [`auth`]: the bearer-key layer over every route; [`overload`]: rate, concurrency and size limits.
//! - [`openapi`]: the OpenAPI document, generated from the route table and the types.
//! - [`tools`]: the tools agents call — MCP (`/mcp`, `writ mcp`) and function calling (`/tools`).
//! - [`edge`]: host and cross-site guard, dashboard headers, protected paths, connection limits.
//! - [`state`]: what the handlers share ([`state::AppState`]; a router that needs a handle or two
//!   takes just those).
//! - [`telemetry`]: logging, request ids, metrics. [`check`]: `writ check`; [`keys_cli`]: `writ keys`;
//!   [`client`]: the client commands `writ write` and `writ ops`.

pub mod access;
pub mod auth;
pub mod check;
pub mod config;
pub mod docs;
pub mod edge;
pub mod error;
pub mod extract;
pub mod header_map;
pub mod headers;
pub mod keys_cli;
pub mod mcp_sessions;
pub mod models_cli;
pub mod openapi;
pub mod overload;
pub mod readiness;
pub mod remote_cli;
pub mod routes;
pub mod service;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod tools;

pub use config::Settings;
pub use startup::Application;
