//! What the tests that run the `writ` binary as a child share: a free loopback port, an HTTP
//! client, and the wait for a started process to answer `/healthz`.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

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

/// A TCP proxy between the `writ` processes of a test and PostgreSQL, which the test cuts
/// (every connection through it dropped, new ones refused: a failover as writ sees it) and
/// restores; only the test's own processes go through it.
pub struct DbProxy {
    port: u16,
    cut: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl DbProxy {
    /// A proxy to the server of `database_url`.
    pub async fn start(database_url: &str) -> DbProxy {
        let upstream = database_url
            .split('@')
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("127.0.0.1:5432")
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(tokio::sync::watch::channel(false).0);
        let watch = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if *watch.borrow() {
                    drop(client);
                    continue;
                }
                let mut is_cut = watch.subscribe();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = is_cut.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        DbProxy { port, cut, task }
    }

    /// `database_url` with its server replaced by the proxy.
    pub fn url_for(&self, database_url: &str) -> String {
        let (head, rest) = database_url.split_once('@').unwrap();
        let db = rest.split_once('/').map(|(_, db)| db).unwrap_or("");
        format!("{head}@127.0.0.1:{}/{db}", self.port)
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
