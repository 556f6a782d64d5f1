//! Access and limits end to end: API keys on every route but the probes, per-key rate and batch limits,
//! batches in flight, generated file size, the batch deadline, and injected faults (provider
//! errors, the database lost mid-batch, a full disk) that must lose or tear nothing.

use std::time::Duration;

use serde_json::{Value, json};
use writ_core::keys;
use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};
use writ_tests::{ARBITER, Backend, FALLBACK, MODELS, TestApp, spawn_with, test_settings_with};

fn one_file(name: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": name, "code_description": "a function add(a, b) returning the sum"}]})
}

fn script_all(app: &TestApp, script: Script) {
    for m in MODELS.iter().chain([&ARBITER, &FALLBACK]) {
        app.fake().script(m, script.clone());
    }
}

async fn send(app: &TestApp, key: Option<&str>, method: &str, path: &str) -> reqwest::Response {
    let mut rb = app.client.request(method.parse().unwrap(), app.url(path));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    if method == "PUT" {
        rb = rb.body("hello\n");
    }
    rb.send().await.unwrap()
}

async fn post_batch(
    app: &TestApp,
    key: Option<&str>,
    body: &Value,
) -> (u16, Value, Option<String>) {
    let mut rb = app.client.post(app.url("/write_codebase")).json(body);
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, r.json().await.unwrap_or(Value::Null), retry)
}

// ---------------------------------------------------------------------------------------------
// Access

#[tokio::test]
async fn with_a_configured_key_every_route_but_the_probes_refuses_a_caller_without_it() {
    let key = keys::generate("ci");
    let entry = keys::config_entry(&key.key).unwrap();
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[("WRIT_API_KEYS", entry.as_str())],
    )
    .await;

    let open_paths: Vec<&str> = writ_server::routes::api_routes()
        .iter()
        .filter(|r| r.access == writ_server::access::Access::Open)
        .map(|r| r.path)
        .collect();
    assert!(!open_paths.is_empty());
    for open in &open_paths {
        let r = send(&app, None, "GET", open).await;
        assert_ne!(r.status(), 401, "{open} stays open");
    }
    let wrong = keys::generate("intruder").key;
    // Every route in the table, plus one that does not exist: none may answer without a key.
    let mut targets: Vec<(String, String)> = writ_server::routes::api_routes()
        .iter()
        .filter(|r| !open_paths.contains(&r.path))
        .map(|r| {
            (
                r.method.to_string(),
                r.openapi_path()
                    .replace("{path}", "a.txt")
                    .replace("{id}", "0196f0c4-0000-7000-8000-000000000000"),
            )
        })
        .collect();
    targets.push(("GET".into(), "/no/such/route".into()));
    for (method, path) in &targets {
        for presented in [
            None,
            Some("Bearer"),
            Some(wrong.as_str()),
            Some("writ_nothex_x"),
        ] {
            let r = send(&app, presented, method, path).await;
            assert_eq!(r.status(), 401, "{method} {path} with {presented:?}");
            assert!(
                r.headers()["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Bearer"),
                "{method} {path}"
            );
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"]["code"], "unauthorized");
            assert_eq!(body["error"]["field"], "Authorization");
        }
    }
    assert!(
        app.files_on_disk().is_empty(),
        "nothing was written without a key"
    );

    let r = send(&app, Some(&key.key), "PUT", "/files/a.txt").await;
    assert_eq!(r.status(), 201);
    let request_id = r.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let store = writ_store::connect(&app.database_url).await.unwrap();
    let recorded = store.get_request(request_id).await.unwrap().unwrap();
    assert_eq!(
        recorded.caller.as_deref(),
        Some(key.record.id.as_str()),
        "the audit log names the key id"
    );
}

#[tokio::test]
async fn a_key_issued_in_the_store_admits_its_holder_until_it_is_revoked() {
    let app = writ_tests::spawn_app_with_models_and(Backend::Postgres, &[]).await;
    // No keys yet: open (loopback).
    assert_eq!(send(&app, None, "GET", "/operations").await.status(), 200);

    let store = writ_store::connect(&app.database_url).await.unwrap();
    let key = keys::generate("alice");
    store.create_key(&key.record).await.unwrap();
    // A running server notices a new key within its re-check interval (2 s).
    let issued = std::time::Instant::now();
    while send(&app, None, "GET", "/operations").await.status() != 401 {
        assert!(
            issued.elapsed() < Duration::from_secs(5),
            "the new key never turned auth on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        send(&app, Some(&key.key), "GET", "/operations")
            .await
            .status(),
        200
    );

    store
        .revoke_key(&key.record.id, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(
        send(&app, Some(&key.key), "GET", "/operations")
            .await
            .status(),
        401,
        "a revoked key is refused"
    );
    assert_eq!(
        send(&app, None, "GET", "/operations").await.status(),
        401,
        "revoking the last key does not open the door"
    );
}

#[tokio::test]
async fn writ_refuses_a_non_loopback_address_without_keys_unless_told_insecure() {
    let (mut settings, _dirs) = test_settings_with(Backend::Sqlite, &[]).await;
    settings.addr = "0.0.0.0:0".parse().unwrap();
    let err = writ_server::Application::build(settings.clone())
        .await
        .err()
        .expect("refused");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("WRIT_ADDR") && msg.contains("--insecure"),
        "{msg}"
    );

    settings.guard.insecure = true;
    writ_server::Application::build(settings.clone())
        .await
        .expect("--insecure serves anyway");

    let key = keys::generate("ops");
    settings.guard.insecure = false;
    settings.guard.api_keys = vec![writ_server::config::ConfiguredKey {
        id: key.record.id.clone(),
        secret_sha256: key.record.secret_sha256.clone(),
        scopes: keys::Scopes::LEGACY,
    }];
    writ_server::Application::build(settings)
        .await
        .expect("with a key it serves");
}

#[tokio::test]
async fn a_key_past_its_rate_is_answered_429_with_retry_after() {
    let key = keys::generate("burst");
    let entry = keys::config_entry(&key.key).unwrap();
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_API_KEYS", entry.as_str()),
            ("WRIT_RATE_LIMIT_PER_MIN", "6"),
            ("WRIT_RATE_LIMIT_BURST", "3"),
        ],
    )
    .await;
    for _ in 0..3 {
        assert_eq!(
            send(&app, Some(&key.key), "GET", "/files").await.status(),
            200
        );
    }
    let r = send(&app, Some(&key.key), "GET", "/files").await;
    assert_eq!(r.status(), 429);
    let secs: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&secs), "{secs}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRIT_RATE_LIMIT_PER_MIN")
    );
}

// ---------------------------------------------------------------------------------------------
// Limits and backpressure

#[tokio::test]
async fn batches_beyond_the_per_key_and_global_limits_are_refused_at_once_not_queued() {
    let key = keys::generate("busy");
    let entry = keys::config_entry(&key.key).unwrap();
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_API_KEYS", entry.as_str()),
            ("WRIT_MAX_BATCHES_PER_KEY", "1"),
            ("WRIT_MAX_BATCHES_IN_FLIGHT", "1"),
        ],
    )
    .await;
    script_all(
        &app,
        Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
            .with_latency(Latency::fixed(Duration::from_millis(1500))),
    );
    let slow = {
        let client = app.client.clone();
        let url = app.url("/write_codebase");
        let k = key.key.clone();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(k)
                .json(&one_file("slow.py"))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    // The first batch holds its permit while its three candidates are being answered.
    assert!(
        app.fake()
            .until_in_flight(None, 3, Duration::from_secs(10))
            .await
    );

    let started = std::time::Instant::now();
    let (status, body, retry) = post_batch(&app, Some(&key.key), &one_file("second.py")).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_batches");
    assert!(retry.is_some());
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "refused at once"
    );

    assert_eq!(slow.await.unwrap(), 200);
    assert_eq!(app.files_on_disk(), vec!["slow.py"]);
}

#[tokio::test]
async fn without_keys_the_process_wide_batch_limit_answers_503_with_retry_after() {
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[("WRIT_MAX_BATCHES_IN_FLIGHT", "1")],
    )
    .await;
    script_all(
        &app,
        Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
            .with_latency(Latency::fixed(Duration::from_millis(1500))),
    );
    let slow = {
        let client = app.client.clone();
        let url = app.url("/write_codebase");
        tokio::spawn(async move {
            client
                .post(url)
                .json(&one_file("slow.py"))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    assert!(
        app.fake()
            .until_in_flight(None, 3, Duration::from_secs(10))
            .await
    );
    let (status, body, retry) = post_batch(&app, None, &one_file("second.py")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "busy");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRIT_MAX_BATCHES_IN_FLIGHT")
    );
    assert_eq!(retry.as_deref(), Some("5"));
    assert_eq!(slow.await.unwrap(), 200);
    assert!(!app.repo_dir.join("second.py").exists());
}

#[tokio::test]
async fn a_generated_file_above_the_size_limit_fails_its_file_and_writes_nothing() {
    let app =
        writ_tests::spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_MAX_FILE_BYTES", "64")])
            .await;
    let big = format!(
        "def add(a, b):\n    return a + b\n{}",
        "# padding\n".repeat(20)
    );
    script_all(&app, Script::always(Step::code("python", big)));
    let (status, body, _) = post_batch(&app, None, &one_file("big.py")).await;
    assert_eq!(status, 200);
    let result = &body["results"][0];
    assert_eq!(result["success"], false, "{body}");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("WRIT_MAX_FILE_BYTES"),
        "{result}"
    );
    assert!(app.files_on_disk().is_empty());
}

#[tokio::test]
async fn a_batch_past_its_deadline_stops_waiting_on_models_and_fails_its_files_cleanly() {
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[("WRIT_BATCH_DEADLINE_SECS", "1")],
    )
    .await;
    script_all(
        &app,
        Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
            .with_latency(Latency::fixed(Duration::from_secs(5))),
    );
    let started = std::time::Instant::now();
    let (status, body, _) = post_batch(&app, None, &one_file("late.py")).await;
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "did not wait for the models"
    );
    let result = &body["results"][0];
    assert_eq!(result["success"], false);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("WRIT_BATCH_DEADLINE_SECS"),
        "{result}"
    );
    assert!(app.files_on_disk().is_empty());
    // The failure is in the audit log.
    let (_, ops) = app.json("/operations?status=failed").await;
    assert_eq!(ops["operations"][0]["filename"], "late.py", "{ops}");
}

// ---------------------------------------------------------------------------------------------
// Faults

/// A provider's answer that stopped at `max_tokens` (`finish_reason: "length"`) inside its code
/// is a file with its end missing, though what came before parses: it is never a candidate, over
/// an existing file or a new one. Cut prose after a closed block loses no code.
#[tokio::test]
async fn an_answer_cut_at_the_token_cap_inside_its_code_is_never_written() {
    let app = writ_tests::spawn_app_with_models_and(Backend::Sqlite, &[]).await;
    let cut_fenced =
        "```python\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";
    let cut_bare = "def add(a, b):\n    return a + b\n";
    let cut_prose =
        "```python\ndef add(a, b):\n    return a + b  # complete\n```\nThis function adds its two";
    for (model, step) in MODELS.iter().zip([
        Step::cut_at_cap(cut_fenced),
        Step::cut_at_cap(cut_bare),
        Step::cut_at_cap(cut_prose),
    ]) {
        app.fake().script(model, Script::always(step));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "only one")));
    let (status, body, _) = post_batch(&app, None, &one_file("cut.py")).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["results"][0];
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("cut.py")).unwrap(),
        "def add(a, b):\n    return a + b  # complete\n"
    );
    let by_model = |m: &str| {
        result["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["model"] == m)
            .cloned()
            .unwrap()
    };
    for m in &MODELS[..2] {
        let c = by_model(m);
        assert_eq!(c["error_class"], "truncated", "{c}");
        assert!(c["error"].as_str().unwrap().contains("token cap"), "{c}");
    }
    assert!(by_model(MODELS[2])["error_class"].is_null());

    // When every answer is cut, nothing is written, and an existing file keeps its content.
    std::fs::write(app.repo_dir.join("kept.py"), "def keep():\n    return 1\n").unwrap();
    for model in MODELS.iter().chain([&FALLBACK]) {
        app.fake()
            .script(model, Script::always(Step::cut_at_cap(cut_fenced)));
    }
    let (status, body, _) = post_batch(&app, None, &one_file("kept.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["success"], false, "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("kept.py")).unwrap(),
        "def keep():\n    return 1\n"
    );
}

#[tokio::test]
async fn every_provider_error_class_fails_its_file_with_the_class_named_and_nothing_written() {
    let app = writ_tests::spawn_app_with_models_and(Backend::Sqlite, &[]).await;
    let cases = [
        ("unauthorized", Step::status(401)),
        ("payment", Step::status(402)),
        ("rate", Step::status_with_retry_after(429, "0")),
        ("server", Step::status(500)),
        ("unavailable", Step::status(503)),
        ("in200", Step::error_in_200(500, "upstream overloaded")),
        ("midstream", Step::stream_mid_error(1, "connection reset")),
        ("garbage", Step::status_with_body(200, "not json at all")),
        ("noblock", Step::text("I cannot help with that.")),
    ];
    let mut injected = 0;
    for (name, step) in cases {
        script_all(&app, Script::always(step));
        let file = format!("{name}.py");
        let (status, body, _) = post_batch(&app, None, &one_file(&file)).await;
        injected += 1;
        assert_eq!(status, 200, "{name}: {body}");
        let result = &body["results"][0];
        assert_eq!(result["success"], false, "{name}: {result}");
        assert!(
            result["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{name}"
        );
        assert!(
            !app.repo_dir.join(&file).exists(),
            "{name}: nothing written from a failed file"
        );
        assert!(
            result["operation_id"].is_string(),
            "{name}: the failure is recorded"
        );
    }
    assert_eq!(injected, 9);
    assert!(app.files_on_disk().is_empty());
}

#[tokio::test]
async fn the_database_lost_mid_batch_past_the_outage_wait_answers_503_leaves_no_file_and_writes_resume_after()
 {
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Postgres,
        &[("WRIT_STORE_OUTAGE_WAIT", "1")],
    )
    .await;
    script_all(
        &app,
        Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
            .with_latency(Latency::fixed(Duration::from_millis(1500))),
    );
    let batch = {
        let client = app.client.clone();
        let url = app.url("/write_codebase");
        tokio::spawn(async move {
            // Several files, so that they are one group whose records the store refuses at once.
            let body = json!({"command": "write_codebase",
                "files": [{"filename": "mid.py", "code_description": "d"},
                          {"filename": "mid/a.py", "code_description": "d"},
                          {"filename": "mid/deep/b.py", "code_description": "d"}]});
            let r = client.post(url).json(&body).send().await.unwrap();
            let retry_after = r.headers().contains_key("retry-after");
            (
                r.status().as_u16(),
                retry_after,
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        })
    };
    // The request is recorded, the models are thinking: now the database goes away.
    assert!(
        app.fake()
            .until_in_flight(None, 3, Duration::from_secs(10))
            .await
    );
    let (admin, name) = writ_tests::cut_off_postgres(&app.database_url).await;
    let (status, retry_after, body) = batch.await.unwrap();
    // The batch was recorded before the database went; its writes waited out the outage wait
    // and gave up: a fault of the server's is a 503 to retry, never a 200 carrying errors.
    assert_eq!(status, 503, "{body}");
    assert!(retry_after, "a 503 says when to retry");
    assert_eq!(body["error"]["code"], "audit_unavailable", "{body}");
    assert!(
        app.files_on_disk().is_empty(),
        "no file without its audit record, and no temp file: {:?}",
        app.files_on_disk()
    );
    // A dropped staged write is discarded by the file writer in the background.
    let mid = app.repo_dir.join("mid");
    writ_tests::wait_until(
        "the directories the refused writes created are gone",
        Duration::from_secs(5),
        || !mid.exists(),
    )
    .await;
    let (ready, _) = app.json("/readyz").await;
    assert_eq!(ready, 503);

    writ_tests::let_postgres_back(&admin, &name).await;
    script_all(
        &app,
        Script::always(Step::code("python", "def add(a, b):\n    return a + b\n")),
    );
    let (status, body, _) = post_batch(&app, None, &one_file("after.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][0]["success"], true,
        "writes resume without a restart: {body}"
    );
    let op = body["results"][0]["operation_id"].as_str().unwrap();
    let (s, _) = app.json(&format!("/operations/{op}")).await;
    assert_eq!(s, 200, "the written file has its record");
    assert_eq!(app.json("/readyz").await.0, 200);
}

/// Mounts a 64 KiB tmpfs at `dir`. Tests run as root in CI; without the privilege this fails
/// loudly rather than skipping, so the disk-full fault is never silently untested.
fn mount_small_tmpfs(dir: &std::path::Path) {
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(dir)
        .output()
        .expect("running mount");
    assert!(
        out.status.success(),
        "the disk-full test needs to mount a tmpfs (run as root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn unmount(dir: &std::path::Path) {
    let _ = std::process::Command::new("umount").arg(dir).status();
}

#[tokio::test]
async fn a_full_disk_fails_the_file_cleanly_with_no_partial_file_and_no_temp_files() {
    let repo = tempfile::tempdir().unwrap();
    mount_small_tmpfs(repo.path());
    let fake = FakeUpstream::start().await.unwrap();
    let base = fake.base_url();
    let list = MODELS.join(",");
    let repo_dir = repo.path().to_str().unwrap().to_string();
    let (settings, dirs) = test_settings_with(
        Backend::Sqlite,
        &[
            ("OPENROUTER_BASE_URL", base.as_str()),
            ("CODE_LIST", list.as_str()),
            ("CODE_MODEL", ARBITER),
            ("REPO_DIR", repo_dir.as_str()),
            ("WRIT_MODEL_MAX_ATTEMPTS", "1"),
        ],
    )
    .await;
    let mut app = spawn_with(settings, dirs, Backend::Sqlite).await;
    app.fake = Some(fake);

    // Direct write: 100 KiB into 64 KiB.
    let r = app.put_file("big.bin", "", vec![b'x'; 100 * 1024]).await;
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    // Generated: a 90 KiB candidate.
    let code = format!(
        "def add(a, b):\n    return a + b\n{}",
        "# fill the disk\n".repeat(6000)
    );
    script_all(&app, Script::always(Step::code("python", code)));
    let (bstatus, bbody, _) = post_batch(&app, None, &one_file("gen.py")).await;

    // Everything under REPO_DIR, temp files (bare UUID names) included.
    let on_disk = app.files_on_disk();
    unmount(repo.path());

    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "no_space");
    assert_eq!(bstatus, 200, "{bbody}");
    assert_eq!(bbody["results"][0]["success"], false, "{bbody}");
    assert!(
        on_disk.is_empty(),
        "no partial file and no temp file: {on_disk:?}"
    );
    let (_, ops) = app.json("/operations?status=pending").await;
    assert_eq!(ops["operations"], json!([]), "no operation left pending");
}
