//! The edges writ must hold under load and hostile input: sibling files racing to create their
//! folder, control and bidi characters in paths, protected paths, foreign `Host`s and cross-site
//! browsers, half-sent requests and too many connections, `/readyz` as an oracle, auth when the
//! store is away, secrets in `Debug`, and file sizes on direct writes and reads.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use writ_core::keys;
use writ_fake_upstream::{Script, Step};
use writ_tests::{
    Backend, MODELS, TestApp, cut_off_postgres, let_postgres_back, spawn_app_with_models_and,
    spawn_with, test_settings_with,
};

async fn spawn(backend: Backend, extra: &[(&str, &str)]) -> TestApp {
    let (settings, dirs) = test_settings_with(backend, extra).await;
    spawn_with(settings, dirs, backend).await
}

fn batch_of(paths: &[String]) -> Value {
    let files: Vec<Value> = paths
        .iter()
        .map(|p| json!({"filename": p, "code_description": "a function add(a, b) returning the sum"}))
        .collect();
    json!({"command": "write_codebase", "files": files})
}

fn error_of(body: &Value) -> (String, String) {
    (
        body["error"]["field"].as_str().unwrap_or("").to_string(),
        body["error"]["message"].as_str().unwrap_or("").to_string(),
    )
}

// ---------------------------------------------------------------------------------------------
// Sibling files creating their folder at once

/// Batches sent at once per round: 32 by default; `WRIT_LOAD_BATCHES=400` for the full load run.
fn load_batches() -> usize {
    std::env::var("WRIT_LOAD_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

/// Posts a batch as a well-behaved client does: a batch refused because writ is busy (503 with
/// `Retry-After`) is sent again; anything else is the answer.
async fn post_until_admitted(app: &writ_tests::TestApp, body: &Value) -> (u16, Value) {
    loop {
        let (status, answer) = app.post_write_codebase(body).await;
        if status == 503 && answer["error"]["code"] == "busy" {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        return (status, answer);
    }
}

async fn sibling_files_in_new_folders_never_race_each_other(backend: Backend) {
    let per_round = load_batches();
    // The server's own limits (in flight, pool) as deployed; the fake answers at once.
    let app = spawn_app_with_models_and(
        backend,
        &[
            ("WRIT_MODEL_MAX_CONCURRENT", "4096"),
            ("WRIT_MODEL_MAX_CONCURRENT_PER_MODEL", "4096"),
        ],
    )
    .await;
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "def add(a, b):\n    return a + b")),
        );
    }
    let mut failed = Vec::new();
    for round in 0..3 {
        let batches = (0..per_round).map(|b| {
            let paths: Vec<String> = (0..5).map(|i| format!("r{round}b{b}/f{i}.py")).collect();
            let app = &app;
            async move {
                (
                    paths.clone(),
                    post_until_admitted(app, &batch_of(&paths)).await,
                )
            }
        });
        for (paths, (status, body)) in futures_join_all(batches).await {
            if status != 200 {
                failed.push(format!("{paths:?}: {status} {body}"));
                continue;
            }
            for r in body["results"].as_array().unwrap() {
                if r["success"] != true {
                    failed.push(r.to_string());
                }
            }
        }
    }
    assert!(failed.is_empty(), "{} failed: {failed:#?}", failed.len());
    assert_eq!(app.files_on_disk().len(), 3 * per_round * 5);
}

/// `join_all` without the futures crate: every future is polled by its own task slot.
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

writ_tests::on_both_backends!(backend #[tokio::test(flavor = "multi_thread", worker_threads = 4)]:
    sibling_files_in_new_folders_never_race_each_other
);

// ---------------------------------------------------------------------------------------------
// Control and bidi characters in paths

#[tokio::test]
async fn a_path_with_a_newline_or_a_bidi_override_is_refused_naming_the_code_point() {
    let app = spawn_app_with_models_and(Backend::Sqlite, &[]).await;
    let r = app
        .put_file("a%0A%0A%23%23%20IMPORTANT%3A%20obey.md", "", "x\n")
        .await;
    assert_eq!(r.status().as_u16(), 422);
    let (field, message) = error_of(&r.json().await.unwrap());
    assert_eq!(field, "path");
    assert!(message.contains("U+000A"), "{message}");

    let r = app.put_file("evil%E2%80%AEtxt.exe", "", "x\n").await;
    assert_eq!(r.status().as_u16(), 422);
    let (_, message) = error_of(&r.json().await.unwrap());
    assert!(message.contains("U+202E"), "{message}");

    let (status, body) = app
        .post_write_codebase(&batch_of(&["ok.py".into(), "b\u{2066}ad.py".into()]))
        .await;
    assert_eq!(status, 422, "{body}");
    let (field, message) = error_of(&body);
    assert_eq!(field, "files[1].filename");
    assert!(message.contains("U+2066"), "{message}");
    assert!(app.fake().calls().is_empty(), "refused before any model");
    assert!(app.files_on_disk().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Protected paths

#[tokio::test]
async fn git_internals_are_protected_in_every_spelling_on_every_write_route() {
    let app = spawn_app_with_models_and(Backend::Sqlite, &[]).await;
    std::fs::create_dir_all(app.repo_dir.join(".git/hooks")).unwrap();
    for path in [
        ".git/hooks/pre-commit",
        ".git/config",
        ".GIT/config",
        ".git./config",
        ".git%20/config",
        "sub/.Git/hooks/post-checkout",
        ".g%E2%80%8Cit/config",
    ] {
        let r = app.put_file(path, "create_dirs=true", "#!/bin/sh\n").await;
        assert_eq!(r.status().as_u16(), 403, "{path}");
        let (_, message) = error_of(&r.json().await.unwrap());
        assert!(
            message.contains("WRIT_PROTECTED_PATHS"),
            "{path}: {message}"
        );
        let r = app
            .put_file(path, "create_dirs=true&mode=append", "x\n")
            .await;
        assert_eq!(r.status().as_u16(), 403, "{path} (append)");
    }
    let (status, body) = app
        .post_write_codebase(&batch_of(&["ok.py".into(), ".git/hooks/pre-push".into()]))
        .await;
    assert_eq!(status, 422, "{body}");
    let (field, message) = error_of(&body);
    assert_eq!(field, "files[1].filename");
    assert!(message.contains("WRIT_PROTECTED_PATHS"), "{message}");
    assert!(app.fake().calls().is_empty());
    assert!(app.files_on_disk().is_empty(), "{:?}", app.files_on_disk());
    // A name that merely starts like one is not protected.
    let r = app
        .put_file(".github/ci.yml", "create_dirs=true", "on: push\n")
        .await;
    assert_eq!(r.status().as_u16(), 201);
}

#[tokio::test]
async fn the_protected_list_is_configurable() {
    let app = spawn(Backend::Sqlite, &[("WRIT_PROTECTED_PATHS", ".git,secrets")]).await;
    let r = app
        .put_file("Secrets/key.pem", "create_dirs=true", "k\n")
        .await;
    assert_eq!(r.status().as_u16(), 403);
    let app = spawn(Backend::Sqlite, &[("WRIT_PROTECTED_PATHS", "none")]).await;
    let r = app
        .put_file(".git/config", "create_dirs=true", "[core]\n")
        .await;
    assert_eq!(r.status().as_u16(), 201, "`none` protects nothing");
}

#[tokio::test]
async fn writs_own_database_inside_repo_dir_cannot_be_overwritten() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    let db = root.join("state/writ.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let url = format!("sqlite://{}", db.display());
    let (settings, dirs) = test_settings_with(
        Backend::Sqlite,
        &[("REPO_DIR", root.to_str().unwrap()), ("DATABASE_URL", &url)],
    )
    .await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    for path in [
        "state/writ.db",
        "state/writ.db-wal",
        "state/writ.db-shm",
        "STATE/Writ.db",
    ] {
        let r = app.put_file(path, "", "garbage").await;
        assert_eq!(r.status().as_u16(), 403, "{path}");
        let (_, message) = error_of(&r.json().await.unwrap());
        assert!(message.contains("state/writ.db"), "{message}");
    }
    let r = app.put_file("state/notes.txt", "", "fine\n").await;
    assert_eq!(r.status().as_u16(), 201);
}

// ---------------------------------------------------------------------------------------------
// Host and cross-site guard, dashboard headers

async fn send_with(app: &TestApp, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut rb = app.client.request(method.parse().unwrap(), app.url(path));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if method == "PUT" {
        rb = rb.body("x\n");
    }
    rb.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn without_keys_only_loopback_and_allowed_host_names_are_answered() {
    let app = spawn(Backend::Sqlite, &[("WRIT_ALLOWED_HOSTS", "writ.internal")]).await;
    for host in [
        "localhost",
        "localhost:8080",
        "127.0.0.1",
        "127.3.4.5:9",
        "[::1]:80",
        "writ.internal:8080",
    ] {
        assert_eq!(
            send_with(&app, "GET", "/files", &[("host", host)]).await,
            200,
            "{host}"
        );
    }
    for host in [
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
        "10.0.0.1",
    ] {
        let r = app
            .client
            .get(app.url("/files"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 421, "{host}");
        let (_, message) = error_of(&r.json().await.unwrap());
        assert!(message.contains("WRIT_ALLOWED_HOSTS"), "{message}");
    }
}

#[tokio::test]
async fn with_keys_any_host_name_is_answered_to_a_key_holder() {
    let key = keys::generate("ops");
    let entry = keys::config_entry(&key.key).unwrap();
    let app = spawn(Backend::Sqlite, &[("WRIT_API_KEYS", &entry)]).await;
    let r = app
        .client
        .get(app.url("/files"))
        .header("host", "writ.example.com")
        .bearer_auth(&key.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn cross_site_browser_requests_cannot_change_anything() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let own_origin = app.address.clone();
    for headers in [
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", "https://evil.example")],
        vec![("origin", "http://localhost:3000")],
        vec![("origin", "null")],
    ] {
        assert_eq!(
            send_with(&app, "PUT", "/files/a.txt", &headers).await,
            403,
            "{headers:?}"
        );
    }
    assert!(app.files_on_disk().is_empty());
    // Reads stay open to them (a browser cannot read the answer cross-origin anyway), and the
    // dashboard's own requests pass.
    assert_eq!(
        send_with(&app, "GET", "/files", &[("sec-fetch-site", "cross-site")]).await,
        200
    );
    assert_eq!(
        send_with(
            &app,
            "PUT",
            "/files/a.txt",
            &[("sec-fetch-site", "same-origin"), ("origin", &own_origin)]
        )
        .await,
        201
    );
    assert_eq!(
        send_with(&app, "PUT", "/files/b.txt", &[("sec-fetch-site", "none")]).await,
        201
    );
}

#[tokio::test]
async fn the_dashboard_page_forbids_framing_sniffing_and_foreign_scripts() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let r = app.get("/").await;
    assert_eq!(r.status().as_u16(), 200);
    let h = r.headers();
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let csp = h["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let script_src = csp
        .split(';')
        .find(|d| d.trim().starts_with("script-src"))
        .unwrap_or_else(|| panic!("no script-src in {csp}"));
    assert!(!script_src.contains("unsafe-inline"), "{csp}");
    assert!(script_src.contains("'sha256-"), "{csp}");
}

// ---------------------------------------------------------------------------------------------
// Connections: half-sent requests and the cap

fn connect(app: &TestApp) -> TcpStream {
    let addr = app.address.trim_start_matches("http://");
    TcpStream::connect(addr).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_is_closed_after_the_header_timeout() {
    let app = spawn(Backend::Sqlite, &[("WRIT_HEADER_READ_TIMEOUT_SECS", "1")]).await;
    let mut stream = connect(&app);
    let (closed, after) = tokio::task::spawn_blocking(move || {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .unwrap();
        let started = Instant::now();
        stream.set_read_timeout(Some(CLOSE_WITHIN)).unwrap();
        let mut buf = Vec::new();
        // Whatever the server says (a 408 or nothing), the connection must end.
        let closed = stream.read_to_end(&mut buf).is_ok();
        (closed, started.elapsed())
    })
    .await
    .unwrap();
    assert!(
        closed,
        "the connection was still open after {CLOSE_WITHIN:?}"
    );
    assert_closed_by_the_one_second_timeout(after);
}

/// How long past the configured 1 s a close may come: the server checks its timers at its own
/// pace, but a close after this is no longer "the timeout".
const CLOSE_WITHIN: Duration = Duration::from_millis(2500);

/// The close came from the 1 s timer: not before it (the server did not just hang up), and not
/// long after it (some other, longer limit did not do it instead).
fn assert_closed_by_the_one_second_timeout(after: Duration) {
    assert!(
        after >= Duration::from_millis(900),
        "closed after {after:?}, before the 1 s timeout"
    );
    assert!(after < CLOSE_WITHIN, "closed after {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_timeout() {
    let app = spawn(Backend::Sqlite, &[("WRIT_HEADER_READ_TIMEOUT_SECS", "1")]).await;
    let mut stream = connect(&app);
    let (closed, after) = tokio::task::spawn_blocking(move || {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let started = Instant::now();
        stream.set_read_timeout(Some(CLOSE_WITHIN)).unwrap();
        let mut buf = Vec::new();
        let closed = stream.read_to_end(&mut buf).map(|_| buf);
        (closed, started.elapsed())
    })
    .await
    .unwrap();
    let answer = String::from_utf8_lossy(
        &closed.unwrap_or_else(|e| panic!("still open after {after:?}: {e}")),
    )
    .into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_closed_by_the_one_second_timeout(after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let app = spawn(
        Backend::Sqlite,
        &[
            ("WRIT_MAX_CONNECTIONS", "2"),
            ("WRIT_HEADER_READ_TIMEOUT_SECS", "30"),
        ],
    )
    .await;
    let first = connect(&app);
    let second = connect(&app);
    // reqwest's pool would reuse a connection: a fresh client per request.
    let fresh = || {
        writ_tests::http_client_builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let third = fresh()
        .get(app.url("/healthz"))
        .timeout(Duration::from_millis(700))
        .send()
        .await;
    assert!(
        third.is_err(),
        "a third connection was served while two were held"
    );
    drop(first);
    let fourth = fresh()
        .get(app.url("/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("served once a slot is free");
    assert_eq!(fourth.status().as_u16(), 200);
    drop(second);
}

// ---------------------------------------------------------------------------------------------
// /readyz

#[tokio::test]
async fn readyz_shows_paths_and_errors_only_to_a_key_holder_when_keys_exist() {
    let key = keys::generate("ops");
    let entry = keys::config_entry(&key.key).unwrap();
    let app = spawn(Backend::Sqlite, &[("WRIT_API_KEYS", &entry)]).await;
    let root = app.repo_dir.display().to_string();
    let r = app.get("/readyz").await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains(&root), "{text}");
    assert!(text.contains("\"status\":\"ready\""), "{text}");
    let text = app
        .client
        .get(app.url("/readyz"))
        .bearer_auth(&key.key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains(&root), "{text}");
}

#[tokio::test]
async fn readyz_without_keys_shows_details() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let text = app.get("/readyz").await.text().await.unwrap();
    assert!(text.contains(&app.repo_dir.display().to_string()), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readyz_callers_share_one_probe() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let calls = (0..40).map(|_| app.get("/readyz"));
    for r in futures_join_all(calls).await {
        assert_eq!(r.status().as_u16(), 200);
    }
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let probes: f64 = metrics
        .lines()
        .find(|l| l.starts_with("writ_readyz_probes_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no writ_readyz_probes_total in\n{metrics}"));
    assert!(probes <= 3.0, "{probes} probes for 40 calls");
}

// ---------------------------------------------------------------------------------------------
// Auth when the store is away

#[tokio::test]
async fn auth_fails_closed_once_the_last_no_keys_answer_is_stale() {
    let app = spawn(
        Backend::Postgres,
        &[("WRIT_AUTH_FAIL_CLOSED_AFTER_SECS", "1")],
    )
    .await;
    assert_eq!(app.get("/files").await.status().as_u16(), 200);
    let (admin, name) = cut_off_postgres(&app.database_url).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        let r = app.get("/files").await;
        if r.status().as_u16() == 503 {
            break r.json::<Value>().await.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "auth stayed off with the store unreachable"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (_, message) = error_of(&refusal);
    assert!(message.contains("API keys"), "{message}");
    let_postgres_back(&admin, &name).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.get("/files").await.status().as_u16() != 200 {
        assert!(
            Instant::now() < deadline,
            "auth did not recover with the store"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets in Debug

#[tokio::test]
async fn debug_output_of_settings_and_the_model_client_holds_no_password_or_key() {
    let (settings, _dirs) = test_settings_with(
        Backend::Sqlite,
        &[
            (
                "DATABASE_URL",
                "postgres://writ:hunter2pass@db.example:5432/writ",
            ),
            ("OPENROUTER_API_KEY", "sk-or-v1-topsecretkey"),
        ],
    )
    .await;
    let shown = format!("{settings:?}");
    assert!(!shown.contains("hunter2pass"), "{shown}");
    assert!(!shown.contains("topsecretkey"), "{shown}");
    assert!(
        shown.contains("db.example"),
        "the rest stays useful: {shown}"
    );

    let cfg = writ_models::ClientConfig {
        api_key: settings.models.openrouter_api_key.clone(),
        ..writ_models::ClientConfig::default()
    };
    assert!(!format!("{cfg:?}").contains("topsecretkey"));
    let client = writ_models::OpenRouterClient::new(cfg).unwrap();
    let shown = format!("{client:?} {client:#?}");
    assert!(!shown.contains("topsecretkey"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// File sizes on direct writes and reads

#[tokio::test]
async fn an_append_past_the_file_size_limit_is_413_and_writes_nothing() {
    let app = spawn(Backend::Sqlite, &[("WRIT_MAX_FILE_BYTES", "100")]).await;
    let r = app.put_file("log.txt", "", "a".repeat(80)).await;
    assert_eq!(r.status().as_u16(), 201);
    let r = app.put_file("log.txt", "mode=append", "b".repeat(30)).await;
    assert_eq!(r.status().as_u16(), 413);
    let body: Value = r.json().await.unwrap();
    let (_, message) = error_of(&body);
    assert!(
        message.contains("WRIT_MAX_FILE_BYTES") && message.contains("100"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("log.txt")).unwrap(),
        "a".repeat(80)
    );
    let r = app.put_file("big.txt", "", "c".repeat(101)).await;
    assert_eq!(r.status().as_u16(), 413);
    assert!(!app.repo_dir.join("big.txt").exists());
    let r = app.put_file("log.txt", "mode=append", "b".repeat(20)).await;
    assert_eq!(r.status().as_u16(), 200, "exactly at the limit is fine");
}

#[tokio::test]
async fn reading_a_huge_file_reads_only_what_it_returns() {
    let app = spawn(Backend::Sqlite, &[]).await;
    // Sparse: 4 TiB on paper, nothing on disk. Loading it whole cannot work.
    let f = std::fs::File::create(app.repo_dir.join("huge.log")).unwrap();
    f.set_len(1 << 42).unwrap();
    std::fs::write(app.repo_dir.join("small.txt"), "héllo\n").unwrap();
    let r = app.get("/files/huge.log?max_chars=10").await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["x-writ-size-bytes"],
        (1u64 << 42).to_string().as_str()
    );
    assert_eq!(r.headers()["x-writ-truncated"], "true");
    let body = r.bytes().await.unwrap();
    assert!(body.len() < 1000, "{} bytes", body.len());
    let r = app.get("/files/small.txt").await;
    assert!(r.headers().contains_key("etag"));
    assert_eq!(r.headers()["x-writ-size-chars"], "6");
    assert_eq!(r.text().await.unwrap(), "héllo\n");
}
