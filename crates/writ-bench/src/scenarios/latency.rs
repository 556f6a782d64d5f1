//! The open-loop tables: batches sent at fixed arrival rates, and what writ adds to their
//! latency — its overhead per backend, per workspace and with traces exported — and the
//! straggler policies' effect on a batch's latency.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Backend, Plan, body_with, errors};
use crate::load::{Target, open_loop};
use crate::procfs;
use crate::procs::{ARBITER, Fake, MODELS, STRAGGLER, Writ};
use crate::stats::{Summary, millis, ms};

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
