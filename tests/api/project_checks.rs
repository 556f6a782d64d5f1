//! The project's own formatter (`WRIT_FORMATTERS`) and diagnostics (`WRIT_DIAGNOSTICS`) end to
//! end, in the real sandbox with the machine's python3: the chosen candidate is formatted before
//! it is written and the answer and audit record say by which command; a candidate the
//! diagnostics reject ranks below a clean one and goes to repair with their output.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

/// A formatter in the project's convention: the file's path in, the formatted file on stdout.
/// It indents with four spaces, strips trailing whitespace and ends with one newline.
const FORMATTER: &str = "import sys\nlines = [l.rstrip().replace('\\t', '    ') for l in open(sys.argv[1]).read().splitlines()]\nwhile lines and not lines[-1]:\n    lines.pop()\nsys.stdout.write('\\n'.join(lines) + '\\n')\n";

const CORRECT: &str = "def add(a, b):\n    return a + b\n";
/// As a model may write it: a tab, trailing spaces.
const UNTIDY: &str = "def add(a, b):   \n\treturn a + b\n";
/// Both parse (tree-sitter accepts them) but do not compile: only the diagnostics catch them.
const BREAK_OUTSIDE_LOOP: &str = "def add(a, b):\n    return a + b\n\n\nbreak\n";
const DUPLICATE_ARGUMENT: &str = "def add(a, a):\n    return a + a\n";
/// A project's linter: a file that prints fails, with a message an editor would show.
const NO_PRINT_LINT: &str = "import sys\nbad = [i + 1 for i, l in enumerate(open(sys.argv[1])) if 'print(' in l]\nif bad:\n    print(f'{sys.argv[1]}:{bad[0]}: no print() in library code')\n    sys.exit(1)\n";
const TEST_ADD: &str = "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom calc import add\nassert add(2, 3) == 5\nprint('ok')\n";

fn commands() -> String {
    json!({
        "fmt": ["python3", "-c", FORMATTER, "{args}"],
        "broken_fmt": ["python3", "-c", "import sys; sys.exit(3)", "{args}"],
        "py_compile": ["python3", "-m", "py_compile", "{args}"],
        "no_print": ["python3", "-c", NO_PRINT_LINT, "{args}"],
        "python": ["python3", "{args}"],
    })
    .to_string()
}

async fn app_with(extra: &[(&str, &str)]) -> TestApp {
    let commands = commands();
    let mut vars = vec![("WRIT_COMMANDS", commands.as_str())];
    vars.extend_from_slice(extra);
    writ_tests::spawn_app_with_models_and(Backend::Sqlite, &vars).await
}

fn batch(options: Value) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "calc.py", "code_description": "add(a, b) returns the sum"}],
           "options": options})
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

fn written(app: &TestApp) -> String {
    std::fs::read_to_string(app.repo_dir.join("calc.py")).unwrap()
}

/// The names of the events the batch's stream carried.
async fn event_stream(app: &TestApp, body: &Value) -> String {
    let job = body["request_id"].as_str().unwrap();
    let r = app
        .client
        .get(app.url(&format!("/jobs/{job}/events")))
        .send()
        .await
        .unwrap();
    r.text().await.unwrap()
}

#[tokio::test]
async fn the_projects_formatter_formats_the_written_file_and_the_answer_and_audit_say_by_which_command()
 {
    let app = app_with(&[("WRIT_FORMATTERS", r#"{"python": "fmt"}"#)]).await;
    script(&app, [UNTIDY, UNTIDY, UNTIDY]);

    let (status, body) = app.post_write_codebase(&batch(json!({}))).await;

    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{body}");
    assert_eq!(written(&app), CORRECT);
    assert_eq!(
        result["formatted"],
        json!({"command": "fmt", "changed": true}),
        "{body}"
    );
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            result["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        op["detail"]["formatted"],
        json!({"command": "fmt", "changed": true}),
        "{op}"
    );
    let stream = event_stream(&app, &body).await;
    assert!(stream.contains("event: formatted"), "{stream}");
    // The formatter ran on a scratch copy: REPO_DIR holds only what writ wrote.
    assert_eq!(app.files_on_disk(), vec!["calc.py".to_string()]);
}

#[tokio::test]
async fn a_formatter_that_fails_or_is_turned_off_leaves_the_candidate_as_the_model_wrote_it() {
    let app = app_with(&[("WRIT_FORMATTERS", r#"{"python": "broken_fmt"}"#)]).await;
    script(&app, [UNTIDY, UNTIDY, UNTIDY]);

    let (_, body) = app.post_write_codebase(&batch(json!({}))).await;

    let result = &body["results"][0];
    assert_eq!(
        result["success"], true,
        "a failed formatter never blocks the write: {body}"
    );
    assert_eq!(written(&app), UNTIDY);
    assert_eq!(result["formatted"]["command"], "broken_fmt", "{body}");
    assert_eq!(result["formatted"]["changed"], false, "{body}");
    assert!(
        result["formatted"]["error"]
            .as_str()
            .unwrap()
            .contains("exited 3"),
        "{body}"
    );

    // Turned off by the batch: no formatter runs and the answer says nothing of one.
    let app = app_with(&[("WRIT_FORMATTERS", r#"{"python": "fmt"}"#)]).await;
    script(&app, [UNTIDY, UNTIDY, UNTIDY]);
    let (_, body) = app
        .post_write_codebase(&batch(json!({"validation": {"format": false}})))
        .await;
    assert_eq!(body["results"][0]["success"], true, "{body}");
    assert!(body["results"][0].get("formatted").is_none(), "{body}");
    assert_eq!(written(&app), UNTIDY);
}

#[tokio::test]
async fn a_candidate_failing_the_diagnostics_is_not_chosen_though_the_arbiter_prefers_it() {
    let app = app_with(&[("WRIT_DIAGNOSTICS", r#"{"python": "py_compile"}"#)]).await;
    script(&app, [BREAK_OUTSIDE_LOOP, DUPLICATE_ARGUMENT, CORRECT]);

    // No options: the server's diagnostics apply to every batch.
    let (status, body) = app.post_write_codebase(&batch(json!({}))).await;

    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{body}");
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    assert_eq!(result["selection"], "validated", "{body}");
    assert_eq!(written(&app), CORRECT);
    assert!(
        app.fake().calls_for(ARBITER).is_empty(),
        "one clean candidate"
    );
    let candidates = result["candidates"].as_array().unwrap();
    let diagnostics: Vec<Value> = candidates
        .iter()
        .map(|c| c["validation"]["diagnostics"].clone())
        .collect();
    assert_eq!(
        diagnostics,
        [
            json!({"command": "py_compile", "passed": false}),
            json!({"command": "py_compile", "passed": false}),
            json!({"command": "py_compile", "passed": true}),
        ],
        "{body}"
    );
    let output = candidates[0]["validation"]["output_tail"].as_str().unwrap();
    assert!(output.contains("'break' outside loop"), "{output}");
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            result["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        op["candidates"][1]["validation"]["diagnostics"]["passed"], false,
        "{op}"
    );
    assert_eq!(app.files_on_disk(), vec!["calc.py".to_string()]);
}

#[tokio::test]
async fn a_candidate_failing_the_diagnostics_goes_to_repair_with_the_compilers_output() {
    let app = app_with(&[("WRIT_DIAGNOSTICS", r#"{"python": "py_compile"}"#)]).await;
    app.fake().script(
        MODELS[0],
        Script::steps([
            Step::code("python", BREAK_OUTSIDE_LOOP),
            Step::code("python", CORRECT),
        ]),
    );
    app.fake().script(
        MODELS[1],
        Script::always(Step::code("python", DUPLICATE_ARGUMENT)),
    );
    app.fake().script(
        MODELS[2],
        Script::always(Step::text("I cannot help with that.")),
    );

    let (_, body) = app
        .post_write_codebase(&batch(
            json!({"validation": {"diagnostics": true, "repair_rounds": 1}}),
        ))
        .await;

    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{body}");
    assert_eq!(result["selection"], "repaired", "{body}");
    assert_eq!(result["chosen_model"], MODELS[0], "{body}");
    assert_eq!(written(&app), CORRECT);
    let calls = app.fake().calls_for(MODELS[0]);
    assert_eq!(calls.len(), 2);
    let messages = calls[1].body["messages"].as_array().unwrap();
    let last = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(
        last.contains("failed the project's diagnostics")
            && last.contains("`py_compile`")
            && last.contains("'break' outside loop"),
        "{last}"
    );
}

#[tokio::test]
async fn with_the_callers_tests_a_candidate_that_passes_them_but_not_the_linter_ranks_below_a_clean_one()
 {
    let app = app_with(&[("WRIT_DIAGNOSTICS", r#"{"python": "no_print"}"#)]).await;
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    std::fs::write(app.repo_dir.join("tests/test_add.py"), TEST_ADD).unwrap();
    let chatty = "def add(a, b):\n    print('adding')\n    return a + b\n";
    script(&app, [chatty, DUPLICATE_ARGUMENT, CORRECT]);

    let (status, body) = app
        .post_write_codebase(&batch(json!({"validation": {
            "commands": [{"name": "python", "args": ["tests/test_add.py"]}],
            "repair_rounds": 0}})))
        .await;

    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["chosen_model"], MODELS[2], "{body}");
    assert_eq!(result["selection"], "validated", "{body}");
    assert_eq!(written(&app), CORRECT);
    let first = &result["candidates"][0]["validation"];
    assert_eq!(first["command"], "no_print", "{body}");
    assert!(
        first["output_tail"]
            .as_str()
            .unwrap()
            .contains("calc.py:2: no print() in library code"),
        "{body}"
    );
}
