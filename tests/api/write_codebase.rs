//! `POST /write_codebase` end to end: the fake upstream plays the models.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{
    ARBITER, Backend, FALLBACK, MODELS, TestApp, on_both_backends, spawn_app_with_models,
};

fn one_file(name: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": name, "code_description": "a function add(a, b) returning the sum"}]})
}

fn script_all(app: &TestApp, step: Step) {
    for m in MODELS {
        app.fake().script(m, Script::always(step.clone()));
    }
}

/// Every model, the fallback too, refuses the calls for `file` (a 400, which is not retried):
/// that file fails and the batch's others do not.
fn fail_every_model_for(app: &TestApp, file: &str) {
    let prompt = format!("Write the file \"{file}\"");
    for m in MODELS.iter().chain([&FALLBACK, &ARBITER]) {
        app.fake()
            .route(m, &prompt, Script::always(Step::status(400)));
    }
}

fn on_disk(app: &TestApp, name: &str) -> String {
    std::fs::read_to_string(app.repo_dir.join(name)).unwrap()
}

/// The code shown under `## Candidate n` in the arbiter's prompt.
fn shown_candidate(prompt: &str, n: usize) -> String {
    let start = prompt.find(&format!("## Candidate {n}\n")).unwrap();
    let block = &prompt[start..];
    let open_end = block.find('\n').unwrap() + 1;
    let fence_line_end = open_end + block[open_end..].find('\n').unwrap() + 1;
    let fence: String = block[open_end..]
        .chars()
        .take_while(|c| *c == '`')
        .collect();
    let body = &block[fence_line_end..];
    body[..body.find(&format!("\n{fence}")).unwrap()].to_string()
}

async fn identical_candidates_are_one_and_need_no_arbiter(app: TestApp) {
    script_all(
        &app,
        Step::code("python", "def add(a, b):\n    return a + b"),
    );
    let (status, body) = app.post_write_codebase(&one_file("calc.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "success");
    let r = &body["results"][0];
    assert_eq!(r["selection"], "single_candidate");
    assert_eq!(r["operation"], "created");
    assert_eq!(r["candidates"].as_array().unwrap().len(), 3);
    assert!(
        app.fake().calls_for(ARBITER).is_empty(),
        "no arbiter call for one distinct candidate"
    );
    assert_eq!(
        on_disk(&app, "calc.py"),
        "def add(a, b):\n    return a + b\n"
    );
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            r["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["selection"], "single_candidate");
    assert_eq!(op["candidates"].as_array().unwrap().len(), 3);
    assert_eq!(op["content"], "def add(a, b):\n    return a + b\n");
}

async fn the_arbiter_sees_numbered_anonymous_candidates_and_its_choice_is_honoured(app: TestApp) {
    for (i, m) in MODELS.iter().enumerate() {
        app.fake().script(
            m,
            Script::always(Step::code(
                "python",
                format!("def add(a, b):\n    return a + b  # v{i}"),
            )),
        );
    }
    app.fake().script(
        ARBITER,
        Script::always(Step::verdict(2, "the second is clearest")),
    );
    let (status, body) = app.post_write_codebase(&one_file("calc.py")).await;
    assert_eq!(status, 200, "{body}");
    let r = &body["results"][0];
    assert_eq!(r["selection"], "arbiter");
    assert_eq!(r["arbiter_reason"], "the second is clearest");

    let calls = app.fake().calls_for(ARBITER);
    assert_eq!(calls.len(), 1);
    let prompt = calls[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    for n in 1..=3 {
        assert!(prompt.contains(&format!("## Candidate {n}\n")), "{prompt}");
    }
    for m in MODELS {
        assert!(
            !prompt.contains(m),
            "the arbiter must not see model names: {prompt}"
        );
    }
    assert!(calls[0].body["response_format"]["type"] == "json_schema");
    let chosen = shown_candidate(&prompt, 2);
    assert_eq!(on_disk(&app, "calc.py").trim_end(), chosen.trim_end());
    let winner = r["chosen_model"].as_str().unwrap();
    let version = chosen
        .rsplit("# v")
        .next()
        .unwrap()
        .trim()
        .parse::<usize>()
        .unwrap();
    assert_eq!(
        winner, MODELS[version],
        "chosen_model names the model whose code was written"
    );
}

async fn arbiter_nonsense_falls_back_to_the_first_viable_candidate(app: TestApp) {
    for (i, m) in MODELS.iter().enumerate() {
        app.fake()
            .script(m, Script::always(Step::code("python", format!("x = {i}"))));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::text("They are all lovely.")));
    let (_, body) = app.post_write_codebase(&one_file("x.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["selection"], "arbiter_failed_first_viable");
    assert_eq!(r["chosen_model"], MODELS[0]);
    assert_eq!(on_disk(&app, "x.py"), "x = 0\n");
}

async fn a_model_that_is_down_does_not_stop_the_others(app: TestApp) {
    script_all(&app, Step::code("python", "y = 1"));
    app.fake()
        .script(MODELS[1], Script::always(Step::status(500)));
    let (_, body) = app.post_write_codebase(&one_file("y.py")).await;
    assert_eq!(body["status"], "success", "{body}");
    let candidates = body["results"][0]["candidates"].as_array().unwrap();
    let down = candidates.iter().find(|c| c["model"] == MODELS[1]).unwrap();
    assert_eq!(down["ok"], false);
    assert_eq!(down["error_class"], "server_error");
    assert_eq!(
        app.fake().calls_for(MODELS[1]).len(),
        2,
        "retried up to the configured attempts"
    );
}

async fn when_every_candidate_fails_the_fallback_model_writes_the_file(app: TestApp) {
    script_all(&app, Step::status(503));
    app.fake().script(
        FALLBACK,
        Script::always(Step::code("python", "z = 'rescued'")),
    );
    let (_, body) = app.post_write_codebase(&one_file("z.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["selection"], "fallback", "{body}");
    assert_eq!(r["chosen_model"], FALLBACK);
    assert_eq!(on_disk(&app, "z.py"), "z = 'rescued'\n");
}

async fn a_rejected_key_is_answered_within_seconds_without_retries(app: TestApp) {
    script_all(&app, Step::status(401));
    app.fake()
        .script(FALLBACK, Script::always(Step::status(401)));
    let started = Instant::now();
    let (status, body) = app.post_write_codebase(&one_file("k.py")).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(status, 200);
    assert_eq!(body["status"], "error");
    let r = &body["results"][0];
    assert!(r["error"].as_str().unwrap().contains("key"), "{r}");
    for m in MODELS {
        assert_eq!(app.fake().calls_for(m).len(), 1, "a 401 is never retried");
    }
    assert!(
        app.fake().calls_for(FALLBACK).is_empty(),
        "no fallback when the provider refused the key"
    );
    assert!(!app.repo_dir.join("k.py").exists());
    let (_, ops) = app.json("/operations?status=failed").await;
    assert_eq!(
        ops["operations"][0]["filename"], "k.py",
        "failures are in the audit log too"
    );
    let (status, ready) = app.json("/readyz").await;
    assert_eq!(
        status, 503,
        "a rejected key makes the provider not ready: {ready}"
    );
    assert_eq!(ready["checks"]["provider"]["ok"], false);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("writ_model_calls_total") && l.contains(MODELS[0])),
        "per-model call metrics are exported: {metrics}"
    );
}

async fn prose_and_mojibake_are_cleaned_from_candidates(app: TestApp) {
    script_all(
        &app,
        Step::text(
            "Sure! Here is the file you asked for:\n\n```python\ngreeting = \"cafÃ©\"\n```\n\nLet me know if you need more.",
        ),
    );
    let (_, body) = app.post_write_codebase(&one_file("g.py")).await;
    assert_eq!(body["status"], "success", "{body}");
    assert_eq!(on_disk(&app, "g.py"), "greeting = \"café\"\n");
}

async fn a_candidate_that_does_not_parse_loses_to_one_that_does(app: TestApp) {
    app.fake().script(
        MODELS[0],
        Script::always(Step::code("python", "def broken(:\n    pass")),
    );
    app.fake().script(
        MODELS[1],
        Script::always(Step::code("python", "def fine():\n    pass")),
    );
    app.fake()
        .script(MODELS[2], Script::always(Step::status(500)));
    let (_, body) = app.post_write_codebase(&one_file("p.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["chosen_model"], MODELS[1], "{body}");
    assert_eq!(r["selection"], "single_candidate");
    let broken = r["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["model"] == MODELS[0])
        .unwrap()
        .clone();
    assert_eq!(broken["parsed"], false);
    assert!(app.fake().calls_for(ARBITER).is_empty());
    assert_eq!(on_disk(&app, "p.py"), "def fine():\n    pass\n");
}

async fn every_refusal_names_its_field_calls_no_model_and_writes_nothing(app: TestApp) {
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), app.repo_dir.join("out")).unwrap();
    let f = |name: &str| json!({"filename": name, "code_description": "d"});
    let cases = [
        (json!({"command": "write", "files": [f("a.py")]}), "command"),
        (json!({"command": "write_codebase", "files": []}), "files"),
        (
            json!({"command": "write_codebase", "files": [f("1.py"), f("2.py"), f("3.py"), f("4.py"), f("5.py"), f("6.py")]}),
            "files",
        ),
        (
            json!({"command": "write_codebase", "files": [{"filename": "a.py"}]}),
            "files[0].code_description",
        ),
        (
            json!({"command": "write_codebase", "files": [{"code_description": "x"}]}),
            "files[0].filename",
        ),
        (
            json!({"command": "write_codebase", "files": [f("a.py"), f("./a.py")]}),
            "files[1].filename",
        ),
        (
            json!({"command": "write_codebase", "files": [f("../a.py")]}),
            "files[0].filename",
        ),
        (
            json!({"command": "write_codebase", "files": [f("out/a.py")]}),
            "files[0].filename",
        ),
        (
            json!({"command": "write_codebase", "files": [{"filename": "a.py", "code_description": "d", "colour": 1}]}),
            "files[0].colour",
        ),
        (
            json!({"command": "write_codebase", "files": [f("a.py")], "extra": true}),
            "extra",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = app.post_write_codebase(&body).await;
        // A body that is not the request's shape is 400; a well-formed one that breaks a rule
        // is 422; a path the sandbox refuses is 403. Never a 5xx, never a 200.
        assert!(
            [400, 403, 422].contains(&status),
            "{body}: {status} {answer}"
        );
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    // A file that no longer holds its expected_sha256 refuses the whole batch, as a stale edit
    // does: 412, before any model is called.
    std::fs::write(app.repo_dir.join("guarded.py"), "original\n").unwrap();
    let stale = json!({"command": "write_codebase",
        "files": [f("fresh.py"),
                  {"filename": "guarded.py", "code_description": "d", "expected_sha256": "0".repeat(64)}]});
    let (status, answer) = app.post_write_codebase(&stale).await;
    assert_eq!(status, 412, "{answer}");
    assert_eq!(answer["error"]["code"], "precondition_failed", "{answer}");
    assert_eq!(
        answer["error"]["field"], "files[1].expected_sha256",
        "{answer}"
    );
    assert_eq!(on_disk(&app, "guarded.py"), "original\n");
    std::fs::remove_file(app.repo_dir.join("guarded.py")).unwrap();
    let (_, ops) = app.json("/operations?limit=500").await;
    assert_eq!(
        ops["operations"],
        json!([]),
        "no operation was recorded: {ops}"
    );
    let (_, answer) = app
        .post_write_codebase(&json!({"command": "write_codebase", "files": [f("1.py"), f("2.py"), f("3.py"), f("4.py"), f("5.py"), f("6.py")]}))
        .await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 5 files per batch, got 6")
    );
    assert!(app.fake().calls().is_empty(), "no model was called");
    assert_eq!(
        app.files_on_disk(),
        vec!["out".to_string()],
        "nothing was written"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

async fn an_idempotent_repeat_replays_without_calling_models_and_another_body_conflicts(
    app: TestApp,
) {
    script_all(&app, Step::code("python", "a = 1"));
    let send = |body: Value| {
        let client = app.client.clone();
        let url = app.url("/write_codebase");
        async move {
            client
                .post(url)
                .header("idempotency-key", "job-42")
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let first = send(one_file("i.py")).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    let calls = app.fake().calls().len();
    let again = send(one_file("i.py")).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first);
    assert_eq!(app.fake().calls().len(), calls, "a replay calls no model");
    let other = send(one_file("other.py")).await;
    assert_eq!(other.status(), 409);
    assert!(!app.repo_dir.join("other.py").exists());
}

async fn two_batches_writing_one_file_both_complete_and_leave_it_whole(app: TestApp) {
    let big_a = format!("A = '{}'", "a".repeat(200_000));
    let big_b = format!("B = '{}'", "b".repeat(200_000));
    app.fake().script(
        MODELS[0],
        Script::always(Step::code("python", big_a.clone())),
    );
    app.fake().script(
        MODELS[1],
        Script::always(Step::code("python", big_b.clone())),
    );
    app.fake()
        .script(MODELS[2], Script::always(Step::status(400)));
    app.fake()
        .script(ARBITER, Script::always(Step::text("no idea")));
    let mut one = one_file("same.py");
    one["options"] = json!({"models": [MODELS[0]]});
    let mut two = one_file("same.py");
    two["options"] = json!({"models": [MODELS[1]]});
    let (a, b) = tokio::join!(app.post_write_codebase(&one), app.post_write_codebase(&two));
    assert_eq!((a.0, b.0), (200, 200));
    assert_eq!(a.1["status"], "success", "{}", a.1);
    assert_eq!(b.1["status"], "success", "{}", b.1);
    let content = on_disk(&app, "same.py");
    assert!(
        content == format!("{big_a}\n") || content == format!("{big_b}\n"),
        "the file is one whole version"
    );
    let (_, ops) = app.json("/operations?filename=same.py").await;
    let ops = ops["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(
        ops[0]["sha256"].as_str().unwrap(),
        writ_core::content::sha256_hex(content.as_bytes()),
        "the newest record is what is on disk"
    );
}

async fn an_atomic_batch_with_a_failing_file_writes_nothing(app: TestApp) {
    script_all(&app, Step::code("python", "ok = True"));
    fail_every_model_for(&app, "broken.py");
    let body = json!({"command": "write_codebase",
        "files": [{"filename": "fresh.py", "code_description": "d"},
                  {"filename": "broken.py", "code_description": "d"}],
        "options": {"atomic": true}});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200);
    assert_eq!(answer["status"], "error", "{answer}");
    assert!(
        answer["results"][0]["error"]
            .as_str()
            .unwrap()
            .contains("atomic"),
        "{answer}"
    );
    assert!(!app.repo_dir.join("fresh.py").exists());
    assert!(!app.repo_dir.join("broken.py").exists());
}

async fn dry_run_returns_the_content_and_writes_nothing(app: TestApp) {
    script_all(&app, Step::code("python", "d = 1"));
    let mut body = one_file("d.py");
    body["options"] = json!({"dry_run": true});
    let (_, answer) = app.post_write_codebase(&body).await;
    assert_eq!(answer["results"][0]["content"], "d = 1\n", "{answer}");
    assert!(!app.repo_dir.join("d.py").exists());
}

async fn an_update_shows_the_models_the_current_content(app: TestApp) {
    std::fs::write(app.repo_dir.join("u.py"), "OLD_MARKER = 1\n").unwrap();
    script_all(&app, Step::code("python", "NEW = 2"));
    let (_, answer) = app.post_write_codebase(&one_file("u.py")).await;
    assert_eq!(answer["results"][0]["operation"], "updated");
    let prompt = app.fake().calls_for(MODELS[0])[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("OLD_MARKER = 1"), "{prompt}");
    assert!(prompt.contains("u.py") && prompt.contains("Python"));
}

async fn files_written_together_keep_their_own_outcomes_and_leave_nothing_pending(app: TestApp) {
    script_all(&app, Step::code("python", "ok = True"));
    fail_every_model_for(&app, "broken.py");
    let repo = &app.repo_dir;
    std::fs::write(repo.join("same.py"), "ok = True\n").unwrap();
    std::fs::write(repo.join("upd.py"), "old = 1\n").unwrap();
    let upd_sha = writ_core::content::sha256_hex(b"old = 1\n");
    let body = json!({"command": "write_codebase",
        "files": [{"filename": "fresh.py", "code_description": "d"},
                  {"filename": "same.py", "code_description": "d"},
                  {"filename": "upd.py", "code_description": "d", "expected_sha256": upd_sha},
                  {"filename": "broken.py", "code_description": "d"},
                  {"filename": "sub/dir/deep.py", "code_description": "d"}]});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    let outcome = |i: usize| results[i]["operation"].as_str().unwrap_or("-").to_string();
    assert_eq!(
        (0..5).map(outcome).collect::<Vec<_>>(),
        ["created", "unchanged", "updated", "-", "created"],
        "{answer}"
    );
    assert_eq!(answer["status"], "partial_success");
    assert_eq!(results[3]["success"], false);
    assert!(results[3]["error"].is_string(), "{answer}");
    for name in ["fresh.py", "same.py", "upd.py", "sub/dir/deep.py"] {
        assert_eq!(on_disk(&app, name), "ok = True\n", "{name}");
    }
    assert!(!repo.join("broken.py").exists());

    // Every record of the batch is final, and each one says what happened to its file.
    let request_id = answer["request_id"].as_str().unwrap();
    let (_, ops) = app
        .json(&format!("/operations?request_id={request_id}&limit=100"))
        .await;
    let ops = ops["operations"].as_array().unwrap();
    let status_of = |name: &str| {
        ops.iter()
            .filter(|op| op["filename"] == name)
            .map(|op| op["status"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    for name in ["fresh.py", "same.py", "upd.py", "sub/dir/deep.py"] {
        assert_eq!(status_of(name), ["succeeded"], "{name}: {ops:?}");
    }
    assert!(
        status_of("broken.py").iter().all(|s| s == "failed") && !status_of("broken.py").is_empty(),
        "{ops:?}"
    );
    let (_, pending) = app.json("/operations?status=pending").await;
    assert_eq!(pending["operations"], json!([]), "{pending}");
}

on_both_backends!(with_models:
    identical_candidates_are_one_and_need_no_arbiter,
    the_arbiter_sees_numbered_anonymous_candidates_and_its_choice_is_honoured,
    arbiter_nonsense_falls_back_to_the_first_viable_candidate,
    a_model_that_is_down_does_not_stop_the_others,
    when_every_candidate_fails_the_fallback_model_writes_the_file,
    a_rejected_key_is_answered_within_seconds_without_retries,
    prose_and_mojibake_are_cleaned_from_candidates,
    a_candidate_that_does_not_parse_loses_to_one_that_does,
    every_refusal_names_its_field_calls_no_model_and_writes_nothing,
    an_idempotent_repeat_replays_without_calling_models_and_another_body_conflicts,
    two_batches_writing_one_file_both_complete_and_leave_it_whole,
    an_atomic_batch_with_a_failing_file_writes_nothing,
    dry_run_returns_the_content_and_writes_nothing,
    an_update_shows_the_models_the_current_content,
    files_written_together_keep_their_own_outcomes_and_leave_nothing_pending,
);

mod configuration {
    use super::*;
    use writ_tests::{spawn_with, test_settings_with};

    #[tokio::test]
    async fn openrouter_models_without_a_key_are_refused_at_once_naming_the_variable() {
        let (settings, dirs) =
            test_settings_with(Backend::Sqlite, &[("CODE_LIST", "openai/gpt-x")]).await;
        let app = spawn_with(settings, dirs, Backend::Sqlite).await;
        let started = Instant::now();
        let (status, body) = app.post_write_codebase(&one_file("a.py")).await;
        assert_eq!(status, 503);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("OPENROUTER_API_KEY"),
            "{body}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(app.files_on_disk().is_empty());
    }

    #[tokio::test]
    async fn no_models_at_all_is_refused_naming_code_list() {
        let app = writ_tests::spawn_app(Backend::Sqlite).await;
        let (status, body) = app.post_write_codebase(&one_file("a.py")).await;
        assert_eq!(status, 503);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("CODE_LIST"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_client_that_hangs_up_does_not_cancel_the_batch() {
        let app = spawn_app_with_models(Backend::Sqlite).await;
        for m in MODELS {
            app.fake().script(
                m,
                Script::always(Step::code("python", "late = 1"))
                    .with_latency(Latency::fixed(Duration::from_millis(600))),
            );
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(150))
            .build()
            .unwrap();
        let r = client
            .post(app.url("/write_codebase"))
            .json(&one_file("late.py"))
            .send()
            .await;
        assert!(r.is_err(), "the client gave up");
        // The batch goes on without its client; its operation ends well within the models' 600 ms.
        let started = std::time::Instant::now();
        loop {
            let (_, ops) = app.json("/operations?filename=late.py").await;
            if ops["operations"][0]["status"] == "succeeded" {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the batch never finished: {ops}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            on_disk(&app, "late.py"),
            "late = 1\n",
            "the batch finished anyway"
        );
        let (_, ops) = app.json("/operations?filename=late.py").await;
        assert_eq!(ops["operations"][0]["status"], "succeeded");
    }
}
