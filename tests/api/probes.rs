//! Hostile requests and candidates against the sandbox and the checks, end to end: each is
//! refused, or fails its checks, and nothing of it lands in the workspace.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

const PYTEST: &str = r#"{"pytest": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "{args}"],
  "python": ["python3", "{args}"]}"#;

const TEST_CALC: &str = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n";

async fn app() -> TestApp {
    let app =
        writ_tests::spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_COMMANDS", PYTEST)]).await;
    std::fs::create_dir_all(app.repo_dir.join("tests")).unwrap();
    std::fs::write(app.repo_dir.join("tests/test_calc.py"), TEST_CALC).unwrap();
    app
}

fn batch(args: &[&str], repair_rounds: u32) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "calc.py", "code_description": "add(a, b)"}],
           "options": {"validation": {
               "commands": [{"name": "pytest", "args": args}],
               "timeout_secs": 30, "repair_rounds": repair_rounds}}})
}

/// A JSON-RPC message to `/mcp` as the holder of `key`, in `session` when given.
async fn mcp_post(
    app: &TestApp,
    key: &str,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut req = app
        .client
        .post(app.url("/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    req.send().await.unwrap()
}

async fn post_run(app: &TestApp, body: Value) -> (u16, Value) {
    app.post_json("/run", &body).await
}

#[tokio::test]
async fn run_and_validation_arguments_with_bidi_or_control_characters_are_refused() {
    let app = app().await;
    for bad in [
        "a\u{202e}yp.py",
        "tests/\u{2066}x.py",
        "x\u{200f}.py",
        "x\u{61c}.py",
        "x\u{85}.py",
    ] {
        let (status, body) =
            post_run(&app, json!({"command": "python", "args": ["ok.py", bad]})).await;
        assert_eq!(status, 422, "{bad:?}: {body}");
        assert_eq!(body["error"]["field"], "args[1]", "{bad:?}: {body}");
        let code_point = format!(
            "U+{:04X}",
            u32::from(bad.chars().find(|c| !c.is_ascii()).unwrap())
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&code_point),
            "{bad:?}: {body}"
        );
        let (status, body) = app.post_write_codebase(&batch(&[bad], 0)).await;
        assert_eq!(status, 422, "{bad:?}: {body}");
        assert_eq!(
            body["error"]["field"], "options.validation.commands[0].args[0]",
            "{bad:?}: {body}"
        );
    }
    assert!(
        app.fake().calls().is_empty(),
        "refused before any model call"
    );
    let (_, ops) = app.json("/operations?limit=10").await;
    assert_eq!(ops["operations"], json!([]), "nothing ran: {ops}");
}

/// A candidate that ends the test process with status 0 when imported: pytest never reports a
/// test, so the check has no evidence of a pass and the candidate is not written.
#[tokio::test]
async fn a_candidate_that_exits_0_at_import_does_not_pass_validation() {
    let app = app().await;
    let hostile = "import os\nos._exit(0)\n\n\ndef add(a, b):\n    return a - b\n";
    for m in MODELS {
        app.fake()
            .script(m, Script::always(Step::code("python", hostile)));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "first")));
    let (status, body) = app
        .post_write_codebase(&batch(&["tests/test_calc.py"], 0))
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["success"], false, "{body}");
    assert_eq!(result["validation"]["passed"], false, "{body}");
    let error = result["error"].as_str().unwrap();
    assert!(error.contains("without showing a pass"), "{error}");
    let record = &result["candidates"][0]["validation"];
    assert_eq!(record["exit_code"], 0, "{body}");
    assert!(
        record["output_tail"].as_str().unwrap().contains("N passed"),
        "the reason is there for a repair round: {body}"
    );
    assert!(!app.repo_dir.join("calc.py").exists());

    // The same check on an honest candidate passes.
    let right = "def add(a, b):\n    return a + b\n";
    for m in MODELS {
        app.fake()
            .script(m, Script::always(Step::code("python", right)));
    }
    let (_, body) = app
        .post_write_codebase(&batch(&["tests/test_calc.py"], 0))
        .await;
    assert_eq!(body["results"][0]["selection"], "validated", "{body}");

    // `POST /run` says the same of a test file that collects nothing.
    std::fs::write(
        app.repo_dir.join("tests/test_none.py"),
        "import os\nos._exit(0)\n",
    )
    .unwrap();
    let (status, out) = post_run(
        &app,
        json!({"command": "pytest", "args": ["tests/test_none.py"]}),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");
    assert!(
        out["missing_evidence"]
            .as_str()
            .unwrap()
            .contains("N passed"),
        "{out}"
    );
}

/// Two working keys and one with `admin`: each working key sees only its own jobs, events,
/// operations and MCP sessions; `admin` sees every key's records.
#[tokio::test]
async fn one_key_cannot_see_or_use_what_another_key_made() {
    use writ_core::keys::{self, Scope, Scopes};
    let work = Scopes::of(&[Scope::Read, Scope::Write, Scope::Run]);
    let (a, b, admin) = (
        keys::generate("a"),
        keys::generate("b"),
        keys::generate("audit"),
    );
    let entries = [
        keys::config_entry_with_scopes(&a.key, Some(work)).unwrap(),
        keys::config_entry_with_scopes(&b.key, Some(work)).unwrap(),
        keys::config_entry_with_scopes(&admin.key, Some(Scopes::of(&[Scope::Read, Scope::Admin])))
            .unwrap(),
    ]
    .join(",");
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_API_KEYS", entries.as_str()),
            ("WRIT_COMMANDS", PYTEST),
        ],
    )
    .await;
    let right = "def add(a, b):\n    return a + b\n";
    for m in MODELS {
        app.fake()
            .script(m, Script::always(Step::code("python", right)));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "first")));
    let get = |key: &str, path: &str| {
        let req = app.client.get(app.url(path)).bearer_auth(key);
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    // Key A writes a batch (a job with events) and a file directly (an operation).
    let r = app
        .client
        .post(app.url("/write_codebase"))
        .bearer_auth(&a.key)
        .json(&json!({"command": "write_codebase",
            "files": [{"filename": "calc.py", "code_description": "add(a, b)"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let job = answer["request_id"].as_str().unwrap().to_string();
    let op = answer["results"][0]["operation_id"]
        .as_str()
        .unwrap()
        .to_string();

    for (key, visible) in [(&a.key, true), (&b.key, false), (&admin.key, true)] {
        let (status, jobs) = get(key, "/jobs").await;
        assert_eq!(status, 200, "{jobs}");
        let ids: Vec<&str> = jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.contains(&job.as_str()), visible, "{jobs}");
        let want = if visible { 200 } else { 404 };
        for path in [
            format!("/jobs/{job}"),
            format!("/jobs/{job}/events"),
            format!("/operations/{op}"),
        ] {
            let r = app
                .client
                .get(app.url(&path))
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), want, "{path} visible={visible}");
        }
        let (_, ops) = get(key, "/operations?limit=50").await;
        let ids: Vec<&str> = ops["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.contains(&op.as_str()), visible, "{ops}");
    }

    // The tools say the same as the routes.
    let r = app
        .client
        .post(app.url("/tools/call"))
        .bearer_auth(&b.key)
        .json(&json!({"name": "get_operation", "arguments": {"id": op}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // An MCP session opened by A cannot be used or closed by B; A can still close it.
    let r = mcp_post(
        &app,
        &a.key,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    drop(r);
    let r = mcp_post(
        &app,
        &b.key,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(r.status(), 404, "{:?}", r.text().await);
    let r = app
        .client
        .delete(app.url("/mcp"))
        .bearer_auth(&b.key)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = app
        .client
        .delete(app.url("/mcp"))
        .bearer_auth(&a.key)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// A key at its bound of runs in flight is refused at once (429, `Retry-After`), as is any run
/// once every slot is taken and the queue is full (503, `Retry-After`).
#[tokio::test]
async fn runs_past_the_queue_or_the_keys_bound_are_refused_with_retry_after() {
    use writ_core::keys::{self, Scope, Scopes};
    let (a, b) = (keys::generate("a"), keys::generate("b"));
    let work = Some(Scopes::of(&[Scope::Read, Scope::Run]));
    let entries = [
        keys::config_entry_with_scopes(&a.key, work).unwrap(),
        keys::config_entry_with_scopes(&b.key, work).unwrap(),
    ]
    .join(",");
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_API_KEYS", entries.as_str()),
            ("WRIT_COMMANDS", PYTEST),
            ("WRIT_RUN_CONCURRENCY", "1"),
            ("WRIT_RUN_QUEUE", "0"),
            ("WRIT_RUN_MAX_PER_KEY", "1"),
        ],
    )
    .await;
    std::fs::write(app.repo_dir.join("slow.py"), "import time\ntime.sleep(8)\n").unwrap();
    std::fs::write(app.repo_dir.join("fast.py"), "print('ok')\n").unwrap();
    let run = |key: String, script: &'static str| {
        let req = app
            .client
            .post(app.url("/run"))
            .bearer_auth(key)
            .json(&json!({"command": "python", "args": [script]}));
        async move { req.send().await.unwrap() }
    };
    let slow = tokio::spawn(run(a.key.clone(), "slow.py"));
    // Until the slow run holds the only slot, a fast run of A's may still get in and finish.
    let refused = async {
        loop {
            let r = run(a.key.clone(), "fast.py").await;
            if r.status() == 429 {
                return r;
            }
        }
    };
    let r = tokio::time::timeout(std::time::Duration::from_secs(20), refused)
        .await
        .unwrap();
    assert_eq!(r.headers()["retry-after"], "5");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_runs", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRIT_RUN_MAX_PER_KEY"),
        "{body}"
    );
    // Key B is not at its bound, but the only slot is taken (once the admitted slow run has
    // reached it: moments after its admission) and no run may wait.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let r = run(b.key.clone(), "fast.py").await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "5");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "run_queue_full", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRIT_RUN_QUEUE"),
        "{body}"
    );
    assert_eq!(slow.await.unwrap().status(), 200);
    // Both free again.
    assert_eq!(run(a.key.clone(), "fast.py").await.status(), 200);
}

/// A run whose caller hangs up is stopped, not left running, and recorded as cancelled.
#[tokio::test]
async fn a_run_is_stopped_when_its_caller_hangs_up() {
    let app = app().await;
    std::fs::write(
        app.repo_dir.join("forever.py"),
        "import time\nwhile True:\n    time.sleep(0.1)\n",
    )
    .unwrap();
    let sent = app
        .client
        .post(app.url("/run"))
        .timeout(std::time::Duration::from_millis(1500))
        .json(&json!({"command": "python", "args": ["forever.py"], "timeout_secs": 60}))
        .send()
        .await;
    assert!(sent.is_err(), "the client gave up first");
    let mut recorded = Value::Null;
    for _ in 0..100 {
        let (_, ops) = app.json("/operations?limit=5").await;
        if let Some(op) = ops["operations"].as_array().and_then(|o| o.first()) {
            recorded = op.clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(recorded["status"], "failed", "{recorded}");
    assert!(
        recorded["error"]
            .as_str()
            .unwrap()
            .contains("caller hung up"),
        "{recorded}"
    );
    assert!(
        recorded["duration_ms"].as_u64().unwrap() < 30_000,
        "{recorded}"
    );
}

/// A REPO_DIR past the copy bound is refused naming the bound and its variable, never 500.
#[tokio::test]
async fn a_repository_over_the_copy_bound_is_a_named_limit_not_an_internal_error() {
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_COMMANDS", PYTEST),
            ("WRIT_RUN_OVERLAY", "0"),
            ("WRIT_RUN_COPY_MAX_FILES", "5"),
        ],
    )
    .await;
    for i in 0..10 {
        std::fs::write(app.repo_dir.join(format!("f{i}.py")), "").unwrap();
    }
    let (status, body) = post_run(&app, json!({"command": "python", "args": ["f0.py"]})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "repository_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("more than 5 files") && message.contains("WRIT_RUN_COPY_MAX_FILES"),
        "{message}"
    );
    let (_, ready) = app.json("/readyz").await;
    assert!(
        ready["checks"]["commands"]["detail"]
            .as_str()
            .unwrap()
            .contains("bounded copy"),
        "{ready}"
    );
}

/// Where the machine allows it, runs use the copy-on-write overlay, and `/readyz` says so.
#[tokio::test]
async fn readyz_names_the_scratch_mechanism() {
    let app = app().await;
    std::fs::set_permissions(
        &app.repo_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (_, ready) = app.json("/readyz").await;
    let detail = ready["checks"]["commands"]["detail"].as_str().unwrap();
    assert!(detail.contains("scratch: "), "{ready}");
}
