//! What the tests that run the `writ` binary as a child share: a free loopback port, an HTTP
//! client, the wait for a started process to answer `/healthz`, rows of the shared database.

// Each test binary includes this module and uses a part of it.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unused_imports)]

use std::path::Path;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client whose requests give up after `timeout`.
pub fn client_with(timeout: Duration) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(timeout).build().unwrap()
}

/// Waits up to 30 s for the process at `base` to answer `/healthz`; on time out, fails with its
/// log.
pub async fn wait_until_healthy(base: &str, log: &Path) {
    let started = Instant::now();
    let http = client_with(Duration::from_secs(30));
    loop {
        if http.get(format!("{base}/healthz")).send().await.is_ok() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "writ did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The rows `sql` returns from the database at `url`, through `psql` (columns joined by `|`), as a
/// user inspecting the shared database would read them.
pub fn psql_rows(url: &str, sql: &str) -> Vec<String> {
    let out = std::process::Command::new("psql")
        .args([url, "-AtX", "-F", "|", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `writ serve` on `port` over an SQLite audit log in `dir` and `dir/repo`, its models
/// (`models`, arbiter `arbiter`) answered by the fake upstream at `upstream`, with nothing of this
/// process's environment but `PATH`; stderr to `log`. The caller adds what its test needs.
pub fn writ_serve(
    dir: &Path,
    port: u16,
    upstream: &str,
    models: &[&str],
    arbiter: &str,
    log: &Path,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("WRIT_ADDR", format!("127.0.0.1:{port}"))
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/writ.db", dir.display()),
        )
        .env("REPO_DIR", dir.join("repo"))
        .env("OPENROUTER_BASE_URL", upstream)
        .env("CODE_LIST", models.join(","))
        .env("CODE_MODEL", arbiter)
        .env("WRIT_LOCAL_MODEL", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd
}

#[path = "../../../../tests/support/db_proxy.rs"]
mod db_proxy;
pub use db_proxy::DbProxy;
