//! The real `writ` binary as a child process, for the faults only a process can suffer:
//! SIGKILL mid-batch (nothing torn, no temp files, every operation settled at restart), SIGTERM
//! (no new work, in-flight batches finish within the grace period, then exit), and a full run
//! whose logs and answers are searched for the provider key and the API key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
mod support;
use support::free_port;
use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};

const MODELS: [&str; 2] = ["alpha/one", "beta/two"];
const ARBITER: &str = "judge/arbiter";

struct Writ {
    child: Child,
    base: String,
    log: PathBuf,
}

fn client() -> reqwest::Client {
    support::client_with(Duration::from_secs(30))
}

/// Starts `writ serve` on a free port with its stderr in `dir/writ-N.log`; waits for `/healthz`.
async fn start_writ(dir: &Path, fake: &FakeUpstream, extra: &[(&str, &str)]) -> Writ {
    let port = free_port();
    let n = std::fs::read_dir(dir).unwrap().count();
    let log = dir.join(format!("writ-{n}.log"));
    let mut cmd = support::writ_serve(dir, port, &fake.base_url(), &MODELS, ARBITER, &log);
    cmd.env("RUST_LOG", "debug,sqlx=warn,hyper=info,h2=info")
        .env("WRIT_MODEL_MAX_ATTEMPTS", "1");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    support::wait_until_healthy(&base, &log).await;
    Writ { child, base, log }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

fn batch(files: &[&str]) -> Value {
    json!({"command": "write_codebase",
           "files": files.iter().map(|f| json!({"filename": f, "code_description": "a function add(a, b)"})).collect::<Vec<_>>()})
}

fn script(fake: &FakeUpstream, latency: Duration) {
    for m in MODELS.iter().chain([&ARBITER]) {
        fake.script(
            m,
            Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
                .with_latency(Latency::fixed(latency)),
        );
    }
}

/// Every regular file under `root`, relative, with its SHA-256.
fn files_with_hashes(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, hex::encode(Sha256::digest(std::fs::read(&p).unwrap()))));
            }
        }
    }
    out.sort();
    out
}

async fn all_operations(http: &reqwest::Client, base: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{base}/operations?limit=500");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        ops.extend(page["operations"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    ops
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_batch_leaves_no_torn_or_temp_file_and_every_operation_settled_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    // Slow enough that the kill below (at most a few seconds in, on a loaded machine) always
    // lands while the batch still waits on its models: nothing of it may be on disk after.
    script(&fake, Duration::from_secs(8));
    let mut writ = start_writ(dir.path(), &fake, &[]).await;
    let http = client();

    // A slow batch waiting on models, and a stream of 1 MiB direct writes racing the kill.
    let slow = tokio::spawn({
        let (http, base) = (http.clone(), writ.base.clone());
        async move {
            let _ = http
                .post(format!("{base}/write_codebase"))
                .json(&batch(&["slow/a.py", "slow/b.py"]))
                .send()
                .await;
        }
    });
    let mut writers = Vec::new();
    let acknowledged = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..24 {
        let (http, base) = (http.clone(), writ.base.clone());
        let acknowledged = acknowledged.clone();
        writers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15 * i)).await;
            let body = vec![b'a' + (i % 26) as u8; 1024 * 1024];
            let sent = http
                .put(format!("{base}/files/direct/f{i}.bin?create_dirs=true"))
                .body(body)
                .send()
                .await;
            if sent.is_ok_and(|r| r.status().is_success()) {
                acknowledged.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }
    // Kill only once the slow batch is under way (recorded as a running job) and a direct write
    // has been acknowledged, so the kill always lands mid-batch with writes racing it.
    for _ in 0..100 {
        if acknowledged.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..100 {
        let jobs: Value = match http.get(format!("{}/jobs", writ.base)).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let running = jobs["jobs"].as_array().is_some_and(|js| {
            js.iter()
                .any(|j| j["files"][0] == "slow/a.py" && j["status"] == "running")
        });
        if running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writ.child.kill().unwrap(); // SIGKILL
    writ.child.wait().unwrap();
    for w in writers {
        let _ = w.await;
    }
    let _ = slow.await;

    let mut writ = start_writ(dir.path(), &fake, &[]).await;
    let repo = dir.path().join("repo");
    let on_disk = files_with_hashes(&repo);
    let ops = all_operations(&http, &writ.base).await;
    // The interrupted batch is a job: failed with a reason, not left "running" forever.
    let jobs: serde_json::Value = http
        .get(format!("{}/jobs", writ.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let killed_job = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["files"][0] == "slow/a.py")
        .cloned();
    writ.child.kill().unwrap();
    writ.child.wait().unwrap();
    let killed_job =
        killed_job.unwrap_or_else(|| panic!("the batch the kill interrupted is a job: {jobs}"));
    assert_eq!(killed_job["status"], "failed", "{killed_job}");
    assert!(
        killed_job["error"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{killed_job}"
    );

    let restart_log = std::fs::read_to_string(&writ.log).unwrap();
    let settled = restart_log
        .lines()
        .find(|l| l.contains("settled operations left pending"));
    eprintln!(
        "SIGKILL fault: {} operations recorded, {} files whole on disk, restart: {}",
        ops.len(),
        on_disk.len(),
        settled.unwrap_or("nothing was pending")
    );
    assert!(!ops.is_empty(), "some writes were recorded before the kill");
    assert!(
        ops.iter().all(|o| o["status"] != "pending"),
        "every operation is settled at restart: {ops:#?}"
    );
    for (name, sha) in &on_disk {
        assert!(
            name.starts_with("direct/f") && name.ends_with(".bin"),
            "only whole, named files remain (no temp files): {name}"
        );
        let latest = ops
            .iter()
            .find(|o| o["filename"] == *name && o["status"] == "succeeded")
            .unwrap_or_else(|| panic!("{name} is on disk without a succeeded operation"));
        assert_eq!(latest["sha256"], *sha, "{name} is whole, not torn");
    }
    for op in ops.iter().filter(|o| o["status"] == "succeeded") {
        let name = op["filename"].as_str().unwrap();
        assert!(
            on_disk.iter().any(|(n, _)| n == name),
            "a succeeded operation's file exists: {name}"
        );
    }
    assert!(
        !repo.join("slow").exists() || files_with_hashes(&repo.join("slow")).is_empty(),
        "nothing of the batch the kill interrupted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_takes_no_new_work_lets_the_in_flight_batch_finish_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    script(&fake, Duration::from_millis(1500));
    let mut writ = start_writ(dir.path(), &fake, &[("WRIT_SHUTDOWN_GRACE_SECS", "20")]).await;
    let http = client();

    let inflight = tokio::spawn({
        let (http, base) = (http.clone(), writ.base.clone());
        async move {
            let r = http
                .post(format!("{base}/write_codebase"))
                .json(&batch(&["kept.py"]))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    });
    // SIGTERM only once the batch is waiting on its models.
    assert!(fake.until_in_flight(None, 1, Duration::from_secs(10)).await);
    let sent = Instant::now();
    signal(&writ.child, "-TERM");
    // The listener closes soon after the signal, while the batch is still running.
    loop {
        let probe = client().get(format!("{}/healthz", writ.base)).send().await;
        if probe.is_err() {
            break;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "new connections still accepted after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !inflight.is_finished(),
        "the listener closed before the batch ended"
    );

    let (status, body) = inflight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["success"], true, "{body}");
    let code = loop {
        if let Some(s) = writ.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(20),
            "writ did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(code.success(), "{code:?}");
    assert!(dir.path().join("repo/kept.py").exists());
    let _ = writ.log;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_exits_after_the_grace_period_even_when_a_batch_is_still_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    script(&fake, Duration::from_secs(30));
    let mut writ = start_writ(dir.path(), &fake, &[("WRIT_SHUTDOWN_GRACE_SECS", "1")]).await;
    let http = client();
    let _stuck = tokio::spawn({
        let base = writ.base.clone();
        async move {
            let _ = http
                .post(format!("{base}/write_codebase"))
                .json(&batch(&["never.py"]))
                .send()
                .await;
        }
    });
    assert!(fake.until_in_flight(None, 1, Duration::from_secs(10)).await);
    let sent = Instant::now();
    signal(&writ.child, "-TERM");
    loop {
        if writ.child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(8),
            "writ outlived its 1 s grace period"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!dir.path().join("repo/never.py").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn neither_the_provider_key_nor_an_api_key_appears_in_any_log_or_response() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    script(&fake, Duration::from_millis(5));
    let provider_key = format!("sk-or-v1-{}", hex::encode(rand_bytes()));
    let api = writ_core::keys::generate("secrets-test");
    let entry = writ_core::keys::config_entry(&api.key).unwrap();
    let api_secret = api.key.rsplit('_').next().unwrap().to_string();
    let mut writ = start_writ(
        dir.path(),
        &fake,
        &[
            ("OPENROUTER_API_KEY", provider_key.as_str()),
            ("WRIT_API_KEYS", entry.as_str()),
        ],
    )
    .await;
    let http = client();
    let mut responses = String::new();
    let record = |r: reqwest::Response| async move {
        let head = format!("{} {:?}\n", r.status(), r.headers());
        head + &r.text().await.unwrap_or_default()
    };
    // Success, provider failures of every kind, auth failures with the key mangled, bad input.
    let key = api.key.as_str();
    responses += &record(
        http.post(format!("{}/write_codebase", writ.base))
            .bearer_auth(key)
            .json(&batch(&["ok.py"]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    for status in [401, 402, 429, 500] {
        for m in MODELS.iter().chain([&ARBITER]) {
            fake.script(m, Script::always(Step::status(status)));
        }
        responses += &record(
            http.post(format!("{}/write_codebase", writ.base))
                .bearer_auth(key)
                .json(&batch(&[&format!("f{status}.py")]))
                .send()
                .await
                .unwrap(),
        )
        .await;
    }
    let mangled = format!("{}0", &api.key[..api.key.len() - 1]);
    responses += &record(
        http.get(format!("{}/operations", writ.base))
            .bearer_auth(&mangled)
            .send()
            .await
            .unwrap(),
    )
    .await;
    responses += &record(
        http.get(format!("{}/operations", writ.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    responses += &record(
        http.put(format!("{}/files/a.txt", writ.base))
            .bearer_auth(key)
            .body(format!("no {}", "secret here"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    responses += &record(
        http.post(format!("{}/write_codebase", writ.base))
            .bearer_auth(key)
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    responses += &record(
        http.get(format!("{}/readyz", writ.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    responses += &record(
        http.get(format!("{}/metrics", writ.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    signal(&writ.child, "-TERM");
    writ.child.wait().unwrap();
    let log = std::fs::read_to_string(&writ.log).unwrap();

    assert!(log.contains("served"), "the log was captured: {log}");
    assert!(
        fake.calls().iter().any(|c| c
            .headers
            .get("authorization")
            .is_some_and(|h| h.contains(&provider_key))),
        "the provider key was in use"
    );
    for (what, secret) in [
        ("provider key", provider_key.as_str()),
        ("API key secret", api_secret.as_str()),
    ] {
        assert!(!log.contains(secret), "the {what} is in the server log");
        assert!(!responses.contains(secret), "the {what} is in a response");
    }
    let db = std::fs::read(dir.path().join("writ.db")).unwrap_or_default();
    let wal = std::fs::read(dir.path().join("writ.db-wal")).unwrap_or_default();
    for blob in [db, wal] {
        let text = String::from_utf8_lossy(&blob);
        assert!(
            !text.contains(&provider_key) && !text.contains(&api_secret),
            "a secret is in the audit database"
        );
    }
}

fn rand_bytes() -> [u8; 16] {
    let mut out = [0u8; 16];
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_le_bytes();
    let digest = Sha256::digest(seed);
    out.copy_from_slice(&digest[..16]);
    out
}

fn writ_keys(dir: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("keys")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("WRIT_LOCAL_MODEL", "off")
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/writ.db", dir.display()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_keys_creates_a_key_that_admits_its_holder_and_revoke_shuts_it_out() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, created) = writ_keys(dir.path(), &["create", "ci bot"], "");
    assert!(ok, "{created}");
    let key = created
        .lines()
        .find_map(|l| l.strip_prefix("key: "))
        .unwrap()
        .to_string();
    let id = created
        .lines()
        .find_map(|l| l.strip_prefix("id:  "))
        .unwrap()
        .to_string();

    let (ok, listed) = writ_keys(dir.path(), &["list"], "");
    assert!(
        ok && listed.contains(&id) && listed.contains("ci bot") && listed.contains("active"),
        "{listed}"
    );
    assert!(
        !listed.contains(key.rsplit('_').next().unwrap()),
        "list never shows a key"
    );
    let (ok, entry) = writ_keys(dir.path(), &["hash"], &format!("{key}\n"));
    assert!(ok && entry.trim().starts_with(&format!("{id}:")), "{entry}");

    let fake = FakeUpstream::start().await.unwrap();
    let mut writ = start_writ(dir.path(), &fake, &[]).await;
    let http = client();
    let ops = format!("{}/operations", writ.base);
    assert_eq!(http.get(&ops).send().await.unwrap().status(), 401);
    assert_eq!(
        http.get(&ops)
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let (ok, revoked) = writ_keys(dir.path(), &["revoke", &id], "");
    assert!(ok, "{revoked}");
    assert_eq!(
        http.get(&ops)
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let (ok, _) = writ_keys(dir.path(), &["revoke", "ffffffffffff"], "");
    assert!(!ok, "revoking an unknown id fails");
    writ.child.kill().unwrap();
    writ.child.wait().unwrap();
}

#[test]
fn writ_keys_sets_scopes_at_creation_and_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, reader) = writ_keys(dir.path(), &["create", "reader", "--scopes", "read"], "");
    assert!(ok && reader.contains("scopes: read\n"), "{reader}");
    let (ok, default) = writ_keys(dir.path(), &["create", "default"], "");
    assert!(ok && default.contains("scopes: read,write\n"), "{default}");
    let (ok, refused) = writ_keys(dir.path(), &["create", "x", "--scopes", "read,sudo"], "");
    assert!(!ok && refused.contains("'sudo'"), "{refused}");

    let (ok, listed) = writ_keys(dir.path(), &["list"], "");
    assert!(ok, "{listed}");
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.contains(&format!("\t{name}\t")))
            .unwrap_or_else(|| panic!("{name} in {listed}"))
            .to_string()
    };
    assert!(line("reader").contains("\tscopes read\t"), "{listed}");
    assert!(
        line("default").contains("\tscopes read,write\t"),
        "{listed}"
    );
    assert!(!listed.contains("\tx\t"), "a refused create stores nothing");

    let key = reader
        .lines()
        .find_map(|l| l.strip_prefix("key: "))
        .unwrap();
    let (ok, entry) = writ_keys(
        dir.path(),
        &["hash", "--scopes", "run,read"],
        &format!("{key}\n"),
    );
    assert!(ok && entry.trim().ends_with(":read+run"), "{entry}");
}
