//! What one sandboxed run costs by the size of REPO_DIR, on the copy-on-write overlay and on the
//! bounded copy, and what checking 1, 3 and 5 candidates at once costs: prints BENCHMARKS.md's
//! tables. `cargo run --release -p writ-sandbox --example run_cost` (as the user writ runs as;
//! `scripts/bench-sandbox` does this).
//!
//! Each run is the whole of what `POST /run` asks of the sandbox: wait for a slot, make the
//! scratch, stage one file, run `python3 check.py` (a one-line script) in bubblewrap, remove the
//! scratch. The median of `REPEAT` runs is shown.
//!
//! `WRIT_BENCH_PRIVATE_PARENT=1` puts every REPO_DIR under a parent at 0700 (a home directory, a
//! `mktemp -d`), which the sandbox uid cannot pass through.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use writ_core::RepoPath;
use writ_core::execution::{CommandCall, CommandRunner, RunLimits};
use writ_sandbox::{CommandSet, Mechanism, Sandbox, SandboxConfig, SandboxRunner};

const SIZES: [usize; 5] = [10, 2_000, 20_000, 60_000, 100_000];
const REPEAT: usize = 7;
const FILES_PER_DIR: usize = 100;

fn main() -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "| files in REPO_DIR | overlay: one run (median ms) | copy: one run (median ms) |"
    )?;
    writeln!(out, "|---:|---:|---:|")?;
    let base = tempfile::tempdir()?;
    searchable(base.path())?;
    let parent = if std::env::var("WRIT_BENCH_PRIVATE_PARENT").as_deref() == Ok("1") {
        let private = base.path().join("private");
        std::fs::create_dir(&private)?;
        std::fs::set_permissions(
            &private,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        private
    } else {
        base.path().to_path_buf()
    };
    let mut big = None;
    for size in SIZES {
        let repo = make_repo(&parent, size)?;
        let overlay = median_run(&repo, base.path(), true).await?;
        let copy = median_run(&repo, base.path(), false).await?;
        writeln!(out, "| {size} | {overlay} | {copy} |")?;
        if size == 20_000 {
            big = Some(repo);
        }
    }
    let Some(repo) = big else { return Ok(()) };
    writeln!(out)?;
    writeln!(
        out,
        "| candidates checked at once (20,000-file REPO_DIR) | overlay (median ms) | copy (median ms) |"
    )?;
    writeln!(out, "|---:|---:|---:|")?;
    for candidates in [1, 3, 5] {
        let overlay = median_batch(&repo, base.path(), true, candidates).await?;
        let copy = median_batch(&repo, base.path(), false, candidates).await?;
        writeln!(out, "| {candidates} | {overlay} | {copy} |")?;
    }
    Ok(())
}

fn searchable(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
}

/// A repository of `size` small files, `FILES_PER_DIR` to a directory.
fn make_repo(base: &Path, size: usize) -> anyhow::Result<std::path::PathBuf> {
    let repo = base.join(format!("repo-{size}"));
    for i in 0..size {
        let dir = repo.join(format!("pkg{}", i / FILES_PER_DIR));
        if i % FILES_PER_DIR == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("m{i}.py")), format!("VALUE = {i}\n"))?;
    }
    Ok(repo)
}

fn config(base: &Path, overlay: bool) -> SandboxConfig {
    SandboxConfig {
        scratch_base: base.join("scratch"),
        overlay,
        max_copy_files: 1_000_000,
        max_copy_bytes: 4 << 30,
        ..SandboxConfig::default()
    }
}

fn runner(sandbox: Sandbox, repo: &Path) -> anyhow::Result<SandboxRunner> {
    let commands = CommandSet::parse(r#"{"python": ["python3", "{args}"]}"#)?;
    Ok(SandboxRunner::new(
        Ok(sandbox),
        commands,
        repo.to_path_buf(),
        RunLimits {
            max_timeout: Duration::from_secs(120),
            max_repair_rounds: 0,
        },
    ))
}

async fn probe(repo: &Path, base: &Path, overlay: bool) -> anyhow::Result<Sandbox> {
    let sandbox = Sandbox::probe(config(base, overlay))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mechanism, why) = sandbox.mechanism(repo);
    let wanted = if overlay {
        Mechanism::Overlay
    } else {
        Mechanism::Copy
    };
    anyhow::ensure!(
        mechanism == wanted,
        "wanted {wanted:?}, got {mechanism:?}: {why:?}"
    );
    Ok(sandbox)
}

fn staged(i: usize) -> anyhow::Result<Vec<(RepoPath, Vec<u8>)>> {
    Ok(vec![(
        RepoPath::parse("check.py")?,
        format!("print({i})\n").into_bytes(),
    )])
}

fn call() -> CommandCall {
    CommandCall {
        name: "python".into(),
        args: vec!["check.py".into()],
    }
}

async fn median_run(repo: &Path, base: &Path, overlay: bool) -> anyhow::Result<u64> {
    let runner = runner(probe(repo, base, overlay).await?, repo)?;
    let mut times = Vec::with_capacity(REPEAT);
    for i in 0..REPEAT {
        let started = Instant::now();
        let outcomes = runner
            .run(&staged(i)?, &[call()], Duration::from_secs(120))
            .await?;
        anyhow::ensure!(outcomes.iter().all(|o| o.passed()), "{outcomes:?}");
        times.push(started.elapsed().as_millis() as u64);
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}

async fn median_batch(
    repo: &Path,
    base: &Path,
    overlay: bool,
    candidates: usize,
) -> anyhow::Result<u64> {
    let runner = Arc::new(runner(probe(repo, base, overlay).await?, repo)?);
    let mut times = Vec::with_capacity(REPEAT);
    for _ in 0..REPEAT {
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for c in 0..candidates {
            let runner = runner.clone();
            let staged = staged(c)?;
            set.spawn(async move {
                runner
                    .run(&staged, &[call()], Duration::from_secs(120))
                    .await
            });
        }
        while let Some(done) = set.join_next().await {
            let outcomes = done??;
            anyhow::ensure!(outcomes.iter().all(|o| o.passed()), "{outcomes:?}");
        }
        times.push(started.elapsed().as_millis() as u64);
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}
