//! A chaos run: two `writ` replicas over one PostgreSQL (reached through a proxy the test cuts)
//! and one `REPO_DIR`, driven with batches (synchronous and async), direct edits and direct
//! writes while the disk under `REPO_DIR` fills up, a replica is SIGKILLed and restarted, and the
//! database is cut for a few seconds, twice. Clients do what a careful client does: retry a
//! dropped connection, a 503 or a 409 on the other replica, batches with their
//! `Idempotency-Key`, a 507 (no space) after a pause, a batch whose files failed for want of
//! space as a new batch. Then: every batch ended once, in success or with its files failed for
//! want of space (none lost), no answer was a 500, every file on disk holds what its last
//! succeeded record says and every succeeded record's file is there, no operation is left
//! pending, and no temporary file is left.
//!
//! The disk that fills is a tmpfs of its own (`REPO_DIR` inside it, the filler beside it), so
//! the fault needs the right to mount: where `mount` is refused the run says so and goes on
//! without that fault.
//!
//! `WRIT_CHAOS_SECS` (default 16) sets how long the load runs; each 16 s of it holds one round
//! of four faults (the longer run of BENCHMARKS.md: `WRIT_CHAOS_SECS=160`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
mod support;
use support::{DbProxy, free_port};
use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};

const MODELS: [&str; 2] = ["alpha/one", "beta/two"];
const ARBITER: &str = "judge/arbiter";

struct Replica {
    child: Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Deployment {
    dir: tempfile::TempDir,
    /// The small filesystem `REPO_DIR` lives in, when one could be mounted: the disk that fills.
    disk: Option<PathBuf>,
    /// The database as the test reaches it (directly).
    database_url: String,
    proxy: DbProxy,
    fake: FakeUpstream,
    ports: [u16; 2],
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if let Some(disk) = &self.disk {
            let _ = Command::new("umount").arg("-l").arg(disk).status();
        }
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "replica logs kept in {}",
                self.dir.path().join("logs").display()
            );
        }
    }
}

impl Deployment {
    fn repo(&self) -> PathBuf {
        match &self.disk {
            Some(disk) => disk.join("repo"),
            None => self.dir.path().join("repo"),
        }
    }

    /// Fills the disk under `REPO_DIR` for `hold`, then frees it. Returns whether it could.
    async fn fill_disk(&self, hold: Duration) -> bool {
        let Some(disk) = self.disk.clone() else {
            return false;
        };
        let filler = disk.join("filler");
        let full = {
            let filler = filler.clone();
            tokio::task::spawn_blocking(move || {
                use std::io::Write;
                let mut f = std::fs::File::create(&filler).unwrap();
                let chunk = vec![0u8; 1 << 20];
                loop {
                    if let Err(e) = f.write_all(&chunk).and_then(|()| f.flush()) {
                        break e.kind() == std::io::ErrorKind::StorageFull;
                    }
                }
            })
            .await
            .unwrap()
        };
        assert!(
            full,
            "the filler stopped for another reason than a full disk"
        );
        tokio::time::sleep(hold).await;
        std::fs::remove_file(&filler).unwrap();
        true
    }

    fn base(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i % 2])
    }

    /// Starts replica `i` (again) on its own port; waits for `/healthz`.
    async fn start(&self, i: usize) -> Replica {
        let logs = self.dir.path().join("logs");
        let n = std::fs::read_dir(&logs).unwrap().count();
        let log = logs.join(format!("writ-{i}-{n}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_writ"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info,sqlx=warn")
            .env("WRIT_ADDR", format!("127.0.0.1:{}", self.ports[i]))
            .env("DATABASE_URL", self.proxy.url_for(&self.database_url))
            .env("REPO_DIR", self.repo())
            .env("OPENROUTER_BASE_URL", self.fake.base_url())
            .env("CODE_LIST", MODELS.join(","))
            .env("CODE_MODEL", ARBITER)
            .env("WRIT_MODEL_MAX_ATTEMPTS", "1")
            .env("WRIT_LOCAL_MODEL", "off")
            // Few connections: the suite's other replicas share PostgreSQL's 100.
            .env("WRIT_MAX_BATCHES_IN_FLIGHT", "8")
            .env("WRIT_RATE_LIMIT_PER_MIN", "0")
            .env("WRIT_RECONCILE_AFTER_SECS", "2")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        support::wait_until_healthy(&self.base(i), &log).await;
        Replica { child }
    }

    fn query(&self, sql: &str) -> Vec<String> {
        support::psql_rows(&self.database_url, sql)
    }
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// Answers of 500 and above other than 503, with what was asked.
    server_errors: Mutex<Vec<String>>,
    /// Every accepted batch: its job id.
    jobs: Mutex<Vec<String>>,
    retries: AtomicU32,
    /// Answers of 507 (no space), and files of batches that failed for want of space.
    no_space: AtomicU32,
}

/// Sends one request to replica `at`, and on a dropped connection, a 503 or a 409 saying its
/// batch is still running, to the other one, until it is answered otherwise. `make` builds the request for a base URL.
async fn until_answered(
    d: &Deployment,
    seen: &Seen,
    mut at: usize,
    what: &str,
    make: impl Fn(&str) -> reqwest::RequestBuilder,
) -> (u16, Value) {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{what} was never answered"
        );
        match make(&d.base(at)).send().await {
            Ok(r) if r.status() == 503 => {}
            Ok(r) if r.status() == 507 => {
                let body: Value = r.json().await.unwrap_or(Value::Null);
                assert_eq!(body["error"]["code"], "no_space", "{what}: {body}");
                seen.no_space.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                if status == 409 && body["error"]["code"] == "idempotency_in_progress" {
                    seen.retries.fetch_add(1, Ordering::Relaxed);
                    at += 1;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
                if status >= 500 {
                    seen.server_errors
                        .lock()
                        .await
                        .push(format!("{what}: {status} {body}"));
                }
                return (status, body);
            }
            Err(_) => {}
        }
        seen.retries.fetch_add(1, Ordering::Relaxed);
        at += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One client: batches, edits and direct writes in turn until `until`.
async fn client(d: Arc<Deployment>, seen: Arc<Seen>, c: usize, until: Instant) {
    let http = support::client_with(Duration::from_secs(120));
    let edited = format!("edit/c{c}.py");
    let (status, _) = until_answered(&d, &seen, c, "seed", |base| {
        http.put(format!("{base}/files/{edited}?create_dirs=true"))
            .body("v = 0\n")
    })
    .await;
    assert!(status == 200 || status == 201, "seed: {status}");
    let mut n = 0;
    let mut attempt = 0;
    while Instant::now() < until {
        // A batch of two files, every other one async.
        let key = format!("chaos-{c}-{n}-{attempt}");
        let body = json!({"command": "write_codebase", "files": [
            {"filename": format!("b/c{c}/n{n}/a.py"), "code_description": "add"},
            {"filename": format!("b/c{c}/n{n}/b.py"), "code_description": "add"}]});
        let is_async = n % 2 == 1;
        let (status, answer) = until_answered(&d, &seen, c + n, &key, |base| {
            let rb = http
                .post(format!("{base}/write_codebase"))
                .header("idempotency-key", &key)
                .json(&body);
            if is_async {
                rb.header("prefer", "respond-async")
            } else {
                rb
            }
        })
        .await;
        match status {
            200 => {
                seen.jobs
                    .lock()
                    .await
                    .push(answer["request_id"].as_str().unwrap().to_string());
                if answer["status"] != "success" {
                    // Only a full disk may fail a file; the batch is sent again as a new one.
                    seen.no_space
                        .fetch_add(failed_for_space(&key, &answer), Ordering::Relaxed);
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                attempt = 0;
            }
            202 => seen
                .jobs
                .lock()
                .await
                .push(answer["job_id"].as_str().unwrap().to_string()),
            s => panic!("{key}: {s} {answer}"),
        }

        // A direct write over one of a few shared files: writers meet on them.
        let shared = format!("shared/s{}.txt", n % 3);
        let content = format!("client {c} write {n}\n");
        let (status, answer) = until_answered(&d, &seen, c + n, &shared, |base| {
            http.put(format!("{base}/files/{shared}?create_dirs=true"))
                .body(content.clone())
        })
        .await;
        assert!(
            status == 200 || status == 201,
            "{shared}: {status} {answer}"
        );

        // An edit of this client's own file, from what it holds now (an edit whose answer was
        // lost to a fault may have landed).
        let now = std::fs::read_to_string(d.repo().join(&edited)).unwrap_or_default();
        let old = now.trim_end().to_string();
        let next = format!("v = {}", n + 1);
        let (status, answer) = until_answered(&d, &seen, c + n + 1, &edited, |base| {
            http.post(format!("{base}/edits")).json(&json!({"files": [
                {"path": edited, "edits": [{"old": old, "new": next}]}]}))
        })
        .await;
        assert!(
            status == 200 || status == 422,
            "{edited}: {status} {answer}"
        );
        n += 1;
    }
}

/// How many files of a batch's answer failed; panics unless each failed for want of space.
fn failed_for_space(what: &str, answer: &Value) -> u32 {
    let failed: Vec<&Value> = answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no results in {answer}"))
        .iter()
        .filter(|f| f["success"] != true)
        .collect();
    assert!(
        !failed.is_empty(),
        "{what}: not a success, yet no file failed: {answer}"
    );
    for f in &failed {
        let error = f["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("no space left"),
            "{what}: a file failed for another reason than a full disk: {f}"
        );
    }
    failed.len() as u32
}

/// Every regular file beneath `root`, relative.
fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(root).unwrap().to_path_buf();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_replicas_killed_and_the_database_cut_lose_no_batch_and_leave_disk_and_records_agreeing()
 {
    let secs: u64 = std::env::var("WRIT_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs"])
        .arg(&disk)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("chaos: no right to mount a tmpfs here; the disk-full fault is left out");
    }
    let disk = mounted.then_some(disk);
    let repo = match &disk {
        Some(disk) => disk.join("repo"),
        None => dir.path().join("repo"),
    };
    std::fs::create_dir_all(&repo).unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    for m in MODELS.iter().chain([&ARBITER]) {
        fake.script(
            m,
            Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
                .with_latency(Latency::fixed(Duration::from_millis(600))),
        );
    }
    let database_url = writ_store::testing::fresh_postgres_url().await;
    let proxy = DbProxy::start(&database_url).await;
    let d = Arc::new(Deployment {
        dir,
        disk,
        database_url,
        proxy,
        fake,
        ports: [free_port(), free_port()],
    });
    let mut replicas = [d.start(0).await, d.start(1).await];
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let clients: Vec<_> = (0..4)
        .map(|c| tokio::spawn(client(d.clone(), seen.clone(), c, until)))
        .collect();

    // The faults, one round every 16 s of the run: a kill, a database outage, a kill of the
    // other replica, another outage.
    let rounds = (secs / 16).max(1);
    let round = Duration::from_secs(secs) / rounds as u32;
    let mut faults = 0;
    let mut disk_fills = 0;
    for r in 0..rounds {
        let at = |fraction: f64| started + round * r as u32 + round.mul_f64(fraction);
        tokio::time::sleep_until(at(0.03).into()).await;
        if d.fill_disk(Duration::from_millis(2500)).await {
            disk_fills += 1;
        }
        tokio::time::sleep_until(at(0.2).into()).await;
        replicas[1].child.kill().unwrap(); // SIGKILL
        replicas[1].child.wait().unwrap();
        faults += 1;
        replicas[1] = d.start(1).await;
        tokio::time::sleep_until(at(0.4).into()).await;
        d.proxy.cut();
        tokio::time::sleep(Duration::from_secs(4)).await;
        d.proxy.restore();
        faults += 1;
        tokio::time::sleep_until(at(0.65).into()).await;
        replicas[0].child.kill().unwrap();
        replicas[0].child.wait().unwrap();
        faults += 1;
        replicas[0] = d.start(0).await;
        tokio::time::sleep_until(at(0.8).into()).await;
        d.proxy.cut();
        tokio::time::sleep(Duration::from_secs(3)).await;
        d.proxy.restore();
        faults += 1;
    }

    for c in clients {
        c.await.unwrap();
    }
    let jobs = seen.jobs.lock().await.clone();

    // Every accepted batch ends, done and successful (resumed where its replica died).
    let http = support::client_with(Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(90);
    for job in &jobs {
        loop {
            let view = match http.get(format!("{}/jobs/{job}", d.base(0))).send().await {
                Ok(r) if r.status() == 200 => r.json::<Value>().await.unwrap(),
                _ => Value::Null,
            };
            if view["status"] == "done" || view["status"] == "failed" {
                assert_eq!(view["status"], "done", "{view}");
                if view["batch_status"] != "success" {
                    failed_for_space(job, &view["response"]);
                }
                break;
            }
            assert!(Instant::now() < deadline, "job {job} never ended: {view}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(
        d.query(
            "SELECT job_id FROM job_events WHERE name = 'done' GROUP BY job_id HAVING count(*) > 1"
        ),
        Vec::<String>::new(),
        "no job announced done twice"
    );
    // Writes a kill interrupted are settled by reconciliation.
    let settled = Instant::now() + Duration::from_secs(60);
    while d.query("SELECT count(*) FROM operations WHERE status = 'pending'") != ["0"] {
        assert!(Instant::now() < settled, "operations left pending");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let server_errors = seen.server_errors.lock().await.clone();
    assert!(server_errors.is_empty(), "{server_errors:?}");

    // Disk and records agree both ways; a torn file or a temporary one would not.
    let last: BTreeMap<String, String> = d
        .query(
            "SELECT DISTINCT ON (filename) filename, sha256 FROM operations \
             WHERE status = 'succeeded' ORDER BY filename, finished_at DESC",
        )
        .into_iter()
        .map(|row| {
            let (f, s) = row.split_once('|').unwrap();
            (f.to_string(), s.to_string())
        })
        .collect();
    let on_disk = files_under(&d.repo());
    assert_eq!(
        on_disk,
        last.keys().cloned().collect::<Vec<_>>(),
        "the files on disk are the files with a succeeded record"
    );
    for (file, recorded) in &last {
        let bytes = std::fs::read(d.repo().join(file)).unwrap();
        assert_eq!(
            &hex::encode(Sha256::digest(&bytes)),
            recorded,
            "{file} holds what its last succeeded record says"
        );
    }
    eprintln!(
        "chaos: {secs} s, {} batches driven, 0 lost, {} files, {} faults injected ({} SIGKILLs, {} database cuts of 3-4 s, {disk_fills} disk fills of 2.5 s), {} retries by the clients, {} refusals and failed files for want of space, no 500",
        jobs.len(),
        on_disk.len(),
        faults + disk_fills,
        faults / 2,
        faults / 2,
        seen.retries.load(Ordering::Relaxed),
        seen.no_space.load(Ordering::Relaxed),
    );
}
