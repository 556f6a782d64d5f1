//! The dashboard in a real headless browser: Debian's Chromium driven by playwright-core
//! (`tests/browser/dashboard.mjs`) against the real server, models played by the fake upstream.

use std::path::Path;
use std::time::Duration;

use writ_core::keys;
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, spawn_app_with_models_and};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_watches_a_five_file_batch_in_the_browser() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("browser/dashboard.mjs");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists() && root.join("browser/node_modules/playwright-core").exists(),
        "the browser test needs Debian's chromium and `npm ci` in tests/browser: scripts/test installs both"
    );

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

    let artifacts = root.join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard.png");
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("node")
            .arg(&script)
            .arg(&app.address)
            .arg(&shot)
            .arg(&key.key)
            .env("CHROMIUM", &chromium)
            .output(),
    )
    .await
    .expect("the browser test finishes")
    .expect("node runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{text}\n(screenshot: {})",
        shot.display()
    );
    assert!(shot.exists(), "a screenshot is saved as a test artifact");
    assert_eq!(
        app.files_on_disk().len(),
        5,
        "the batch started from the page wrote its five files"
    );
}
