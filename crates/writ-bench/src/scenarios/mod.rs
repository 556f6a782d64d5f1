//! The four measurements, each producing one Markdown table.
//!
//! Every scenario keeps its own time bound (`Plan`), so the whole suite stays within minutes on
//! two cores; `--quick` shrinks every bound for a smoke run.
//!
//! Here: the plan, the backends and what the tables share; the open-loop tables (overhead,
//! workspaces, traces, stragglers) in `latency`, the closed-loop ones (ceiling, replicas, the
//! map's CPU) in `throughput`, the audit path in `audit`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::load::{Sample, batch_body};
use crate::stats::{Summary, millis, ms};

mod audit;
mod latency;
mod throughput;

pub use audit::audit_path;
pub use latency::{overhead, straggler_policies, stragglers, tracing, workspaces};
pub use throughput::{REPLICA_IN_FLIGHT, ceiling, map_cpu, replicas};

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
