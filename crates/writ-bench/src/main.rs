//! `writ-bench`: runs the benchmark suite and prints BENCHMARKS.md's tables on stdout.
//!
//! Needs the release binaries (`cargo build --release --bin writ --bin writ-fake-upstream`) and,
//! for the PostgreSQL rows, a server at `WRIT_TEST_PG_URL` (default: local, trust auth).
//! `scripts/bench` builds, runs and writes BENCHMARKS.md.
//!
//! `writ-bench eval` runs the quality eval instead (`scripts/eval` writes EVALS.md): how often
//! the correct file is written with and without `options.validation`; see [`writ_bench::eval`].

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use writ_bench::procs::Fake;
use writ_bench::scenarios::{self, Backend, Plan};

#[derive(Debug, Parser)]
#[command(about = "writ's benchmark suite: overhead, ceiling, stragglers, audit path")]
#[command(args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Directory with the `writ` and `writ-fake-upstream` release binaries.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// A smoke run: every scenario for a second or two.
    #[arg(long)]
    quick: bool,
    /// SQLite only (no PostgreSQL needed).
    #[arg(long, conflicts_with = "postgres_only")]
    sqlite_only: bool,
    /// PostgreSQL only.
    #[arg(long)]
    postgres_only: bool,
    /// Run only these tables (overhead, tracing, workspaces, ceiling, stragglers, audit,
    /// replicas); all by default. `map_cpu` (the repository map on against off) runs only when
    /// named.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The ceiling table's concurrencies (default: 1, 4, 16, 32, 64, 256, 500).
    #[arg(long, value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// The replicas table's replica counts (PostgreSQL only).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 3])]
    replicas: Vec<usize>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The quality eval: how often the correct file is written (prints EVALS.md's table).
    Eval {
        /// Directory with the `writ` and `writ-fake-upstream` binaries.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// The task directory (one TOML file per task).
        #[arg(long)]
        tasks: Option<PathBuf>,
        /// Only these task ids.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Go over the task set this many times per configuration.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// The fake upstream's latency per model call, in milliseconds.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Keep every batch's answer as JSON in this directory.
        #[arg(long)]
        answers: Option<PathBuf>,
    },
    /// Generated checks: how often the correct file is written without the caller's tests
    /// (prints EVALS.md's generated-checks table).
    EvalChecks {
        /// Directory with the `writ` and `writ-fake-upstream` binaries.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Only these task ids.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Only these configurations: arbiter, a, a1, examples, b, c (all by default); c-staggered
        /// and c-stop (five models at different latencies, without and with
        /// options.fanout.stop_when_passing) only when named.
        #[arg(long, value_delimiter = ',')]
        configs: Vec<String>,
        /// The fake upstream's latency per model call, in milliseconds.
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
        /// Keep every batch's answer as JSON in this directory.
        #[arg(long)]
        answers: Option<PathBuf>,
    },
    /// `options.fanout`: model calls and tokens saved against the full fan-out, and the
    /// correct files written, on the eval's task set with its tests (BENCHMARKS.md).
    EvalFanout {
        /// Directory with the `writ` and `writ-fake-upstream` binaries.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Only these task ids.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Adaptive routing (`WRIT_ROUTING=adaptive`): model calls and cost per correct file
    /// against the full fan-out, with scripted models that win in different languages, and
    /// how many files it takes to notice a model's drop (EVALS.md).
    EvalRouting {
        /// Directory with the `writ` and `writ-fake-upstream` binaries.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Batches (one file each, Python and JavaScript in turn) per configuration.
        #[arg(long, default_value_t = 300)]
        batches: usize,
        /// The batch from which `eval-py`'s Python quality drops.
        #[arg(long, default_value_t = 200)]
        drop_at: usize,
        #[arg(long, default_value_t = 56)]
        seed: u64,
    },
    /// The repository's context: map build time, prompt tokens and search latency on generated
    /// repositories, and how often a prompt holds what its file needs (BENCHMARKS.md, EVALS.md).
    Context {
        /// Repository sizes, in files.
        #[arg(long, value_delimiter = ',', default_values_t = [10, 20_000, 100_000])]
        files: Vec<usize>,
        /// The map's budget, in prompt tokens.
        #[arg(long, default_value_t = 2_000)]
        map_tokens: usize,
    },
    /// History: what a commit per request adds to a five-file batch on a repository of 20,000
    /// files, and what the undo of a five-file batch costs (BENCHMARKS.md).
    History {
        /// Directory with the `writ` and `writ-fake-upstream` binaries.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Files in the generated repository.
        #[arg(long, default_value_t = 20_000)]
        files: usize,
        /// Batches (and undos) per row.
        #[arg(long, default_value_t = 50)]
        rounds: usize,
    },
    /// Changes of existing files: no line lost whatever the models answer, and the cost of
    /// edits against whole files (prints EVALS.md's and BENCHMARKS.md's update tables).
    Updates {
        /// Directory with the `writ` and `writ-fake-upstream` binaries.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Sizes of the existing files, in lines.
        #[arg(long, value_delimiter = ',', default_values_t = [50, 300, 1000, 3000])]
        lines: Vec<usize>,
        /// Runs per row of the cost table (its latency is the median).
        #[arg(long, default_value_t = 3)]
        cost_runs: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    // Every repo this run makes goes at the end, whichever way it ends.
    let _repos = writ_bench::procs::KeptRepos;
    if let Some(Command::Context { files, map_tokens }) = &args.command {
        let report = writ_bench::context::run(files, *map_tokens).await?;
        writeln!(std::io::stdout(), "{report}")?;
        return Ok(());
    }
    if let Some(Command::History {
        bin_dir,
        files,
        rounds,
    }) = &args.command
    {
        let bin_dir = bin_dir
            .clone()
            .unwrap_or_else(writ_bench::procs::default_bin_dir);
        let report = writ_bench::history::run(&bin_dir, *files, *rounds).await?;
        writeln!(std::io::stdout(), "{report}")?;
        return Ok(());
    }
    if let Some(Command::Updates {
        bin_dir,
        lines,
        cost_runs,
    }) = &args.command
    {
        let bin_dir = bin_dir
            .clone()
            .unwrap_or_else(writ_bench::procs::default_bin_dir);
        let rows = writ_bench::updates::eval(&bin_dir, lines).await?;
        let cost = writ_bench::updates::cost(&bin_dir, *cost_runs).await?;
        let mut out = std::io::stdout();
        writeln!(
            out,
            "### No line lost\n\n{}",
            writ_bench::updates::eval_report(&rows)
        )?;
        writeln!(out, "### A one-line change in a 2,000-line file\n\n{cost}")?;
        return Ok(());
    }
    if let Some(Command::EvalFanout { bin_dir, only }) = &args.command {
        let opts = writ_bench::eval::fanout::Options {
            bin_dir: bin_dir
                .clone()
                .unwrap_or_else(writ_bench::procs::default_bin_dir),
            tasks_dir: writ_bench::eval::tasks::default_dir(),
            only: only.clone(),
        };
        let started = std::time::Instant::now();
        let outcomes = writ_bench::eval::fanout::run(&opts).await?;
        let mut out = std::io::stdout();
        writeln!(out, "{}", writ_bench::eval::fanout::report(&outcomes))?;
        writeln!(out, "Wall time: {:.0} s.", started.elapsed().as_secs_f64())?;
        return Ok(());
    }
    if let Some(Command::EvalRouting {
        bin_dir,
        batches,
        drop_at,
        seed,
    }) = &args.command
    {
        let opts = writ_bench::eval::routing::Options {
            bin_dir: bin_dir
                .clone()
                .unwrap_or_else(writ_bench::procs::default_bin_dir),
            batches: *batches,
            drop_at: *drop_at,
            seed: *seed,
        };
        let started = std::time::Instant::now();
        let outcomes = writ_bench::eval::routing::run(&opts).await?;
        let mut out = std::io::stdout();
        writeln!(
            out,
            "{}",
            writ_bench::eval::routing::report(&outcomes, &opts)
        )?;
        writeln!(out, "Wall time: {:.0} s.", started.elapsed().as_secs_f64())?;
        return Ok(());
    }
    if let Some(Command::EvalChecks {
        bin_dir,
        only,
        configs,
        latency_ms,
        answers,
    }) = &args.command
    {
        let opts = writ_bench::eval::checks::Options {
            bin_dir: bin_dir
                .clone()
                .unwrap_or_else(writ_bench::procs::default_bin_dir),
            tasks_dir: writ_bench::eval::tasks::default_dir(),
            functions: writ_bench::eval::checks::default_functions(),
            only: only.clone(),
            configs: configs.clone(),
            latency_ms: *latency_ms,
            answers_dir: answers.clone(),
        };
        let started = std::time::Instant::now();
        let (set, outcomes) = writ_bench::eval::checks::run(&opts).await?;
        let mut out = std::io::stdout();
        writeln!(out, "{}", writ_bench::eval::checks::report(&set, &outcomes))?;
        writeln!(
            out,
            "Eval wall time: {:.0} s.",
            started.elapsed().as_secs_f64()
        )?;
        return Ok(());
    }
    if let Some(Command::Eval {
        bin_dir,
        tasks,
        only,
        repeat,
        latency_ms,
        answers,
    }) = args.command
    {
        let opts = writ_bench::eval::Options {
            bin_dir: bin_dir.unwrap_or_else(writ_bench::procs::default_bin_dir),
            tasks_dir: tasks.unwrap_or_else(writ_bench::eval::tasks::default_dir),
            only,
            repeat,
            latency_ms,
            answers_dir: answers,
        };
        let started = std::time::Instant::now();
        let outcomes = writ_bench::eval::run(&opts).await?;
        let mut out = std::io::stdout();
        writeln!(out, "{}", writ_bench::eval::report(&outcomes))?;
        writeln!(
            out,
            "Eval wall time: {:.0} s.",
            started.elapsed().as_secs_f64()
        )?;
        return Ok(());
    }
    let outcome = suite(&args).await;
    // However the suite ended, before the repos (`_repos`) go.
    scenarios::drop_databases().await;
    outcome
}

/// The benchmark suite: the tables `args` asks for, on stdout.
async fn suite(args: &Args) -> anyhow::Result<()> {
    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(writ_bench::procs::default_bin_dir);
    let mut plan = if args.quick {
        Plan::quick(bin_dir)
    } else {
        Plan::full(bin_dir)
    };
    if args.sqlite_only {
        plan.backends = vec![Backend::Sqlite];
    }
    if args.postgres_only {
        plan.backends = vec![Backend::Postgres];
    }
    if !args.concurrency.is_empty() {
        plan.ceiling_concurrency.clone_from(&args.concurrency);
    }
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let fake = Fake::start(&plan.bin_dir, plan.latency_ms).await?;
    let mut out = std::io::stdout();
    let mut section = |title: &str, table: &str| -> std::io::Result<()> {
        writeln!(out, "### {title}\n\n{table}")?;
        out.flush()
    };
    if wanted("overhead") {
        let t = scenarios::overhead(&plan, &fake).await?;
        section(
            &format!(
                "1. Overhead (open loop; fake latency {} ms per call, critical path {} ms)",
                plan.latency_ms,
                2 * plan.latency_ms
            ),
            &t,
        )?;
    }
    if wanted("tracing") {
        let t = scenarios::tracing(&plan, &fake).await?;
        section(
            &format!(
                "1b. Traces (the overhead's batches with traces exported over OTLP to the fake's receiver; fake latency {} ms per call)",
                plan.latency_ms
            ),
            &t,
        )?;
    }
    if wanted("workspaces") {
        let t = scenarios::workspaces(&plan, &fake).await?;
        section(
            &format!(
                "1c. Workspaces (1-file batches in default, then in a named workspace with 1 and with 100 registered; fake latency {} ms per call)",
                plan.latency_ms
            ),
            &t,
        )?;
    }
    if wanted("ceiling") {
        let t = scenarios::ceiling(&plan, &fake).await?;
        section("2. Ceiling (closed loop, 5 files × 3 models + arbiter)", &t)?;
    }
    if wanted("stragglers") {
        let t = scenarios::stragglers(&plan, &fake).await?;
        section(
            &format!(
                "3. Stragglers (1 file on {3}; two candidates at {0} ms, one heavy-tailed: median {0} ms, p99 {1} ms; arbiter {0} ms; open loop {2}/s)",
                plan.latency_ms,
                plan.latency_ms * 10,
                plan.straggler_rate,
                plan.backends.last().map_or("SQLite", |b| b.name())
            ),
            &t,
        )?;
    }
    if wanted("audit") {
        let t = scenarios::audit_path(&plan).await?;
        section(
            "4. Audit path alone (request row + pending operation + completion)",
            &t,
        )?;
    }
    // Not in the default suite: it compares two configurations rather than measuring one.
    if args.only.iter().any(|o| o == "map_cpu") {
        let t = scenarios::map_cpu(&plan, 2).await?;
        section(
            "The repository map's CPU per batch (300 five-file batches, 32 in flight, fake latency 5 ms, SQLite; REPO_DIR grows to 1,500 files)",
            &t,
        )?;
    }
    if wanted("replicas") && plan.backends.contains(&Backend::Postgres) {
        let t = scenarios::replicas(&plan, &fake, &args.replicas).await?;
        section(
            &format!(
                "5. Replicas (closed loop, 5 files × 3 models + arbiter, {} batches in flight per replica, one PostgreSQL database and one REPO_DIR; leases and cross-replica path locks on)",
                scenarios::REPLICA_IN_FLIGHT
            ),
            &t,
        )?;
    }
    Ok(())
}
