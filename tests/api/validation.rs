//! Execution-verified synthesis end to end: the caller's checks run in the real sandbox on
//! every candidate, the file that lands is one that passes, failing candidates are repaired, and
//! `POST /run` runs a configured command on a scratch copy of the workspace.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

/// `python` runs a script from the repository root so it can import the files under test.
const COMMANDS: &str = r#"{"python": ["python3", "{args}"], "echo": ["echo", "{args}"]}"#;

const TEST_CALC: &str = "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom calc import add, mul\nassert add(2, 3) == 5, 'add'\nassert mul(4, 5) == 20, 'mul'\nprint('ok')\n";
const CORRECT: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
const WRONG_ADD: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const WRONG_MUL: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";

async fn app_with(extra: &[(&str, &str)]) -> TestApp {
    let mut vars = vec![("WRIT_COMMANDS", COMMANDS)];
    vars.extend_from_slice(extra);
    writ_tests::spawn_app_with_models_and(Backend::Sqlite, &vars).await
}

fn batch(validation: Value) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "calc.py", "code_description": "add(a, b) and mul(a, b)"}],
           "options": {"validation": validation}})
}

fn checks() -> Value {
    json!({"commands": [{"name": "python", "args": ["tests/test_calc.py"]}], "timeout_secs": 20})
}

fn with_tests(app: &TestApp) {
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    std::fs::write(app.repo_dir.join("tests/test_calc.py"), TEST_CALC).unwrap();
}

fn script(app: &TestApp, candidates: [&str; 3]) {
    for (m, code) in MODELS.iter().zip(candidates) {
        app.fake()
            .script(m, Script::always(Step::code("python", code)));
    }
    // Biased to the first position, as judges of code are.
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the first one")));
}

fn events_of(body: &Value) -> Vec<String> {
    body["results"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["model"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_only_candidate_that_passes_the_checks_is_written_though_the_arbiter_prefers_another() {
    let app = app_with(&[]).await;
    with_tests(&app);
    script(&app, [WRONG_ADD, WRONG_MUL, CORRECT]);
    let (status, body) = app.post_write_codebase(&batch(checks())).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{body}");
    assert_eq!(result["selection"], "validated", "{body}");
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    assert_eq!(result["validation"], json!({"passed": true, "rounds": 0}));
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap(),
        CORRECT
    );
    let candidates = result["candidates"].as_array().unwrap();
    let passed: Vec<bool> = candidates
        .iter()
        .map(|c| c["validation"]["passed"].as_bool().unwrap())
        .collect();
    assert_eq!(passed, vec![false, false, true], "{body}");
    assert!(
        candidates[0]["validation"]["output_tail"]
            .as_str()
            .unwrap()
            .contains("AssertionError"),
        "{body}"
    );
    // One passer: no arbiter call.
    assert!(app.fake().calls_for(ARBITER).is_empty());
    // The audit record carries the same validation results.
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            result["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["selection"], "validated");
    assert_eq!(op["candidates"][2]["validation"]["passed"], true, "{op}");
    // REPO_DIR holds only what writ wrote: the runs happened on scratch copies.
    assert_eq!(
        app.files_on_disk(),
        vec!["calc.py".to_string(), "tests/test_calc.py".to_string()]
    );
}

#[tokio::test]
async fn several_passing_candidates_go_to_the_arbiter_and_only_those() {
    let app = app_with(&[]).await;
    with_tests(&app);
    let other_correct = "def add(a, b):\n    return b + a\n\n\ndef mul(a, b):\n    return b * a\n";
    script(&app, [WRONG_ADD, CORRECT, other_correct]);
    let (_, body) = app.post_write_codebase(&batch(checks())).await;
    let result = &body["results"][0];
    assert_eq!(result["selection"], "validated_arbiter", "{body}");
    let arbiter = app.fake().calls_for(ARBITER);
    assert_eq!(arbiter.len(), 1);
    let prompt = arbiter[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("## Candidate 2"), "{prompt}");
    assert!(!prompt.contains("## Candidate 3"), "{prompt}");
    assert!(
        !prompt.contains("a - b"),
        "a failing candidate reached the arbiter"
    );
    let written = std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap();
    assert!(written == CORRECT || written == other_correct);
}

#[tokio::test]
async fn when_every_candidate_fails_the_models_repair_theirs_from_the_failure() {
    let app = app_with(&[]).await;
    with_tests(&app);
    app.fake()
        .script(MODELS[0], Script::always(Step::code("python", WRONG_ADD)));
    // The second model gets it right once shown the failure.
    app.fake().script(
        MODELS[1],
        Script::steps([
            Step::code("python", WRONG_MUL),
            Step::code("python", CORRECT),
        ]),
    );
    app.fake().script(
        MODELS[2],
        Script::always(Step::text("I cannot help with that.")),
    );
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "first")));
    let (_, body) = app.post_write_codebase(&batch(checks())).await;
    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{body}");
    assert_eq!(result["selection"], "repaired", "{body}");
    assert_eq!(result["chosen_model"], MODELS[1]);
    assert_eq!(result["validation"], json!({"passed": true, "rounds": 1}));
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap(),
        CORRECT
    );
    // The repair prompt carried the model's own candidate and the failing output.
    let calls = app.fake().calls_for(MODELS[1]);
    assert_eq!(calls.len(), 2);
    let messages = calls[1].body["messages"].as_array().unwrap();
    let last = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(
        last.contains("AssertionError") && last.contains("mul"),
        "{last}"
    );
    assert_eq!(messages[messages.len() - 2]["role"], "assistant");
    let repaired: Vec<&Value> = result["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["round"] == 1)
        .collect();
    assert_eq!(repaired.len(), 2, "{body}");
    assert_eq!(events_of(&body).len(), 5, "{body}");
}

#[tokio::test]
async fn with_no_passing_candidate_nothing_is_written_unless_the_batch_asks_for_the_best() {
    let app = app_with(&[]).await;
    with_tests(&app);
    script(&app, [WRONG_ADD, WRONG_MUL, WRONG_ADD]);
    let mut v = checks();
    v["repair_rounds"] = json!(1);
    let (_, body) = app.post_write_codebase(&batch(v.clone())).await;
    let result = &body["results"][0];
    assert_eq!(result["success"], false, "{body}");
    let error = result["error"].as_str().unwrap();
    assert!(error.starts_with("validation_failed"), "{error}");
    assert_eq!(result["validation"], json!({"passed": false, "rounds": 1}));
    assert!(!app.repo_dir.join("calc.py").exists());

    v["on_fail"] = json!("write_best");
    let (_, body) = app.post_write_codebase(&batch(v)).await;
    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{body}");
    assert_eq!(result["validation"]["passed"], false, "{body}");
    assert!(app.repo_dir.join("calc.py").exists());
}

#[tokio::test]
async fn bad_validation_options_are_refused_naming_the_field_before_any_model_is_called() {
    let app = app_with(&[("WRIT_RUN_MAX_TIMEOUT_SECS", "60")]).await;
    with_tests(&app);
    let cases = [
        (
            json!({"commands": [{"name": "bash", "args": ["x.sh"]}]}),
            "options.validation.commands[0].name",
        ),
        (
            json!({"commands": [{"name": "python", "args": ["../../etc/passwd"]}]}),
            "options.validation.commands[0].args[0]",
        ),
        (
            json!({"commands": [{"name": "python", "args": ["--version"]}]}),
            "options.validation.commands[0].args[0]",
        ),
        (
            json!({"commands": [{"name": "python", "args": ["t.py"]}], "timeout_secs": 61}),
            "options.validation.timeout_secs",
        ),
        (
            json!({"commands": [{"name": "python", "args": ["t.py"]}], "repair_rounds": 99}),
            "options.validation.repair_rounds",
        ),
        (json!({"commands": []}), "options.validation.commands"),
    ];
    for (v, field) in cases {
        let (status, body) = app.post_write_codebase(&batch(v.clone())).await;
        assert_eq!(status, 422, "{v}: {body}");
        assert_eq!(body["error"]["field"], field, "{v}: {body}");
    }
    assert!(app.fake().calls().is_empty());
    assert!(!app.repo_dir.join("calc.py").exists());
}

#[tokio::test]
async fn without_configured_commands_validation_is_refused_naming_writ_commands() {
    let app = writ_tests::spawn_app_with_models(Backend::Sqlite).await;
    let (status, body) = app.post_write_codebase(&batch(checks())).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRIT_COMMANDS"),
        "{body}"
    );
    assert!(app.fake().calls().is_empty());
    let resp = app
        .client
        .post(app.url("/run"))
        .json(&json!({"command": "python", "args": ["x.py"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
}

#[tokio::test]
async fn a_hostile_candidate_cannot_touch_the_workspace_it_is_checked_against() {
    let app = app_with(&[]).await;
    with_tests(&app);
    std::fs::write(app.repo_dir.join("keep.txt"), "precious\n").unwrap();
    // At import time it wipes what it can see and writes to the real REPO_DIR by its host path.
    let host_path = app.repo_dir.display().to_string();
    let hostile = format!(
        "import os, shutil\nfor name in os.listdir('.'):\n    p = os.path.join('.', name)\n    if name != 'tests':\n        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)\ntry:\n    open({host_path:?} + '/keep.txt', 'w').write('gone')\nexcept OSError:\n    pass\n\ndef add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    );
    script(&app, [hostile.as_str(), WRONG_ADD, WRONG_MUL]);
    let mut v = checks();
    v["repair_rounds"] = json!(0);
    let (_, body) = app.post_write_codebase(&batch(v)).await;
    // Its checks pass in its scratch copy, so it is chosen and written as text — never run here.
    assert_eq!(body["results"][0]["selection"], "validated", "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("keep.txt")).unwrap(),
        "precious\n"
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("tests/test_calc.py")).unwrap(),
        TEST_CALC
    );
}

#[tokio::test]
async fn run_executes_a_configured_command_on_a_scratch_copy_and_records_it() {
    let app = app_with(&[]).await;
    with_tests(&app);
    std::fs::write(app.repo_dir.join("calc.py"), CORRECT).unwrap();
    std::fs::write(
        app.repo_dir.join("wipe.py"),
        "import os\nos.remove('calc.py')\nprint('removed')\n",
    )
    .unwrap();
    let run = |body: Value| {
        let app = &app;
        async move { app.post_json("/run", &body).await }
    };
    let (status, out) =
        run(json!({"command": "python", "args": ["tests/test_calc.py"], "timeout_secs": 20})).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(out["stdout"], "ok\n");
    assert_eq!(out["timed_out"], false);
    assert_eq!(out["truncated"], false);
    assert!(out["duration_ms"].as_u64().is_some());

    let (_, out) = run(json!({"command": "python", "args": ["wipe.py"]})).await;
    assert_eq!(out["stdout"], "removed\n", "{out}");
    assert!(
        app.repo_dir.join("calc.py").exists(),
        "a run never changes REPO_DIR"
    );

    let (status, out) = run(json!({"command": "python", "args": ["/etc/passwd"]})).await;
    assert_eq!(status, 422, "{out}");
    assert_eq!(out["error"]["field"], "args[0]");
    let (status, out) = run(json!({"command": "sh", "args": ["-c", "id"]})).await;
    assert_eq!(status, 422, "{out}");
    assert_eq!(out["error"]["field"], "command");
    let (status, out) = run(json!({"command": "python", "timeout_secs": 100000})).await;
    assert_eq!(status, 422, "{out}");
    assert_eq!(out["error"]["field"], "timeout_secs");

    let (_, ops) = app.json("/operations?limit=10").await;
    let runs: Vec<&Value> = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "run")
        .collect();
    assert_eq!(runs.len(), 2, "{ops}");
    assert_eq!(runs[1]["detail"]["run"]["exit_code"], 0, "{ops}");
    assert_eq!(runs[1]["detail"]["run"]["command"], "python");
}

#[tokio::test]
async fn where_the_sandbox_cannot_start_readyz_says_why_and_nothing_runs() {
    // A read-only path the sandbox refuses makes its start-up probe fail, as a machine without
    // user namespaces or bubblewrap would.
    let app = app_with(&[("WRIT_SANDBOX_RO_PATHS", "relative/dir")]).await;
    with_tests(&app);
    let (status, ready) = app.json("/readyz").await;
    assert_eq!(status, 200, "commands are not required for writes: {ready}");
    let commands = &ready["checks"]["commands"];
    assert_eq!(commands["ok"], false, "{ready}");
    assert!(
        commands["detail"]
            .as_str()
            .unwrap()
            .contains("sandbox cannot start"),
        "{ready}"
    );
    let resp = app
        .client
        .post(app.url("/run"))
        .json(&json!({"command": "python", "args": ["tests/test_calc.py"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("extra_ro_paths"),
        "the reason is named: {body}"
    );
    let (status, body) = app.post_write_codebase(&batch(checks())).await;
    assert_eq!(status, 503, "{body}");
    assert!(app.fake().calls().is_empty(), "no model was called");
}

#[tokio::test]
async fn readyz_lists_the_configured_commands_when_the_sandbox_is_ready() {
    let app = app_with(&[]).await;
    let (_, ready) = app.json("/readyz").await;
    let commands = &ready["checks"]["commands"];
    assert_eq!(commands["ok"], true, "{ready}");
    assert_eq!(commands["required"], false);
    assert!(
        commands["detail"].as_str().unwrap().contains("python"),
        "{ready}"
    );
}

/// Two new files and one test that imports both: no first answer is right, so no candidate of
/// either file can pass alone; the right pair is among the candidates.
#[tokio::test]
async fn files_whose_test_needs_both_right_are_found_together() {
    let app = app_with(&[]).await;
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    std::fs::write(
        app.repo_dir.join("tests/test_pair.py"),
        "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom unit import scale\nfrom area import area\nassert scale(3) == 6\nassert area(2, 3) == 12\nprint('ok')\n",
    )
    .unwrap();
    let unit_right = "def scale(x):\n    return 2 * x\n";
    let unit_wrong = "def scale(x):\n    return x + 2\n";
    let area_right = "from unit import scale\n\n\ndef area(w, h):\n    return scale(w) * h\n";
    let area_wrong = "from unit import scale\n\n\ndef area(w, h):\n    return scale(w) + h\n";
    // The first model is wrong on both files; the second right on both; the third mixed.
    for (model, unit, area) in [
        (MODELS[0], unit_wrong, area_wrong),
        (MODELS[1], unit_right, area_right),
        (MODELS[2], unit_wrong, area_right),
    ] {
        app.fake().route(
            model,
            "Write the file \"unit.py\"",
            Script::always(Step::code("python", unit)),
        );
        app.fake().route(
            model,
            "Write the file \"area.py\"",
            Script::always(Step::code("python", area)),
        );
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "first")));
    let body = json!({"command": "write_codebase",
        "files": [{"filename": "unit.py", "code_description": "scale(x) doubles x"},
                  {"filename": "area.py", "code_description": "area(w, h) is scale(w) * h"}],
        "options": {"validation": {"commands": [{"name": "python", "args": ["tests/test_pair.py"]}],
                                   "repair_rounds": 0}}});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    for r in answer["results"].as_array().unwrap() {
        assert_eq!(r["success"], true, "{answer}");
        assert_eq!(r["validation"]["passed"], true, "{answer}");
    }
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("unit.py")).unwrap(),
        unit_right
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("area.py")).unwrap(),
        area_right
    );
}

/// The README's setup: a `pytest` command and a test module in the repository.
#[tokio::test]
async fn a_pytest_command_configured_as_the_readme_shows_picks_the_passing_file() {
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[(
            "WRIT_COMMANDS",
            r#"{"pytest": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "{args}"]}"#,
        )],
    )
    .await;
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    std::fs::write(
        app.repo_dir.join("tests/test_calc.py"),
        "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(4, 5) == 20\n",
    )
    .unwrap();
    script(&app, [WRONG_MUL, CORRECT, WRONG_ADD]);
    let body = batch(json!({"commands": [{"name": "pytest", "args": ["tests/test_calc.py"]}]}));
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    let result = &answer["results"][0];
    assert_eq!(result["selection"], "validated", "{answer}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap(),
        CORRECT
    );
    let failing = result["candidates"][0]["validation"]["output_tail"]
        .as_str()
        .unwrap();
    assert!(failing.contains("failed"), "pytest's own report: {failing}");
}
