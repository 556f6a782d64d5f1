//! When to try again: exponential backoff with full jitter, `Retry-After`, and the deadline.
//!
//! The schedule comes from `backon` (maintained; the `backoff` crate named in the design card
//! is unmaintained, RUSTSEC-2025-0012, and pulls in `instant`, RUSTSEC-2024-0384). backon's own
//! jitter only adds up to one extra delay on top of the schedule; we want *full* jitter (a
//! wait drawn uniformly in `[0, cap]`), which spreads a burst of clients that failed together
//! the most, so [`FullJitter`] draws below backon's exponential caps.

use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::config::RetryPolicy;

/// Waits between attempts: the k-th is uniform in `[0, min(max_backoff, initial_backoff·2^k)]`;
/// ends after `max_attempts - 1` waits.
#[derive(Debug)]
pub(crate) struct FullJitter {
    caps: ExponentialBackoff,
}

impl FullJitter {
    pub fn new(policy: &RetryPolicy) -> Self {
        let retries = usize::try_from(policy.max_attempts.saturating_sub(1)).unwrap_or(usize::MAX);
        let caps = ExponentialBuilder::default()
            .with_factor(2.0)
            .with_min_delay(policy.initial_backoff)
            .with_max_delay(policy.max_backoff.max(policy.initial_backoff))
            .with_max_times(retries)
            .build();
        Self { caps }
    }
}

impl Iterator for FullJitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.caps
            .next()
            .map(|cap| cap.mul_f64(rand::random::<f64>()))
    }
}

/// Why a retryable failure is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// `max_attempts` reached.
    Exhausted,
    /// The wait would end past the call's deadline.
    Deadline,
}

/// How long to wait before the next attempt: what the provider asked for (`Retry-After`)
/// if it did, else the backoff; never past the deadline.
pub(crate) fn next_wait(
    retry_after: Option<Duration>,
    backoff: Option<Duration>,
    remaining: Duration,
) -> Result<Duration, GiveUp> {
    let backoff = backoff.ok_or(GiveUp::Exhausted)?;
    let wait = retry_after.unwrap_or(backoff);
    if wait >= remaining {
        return Err(GiveUp::Deadline);
    }
    Ok(wait)
}

/// The provider's `Retry-After` (seconds or an HTTP date), or OpenAI's `retry-after-ms`.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && let Ok(wait) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(wait);
    }
    header(RETRY_AFTER.as_str()).and_then(|v| parse_retry_after(v, SystemTime::now()))
}

/// RFC 9110 `Retry-After`: delay-seconds or an HTTP date (a date in the past means now).
/// Fractional seconds are accepted too, since some proxies send them.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(400),
            total_deadline: Duration::from_secs(10),
        }
    }

    #[test]
    fn full_jitter_stays_under_the_exponential_caps_and_spreads_below_them() {
        let caps = [100, 200, 400, 400, 400];
        let mut sums = [0.0f64; 5];
        const RUNS: usize = 2000;
        for _ in 0..RUNS {
            let waits: Vec<Duration> = FullJitter::new(&policy(6)).collect();
            assert_eq!(waits.len(), 5, "max_attempts - 1 waits");
            for (i, wait) in waits.iter().enumerate() {
                assert!(wait.as_millis() <= caps[i], "wait {i} = {wait:?}");
                sums[i] += wait.as_secs_f64() * 1000.0;
            }
        }
        for (i, sum) in sums.iter().enumerate() {
            let mean = sum / RUNS as f64;
            let half_cap = caps[i] as f64 / 2.0;
            assert!(
                (mean - half_cap).abs() < half_cap * 0.15,
                "mean wait {i} = {mean} ms, expected ≈ {half_cap}"
            );
        }
    }

    #[test]
    fn one_attempt_means_no_wait() {
        assert_eq!(FullJitter::new(&policy(1)).next(), None);
    }

    #[test]
    fn retry_after_wins_over_backoff_but_not_over_the_deadline() {
        let s = Duration::from_secs;
        assert_eq!(next_wait(Some(s(2)), Some(s(1)), s(10)), Ok(s(2)));
        assert_eq!(next_wait(None, Some(s(1)), s(10)), Ok(s(1)));
        assert_eq!(
            next_wait(Some(s(20)), Some(s(1)), s(10)),
            Err(GiveUp::Deadline)
        );
        assert_eq!(next_wait(None, Some(s(1)), s(1)), Err(GiveUp::Deadline));
        assert_eq!(next_wait(Some(s(2)), None, s(10)), Err(GiveUp::Exhausted));
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 0.25 ", now),
            Some(Duration::from_millis(250))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(42));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(42))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(42));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn retry_after_ms_is_read_too() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "retry-after-ms",
            reqwest::header::HeaderValue::from_static("1500"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
    }
}
