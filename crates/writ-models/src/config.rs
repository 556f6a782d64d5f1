//! How the client behaves: endpoint, key, attribution, retries, timeouts, limits, breaker.
//!
//! The defaults are for production against OpenRouter; tests scale the durations down.

use std::time::Duration;

use secrecy::SecretString;

/// OpenRouter's OpenAI-compatible API root.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";

/// Everything [`OpenRouterClient`](crate::OpenRouterClient) needs. `Debug` is safe to log:
/// the key is a [`SecretString`], which prints as `[REDACTED]`.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// API root; `/chat/completions` is appended. Any OpenAI-compatible server works
    /// (llama.cpp, vLLM, Ollama, a proxy).
    pub base_url: String,
    /// Sent as `Authorization: Bearer`; local servers often need none.
    pub api_key: Option<SecretString>,
    /// OpenRouter attribution: `HTTP-Referer` (the app's URL) and `X-Title` (its name).
    pub referer: Option<String>,
    pub title: Option<String>,
    /// More headers for every request (`[[models]]`'s `headers`: an organisation, a project,
    /// a gateway's routing tag).
    pub extra_headers: ExtraHeaders,
    /// The name `/readyz` shows for this provider.
    pub provider_name: String,
    pub retry: RetryPolicy,
    /// Bound on one attempt, from sending the request to the last byte of the answer.
    pub call_timeout: Duration,
    /// Streaming only: bound on the wait for the first byte of the answer (keep-alive
    /// comments count, since they prove the provider is alive).
    pub first_byte_timeout: Duration,
    /// Streaming only: bound on the silence between two pieces of the answer.
    pub idle_timeout: Duration,
    /// Ask for SSE streaming: gives time-to-first-token and lets the idle timeout catch a
    /// provider that stalls halfway, long before `call_timeout`.
    pub stream: bool,
    /// Upstream requests in flight at once, per model and in total.
    pub max_concurrent_per_model: usize,
    pub max_concurrent_total: usize,
    pub breaker: BreakerPolicy,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            base_url: OPENROUTER_BASE_URL.to_owned(),
            api_key: None,
            referer: None,
            title: Some("writ".to_owned()),
            extra_headers: ExtraHeaders::default(),
            provider_name: "openrouter".to_owned(),
            retry: RetryPolicy::default(),
            call_timeout: Duration::from_secs(90),
            first_byte_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            stream: true,
            max_concurrent_per_model: 16,
            max_concurrent_total: 64,
            breaker: BreakerPolicy::default(),
        }
    }
}

/// Header names and values; `Debug` shows the names only, since a value may be a credential a
/// gateway wants besides the key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExtraHeaders(pub Vec<(String, String)>);

impl std::fmt::Debug for ExtraHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// Retries: exponential backoff with full jitter, `Retry-After` honoured, all inside a total
/// deadline per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per call, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Cap of the first wait; each later cap doubles, up to `max_backoff`. The actual wait is
    /// drawn uniformly below the cap ("full jitter").
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Bound on the whole call: attempts, waits and queueing for a concurrency slot.
    pub total_deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            total_deadline: Duration::from_secs(120),
        }
    }
}

/// Per-model circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive failed attempts (retryable classes) that open the breaker; 0 disables it.
    pub failure_threshold: u32,
    /// How long an open breaker fails calls fast before letting one probe through.
    pub cool_down: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cool_down: Duration::from_secs(30),
        }
    }
}
