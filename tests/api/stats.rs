//! `GET /stats/models` agrees with the audit log it is counted from: after batches in two
//! languages, each model's candidates, viable candidates and chosen files are what the operations
//! say; grouped by language, a row per model and language; bad parameters are refused by name.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp, on_both_backends};

async fn app_with_models(backend: Backend) -> TestApp {
    let app = writ_tests::spawn_app_with_models(backend).await;
    // Two models write different files (the arbiter picks one; writ shuffles what it shows), the
    // third fails every call.
    app.fake().script(
        MODELS[0],
        Script::always(Step::code("python", "def f():\n    return 0\n")),
    );
    app.fake().script(
        MODELS[1],
        Script::always(Step::code("python", "def f():\n    return 1\n")),
    );
    app.fake()
        .script(MODELS[2], Script::always(Step::status(500)));
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(2, "the second")));
    app
}

async fn stats(app: &TestApp, query: &str) -> (u16, Value) {
    app.json(&format!("/stats/models{query}")).await
}

async fn the_figures_are_what_the_audit_log_says(app: TestApp) {
    for (i, file) in ["a.py", "b.py", "c.rs"].iter().enumerate() {
        let (status, answer) = app
            .post_write_codebase(&json!({"command": "write_codebase", "files": [
                {"filename": format!("d{i}/{file}"), "code_description": "f"}]}))
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    // The audit log, counted by hand.
    let (_, ops) = app.json("/operations?limit=500").await;
    let mut expected: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
    for op in ops["operations"].as_array().unwrap() {
        for c in op["candidates"].as_array().unwrap() {
            let e = expected
                .entry(c["model"].as_str().unwrap().to_owned())
                .or_default();
            e.0 += 1;
            if c["ok"] == true && c["parsed"] != false {
                e.1 += 1;
            }
        }
        if let Some(m) = op["chosen_model"].as_str() {
            expected.get_mut(m).unwrap().2 += 1;
        }
        // The arbiter's verdicts are calls too, paid for like candidates.
        for c in op["detail"]["calls"].as_array().into_iter().flatten() {
            expected
                .entry(c["model"].as_str().unwrap().to_owned())
                .or_default()
                .3 += 1;
        }
    }
    assert_eq!(
        expected.len(),
        4,
        "every model answered or failed, and the arbiter was asked: {expected:?}"
    );
    assert_eq!(expected[ARBITER], (0, 0, 0, 3), "{expected:?}");

    let (status, page) = stats(&app, "").await;

    assert_eq!(status, 200, "{page}");
    assert_eq!(page["operations"], 3);
    assert_eq!(page["truncated"], false);
    let got: BTreeMap<String, (u64, u64, u64, u64)> = page["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["model"].as_str().unwrap().to_owned(),
                (
                    m["candidates"].as_u64().unwrap(),
                    m["viable"].as_u64().unwrap(),
                    m["chosen"].as_u64().unwrap(),
                    m["other_calls"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        got.values().map(|m| m.2).sum::<u64>(),
        3,
        "one chosen model per file written"
    );
    assert_eq!(
        got[MODELS[2]].1, 0,
        "a failing model has no viable candidate"
    );

    // By language: each model's python and rust rows add up to its row.
    let (_, by_language) = stats(&app, "?by=language").await;
    let mut per_language: BTreeMap<(String, String), u64> = BTreeMap::new();
    for m in by_language["models"].as_array().unwrap() {
        per_language.insert(
            (
                m["model"].as_str().unwrap().to_owned(),
                m["language"].as_str().unwrap().to_owned(),
            ),
            m["candidates"].as_u64().unwrap(),
        );
    }
    for (model, (candidates, _, _, _)) in got.iter().filter(|(m, _)| m.as_str() != ARBITER) {
        let python = per_language[&(model.clone(), "python".to_owned())];
        let rust = per_language[&(model.clone(), "rust".to_owned())];
        assert_eq!(python + rust, *candidates, "{model}: {per_language:?}");
        assert!(rust >= 1, "{model} answered for c.rs");
    }
    assert_eq!(
        per_language.len(),
        8,
        "three models and the arbiter × two languages"
    );

    // A window before any of it counts nothing.
    let (_, empty) = stats(
        &app,
        "?since=2020-01-01T00:00:00Z&until=2020-01-02T00:00:00Z",
    )
    .await;
    assert_eq!(empty["operations"], 0);
    assert!(empty["models"].as_array().unwrap().is_empty());
}

async fn bad_parameters_are_refused_by_name(app: TestApp) {
    let (status, body) = stats(&app, "?by=file").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("by")),
        "{body}"
    );
    let (status, body) = stats(&app, "?since=yesterday").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("since")),
        "{body}"
    );
    let (status, body) = stats(
        &app,
        "?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
    )
    .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("since")),
        "{body}"
    );
    let (status, _) = stats(&app, "?window=1h").await;
    assert_eq!(status, 400);
}

on_both_backends!(
    app app_with_models:
    the_figures_are_what_the_audit_log_says,
    bad_parameters_are_refused_by_name,
);
