//! Generated checks end to end: with no caller's tests, a test-writing model writes tests, every
//! candidate runs them in the real sandbox, and the candidate they agree on is written — with
//! the evidence in the answer and the operation record.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

const COMMANDS: &str = r#"{"python": ["python3", "{args}"]}"#;
const WRITER: &str = "test/writer";

const CORRECT: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
const WRONG_ADD: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const WRONG_MUL: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";
/// Three right assertions, one wrong (1 + 1 is not 3), and one of a name no candidate has.
const TESTS: &str = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(4, 5) == 20\n\n\ndef test_mul_zero():\n    assert mul(7, 0) == 0\n\n\ndef test_slip():\n    assert add(1, 1) == 3\n\n\ndef test_other_name():\n    assert power(2, 3) == 8\n";

async fn app_with(extra: &[(&str, &str)]) -> TestApp {
    let mut vars = vec![("WRIT_COMMANDS", COMMANDS), ("WRIT_TEST_MODELS", WRITER)];
    vars.extend_from_slice(extra);
    let app = writ_tests::spawn_app_with_models_and(Backend::Sqlite, &vars).await;
    for (m, code) in MODELS.iter().zip([WRONG_ADD, WRONG_MUL, CORRECT]) {
        app.fake()
            .script(m, Script::always(Step::code("python", code)));
    }
    // Biased to the first position, as judges of code are.
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the first one")));
    app.fake()
        .script(WRITER, Script::always(Step::code("python", TESTS)));
    app
}

fn batch(options: Value) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "calc.py", "code_description": "add(a, b) and mul(a, b) of two numbers"}],
           "options": options})
}

#[tokio::test]
async fn without_the_callers_tests_the_candidate_the_generated_tests_agree_on_is_written() {
    let app = app_with(&[]).await;
    let (status, body) = app
        .post_write_codebase(&batch(json!({"validation": {"generate": true}})))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["selection"], "agreement", "{body}");
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap(),
        CORRECT
    );
    let checks = &result["validation"]["generated_checks"];
    assert_eq!(checks["tests"].as_array().unwrap().len(), 4, "{checks}");
    assert!(
        checks["discarded"][0]
            .as_str()
            .unwrap()
            .contains("test_other_name"),
        "{checks}"
    );
    assert_eq!(
        checks["groups"][0]["models"],
        json!([MODELS[2]]),
        "{checks}"
    );
    assert_eq!(checks["writers"][0]["model"], WRITER);
    let passed: Vec<u64> = result["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["generated_checks"]["passed"].as_u64().unwrap())
        .collect();
    assert_eq!(passed, vec![2, 1, 3], "{body}");
    // The test writer saw the description and the shared names, never a candidate.
    let asked = app.fake().calls_for(WRITER);
    assert_eq!(asked.len(), 1);
    let prompt = asked[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("from calc import add, mul"), "{prompt}");
    assert!(!prompt.contains("return a"), "{prompt}");
    // Agreement decided: no arbiter call.
    assert!(app.fake().calls_for(ARBITER).is_empty());
    // The operation record carries the same evidence.
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            result["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["selection"], "agreement");
    assert_eq!(op["detail"]["generated_checks"], *checks, "{op}");
    assert_eq!(op["candidates"][2]["generated_checks"]["passed"], 3);
    // The checks ran on scratch copies: REPO_DIR holds only the file.
    assert_eq!(app.files_on_disk(), vec!["calc.py".to_string()]);
}

#[tokio::test]
async fn a_server_that_generates_checks_by_default_does_so_for_a_batch_that_asks_for_nothing() {
    let app = app_with(&[("WRIT_GENERATE_CHECKS", "1")]).await;
    let (status, body) = app.post_write_codebase(&batch(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["selection"], "agreement", "{body}");
    assert_eq!(body["results"][0]["chosen_model"], MODELS[2], "{body}");
}

#[tokio::test]
async fn the_generated_tests_are_kept_where_asked_with_those_the_written_file_fails_skipped() {
    let app = app_with(&[]).await;
    let (status, body) = app
        .post_write_codebase(&batch(json!({"validation": {
            "generate": true, "keep_tests": "tests/test_calc.py"}})))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    let kept = &result["validation"]["kept_tests"];
    assert_eq!(kept["path"], "tests/test_calc.py", "{kept}");
    assert_eq!(kept["model"], WRITER, "{kept}");
    assert_eq!(
        (kept["passed"].as_u64(), kept["skipped"].as_u64()),
        (Some(3), Some(2)),
        "{kept}"
    );
    let on_disk = std::fs::read_to_string(app.repo_dir.join("tests/test_calc.py")).unwrap();
    let skip = "@pytest.mark.skip(reason=\"writ: the written file fails this generated test; check its expected value\")\n";
    assert!(on_disk.starts_with("import pytest\n"), "{on_disk}");
    assert!(
        on_disk.contains(&format!("{skip}def test_slip():")),
        "{on_disk}"
    );
    assert!(
        on_disk.contains(&format!("{skip}def test_other_name():")),
        "{on_disk}"
    );
    assert!(
        !on_disk.contains(&format!("{skip}def test_add():")),
        "{on_disk}"
    );
    // A recorded write of the same request, like the file's.
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            kept["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["filename"], "tests/test_calc.py", "{op}");
    assert_eq!(op["status"], "succeeded", "{op}");
    assert_eq!(op["request_id"], body["request_id"], "{op}");
}

#[tokio::test]
async fn keeping_tests_is_refused_naming_the_field_when_it_cannot_be_done() {
    let app = app_with(&[]).await;
    for (validation, why) in [
        (
            json!({"commands": [{"name": "python", "args": ["t.py"]}], "keep_tests": "tests/t.py"}),
            "needs generate",
        ),
        (json!({"generate": true, "keep_tests": "../t.py"}), ""),
        (
            json!({"generate": true, "keep_tests": "tests/t.js"}),
            "must be a Python file",
        ),
        (
            json!({"generate": true, "keep_tests": "calc.py"}),
            "must not be one of the batch's files",
        ),
    ] {
        let (status, body) = app
            .post_write_codebase(&batch(json!({"validation": validation})))
            .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(
            body["error"]["field"], "options.validation.keep_tests",
            "{body}"
        );
        assert!(
            body["error"]["message"].as_str().unwrap().contains(why),
            "{body}"
        );
    }
    assert!(app.fake().calls_for(MODELS[0]).is_empty());
}

/// The job of an async batch, once done: its answer, and its events by name with their data.
async fn run_async(app: &TestApp, options: Value) -> (Value, Vec<(String, Value)>) {
    let mut body = batch(options);
    body["options"]["async"] = json!(true);
    let r = app
        .client
        .post(app.url("/write_codebase"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let answer: Value = r.json().await.unwrap();
    let job = answer["job_id"].as_str().unwrap().to_string();
    let mut done = Value::Null;
    for _ in 0..600 {
        let (_, body) = app.json(&format!("/jobs/{job}")).await;
        if body["status"] == "done" || body["status"] == "failed" {
            done = body;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(done["status"], "done", "{done}");
    let text = app
        .client
        .get(app.url(&format!("/jobs/{job}/events")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = text
        .split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event:"))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data:"))?;
            Some((
                name.trim().to_string(),
                serde_json::from_str(data.trim()).ok()?,
            ))
        })
        .collect();
    (done["response"].clone(), events)
}

#[tokio::test]
async fn generated_checks_that_get_no_test_say_so_in_the_answer_and_on_the_stream() {
    let app = app_with(&[]).await;
    app.fake().script(
        WRITER,
        Script::always(Step::text(
            "I need to see the implementation before I can write tests for it.",
        )),
    );
    let (answer, events) = run_async(&app, json!({"validation": {"generate": true}})).await;
    let result = &answer["results"][0];
    assert_eq!(result["selection"], "arbiter", "{answer}");
    let checks = &result["validation"]["generated_checks"];
    assert_eq!(checks["status"], "no_tests", "{checks}");
    assert!(
        checks["note"]
            .as_str()
            .unwrap()
            .contains("the answer holds no python code"),
        "{checks}"
    );
    let unavailable: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "checks_unavailable")
        .map(|(_, data)| data)
        .collect();
    assert_eq!(unavailable.len(), 1, "{events:?}");
    assert_eq!(unavailable[0]["file"], "calc.py");
    assert_eq!(unavailable[0]["status"], "no_tests");
}

#[tokio::test]
async fn a_test_file_that_defines_the_functions_it_tests_is_made_to_test_the_candidates() {
    // As a real 1.5B writer answered: the module under test written out whole (here with the
    // wrong `add`), then its tests, then a shell line that parses as Python.
    const STUBBED: &str = "def add(a, b):\n    \"\"\"Adds.\"\"\"\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(4, 5) == 20\n\n\npytest -v .writ-checks/test_calc.py\n";
    let app = app_with(&[]).await;
    app.fake()
        .script(WRITER, Script::always(Step::code("python", STUBBED)));
    let (answer, events) = run_async(&app, json!({"validation": {"generate": true}})).await;
    let result = &answer["results"][0];
    assert_eq!(result["chosen_model"], MODELS[2], "{answer}");
    let checks = &result["validation"]["generated_checks"];
    assert_eq!(checks["status"], "decided", "{checks}");
    assert_eq!(checks["tests"].as_array().unwrap().len(), 2, "{checks}");
    let adjusted: Vec<&str> = checks["adjusted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(adjusted.len(), 3, "{checks}");
    assert!(
        adjusted[1].contains("it defined `add`, `mul` itself"),
        "{checks}"
    );
    assert!(
        checks["files"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("from calc import add, mul\n"),
        "{checks}"
    );
    assert!(!events.iter().any(|(name, _)| name == "checks_unavailable"));
}
