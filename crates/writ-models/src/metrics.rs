//! The model layer's telemetry, through the `metrics` facade (the server installs the
//! Prometheus recorder; without one these are no-ops).
//!
//! This answers what operators ask: which models succeed, how often we
//! retry, how slow they are, and what they cost.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use writ_core::model::{ErrorClass, Usage};

pub const CALLS: &str = "writ_model_calls_total";
pub const ATTEMPT_FAILURES: &str = "writ_model_attempt_failures_total";
pub const RETRIES: &str = "writ_model_retries_total";
pub const LATENCY: &str = "writ_model_latency_seconds";
pub const TTFT: &str = "writ_model_ttft_seconds";
pub const TOKENS: &str = "writ_model_tokens_total";
pub const COST: &str = "writ_model_cost_total";
pub const BREAKER_OPEN: &str = "writ_model_breaker_open";

/// Registers help texts and units; call once after installing a recorder.
pub fn describe() {
    describe_counter!(
        CALLS,
        "Model calls by final outcome (`ok` or the error class)."
    );
    describe_counter!(
        ATTEMPT_FAILURES,
        "Failed attempts by error class, retried or not."
    );
    describe_counter!(RETRIES, "Attempts made after a retryable failure.");
    describe_histogram!(
        LATENCY,
        Unit::Seconds,
        "Wall time of a model call, retries included."
    );
    describe_histogram!(
        TTFT,
        Unit::Seconds,
        "Time to the first streamed token of a successful attempt."
    );
    describe_counter!(
        TOKENS,
        "Tokens reported by the provider, by kind (prompt, completion)."
    );
    // A gauge because `metrics` counters are integers and cost is fractional; it only grows.
    describe_gauge!(
        COST,
        "Provider-reported cost in credits (OpenRouter: USD); only grows."
    );
    describe_gauge!(
        BREAKER_OPEN,
        "1 while the model's circuit breaker is open or probing."
    );
}

/// The end of a call, `Ok(usage, ttft)` or the class it failed with.
pub(crate) fn call(
    model: &str,
    outcome: Result<(&Usage, Option<Duration>), ErrorClass>,
    latency: Duration,
) {
    let label = match outcome {
        Ok(_) => "ok",
        Err(class) => class.as_str(),
    };
    counter!(CALLS, "model" => model.to_owned(), "outcome" => label).increment(1);
    histogram!(LATENCY, "model" => model.to_owned(), "outcome" => label)
        .record(latency.as_secs_f64());
    if let Ok((usage, ttft)) = outcome {
        if let Some(ttft) = ttft {
            histogram!(TTFT, "model" => model.to_owned()).record(ttft.as_secs_f64());
        }
        if let Some(n) = usage.prompt_tokens {
            counter!(TOKENS, "model" => model.to_owned(), "kind" => "prompt").increment(n);
        }
        if let Some(n) = usage.completion_tokens {
            counter!(TOKENS, "model" => model.to_owned(), "kind" => "completion").increment(n);
        }
        if let Some(cost) = usage.cost.filter(|c| c.is_finite() && *c > 0.0) {
            gauge!(COST, "model" => model.to_owned()).increment(cost);
        }
    }
}

pub(crate) fn attempt_failed(model: &str, class: ErrorClass) {
    counter!(ATTEMPT_FAILURES, "model" => model.to_owned(), "class" => class.as_str()).increment(1);
}

pub(crate) fn retry(model: &str) {
    counter!(RETRIES, "model" => model.to_owned()).increment(1);
}

pub(crate) fn breaker_open(model: &str, open: bool) {
    gauge!(BREAKER_OPEN, "model" => model.to_owned()).set(if open { 1.0 } else { 0.0 });
}
