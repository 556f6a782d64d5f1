//! What the handlers share. Cheap to clone.
//!
//! A router that needs only some of it takes just those handles (`State<Arc<dyn Workspace>>`),
//! each drawn from [`AppState`] by the derived `FromRef`, so that it cannot reach the rest — the
//! other routers' caches, the tools' sessions — through the state.

use std::sync::Arc;

use axum::extract::FromRef;
use metrics_exporter_prometheus::PrometheusHandle;
use writ_core::{AuditStore, ModelClient, Workspace};

use crate::config::Settings;

#[derive(Clone, FromRef)]
pub struct AppState {
    pub settings: Arc<Settings>,
    /// The audit log; every write is recorded here before it is acknowledged.
    pub store: Arc<dyn AuditStore>,
    /// `REPO_DIR`, every path confined beneath it.
    pub workspace: Arc<dyn Workspace>,
    /// Every workspace by name, `default` (the one above) included, each opened once.
    pub workspaces: Arc<crate::service::workspaces::Workspaces>,
    /// The routes inside each named workspace, built once per workspace.
    pub within: Arc<crate::service::workspaces::BuiltPer<axum::Router>>,
    /// Present when models are configured; `/readyz` asks it whether the provider is usable.
    pub models: Option<Arc<dyn ModelClient>>,
    /// Runs every batch as a job (persisted, with progress events); `None` when no model client
    /// could be built.
    pub jobs: Option<Arc<writ_core::synthesis::jobs::Jobs>>,
    /// Runs configured commands in the sandbox (`POST /run`, `options.validation`); `None` when
    /// no commands are configured.
    pub commands: Option<Arc<writ_sandbox::SandboxRunner>>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Whether API keys are required (see [`crate::auth`]).
    pub auth: Arc<crate::access::AuthSwitch>,
    /// What each route requires of its caller, from the route table.
    pub access: Arc<crate::access::AccessTable>,
    /// Rate, concurrency and in-flight counters (see [`crate::overload`]).
    pub limits: Arc<crate::overload::Limits>,
    /// The MCP sessions of `/mcp` and the rules its transport checks (see [`crate::tools::mcp`]).
    pub mcp: crate::mcp_sessions::McpHttp,
    /// `/readyz`'s last probe, shared by the callers of the next second.
    pub readiness: Arc<crate::readiness::ReadyCache>,
}
