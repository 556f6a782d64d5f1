//! Load over HTTP: open loop (a fixed arrival rate, whatever the answers do) and closed loop (a
//! fixed number of batches in flight), each recording one [`Sample`] per batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One batch as the client saw it.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Send to last byte of the answer.
    pub latency: Duration,
    /// `x-writ-overhead-ms`, writ's own time on the batch.
    pub overhead_ms: Option<f64>,
    /// HTTP 200 with status `success`.
    pub ok: bool,
    /// 503 with `Retry-After`: refused before any work, to be sent again.
    pub refused: bool,
    /// Candidate calls plus arbiter calls the batch made, from its answer.
    pub upstream_calls: u64,
    /// Candidates the straggler policy cut off.
    pub cancelled: u64,
    pub candidates: u64,
}

/// writ's `POST /write_codebase`, with a client that keeps enough connections open.
#[derive(Clone)]
pub struct Target {
    client: reqwest::Client,
    url: String,
}

impl Target {
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .timeout(Duration::from_secs(120))
            .build()?;
        Ok(Target {
            client,
            url: format!("{base}/write_codebase"),
        })
    }

    pub async fn send(&self, body: &Value) -> Sample {
        let started = Instant::now();
        let resp = self.client.post(&self.url).json(body).send().await;
        let Ok(resp) = resp else {
            return Sample {
                latency: started.elapsed(),
                ..Sample::default()
            };
        };
        let status = resp.status();
        let refused = status == reqwest::StatusCode::SERVICE_UNAVAILABLE
            && resp.headers().contains_key(reqwest::header::RETRY_AFTER);
        let overhead_ms = resp
            .headers()
            .get("x-writ-overhead-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let answer: Option<Value> = resp.json().await.ok();
        let latency = started.elapsed();
        let mut sample = Sample {
            latency,
            overhead_ms,
            refused,
            ..Sample::default()
        };
        if let Some(answer) = answer {
            sample.ok = status.is_success() && answer["status"] == "success";
            for file in answer["results"].as_array().into_iter().flatten() {
                let candidates = file["candidates"].as_array().map_or(0, Vec::len) as u64;
                sample.candidates += candidates;
                sample.cancelled += file["candidates"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["error_class"] == "cancelled")
                    .count() as u64;
                let arbiter = u64::from(file["selection"] == "arbiter");
                sample.upstream_calls += candidates + arbiter;
            }
        }
        sample
    }
}

/// A `write_codebase` body of `files` Python files under a directory unique to `seq`, so each
/// batch creates new files (a real, fsync'd write) instead of finding them unchanged.
pub fn batch_body(seq: u64, files: usize, options: Value) -> Value {
    let files: Vec<Value> = (0..files)
        .map(|i| {
            json!({
                "filename": format!("bench/{seq}/module_{i}.py"),
                "code_description": format!("Module {i}: a function add(a, b) returning their sum, with type hints."),
                "external_imports": ["typing"],
            })
        })
        .collect();
    json!({
        "command": "write_codebase",
        "task_description": "A small Python package used to benchmark writ",
        "files": files,
        "options": options,
    })
}

/// Sends batches at `rate` per second for `duration`, however long the answers take, and waits
/// for every answer. Returns the samples and the time from the first send to the last answer.
pub async fn open_loop(
    target: &Target,
    rate: f64,
    duration: Duration,
    body: Arc<dyn Fn(u64) -> Value + Send + Sync>,
) -> (Vec<Sample>, Duration) {
    let started = Instant::now();
    let total = (rate * duration.as_secs_f64()).round().max(1.0) as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for seq in 0..total {
        // Arrivals on a fixed schedule: a slow answer never delays the next send.
        let at = started + Duration::from_secs_f64(seq as f64 / rate);
        tokio::time::sleep_until(at.into()).await;
        let target = target.clone();
        let body = body(seq);
        tasks.spawn(async move { target.send(&body).await });
    }
    let mut samples = Vec::with_capacity(total as usize);
    while let Some(done) = tasks.join_next().await {
        samples.push(done.unwrap_or_default());
    }
    (samples, started.elapsed())
}

/// `concurrency` clients, each sending its next batch as soon as the last one is answered, for
/// `duration`; client `i` sends to `targets[i % targets.len()]` (replicas share the load evenly,
/// as a round-robin balancer would). Returns the samples and the elapsed time.
pub async fn closed_loop(
    targets: &[Target],
    concurrency: usize,
    duration: Duration,
    body: Arc<dyn Fn(u64) -> Value + Send + Sync>,
) -> (Vec<Sample>, Duration) {
    let started = Instant::now();
    let deadline = started + duration;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..concurrency {
        let target = targets[i % targets.len()].clone();
        let body = body.clone();
        let next = next.clone();
        tasks.spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let seq = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let sample = target.send(&body(seq)).await;
                if sample.refused {
                    // A client backing off, briefly: the bench measures the server, not the wait.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                samples.push(sample);
            }
            samples
        });
    }
    let mut samples = Vec::new();
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.unwrap_or_default());
    }
    (samples, started.elapsed())
}
