//! A programmable fake of OpenRouter's OpenAI-compatible chat-completions API.
//!
//! Every test and benchmark of writ talks to this instead of a real provider. It answers per
//! model from a [`Script`] of [`Step`]s — fixed text, code (bare or wrapped in prose), arbiter
//! verdicts, images, and the ways real providers fail: HTTP errors with `Retry-After`, errors
//! inside a 200, malformed or truncated bodies, SSE streams with keep-alive comments and
//! mid-stream errors, stalls, hangs, heavy-tailed latency, slow trickles; its usage carries
//! OpenRouter's `cost` unless told otherwise ([`FakeUpstream::report_cost`]). It records every call
//! ([`RecordedCall`]) and counts requests in flight, so tests can prove retries, limits and
//! cancellation from the upstream's side.
//!
//! - [`script`]: the data a script is made of (serde, so a JSON file can hold it).
//! - [`answers`]: the text of content steps, and the automatic code answer.
//! - `respond`: a step as HTTP (JSON completion or SSE, in OpenRouter's shapes).
//! - `server`: the routes (`POST /v1/chat/completions`, admin routes under `/_fake/`) and state.
//! - `traces`: an OTLP/HTTP trace receiver (`POST /v1/traces`), for writ's traces.
//!
//! In tests: `let fake = FakeUpstream::start().await?;` then point the client at
//! [`FakeUpstream::base_url`]. For benchmarks, run the `writ-fake-upstream` binary.

pub mod answers;
mod respond;
pub mod script;
mod server;
mod traces;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use script::{Latency, PromptRoute, Script, ScriptFile, Step};
pub use server::RecordedCall;
pub use traces::ReceivedSpan;

use server::Shared;

/// A running fake upstream. Dropping it stops accepting connections.
#[derive(Debug)]
pub struct FakeUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    spans: Arc<traces::Received>,
    stop: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl FakeUpstream {
    /// Starts on a free loopback port, in this process.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts on `addr` (port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new());
        let stop = CancellationToken::new();
        let spans = Arc::new(traces::Received::default());
        let app = server::router(shared.clone()).merge(traces::router(spans.clone()));
        let task = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.clone().cancelled_owned())
                .into_future(),
        );
        Ok(Self {
            addr,
            shared,
            spans,
            stop,
            task: Some(task),
        })
    }

    /// Every span writ exported to this fake as its OTLP endpoint, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.spans()
    }

    /// What writ's `OTEL_EXPORTER_OTLP_ENDPOINT` is set to for its traces to come here (the
    /// exporter adds `/v1/traces`).
    pub fn otlp_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL, e.g. `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Replaces `model`'s script; its steps start from the first.
    pub fn script(&self, model: &str, script: Script) {
        self.shared.script(model, script);
    }

    /// `model`'s calls whose first user message contains `prompt_contains` play `script` (its
    /// steps start from the first) instead of the model's own; see [`PromptRoute`].
    pub fn route(&self, model: &str, prompt_contains: &str, script: Script) {
        self.shared.route(PromptRoute {
            model: model.to_owned(),
            prompt_contains: prompt_contains.to_owned(),
            script,
        });
    }

    /// What models without a script answer (by default: [`Step::Auto`]).
    pub fn set_default(&self, script: Script) {
        self.shared.set_default(script);
    }

    /// Loads every script of a script file.
    pub fn load(&self, file: ScriptFile) {
        for (model, script) in file.models {
            self.shared.script(&model, script);
        }
        for route in file.routes {
            self.shared.route(route);
        }
        if let Some(default) = file.default {
            self.shared.set_default(default);
        }
    }

    /// Whether answers carry `usage.cost`, as OpenRouter's do (the default), or only tokens, as
    /// OpenAI's, vLLM's or Ollama's do.
    pub fn report_cost(&self, report: bool) {
        self.shared
            .report_cost
            .store(report, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every call received so far, in arrival order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.shared.calls()
    }

    pub fn calls_for(&self, model: &str) -> Vec<RecordedCall> {
        self.shared
            .calls()
            .into_iter()
            .filter(|c| c.model == model)
            .collect()
    }

    pub fn clear_calls(&self) {
        self.shared.clear_calls();
    }

    /// Requests being answered right now (including hung ones and open streams).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight()
    }

    pub fn in_flight_for(&self, model: &str) -> usize {
        self.shared.in_flight_for(model)
    }

    /// The most requests ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak_in_flight()
    }

    pub fn peak_in_flight_for(&self, model: &str) -> usize {
        self.shared.peak_in_flight_for(model)
    }

    /// Waits until at least `at_least` requests are in flight at once (for `model`, or in all
    /// when `None`); false if that did not happen `within`. Tests use it to act once calls are
    /// known to be under way, instead of sleeping for long enough.
    pub async fn until_in_flight(
        &self,
        model: Option<&str>,
        at_least: usize,
        within: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let now = match model {
                Some(m) => self.in_flight_for(m),
                None => self.in_flight(),
            };
            if now >= at_least {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the server: in-flight answers get a second to finish, hung ones are cut off.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(1), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }

    /// Serves until `signal` completes, then shuts down (for the binary).
    pub async fn serve_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
