//! Changes to existing files, measured (`writ-bench updates`): does the right file land, and is a
//! line of the existing file ever lost — whatever the models answer — and what edits save against
//! whole-file answers.
//!
//! writ and the fake upstream run as processes. Each row seeds an existing Python module (50 to
//! 3,000 lines of small functions) and asks `POST /write_codebase` to add one function at its end;
//! the three candidate models answer as real models do on updates: correct SEARCH/REPLACE edits,
//! complete whole files, whole files with a "rest of the file unchanged" placeholder, whole files
//! silently halved, whole files cut off mid-way (no closing fence), edits that do not apply, or one
//! complete whole file among lazy and halved ones. The file on disk is then compared with the
//! correct one, and the original's lines missing from it are counted.
//!
//! The cost table: one changed line in a 2,000-line file, the fake streaming each answer at about
//! 100 tokens/s (16 characters every 40 ms), whole-file answers against edit answers.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::procs::{ARBITER, Fake, MODELS, Writ};

/// Lines per function of the seeded module (`def`, `return`, two blank lines).
const LINES_PER_FUNCTION: usize = 4;
const NEW_FUNCTION: &str = "def added(x):\n    return x * 2\n";
/// One SSE piece of the fake is 16 characters (≈ 4 of its tokens): 40 ms a piece ≈ 100 tokens/s.
const TRICKLE_MS: u64 = 40;

fn module(functions: usize) -> String {
    (0..functions)
        .map(|i| format!("def f{i}(x):\n    return x + {i}\n\n\n"))
        .collect()
}

/// How the three candidate models answer in one row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answers {
    Edits,
    Complete,
    Lazy,
    Halved,
    CutOff,
    EditsThatMiss,
    OneCompleteAmongLazy,
}

impl Answers {
    pub const ALL: [Answers; 7] = [
        Answers::Edits,
        Answers::Complete,
        Answers::Lazy,
        Answers::Halved,
        Answers::CutOff,
        Answers::EditsThatMiss,
        Answers::OneCompleteAmongLazy,
    ];

    fn label(self) -> &'static str {
        match self {
            Answers::Edits => "edits (SEARCH/REPLACE)",
            Answers::Complete => "complete whole files",
            Answers::Lazy => "lazy whole files (\"# ... rest of the file unchanged ...\")",
            Answers::Halved => "whole files silently halved",
            Answers::CutOff => "whole files cut off mid-way (no closing fence)",
            Answers::EditsThatMiss => "edits that do not apply (twice)",
            Answers::OneCompleteAmongLazy => "one complete whole file, one lazy, one halved",
        }
    }

    /// Whether a correct candidate exists, so the correct file must land; otherwise the file
    /// must stay as it was.
    fn correct_exists(self) -> bool {
        matches!(
            self,
            Answers::Edits | Answers::Complete | Answers::OneCompleteAmongLazy
        )
    }
}

fn text(content: String) -> Value {
    json!({"kind": "text", "content": content})
}

fn edit_answer(functions: usize) -> String {
    let last = functions - 1;
    format!(
        "mod.py\n```python\n<<<<<<< SEARCH\ndef f{last}(x):\n    return x + {last}\n=======\ndef f{last}(x):\n    return x + {last}\n\n\n{NEW_FUNCTION}>>>>>>> REPLACE\n```\n"
    )
}

fn whole(code: &str) -> String {
    format!("```python\n{code}```\n")
}

/// The three models' scripts for a row.
fn scripts(answers: Answers, functions: usize) -> [Value; 3] {
    let original = module(functions);
    let complete = whole(&format!("{original}{NEW_FUNCTION}"));
    let lazy = whole(&format!(
        "{}# ... rest of the file unchanged ...\n\n\n{NEW_FUNCTION}",
        module(2)
    ));
    let halved = whole(&format!("{}{NEW_FUNCTION}", module(functions / 2)));
    let cut = format!("```python\n{}", &original[..original.len() * 2 / 3]);
    let miss =
        "<<<<<<< SEARCH\ndef f0(x):\n    return x + 1000000\n=======\nx = 1\n>>>>>>> REPLACE\n"
            .to_string();
    let always = |content: String| json!({"then": text(content)});
    match answers {
        Answers::Edits => [0, 1, 2].map(|_| always(edit_answer(functions))),
        Answers::Complete => [0, 1, 2].map(|_| always(complete.clone())),
        Answers::Lazy => [0, 1, 2].map(|_| always(lazy.clone())),
        Answers::Halved => [0, 1, 2].map(|_| always(halved.clone())),
        Answers::CutOff => [0, 1, 2].map(|_| always(cut.clone())),
        Answers::EditsThatMiss => [0, 1, 2].map(|_| always(miss.clone())),
        Answers::OneCompleteAmongLazy => [always(lazy), always(halved), always(complete)],
    }
}

/// Lines of `original` that `written` no longer has (as a multiset).
fn lines_lost(original: &str, written: &str) -> usize {
    let mut have: std::collections::HashMap<&str, usize> = Default::default();
    for l in written.lines() {
        *have.entry(l).or_default() += 1;
    }
    original
        .lines()
        .filter(|l| match have.get_mut(l) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .count()
}

/// One row's outcome.
pub struct Row {
    pub lines: usize,
    pub answers: Answers,
    pub correct: bool,
    pub lines_lost: usize,
    pub latency: Duration,
    pub error_classes: String,
}

async fn script(
    client: &reqwest::Client,
    fake: &Fake,
    model: &str,
    script: &Value,
) -> anyhow::Result<()> {
    let admin = fake.base_url.trim_end_matches("/v1");
    client
        .put(format!("{admin}/_fake/script/{model}"))
        .json(script)
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

fn batch() -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "mod.py", "code_description": "add a function added(x) returning x * 2 at the end of the module"}]})
}

/// The fake (with a first-position arbiter), writ on a fresh SQLite file, and a client that
/// waits as long as a streamed whole-file answer takes.
async fn start(bin_dir: &Path) -> anyhow::Result<(tempfile::TempDir, Fake, Writ, reqwest::Client)> {
    let db_dir = tempfile::tempdir()?;
    let fake = Fake::start_with(
        bin_dir,
        &json!({"models": {ARBITER: {"then": {"kind": "verdict", "choice": 1, "reason": "the first"}}}}),
    )
    .await?;
    let db = writ_store::testing::fresh_sqlite_url(db_dir.path());
    let writ = Writ::start(bin_dir, &fake, &db, &[("WRIT_MODEL_DEADLINE_SECS", "600")]).await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    Ok((db_dir, fake, writ, client))
}

/// The no-loss table: every size against every way of answering.
pub async fn eval(bin_dir: &Path, sizes: &[usize]) -> anyhow::Result<Vec<Row>> {
    let (_db_dir, fake, writ, client) = start(bin_dir).await?;
    let mut rows = Vec::new();
    for &lines in sizes {
        let functions = (lines / LINES_PER_FUNCTION).max(2);
        let original = module(functions);
        let correct = format!("{original}{NEW_FUNCTION}\n\n");
        for answers in Answers::ALL {
            for (model, s) in MODELS.iter().zip(scripts(answers, functions)) {
                script(&client, &fake, model, &s).await?;
            }
            let path = writ.repo_dir().join("mod.py");
            std::fs::write(&path, &original)?;
            let started = Instant::now();
            let resp = client
                .post(format!("{}/write_codebase", writ.base_url))
                .json(&batch())
                .send()
                .await?;
            let latency = started.elapsed();
            let answer: Value = resp.json().await?;
            let written = std::fs::read_to_string(&path)?;
            let expected = if answers.correct_exists() {
                &correct
            } else {
                &original
            };
            let classes: Vec<String> = answer["results"][0]["candidates"]
                .as_array()
                .into_iter()
                .flatten()
                .take(MODELS.len())
                .map(|c| c["error_class"].as_str().unwrap_or("viable").to_string())
                .collect();
            rows.push(Row {
                lines: original.lines().count(),
                answers,
                correct: written.trim_end() == expected.trim_end(),
                lines_lost: lines_lost(&original, &written),
                latency,
                error_classes: classes.join(", "),
            });
        }
        fake.forget_calls(&client).await;
    }
    writ.stop().await;
    Ok(rows)
}

pub fn eval_report(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str("| file (lines) | the three models answer | right file on disk | lines lost | batch latency | candidates' error classes |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | **{}** | {} ms | {} |",
            r.lines,
            r.answers.label(),
            if r.correct { "yes" } else { "**no**" },
            r.lines_lost,
            r.latency.as_millis(),
            r.error_classes,
        );
    }
    let right = rows.iter().filter(|r| r.correct).count();
    let lost: usize = rows.iter().map(|r| r.lines_lost).sum();
    let _ = writeln!(
        out,
        "\nRight file on disk in {right} of {} rows (the complete change where one was offered, the file untouched where none was); lines of the existing files lost over all rows: **{lost}**.",
        rows.len()
    );
    out
}

/// What one batch of the cost table cost.
struct Cost {
    completion_tokens: u64,
    latency: Duration,
}

async fn one_line_change(
    client: &reqwest::Client,
    fake: &Fake,
    writ: &Writ,
    whole_file: bool,
) -> anyhow::Result<Cost> {
    let functions = 500; // 2,000 lines
    let original = module(functions);
    let changed = original.replace("    return x + 250\n", "    return x + 250 + 1\n");
    let answer = if whole_file {
        whole(&changed)
    } else {
        "<<<<<<< SEARCH\ndef f250(x):\n    return x + 250\n=======\ndef f250(x):\n    return x + 250 + 1\n>>>>>>> REPLACE\n".to_string()
    };
    for model in MODELS {
        script(
            client,
            fake,
            model,
            &json!({"then": text(answer.clone()), "trickle_ms": TRICKLE_MS}),
        )
        .await?;
    }
    let path = writ.repo_dir().join("mod.py");
    std::fs::write(&path, &original)?;
    let started = Instant::now();
    let body = json!({"command": "write_codebase",
                      "files": [{"filename": "mod.py", "code_description": "f250 returns x + 250 + 1"}]});
    let resp: Value = client
        .post(format!("{}/write_codebase", writ.base_url))
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    let latency = started.elapsed();
    anyhow::ensure!(
        std::fs::read_to_string(&path)? == changed,
        "the change did not land: {resp}"
    );
    let completion_tokens = resp["results"][0]["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["completion_tokens"].as_u64())
        .sum();
    Ok(Cost {
        completion_tokens,
        latency,
    })
}

/// The cost table: whole-file answers against edit answers for a one-line change.
pub async fn cost(bin_dir: &Path, runs: usize) -> anyhow::Result<String> {
    let (_db_dir, fake, writ, client) = start(bin_dir).await?;
    let mut out = String::new();
    out.push_str("| answers | completion tokens (3 candidates) | batch latency, median of runs |\n|---|---|---|\n");
    let mut measured = Vec::new();
    for whole_file in [true, false] {
        let mut latencies = Vec::new();
        let mut tokens = 0;
        for _ in 0..runs.max(1) {
            let c = one_line_change(&client, &fake, &writ, whole_file).await?;
            latencies.push(c.latency);
            tokens = c.completion_tokens;
        }
        latencies.sort();
        let median = latencies[latencies.len() / 2];
        let label = if whole_file {
            "whole file"
        } else {
            "edits (SEARCH/REPLACE)"
        };
        let _ = writeln!(out, "| {label} | {tokens} | {} ms |", median.as_millis());
        measured.push((tokens, median));
    }
    if let [(whole_tokens, whole_latency), (edit_tokens, edit_latency)] = measured[..] {
        let _ = writeln!(
            out,
            "\nEdits use {:.1} % of the whole-file completion tokens (target ≤ 5 %) and answer {:.1}× faster (target ≥ 5×).",
            100.0 * edit_tokens as f64 / whole_tokens.max(1) as f64,
            whole_latency.as_secs_f64() / edit_latency.as_secs_f64().max(1e-9)
        );
    }
    writ.stop().await;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_lines_are_counted_as_a_multiset() {
        assert_eq!(lines_lost("a\nb\nb\nc\n", "a\nb\nc\nd\n"), 1);
        assert_eq!(lines_lost("a\nb\n", "a\nb\nnew\n"), 0);
    }
}
