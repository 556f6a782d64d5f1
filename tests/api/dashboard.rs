//! The dashboard in a real headless browser: Debian's Chromium driven by playwright-core
//! (`tests/browser/dashboard.mjs`) against the real server, models played by the fake upstream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use writ_core::keys;
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, spawn_app_with_models_and};

/// Runs `tests/browser/{script}` in Debian's Chromium (playwright-core) against the server at
/// `address`, saving a screenshot as a test artifact (the script's second argument) and passing
/// `args` after it; fails with what the page printed unless the script succeeds. The screenshot.
async fn run_page(address: &str, script: &str, shot: &str, args: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists() && root.join("browser/node_modules/playwright-core").exists(),
        "the browser test needs Debian's chromium and `npm ci` in tests/browser: scripts/test installs both"
    );
    let artifacts = root.join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join(shot);
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("node")
            .arg(root.join("browser").join(script))
            .arg(address)
            .arg(&shot)
            .args(args)
            .env("CHROMIUM", &chromium)
            .output(),
    )
    .await
    .expect("the browser test finishes")
    .expect("node runs");
    assert!(
        out.status.success(),
        "{}{}\n(screenshot: {})",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        shot.display()
    );
    shot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_watches_a_five_file_batch_in_the_browser() {
    // With auth on: the page must ask for the key in plain words, then work with it.
    let key = keys::generate("dashboard");
    let entry = keys::config_entry(&key.key).unwrap();
    let app =
        spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_API_KEYS", entry.as_str())]).await;
    for (i, m) in MODELS.iter().enumerate() {
        app.fake().script(
            m,
            Script::always(Step::code("python", format!("VALUE = {i}")))
                .with_latency(Latency::fixed(Duration::from_millis(400 + 150 * i as u64))),
        );
    }
    app.fake().script(
        ARBITER,
        Script::always(Step::verdict(1, "the clearest one")),
    );

    let shot = run_page(&app.address, "dashboard.mjs", "dashboard.png", &[&key.key]).await;
    assert!(shot.exists(), "a screenshot is saved as a test artifact");
    assert_eq!(
        app.files_on_disk().len(),
        5,
        "the batch started from the page wrote its five files"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_picks_one_of_the_keys_workspaces_and_sees_only_its_batches_and_records() {
    use serde_json::json;
    use writ_core::keys::{Scope, Scopes};
    let dir = tempfile::tempdir().unwrap();
    let workspaces_dir = dir.path().to_str().unwrap().to_owned();
    let fake = writ_fake_upstream::FakeUpstream::start().await.unwrap();
    let base = fake.base_url();
    let list = MODELS.join(",");
    let (settings, dirs) = writ_tests::test_settings_with(
        Backend::Sqlite,
        &[
            ("WRIT_WORKSPACES_DIR", workspaces_dir.as_str()),
            ("OPENROUTER_BASE_URL", base.as_str()),
            ("CODE_LIST", list.as_str()),
            ("CODE_MODEL", ARBITER),
            ("CODE_GEN_MODEL", writ_tests::FALLBACK),
            ("WRIT_MODEL_BACKOFF_MS", "10"),
        ],
    )
    .await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let admin = keys::generate_with_scopes(
        "ops",
        Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]),
    );
    store.create_key(&admin.record).await.unwrap();
    let mut agent = keys::generate_with_scopes("agent", Scopes::of(&[Scope::Read, Scope::Write]));
    agent.record.workspaces = Some(vec!["a".to_owned(), "b".to_owned()]);
    store.create_key(&agent.record).await.unwrap();
    drop(store);
    let mut app = writ_tests::spawn_with(settings, dirs, Backend::Sqlite).await;
    app.fake = Some(fake);
    for name in ["a", "b"] {
        let r = app
            .client
            .post(app.url("/workspaces"))
            .bearer_auth(&admin.key)
            .json(&json!({"name": name}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    // The agent's batch in b, and the admin's in default (which the agent may not use), before
    // the page opens.
    for (key, at, file) in [
        (&agent.key, "/workspaces/b", "in_b.py"),
        (&admin.key, "", "in_default.py"),
    ] {
        let r = app
            .client
            .post(app.url(&format!("{at}/write_codebase")))
            .bearer_auth(key)
            .json(&json!({"command": "write_codebase",
                "files": [{"filename": file, "code_description": "a constant"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }

    run_page(
        &app.address,
        "workspaces.mjs",
        "dashboard-workspaces.png",
        &[&agent.key, "in_b.py"],
    )
    .await;
    assert!(
        dir.path().join("a/from_page.py").exists(),
        "the batch started with `a` picked wrote in a"
    );
    assert!(
        !dir.path().join("b/from_page.py").exists() && !app.repo_dir.join("from_page.py").exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_applies_two_hunks_of_three_in_the_review_page_and_the_file_holds_exactly_those() {
    use serde_json::json;
    let app = spawn_app_with_models_and(Backend::Sqlite, &[]).await;
    let module = |changed: &[usize]| -> String {
        (1..=30)
            .map(|i| {
                if changed.contains(&i) {
                    format!("v{i} = {}\n", i * 100)
                } else {
                    format!("v{i} = {i}\n")
                }
            })
            .collect()
    };
    std::fs::write(app.repo_dir.join("app.py"), module(&[])).unwrap();
    let (status, proposed) = app
        .post_json(
            "/edits",
            &json!({"files": [{"path": "app.py", "edits": [
                {"old": "v3 = 3\n", "new": "v3 = 300\n"},
                {"old": "v15 = 15\n", "new": "v15 = 1500\n"},
                {"old": "v27 = 27\n", "new": "v27 = 2700\n"},
            ]}], "review": true}),
        )
        .await;
    assert_eq!(status, 200, "{proposed}");

    run_page(&app.address, "review.mjs", "review.png", &[]).await;
    // On disk: the two hunks ticked, not the third.
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("app.py")).unwrap(),
        module(&[3, 15])
    );
    // The comment went with the decision.
    let id = proposed["change_id"].as_str().unwrap();
    let (_, change) = app.json(&format!("/changes/{id}")).await;
    assert_eq!(change["state"], "partially_applied", "{change}");
    assert!(
        change.to_string().contains("the third is not wanted"),
        "{change}"
    );
}
