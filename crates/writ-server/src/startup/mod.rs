//! Start-up as a type: [`Application::build`] connects the store, migrates, opens the workspace,
//! settles operations a crash left pending, and binds its listener (port 0 in tests);
//! [`Application::run_until`] serves until the shutdown future resolves, then drains.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::net::TcpListener;
use writ_core::files::reconcile_pending;
use writ_core::synthesis::jobs::{EventHub, Jobs, fail_stale_jobs};

mod build;
mod first_key;

use build::{build_command_runner, build_models};

/// A job whose heartbeat is older than this is taken for dead (six missed heartbeats).
const STALE_JOB_AFTER: Duration = Duration::from_secs(30);
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
        let (state, keys_configured) = assemble(settings).await?;
        refuse_open_exposure(&state.settings, keys_configured)?;
        // What `writ check` would warn of, said once where the operator looks at start-up.
        for line in crate::check::configuration_lines(&state.settings)
            .iter()
            .filter(|l| !l.ok)
        {
            tracing::warn!(check = line.name, "{}", line.detail);
        }
        // Whether the providers serve the configured models needs the network: asked beside
        // start-up, never holding it up, and said as `writ check` says it.
        let settings = state.settings.clone();
        tokio::spawn(async move {
            for line in crate::check::reachable_lines(&settings).await {
                if !line.ok {
                    tracing::warn!(check = line.name, "{}", line.detail);
                }
            }
        });
        let addr = state.settings.addr;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let local_addr = listener.local_addr()?;
        Ok(Self {
            listener,
            local_addr,
            state,
        })
    }
}

/// Everything writ serves from, without a listener: the store (migrated), the workspace, work
/// an earlier run left unfinished settled, the models, the keys. Also answers whether keys are
/// configured.
async fn assemble(settings: Settings) -> anyhow::Result<(AppState, bool)> {
    let store = writ_store::connect_for_batches(
        &settings.database_url,
        settings.guard.max_batches_in_flight,
    )
    .await
    .with_context(|| {
        format!(
            "opening the audit store at {}",
            writ_store::redact_url(&settings.database_url)
        )
    })?;
    store.migrate().await.context("applying migrations")?;
    let workspace = writ_workspace::RepoWorkspace::open(&settings.repo_dir)
        .await
        .with_context(|| format!("opening REPO_DIR {}", settings.repo_dir.display()))?;
    let protected =
        crate::config::edge::protected_paths(&settings, writ_core::Workspace::root(&workspace));
    protected
        .check_root(writ_core::Workspace::root(&workspace))
        .context("REPO_DIR may not be, or lie inside, a git directory or a protected name")?;
    let mut workspace = workspace
        .with_protected(protected)
        .with_max_file_bytes(settings.guard.max_file_bytes)
        // Each replica keeps its own: it is built from the shared tree and kept by a watcher of
        // it, so it needs no coordination and costs no round trip on the batch's path.
        .with_index();
    // Replicas share REPO_DIR through the database they share: writers of one path wait for
    // each other's advisory lock.
    let shared_locks = writ_store::shared_locks(&settings.database_url)
        .context("setting up the shared path locks")?;
    if let Some(shared) = shared_locks.clone() {
        workspace = workspace.with_shared_locks(shared);
    }
    let workspace: Arc<dyn writ_core::Workspace> = Arc::new(workspace);
    let settings = Arc::new(settings);
    let workspaces = Arc::new(crate::service::workspaces::Workspaces::new(
        workspace.clone(),
        store.clone(),
        settings.clone(),
        shared_locks,
    ));

    // SQLite serves one process, so everything pending at start-up is from a dead run; on a shared
    // PostgreSQL another replica may be mid-write, so only settle what is old enough.
    let min_age = if store.single_process() {
        std::time::Duration::ZERO
    } else {
        settings.reconcile_after
    };
    let report = reconcile_pending(store.as_ref(), workspaces.as_ref(), min_age)
        .await
        .context("settling operations left pending by an earlier run")?;
    if report.confirmed + report.failed + report.orphaned > 0 {
        tracing::warn!(
            confirmed = report.confirmed,
            failed = report.failed,
            left_in_deleted_workspaces = report.orphaned,
            "settled operations left pending by an earlier run"
        );
    }

    // Jobs whose process died are failed with a reason, never left "running" forever. Same
    // rule as above: on SQLite every unfinished job is from a dead run.
    let hub = EventHub::default();
    let stale_after = if store.single_process() {
        Duration::ZERO
    } else {
        STALE_JOB_AFTER
    };
    let failed_jobs = fail_stale_jobs(store.as_ref(), stale_after, Some(&hub), workspace.root())
        .await
        .context("failing jobs interrupted by an earlier run")?;
    if failed_jobs > 0 {
        tracing::warn!(
            jobs = failed_jobs,
            "failed jobs interrupted by an earlier run"
        );
    }

    let commands = build_command_runner(&settings, workspace.root()).await;
    let (models, synthesizer) = build_models(
        &settings,
        &store,
        &workspace,
        commands
            .clone()
            .map(|c| c as Arc<dyn writ_core::execution::CommandRunner>),
    );
    // Where replicas share the store, each job is leased by the replica running it, so that
    // another resumes it if this one dies.
    let shared = !store.single_process();
    let replica = replica_name();
    if shared {
        tracing::info!(replica = %replica, "jobs are leased: replicas sharing this database resume each other's");
    } else {
        tracing::info!(
            "SQLite serves one process: run a single replica (a batch interrupted by a crash is failed at the next start, not resumed)"
        );
    }
    let jobs = synthesizer.map(|synthesizer| {
        let (registry, audit, server_default) =
            (workspaces.clone(), store.clone(), settings.git_commit);
        let per_workspace = crate::service::workspaces::Synthesizers {
            workspaces: workspaces.clone(),
            base: synthesizer.clone(),
            commands: commands.clone(),
            committer_for: Arc::new(move |workspace| {
                let root = workspace.root().to_path_buf();
                let by_default = registry.git_commit_of(&root).unwrap_or(server_default);
                Arc::new(crate::service::git::GitCommitter::new(
                    root,
                    by_default,
                    audit.clone(),
                ))
            }),
            built: Default::default(),
        };
        workspaces.forget_along(per_workspace.built.clone());
        let jobs = Jobs::new(synthesizer, hub.clone()).with_workspaces(Arc::new(per_workspace));
        Arc::new(if shared {
            jobs.with_leases(replica.clone())
        } else {
            jobs
        })
    });

    first_key::make_if_none(&settings, store.as_ref()).await?;
    let keys_configured = !settings.guard.api_keys.is_empty()
        || store
            .any_keys()
            .await
            .context("reading the API keys in the store")?;
    let guard = settings.guard.clone();
    // Replicas sharing a database share each key's limits there.
    let limits = match writ_store::shared_limits(&settings.database_url)
        .context("setting up the shared limits")?
    {
        Some(store) => crate::overload::Limits::new(guard).with_shared(store, &replica),
        None => crate::overload::Limits::new(guard),
    };
    let mcp = crate::mcp_sessions::McpHttp::new(
        settings.addr.ip().is_loopback(),
        keys_configured,
        settings.max_body_bytes,
    );
    let within: Arc<crate::service::workspaces::BuiltPer<axum::Router>> = Arc::default();
    workspaces.forget_along(within.clone());
    let state = AppState {
        settings,
        store,
        workspace,
        workspaces,
        within,
        models,
        jobs,
        commands,
        metrics: telemetry::metrics_handle(),
        auth: Arc::new(crate::access::AuthSwitch::new(keys_configured)),
        access: Arc::new(crate::routes::access_table()),
        limits: Arc::new(limits),
        mcp,
        readiness: Arc::default(),
    };
    Ok((state, keys_configured))
}

impl Application {
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
        let claimer = tokio::spawn(take_over_periodically(self.state.clone()));
        let claiming = claimer.abort_handle();
        let limits = self.state.limits.clone();
        let grace = self.state.settings.guard.shutdown_grace;
        let mcp = self.state.mcp.clone();
        let app = app(self.state.clone());
        tracing::info!(addr = %self.local_addr, "writ listening");
        // After the signal: no new connections, in-flight requests get `grace` to finish, then
        // writ exits anyway (an unfinished write stays `pending` and is settled at the next start).
        let (stopping_tx, mut stopping) = tokio::sync::oneshot::channel::<Instant>();
        let signal = async move {
            shutdown.await;
            // A stopping replica takes on no other replica's jobs.
            claiming.abort();
            // Open MCP streams would hold the drain until the grace ran out; batches they
            // started run on in their own tasks and are recorded.
            mcp.shut_down();
            let _ = stopping_tx.send(Instant::now());
        };
        let serve = serve(self.listener, app, self.state.settings.edge.clone(), signal);
        tokio::pin!(serve);
        let mut stopping_at = None;
        let result = tokio::select! {
            r = &mut serve => r,
            Ok(at) = &mut stopping => {
                stopping_at = Some(at);
                tokio::select! {
                    r = &mut serve => r,
                    _ = tokio::time::sleep(grace) => {
                        tracing::warn!(grace_secs = grace.as_secs(), "shutdown grace period over with requests still open; exiting");
                        Ok(())
                    }
                }
            }
        };
        // Batches whose callers hung up run on in their own tasks: they get what is left of the grace.
        let since = stopping_at
            .or_else(|| stopping.try_recv().ok())
            .unwrap_or_else(Instant::now);
        if !limits.drain(grace.saturating_sub(since.elapsed())).await {
            tracing::warn!(
                batches = limits.batches_in_flight(),
                "shutdown grace period over with batches unfinished; their pending operations are settled at the next start"
            );
        }
        if let Some(jobs) = &self.state.jobs {
            hand_back(jobs).await;
            jobs.flush_events(EVENT_FLUSH).await;
        }
        reconciler.abort();
        claimer.abort();
        result.context("serving HTTP")
    }
}

/// Serves `app` on `listener` until `signal`, then stops accepting and lets open connections
/// finish their requests (the caller bounds how long).
///
/// Not `axum::serve`: it sets no header-read timeout (a client that sends half a request would
/// hold its connection forever) and no connection cap. Here hyper's HTTP/1 header-read timeout
/// also closes idle keep-alive connections (hyper re-arms it while waiting for the next request's
/// head), HTTP/2 connections are pinged and dropped when the pings go unanswered, and at most
/// `max_connections` are served at once: past that, new ones wait in the kernel's listen backlog.
async fn serve(
    listener: TcpListener,
    app: Router,
    edge: crate::config::edge::EdgeSettings,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(edge.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(edge.header_read_timeout)
        .keep_alive_timeout(edge.header_read_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(edge.max_connections));
    tokio::pin!(signal);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut signal => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors or a connection reset before accept: neither ends
                    // the server; a short pause keeps an EMFILE storm from spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// writ writes files and spends provider credit: on an address other machines can reach it must
/// not run without keys, unless the operator said so explicitly.
fn refuse_open_exposure(settings: &Settings, keys_configured: bool) -> anyhow::Result<()> {
    if settings.addr.ip().is_loopback() || keys_configured {
        return Ok(());
    }
    if settings.guard.insecure {
        tracing::warn!(addr = %settings.addr, "serving on a non-loopback address WITHOUT API keys (--insecure)");
        return Ok(());
    }
    anyhow::bail!(
        "WRIT_ADDR {} is not a loopback address and no API keys are configured: create one with \
         `writ keys create NAME` (or set WRIT_API_KEYS), or pass `writ serve --insecure` to serve \
         without keys anyway",
        settings.addr
    )
}

/// How long a stopping process waits for the jobs it hands back to stop.
const HAND_BACK_WITHIN: Duration = Duration::from_secs(5);

/// How often a replica looks for jobs whose lease lapsed.
const CLAIM_EVERY: Duration = Duration::from_secs(2);

/// A name for this process in job leases, unique among replicas (and across restarts of one):
/// the host, the process id and a random suffix.
fn replica_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "writ".to_string());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..8])
}

/// The jobs still running when the grace ran out go back to the other replicas, which resume
/// them at once, instead of waiting for their leases to lapse.
async fn hand_back(jobs: &Jobs) {
    let running = jobs.jobs_running();
    if running == 0 {
        return;
    }
    let handed = jobs.hand_back(HAND_BACK_WITHIN).await;
    if handed > 0 {
        tracing::warn!(
            jobs = handed,
            "handed unfinished jobs back for another replica to resume"
        );
    }
}

/// Claims and resumes the jobs of replicas that died (their leases lapsed), while this one serves.
async fn take_over_periodically(state: AppState) {
    let Some(jobs) = state.jobs.clone() else {
        return;
    };
    if jobs.owner().is_none() {
        return;
    }
    loop {
        match jobs.take_over_lapsed().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "claimed jobs whose lease lapsed"),
            Err(e) => tracing::warn!(error = %e, "job take-over skipped: audit store unavailable"),
        }
        tokio::time::sleep(CLAIM_EVERY).await;
    }
}

/// How long a stopping process waits for the last progress events to be stored.
const EVENT_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// `writ mcp`: writ in this process, spoken to over stdin/stdout by an MCP host. No listener,
/// so no keys: whoever can start the process is trusted. Returns when the host closes stdin.
pub async fn serve_mcp_stdio(settings: Settings) -> anyhow::Result<()> {
    let (state, _) = assemble(settings).await?;
    let reconciler = tokio::spawn(reconcile_periodically(state.clone()));
    let limits = state.limits.clone();
    let grace = state.settings.guard.shutdown_grace;
    let jobs = state.jobs.clone();
    let claimer = tokio::spawn(take_over_periodically(state.clone()));
    let served = crate::tools::mcp::serve_stdio(state).await;
    claimer.abort();
    if !limits.drain(grace).await {
        tracing::warn!(
            batches = limits.batches_in_flight(),
            "the MCP host closed the session with batches unfinished; their pending operations are settled at the next start"
        );
    }
    if let Some(jobs) = &jobs {
        hand_back(jobs).await;
        jobs.flush_events(EVENT_FLUSH).await;
    }
    reconciler.abort();
    served
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
        // Outside the routes (so no route can forget it), inside the request context (so a 401
        // still carries a request id and is counted).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::require_key,
        ))
        // Beside auth and before it: a rebinding page or a cross-site form is refused before a
        // key is even looked for.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::edge::guard_host_and_origin,
        ))
        .layer(axum::middleware::from_fn(telemetry::request_context))
        .with_state(state)
}

/// Pending operations older than `reconcile_after` were interrupted (or their final update was
/// lost while the database was away): settle them against the disk, so the log and the files agree.
/// Drops the kept contents older than `WRIT_HISTORY_RETENTION`, at most once an hour (or once a
/// retention, when that is shorter). Every replica may run it: a deletion finds what another
/// already deleted gone, and nothing else depends on which one ran.
async fn prune_history(state: &AppState, pruned_at: &mut Option<std::time::Instant>) {
    let Some(retention) = state.settings.history_retention else {
        return;
    };
    let every = retention.min(std::time::Duration::from_secs(3600));
    if pruned_at.is_some_and(|at| at.elapsed() < every) {
        return;
    }
    *pruned_at = Some(std::time::Instant::now());
    let Ok(retention) = chrono::Duration::from_std(retention) else {
        return;
    };
    match state
        .store
        .prune_contents(chrono::Utc::now() - retention)
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            dropped = n,
            "dropped contents older than the history retention"
        ),
        Err(e) => tracing::warn!(error = %e, "history prune skipped: audit store unavailable"),
    }
}

async fn reconcile_periodically(state: AppState) {
    let every = state
        .settings
        .reconcile_after
        .max(std::time::Duration::from_secs(1));
    let mut pruned_at: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(every).await;
        prune_history(&state, &mut pruned_at).await;
        match reconcile_pending(
            state.store.as_ref(),
            state.workspaces.as_ref(),
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
        if let Err(e) = fail_stale_jobs(
            state.store.as_ref(),
            STALE_JOB_AFTER,
            state.jobs.as_ref().map(|jobs| jobs.hub()),
            state.workspace.root(),
        )
        .await
        {
            tracing::warn!(error = %e, "stale-job sweep skipped: audit store unavailable");
        }
        match writ_core::sessions::expire_abandoned(state.store.as_ref(), &state.settings.sessions)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(expired = n, "expired abandoned write sessions"),
            Err(e) => {
                tracing::warn!(error = %e, "write-session expiry skipped: audit store unavailable")
            }
        }
    }
}
