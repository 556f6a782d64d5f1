//! [`OpenRouterClient`]: the [`ModelClient`] writ uses for every model call.
//!
//! One call = up to `max_attempts` attempts inside the total deadline. Each attempt asks the
//! model's circuit breaker, takes a per-model and a global concurrency slot, and makes one
//! HTTP exchange ([`crate::transport`]). Failures are classified ([`crate::classify`]);
//! permanent ones end the call at once, retryable ones wait ([`crate::retry`]) and go again.
//! The call runs entirely inside the caller's future: dropping it cancels the HTTP request.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use backon::Retryable;
use bytes::Bytes;
use reqwest::Url;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use secrecy::ExposeSecret;
use tokio::time::{Instant, timeout_at};
use writ_core::model::{
    ChatRequest, ChatResponse, ErrorClass, ModelClient, ModelError, ProviderReadiness,
};

use crate::breaker::Breakers;
use crate::classify::AttemptError;
use crate::concurrency::Limits;
use crate::config::{ClientConfig, RetryPolicy};
use crate::metrics;
use crate::redact::Redactor;
use crate::retry::{FullJitter, GiveUp, next_wait};
use crate::transport::Transport;
use crate::wire::WireRequest;

/// Why a [`ClientConfig`] cannot make a client. Never shows the key.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuildError {
    /// The URL itself is not shown: it may carry credentials.
    #[error("invalid base URL: {0}")]
    InvalidBaseUrl(String),
    #[error("the API key contains characters that cannot go into an HTTP header")]
    InvalidApiKey,
    #[error("the {0} header value contains characters that cannot go into an HTTP header")]
    InvalidHeader(&'static str),
    /// Neither the name nor the value is shown: either may be all the caller knows of a secret.
    #[error("extra header #{0} is not a valid HTTP header name and value")]
    InvalidExtraHeader(usize),
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("could not build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

/// Whether the provider can serve calls, as `/readyz` reports it.
#[derive(Debug, Clone)]
enum Health {
    Ready(&'static str),
    /// Set by a 401/402 (or a missing OpenRouter key); cleared by the next success.
    NotReady(String),
}

/// A [`ModelClient`] for OpenRouter or any OpenAI-compatible chat-completions endpoint.
pub struct OpenRouterClient {
    provider_name: String,
    transport: Transport,
    retry: RetryPolicy,
    limits: Limits,
    breakers: Breakers,
    redactor: Redactor,
    health: Mutex<Health>,
}

impl std::fmt::Debug for OpenRouterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenRouterClient")
            .field("provider_name", &self.provider_name)
            .field("endpoint", &self.transport.endpoint.as_str())
            .field("stream", &self.transport.stream)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl OpenRouterClient {
    pub fn new(cfg: ClientConfig) -> Result<Self, ClientBuildError> {
        for (value, name) in [
            (cfg.retry.max_attempts as usize, "retry.max_attempts"),
            (cfg.max_concurrent_per_model, "max_concurrent_per_model"),
            (cfg.max_concurrent_total, "max_concurrent_total"),
        ] {
            if value == 0 {
                return Err(ClientBuildError::Zero(name));
            }
        }
        let endpoint = endpoint(&cfg.base_url)?;
        let headers = headers(&cfg)?;

        // reqwest is built with `rustls-no-provider` (ring instead of compiling aws-lc); the
        // process needs a default provider before the first client. Another crate may have
        // installed one already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("writ/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(cfg.call_timeout.min(std::time::Duration::from_secs(10)))
            .build()
            .map_err(ClientBuildError::Http)?;

        let health = match (&cfg.api_key, endpoint.host_str()) {
            (None, Some(host)) if host == "openrouter.ai" || host.ends_with(".openrouter.ai") => {
                Health::NotReady(
                    "no API key configured for OpenRouter (set OPENROUTER_API_KEY)".to_owned(),
                )
            }
            _ => Health::Ready("no calls yet"),
        };
        Ok(Self {
            provider_name: cfg.provider_name,
            transport: Transport {
                http,
                endpoint,
                headers,
                stream: cfg.stream,
                call_timeout: cfg.call_timeout,
                first_byte_timeout: cfg.first_byte_timeout,
                idle_timeout: cfg.idle_timeout,
            },
            retry: cfg.retry,
            limits: Limits::new(cfg.max_concurrent_per_model, cfg.max_concurrent_total),
            breakers: Breakers::new(cfg.breaker),
            redactor: Redactor::new(cfg.api_key),
            health: Mutex::new(health),
        })
    }

    fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn call(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let started = Instant::now();
        let deadline = started + self.retry.total_deadline;
        let model = req.model.as_str();
        let urgent = req.urgent;
        let attempts = AtomicU32::new(0);
        let last_error: Mutex<Option<AttemptError>> = Mutex::new(None);
        let deadline_stopped_retries = AtomicBool::new(false);

        let result = match WireRequest::new(&req, self.transport.stream).to_body() {
            Err(e) => Err(AttemptError::new(
                ErrorClass::BadRequest,
                format!("the request cannot be serialized: {e}"),
            )),
            Ok(body) => {
                let body = Bytes::from(body);
                // backon drives the loop; `adjust` is where `Retry-After` and the deadline
                // override the jittered backoff. The whole loop sits under the deadline too, so
                // a slow attempt or a long queue for a slot cannot outlive it.
                let retrying = (|| async {
                    let attempt = attempts.fetch_add(1, Ordering::Relaxed) + 1;
                    let result = self.attempt(model, urgent, body.clone(), attempt).await;
                    if let Err(e) = &result {
                        *last_error.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(e.clone());
                    }
                    result
                })
                .retry(FullJitter::new(&self.retry))
                .when(|e: &AttemptError| e.class.is_retryable())
                .adjust(|e: &AttemptError, backoff| {
                    match next_wait(
                        e.retry_after,
                        backoff,
                        deadline.saturating_duration_since(Instant::now()),
                    ) {
                        Ok(wait) => Some(wait),
                        Err(GiveUp::Deadline) => {
                            deadline_stopped_retries.store(true, Ordering::Relaxed);
                            None
                        }
                        Err(GiveUp::Exhausted) => None,
                    }
                })
                .notify(|e: &AttemptError, wait| {
                    tracing::warn!(
                        attempt = attempts.load(Ordering::Relaxed),
                        class = e.class.as_str(),
                        status = e.status,
                        wait_ms = wait.as_millis() as u64,
                        retry_after_ms = e.retry_after.map(|d| d.as_millis() as u64),
                        message = %e.message,
                        "retrying model call"
                    );
                    metrics::retry(model);
                });
                match timeout_at(deadline, retrying).await {
                    Ok(Ok(response)) => Ok(response),
                    Ok(Err(e)) if deadline_stopped_retries.load(Ordering::Relaxed) => {
                        Err(self.deadline_exceeded(Some(e)))
                    }
                    Ok(Err(e)) => Err(e),
                    Err(_) => {
                        let last = last_error
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .take();
                        Err(self.deadline_exceeded(last))
                    }
                }
            }
        };
        self.finish(
            model,
            result,
            attempts.load(Ordering::Relaxed),
            started.elapsed(),
        )
    }

    /// One attempt: breaker, concurrency slots, one HTTP exchange.
    async fn attempt(
        &self,
        model: &str,
        urgent: bool,
        body: Bytes,
        attempt: u32,
    ) -> Result<ChatResponse, AttemptError> {
        let admission = self.breakers.admit(model).inspect_err(|e| {
            tracing::debug!(attempt, class = e.class.as_str(), message = %e.message, "skipped by the circuit breaker");
        })?;
        let _slots = self.limits.acquire(model, urgent).await;
        tracing::debug!(attempt, "sending");
        let result = self.transport.attempt(body).await.map_err(|mut e| {
            e.message = self.redactor.scrub(e.message);
            e
        });
        admission.record(result.as_ref().map(|_| ()).map_err(|e| e.class));
        if let Err(e) = &result {
            metrics::attempt_failed(model, e.class);
            tracing::debug!(attempt, class = e.class.as_str(), status = e.status, message = %e.message, "attempt failed");
        }
        result
    }

    fn deadline_exceeded(&self, last: Option<AttemptError>) -> AttemptError {
        let budget = self.retry.total_deadline.as_millis();
        match last {
            Some(last) => AttemptError {
                class: ErrorClass::DeadlineExceeded,
                status: last.status,
                message: format!(
                    "total deadline of {budget} ms reached; last error ({}): {}",
                    last.class, last.message
                ),
                retry_after: None,
            },
            None => AttemptError::new(
                ErrorClass::DeadlineExceeded,
                format!("total deadline of {budget} ms reached before the first attempt answered"),
            ),
        }
    }

    /// Metrics, readiness and the final log line of a call.
    fn finish(
        &self,
        model: &str,
        result: Result<ChatResponse, AttemptError>,
        attempts: u32,
        latency: std::time::Duration,
    ) -> Result<ChatResponse, ModelError> {
        match result {
            Ok(mut response) => {
                response.latency = latency;
                response.attempts = attempts;
                *self.health() = Health::Ready("the last call succeeded");
                metrics::call(
                    model,
                    Ok((&response.usage, response.time_to_first_token)),
                    latency,
                );
                tracing::info!(
                    attempts,
                    latency_ms = latency.as_millis() as u64,
                    ttft_ms = response.time_to_first_token.map(|d| d.as_millis() as u64),
                    prompt_tokens = response.usage.prompt_tokens,
                    completion_tokens = response.usage.completion_tokens,
                    cost = response.usage.cost,
                    "model call succeeded"
                );
                Ok(response)
            }
            Err(e) => {
                let status = e.status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
                match e.class {
                    ErrorClass::Unauthorized => {
                        *self.health() = Health::NotReady(format!(
                            "provider rejected the API key{status}: {}",
                            e.message
                        ));
                    }
                    ErrorClass::PaymentRequired => {
                        *self.health() = Health::NotReady(format!(
                            "provider reports insufficient credits{status}: {}",
                            e.message
                        ));
                    }
                    _ => {}
                }
                metrics::call(model, Err(e.class), latency);
                tracing::warn!(
                    attempts,
                    latency_ms = latency.as_millis() as u64,
                    class = e.class.as_str(),
                    status = e.status,
                    message = %e.message,
                    "model call failed"
                );
                Err(ModelError {
                    model: model.to_owned(),
                    class: e.class,
                    status: e.status,
                    message: e.message,
                    attempts,
                    latency,
                })
            }
        }
    }
}

#[async_trait]
impl ModelClient for OpenRouterClient {
    /// The call's span (OpenTelemetry's GenAI `chat`) is the caller's, `writ_local::RoutingClient`:
    /// it is made there for every provider alike, and ends after the call is priced.
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.call(req).await
    }

    fn readiness(&self) -> ProviderReadiness {
        let (ready, detail) = match &*self.health() {
            Health::Ready(detail) => (true, (*detail).to_owned()),
            Health::NotReady(detail) => (false, detail.clone()),
        };
        ProviderReadiness {
            name: self.provider_name.clone(),
            ready,
            detail,
        }
    }
}

fn endpoint(base_url: &str) -> Result<Url, ClientBuildError> {
    let url = Url::parse(&format!(
        "{}/chat/completions",
        base_url.trim_end_matches('/')
    ))
    .map_err(|e| ClientBuildError::InvalidBaseUrl(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ClientBuildError::InvalidBaseUrl(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    Ok(url)
}

fn headers(cfg: &ClientConfig) -> Result<HeaderMap, ClientBuildError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    if let Some(key) = &cfg.api_key {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
            .map_err(|_| ClientBuildError::InvalidApiKey)?;
        // Sensitive values print as `Sensitive` in Debug output, and HTTP/2 never indexes them.
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    for (name, value) in [("HTTP-Referer", &cfg.referer), ("X-Title", &cfg.title)] {
        if let Some(value) = value {
            let value =
                HeaderValue::from_str(value).map_err(|_| ClientBuildError::InvalidHeader(name))?;
            headers.insert(
                HeaderName::from_static(if name == "X-Title" {
                    "x-title"
                } else {
                    "http-referer"
                }),
                value,
            );
        }
    }
    for (i, (name, value)) in cfg.extra_headers.0.iter().enumerate() {
        let invalid = ClientBuildError::InvalidExtraHeader(i + 1);
        let (Ok(name), Ok(mut value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            return Err(invalid);
        };
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}
