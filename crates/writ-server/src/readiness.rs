//! `/readyz`'s answer and its cache: one probe shared by the callers of the same second, and a
//! "not ready" shared only with those already waiting, so recovery shows at once. The probes
//! themselves are the route's ([`crate::routes::meta`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One check of `/readyz`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Check {
    pub ok: bool,
    /// Whether a failure of this check makes the service not ready.
    pub required: bool,
    pub detail: String,
}

/// Every check `/readyz` makes.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Checks {
    /// The audit store answers and takes a write.
    pub database: Check,
    /// `REPO_DIR` exists and takes a synced write.
    pub repo_dir: Check,
    /// The model provider: fails writ's readiness only when models are configured but unusable.
    pub provider: Check,
    /// The command sandbox, where commands are configured (never required).
    pub commands: Check,
}

impl Checks {
    fn all(&self) -> [&Check; 4] {
        [
            &self.database,
            &self.repo_dir,
            &self.provider,
            &self.commands,
        ]
    }

    /// Each check passed through `f`.
    pub fn map(&self, f: impl Fn(&Check) -> Check) -> Checks {
        Checks {
            database: f(&self.database),
            repo_dir: f(&self.repo_dir),
            provider: f(&self.provider),
            commands: f(&self.commands),
        }
    }
}

/// `/readyz`'s answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Readiness")]
pub struct ReadinessBody {
    pub status: ReadyStatus,
    pub checks: Checks,
}

#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadyStatus {
    /// Every required check passes.
    Ready,
    /// A required check fails: writes would fail.
    NotReady,
}

/// How long a "ready" answer serves every caller: the probe writes and syncs a file, and
/// `/readyz` is open to anyone who can reach it.
const READY_CACHE_FOR: Duration = Duration::from_secs(1);

/// The last probe and when it finished. Callers queue on the lock, so concurrent callers share
/// one probe: the first runs it, the rest take its answer. A "not ready" answer is shared only
/// with those who were already waiting, so recovery shows at once.
#[derive(Debug, Default)]
pub struct ReadyCache {
    last: tokio::sync::Mutex<Option<(Instant, Arc<Readiness>)>>,
}

#[derive(Debug)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Checks,
}

impl ReadyCache {
    /// The last answer while it still serves, or `probe`'s: callers queue on the lock, so the
    /// first runs the probe and the others waiting with it take its answer.
    pub async fn get(&self, probe: impl Future<Output = Readiness>) -> Arc<Readiness> {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((at, readiness)) = last.as_ref()
            && (*at >= arrived || (readiness.ready && at.elapsed() < READY_CACHE_FOR))
        {
            return Arc::clone(readiness);
        }
        let readiness = Arc::new(probe.await);
        *last = Some((Instant::now(), Arc::clone(&readiness)));
        readiness
    }
}

impl Readiness {
    /// Ready when every required check passes.
    pub fn new(checks: Checks) -> Self {
        let ready = checks.all().iter().all(|c| c.ok || !c.required);
        Readiness { ready, checks }
    }
}
