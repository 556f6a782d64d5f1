//! What writ refuses so it cannot be overloaded: the in-process counters that enforce the access
//! and limit settings ([`crate::config::GuardSettings`]: per-key rate and concurrency, batches in
//! flight).
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
use writ_core::limits::LimitStore;

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
    _key: KeySlot,
    _shared: Option<SharedSlot>,
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

fn too_many_batches(max: usize) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::TooManyBatches,
        format!(
            "this API key already has {max} batches running (WRIT_MAX_BATCHES_PER_KEY); retry when one finishes"
        ),
    );
    e.retry_after_secs = Some(BUSY_RETRY_SECS);
    e
}

fn rate_limited(per_min: u32, burst: u32, wait: u64) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::RateLimited,
        format!(
            "this API key made more than {per_min} requests per minute (burst {burst}, WRIT_RATE_LIMIT_PER_MIN); retry after {wait} s"
        ),
    );
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
        let per_min = self.settings.rate_per_min;
        if per_min == 0 {
            return Ok(());
        }
        let per_sec = f64::from(per_min) / 60.0;
        let burst = f64::from(self.settings.rate_burst);
        if let Some((store, _)) = &self.shared {
            match store.take_token(key, per_sec, burst).await {
                Ok(None) => return Ok(()),
                Ok(Some(wait)) => {
                    let wait = wait.ceil().max(1.0) as u64;
                    return Err(rate_limited(per_min, self.settings.rate_burst, wait));
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
        Err(rate_limited(per_min, self.settings.rate_burst, wait))
    }

    /// Admits one batch for `caller` (the key id; `None` without auth), or refuses it at once:
    /// 429 when the key has its share running (on every replica, where they share limits), 503
    /// when the process is full.
    /// `batch` names the shared slot: it is the batch's job's id, so that the slot follows the
    /// job to a replica that resumes it.
    pub async fn admit_batch(
        &self,
        caller: Option<&str>,
        batch: uuid::Uuid,
    ) -> Result<BatchPermit, ApiError> {
        let local = self.admit_here(if self.shared.is_some() { None } else { caller })?;
        let shared = match (&self.shared, caller) {
            (Some((store, holder)), Some(id)) => {
                let slot = batch;
                let max = i64::try_from(self.settings.max_batches_per_key).unwrap_or(i64::MAX);
                let taken = store
                    .take_batch_slot(id, slot, holder, max, slot_until())
                    .await
                    .map_err(crate::error::store_error)?;
                if !taken {
                    return Err(too_many_batches(self.settings.max_batches_per_key));
                }
                Some(SharedSlot {
                    id: slot,
                    store: store.clone(),
                })
            }
            _ => None,
        };
        Ok(BatchPermit {
            _shared: shared,
            ..local
        })
    }

    /// This process's part of [`Self::admit_batch`]: the key's slots when they are counted here,
    /// and the process's capacity.
    fn admit_here(&self, caller: Option<&str>) -> Result<BatchPermit, ApiError> {
        let key = match caller {
            Some(id) => {
                let mut counts = self.per_key.lock().unwrap_or_else(PoisonError::into_inner);
                let n = counts.entry(id.to_string()).or_insert(0);
                if *n >= self.settings.max_batches_per_key {
                    return Err(too_many_batches(self.settings.max_batches_per_key));
                }
                *n += 1;
                Some((id.to_string(), self.per_key.clone()))
            }
            None => None,
        };
        // Built before the global check, so its Drop gives the per-key slot back on refusal.
        let slot = KeySlot(key);
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
            _shared: None,
        })
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
            .admit_batch(Some("a"), uuid::Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(
            limits
                .admit_batch(Some("a"), uuid::Uuid::now_v7())
                .await
                .err()
                .unwrap()
                .status,
            StatusCode::TOO_MANY_REQUESTS
        );
        let anon = limits
            .admit_batch(None, uuid::Uuid::now_v7())
            .await
            .unwrap();
        let refused = limits
            .admit_batch(Some("b"), uuid::Uuid::now_v7())
            .await
            .err()
            .unwrap();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.retry_after_secs, Some(BUSY_RETRY_SECS));
        drop(anon);
        // b's refused attempt did not leak its per-key slot.
        let b = limits
            .admit_batch(Some("b"), uuid::Uuid::now_v7())
            .await
            .unwrap();
        drop(a);
        drop(b);
        assert_eq!(limits.batches_in_flight(), 0);
        limits
            .admit_batch(Some("a"), uuid::Uuid::now_v7())
            .await
            .unwrap();
    }
}
