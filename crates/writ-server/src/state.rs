//! What every handler shares. Cheap to clone.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use writ_core::{AuditStore, ModelClient, Workspace};

use crate::config::Settings;

#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    /// The audit log; every write is recorded here before it is acknowledged.
    pub store: Arc<dyn AuditStore>,
    /// The sandboxed `REPO_DIR`.
    pub workspace: Arc<dyn Workspace>,
    /// Present when models are configured; `/readyz` asks it whether the provider is usable.
    pub models: Option<Arc<dyn ModelClient>>,
    /// Runs `write_codebase` batches; `None` when no model client could be built.
    pub synthesizer: Option<Arc<writ_core::synthesis::Synthesizer>>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}
