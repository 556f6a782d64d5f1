//! The four measurements, each producing one Markdown table.
//!
//! Every scenario keeps its own time bound (`Plan`), so the whole suite stays within minutes on
//! two cores; `--quick` shrinks every bound for a smoke run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;
use writ_core::audit::{
    AuditStore, FileKind, NewRequest, Operation, OperationKind, OperationOutcome, OperationStatus,
};

use crate::load::{Sample, Target, batch_body, closed_loop, open_loop};
use crate::procfs;
use crate::procs::{ARBITER, Fake, MODELS, STRAGGLER, Writ};
use crate::stats::{Summary, millis, ms};

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    pub bin_dir: PathBuf,
    /// The fake's fixed latency for every candidate and the arbiter.
    pub latency_ms: u64,
    pub overhead_rates: Vec<f64>,
    pub overhead_secs: f64,
    pub ceiling_concurrency: Vec<usize>,
    pub ceiling_secs: f64,
    pub straggler_rate: f64,
    pub straggler_secs: f64,
    pub audit_secs: f64,
    pub backends: Vec<Backend>,
}

impl Plan {
    pub fn full(bin_dir: PathBuf) -> Plan {
        Plan {
            bin_dir,
            latency_ms: 50,
            overhead_rates: vec![10.0, 50.0, 200.0],
            overhead_secs: 8.0,
            ceiling_concurrency: vec![1, 4, 16, 32, 64, 256, 500],
            ceiling_secs: 8.0,
            straggler_rate: 20.0,
            straggler_secs: 15.0,
            audit_secs: 5.0,
            backends: vec![Backend::Sqlite, Backend::Postgres],
        }
    }

    pub fn quick(bin_dir: PathBuf) -> Plan {
        Plan {
            overhead_rates: vec![10.0],
            overhead_secs: 1.0,
            ceiling_concurrency: vec![1, 8],
            ceiling_secs: 1.0,
            straggler_rate: 10.0,
            straggler_secs: 2.0,
            audit_secs: 1.0,
            ..Plan::full(bin_dir)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }

    /// A new, empty database: a file in `dir`, or a fresh PostgreSQL database.
    async fn fresh_url(self, dir: &std::path::Path) -> String {
        match self {
            Backend::Sqlite => writ_store::testing::fresh_sqlite_url(dir),
            Backend::Postgres => {
                let url = writ_store::testing::fresh_postgres_url().await;
                CREATED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(url.clone());
                url
            }
        }
    }
}

/// The PostgreSQL databases this run made, dropped by [`drop_databases`] when it ends (not after
/// each row, for the same reason as `procs::KEPT`).
static CREATED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Drops every PostgreSQL database this run made, so that running `writ-bench` on its own leaves
/// none behind (a server holding hundreds of them measured slower).
pub async fn drop_databases() {
    let created = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|e| e.into_inner()));
    for url in created {
        if let Err(e) = writ_store::testing::drop_postgres_database(&url).await {
            eprintln!("writ-bench: {e}");
        }
    }
}

fn body_with(files: usize, options: Value) -> Arc<dyn Fn(u64) -> Value + Send + Sync> {
    // A run id keeps paths unique across rows that share a REPO_DIR.
    let run = Uuid::now_v7().simple().to_string();
    Arc::new(move |seq| {
        let mut body = batch_body(seq, files, options.clone());
        for f in body["files"].as_array_mut().into_iter().flatten() {
            if let Some(name) = f["filename"].as_str() {
                f["filename"] = Value::String(format!("{run}/{name}"));
            }
        }
        body
    })
}

/// Batches that failed: a refusal (503 with `Retry-After`) is the server protecting itself, and
/// is counted apart.
fn errors(samples: &[Sample]) -> usize {
    samples.iter().filter(|s| !s.ok && !s.refused).count()
}

/// A closed loop's batches and upstream calls per second.
fn rates(samples: &[Sample], elapsed: Duration) -> (f64, f64) {
    let secs = elapsed.as_secs_f64();
    let calls: u64 = samples.iter().map(|s| s.upstream_calls).sum();
    (samples.len() as f64 / secs, calls as f64 / secs)
}

/// The last six cells of a closed-loop row: errors, refusals, batch latency p50 and p99, writ's
/// overhead p50 and p99.
fn outcome_cells(samples: &[Sample]) -> String {
    let lat: Vec<f64> = samples.iter().map(|s| millis(s.latency)).collect();
    let lat = Summary::of(&lat);
    let oh: Vec<f64> = samples.iter().filter_map(|s| s.overhead_ms).collect();
    let oh = Summary::of(&oh);
    format!(
        "{} | {} | {} | {} | {} | {}",
        errors(samples),
        samples.iter().filter(|s| s.refused).count(),
        ms(lat.p50),
        ms(lat.p99),
        ms(oh.p50),
        ms(oh.p99),
    )
}

/// Table 1: writ's overhead per batch at fixed arrival rates.
pub async fn overhead(plan: &Plan, fake: &Fake) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| backend | batch | rate (batches/s) | batches | errors | overhead p50 (ms) | p90 | p99 | client-side added p50 (ms) | p99 |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for &backend in &plan.backends {
        for files in [1usize, 5] {
            for m in measure_overhead(plan, fake, backend, files, &[]).await? {
                writeln!(
                    out,
                    "| {} | {files} file(s) × 3 models | {} | {} | {} | {} | {} | {} | {} | {} |",
                    backend.name(),
                    m.rate,
                    m.batches,
                    m.errors,
                    ms(m.overhead.p50),
                    ms(m.overhead.p90),
                    ms(m.overhead.p99),
                    ms(m.added.p50),
                    ms(m.added.p99)
                )?;
            }
        }
    }
    Ok(out)
}

/// The overhead of `files`-file batches at each of the plan's rates, on a writ started with
/// `env` on top of the usual settings.
struct Overhead {
    rate: f64,
    batches: usize,
    errors: usize,
    overhead: Summary,
    added: Summary,
    /// writ's own CPU time (user + system) per batch at this rate: what a feature costs with
    /// the machine's other load taken out, where a latency percentile under load is not.
    cpu_ms_per_batch: f64,
}

async fn measure_overhead(
    plan: &Plan,
    fake: &Fake,
    backend: Backend,
    files: usize,
    env: &[(&str, &str)],
) -> anyhow::Result<Vec<Overhead>> {
    let mut both = measure_side_by_side(plan, fake, backend, files, &[env]).await?;
    Ok(both.pop().unwrap_or_default())
}

/// The overhead rows of one writ per `envs` (each on a fresh database), all sent the same batches
/// at the same rates at the same time: what tells them apart is their settings, not when they
/// ran or what else the machine was doing then.
async fn measure_side_by_side(
    plan: &Plan,
    fake: &Fake,
    backend: Backend,
    files: usize,
    envs: &[&[(&str, &str)]],
) -> anyhow::Result<Vec<Vec<Overhead>>> {
    let critical = 2 * plan.latency_ms;
    let mut servers = Vec::new();
    for env in envs {
        let data = tempfile::tempdir()?;
        let url = backend.fresh_url(data.path()).await;
        let writ = Writ::start(&plan.bin_dir, fake, &url, env).await?;
        let target = Target::new(&writ.base_url)?;
        servers.push((data, writ, target));
    }
    // Warm the connection pools and the page cache before measuring.
    futures::future::join_all(servers.iter().map(|(_, _, target)| {
        open_loop(
            target,
            20.0,
            Duration::from_secs(1),
            body_with(files, json!({})),
        )
    }))
    .await;
    let ticks = procfs::ticks_per_sec();
    let mut rows: Vec<Vec<Overhead>> = servers.iter().map(|_| Vec::new()).collect();
    for &rate in &plan.overhead_rates {
        let mut cpu_before = Vec::new();
        for (_, writ, _) in &servers {
            cpu_before.push(procfs::cpu_time(writ.pid, ticks)?);
        }
        let runs = futures::future::join_all(servers.iter().map(|(_, _, target)| {
            open_loop(
                target,
                rate,
                Duration::from_secs_f64(plan.overhead_secs),
                body_with(files, json!({})),
            )
        }))
        .await;
        for (i, (samples, _)) in runs.into_iter().enumerate() {
            let oh: Vec<f64> = samples.iter().filter_map(|s| s.overhead_ms).collect();
            let added: Vec<f64> = samples
                .iter()
                .map(|s| millis(s.latency) - critical as f64)
                .collect();
            let cpu = procfs::cpu_time(servers[i].1.pid, ticks)?.saturating_sub(cpu_before[i]);
            rows[i].push(Overhead {
                cpu_ms_per_batch: millis(cpu) / samples.len().max(1) as f64,
                rate,
                batches: samples.len(),
                errors: errors(&samples),
                overhead: Summary::of(&oh),
                added: Summary::of(&added),
            });
        }
        fake.forget_calls(&reqwest::Client::new()).await;
    }
    for (_, writ, _) in servers {
        writ.stop().await;
    }
    Ok(rows)
}

/// What a batch costs in a named workspace as the number of workspaces grows: one-file batches
/// at the plan's first rate into `default` (the route without a prefix), then into the last of 1
/// and of 100 workspaces registered (`/workspaces/{name}/write_codebase`), each on a fresh writ
/// and database. The workspace is opened by the warm-up, so the rows compare the per-request
/// cost, not the first use.
pub async fn workspaces(plan: &Plan, fake: &Fake) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| backend | workspaces registered | batches sent to | rate (batches/s) | batches | errors | overhead p50 (ms) | p90 | p99 |"
    )?;
    writeln!(out, "|---|---:|---|---:|---:|---:|---:|---:|---:|")?;
    let rate = plan.overhead_rates.first().copied().unwrap_or(10.0);
    for &backend in &plan.backends {
        for registered in [0usize, 1, 100] {
            let data = tempfile::tempdir()?;
            let url = backend.fresh_url(data.path()).await;
            let dir = tempfile::tempdir()?;
            let dir_text = dir.path().display().to_string();
            let writ = Writ::start(
                &plan.bin_dir,
                fake,
                &url,
                &[("WRIT_WORKSPACES_DIR", dir_text.as_str())],
            )
            .await?;
            let http = reqwest::Client::new();
            for i in 0..registered {
                let made = http
                    .post(format!("{}/workspaces", writ.base_url))
                    .json(&json!({"name": format!("w-{i}")}))
                    .send()
                    .await?;
                anyhow::ensure!(
                    made.status().is_success(),
                    "creating workspace w-{i}: {}",
                    made.status()
                );
            }
            let (base, shown) = match registered {
                0 => (writ.base_url.clone(), "default".to_owned()),
                n => {
                    let name = format!("w-{}", n - 1);
                    (format!("{}/workspaces/{name}", writ.base_url), name)
                }
            };
            let target = Target::new(&base)?;
            let _ = open_loop(
                &target,
                20.0,
                Duration::from_secs(1),
                body_with(1, json!({})),
            )
            .await;
            let (samples, _) = open_loop(
                &target,
                rate,
                Duration::from_secs_f64(plan.overhead_secs),
                body_with(1, json!({})),
            )
            .await;
            let oh = Summary::of(
                &samples
                    .iter()
                    .filter_map(|s| s.overhead_ms)
                    .collect::<Vec<_>>(),
            );
            writeln!(
                out,
                "| {} | {registered} | {shown} | {rate} | {} | {} | {} | {} | {} |",
                backend.name(),
                samples.len(),
                errors(&samples),
                ms(oh.p50),
                ms(oh.p90),
                ms(oh.p99)
            )?;
            fake.forget_calls(&http).await;
            writ.stop().await;
        }
    }
    Ok(out)
}

/// The cost of traces: the overhead table's batches sent at once to two writs, one with traces
/// off and one exporting them over OTLP to the fake's receiver (`OTEL_EXPORTER_OTLP_ENDPOINT`),
/// on the plan's first backend. Run side by side, the two see the same machine: run one after
/// the other, the machine's drift between the runs was larger than what exporting costs.
pub async fn tracing(plan: &Plan, fake: &Fake) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| backend | batch | traces | rate (batches/s) | batches | spans received | overhead p50 (ms) | p90 | p99 | writ CPU ms/batch |"
    )?;
    writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|")?;
    let backend = plan.backends[0];
    let endpoint = fake.otlp_endpoint();
    let http = reqwest::Client::new();
    for files in [1usize, 5] {
        let exported = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
        let rows = measure_side_by_side(plan, fake, backend, files, &[&[], &exported]).await?;
        // The exporter sends what it holds when writ stops.
        let spans = fake.take_spans(&http).await;
        for (traces, rows) in ["off", "OTLP"].into_iter().zip(rows) {
            let spans = if traces == "off" { 0 } else { spans };
            for m in rows {
                writeln!(
                    out,
                    "| {} | {files} file(s) × 3 models | {traces} | {} | {} | {spans} | {} | {} | {} | {:.2} |",
                    backend.name(),
                    m.rate,
                    m.batches,
                    ms(m.overhead.p50),
                    ms(m.overhead.p90),
                    ms(m.overhead.p99),
                    m.cpu_ms_per_batch,
                )?;
            }
        }
    }
    Ok(out)
}

/// Table 2: the ceiling, closed loop, five-file batches.
pub async fn ceiling(plan: &Plan, fake: &Fake) -> anyhow::Result<String> {
    let ticks = procfs::ticks_per_sec();
    let mut out = String::new();
    writeln!(
        out,
        "| backend | concurrency | batches/s | upstream calls/s | writ CPU ms/batch | writ peak RSS (MB) | errors | refused (503) | batch p50 (ms) | p99 | overhead p50 (ms) | p99 |"
    )?;
    writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    for &backend in &plan.backends {
        let data = tempfile::tempdir()?;
        let url = backend.fresh_url(data.path()).await;
        let writ = Writ::start(&plan.bin_dir, fake, &url, &[]).await?;
        let target = Target::new(&writ.base_url)?;
        let _ = closed_loop(
            std::slice::from_ref(&target),
            8,
            Duration::from_secs(1),
            body_with(5, json!({})),
        )
        .await;
        for &concurrency in &plan.ceiling_concurrency {
            procfs::reset_peak_rss(writ.pid)?;
            let cpu_before = procfs::cpu_time(writ.pid, ticks)?;
            let (samples, elapsed) = closed_loop(
                std::slice::from_ref(&target),
                concurrency,
                Duration::from_secs_f64(plan.ceiling_secs),
                body_with(5, json!({})),
            )
            .await;
            let cpu = procfs::cpu_time(writ.pid, ticks)?.saturating_sub(cpu_before);
            let rss = procfs::peak_rss(writ.pid)?;
            let n = samples.len().max(1) as f64;
            let (rate, calls) = rates(&samples, elapsed);
            writeln!(
                out,
                "| {} | {concurrency} | {rate:.0} | {calls:.0} | {:.2} | {:.0} | {} |",
                backend.name(),
                millis(cpu) / n,
                rss as f64 / (1024.0 * 1024.0),
                outcome_cells(&samples),
            )?;
            fake.forget_calls(&reqwest::Client::new()).await;
        }
        writ.stop().await;
    }
    Ok(out)
}

/// The policies the straggler table compares, as sent in `options.straggler`.
pub fn straggler_policies() -> Vec<(&'static str, Value)> {
    vec![
        ("wait for all (default)", json!(null)),
        (
            "all_but_slowest, extra 0.5× first viable",
            json!({"enough": "all_but_slowest", "extra_factor": 0.5}),
        ),
        (
            "all_but_slowest, extra 20 ms",
            json!({"enough": "all_but_slowest", "extra_ms": 20}),
        ),
        ("enough 1, extra 0 ms", json!({"enough": 1, "extra_ms": 0})),
    ]
}

/// Table 3: one of three candidates heavy-tailed; batch latency with and without the policy.
pub async fn stragglers(plan: &Plan, fake: &Fake) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| policy (`options.straggler`) | batches | errors | batch p50 (ms) | p90 | p99 | p99 / p50 | upstream path p50 (ms) | p99 | p99 / p50 | candidates cut off | arbiter asked |"
    )?;
    writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    let data = tempfile::tempdir()?;
    // PostgreSQL when the plan has it: its overhead tail is the shorter, so the table shows the
    // policy rather than the audit store.
    let backend = plan.backends.last().copied().unwrap_or(Backend::Sqlite);
    let url = backend.fresh_url(data.path()).await;
    // The straggler is not a configured model: a batch may name it only when it is allowed.
    let allowed = [MODELS[0], MODELS[1], STRAGGLER, ARBITER].join(",");
    let writ = Writ::start(
        &plan.bin_dir,
        fake,
        &url,
        &[("WRIT_ALLOWED_MODELS", allowed.as_str())],
    )
    .await?;
    let target = Target::new(&writ.base_url)?;
    let models = json!([MODELS[0], MODELS[1], STRAGGLER]);
    for (name, policy) in straggler_policies() {
        let mut options = json!({"models": models, "arbiter_model": ARBITER});
        if !policy.is_null() {
            options["straggler"] = policy;
        }
        let (samples, _) = open_loop(
            &target,
            plan.straggler_rate,
            Duration::from_secs_f64(plan.straggler_secs),
            body_with(1, options),
        )
        .await;
        let lat: Vec<f64> = samples.iter().map(|s| millis(s.latency)).collect();
        let lat = Summary::of(&lat);
        // What the batch waited on models: its latency less writ's own reported overhead.
        let path: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.overhead_ms.map(|o| millis(s.latency) - o))
            .collect();
        let path = Summary::of(&path);
        let candidates: u64 = samples.iter().map(|s| s.candidates).sum();
        let cancelled: u64 = samples.iter().map(|s| s.cancelled).sum();
        let arbiter = samples
            .iter()
            .filter(|s| s.upstream_calls > s.candidates)
            .count();
        writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {:.2} | {:.1}% | {:.0}% |",
            samples.len(),
            errors(&samples),
            ms(lat.p50),
            ms(lat.p90),
            ms(lat.p99),
            lat.p99 / lat.p50,
            ms(path.p50),
            ms(path.p99),
            path.p99 / path.p50,
            100.0 * cancelled as f64 / candidates.max(1) as f64,
            100.0 * arbiter as f64 / samples.len().max(1) as f64,
        )?;
        fake.forget_calls(&reqwest::Client::new()).await;
    }
    writ.stop().await;
    Ok(out)
}

/// Table 4: the audit path alone — operations recorded (pending, then succeeded) per second,
/// for a tiny file and for a large one (whose content the database compresses on the commit).
pub async fn audit_path(plan: &Plan) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| backend | file (bytes) | concurrency | operations/s | per operation p50 (ms) | p99 | errors |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|")?;
    let small: Arc<[u8]> = Arc::from(&b"def add(a: int, b: int) -> int:\n    return a + b\n"[..]);
    let large: Arc<[u8]> = Arc::from(large_source(LARGE_FILE_BYTES).into_bytes());
    for &backend in &plan.backends {
        let data = tempfile::tempdir()?;
        let url = backend.fresh_url(data.path()).await;
        let store = writ_store::connect(&url).await?;
        store.migrate().await?;
        for (content, concurrency) in [(&small, 1usize), (&small, 32), (&large, 1), (&large, 32)] {
            let deadline = Instant::now() + Duration::from_secs_f64(plan.audit_secs);
            let started = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..concurrency {
                let store = store.clone();
                let content = content.clone();
                tasks.spawn(async move {
                    let mut lat = Vec::new();
                    let mut failed = 0usize;
                    while Instant::now() < deadline {
                        match record_one(store.as_ref(), &content).await {
                            Ok(d) => lat.push(millis(d)),
                            Err(_) => failed += 1,
                        }
                    }
                    (lat, failed)
                });
            }
            let mut lat = Vec::new();
            let mut failed = 0;
            while let Some(done) = tasks.join_next().await {
                let (l, f) = done.unwrap_or_default();
                lat.extend(l);
                failed += f;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let s = Summary::of(&lat);
            writeln!(
                out,
                "| {} | {} | {concurrency} | {:.0} | {} | {} | {failed} |",
                backend.name(),
                content.len(),
                lat.len() as f64 / elapsed,
                ms(s.p50),
                ms(s.p99),
            )?;
        }
    }
    Ok(out)
}

/// A large source file's size: typical of the bigger modules agents ask for.
const LARGE_FILE_BYTES: usize = 32 * 1024;

/// Python source of about `bytes` bytes, varied enough that it compresses as code does (about
/// eight to one), not as a repeated line would.
fn large_source(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 256);
    let mut i = 0u64;
    while text.len() < bytes {
        i += 1;
        let k = i.wrapping_mul(2_654_435_761) % 9973;
        text.push_str(&format!(
            "def handler_{i}(request: dict, limit: int = {k}) -> list[str]:\n    \"\"\"Returns the first {k} names of request {i}, sorted.\"\"\"\n    names = sorted(request.get(\"names_{}\", []))\n    return names[:limit]\n\n",
            k % 97
        ));
    }
    text
}

/// One audited write as `recorded_write` makes it, without the file: the request row once per
/// operation here (the worst case, a one-file batch), the pending operation with its content,
/// then its completion.
async fn record_one(store: &dyn AuditStore, content: &[u8]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let request_id = Uuid::now_v7();
    store
        .insert_request(&NewRequest {
            id: request_id,
            received_at: chrono::Utc::now(),
            route: "POST /write_codebase".into(),
            caller: None,
            scope: None,
            idempotency_key: None,
            body_sha256: None,
            workspace: "default".into(),
        })
        .await?;
    let op = Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: chrono::Utc::now(),
        finished_at: None,
        filename: format!("bench/{request_id}.py"),
        kind: FileKind::Code,
        operation: OperationKind::Created,
        status: OperationStatus::Pending,
        chosen_model: Some(MODELS[0].into()),
        selection: Some(writ_core::audit::Selection::Arbiter),
        arbiter_reason: Some("the most direct".into()),
        candidates: Vec::new(),
        previous_sha256: None,
        sha256: Some(writ_core::content::sha256_hex(content)),
        bytes: Some(content.len() as i64),
        error: None,
        duration_ms: None,
        detail: None,
        workspace: "default".into(),
    };
    store.insert_operation(&op, Some(content)).await?;
    store
        .complete_operation(
            op.id,
            &OperationOutcome {
                status: OperationStatus::Succeeded,
                operation: OperationKind::Created,
                error: None,
                finished_at: chrono::Utc::now(),
                duration_ms: Some(1),
            },
        )
        .await?;
    Ok(started.elapsed())
}

/// Batches each replica runs at once in the replicas table: three replicas at this limit keep
/// within PostgreSQL's default 100 connections (each holds one read connection per batch it
/// admits, plus the group commit's, the events' and the locks').
pub const REPLICA_IN_FLIGHT: usize = 24;

/// Table 5: the ceiling with 1, 2 and 3 replicas on one PostgreSQL database and one `REPO_DIR`,
/// closed loop, five-file batches, the load spread evenly over the replicas.
pub async fn replicas(plan: &Plan, fake: &Fake, counts: &[usize]) -> anyhow::Result<String> {
    let ticks = procfs::ticks_per_sec();
    let mut out = String::new();
    writeln!(
        out,
        "| replicas | concurrency | batches/s | upstream calls/s | writ CPU ms/batch (all replicas) | PostgreSQL CPU ms/batch | errors | refused (503) | batch p50 (ms) | p99 | overhead p50 (ms) | p99 |"
    )?;
    writeln!(
        out,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    let in_flight = REPLICA_IN_FLIGHT.to_string();
    let env = [("WRIT_MAX_BATCHES_IN_FLIGHT", in_flight.as_str())];
    for &n in counts {
        let data = tempfile::tempdir()?;
        let url = Backend::Postgres.fresh_url(data.path()).await;
        let repo = tempfile::tempdir()?;
        let mut writs = Vec::with_capacity(n);
        for _ in 0..n {
            writs.push(Writ::start_over(&plan.bin_dir, fake, &url, repo.path(), &env).await?);
        }
        let targets = writs
            .iter()
            .map(|w| Target::new(&w.base_url))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let concurrency = REPLICA_IN_FLIGHT * n;
        let _ = closed_loop(
            &targets,
            concurrency,
            Duration::from_secs(1),
            body_with(5, json!({})),
        )
        .await;
        let writ_cpu = |writs: &[Writ]| -> anyhow::Result<Duration> {
            writs.iter().map(|w| procfs::cpu_time(w.pid, ticks)).sum()
        };
        let cpu_before = writ_cpu(&writs)?;
        let pg_before = procfs::cpu_time_of_all("postgres", ticks);
        let (samples, elapsed) = closed_loop(
            &targets,
            concurrency,
            Duration::from_secs_f64(plan.ceiling_secs),
            body_with(5, json!({})),
        )
        .await;
        let cpu = writ_cpu(&writs)?.saturating_sub(cpu_before);
        let pg = procfs::cpu_time_of_all("postgres", ticks).saturating_sub(pg_before);
        let done = samples.len().max(1) as f64;
        let (rate, calls) = rates(&samples, elapsed);
        writeln!(
            out,
            "| {n} | {concurrency} | {rate:.0} | {calls:.0} | {:.2} | {:.2} | {} |",
            millis(cpu) / done,
            millis(pg) / done,
            outcome_cells(&samples),
        )?;
        fake.forget_calls(&reqwest::Client::new()).await;
        for writ in writs {
            writ.stop().await;
        }
        // The shared REPO_DIR goes with the rest at the end of the run (see `procs::KEPT`).
        crate::procs::keep(repo);
    }
    Ok(out)
}

/// Batches per row of the map's CPU table, and how many are in flight.
const MAP_CPU_BATCHES: u64 = 300;
const MAP_CPU_IN_FLIGHT: usize = 32;

/// The repository map's cost to writ's CPU: `MAP_CPU_BATCHES` five-file batches, 32 in flight,
/// the fake answering in 5 ms, on a `REPO_DIR` that starts empty and grows by every batch's
/// files (1,500 by the end), with the map on (the default budget) and off, in alternate rows so
/// that the machine's drift falls on both.
pub async fn map_cpu(plan: &Plan, rounds: usize) -> anyhow::Result<String> {
    let ticks = procfs::ticks_per_sec();
    let fake = Fake::start(&plan.bin_dir, 5).await?;
    let mut out = String::new();
    writeln!(
        out,
        "| map | round | batches | writ CPU ms/batch | errors | refused (503) | batch p50 (ms) | p99 | overhead p50 (ms) | p99 |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for round in 1..=rounds {
        for (name, tokens) in [("on (2,000 tokens)", "2000"), ("off", "0")] {
            let data = tempfile::tempdir()?;
            let url = Backend::Sqlite.fresh_url(data.path()).await;
            let writ = Writ::start(
                &plan.bin_dir,
                &fake,
                &url,
                &[("WRIT_REPO_MAP_TOKENS", tokens)],
            )
            .await?;
            let target = Target::new(&writ.base_url)?;
            let cpu_before = procfs::cpu_time(writ.pid, ticks)?;
            let samples = fixed_count(&target, MAP_CPU_IN_FLIGHT, MAP_CPU_BATCHES).await;
            let cpu = procfs::cpu_time(writ.pid, ticks)?.saturating_sub(cpu_before);
            let n = samples.len().max(1) as f64;
            writeln!(
                out,
                "| {name} | {round} | {} | {:.2} | {} |",
                samples.len(),
                millis(cpu) / n,
                outcome_cells(&samples),
            )?;
            fake.forget_calls(&reqwest::Client::new()).await;
            writ.stop().await;
        }
    }
    Ok(out)
}

/// `total` five-file batches sent by `concurrency` clients, each sending its next when the last
/// is answered.
async fn fixed_count(target: &Target, concurrency: usize, total: u64) -> Vec<Sample> {
    let body = body_with(5, json!({}));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let target = target.clone();
        let body = body.clone();
        let next = next.clone();
        tasks.spawn(async move {
            let mut samples = Vec::new();
            loop {
                let seq = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if seq >= total {
                    return samples;
                }
                samples.push(target.send(&body(seq)).await);
            }
        });
    }
    let mut samples = Vec::new();
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.unwrap_or_default());
    }
    samples
}
