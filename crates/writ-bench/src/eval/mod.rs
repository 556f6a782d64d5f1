//! `writ-bench eval`: how often the correct file is written, with and without execution-verified
//! synthesis (`options.validation`).
//!
//! writ and `writ-fake-upstream` run as separate processes on loopback, as in [`crate::procs`]:
//! the same binaries and HTTP path a caller uses, and the real bubblewrap sandbox. For each task
//! of [`tasks`] and each [`Config`], the fake is scripted over its admin routes (one prompt route
//! per model and file, so each file of a multi-file batch gets its own answers) with one correct
//! and two subtly wrong candidates per file, the correct one at a position that moves from task
//! to task, and an arbiter that always answers `{"choice": 1}`. writ shuffles what the arbiter is
//! shown, so its pick is a draw among the candidates shown. Batches run one at a time, so the
//! latencies are those of an idle server. After each batch the files on disk are compared with
//! the correct versions (trailing whitespace aside).

pub mod checks;
pub mod fanout;
pub mod routing;
pub mod tasks;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::procs::{Fake, Writ};
use tasks::{ARBITER, MODELS, Task, normalise};

/// The commands writ may run: the task tests, with the sandbox's `/usr/bin/python3`.
const COMMANDS: &str = r#"{"python": ["python3", "{args}"]}"#;
/// Per command run; a task's test takes well under a second.
const TIMEOUT_SECS: u64 = 20;

#[derive(Debug, Clone)]
pub struct Options {
    pub bin_dir: PathBuf,
    pub tasks_dir: PathBuf,
    /// Only these task ids (all when empty).
    pub only: Vec<String>,
    /// Each configuration goes over the task set this many times (the arbiter's pick is random).
    pub repeat: usize,
    /// The fake's latency per model call.
    pub latency_ms: u64,
    /// Where to keep every batch's answer (`<config>-<task>.json`), to see why a file was missed.
    pub answers_dir: Option<PathBuf>,
}

/// One way of choosing the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// What a single model call gives: the first model's candidate (from the scripted data).
    FirstCandidate,
    /// writ without `options.validation`: the arbiter among the distinct candidates.
    ArbiterOnly,
    /// `options.validation` with `repair_rounds: 0`: the arbiter only among the passers.
    Validated,
    /// Every first candidate wrong; one model answers the correct file once shown the failure;
    /// `repair_rounds: 2`.
    Repair,
}

impl Config {
    pub const ALL: [Config; 4] = [
        Config::FirstCandidate,
        Config::ArbiterOnly,
        Config::Validated,
        Config::Repair,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Config::FirstCandidate => "1. first candidate (a single model call)",
            Config::ArbiterOnly => "2. arbiter only (no validation)",
            Config::Validated => "3. arbiter + validation (repair_rounds 0)",
            Config::Repair => {
                "4. validation + repair (all first candidates wrong, repair_rounds 2)"
            }
        }
    }

    fn validation(self, task: &Task) -> Option<Value> {
        let rounds = match self {
            Config::FirstCandidate | Config::ArbiterOnly => return None,
            Config::Validated => 0,
            Config::Repair => 2,
        };
        Some(json!({
            "commands": [{"name": "python", "args": [task.test_path()]}],
            "timeout_secs": TIMEOUT_SECS,
            "repair_rounds": rounds,
            "on_fail": "refuse",
        }))
    }

    /// Each model's script for file `f` of task number `index`.
    fn scripts(self, task: &Task, index: usize, f: usize, latency_ms: u64) -> Vec<Value> {
        let code =
            |c: &str| json!({"kind": "code", "lang": "python", "code": c, "prose": index % 2 == 1});
        let latency = (latency_ms > 0).then(|| json!({"kind": "fixed", "ms": latency_ms}));
        let with_latency = |mut s: Value| {
            if let Some(l) = &latency {
                s["latency"] = l.clone();
            }
            s
        };
        match self {
            Config::Repair => {
                let r = task.repairer(index, f);
                task.all_wrong(f)
                    .into_iter()
                    .enumerate()
                    .map(|(k, wrong)| {
                        with_latency(if k == r {
                            json!({"steps": [code(wrong)], "then": code(&task.files[f].correct)})
                        } else {
                            json!({"then": code(wrong)})
                        })
                    })
                    .collect()
            }
            _ => task
                .candidates(index, f)
                .into_iter()
                .map(|c| with_latency(json!({"then": code(c)})))
                .collect(),
        }
    }
}

/// One task under one configuration.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub config: Config,
    pub task: String,
    pub multi: bool,
    pub correct: bool,
    pub latency: Option<Duration>,
    /// The selection method of each file, or its error.
    pub how: Vec<String>,
    /// Per file: whether the written candidate was the first model's first answer.
    pub first_model: Vec<bool>,
}

/// Runs every configuration over the task set; returns the outcomes.
pub async fn run(opts: &Options) -> anyhow::Result<Vec<Outcome>> {
    let mut all = tasks::load(&opts.tasks_dir)?;
    if !opts.only.is_empty() {
        all.retain(|t| opts.only.contains(&t.id));
    }
    // Positions follow the index in the whole set, so a filtered run scripts a task as a full
    // run does.
    let full = tasks::load(&opts.tasks_dir)?;
    let indexed: Vec<(usize, Task)> = all
        .into_iter()
        .map(|t| (full.iter().position(|f| f.id == t.id).unwrap_or(0), t))
        .collect();

    let mut outcomes = Vec::new();
    for _ in 0..opts.repeat.max(1) {
        for (index, task) in &indexed {
            let correct = (0..task.files.len()).all(|f| task.correct_position(*index, f) == 0);
            outcomes.push(Outcome {
                config: Config::FirstCandidate,
                task: task.id.clone(),
                multi: task.files.len() > 1,
                correct,
                latency: None,
                how: vec!["first model".into(); task.files.len()],
                first_model: vec![true; task.files.len()],
            });
        }
    }

    let (fake, client) = fake_and_client(&opts.bin_dir).await?;
    for config in [Config::ArbiterOnly, Config::Validated, Config::Repair] {
        let (_db_dir, writ) = start_writ(&opts.bin_dir, &fake, &MODELS, COMMANDS, &[]).await?;
        let tests = writ.repo_dir().join("tests");
        std::fs::create_dir_all(&tests)?;
        for (_, task) in &indexed {
            std::fs::write(writ.repo_dir().join(task.test_path()), &task.test)?;
        }
        for _ in 0..opts.repeat.max(1) {
            for (index, task) in &indexed {
                let outcome = run_one(&client, &fake, &writ, config, *index, task, opts)
                    .await
                    .with_context(|| format!("task {} in configuration {config:?}", task.id))?;
                outcomes.push(outcome);
            }
        }
        fake.forget_calls(&client).await;
        writ.stop().await;
    }
    Ok(outcomes)
}

async fn run_one(
    client: &reqwest::Client,
    fake: &Fake,
    writ: &Writ,
    config: Config,
    index: usize,
    task: &Task,
    opts: &Options,
) -> anyhow::Result<Outcome> {
    for (f, file) in task.files.iter().enumerate() {
        // A file left by an earlier repeat would be read as this batch's answer.
        let _ = std::fs::remove_file(writ.repo_dir().join(&file.path));
        for (model, script) in MODELS
            .iter()
            .zip(config.scripts(task, index, f, opts.latency_ms))
        {
            let route = json!({
                "model": model,
                // The candidate prompt's first line; repairs keep it as their first message.
                "prompt_contains": format!("Write the file {}", json!(file.path)),
                "script": script,
            });
            fake.route(client, &route).await?;
        }
    }
    let files: Vec<Value> = task
        .files
        .iter()
        .map(|f| json!({"filename": f.path, "code_description": f.description}))
        .collect();
    let mut body = json!({"command": "write_codebase", "files": files});
    if let Some(d) = &task.description {
        body["task_description"] = json!(d);
    }
    if let Some(v) = config.validation(task) {
        body["options"] = json!({"validation": v});
    }
    let name = format!("{config:?}-{}.json", task.id).to_lowercase();
    let (answer, latency) = post_batch(
        client,
        &writ.base_url,
        &body,
        opts.answers_dir.as_deref(),
        &name,
    )
    .await?;
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    let how: Vec<String> = task
        .files
        .iter()
        .map(|f| {
            let r = results.iter().find(|r| r["filename"] == f.path.as_str());
            match r {
                Some(r) if r["success"] == true => {
                    r["selection"].as_str().unwrap_or("?").to_string()
                }
                Some(r) => {
                    let e = r["error"].as_str().unwrap_or("failed");
                    format!("failed ({})", e.split(':').next().unwrap_or(e))
                }
                None => "no result".into(),
            }
        })
        .collect();
    let first_model = task
        .files
        .iter()
        .enumerate()
        .map(|(f, file)| {
            let first = match config {
                Config::Repair => task.all_wrong(f)[0],
                _ => task.candidates(index, f)[0],
            };
            std::fs::read_to_string(writ.repo_dir().join(&file.path))
                .is_ok_and(|written| normalise(&written) == normalise(first))
        })
        .collect();
    let correct = task.files.iter().all(|f| {
        std::fs::read_to_string(writ.repo_dir().join(&f.path))
            .is_ok_and(|written| normalise(&written) == normalise(&f.correct))
    });
    Ok(Outcome {
        config,
        task: task.id.clone(),
        multi: task.files.len() > 1,
        correct,
        latency: Some(latency),
        how,
        first_model,
    })
}

fn rate(hits: usize, n: usize) -> String {
    if n == 0 {
        return "—".into();
    }
    format!("{hits}/{n} = {:.1}%", 100.0 * hits as f64 / n as f64)
}

/// The table, the targets and the misses, in Markdown.
pub fn report(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    out.push_str("| configuration | correct file(s) written | single-file tasks | multi-file tasks | mean batch latency | selection methods (per file) |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for config in Config::ALL {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == config).collect();
        if of.is_empty() {
            continue;
        }
        let hits = |f: &dyn Fn(&&&Outcome) -> bool| {
            let sel: Vec<&&Outcome> = of.iter().filter(f).collect();
            rate(sel.iter().filter(|o| o.correct).count(), sel.len())
        };
        let latencies: Vec<Duration> = of.iter().filter_map(|o| o.latency).collect();
        let latency = if latencies.is_empty() {
            "—".to_string()
        } else {
            let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
            format!("{} ms", mean.as_millis())
        };
        let mut methods: std::collections::BTreeMap<&str, usize> = Default::default();
        for o in &of {
            for h in &o.how {
                *methods.entry(h.as_str()).or_default() += 1;
            }
        }
        let methods = methods
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | **{}** | {} | {} | {latency} | {methods} |",
            config.label(),
            hits(&|_| true),
            hits(&|o| !o.multi),
            hits(&|o| o.multi),
        );
    }
    out.push('\n');
    for (config, target) in [(Config::Validated, 98.0), (Config::Repair, 95.0)] {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == config).collect();
        if of.is_empty() {
            continue;
        }
        let hits = of.iter().filter(|o| o.correct).count();
        let pct = 100.0 * hits as f64 / of.len() as f64;
        let single: Vec<&&Outcome> = of.iter().filter(|o| !o.multi).collect();
        let single_pct =
            100.0 * single.iter().filter(|o| o.correct).count() as f64 / single.len().max(1) as f64;
        let _ = writeln!(
            out,
            "- target for {}: ≥ {target}% — {:.1}%: **{}** (single-file tasks alone: {:.1}%, {})",
            config.label(),
            pct,
            if pct >= target { "met" } else { "not met" },
            single_pct,
            if single_pct >= target {
                "met"
            } else {
                "not met"
            }
        );
    }
    let arbiter: Vec<bool> = outcomes
        .iter()
        .filter(|o| o.config == Config::ArbiterOnly)
        .flat_map(|o| o.first_model.iter().copied())
        .collect();
    if !arbiter.is_empty() {
        let _ = writeln!(
            out,
            "- {}: the file written was the first model's candidate for {} files (a fair draw among three: about a third)",
            Config::ArbiterOnly.label(),
            rate(arbiter.iter().filter(|&&b| b).count(), arbiter.len())
        );
    }
    // Grouped by configuration, task and what the files got, so repeats read as one line.
    let mut misses: Vec<(Config, &str, String, usize, usize)> = Vec::new();
    for o in outcomes
        .iter()
        .filter(|o| matches!(o.config, Config::Validated | Config::Repair))
    {
        let how = o.how.join(", ");
        let runs = outcomes
            .iter()
            .filter(|p| p.config == o.config && p.task == o.task)
            .count();
        if o.correct {
            continue;
        }
        match misses
            .iter_mut()
            .find(|m| m.0 == o.config && m.1 == o.task && m.2 == how)
        {
            Some(m) => m.3 += 1,
            None => misses.push((o.config, o.task.as_str(), how, 1, runs)),
        }
    }
    if !misses.is_empty() {
        out.push_str("\nMisses with validation (task, runs missed: what each file got):\n\n");
        for (config, task, how, n, runs) in misses {
            let _ = writeln!(out, "- {} — {task}, {n} of {runs}: {how}", config.label());
        }
    }
    out
}

/// Sends one batch to writ and waits for its answer, which is kept in `answers_dir` as `name`
/// when one is given; also how long the answer took.
pub(crate) async fn post_batch(
    client: &reqwest::Client,
    base_url: &str,
    body: &Value,
    answers_dir: Option<&std::path::Path>,
    name: &str,
) -> anyhow::Result<(Value, std::time::Duration)> {
    let started = Instant::now();
    let resp = client
        .post(format!("{base_url}/write_codebase"))
        .json(body)
        .send()
        .await?;
    let status = resp.status();
    let answer: Value = resp.json().await?;
    let latency = started.elapsed();
    if !status.is_success() {
        anyhow::bail!("writ answered {status}: {answer}");
    }
    if let Some(dir) = answers_dir {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(name), serde_json::to_vec_pretty(&answer)?)?;
    }
    Ok((answer, latency))
}

/// The fake upstream whose arbiter picks the first candidate, and a client patient enough for
/// one eval batch: what every eval starts from.
pub(crate) async fn fake_and_client(bin_dir: &Path) -> anyhow::Result<(Fake, reqwest::Client)> {
    let script = json!({"models": {ARBITER: {"then": {"kind": "verdict", "choice": 1, "reason": "the first one"}}}});
    let fake = Fake::start_with(bin_dir, &script).await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    Ok((fake, client))
}

/// A fresh writ on a SQLite database of its own (kept while the returned directory lives):
/// `models` as its candidates, the arbiter, `commands` as `WRIT_COMMANDS`, `extra` on top.
pub(crate) async fn start_writ(
    bin_dir: &Path,
    fake: &Fake,
    models: &[&str],
    commands: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<(tempfile::TempDir, Writ)> {
    let db_dir = tempfile::tempdir()?;
    let db = writ_store::testing::fresh_sqlite_url(db_dir.path());
    let code_list = models.join(",");
    let mut env = vec![
        ("CODE_LIST", code_list.as_str()),
        ("CODE_MODEL", ARBITER),
        ("WRIT_COMMANDS", commands),
    ];
    env.extend_from_slice(extra);
    let writ = Writ::start(bin_dir, fake, &db, &env).await?;
    Ok((db_dir, writ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(config: Config, task: &str, correct: bool, how: &str) -> Outcome {
        Outcome {
            config,
            task: task.into(),
            multi: false,
            correct,
            latency: Some(Duration::from_millis(100)),
            how: vec![how.into()],
            first_model: vec![false],
        }
    }

    #[test]
    fn the_report_counts_rates_checks_targets_and_groups_repeated_misses() {
        let mut outcomes = Vec::new();
        for _ in 0..2 {
            outcomes.push(outcome(Config::Validated, "a", true, "validated"));
            outcomes.push(outcome(
                Config::Validated,
                "b",
                false,
                "failed (validation_failed)",
            ));
        }
        outcomes.push(outcome(Config::Repair, "a", true, "repaired"));
        let report = report(&outcomes);
        assert!(
            report.contains("| **2/4 = 50.0%** | 2/4 = 50.0% | — | 100 ms |"),
            "{report}"
        );
        assert!(report.contains("50.0%: **not met**"), "{report}");
        assert!(report.contains("100.0%: **met**"), "{report}");
        assert!(
            report.contains("— b, 2 of 2: failed (validation_failed)"),
            "{report}"
        );
    }
}
