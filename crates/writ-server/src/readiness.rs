//! `/readyz`'s answer and its cache: one probe shared by the callers of the same second, and a
//! "not ready" shared only with those already waiting, so recovery shows at once. The probes
//! themselves are the route's ([`crate::routes::meta`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub ok: bool,
    /// Whether a failure of this check makes the service not ready.
    pub required: bool,
    pub detail: String,
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
    pub checks: [(&'static str, Check); 4],
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
    pub fn new(checks: [(&'static str, Check); 4]) -> Self {
        let ready = checks.iter().all(|(_, c)| c.ok || !c.required);
        Readiness { ready, checks }
    }
}
