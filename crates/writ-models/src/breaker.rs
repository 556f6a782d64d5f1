//! A circuit breaker per model: after consecutive failed attempts the model is skipped fast
//! for a cool-down, then one probe call decides whether it is back.
//!
//! Only retryable classes count as failures: they say the model is unwell. A permanent error
//! (400, 401, 404, ...) is an answer from a healthy upstream about the request or the account,
//! so it counts as a success here; readiness and the fallback pipeline deal with those.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;
use writ_core::model::ErrorClass;

use crate::classify::AttemptError;
use crate::config::BreakerPolicy;
use crate::metrics;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
        failures: u32,
    },
    /// One probe is in flight; everyone else is still turned away.
    HalfOpen,
}

#[derive(Debug)]
pub(crate) struct Breakers {
    policy: BreakerPolicy,
    models: Mutex<HashMap<String, State>>,
}

/// Permission for one attempt. Settle it with [`Admission::record`]; if it is dropped
/// unsettled (the call was cancelled), a probe gives its place to the next caller.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    breakers: &'a Breakers,
    model: &'a str,
    probe: bool,
    settled: bool,
}

impl Breakers {
    pub fn new(policy: BreakerPolicy) -> Self {
        Self {
            policy,
            models: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, State>> {
        self.models.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets an attempt at `model` through, or fails it fast with [`ErrorClass::CircuitOpen`].
    pub fn admit<'a>(&'a self, model: &'a str) -> Result<Admission<'a>, AttemptError> {
        let mut models = self.lock();
        let state = models
            .entry(model.to_owned())
            .or_insert(State::Closed { failures: 0 });
        let probe = match *state {
            State::Closed { .. } => false,
            State::Open { until, failures } => {
                let now = Instant::now();
                if now < until {
                    let wait = until - now;
                    return Err(AttemptError::new(
                        ErrorClass::CircuitOpen,
                        format!(
                            "circuit open after {failures} consecutive failures; next probe in {:.1} s",
                            wait.as_secs_f64()
                        ),
                    ));
                }
                *state = State::HalfOpen;
                tracing::info!(model, "circuit half-open: probing");
                true
            }
            State::HalfOpen => {
                return Err(AttemptError::new(
                    ErrorClass::CircuitOpen,
                    "circuit half-open: a probe call is in flight, others are skipped until it answers",
                ));
            }
        };
        Ok(Admission {
            breakers: self,
            model,
            probe,
            settled: false,
        })
    }
}

/// Whether an attempt that ended with `class` says the model is unwell.
pub(crate) fn counts_as_failure(class: ErrorClass) -> bool {
    class.is_retryable()
}

impl Admission<'_> {
    /// Settles the attempt: `Ok` on success, else the class it failed with.
    pub fn record(mut self, outcome: Result<(), ErrorClass>) {
        self.settled = true;
        let policy = self.breakers.policy;
        let mut models = self.breakers.lock();
        let state = models
            .entry(self.model.to_owned())
            .or_insert(State::Closed { failures: 0 });
        let failed = matches!(outcome, Err(class) if counts_as_failure(class));
        let next = match (*state, failed) {
            (_, false) => State::Closed { failures: 0 },
            (State::Closed { failures }, true) => {
                let failures = failures.saturating_add(1);
                if policy.failure_threshold > 0 && failures >= policy.failure_threshold {
                    State::Open {
                        until: Instant::now() + policy.cool_down,
                        failures,
                    }
                } else {
                    State::Closed { failures }
                }
            }
            // A failed probe (or a straggler from before the breaker opened) re-opens it.
            (State::HalfOpen | State::Open { .. }, true) => {
                let failures = match *state {
                    State::Open { failures, .. } => failures.saturating_add(1),
                    _ => policy.failure_threshold,
                };
                State::Open {
                    until: Instant::now() + policy.cool_down,
                    failures,
                }
            }
        };
        let was_open = !matches!(*state, State::Closed { .. });
        let is_open = !matches!(next, State::Closed { .. });
        *state = next;
        drop(models);
        if was_open != is_open || (self.probe && is_open) {
            if is_open {
                tracing::warn!(
                    model = self.model,
                    cool_down_ms = policy.cool_down.as_millis() as u64,
                    "circuit open"
                );
            } else {
                tracing::info!(model = self.model, "circuit closed");
            }
            metrics::breaker_open(self.model, is_open);
        }
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.settled || !self.probe {
            return;
        }
        // A cancelled probe proved nothing: let the next call probe at once.
        let mut models = self.breakers.lock();
        if let Some(state) = models.get_mut(self.model)
            && *state == State::HalfOpen
        {
            *state = State::Open {
                until: Instant::now(),
                failures: self.breakers.policy.failure_threshold,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Long, because the tests run on paused time: nothing waits for it, and a test that
    /// reached the clock by accident would hang rather than pass.
    const COOL_DOWN: Duration = Duration::from_secs(30);

    fn breakers(threshold: u32) -> Breakers {
        Breakers::new(BreakerPolicy {
            failure_threshold: threshold,
            cool_down: COOL_DOWN,
        })
    }

    async fn after_cool_down() {
        tokio::time::advance(COOL_DOWN + Duration::from_millis(1)).await;
    }

    fn fail(b: &Breakers, model: &str) {
        b.admit(model)
            .map(|a| a.record(Err(ErrorClass::ServerError)))
            .ok();
    }

    #[tokio::test(start_paused = true)]
    async fn it_opens_at_the_threshold_and_lets_one_probe_through_after_the_cool_down() {
        let b = breakers(2);
        fail(&b, "m");
        assert!(b.admit("m").is_ok(), "one failure is below the threshold");
        fail(&b, "m");
        let err = b.admit("m").unwrap_err();
        assert_eq!(err.class, ErrorClass::CircuitOpen);
        assert!(
            err.message.contains("2 consecutive failures"),
            "{}",
            err.message
        );
        assert!(b.admit("other").is_ok(), "breakers are per model");

        after_cool_down().await;
        let probe = b.admit("m").unwrap();
        assert_eq!(
            b.admit("m").unwrap_err().class,
            ErrorClass::CircuitOpen,
            "only one probe at a time"
        );
        probe.record(Ok(()));
        assert!(b.admit("m").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_for_another_cool_down() {
        let b = breakers(1);
        fail(&b, "m");
        after_cool_down().await;
        fail(&b, "m");
        assert_eq!(b.admit("m").unwrap_err().class, ErrorClass::CircuitOpen);
        after_cool_down().await;
        assert!(b.admit("m").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_probe_lets_the_next_call_probe() {
        let b = breakers(1);
        fail(&b, "m");
        after_cool_down().await;
        drop(b.admit("m").unwrap());
        assert!(b.admit("m").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_and_successes_reset_the_count() {
        let b = breakers(2);
        fail(&b, "m");
        b.admit("m").unwrap().record(Err(ErrorClass::BadRequest));
        fail(&b, "m");
        assert!(b.admit("m").is_ok(), "the 400 broke the run of failures");
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_threshold_disables_the_breaker() {
        let b = breakers(0);
        for _ in 0..10 {
            fail(&b, "m");
        }
        assert!(b.admit("m").is_ok());
    }
}
