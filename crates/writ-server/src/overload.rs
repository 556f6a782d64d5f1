//! What writ refuses so it cannot be overloaded: the in-process counters that enforce the access
//! and limit settings ([`crate::config::GuardSettings`]: per-key and per-workspace rate and
//! concurrency, batches in flight).
//!
//! A workspace's limits (`WRIT_WORKSPACE_RATE_LIMIT_*`, `WRIT_MAX_BATCHES_PER_WORKSPACE`) are
//! counted as a key's are, under the caller name `workspace:<name>` ([`workspace_caller`]), which
//! no key id can spell (ids are hex), so every key using the workspace draws on one bucket and one
//! set of batch slots, shared across replicas where the keys' are.
//!
//! Every limit answers at once with a 429 or 503 and `Retry-After`; nothing queues unboundedly.
//! Where replicas share a PostgreSQL database, the per-key limits (the rate bucket, the batches a
//! key runs at once) are held there ([`LimitStore`]), so they hold across replicas: a key's
//! batch slot is a row, named by the batch's job, that its replica renews while the batch runs;
//! a replica resuming a dead or stopping replica's job takes its slot over, and the slot is given
//! back once, when the job ends. The in-flight cap is each process's own capacity. On SQLite (one process)
//! every counter lives in memory.
//! A small token bucket rather than `tower_governor`: the limits are keyed by the API key the
//! auth layer found (not by IP), the per-key batch count is not a rate at all, and the answer
//! must be writ's JSON error body; a governor layer would cover only the first and still need a
//! custom key extractor and error handler.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use writ_core::shared_limits::LimitStore;

use crate::config::GuardSettings;
use crate::error::{ApiError, ErrorCode};

/// How long a caller refused for concurrency is told to wait: batches take seconds.
const BUSY_RETRY_SECS: u64 = 5;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The counters. One per process, shared through [`crate::state::AppState`].
pub struct Limits {
    settings: GuardSettings,
    buckets: Mutex<HashMap<String, Bucket>>,
    per_key: Counts,
    in_flight: Arc<Semaphore>,
    /// The per-key limits replicas share, and this replica's name as their holder.
    shared: Option<(Arc<dyn LimitStore>, Arc<str>)>,
}

/// How long a shared batch slot outlives its replica's last renewal.
const SLOT_LEASE: Duration = Duration::from_secs(10);
/// How often a replica renews the shared batch slots it holds.
const SLOT_RENEW_EVERY: Duration = Duration::from_secs(3);

type Counts = Arc<Mutex<HashMap<String, usize>>>;

/// Held while a batch runs (moved into its task, so a caller hanging up does not free it early).
pub struct BatchPermit {
    _global: OwnedSemaphorePermit,
    /// The key's slot and the workspace's, when this process counts them.
    _key: (KeySlot, KeySlot),
    /// The key's slot and the workspace's, where replicas share them.
    _shared: Vec<SharedSlot>,
}

/// Takes one of `caller`'s `max` shared slots as `slot`, for the batch whose job is `job`;
/// `None` when all are taken.
async fn take_shared(
    store: &Arc<dyn LimitStore>,
    caller: &str,
    (slot, job): (uuid::Uuid, uuid::Uuid),
    holder: &str,
    max: usize,
) -> Result<Option<SharedSlot>, ApiError> {
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    let taken = store
        .take_batch_slot(caller, slot, job, holder, max, slot_until())
        .await
        .map_err(crate::error::store_error)?;
    Ok(taken.then(|| SharedSlot {
        id: slot,
        store: store.clone(),
    }))
}

/// A key's batch slot in the shared store; dropping it gives the slot back.
struct SharedSlot {
    id: uuid::Uuid,
    store: Arc<dyn LimitStore>,
}

impl Drop for SharedSlot {
    fn drop(&mut self) {
        let (id, store) = (self.id, self.store.clone());
        // Outside a runtime (a process ending) the slot lapses on its own.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = store.release_batch_slot(id).await {
                    tracing::warn!(error = %e, "could not give a batch slot back; it lapses on its own");
                }
            });
        }
    }
}

fn slot_until() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
        + chrono::Duration::from_std(SLOT_LEASE).unwrap_or(chrono::Duration::seconds(10))
}

/// The name a workspace's limits are held under in the buckets and batch slots the keys' are
/// held in. A key id is hex, so it never collides with one.
pub fn workspace_caller(workspace: &str) -> String {
    format!("workspace:{workspace}")
}

/// Whose limit was reached: the key's, or the workspace's the request is in.
#[derive(Clone, Copy)]
enum Holder<'a> {
    Key,
    Workspace(&'a str),
}

impl Holder<'_> {
    /// `details` of the refusal: whose limit it is.
    fn details(self) -> serde_json::Value {
        match self {
            Holder::Key => serde_json::json!({"limit": "key"}),
            Holder::Workspace(name) => serde_json::json!({"limit": "workspace", "workspace": name}),
        }
    }
}

fn too_many_batches(holder: Holder<'_>, max: usize) -> ApiError {
    let message = match holder {
        Holder::Key => format!(
            "this API key already has {max} batches running (WRIT_MAX_BATCHES_PER_KEY); retry when one finishes"
        ),
        Holder::Workspace(name) => format!(
            "the workspace '{name}' already has {max} batches running, whatever the key (WRIT_MAX_BATCHES_PER_WORKSPACE); retry when one finishes"
        ),
    };
    let mut e = ApiError::new(ErrorCode::TooManyBatches, message).with_details(holder.details());
    e.retry_after_secs = Some(BUSY_RETRY_SECS);
    e
}

fn rate_limited(holder: Holder<'_>, per_min: u32, burst: u32, wait: u64) -> ApiError {
    let message = match holder {
        Holder::Key => format!(
            "this API key made more than {per_min} requests per minute (burst {burst}, WRIT_RATE_LIMIT_PER_MIN); retry after {wait} s"
        ),
        Holder::Workspace(name) => format!(
            "the workspace '{name}' received more than {per_min} requests per minute from all its keys (burst {burst}, WRIT_WORKSPACE_RATE_LIMIT_PER_MIN); retry after {wait} s"
        ),
    };
    let mut e = ApiError::new(ErrorCode::RateLimited, message).with_details(holder.details());
    e.retry_after_secs = Some(wait);
    e
}

/// One of a key's batch slots; dropping it gives the slot back.
struct KeySlot(Option<(String, Counts)>);

impl Drop for KeySlot {
    fn drop(&mut self) {
        if let Some((key, counts)) = self.0.take() {
            let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = counts.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.remove(&key);
                }
            }
        }
    }
}

impl Limits {
    pub fn new(settings: GuardSettings) -> Self {
        let in_flight = Arc::new(Semaphore::new(settings.max_batches_in_flight));
        Self {
            settings,
            buckets: Mutex::new(HashMap::new()),
            per_key: Arc::new(Mutex::new(HashMap::new())),
            in_flight,
            shared: None,
        }
    }

    /// Per-key limits held in `store`, shared with the other replicas; `holder` names this
    /// replica. Starts the task that renews this replica's batch slots (so needs a runtime).
    pub fn with_shared(mut self, store: Arc<dyn LimitStore>, holder: &str) -> Self {
        let holder: Arc<str> = Arc::from(holder);
        tokio::spawn({
            let (store, holder) = (store.clone(), holder.clone());
            async move {
                loop {
                    tokio::time::sleep(SLOT_RENEW_EVERY).await;
                    if let Err(e) = store.renew_batch_slots(&holder, slot_until()).await {
                        tracing::warn!(error = %e, "could not renew this replica's batch slots");
                    }
                }
            }
        });
        self.shared = Some((store, holder));
        self
    }

    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// Takes one request from `key`'s bucket, or says how many seconds until one is free. The
    /// shared bucket where there is one; this process's if the database does not answer (a
    /// rate limit is no reason to refuse reads while it is away).
    pub async fn take_request(&self, key: &str) -> Result<(), ApiError> {
        let (per_min, burst) = (self.settings.rate_per_min, self.settings.rate_burst);
        self.take_from(Holder::Key, key, per_min, burst).await
    }

    /// Takes one request from the bucket of the workspace `workspace`, which every key using it
    /// draws on (`WRIT_WORKSPACE_RATE_LIMIT_PER_MIN`; nothing when it is 0).
    pub async fn take_workspace_request(&self, workspace: &str) -> Result<(), ApiError> {
        let (per_min, burst) = (
            self.settings.workspace_rate_per_min,
            self.settings.workspace_rate_burst,
        );
        let bucket = workspace_caller(workspace);
        self.take_from(Holder::Workspace(workspace), &bucket, per_min, burst)
            .await
    }

    async fn take_from(
        &self,
        holder: Holder<'_>,
        key: &str,
        per_min: u32,
        burst_of: u32,
    ) -> Result<(), ApiError> {
        if per_min == 0 {
            return Ok(());
        }
        let per_sec = f64::from(per_min) / 60.0;
        let burst = f64::from(burst_of);
        if let Some((store, _)) = &self.shared {
            match store.take_token(key, per_sec, burst).await {
                Ok(None) => return Ok(()),
                Ok(Some(wait)) => {
                    let wait = wait.ceil().max(1.0) as u64;
                    return Err(rate_limited(holder, per_min, burst_of, wait));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "shared rate limit unavailable; this replica's bucket is used")
                }
            }
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_sec).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - bucket.tokens) / per_sec).ceil().max(1.0) as u64;
        Err(rate_limited(holder, per_min, burst_of, wait))
    }

    /// Admits one batch for `caller` (the key id; `None` without auth) in `workspace`, or
    /// refuses it at once: 429 when the key, or the workspace, has its share running (on every
    /// replica, where they share limits), 503 when the process is full.
    /// `batch` is the batch's job's id: the key's shared slot is named by it, and the workspace's
    /// (a row of its own) records it, so that both follow the job to a replica that resumes it.
    pub async fn admit_batch(
        &self,
        caller: Option<&str>,
        workspace: &str,
        batch: uuid::Uuid,
    ) -> Result<BatchPermit, ApiError> {
        let workspace_max = self.settings.max_batches_per_workspace;
        let local = if self.shared.is_some() {
            self.admit_here(None, None)?
        } else {
            self.admit_here(caller, (workspace_max > 0).then_some(workspace))?
        };
        let mut shared = Vec::new();
        if let Some((store, holder)) = &self.shared {
            if let Some(id) = caller {
                shared.push(
                    take_shared(
                        store,
                        id,
                        (batch, batch),
                        holder,
                        self.settings.max_batches_per_key,
                    )
                    .await?
                    .ok_or_else(|| {
                        too_many_batches(Holder::Key, self.settings.max_batches_per_key)
                    })?,
                );
            }
            if workspace_max > 0 {
                let name = workspace_caller(workspace);
                let slot = uuid::Uuid::now_v7();
                shared.push(
                    take_shared(store, &name, (slot, batch), holder, workspace_max)
                        .await?
                        .ok_or_else(|| {
                            too_many_batches(Holder::Workspace(workspace), workspace_max)
                        })?,
                );
            }
        }
        Ok(BatchPermit {
            _shared: shared,
            ..local
        })
    }

    /// This process's part of [`Self::admit_batch`]: the key's and the workspace's slots when
    /// they are counted here, and the process's capacity.
    fn admit_here(
        &self,
        caller: Option<&str>,
        workspace: Option<&str>,
    ) -> Result<BatchPermit, ApiError> {
        let key = match caller {
            Some(id) => {
                Some(self.count_here(id, self.settings.max_batches_per_key, Holder::Key)?)
            }
            None => None,
        };
        // Built before the next checks, so its Drop gives the per-key slot back on refusal.
        let key = KeySlot(key);
        let in_workspace = match workspace {
            Some(name) => Some(self.count_here(
                &workspace_caller(name),
                self.settings.max_batches_per_workspace,
                Holder::Workspace(name),
            )?),
            None => None,
        };
        let slot = (key, KeySlot(in_workspace));
        let Ok(global) = self.in_flight.clone().try_acquire_owned() else {
            let mut e = ApiError::new(
                ErrorCode::Busy,
                format!(
                    "writ is running its maximum of {} batches (WRIT_MAX_BATCHES_IN_FLIGHT); retry shortly",
                    self.settings.max_batches_in_flight
                ),
            );
            e.retry_after_secs = Some(BUSY_RETRY_SECS);
            return Err(e);
        };
        Ok(BatchPermit {
            _global: global,
            _key: slot,
            _shared: Vec::new(),
        })
    }

    /// Counts one more batch of `name` in this process, unless it has `max` running.
    fn count_here(
        &self,
        name: &str,
        max: usize,
        holder: Holder<'_>,
    ) -> Result<(String, Counts), ApiError> {
        let mut counts = self.per_key.lock().unwrap_or_else(PoisonError::into_inner);
        let n = counts.entry(name.to_string()).or_insert(0);
        if *n >= max {
            return Err(too_many_batches(holder, max));
        }
        *n += 1;
        Ok((name.to_string(), self.per_key.clone()))
    }

    /// Waits until every admitted batch has finished, at most `grace`; whether they all did.
    pub async fn drain(&self, grace: Duration) -> bool {
        let all = self.settings.max_batches_in_flight as u32;
        tokio::time::timeout(grace, self.in_flight.acquire_many(all))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Batches running now.
    pub fn batches_in_flight(&self) -> usize {
        self.settings.max_batches_in_flight - self.in_flight.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn settings(per_min: u32, burst: u32, per_key: usize, global: usize) -> GuardSettings {
        let mut s = GuardSettings::load(&|_| None).unwrap();
        s.rate_per_min = per_min;
        s.rate_burst = burst;
        s.max_batches_per_key = per_key;
        s.max_batches_in_flight = global;
        s
    }

    #[tokio::test]
    async fn a_key_past_its_burst_is_refused_with_retry_after_and_other_keys_are_not() {
        let limits = Limits::new(settings(60, 2, 4, 4));
        limits.take_request("a").await.unwrap();
        limits.take_request("a").await.unwrap();
        let e = limits.take_request("a").await.unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after_secs, Some(1));
        limits.take_request("b").await.unwrap();
    }

    #[tokio::test]
    async fn per_key_and_global_batch_slots_are_given_back_when_a_batch_ends_or_is_refused() {
        let limits = Limits::new(settings(0, 1, 1, 2));
        let a = limits
            .admit_batch(Some("a"), "default", uuid::Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(
            limits
                .admit_batch(Some("a"), "default", uuid::Uuid::now_v7())
                .await
                .err()
                .unwrap()
                .status,
            StatusCode::TOO_MANY_REQUESTS
        );
        let anon = limits
            .admit_batch(None, "default", uuid::Uuid::now_v7())
            .await
            .unwrap();
        let refused = limits
            .admit_batch(Some("b"), "default", uuid::Uuid::now_v7())
            .await
            .err()
            .unwrap();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.retry_after_secs, Some(BUSY_RETRY_SECS));
        drop(anon);
        // b's refused attempt did not leak its per-key slot.
        let b = limits
            .admit_batch(Some("b"), "default", uuid::Uuid::now_v7())
            .await
            .unwrap();
        drop(a);
        drop(b);
        assert_eq!(limits.batches_in_flight(), 0);
        limits
            .admit_batch(Some("a"), "default", uuid::Uuid::now_v7())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn keys_in_one_workspace_share_its_limits_and_another_workspace_is_unaffected() {
        let mut s = settings(0, 1, 4, 8);
        s.workspace_rate_per_min = 60;
        s.workspace_rate_burst = 2;
        s.max_batches_per_workspace = 1;
        let limits = Limits::new(s);
        limits.take_workspace_request("team").await.unwrap();
        limits.take_workspace_request("team").await.unwrap();
        let e = limits.take_workspace_request("team").await.unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(e.message.contains("workspace 'team'"), "{}", e.message);
        assert!(e.message.contains("WRIT_WORKSPACE_RATE_LIMIT_PER_MIN"));
        limits.take_workspace_request("other").await.unwrap();
        // The keys' own buckets are untouched (their rate is off here).
        limits.take_request("a").await.unwrap();

        let a = limits
            .admit_batch(Some("a"), "team", uuid::Uuid::now_v7())
            .await
            .unwrap();
        let refused = limits
            .admit_batch(Some("b"), "team", uuid::Uuid::now_v7())
            .await
            .err()
            .unwrap();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused.message.contains("WRIT_MAX_BATCHES_PER_WORKSPACE"),
            "{}",
            refused.message
        );
        let b_elsewhere = limits
            .admit_batch(Some("b"), "other", uuid::Uuid::now_v7())
            .await
            .unwrap();
        // b's refusal in `team` gave its key slot back: b may run its other three of four.
        let mut held = Vec::new();
        for workspace in ["w1", "w2", "w3"] {
            held.push(
                limits
                    .admit_batch(Some("b"), workspace, uuid::Uuid::now_v7())
                    .await
                    .unwrap(),
            );
        }
        drop(a);
        drop(b_elsewhere);
        limits
            .admit_batch(Some("c"), "team", uuid::Uuid::now_v7())
            .await
            .unwrap();
    }
}
