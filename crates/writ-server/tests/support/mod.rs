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

#[path = "../../../../tests/support/db_proxy.rs"]
mod db_proxy;
pub use db_proxy::DbProxy;
