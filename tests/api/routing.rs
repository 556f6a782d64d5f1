//! Adaptive routing end to end (`WRIT_ROUTING=adaptive`): outcomes recorded by earlier batches
//! (candidates that passed or failed the caller's tests in the real sandbox) decide which models
//! a later batch asks first; the others are asked when those fail, or not at all without checks;
//! the answer, the audit and `/stats/models` say so. On both stores.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

const COMMANDS: &str = r#"{"python": ["python3", "{args}"]}"#;
const CORRECT: &str = "def add(a, b):\n    return a + b\n";
const WRONG: &str = "def add(a, b):\n    return a - b\n";

async fn app(backend: Backend) -> TestApp {
    let app = writ_tests::spawn_app_with_models_and(
        backend,
        &[
            ("WRIT_COMMANDS", COMMANDS),
            ("WRIT_ROUTING", "adaptive"),
            ("WRIT_ROUTING_MIN_EVIDENCE", "3"),
            ("WRIT_ROUTING_EXPLORE", "0"),
            ("WRIT_ROUTING_TARGET", "0.85"),
        ],
    )
    .await;
    script(&app, [CORRECT, WRONG, WRONG]);
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the first one")));
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    app
}

fn script(app: &TestApp, answers: [&str; 3]) {
    for (m, code) in MODELS.iter().zip(answers) {
        app.fake()
            .script(m, Script::always(Step::code("python", code)));
    }
}

/// A new file `calc_{i}.py` with its own test; with `checked`, the test is the batch's
/// validation.
fn batch(app: &TestApp, i: usize, checked: bool, fanout: Option<Value>) -> Value {
    let test = format!("tests/test_calc_{i}.py");
    std::fs::write(
        app.repo_dir.join(&test),
        format!("import os, sys\nsys.path.insert(0, os.getcwd())\nfrom calc_{i} import add\nassert add(2, 3) == 5\n"),
    )
    .unwrap();
    let mut body = json!({"command": "write_codebase",
        "files": [{"filename": format!("calc_{i}.py"), "code_description": "add(a, b)"}]});
    if checked {
        body["options"]["validation"] = json!({
            "commands": [{"name": "python", "args": [test]}],
            "timeout_secs": 20, "repair_rounds": 0});
    }
    if let Some(f) = fanout {
        body["options"]["fanout"] = f;
    }
    body
}

fn asked(result: &Value) -> Vec<&str> {
    result["routing"]["asked"]
        .as_array()
        .unwrap_or_else(|| panic!("no routing in {result}"))
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect()
}

async fn routes_by_outcome(backend: Backend) {
    let app = app(backend).await;
    // Until each model has 3 outcomes, each is being learned: all are asked. Model 0 passes
    // every time, the others never; from the sixth file model 0's rate is at least 6/7 ≥ 0.85.
    // Eight files give the others enough failures that a Thompson draw ranking one of them first
    // (which would ask it beside model 0) is a one-in-100,000 event.
    for i in 0..8 {
        let (status, body) = app.post_write_codebase(&batch(&app, i, true, None)).await;
        assert_eq!(status, 200, "{body}");
        let result = &body["results"][0];
        assert_eq!(result["chosen_model"], MODELS[0], "{body}");
        if i < 3 {
            assert_eq!(asked(result), MODELS.to_vec(), "file {i}: {body}");
            // The two wrong answers are the same code, tried once: both records say it failed.
            let passed: Vec<&Value> = result["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| &c["validation"]["passed"])
                .collect();
            assert_eq!(
                passed,
                [&json!(true), &json!(false), &json!(false)],
                "{body}"
            );
        }
    }
    let before: Vec<usize> = MODELS
        .iter()
        .map(|m| app.fake().calls_for(m).len())
        .collect();
    let (status, body) = app.post_write_codebase(&batch(&app, 8, true, None)).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(asked(result), vec![MODELS[0]], "{body}");
    assert_eq!(
        result["routing"]["later"],
        json!([MODELS[1], MODELS[2]]),
        "{body}"
    );
    let skipped = result["routing"]["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .all(|s| s["until"] == "later"
                && s["reason"].as_str().unwrap().contains("new python files")),
        "{body}"
    );
    assert_eq!(result["candidates"].as_array().unwrap().len(), 1, "{body}");
    let after: Vec<usize> = MODELS
        .iter()
        .map(|m| app.fake().calls_for(m).len())
        .collect();
    assert_eq!(
        (
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ),
        (1, 0, 0),
        "only the trusted model was called"
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc_8.py")).unwrap(),
        CORRECT
    );

    // Without checks nothing would tell a failure: the others are not asked at all.
    let before: Vec<usize> = MODELS
        .iter()
        .map(|m| app.fake().calls_for(m).len())
        .collect();
    let (status, body) = app.post_write_codebase(&batch(&app, 9, false, None)).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(asked(result), vec![MODELS[0]], "{body}");
    assert!(
        result["routing"]["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["until"] == "skipped"),
        "{body}"
    );
    let after: Vec<usize> = MODELS
        .iter()
        .map(|m| app.fake().calls_for(m).len())
        .collect();
    assert_eq!((after[1] - before[1], after[2] - before[2]), (0, 0));

    // The trusted model fails this time: the models that waited are asked, and the one that
    // passes is written.
    script(&app, [WRONG, WRONG, CORRECT]);
    let (status, body) = app.post_write_codebase(&batch(&app, 10, true, None)).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(asked(result), vec![MODELS[0]], "{body}");
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    assert_eq!(result["candidates"].as_array().unwrap().len(), 3, "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc_10.py")).unwrap(),
        CORRECT
    );

    script(&app, [CORRECT, WRONG, WRONG]);
    // A batch that turns routing off asks every model.
    let (status, body) = app
        .post_write_codebase(&batch(&app, 11, true, Some(json!({"routing": "off"}))))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["results"][0].get("routing").is_none(), "{body}");
    assert_eq!(
        body["results"][0]["candidates"].as_array().unwrap().len(),
        3
    );

    // The audit keeps the routing; /stats/models counts it.
    let (status, stats) = app.json("/stats/models").await;
    assert_eq!(status, 200, "{stats}");
    let row = |m: &str| {
        stats["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["model"] == m)
            .cloned()
            .unwrap_or_else(|| panic!("no row for {m} in {stats}"))
    };
    let first = row(MODELS[0]);
    // Files 0–8, 10 and 11 ran the caller's tests: 11 outcomes, of which file 10's failed.
    assert_eq!(
        (
            first["routing_outcomes"].as_u64(),
            first["routing_passed"].as_u64()
        ),
        (Some(11), Some(10)),
        "{stats}"
    );
    // The other two: asked later on file 10, left out of files 8 and 9 at least (and of some
    // earlier ones, as the draws fell).
    for other in [row(MODELS[1]), row(MODELS[2])] {
        assert_eq!(other["routed_later"].as_u64(), Some(1), "{stats}");
        assert!(other["routed_out"].as_u64().unwrap() >= 2, "{stats}");
    }
}

#[tokio::test]
async fn routing_asks_the_model_that_passes_first_on_sqlite() {
    routes_by_outcome(Backend::Sqlite).await;
}

#[tokio::test]
async fn routing_asks_the_model_that_passes_first_on_postgres() {
    routes_by_outcome(Backend::Postgres).await;
}

#[tokio::test]
async fn adaptive_routing_and_a_first_round_together_are_refused_naming_the_field() {
    let app = app(Backend::Sqlite).await;
    let (status, body) = app
        .post_write_codebase(&batch(
            &app,
            0,
            true,
            Some(json!({"routing": "adaptive", "first_round": 1})),
        ))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "options.fanout.routing", "{body}");
    let (status, body) = app
        .post_write_codebase(&batch(&app, 0, true, Some(json!({"routing": "sometimes"}))))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(app.fake().calls_for(MODELS[0]).is_empty());
}

#[tokio::test]
async fn a_workspace_routes_from_its_own_outcomes_only() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().to_str().unwrap().to_owned();
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_COMMANDS", COMMANDS),
            ("WRIT_ROUTING", "adaptive"),
            ("WRIT_ROUTING_MIN_EVIDENCE", "3"),
            ("WRIT_ROUTING_EXPLORE", "0"),
            ("WRIT_WORKSPACES_DIR", root_path.as_str()),
        ],
    )
    .await;
    script(&app, [CORRECT, WRONG, WRONG]);
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    for i in 0..8 {
        let (status, body) = app.post_write_codebase(&batch(&app, i, true, None)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = app.post_write_codebase(&batch(&app, 8, true, None)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(asked(&body["results"][0]), vec![MODELS[0]], "{body}");

    let r = app
        .client
        .post(app.url("/workspaces"))
        .json(&json!({"name": "other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());
    let other = root.path().join("other");
    std::fs::create_dir_all(other.join("tests")).unwrap();
    let body = batch(&app, 9, true, None);
    std::fs::copy(
        app.repo_dir.join("tests/test_calc_9.py"),
        other.join("tests/test_calc_9.py"),
    )
    .unwrap();
    let r = app
        .client
        .post(app.url("/workspaces/other/write_codebase"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let answer: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let result = &answer["results"][0];
    // Nothing learned elsewhere shows, or decides: every model is still being learned here.
    assert_eq!(asked(result), MODELS.to_vec(), "{answer}");
    assert!(
        result["routing"]["scores"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["trials"] == 0),
        "{answer}"
    );
}
