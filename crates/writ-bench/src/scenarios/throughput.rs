//! The closed-loop tables: how many batches writ sustains and the CPU each costs — the
//! ceiling, replicas sharing one database, the repository map.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Backend, Plan, body_with, outcome_cells, rates};
use crate::load::{Sample, Target, closed_loop};
use crate::procfs;
use crate::procs::{Fake, Writ};
use crate::stats::millis;

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
