//! `writ-bench eval-fanout`: what `options.fanout` saves against the full fan-out, at equal
//! correctness, on the task set of [`super::tasks`] with the caller's tests.
//!
//! The same scripting as `writ-bench eval`'s configuration 3 (one correct and two subtly wrong
//! candidates per file, the correct one at a position moving with the task, the task's test as
//! `options.validation`, `repair_rounds: 0`), except that the three models answer after
//! different fixed latencies, as real models do, so that stopping early has calls to stop:
//! the first model of the list is the fastest. Model calls are counted from the fake's call
//! record (every call that reached it, the arbiter's included); tokens are the candidates'
//! prompt and completion tokens from the answer (a cancelled call counts none).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::tasks::{self, MODELS, Task, normalise};
use crate::procs::{Fake, Writ};

const COMMANDS: &str = r#"{"python": ["python3", "{args}"]}"#;
const TIMEOUT_SECS: u64 = 20;
/// Each model's latency, in [`MODELS`] order.
pub const LATENCIES_MS: [u64; 3] = [300, 600, 900];

/// One way of fanning out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Full,
    StopWhenPassing,
    FirstRound,
    FirstRoundStop,
}

impl Mode {
    pub const ALL: [Mode; 4] = [
        Mode::Full,
        Mode::StopWhenPassing,
        Mode::FirstRound,
        Mode::FirstRoundStop,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Mode::Full => "full fan-out (no options.fanout)",
            Mode::StopWhenPassing => "stop_when_passing",
            Mode::FirstRound => "first_round: 1",
            Mode::FirstRoundStop => "first_round: 1, stop_when_passing",
        }
    }

    fn fanout(self) -> Option<Value> {
        match self {
            Mode::Full => None,
            Mode::StopWhenPassing => Some(json!({"stop_when_passing": true})),
            Mode::FirstRound => Some(json!({"first_round": 1})),
            Mode::FirstRoundStop => Some(json!({"first_round": 1, "stop_when_passing": true})),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub mode: Mode,
    pub correct: bool,
    pub latency: Duration,
    pub calls: usize,
    pub tokens: u64,
    pub not_asked: usize,
    pub stopped: usize,
}

pub struct Options {
    pub bin_dir: PathBuf,
    pub tasks_dir: PathBuf,
    pub only: Vec<String>,
}

/// Every mode over the task set.
pub async fn run(opts: &Options) -> anyhow::Result<Vec<Outcome>> {
    let mut set = tasks::load(&opts.tasks_dir)?;
    if !opts.only.is_empty() {
        set.retain(|t| opts.only.contains(&t.id));
    }
    let (fake, client) = super::fake_and_client(&opts.bin_dir).await?;
    let mut outcomes = Vec::new();
    for mode in Mode::ALL {
        let (_db_dir, writ) =
            super::start_writ(&opts.bin_dir, &fake, &MODELS, COMMANDS, &[]).await?;
        std::fs::create_dir_all(writ.repo_dir().join("tests"))?;
        for task in &set {
            std::fs::write(writ.repo_dir().join(task.test_path()), &task.test)?;
        }
        for (index, task) in set.iter().enumerate() {
            let o = run_one(&client, &fake, &writ, mode, index, task)
                .await
                .with_context(|| format!("task {} in {mode:?}", task.id))?;
            outcomes.push(o);
        }
        writ.stop().await;
    }
    Ok(outcomes)
}

async fn run_one(
    client: &reqwest::Client,
    fake: &Fake,
    writ: &Writ,
    mode: Mode,
    index: usize,
    task: &Task,
) -> anyhow::Result<Outcome> {
    for (f, file) in task.files.iter().enumerate() {
        let _ = std::fs::remove_file(writ.repo_dir().join(&file.path));
        for ((model, code), ms) in MODELS
            .iter()
            .zip(task.candidates(index, f))
            .zip(LATENCIES_MS)
        {
            let route = json!({
                "model": model,
                "prompt_contains": format!("Write the file {}", json!(file.path)),
                "script": {"then": {"kind": "code", "lang": "python", "code": code}, "latency": {"kind": "fixed", "ms": ms}},
            });
            fake.route(client, &route).await?;
        }
    }
    fake.forget_calls(client).await;
    let files: Vec<Value> = task
        .files
        .iter()
        .map(|f| json!({"filename": f.path, "code_description": f.description}))
        .collect();
    let mut body = json!({"command": "write_codebase", "files": files});
    if let Some(d) = &task.description {
        body["task_description"] = json!(d);
    }
    body["options"] = json!({"validation": {
        "commands": [{"name": "python", "args": [task.test_path()]}],
        "timeout_secs": TIMEOUT_SECS,
        "repair_rounds": 0,
        "on_fail": "refuse",
    }});
    if let Some(f) = mode.fanout() {
        body["options"]["fanout"] = f;
    }
    let (answer, latency) = super::post_batch(
        client,
        &writ.base_url,
        &body,
        None,
        &format!("fanout-{mode:?}-{}.json", task.id),
    )
    .await?;
    let calls: Vec<Value> = fake.calls(client).await?;
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    let mut tokens = 0u64;
    let (mut not_asked, mut stopped) = (0usize, 0usize);
    for r in &results {
        for c in r["candidates"].as_array().into_iter().flatten() {
            tokens += c["prompt_tokens"].as_u64().unwrap_or(0)
                + c["completion_tokens"].as_u64().unwrap_or(0);
        }
        let saved = &r["validation"]["saved"];
        not_asked += saved["not_asked"].as_array().map_or(0, Vec::len);
        stopped += saved["stopped"].as_array().map_or(0, Vec::len);
    }
    let correct = task.files.iter().all(|f| {
        std::fs::read_to_string(writ.repo_dir().join(&f.path))
            .is_ok_and(|written| normalise(&written) == normalise(&f.correct))
    });
    Ok(Outcome {
        mode,
        correct,
        latency,
        calls: calls.len(),
        tokens,
        not_asked,
        stopped,
    })
}

/// The table, in Markdown.
pub fn report(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    out.push_str("| options.fanout | correct file(s) written | model calls / batch | candidate tokens / batch | calls not made / batch | calls stopped / batch | mean batch latency |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for mode in Mode::ALL {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.mode == mode).collect();
        if of.is_empty() {
            continue;
        }
        let n = of.len() as f64;
        let hits = of.iter().filter(|o| o.correct).count();
        let mean = |f: &dyn Fn(&Outcome) -> f64| of.iter().map(|o| f(o)).sum::<f64>() / n;
        let _ = writeln!(
            out,
            "| {} | {hits}/{} = {:.1}% | {:.2} | {:.0} | {:.2} | {:.2} | {:.0} ms |",
            mode.label(),
            of.len(),
            100.0 * hits as f64 / n,
            mean(&|o| o.calls as f64),
            mean(&|o| o.tokens as f64),
            mean(&|o| o.not_asked as f64),
            mean(&|o| o.stopped as f64),
            mean(&|o| o.latency.as_secs_f64() * 1000.0),
        );
    }
    out
}
