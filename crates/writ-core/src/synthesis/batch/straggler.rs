//! The straggler policy (`options.straggler`, `WRIT_STRAGGLER_*`): when a fan-out stops waiting
//! for its slowest candidates, parsed from its three settings. The fan-out applies it.

use std::time::Duration;

/// Longest extra wait a policy may ask for; beyond it the model deadline bounds the call anyway.
pub const MAX_STRAGGLER_EXTRA_MS: u64 = 600_000;
/// Largest multiple of the first viable candidate's latency a policy may wait.
pub const MAX_STRAGGLER_EXTRA_FACTOR: f64 = 100.0;

/// When a fan-out stops waiting for its slowest candidates.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum StragglerPolicy {
    /// Wait for every candidate (the default).
    #[default]
    WaitAll,
    /// Once `enough` viable candidates are in, wait at most `extra` for the rest.
    CutOff { enough: Enough, extra: Extra },
}

/// How many viable candidates are enough to start the extra wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Enough {
    Count(usize),
    /// Every model but one (at least one).
    AllButSlowest,
}

/// How long the rest may still take once enough viable candidates are in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Extra {
    Fixed(Duration),
    /// This multiple of the first viable candidate's latency.
    Relative(f64),
}

/// A refusal of a straggler setting, naming the sub-field (`enough`, `extra_ms`, `extra_factor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub field: &'static str,
    pub message: String,
}

impl StragglerPolicy {
    /// Builds a policy from its three settings as sent (`options.straggler`) or configured
    /// (`WRIT_STRAGGLER_*`). `enough`: `all` (wait for every model), a count of 1–8, or
    /// `all_but_slowest`; then exactly one of `extra_ms` and `extra_factor`.
    pub fn from_parts(
        enough: Option<&str>,
        extra_ms: Option<u64>,
        extra_factor: Option<f64>,
    ) -> Result<Self, PolicyError> {
        let refuse = |field, message: String| PolicyError { field, message };
        let enough = match enough.map(str::trim) {
            None | Some("all") => {
                if extra_ms.is_some() || extra_factor.is_some() {
                    return Err(refuse(
                        "enough",
                        "is required (a count of viable candidates, or \"all_but_slowest\") when an extra wait is given".into(),
                    ));
                }
                return Ok(StragglerPolicy::WaitAll);
            }
            Some("all_but_slowest") => Enough::AllButSlowest,
            Some(other) => match other.parse::<usize>() {
                Ok(n) if (1..=super::MAX_MODELS).contains(&n) => Enough::Count(n),
                _ => {
                    return Err(refuse(
                        "enough",
                        format!(
                            "must be \"all\", \"all_but_slowest\" or a count from 1 to {}, got \"{other}\"",
                            super::MAX_MODELS
                        ),
                    ));
                }
            },
        };
        let extra = match (extra_ms, extra_factor) {
            (Some(_), Some(_)) => {
                return Err(refuse(
                    "extra_factor",
                    "give either extra_ms or extra_factor, not both".into(),
                ));
            }
            (None, None) => {
                return Err(refuse(
                    "extra_ms",
                    "an extra wait is required: extra_ms (absolute) or extra_factor (relative to the first viable candidate)".into(),
                ));
            }
            (Some(ms), None) if ms > MAX_STRAGGLER_EXTRA_MS => {
                return Err(refuse(
                    "extra_ms",
                    format!("at most {MAX_STRAGGLER_EXTRA_MS}, got {ms}"),
                ));
            }
            (Some(ms), None) => Extra::Fixed(Duration::from_millis(ms)),
            (None, Some(f))
                if !(f.is_finite() && (0.0..=MAX_STRAGGLER_EXTRA_FACTOR).contains(&f)) =>
            {
                return Err(refuse(
                    "extra_factor",
                    format!("between 0 and {MAX_STRAGGLER_EXTRA_FACTOR}, got {f}"),
                ));
            }
            (None, Some(f)) => Extra::Relative(f),
        };
        Ok(StragglerPolicy::CutOff { enough, extra })
    }
}
