//! Running the configurations over the task set through writ and the scripted fake, and the
//! Markdown table of what they wrote.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::{
    ARBITER, COMMANDS, CheckTask, Config, Lang, MODELS, Options, Outcome, WRITER, load, variant,
};
use crate::eval::tasks::normalise;
use crate::procs::{Fake, Writ};

/// Runs every configuration over the task set.
pub async fn run(opts: &Options) -> anyhow::Result<(Vec<CheckTask>, Vec<Outcome>)> {
    let mut set = load(&opts.tasks_dir, &opts.functions).await?;
    if !opts.only.is_empty() {
        set.retain(|t| opts.only.contains(&t.id));
    }
    let (fake, client) = crate::eval::fake_and_client(&opts.bin_dir).await?;
    let mut outcomes = Vec::new();
    for config in Config::ALL.into_iter().chain(Config::STAGGERED) {
        let named = opts.configs.iter().any(|c| c == config.key());
        if !named && (!opts.configs.is_empty() || Config::STAGGERED.contains(&config)) {
            continue;
        }
        let writers: Vec<(&str, &str)> = config
            .writers()
            .map(|w| ("WRIT_TEST_MODELS", w))
            .into_iter()
            .collect();
        let (_db_dir, writ) = crate::eval::start_writ(
            &opts.bin_dir,
            &fake,
            &MODELS[..config.models()],
            COMMANDS,
            &writers,
        )
        .await?;
        std::fs::create_dir_all(writ.repo_dir().join("tests"))?;
        for task in &set {
            std::fs::write(
                writ.repo_dir().join(task.examples_test_path()),
                task.examples_test(),
            )?;
        }
        for (index, task) in set.iter().enumerate() {
            let o = run_one(&client, &fake, &writ, config, index, task, opts)
                .await
                .with_context(|| format!("task {} in {config:?}", task.id))?;
            outcomes.push(o);
        }
        writ.stop().await;
    }
    Ok((set, outcomes))
}

async fn run_one(
    client: &reqwest::Client,
    fake: &Fake,
    writ: &Writ,
    config: Config,
    index: usize,
    task: &CheckTask,
    opts: &Options,
) -> anyhow::Result<Outcome> {
    let _ = std::fs::remove_file(writ.repo_dir().join(&task.path));
    let latency = (opts.latency_ms > 0).then(|| json!({"kind": "fixed", "ms": opts.latency_ms}));
    let lang = task.lang.name();
    let route = |model: &str, prompt: String, code: &str| {
        let mut s = json!({"then": {"kind": "code", "lang": lang, "code": code}});
        if let Some(l) = &latency {
            s["latency"] = l.clone();
        }
        json!({"model": model, "prompt_contains": prompt, "script": s})
    };
    let mut routes = Vec::new();
    for (k, (model, code)) in MODELS
        .iter()
        .zip(config.candidates(task, index))
        .enumerate()
    {
        let mut r = route(model, format!("Write the file {}", json!(task.path)), &code);
        if let Some(ms) = config.latency_ms(k) {
            r["script"]["latency"] = json!({"kind": "fixed", "ms": ms});
        }
        routes.push(r);
    }
    // The default writers are the arbiter and the first candidate model; each errs at its own
    // places. The one-writer configuration's writer errs as the arbiter does.
    let (tests, kind) = task.written_tests(index, 0);
    let (tests_2, _) = task.written_tests(index, 1);
    for (writer, text) in [(ARBITER, &tests), (MODELS[0], &tests_2), (WRITER, &tests)] {
        routes.push(route(
            writer,
            format!("Write tests for the file {}", json!(task.path)),
            text,
        ));
    }
    for r in routes {
        fake.route(client, &r).await?;
    }
    fake.forget_calls(client).await;
    let description = match config {
        Config::ExamplesOnly | Config::ExamplesGenerated => task.description_with_examples(),
        _ => task.description.clone(),
    };
    let mut body = json!({"command": "write_codebase", "files": [{"filename": task.path, "code_description": description}]});
    if let Some(v) = config.validation(task) {
        body["options"] = json!({"validation": v});
    }
    if config == Config::FiveStop {
        body["options"]["fanout"] = json!({"stop_when_passing": true});
    }
    let name = format!("checks-{config:?}-{}.json", task.id).to_lowercase();
    let (answer, latency) = crate::eval::post_batch(
        client,
        &writ.base_url,
        &body,
        opts.answers_dir.as_deref(),
        &name,
    )
    .await?;
    let calls: Vec<Value> = fake.calls(client).await?;
    let result = &answer["results"][0];
    let mut tokens = 0u64;
    for c in result["candidates"].as_array().into_iter().flatten() {
        tokens +=
            c["prompt_tokens"].as_u64().unwrap_or(0) + c["completion_tokens"].as_u64().unwrap_or(0);
    }
    for w in result["validation"]["generated_checks"]["writers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        tokens +=
            w["prompt_tokens"].as_u64().unwrap_or(0) + w["completion_tokens"].as_u64().unwrap_or(0);
    }
    // The arbiter's verdicts are not in the answer: counted from the fake's record (its test
    // files are, with the writers').
    for c in calls.iter().filter(|c| c["model"] == ARBITER) {
        let texts: Vec<&str> = c["body"]["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_str())
            .collect();
        if texts.iter().any(|t| t.contains("Write tests for the file")) {
            continue;
        }
        let prompt: usize = texts.iter().map(|s| s.chars().count()).sum();
        tokens += (prompt / 4 + 1) as u64 + 20;
    }
    let selection = if result["success"] == true {
        result["selection"].as_str().unwrap_or("?").to_string()
    } else {
        "failed".into()
    };
    let correct = std::fs::read_to_string(writ.repo_dir().join(&task.path)).is_ok_and(|written| {
        normalise(&written) == normalise(&task.correct)
            || (config.models() == 5
                && normalise(&written) == normalise(&variant(&task.correct, task.lang)))
    });
    Ok(Outcome {
        config,
        task: task.id.clone(),
        lang: task.lang,
        tests: kind,
        correct,
        latency,
        selection,
        calls: calls.len(),
        tokens,
    })
}

fn rate(hits: usize, n: usize) -> String {
    if n == 0 {
        return "—".into();
    }
    format!("{hits}/{n} = {:.1}%", 100.0 * hits as f64 / n as f64)
}

/// The table, in Markdown.
pub fn report(set: &[CheckTask], outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let py = set.iter().filter(|t| t.lang == Lang::Python).count();
    let js = set.len() - py;
    let _ = writeln!(
        out,
        "Task set: {} single-file tasks ({py} Python, {js} JavaScript). Test writer per task: {} normal (about a quarter of the assertions wrong), {} not discriminating, {} unusable.\n",
        set.len(),
        (0..set.len()).filter(|i| !matches!(i % 10, 3 | 7)).count(),
        (0..set.len()).filter(|i| i % 10 == 7).count(),
        (0..set.len()).filter(|i| i % 10 == 3).count(),
    );
    out.push_str("| configuration | correct file written | Python | JavaScript | mean batch latency | model calls / batch | tokens / batch | selection methods |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for config in Config::ALL.into_iter().chain(Config::STAGGERED) {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == config).collect();
        if of.is_empty() {
            continue;
        }
        let hits = |f: &dyn Fn(&&Outcome) -> bool| {
            let sel: Vec<&&Outcome> = of.iter().filter(|o| f(o)).collect();
            rate(sel.iter().filter(|o| o.correct).count(), sel.len())
        };
        let n = of.len() as u32;
        let latency = of.iter().map(|o| o.latency).sum::<Duration>() / n;
        let calls = of.iter().map(|o| o.calls).sum::<usize>() as f64 / f64::from(n);
        let tokens = of.iter().map(|o| o.tokens).sum::<u64>() as f64 / f64::from(n);
        let mut methods: std::collections::BTreeMap<&str, usize> = Default::default();
        for o in &of {
            *methods.entry(o.selection.as_str()).or_default() += 1;
        }
        let methods = methods
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | **{}** | {} | {} | {} ms | {calls:.1} | {tokens:.0} | {methods} |",
            config.label(),
            hits(&|_| true),
            hits(&|o| o.lang == Lang::Python),
            hits(&|o| o.lang == Lang::JavaScript),
            latency.as_millis(),
        );
    }
    out.push('\n');
    for config in [
        Config::Generated,
        Config::GeneratedOneWriter,
        Config::ExamplesGenerated,
    ] {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == config).collect();
        if of.is_empty() {
            continue;
        }
        let pct = 100.0 * of.iter().filter(|o| o.correct).count() as f64 / of.len() as f64;
        let _ = writeln!(
            out,
            "- target for {}: ≥ 85% — {pct:.1}%: **{}**",
            config.label(),
            if pct >= 85.0 { "met" } else { "not met" }
        );
    }
    for kind in ["normal", "weak", "unusable"] {
        let of: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.config == Config::Generated && o.tests == kind)
            .collect();
        if !of.is_empty() {
            let _ = writeln!(
                out,
                "- (a) by what the arbiter wrote as tests (the first candidate model errs elsewhere): {kind} tests — {}",
                rate(of.iter().filter(|o| o.correct).count(), of.len())
            );
        }
    }
    let base = |c: Config| {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == c).collect();
        let n = of.len().max(1) as f64;
        (
            of.iter()
                .map(|o| o.latency.as_secs_f64() * 1000.0)
                .sum::<f64>()
                / n,
            of.iter().map(|o| o.calls).sum::<usize>() as f64 / n,
            of.iter().map(|o| o.tokens).sum::<u64>() as f64 / n,
        )
    };
    let ran = |c: Config| outcomes.iter().any(|o| o.config == c);
    if !(ran(Config::ArbiterOnly) && ran(Config::Generated)) {
        // A run of some configurations only (`--configs`) has nothing to compare.
        return out;
    }
    let (l0, c0, t0) = base(Config::ArbiterOnly);
    let (l1, c1, t1) = base(Config::Generated);
    let _ = writeln!(
        out,
        "- what generated checks add per batch, (a) against the arbiter alone: {:+.0} ms, {:+.1} model calls, {:+.0} tokens",
        l1 - l0,
        c1 - c0,
        t1 - t0
    );
    out
}
