//! Percentiles and summaries of latency samples, as the tables print them.

use std::time::Duration;

/// The `q` quantile (0–1) of `sorted` by the nearest-rank method; `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// p50, p90, p99 and the count of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Summary {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let at = |q| percentile(&sorted, q).unwrap_or(f64::NAN);
        Summary {
            n: sorted.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: sorted.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Milliseconds with a precision that suits the magnitude.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        "–".to_string()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_pick_real_samples() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!(
            (s.p50, s.p90, s.p99, s.max, s.n),
            (50.0, 90.0, 99.0, 100.0, 100)
        );
    }

    #[test]
    fn a_single_sample_is_every_percentile_and_nothing_is_nan() {
        let s = Summary::of(&[7.0]);
        assert_eq!((s.p50, s.p99), (7.0, 7.0));
        assert!(Summary::of(&[]).p50.is_nan());
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn unsorted_input_and_non_finite_samples_are_handled() {
        let s = Summary::of(&[3.0, f64::NAN, 1.0, 2.0]);
        assert_eq!((s.n, s.p50, s.max), (3, 2.0, 3.0));
    }
}
