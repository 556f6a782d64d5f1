//! The processes under test: the fake upstream (scripted, fixed or heavy-tailed latency) and
//! writ, each started from the release binaries and killed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Candidate models the fake serves with a fixed latency, and the arbiter.
pub const MODELS: [&str; 3] = ["bench/alpha", "bench/beta", "bench/gamma"];
pub const ARBITER: &str = "bench/judge";
/// Same as `bench/gamma`, with a heavy-tailed latency (p99 ≈ 10× the median).
pub const STRAGGLER: &str = "bench/straggler";

/// The fake's script: three candidates that each answer different valid Python (so the arbiter
/// is always asked) after `latency_ms`, an arbiter that picks the first, and a straggler.
pub fn script(latency_ms: u64) -> Value {
    let fixed = json!({"kind": "fixed", "ms": latency_ms});
    let code = |body: &str| json!({"kind": "code", "lang": "python", "code": format!("def add(a: int, b: int) -> int:\n    {body}\n")});
    json!({
        "models": {
            MODELS[0]: {"then": code("return a + b"), "latency": fixed},
            MODELS[1]: {"then": code("return b + a"), "latency": fixed},
            MODELS[2]: {"then": code("return sum((a, b))"), "latency": fixed},
            STRAGGLER: {"then": code("return sum((a, b))"),
                        "latency": {"kind": "heavy_tail", "median_ms": latency_ms, "p99_ms": latency_ms * 10}},
            ARBITER: {"then": {"kind": "verdict", "choice": 1, "reason": "the most direct"}, "latency": fixed},
        }
    })
}

pub struct Fake {
    pub base_url: String,
    pub pid: u32,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Fake {
    /// Its OTLP trace receiver, as writ's `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn otlp_endpoint(&self) -> String {
        self.base_url.trim_end_matches("/v1").to_string()
    }

    /// How many spans it received since the last call; forgets them.
    pub async fn take_spans(&self, http: &reqwest::Client) -> usize {
        let url = format!("{}/_fake/spans", self.otlp_endpoint());
        let count = match http.get(&url).send().await {
            Ok(r) => r
                .json::<Vec<serde_json::Value>>()
                .await
                .map(|v| v.len())
                .unwrap_or(0),
            Err(_) => 0,
        };
        let _ = http.delete(&url).send().await;
        count
    }

    pub async fn start(bin_dir: &Path, latency_ms: u64) -> anyhow::Result<Fake> {
        Self::start_with(bin_dir, &script(latency_ms)).await
    }

    /// Starts the fake with this script file (see `writ_fake_upstream::ScriptFile`).
    pub async fn start_with(bin_dir: &Path, script: &Value) -> anyhow::Result<Fake> {
        let dir = tempfile::tempdir()?;
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, serde_json::to_vec(script)?)?;
        let mut child = Command::new(bin_dir.join("writ-fake-upstream"))
            .args(["--addr", "127.0.0.1:0", "--script"])
            .arg(&script_path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting writ-fake-upstream (build it with `cargo build --release`)")?;
        let pid = child.id().unwrap_or_default();
        let stdout = child.stdout.take().context("the fake's stdout")?;
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .context("the fake did not print its URL within 10 s")??;
        Ok(Fake {
            base_url: line.trim().to_string(),
            pid,
            _child: child,
            _dir: dir,
        })
    }

    /// Adds a route to the fake's script (`PUT /_fake/route`): a model's answers to the calls
    /// whose prompt contains a text.
    pub async fn route(&self, client: &reqwest::Client, route: &Value) -> anyhow::Result<()> {
        let root = self.base_url.trim_end_matches("/v1");
        client
            .put(format!("{root}/_fake/route"))
            .json(route)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// The calls recorded since they were last forgotten (`GET /_fake/calls`).
    pub async fn calls(&self, client: &reqwest::Client) -> anyhow::Result<Vec<Value>> {
        let root = self.base_url.trim_end_matches("/v1");
        Ok(client
            .get(format!("{root}/_fake/calls"))
            .send()
            .await?
            .json()
            .await
            .unwrap_or_default())
    }

    /// Forgets the calls recorded so far, so the fake's memory stays flat over a long run.
    pub async fn forget_calls(&self, client: &reqwest::Client) {
        let root = self.base_url.trim_end_matches("/v1");
        let _ = client.delete(format!("{root}/_fake/calls")).send().await;
    }
}

/// A running writ server over its own `REPO_DIR`.
pub struct Writ {
    pub base_url: String,
    pub pid: u32,
    child: Child,
    /// Its own `REPO_DIR`, taken by `Drop` into [`KEPT`]; `None` when the caller owns it.
    repo: Option<tempfile::TempDir>,
    repo_dir: PathBuf,
}

/// The repos of writs that have stopped, removed when the run ends ([`KeptRepos`]), not when
/// their writ stops: removing a row's tens of thousands of files while the next row runs would
/// slow that row's own file creation (ext4 mounted without a journal, as on the benchmark
/// machine, looks up every inode freed in the last minutes before it reuses one), so the next
/// row would measure the last one's clean-up.
static KEPT: Mutex<Vec<tempfile::TempDir>> = Mutex::new(Vec::new());

/// Keeps `repo` until the run ends (see [`KEPT`]).
pub fn keep(repo: tempfile::TempDir) {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(repo);
}

/// Removes the repos kept in [`KEPT`] when dropped: held for the whole run by `main`.
pub struct KeptRepos;

impl Drop for KeptRepos {
    fn drop(&mut self) {
        let kept = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
        drop(kept);
    }
}

impl Writ {
    /// A writ over a `REPO_DIR` of its own.
    pub async fn start(
        bin_dir: &Path,
        fake: &Fake,
        database_url: &str,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Writ> {
        let repo = tempfile::tempdir()?;
        let mut writ =
            Self::start_over(bin_dir, fake, database_url, repo.path(), extra_env).await?;
        writ.repo = Some(repo);
        Ok(writ)
    }

    /// A writ over `repo`, which the caller keeps (replicas share one `REPO_DIR`).
    pub async fn start_over(
        bin_dir: &Path,
        fake: &Fake,
        database_url: &str,
        repo: &Path,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Writ> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin_dir.join("writ"));
        cmd.args(["serve", "--addr", &addr])
            .env("REPO_DIR", repo)
            .env("DATABASE_URL", database_url)
            .env("OPENROUTER_BASE_URL", &fake.base_url)
            .env("CODE_LIST", MODELS.join(","))
            .env("CODE_MODEL", ARBITER)
            .env("WRIT_LOCAL_MODEL", "off")
            // Logging off, as the gateways this is compared with are measured.
            .env("RUST_LOG", "warn")
            // The bench is the only client: the per-caller guards would measure themselves.
            .env("WRIT_RATE_LIMIT_PER_MIN", "100000000")
            .env("WRIT_RATE_LIMIT_BURST", "100000000")
            .env("WRIT_MAX_BATCHES_PER_KEY", "100000")
            .env("WRIT_MAX_BATCHES_IN_FLIGHT", "100000")
            // The defaults (4 per model, 64 in all) protect a real provider's rate limits and
            // would cap the ceiling at ~16 five-file batches/s against a 50 ms fake.
            .env("WRIT_MODEL_MAX_CONCURRENT_PER_MODEL", "4096")
            .env("WRIT_MODEL_MAX_CONCURRENT", "16384")
            // The repository map walks and searches the whole REPO_DIR for every code file, and
            // a bench run's REPO_DIR grows by thousands of files a row: with it on, each row
            // would measure the size the rows before it left. Its cost by repository size is
            // `writ-bench context`'s table; a caller of `extra_env` may turn it back on.
            .env("WRIT_REPO_MAP_TOKENS", "0")
            .env_remove("OPENROUTER_API_KEY")
            .env_remove("WRIT_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .context("starting writ (build it with `cargo build --release`)")?;
        let pid = child.id().unwrap_or_default();
        let base_url = format!("http://{addr}");
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let Ok(r) = client.get(format!("{base_url}/readyz")).send().await
                && r.status().is_success()
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                anyhow::bail!("writ was not ready within 30 s on {base_url}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Writ {
            base_url,
            pid,
            child,
            repo: None,
            repo_dir: repo.to_path_buf(),
        })
    }

    /// The `REPO_DIR` it writes into (removed when the run ends, see [`KEPT`]).
    pub fn repo_dir(&self) -> &Path {
        &self.repo_dir
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

impl Drop for Writ {
    fn drop(&mut self) {
        if let Some(repo) = self.repo.take() {
            keep(repo);
        }
    }
}

/// Where the release binaries are: `--bin-dir`, else `target/release` of the workspace.
pub fn default_bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_script_is_one_the_fake_upstream_accepts() {
        let parsed: writ_fake_upstream::ScriptFile =
            serde_json::from_value(script(50)).expect("a valid script file");
        assert_eq!(parsed.models.len(), 5);
        assert!(parsed.models.contains_key(STRAGGLER));
    }
}
