//! Waiting out an outage of the audit store. A batch whose candidates are ready while the store
//! cannot be reached (a managed database failing over, a restart) keeps them and tries its
//! commit again, with backoff, for `WRIT_STORE_OUTAGE_WAIT`: the models' work is not thrown
//! away for a fault that passes in seconds. Past the wait nothing more is written and the batch
//! answers that the store is unavailable (503 with `Retry-After`), so the caller retries with its
//! `Idempotency-Key`. Direct writes, edits and sessions have nothing to keep and answer at once.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

/// The default of `WRIT_STORE_OUTAGE_WAIT`: the length of a typical managed failover.
pub const DEFAULT_STORE_OUTAGE_WAIT: Duration = Duration::from_secs(30);

/// One wait through one outage: the pauses between tries grow (with jitter, so replicas that
/// lost the store together do not come back in step) up to a ceiling, and end at the deadline.
pub(crate) struct OutageWait {
    deadline: Instant,
    pauses: ExponentialBackoff,
    tries: u32,
}

impl OutageWait {
    /// A wait of at most `within`, counted from now (from the first failure).
    pub(crate) fn start(within: Duration) -> Self {
        OutageWait {
            deadline: Instant::now() + within,
            pauses: ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(2))
                .with_jitter()
                .without_max_times()
                .build(),
            tries: 0,
        }
    }

    /// Sleeps before the next try and says whether to make it: `false` once the next try would
    /// start past the deadline (then nothing is slept). `why` is the last failure, for the log.
    pub(crate) async fn pause(&mut self, why: &str) -> bool {
        let pause = self.pauses.next().unwrap_or(Duration::from_secs(2));
        if Instant::now() + pause >= self.deadline {
            tracing::warn!(tries = self.tries + 1, error = %why, "the audit store stayed unavailable for the whole outage wait (WRIT_STORE_OUTAGE_WAIT)");
            return false;
        }
        if self.tries == 0 {
            tracing::warn!(error = %why, "the audit store is unavailable: the batch keeps its results and tries again");
        }
        self.tries += 1;
        metrics::counter!("writ_store_outage_retries_total").increment(1);
        tokio::time::sleep(pause).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_pauses_until_its_deadline_and_then_gives_up() {
        let started = Instant::now();
        let mut wait = OutageWait::start(Duration::from_secs(10));
        let mut tries = 0;
        while wait.pause("down").await {
            tries += 1;
        }
        let waited = started.elapsed();
        assert!(tries >= 5, "only {tries} tries in the wait");
        assert!(waited <= Duration::from_secs(10), "waited {waited:?}");
        // The pause refused at the end is at most the ceiling and its jitter.
        assert!(waited >= Duration::from_secs(6), "gave up after {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_wait_never_tries_again() {
        let mut wait = OutageWait::start(Duration::ZERO);
        assert!(!wait.pause("down").await);
    }
}
