//! Adaptive routing's settings (`WRIT_ROUTING`, `WRIT_ROUTING_*`): whether batches that leave
//! the choice of models to the server are routed, and how routing decides.

use writ_core::synthesis::routing::{Routing, RoutingPolicy};

use super::ConfigError;
use super::source::{Get, parse_positive};

pub(super) fn load(get: &Get<'_>) -> Result<RoutingPolicy, ConfigError> {
    let defaults = RoutingPolicy::default();
    let mode = match get("WRIT_ROUTING") {
        None => defaults.mode,
        Some(v) => Routing::parse(&v).ok_or_else(|| ConfigError::Invalid {
            name: "WRIT_ROUTING",
            message: format!("must be off or adaptive, got '{v}'"),
        })?,
    };
    Ok(RoutingPolicy {
        mode,
        target: share(get, "WRIT_ROUTING_TARGET", defaults.target, false)?,
        explore: share(get, "WRIT_ROUTING_EXPLORE", defaults.explore, true)?,
        min_evidence: parse_positive(
            get,
            "WRIT_ROUTING_MIN_EVIDENCE",
            defaults.min_evidence as usize,
        )?
        .min(10_000) as u32,
        window: parse_positive(get, "WRIT_ROUTING_WINDOW", defaults.window)?.min(10_000),
    })
}

/// A share between 0 and 1 (0 itself only when `zero_ok`).
fn share(
    get: &Get<'_>,
    name: &'static str,
    default: f64,
    zero_ok: bool,
) -> Result<f64, ConfigError> {
    let Some(v) = get(name) else {
        return Ok(default);
    };
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x <= 1.0 && (x > 0.0 || (zero_ok && x == 0.0)) => Ok(x),
        _ => Err(ConfigError::Invalid {
            name,
            message: format!(
                "must be a number {} 0 and at most 1, got '{v}'",
                if zero_ok { "of at least" } else { "above" }
            ),
        }),
    }
}
