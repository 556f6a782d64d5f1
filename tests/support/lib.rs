//! Test support: start the real writ server on a loopback port against a fresh database, and
//! talk to it over real HTTP.
//!
//! Each [`TestApp`] gets its own `REPO_DIR` (a temp dir) and its own database: a new SQLite file,
//! or a new PostgreSQL database named by a UUID (see `writ_store::testing`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use reqwest::{Client, Response};
use tempfile::TempDir;
use writ_server::{Application, Settings};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct TestApp {
    pub address: String,
    pub client: Client,
    pub database_url: String,
    pub backend: Backend,
    pub repo_dir: PathBuf,
    /// The fake model provider, when the app was started with models.
    pub fake: Option<writ_fake_upstream::FakeUpstream>,
    /// Keeps the temp dirs alive for the test's duration.
    _dirs: Vec<TempDir>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Settings for a test server: port 0, a temp REPO_DIR, a fresh database.
pub async fn test_settings(backend: Backend) -> (Settings, Vec<TempDir>) {
    test_settings_with(backend, &[]).await
}

/// Candidate models, arbiter and fallback model the fake serves in tests.
pub const MODELS: [&str; 3] = ["alpha/one", "beta/two", "gamma/three"];
pub const ARBITER: &str = "judge/arbiter";
pub const FALLBACK: &str = "rescue/gen";

/// A test server whose models are served by a fresh fake upstream, with short retry waits.
pub async fn spawn_app_with_models(backend: Backend) -> TestApp {
    spawn_app_with_models_and(backend, &[]).await
}

/// [`spawn_app_with_models`] with extra variables (API keys, limits, …).
pub async fn spawn_app_with_models_and(backend: Backend, extra: &[(&str, &str)]) -> TestApp {
    let fake = writ_fake_upstream::FakeUpstream::start()
        .await
        .expect("the fake upstream starts");
    let base = fake.base_url();
    let list = MODELS.join(",");
    let (settings, dirs) = test_settings_with(
        backend,
        &[
            ("OPENROUTER_BASE_URL", base.as_str()),
            ("CODE_LIST", list.as_str()),
            ("CODE_MODEL", ARBITER),
            ("CODE_GEN_MODEL", FALLBACK),
            ("WRIT_MODEL_MAX_ATTEMPTS", "2"),
            ("WRIT_MODEL_BACKOFF_MS", "10"),
            ("WRIT_FALLBACK_BACKOFF_MS", "10"),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
    )
    .await;
    let mut app = spawn_with(settings, dirs, backend).await;
    app.fake = Some(fake);
    app
}

/// Like [`test_settings`], with extra variables.
pub async fn test_settings_with(
    backend: Backend,
    extra: &[(&str, &str)],
) -> (Settings, Vec<TempDir>) {
    let repo = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let database_url = match backend {
        Backend::Sqlite => writ_store::testing::fresh_sqlite_url(data.path()),
        Backend::Postgres => writ_store::testing::fresh_postgres_url().await,
    };
    let repo_dir = repo.path().to_str().unwrap().to_string();
    let mut vars = vec![
        ("WRIT_ADDR", "127.0.0.1:0".to_string()),
        ("REPO_DIR", repo_dir),
        ("DATABASE_URL", database_url),
        // Tests ask for the embedded model explicitly (`WRIT_LOCAL_MODEL=auto`); everywhere else
        // "no CODE_LIST" keeps meaning "no models", and no test loads a model by accident.
        ("WRIT_LOCAL_MODEL", "off".to_string()),
    ];
    vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let settings = Settings::load(None, &|name| {
        // The last setting of a name wins, so `extra` overrides the defaults above.
        vars.iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    })
    .unwrap();
    (settings, vec![repo, data])
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    let (settings, dirs) = test_settings(backend).await;
    spawn_with(settings, dirs, backend).await
}

pub async fn spawn_with(settings: Settings, dirs: Vec<TempDir>, backend: Backend) -> TestApp {
    let database_url = settings.database_url.to_string();
    let app = Application::build(settings)
        .await
        .expect("the server builds");
    let repo_dir = app.state().workspace.root().to_path_buf();
    let address = format!("http://{}", app.local_addr());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async move {
        let _ = rx.await;
    }));
    TestApp {
        address,
        client: http_client(),
        database_url,
        backend,
        repo_dir,
        fake: None,
        _dirs: dirs,
        shutdown: Some(tx),
        server: Some(server),
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    pub async fn put_file(
        &self,
        path: &str,
        query: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        self.client
            .put(self.url(&format!("/files/{path}{q}")))
            .header("content-type", "text/plain")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// The fake upstream (panics if the app has none).
    pub fn fake(&self) -> &writ_fake_upstream::FakeUpstream {
        self.fake
            .as_ref()
            .expect("this app was started with spawn_app_with_models")
    }

    pub async fn post_write_codebase(&self, body: &serde_json::Value) -> (u16, serde_json::Value) {
        self.post_json("/write_codebase", body).await
    }

    /// `POST path` with a JSON body; the status and the JSON answer (a non-JSON answer fails the
    /// test, naming the route and showing the body).
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let r = self
            .client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        json_answer(&format!("POST {path}"), r).await
    }

    pub async fn json(&self, path: &str) -> (u16, serde_json::Value) {
        json_answer(&format!("GET {path}"), self.get(path).await).await
    }

    /// Every file under REPO_DIR (relative paths), for "nothing else was touched" assertions.
    pub fn files_on_disk(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.repo_dir, &self.repo_dir, &mut out);
        out.sort();
        out
    }

    /// Stops the server and starts a new one on the same database and `REPO_DIR`, with `extra`
    /// variables: what a restart (or another replica) sees.
    pub async fn restart_with(mut self, extra: &[(&str, &str)]) -> TestApp {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.server.take() {
            h.await.unwrap().unwrap();
        }
        let repo_dir = self.repo_dir.to_str().unwrap().to_string();
        let mut vars = vec![
            ("WRIT_ADDR", "127.0.0.1:0".to_string()),
            ("REPO_DIR", repo_dir),
            ("DATABASE_URL", self.database_url.clone()),
            ("WRIT_LOCAL_MODEL", "off".to_string()),
        ];
        vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let settings = Settings::load(None, &|name| {
            vars.iter()
                .rev()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        })
        .unwrap();
        let dirs = std::mem::take(&mut self._dirs);
        spawn_with(settings, dirs, self.backend).await
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.server.take() {
            h.await.unwrap().unwrap();
        }
    }
}

/// Fault injection: `ALTER DATABASE … ALLOW_CONNECTIONS false` + terminating its backends: PostgreSQL is gone
/// for this server (and only this one) until [`let_postgres_back`].
pub async fn cut_off_postgres(database_url: &str) -> (sqlx::PgPool, String) {
    let name = database_url.rsplit('/').next().unwrap().to_string();
    let admin_url = std::env::var("WRIT_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS false"
    )))
    .execute(&admin)
    .await
    .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
    (admin, name)
}

pub async fn let_postgres_back(admin: &sqlx::PgPool, name: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS true"
    )))
    .execute(admin)
    .await
    .unwrap();
}

#[path = "db_proxy.rs"]
mod db_proxy;
pub use db_proxy::DbProxy;

/// reqwest is built without a bundled TLS provider (we pick ring to avoid compiling aws-lc);
/// install it before the first client is made.
pub fn http_client() -> Client {
    http_client_builder().build().expect("an HTTP client")
}

/// [`http_client`]'s builder, for tests that need another pool or timeout.
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        // The entry's own type, from the listing: a folder writ removes between the listing and
        // a later look (one it made for a write that did not happen) is not taken for a file.
        let Ok(kind) = e.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(root, &p, out);
        } else {
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// Runs each listed test against SQLite and against PostgreSQL, in modules `sqlite` and
/// `postgres` (so one invocation per module). The forms:
/// - `on_both_backends!(a, b)`: each `async fn(TestApp)` gets a plain app;
/// - `on_both_backends!(with_models: a, b)`: an app with the fake upstream's models;
/// - `on_both_backends!(app make: a, b)`: the app `async fn make(Backend) -> TestApp` builds;
/// - `on_both_backends!(backend: a, b)`: each `async fn(Backend)` builds what it needs itself
///   (`backend #[tokio::test(...)]: a` to choose the runtime).
#[macro_export]
macro_rules! on_both_backends {
    (backend: $($name:ident),+ $(,)?) => {
        $crate::on_both_backends!(backend #[tokio::test]: $($name),+);
    };
    (backend #[$attr:meta]: $($name:ident),+ $(,)?) => {
        mod sqlite {
            $(#[$attr] async fn $name() { super::$name($crate::Backend::Sqlite).await; })+
        }
        mod postgres {
            $(#[$attr] async fn $name() { super::$name($crate::Backend::Postgres).await; })+
        }
    };
    (app $make:ident: $($name:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(super::$make($crate::Backend::Sqlite).await).await; })+
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name(super::$make($crate::Backend::Postgres).await).await; })+
        }
    };
    (with_models: $($name:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name($crate::spawn_app_with_models($crate::Backend::Sqlite).await).await; })+
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name($crate::spawn_app_with_models($crate::Backend::Postgres).await).await; })+
        }
    };
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name($crate::spawn_app($crate::Backend::Sqlite).await).await; })+
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name($crate::spawn_app($crate::Backend::Postgres).await).await; })+
        }
    };
}

/// The value of one Prometheus sample in `/metrics` text: the sum over every series of `name`
/// whose labels include all of `labels` (0 when there is none, as for a counter never touched).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(series, value)| {
            let (n, found) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}')?)),
                None => (series, Vec::new()),
            };
            let wanted = n == name
                && labels
                    .iter()
                    .all(|(k, v)| found.iter().any(|(fk, fv)| fk == k && fv == v));
            wanted.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// `a="x",b="y"` with the exposition format's escapes (`\"`, `\\`, `\n`).
fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').to_string(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// Polls `cond` every 10 ms until it holds, failing the test after `limit`: for waiting until
/// something has happened instead of sleeping for long enough.
pub async fn wait_until(what: &str, limit: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The batch overhead histogram's sample count and sum, from `/metrics`.
pub async fn overhead_histogram(app: &TestApp) -> (f64, f64) {
    let text = app.get("/metrics").await.text().await.unwrap();
    (
        metric(&text, "writ_batch_overhead_seconds_count", &[]),
        metric(&text, "writ_batch_overhead_seconds_sum", &[]),
    )
}

/// The status and the JSON body of an answer; a body that is not JSON fails the test with the
/// body shown, so a test never asserts against a stand-in for an answer it did not get.
async fn json_answer(what: &str, r: reqwest::Response) -> (u16, serde_json::Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_else(|e| {
        panic!("{what}: the body of the {status} answer could not be read: {e}")
    });
    match serde_json::from_str(&text) {
        Ok(body) => (status, body),
        Err(e) => panic!("{what}: the {status} answer is not JSON ({e}): {text:?}"),
    }
}

/// Runs the real `git` program in `dir`, as a user looking at a repository would, without the
/// machine's configuration and with a test identity; fails the test with git's stderr.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@localhost"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
