//! Start-up as a type: [`Application::build`] connects the store, migrates, opens the workspace,
//! settles operations a crash left pending, and binds its listener (port 0 in tests);
//! [`Application::run_until`] serves until the shutdown future resolves, then drains.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::net::TcpListener;
use writ_core::files::reconcile_pending;
use writ_core::synthesis::{SynthesisConfig, Synthesizer};

use crate::config::Settings;
use crate::routes;
use crate::state::AppState;
use crate::telemetry;

pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: AppState,
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let store = writ_store::connect(&settings.database_url)
            .await
            .with_context(|| {
                format!(
                    "opening the audit store at {}",
                    writ_store::redact_url(&settings.database_url)
                )
            })?;
        store.migrate().await.context("applying migrations")?;
        let workspace = writ_workspace::SandboxedWorkspace::open(&settings.repo_dir)
            .await
            .with_context(|| format!("opening REPO_DIR {}", settings.repo_dir.display()))?;
        let workspace: Arc<dyn writ_core::Workspace> = Arc::new(workspace);

        // SQLite serves one process, so everything pending at start-up is from a dead run; on a shared
        // PostgreSQL another replica may be mid-write, so only settle what is old enough.
        let min_age = if store.backend() == "sqlite" {
            std::time::Duration::ZERO
        } else {
            settings.reconcile_after
        };
        let report = reconcile_pending(store.as_ref(), workspace.as_ref(), min_age)
            .await
            .context("settling operations left pending by an earlier run")?;
        if report.confirmed + report.failed > 0 {
            tracing::warn!(
                confirmed = report.confirmed,
                failed = report.failed,
                "settled operations left pending by an earlier run"
            );
        }

        let (models, synthesizer) = build_models(&settings, &store, &workspace);

        let listener = TcpListener::bind(settings.addr)
            .await
            .with_context(|| format!("binding {}", settings.addr))?;
        let local_addr = listener.local_addr()?;
        let state = AppState {
            settings: Arc::new(settings),
            store,
            workspace,
            models,
            synthesizer,
            metrics: telemetry::metrics_handle(),
        };
        Ok(Self {
            listener,
            local_addr,
            state,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves; in-flight requests are allowed to finish.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let reconciler = tokio::spawn(reconcile_periodically(self.state.clone()));
        let app = app(self.state);
        tracing::info!(addr = %self.local_addr, "writ listening");
        let result = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        reconciler.abort();
        result.context("serving HTTP")
    }
}

/// The model client and the synthesizer over it. A client that cannot be built (a TLS set-up
/// failure) leaves writ serving the direct routes, with the reason in the log and in `/readyz`.
fn build_models(
    settings: &Settings,
    store: &Arc<dyn writ_core::AuditStore>,
    workspace: &Arc<dyn writ_core::Workspace>,
) -> (
    Option<Arc<dyn writ_core::ModelClient>>,
    Option<Arc<Synthesizer>>,
) {
    let retry = writ_models::RetryPolicy {
        max_attempts: settings.model_max_attempts,
        initial_backoff: settings.model_backoff,
        max_backoff: settings.model_backoff.saturating_mul(16),
        total_deadline: settings.model_deadline,
    };
    let config = writ_models::ClientConfig {
        base_url: settings.openrouter_base_url.clone(),
        api_key: settings.openrouter_api_key.clone(),
        retry,
        ..writ_models::ClientConfig::default()
    };
    let client: Arc<dyn writ_core::ModelClient> = match writ_models::OpenRouterClient::new(config) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            tracing::error!(error = %e, "the model client could not be built; POST /write_codebase is unavailable");
            return (None, None);
        }
    };
    let synthesis = SynthesisConfig {
        candidates: settings.code_list.clone(),
        arbiter: settings.code_model.clone(),
        fallback: settings.code_gen_model.clone(),
        max_tokens: settings.max_tokens,
        fallback_backoff: settings.fallback_backoff,
        ..SynthesisConfig::default()
    };
    let synthesizer = Synthesizer {
        models: client.clone(),
        store: store.clone(),
        workspace: workspace.clone(),
        config: synthesis,
    };
    (Some(client), Some(Arc::new(synthesizer)))
}

/// The full router with its layers, for `run_until` and for in-process tests.
pub fn app(state: AppState) -> Router {
    let limit = state.settings.max_body_bytes;
    routes::router()
        .fallback(|| async {
            crate::error::ApiError::not_found(
                "no such route; see GET /openapi.yaml for the routes writ serves",
            )
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(telemetry::request_context))
        .with_state(state)
}

/// Pending operations older than `reconcile_after` were interrupted (or their final update was
/// lost while the database was away): settle them against the disk, so the log and the files agree.
async fn reconcile_periodically(state: AppState) {
    let every = state
        .settings
        .reconcile_after
        .max(std::time::Duration::from_secs(1));
    loop {
        tokio::time::sleep(every).await;
        match reconcile_pending(
            state.store.as_ref(),
            state.workspace.as_ref(),
            state.settings.reconcile_after,
        )
        .await
        {
            Ok(r) if r.confirmed + r.failed > 0 => {
                tracing::info!(
                    confirmed = r.confirmed,
                    failed = r.failed,
                    "settled pending operations"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reconciliation skipped: audit store unavailable"),
        }
    }
}
