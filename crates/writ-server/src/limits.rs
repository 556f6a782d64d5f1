//! What writ refuses so it cannot be overloaded: the in-process counters that enforce the access
//! and limit settings ([`crate::config::GuardSettings`]: per-key rate and concurrency, batches in
//! flight).
//!
//! Every limit answers at once with a 429 or 503 and `Retry-After`; nothing queues unboundedly.
//! The counters live in this process: with several replicas each enforces its own share.
//! A small token bucket rather than `tower_governor`: the limits are keyed by the API key the
//! auth layer found (not by IP), the per-key batch count is not a rate at all, and the answer
//! must be writ's JSON error body; a governor layer would cover only the first and still need a
//! custom key extractor and error handler.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
}

type Counts = Arc<Mutex<HashMap<String, usize>>>;

/// Held while a batch runs (moved into its task, so a caller hanging up does not free it early).
pub struct BatchPermit {
    _global: OwnedSemaphorePermit,
    _key: KeySlot,
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
        }
    }

    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// Takes one request from `key`'s bucket, or says how many seconds until one is free.
    pub fn take_request(&self, key: &str) -> Result<(), ApiError> {
        let per_min = self.settings.rate_per_min;
        if per_min == 0 {
            return Ok(());
        }
        let per_sec = f64::from(per_min) / 60.0;
        let burst = f64::from(self.settings.rate_burst);
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
        let mut e = ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "this API key made more than {per_min} requests per minute (burst {}, WRIT_RATE_LIMIT_PER_MIN); retry after {wait} s",
                self.settings.rate_burst
            ),
        );
        e.retry_after_secs = Some(wait);
        Err(e)
    }

    /// Admits one batch for `caller` (the key id; `None` without auth), or refuses it at once:
    /// 429 when the key has its share running, 503 when the process is full.
    pub fn admit_batch(&self, caller: Option<&str>) -> Result<BatchPermit, ApiError> {
        let key = match caller {
            Some(id) => {
                let mut counts = self.per_key.lock().unwrap_or_else(PoisonError::into_inner);
                let n = counts.entry(id.to_string()).or_insert(0);
                if *n >= self.settings.max_batches_per_key {
                    let mut e = ApiError::new(
                        ErrorCode::TooManyBatches,
                        format!(
                            "this API key already has {} batches running (WRIT_MAX_BATCHES_PER_KEY); retry when one finishes",
                            self.settings.max_batches_per_key
                        ),
                    );
                    e.retry_after_secs = Some(BUSY_RETRY_SECS);
                    return Err(e);
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

    #[test]
    fn a_key_past_its_burst_is_refused_with_retry_after_and_other_keys_are_not() {
        let limits = Limits::new(settings(60, 2, 4, 4));
        limits.take_request("a").unwrap();
        limits.take_request("a").unwrap();
        let e = limits.take_request("a").unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after_secs, Some(1));
        limits.take_request("b").unwrap();
    }

    #[test]
    fn per_key_and_global_batch_slots_are_given_back_when_a_batch_ends_or_is_refused() {
        let limits = Limits::new(settings(0, 1, 1, 2));
        let a = limits.admit_batch(Some("a")).unwrap();
        assert_eq!(
            limits.admit_batch(Some("a")).err().unwrap().status,
            StatusCode::TOO_MANY_REQUESTS
        );
        let anon = limits.admit_batch(None).unwrap();
        let refused = limits.admit_batch(Some("b")).err().unwrap();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.retry_after_secs, Some(BUSY_RETRY_SECS));
        drop(anon);
        // b's refused attempt did not leak its per-key slot.
        let b = limits.admit_batch(Some("b")).unwrap();
        drop(a);
        drop(b);
        assert_eq!(limits.batches_in_flight(), 0);
        limits.admit_batch(Some("a")).unwrap();
    }
}
