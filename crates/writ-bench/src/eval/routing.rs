//! `writ-bench eval-routing`: what adaptive routing (`WRIT_ROUTING=adaptive`) saves against the
//! full fan-out, at equal correctness, and how many files it takes to notice a model's drop.
//!
//! Three scripted models win in different languages, as real ones do: `eval-py` passes 90% of
//! Python files and 30% of JavaScript ones, `eval-js` the other way round, and `eval-pricey`
//! 60% of both at ten times the price. Which model is right for which file is drawn from a
//! seeded hash, so both configurations see the same answers. Each batch writes one file
//! (Python and JavaScript in turn) with the caller's test as `options.validation` (python3 or
//! node in the sandbox), so a wrong candidate is caught and the next models are asked. After
//! `drop_at` batches, `eval-py`'s Python quality falls to 20%: the recovery figure is how many
//! Python files later routing stopped asking it alone.
//!
//! Calls are counted from the fake's record (every call that reached it); cost is the
//! candidates' tokens at the prices below, since the fake charges every model alike.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::{Value, json};

use crate::procs::{Fake, Writ};

const COMMANDS: &str = r#"{"python": ["python3", "{args}"], "node": ["node", "{args}"]}"#;
const TIMEOUT_SECS: u64 = 20;

/// Each model: its name, its pass rate on Python and JavaScript files, and its price in
/// dollars per million prompt and completion tokens.
pub const MODELS: [(&str, f64, f64, f64, f64); 3] = [
    ("eval-py", 0.9, 0.3, 1.0, 2.0),
    ("eval-js", 0.3, 0.9, 1.0, 2.0),
    ("eval-pricey", 0.6, 0.6, 10.0, 20.0),
];
/// `eval-py`'s Python pass rate after the drop.
pub const DROPPED_RATE: f64 = 0.2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Full,
    Adaptive,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Full, Mode::Adaptive];

    pub fn label(self) -> &'static str {
        match self {
            Mode::Full => "full fan-out (routing off)",
            Mode::Adaptive => "WRIT_ROUTING=adaptive",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub mode: Mode,
    pub batch: usize,
    pub python: bool,
    pub correct: bool,
    pub calls: usize,
    pub cost: f64,
    /// The models routing asked first (empty without routing).
    pub asked_first: Vec<String>,
}

pub struct Options {
    pub bin_dir: PathBuf,
    pub batches: usize,
    pub drop_at: usize,
    pub seed: u64,
}

/// Whether `model` answers batch `b` correctly.
fn correct_for(model: usize, b: usize, python: bool, dropped: bool, seed: u64) -> bool {
    let (_, py, js, _, _) = MODELS[model];
    let rate = match (python, dropped && model == 0) {
        (true, true) => DROPPED_RATE,
        (true, false) => py,
        (false, _) => js,
    };
    unit(seed ^ ((b as u64) << 8) ^ model as u64) < rate
}

/// A uniform draw in [0, 1) from `x` (SplitMix64's finaliser).
fn unit(x: u64) -> f64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Both configurations over the same batches.
pub async fn run(opts: &Options) -> anyhow::Result<Vec<Outcome>> {
    let (fake, client) = super::fake_and_client(&opts.bin_dir).await?;
    let models: Vec<&str> = MODELS.iter().map(|m| m.0).collect();
    let mut outcomes = Vec::new();
    for mode in Mode::ALL {
        let extra: &[(&str, &str)] = match mode {
            Mode::Full => &[],
            Mode::Adaptive => &[("WRIT_ROUTING", "adaptive")],
        };
        let (_db_dir, writ) =
            super::start_writ(&opts.bin_dir, &fake, &models, COMMANDS, extra).await?;
        std::fs::create_dir_all(writ.repo_dir().join("tests"))?;
        for b in 0..opts.batches {
            let o = run_one(&client, &fake, &writ, mode, b, opts)
                .await
                .with_context(|| format!("batch {b} in {mode:?}"))?;
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
    b: usize,
    opts: &Options,
) -> anyhow::Result<Outcome> {
    let python = b.is_multiple_of(2);
    let expected = b * 7 + 3;
    let (path, test_path, test, command) = if python {
        (
            format!("mod_{b}.py"),
            format!("tests/test_mod_{b}.py"),
            format!(
                "import sys\nsys.path.insert(0, '.')\nimport mod_{b}\nassert mod_{b}.value() == {expected}\n"
            ),
            "python",
        )
    } else {
        (
            format!("mod_{b}.js"),
            format!("tests/test_mod_{b}.js"),
            format!(
                "const m = require('../mod_{b}.js');\nif (m.value() !== {expected}) {{ console.error('wrong value'); process.exit(1); }}\n"
            ),
            "node",
        )
    };
    std::fs::write(writ.repo_dir().join(&test_path), &test)?;
    let code = |value: usize| {
        if python {
            format!("def value():\n    return {value}\n")
        } else {
            format!("function value() {{\n  return {value};\n}}\n\nmodule.exports = {{ value }};\n")
        }
    };
    let dropped = b >= opts.drop_at;
    for (k, (model, ..)) in MODELS.iter().enumerate() {
        let ok = correct_for(k, b, python, dropped, opts.seed);
        let route = json!({
            "model": model,
            "prompt_contains": format!("Write the file {}", json!(path)),
            "script": {"then": {
                "kind": "code",
                "lang": if python { "python" } else { "javascript" },
                "code": code(if ok { expected } else { expected + 1 }),
            }},
        });
        fake.route(client, &route).await?;
    }
    fake.forget_calls(client).await;
    let body = json!({
        "command": "write_codebase",
        "files": [{"filename": path, "code_description": "value() returns the task's number"}],
        "options": {"validation": {
            "commands": [{"name": command, "args": [test_path]}],
            "timeout_secs": TIMEOUT_SECS,
            "repair_rounds": 0,
            "on_fail": "refuse",
        }},
    });
    let (answer, _) = super::post_batch(
        client,
        &writ.base_url,
        &body,
        None,
        &format!("routing-{mode:?}-{b}.json"),
    )
    .await?;
    let calls: Vec<Value> = fake.calls(client).await?;
    let result = &answer["results"][0];
    let mut cost = 0.0;
    for c in result["candidates"].as_array().into_iter().flatten() {
        let price = MODELS
            .iter()
            .find(|m| c["model"] == m.0)
            .map_or((0.0, 0.0), |m| (m.3, m.4));
        cost += (c["prompt_tokens"].as_f64().unwrap_or(0.0) * price.0
            + c["completion_tokens"].as_f64().unwrap_or(0.0) * price.1)
            / 1e6;
    }
    let correct = std::fs::read_to_string(writ.repo_dir().join(&path))
        .is_ok_and(|written| written.trim_end() == code(expected).trim_end());
    let asked_first = result["routing"]["asked"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(Outcome {
        mode,
        batch: b,
        python,
        correct,
        calls: calls.len(),
        cost,
        asked_first,
    })
}

/// The table and the recovery figure, in Markdown.
pub fn report(outcomes: &[Outcome], opts: &Options) -> String {
    let mut out = String::new();
    out.push_str("| routing | correct files | model calls / file | cost / correct file | calls / file, Python | calls / file, JavaScript |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    let mut rows = Vec::new();
    for mode in Mode::ALL {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.mode == mode).collect();
        if of.is_empty() {
            continue;
        }
        let n = of.len() as f64;
        let hits = of.iter().filter(|o| o.correct).count();
        let calls = of.iter().map(|o| o.calls).sum::<usize>() as f64 / n;
        let cost = of.iter().map(|o| o.cost).sum::<f64>() / hits.max(1) as f64;
        let per = |python: bool| {
            let xs: Vec<_> = of.iter().filter(|o| o.python == python).collect();
            xs.iter().map(|o| o.calls).sum::<usize>() as f64 / xs.len().max(1) as f64
        };
        let _ = writeln!(
            out,
            "| {} | {hits}/{} = {:.1}% | {calls:.2} | ${:.6} | {:.2} | {:.2} |",
            mode.label(),
            of.len(),
            100.0 * hits as f64 / n,
            cost,
            per(true),
            per(false),
        );
        rows.push((mode, 100.0 * hits as f64 / n, calls, cost));
    }
    if let [(_, full_ok, full_calls, full_cost), (_, ok, calls, cost)] = rows[..] {
        let _ = writeln!(
            out,
            "\nAdaptive routing: {:.0}% fewer calls per file, {:.0}% less cost per correct file, correct-file rate {:+.1} points against the full fan-out.",
            100.0 * (1.0 - calls / full_calls),
            100.0 * (1.0 - cost / full_cost),
            ok - full_ok,
        );
    }
    let python = |from: usize, to: usize| -> Vec<&Outcome> {
        outcomes
            .iter()
            .filter(|o| o.mode == Mode::Adaptive && o.python && o.batch >= from && o.batch < to)
            .collect()
    };
    let alone = |o: &Outcome| o.asked_first == ["eval-py"];
    // Before: the last 100 batches up to the drop, long after routing has its evidence.
    let before = python(opts.drop_at.saturating_sub(100), opts.drop_at);
    let after = python(opts.drop_at, usize::MAX);
    let _ = write!(
        out,
        "\nRecovery: before its Python quality dropped (at batch {}, from 90% to {:.0}%), `eval-py` was asked alone for {} of {} Python files of the 100 batches before it; after it, for {} of {}",
        opts.drop_at,
        100.0 * DROPPED_RATE,
        before.iter().filter(|o| alone(o)).count(),
        before.len(),
        after.iter().filter(|o| alone(o)).count(),
        after.len(),
    );
    match after.iter().rposition(|o| alone(o)) {
        Some(last) => {
            let _ = writeln!(
                out,
                ", the last being the {} Python file after the drop.",
                ordinal(last + 1)
            );
        }
        None => {
            let _ = writeln!(out, ".");
        }
    }
    out
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripted_models_win_in_their_own_language_at_about_their_rates() {
        let n = 2000;
        let rate = |k: usize, python: bool, dropped: bool| {
            (0..n)
                .filter(|b| correct_for(k, *b, python, dropped, 56))
                .count() as f64
                / n as f64
        };
        assert!((rate(0, true, false) - 0.9).abs() < 0.03);
        assert!((rate(0, false, false) - 0.3).abs() < 0.03);
        assert!((rate(1, false, false) - 0.9).abs() < 0.03);
        assert!((rate(2, true, false) - 0.6).abs() < 0.03);
        assert!((rate(0, true, true) - DROPPED_RATE).abs() < 0.03);
        // The drop is eval-py's alone.
        assert!((rate(1, true, true) - 0.3).abs() < 0.03);
    }

    #[test]
    fn the_recovery_line_counts_python_files_asked_alone_before_and_after_the_drop() {
        let o = |batch: usize, asked: &[&str]| Outcome {
            mode: Mode::Adaptive,
            batch,
            python: true,
            correct: true,
            calls: asked.len(),
            cost: 0.0,
            asked_first: asked.iter().map(|s| s.to_string()).collect(),
        };
        let outcomes = vec![
            o(0, &["eval-py", "eval-js"]),
            o(2, &["eval-py"]),
            o(10, &["eval-py"]),
            o(12, &["eval-py"]),
            o(14, &["eval-py", "eval-js"]),
        ];
        let opts = Options {
            bin_dir: PathBuf::new(),
            batches: 16,
            drop_at: 10,
            seed: 1,
        };
        let text = report(&outcomes, &opts);
        assert!(
            text.contains("asked alone for 1 of 2 Python files"),
            "{text}"
        );
        assert!(text.contains("after it, for 2 of 3"), "{text}");
        assert!(
            text.contains("the last being the 2nd Python file"),
            "{text}"
        );
    }
}
