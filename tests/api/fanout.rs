//! `options.fanout` end to end: with the caller's tests (or generated checks) in the real
//! sandbox, a file's models asked in rounds, and the calls still running stopped once a
//! candidate passes; what was saved in the answer.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

const COMMANDS: &str = r#"{"python": ["python3", "{args}"]}"#;
const TEST_CALC: &str = "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom calc import add, mul\nassert add(2, 3) == 5, 'add'\nassert mul(4, 5) == 20, 'mul'\nprint('ok')\n";
const CORRECT: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
const WRONG_ADD: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const WRONG_MUL: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";

/// Three candidate models with these answers and latencies, and a position-biased arbiter.
async fn app_scripted(candidates: [(&str, u64); 3], vars: &[(&str, &str)]) -> TestApp {
    let app = writ_tests::spawn_app_with_models_and(Backend::Sqlite, vars).await;
    for (m, (code, ms)) in MODELS.iter().zip(candidates) {
        app.fake().script(
            m,
            Script::always(Step::code("python", code))
                .with_latency(Latency::fixed(Duration::from_millis(ms))),
        );
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the first one")));
    app
}

async fn app_with_candidates(candidates: [(&str, u64); 3]) -> TestApp {
    let app = app_scripted(candidates, &[("WRIT_COMMANDS", COMMANDS)]).await;
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    std::fs::write(app.repo_dir.join("tests/test_calc.py"), TEST_CALC).unwrap();
    app
}

fn batch(fanout: Value) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "calc.py", "code_description": "add(a, b) and mul(a, b)"}],
           "options": {
               "validation": {"commands": [{"name": "python", "args": ["tests/test_calc.py"]}],
                              "timeout_secs": 20, "repair_rounds": 0},
               "fanout": fanout}})
}

#[tokio::test]
async fn a_first_round_that_passes_leaves_the_other_models_unasked() {
    let app = app_with_candidates([(CORRECT, 0), (WRONG_ADD, 0), (WRONG_MUL, 0)]).await;
    let (status, body) = app
        .post_write_codebase(&batch(json!({"first_round": 1})))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["selection"], "validated", "{body}");
    assert_eq!(result["chosen_model"], MODELS[0], "{body}");
    assert_eq!(
        result["validation"]["saved"],
        json!({"not_asked": [MODELS[1], MODELS[2]], "stopped": []}),
        "{body}"
    );
    assert_eq!(result["candidates"].as_array().unwrap().len(), 1, "{body}");
    assert!(app.fake().calls_for(MODELS[1]).is_empty());
    assert!(app.fake().calls_for(MODELS[2]).is_empty());
}

#[tokio::test]
async fn a_first_round_that_fails_asks_the_rest_and_writes_their_passing_candidate() {
    let app = app_with_candidates([(WRONG_ADD, 0), (WRONG_MUL, 0), (CORRECT, 0)]).await;
    let (status, body) = app
        .post_write_codebase(&batch(json!({"first_round": 1})))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap(),
        CORRECT
    );
    assert_eq!(
        result["validation"]["saved"]["not_asked"],
        json!([]),
        "{body}"
    );
    let models: Vec<&str> = result["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        models,
        MODELS.to_vec(),
        "every model answered, in list order"
    );
}

#[tokio::test]
async fn calls_still_running_are_stopped_once_a_candidate_passes() {
    // The fast model's candidate passes; the two slow ones would take 30 s.
    let app = app_with_candidates([(CORRECT, 0), (WRONG_ADD, 30_000), (WRONG_MUL, 30_000)]).await;
    let started = Instant::now();
    let (status, body) = app
        .post_write_codebase(&batch(json!({"stop_when_passing": true})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the slow calls were not waited for: {:?}",
        started.elapsed()
    );
    let result = &body["results"][0];
    assert_eq!(result["chosen_model"], MODELS[0], "{body}");
    assert_eq!(
        result["validation"]["saved"],
        json!({"not_asked": [], "stopped": [MODELS[1], MODELS[2]]}),
        "{body}"
    );
    let cancelled: Vec<&Value> = result["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["error_class"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 2, "{body}");
    assert!(
        cancelled[0]["error"]
            .as_str()
            .unwrap()
            .contains("already passed the caller's tests"),
        "{body}"
    );
}

#[tokio::test]
async fn fanout_options_without_tests_or_generated_checks_are_refused_naming_the_field() {
    let app = app_with_candidates([(CORRECT, 0), (WRONG_ADD, 0), (WRONG_MUL, 0)]).await;
    for (options, field) in [
        (
            json!({"fanout": {"stop_when_passing": true}}),
            "options.fanout.stop_when_passing",
        ),
        (
            json!({"fanout": {"first_round": 2}}),
            "options.fanout.first_round",
        ),
        (
            json!({"validation": {"commands": [{"name": "python", "args": ["tests/test_calc.py"]}]},
                   "fanout": {"first_round": 0}}),
            "options.fanout.first_round",
        ),
        (
            json!({"validation": {"commands": [{"name": "python", "args": ["tests/test_calc.py"]}]},
                   "fanout": {"rounds": 2}}),
            "options.fanout.rounds",
        ),
    ] {
        let body = json!({"command": "write_codebase",
            "files": [{"filename": "calc.py", "code_description": "add and mul"}],
            "options": options});
        let (status, answer) = app.post_write_codebase(&body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    assert!(
        app.fake().calls_for(MODELS[0]).is_empty(),
        "no model was called"
    );
}

const WRITER: &str = "test/writer";
/// The correct candidate in other words: agreeing with [`CORRECT`] is a second opinion.
const CORRECT_TOO: &str =
    "def add(a, b):\n    # the sum\n    return b + a\n\n\ndef mul(a, b):\n    return b * a\n";
const GENERATED_TESTS: &str = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(4, 5) == 20\n\n\ndef test_mul_zero():\n    assert mul(7, 0) == 0\n";

/// [`app_scripted`] with a test writer whose tests are right, and no caller's tests.
async fn app_generating_checks(candidates: [(&str, u64); 3]) -> TestApp {
    let app = app_scripted(
        candidates,
        &[("WRIT_COMMANDS", COMMANDS), ("WRIT_TEST_MODELS", WRITER)],
    )
    .await;
    app.fake().script(
        WRITER,
        Script::always(Step::code("python", GENERATED_TESTS)),
    );
    app
}

fn generated_batch(fanout: Value) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "calc.py", "code_description": "add(a, b) and mul(a, b) of two numbers"}],
           "options": {"validation": {"generate": true, "timeout_secs": 20}, "fanout": fanout}})
}

fn written(app: &TestApp) -> String {
    std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap()
}

#[tokio::test]
async fn with_generated_checks_the_slow_calls_are_stopped_once_two_candidates_agree_on_every_test()
{
    let app = app_generating_checks([(CORRECT, 0), (CORRECT_TOO, 200), (WRONG_MUL, 30_000)]).await;
    let started = Instant::now();
    let (status, body) = app
        .post_write_codebase(&generated_batch(json!({"stop_when_passing": true})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the slow call was not waited for: {:?}",
        started.elapsed()
    );
    let result = &body["results"][0];
    assert_eq!(
        result["validation"]["saved"],
        json!({"not_asked": [], "stopped": [MODELS[2]]}),
        "{body}"
    );
    let cancelled = &result["candidates"][2];
    assert_eq!(cancelled["error_class"], "cancelled", "{body}");
    assert!(
        cancelled["error"]
            .as_str()
            .unwrap()
            .contains("agreed with another candidate on the generated tests"),
        "{body}"
    );
    assert!(
        [CORRECT, CORRECT_TOO].contains(&written(&app).as_str()),
        "{body}"
    );
    // The tests written while the candidates arrived are the ones the choice used.
    assert_eq!(app.fake().calls_for(WRITER).len(), 1);
    assert_eq!(
        result["validation"]["generated_checks"]["tests"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "{body}"
    );
}

#[tokio::test]
async fn with_generated_checks_one_candidate_passing_every_test_alone_does_not_stop_the_others() {
    // Only the fast correct candidate passes everything; a lone passer may share a wrong
    // assertion's mistake, so the slow call is waited for.
    let app = app_generating_checks([(CORRECT, 0), (WRONG_ADD, 0), (CORRECT_TOO, 3_000)]).await;
    let started = Instant::now();
    let (status, body) = app
        .post_write_codebase(&generated_batch(json!({"stop_when_passing": true})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() >= Duration::from_secs(3), "{body}");
    let result = &body["results"][0];
    assert_eq!(
        result["validation"]["saved"],
        json!({"not_asked": [], "stopped": []}),
        "{body}"
    );
    assert!(
        result["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["error_class"].is_null()),
        "{body}"
    );
    assert!(
        [CORRECT, CORRECT_TOO].contains(&written(&app).as_str()),
        "{body}"
    );
}

#[tokio::test]
async fn with_generated_checks_a_first_round_that_agrees_leaves_the_third_model_unasked() {
    let app = app_generating_checks([(CORRECT, 0), (CORRECT_TOO, 0), (WRONG_MUL, 0)]).await;
    let (status, body) = app
        .post_write_codebase(&generated_batch(json!({"first_round": 2})))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(
        result["validation"]["saved"],
        json!({"not_asked": [MODELS[2]], "stopped": []}),
        "{body}"
    );
    assert!(app.fake().calls_for(MODELS[2]).is_empty());
    assert!(
        [CORRECT, CORRECT_TOO].contains(&written(&app).as_str()),
        "{body}"
    );
}

#[tokio::test]
async fn with_generated_checks_a_first_round_that_disagrees_asks_the_rest_and_writes_the_agreed_candidate()
 {
    let app = app_generating_checks([(CORRECT, 0), (WRONG_ADD, 0), (CORRECT_TOO, 0)]).await;
    let (status, body) = app
        .post_write_codebase(&generated_batch(json!({"first_round": 2})))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(
        result["validation"]["saved"]["not_asked"],
        json!([]),
        "{body}"
    );
    assert_eq!(app.fake().calls_for(MODELS[2]).len(), 1);
    assert_eq!(result["candidates"].as_array().unwrap().len(), 3, "{body}");
    assert!(
        [CORRECT, CORRECT_TOO].contains(&written(&app).as_str()),
        "{body}"
    );
    assert_eq!(
        app.fake().calls_for(WRITER).len(),
        1,
        "the second round reuses the first round's tests"
    );
}
