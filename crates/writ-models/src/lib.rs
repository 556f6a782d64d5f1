//! writ's model layer: [`OpenRouterClient`], the [`writ_core::ModelClient`] that talks to
//! OpenRouter (or any OpenAI-compatible chat-completions endpoint) and survives what real
//! providers do.
//!
//! - [`config`]: [`ClientConfig`] and its retry and breaker policies, with production defaults.
//! - `client`: a call as attempts — breaker, limits, retries, deadline, readiness.
//! - `transport`: one HTTP exchange under the call, first-byte and idle timeouts.
//! - `wire`: the OpenAI-compatible request and response shapes, streamed or not.
//! - `sse`: the Server-Sent Events parser (keep-alive comments are not data).
//! - `classify`: HTTP statuses, errors inside 200s and transport failures → `ErrorClass`
//!   (the table is in that module's docs).
//! - `retry`: full-jitter exponential backoff (backon), `Retry-After`, the deadline.
//! - `breaker`: the per-model circuit breaker.
//! - `limits`: per-model and global concurrency.
//! - [`metrics`]: what the layer reports through the `metrics` facade.
//! - `redact`: keeps the API key out of messages and logs.

mod breaker;
mod classify;
mod client;
mod concurrency;
pub mod config;
pub mod metrics;
mod redact;
mod retry;
mod sse;
mod transport;
mod wire;

pub use client::{ClientBuildError, OpenRouterClient};
pub use config::{BreakerPolicy, ClientConfig, ExtraHeaders, OPENROUTER_BASE_URL, RetryPolicy};
