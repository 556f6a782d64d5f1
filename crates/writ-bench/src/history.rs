//! What history costs (`writ-bench history`): a commit per request on a repository of 20,000
//! files, and the undo of a five-file batch.
//!
//! writ and the fake upstream run as processes, writ over a generated git repository (the files
//! committed once, by the `git` program, as a user's repository would be). Batches of five new
//! files alternate between `options.commit: false` and `true`, so both sides see the same
//! repository and the same machine; what the commit adds is the difference of their medians.
//! Then five-file batches are undone (`POST /requests/{id}/undo`), with and without `commit`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::procs::{Fake, Writ};
use crate::stats::{Summary, ms};

/// Files per folder of the generated repository.
const PER_FOLDER: usize = 100;

/// Makes `dir` a git repository of `files` small Python files, committed.
fn repository(dir: &Path, files: usize) -> anyhow::Result<()> {
    for i in 0..files {
        let folder = dir.join(format!("pkg{:03}", i / PER_FOLDER));
        if i % PER_FOLDER == 0 {
            std::fs::create_dir_all(&folder)?;
        }
        std::fs::write(
            folder.join(format!("m{i}.py")),
            format!("def f{i}(x):\n    return x + {i}\n"),
        )?;
    }
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        // No automatic gc in the background while the batches are timed; a packed repository
        // instead, as a user's long-lived one is.
        &[
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            "commit",
            "-q",
            "-m",
            "start",
        ],
        &["gc", "-q"],
    ] {
        let out = Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .context("running git (the repository is set up with it)")?;
        anyhow::ensure!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn five_files(round: usize, commit: bool) -> Value {
    let files: Vec<Value> = (0..5)
        .map(|j| {
            json!({"filename": format!("new/r{round}/f{j}.py"),
                   "code_description": "a function add(a, b)"})
        })
        .collect();
    json!({"command": "write_codebase", "files": files, "options": {"commit": commit}})
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<(Value, f64)> {
    let started = Instant::now();
    let r = client.post(url).json(body).send().await?;
    let status = r.status();
    let answer: Value = r.json().await?;
    let took = started.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(status.is_success(), "{url}: {status} {answer}");
    Ok((answer, took))
}

/// The two tables, as BENCHMARKS.md prints them.
pub async fn run(bin_dir: &Path, files: usize, rounds: usize) -> anyhow::Result<String> {
    let db_dir = tempfile::tempdir()?;
    let repo = tempfile::tempdir()?;
    let made = Instant::now();
    repository(repo.path(), files)?;
    let setup = made.elapsed();
    let fake = Fake::start(bin_dir, 0).await?;
    let db = writ_store::testing::fresh_sqlite_url(db_dir.path());
    let writ = Writ::start_over(bin_dir, &fake, &db, repo.path(), &[]).await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let batches = format!("{}/write_codebase", writ.base_url);

    // Batches: without and with their commit, alternating (a warm-up pair first).
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut commits = 0;
    for round in 0..=rounds {
        for commit in [false, true] {
            let (answer, took) = post(
                &client,
                &batches,
                &five_files(2 * round + usize::from(commit), commit),
            )
            .await?;
            anyhow::ensure!(answer["succeeded"] == 5, "a batch failed: {answer}");
            if round == 0 {
                continue;
            }
            if commit {
                commits += usize::from(answer["commit"].is_string());
                with.push(took);
            } else {
                without.push(took);
            }
        }
    }
    anyhow::ensure!(
        commits == rounds,
        "{commits} of {rounds} batches were committed"
    );

    // Undo of a five-file batch, without and with its commit.
    let mut undo_without = Vec::new();
    let mut undo_with = Vec::new();
    for round in 0..rounds {
        for commit in [false, true] {
            let batch = five_files(1_000_000 + 2 * round + usize::from(commit), commit);
            let (answer, _) = post(&client, &batches, &batch).await?;
            let id = answer["request_id"].as_str().unwrap_or_default();
            let (undone, took) = post(
                &client,
                &format!("{}/requests/{id}/undo", writ.base_url),
                &json!({"commit": commit}),
            )
            .await?;
            anyhow::ensure!(
                undone["files"].as_array().map(Vec::len) == Some(5),
                "the undo did not undo five files: {undone}"
            );
            if commit {
                undo_with.push(took);
            } else {
                undo_without.push(took);
            }
        }
    }
    writ.stop().await;

    let (a, b) = (Summary::of(&without), Summary::of(&with));
    let (u, v) = (Summary::of(&undo_without), Summary::of(&undo_with));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Repository: {files} files in {} folders, committed ({} s to generate and commit). Fake upstream latency 0 ms (3 candidates + arbiter); SQLite; {rounds} batches a row.\n",
        files.div_ceil(PER_FOLDER),
        setup.as_secs()
    );
    out.push_str("| five-file batch | p50 | p90 | p99 |\n|---|---|---|---|\n");
    for (label, s) in [("without commit", a), ("with `options.commit: true`", b)] {
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} |",
            ms(s.p50),
            ms(s.p90),
            ms(s.p99)
        );
    }
    let _ = writeln!(
        out,
        "\nThe commit adds {} at p50 (target ≤ 10 ms).\n",
        ms(b.p50 - a.p50)
    );
    out.push_str("| undo of a five-file batch | p50 | p90 | p99 |\n|---|---|---|---|\n");
    for (label, s) in [
        ("without commit", u),
        ("with `commit: true` (a revert commit)", v),
    ] {
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} |",
            ms(s.p50),
            ms(s.p90),
            ms(s.p99)
        );
    }
    drop(repo);
    Ok(out)
}
