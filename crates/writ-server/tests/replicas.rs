//! Several `writ` processes (replicas) on loopback ports over one PostgreSQL database and one
//! `REPO_DIR`, with the fake upstream: a replica SIGKILLed mid-run has its batches resumed by the
//! others (each ends `done` once, its synchronous callers get the answer by retrying with their
//! `Idempotency-Key`); writers of one file on two replicas are serialised; a job's events are
//! followed from a replica that does not run it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
mod support;
use support::free_port;
use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};

const MODELS: [&str; 2] = ["alpha/one", "beta/two"];
const ARBITER: &str = "judge/arbiter";

/// Sends `files` as an async batch to the replica at `base`; its job id.
async fn start_async(http: &reqwest::Client, base: &str, files: &[String]) -> String {
    let r = http
        .post(format!("{base}/write_codebase"))
        .header("prefer", "respond-async")
        .json(&batch(files))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    r.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

struct Replica {
    child: Child,
    base: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One deployment: a database, a `REPO_DIR`, the fake upstream, and the settings every replica
/// starts with.
struct Cluster {
    dir: tempfile::TempDir,
    database_url: String,
    fake: FakeUpstream,
    extra: Vec<(String, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The replicas' logs say why.
            self.dir.disable_cleanup(true);
            eprintln!(
                "replica logs kept in {}",
                self.dir.path().join("logs").display()
            );
        }
    }
}

fn client() -> reqwest::Client {
    // A retry with an Idempotency-Key may wait for a resumed batch.
    support::client_with(Duration::from_secs(120))
}

impl Cluster {
    async fn new(latency: Duration, extra: &[(&str, &str)]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let fake = FakeUpstream::start().await.unwrap();
        for m in MODELS.iter().chain([&ARBITER]) {
            fake.script(
                m,
                Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
                    .with_latency(Latency::fixed(latency)),
            );
        }
        Cluster {
            dir,
            database_url: writ_store::testing::fresh_postgres_url().await,
            fake,
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// A deployment with one API key, limited to `per_key` batches at once, and the models
    /// answering after `latency`.
    async fn with_key_limited_to(
        per_key: usize,
        latency: Duration,
    ) -> (Cluster, writ_core::keys::NewKey) {
        let api = writ_core::keys::generate("limits-test");
        let entry = writ_core::keys::config_entry(&api.key).unwrap();
        let per_key = per_key.to_string();
        let cluster = Cluster::new(
            latency,
            &[
                ("WRIT_API_KEYS", entry.as_str()),
                ("WRIT_MAX_BATCHES_PER_KEY", per_key.as_str()),
            ],
        )
        .await;
        (cluster, api)
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// Starts one more `writ serve` on a free port (its log in `logs/`); waits for `/healthz`.
    async fn start(&self) -> Replica {
        let port = free_port();
        let logs = self.dir.path().join("logs");
        let n = std::fs::read_dir(&logs).unwrap().count();
        let log = logs.join(format!("writ-{n}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_writ"));
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info,sqlx=warn")
            .env("WRIT_ADDR", format!("127.0.0.1:{port}"))
            .env("DATABASE_URL", &self.database_url)
            .env("REPO_DIR", self.repo())
            .env("OPENROUTER_BASE_URL", self.fake.base_url())
            .env("CODE_LIST", MODELS.join(","))
            .env("CODE_MODEL", ARBITER)
            .env("WRIT_MODEL_MAX_ATTEMPTS", "1")
            .env("WRIT_LOCAL_MODEL", "off")
            // Three replicas and other suites share one PostgreSQL's 100 connections.
            .env("WRIT_MAX_BATCHES_IN_FLIGHT", "16")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in &self.extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        support::wait_until_healthy(&base, &log).await;
        Replica { child, base }
    }

    /// One column of rows from the shared database, through `psql`.
    fn query(&self, sql: &str) -> Vec<String> {
        support::psql_rows(&self.database_url, sql)
    }
}

fn batch(files: &[String]) -> Value {
    json!({"command": "write_codebase",
           "files": files.iter().map(|f| json!({"filename": f, "code_description": "a function add(a, b)"})).collect::<Vec<_>>()})
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

/// How one batch was taken on: its job id, and for a waiting caller the answer it finally got.
struct Accepted {
    /// The replica the batch was first sent to.
    first: usize,
    job: String,
    answer: Option<Value>,
    retries: u32,
}

/// Sends one batch to `bases[first]`, and on a dropped connection, a 409 (still running) or a 503
/// (full) to the next replica, with the same `Idempotency-Key`, until it is accepted or answered.
async fn send_until_accepted(
    http: reqwest::Client,
    bases: Arc<Vec<String>>,
    first: usize,
    key: String,
    body: Value,
    is_async: bool,
) -> Accepted {
    let started = Instant::now();
    let mut at = first;
    let mut retries = 0;
    let mut last = String::new();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "batch {key} was never accepted after {retries} tries (last: {last})"
        );
        let mut req = http
            .post(format!("{}/write_codebase", bases[at % bases.len()]))
            .header("idempotency-key", &key)
            .json(&body);
        if is_async {
            req = req.header("prefer", "respond-async");
        }
        match req.send().await {
            Ok(r) if r.status() == 202 => {
                let v: Value = r.json().await.unwrap();
                return Accepted {
                    first: first % bases.len(),
                    job: v["job_id"].as_str().unwrap().to_string(),
                    answer: None,
                    retries,
                };
            }
            Ok(r) if r.status() == 200 => {
                let v: Value = r.json().await.unwrap();
                return Accepted {
                    first: first % bases.len(),
                    job: v["request_id"].as_str().unwrap().to_string(),
                    answer: Some(v),
                    retries,
                };
            }
            Ok(r) if r.status() == 409 || r.status() == 503 => {
                last = format!("{} from {}", r.status(), at % bases.len());
            }
            Ok(r) => panic!(
                "batch {key}: unexpected {}: {}",
                r.status(),
                r.text().await.unwrap_or_default()
            ),
            // The replica died under the request, or is restarting.
            Err(e) => last = format!("{e} from {}", at % bases.len()),
        }
        retries += 1;
        at += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replicas_batches_are_resumed_by_the_others_and_each_ends_done_once() {
    // 300 takes about 40 s on 2 busy cores; `WRIT_REPLICA_BATCHES` runs another count.
    let batches: usize = std::env::var("WRIT_REPLICA_BATCHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    const FILES: usize = 5;
    let cluster = Cluster::new(
        Duration::from_millis(1500),
        &[
            ("WRIT_SHUTDOWN_GRACE_SECS", "1"),
            // The default model concurrency (16 calls per model) queues a replica's admitted
            // batches for the fake's 1.5 s answers: a resumed batch's calls must go ahead of that
            // queue to be done within 30 s of the kill.
        ],
    )
    .await;
    let mut replicas = [
        cluster.start().await,
        cluster.start().await,
        cluster.start().await,
    ];
    let bases = Arc::new(replicas.iter().map(|r| r.base.clone()).collect::<Vec<_>>());
    let http = client();

    let mut sent = Vec::new();
    let mut killed_at = chrono::Utc::now();
    for i in 0..batches {
        let files: Vec<String> = (0..FILES).map(|f| format!("b{i}/f{f}.py")).collect();
        let is_async = i % 3 == 0;
        sent.push(tokio::spawn(send_until_accepted(
            http.clone(),
            bases.clone(),
            i,
            format!("batch-{i}"),
            batch(&files),
            is_async,
        )));
        tokio::time::sleep(Duration::from_millis(80)).await;
        if i == batches / 2 {
            // Mid-run, with batches of every kind running on it.
            replicas[1].child.kill().unwrap(); // SIGKILL
            replicas[1].child.wait().unwrap();
            killed_at = chrono::Utc::now();
        }
        if i == batches * 3 / 4 {
            // Another replica is stopped (a rolling restart): it hands its unfinished jobs back.
            let ok = Command::new("kill")
                .args(["-TERM", &replicas[2].child.id().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
    }
    let stopped = replicas[2].child.wait().unwrap();
    assert!(
        stopped.success(),
        "the stopped replica exits cleanly: {stopped:?}"
    );
    replicas[2] = cluster.start().await;
    // The killed replica comes back as a new process.
    replicas[1] = cluster.start().await;

    let mut accepted = Vec::new();
    for s in sent {
        accepted.push(s.await.unwrap());
    }
    // Every job ends; the killed replica's within 30 s of the kill.
    let mut jobs: HashMap<String, Value> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for a in &accepted {
        loop {
            let job: Value = http
                .get(format!("{}/jobs/{}", bases[0], a.job))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if job["status"] == "done" || job["status"] == "failed" {
                jobs.insert(a.job.clone(), job);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "job {} never ended: {job}",
                a.job
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut resume_secs = Vec::new();
    // Those first sent to the killed replica: resumed after its lease lapsed, not handed back.
    let mut killed_secs = Vec::new();
    for a in &accepted {
        let job = &jobs[&a.job];
        assert_eq!(job["status"], "done", "job {} ended done: {job}", a.job);
        assert_eq!(job["batch_status"], "success", "{job}");
        if job["attempts"].as_i64().unwrap() > 0 {
            let finished: chrono::DateTime<chrono::Utc> =
                job["finished_at"].as_str().unwrap().parse().unwrap();
            let secs = (finished - killed_at).num_milliseconds() as f64 / 1000.0;
            resume_secs.push(secs);
            if a.first == 1 {
                killed_secs.push(secs);
            }
        }
    }
    // Every synchronous caller got the finished answer, retrying where its replica died.
    let mut sync_retried = 0;
    for a in &accepted {
        if let Some(answer) = &a.answer {
            assert_eq!(answer["succeeded"], FILES, "{answer}");
            assert_eq!(
                answer["results"].as_array().unwrap().len(),
                FILES,
                "{answer}"
            );
            if a.retries > 0 {
                sync_retried += 1;
            }
        }
        let stored = &jobs[&a.job]["response"];
        assert_eq!(stored["succeeded"], FILES, "{stored}");
    }

    // Done exactly once, no duplicate operation, every file as its one succeeded record says.
    assert_eq!(
        cluster.query(
            "SELECT job_id FROM job_events WHERE name = 'done' GROUP BY job_id HAVING count(*) > 1"
        ),
        Vec::<String>::new(),
        "no job announced done twice"
    );
    assert_eq!(
        cluster.query("SELECT count(*) FROM jobs WHERE status <> 'done'"),
        vec!["0".to_string()]
    );
    assert_eq!(
        cluster.query("SELECT filename FROM operations WHERE status = 'succeeded' GROUP BY filename HAVING count(*) > 1"),
        Vec::<String>::new(),
        "each file written once"
    );
    assert_eq!(
        cluster.query("SELECT count(*) FROM operations WHERE status = 'pending'"),
        vec!["0".to_string()]
    );
    let records: BTreeMap<String, String> = cluster
        .query("SELECT filename, sha256 FROM operations WHERE status = 'succeeded'")
        .into_iter()
        .map(|row| {
            let (f, s) = row.split_once('|').unwrap();
            (f.to_string(), s.to_string())
        })
        .collect();
    assert_eq!(records.len(), batches * FILES);
    for (file, recorded) in &records {
        let on_disk = std::fs::read(cluster.repo().join(file)).unwrap();
        assert_eq!(&sha(&on_disk), recorded, "{file} matches its record");
    }

    resume_secs.sort_by(f64::total_cmp);
    killed_secs.sort_by(f64::total_cmp);
    eprintln!(
        "replicas: {} of them first sent to the killed replica, done after the kill: p50 {:.1} s, \
         p99 {:.1} s",
        killed_secs.len(),
        percentile(&killed_secs, 0.5),
        percentile(&killed_secs, 0.99),
    );
    eprintln!(
        "replicas: {} batches ({} async), {} resumed after the kill and the stop, {} synchronous \
         callers retried on another replica with their Idempotency-Key; resumed jobs done after \
         the kill (all resumed): p50 {:.1} s, p99 {:.1} s",
        batches,
        batches.div_ceil(3),
        resume_secs.len(),
        sync_retried,
        percentile(&resume_secs, 0.5),
        percentile(&resume_secs, 0.99),
    );
    assert!(!resume_secs.is_empty(), "the kill interrupted some batches");
    assert!(
        resume_secs.iter().all(|s| *s < 30.0),
        "the killed replica's batches end within 30 s of the kill: {resume_secs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_writing_one_file_with_if_match_one_wins_and_the_other_gets_412() {
    let cluster = Cluster::new(Duration::from_millis(10), &[]).await;
    let a = cluster.start().await;
    let b = cluster.start().await;
    let http = client();
    let put = |base: String, body: String, if_match: String| {
        let http = http.clone();
        async move {
            http.put(format!("{base}/files/same.txt"))
                .header("if-match", format!("\"{if_match}\""))
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let r = http
        .put(format!("{}/files/same.txt", a.base))
        .body("v0")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let mut current = "v0".to_string();
    for round in 0..30 {
        let from_a = format!("a{round}-{}", "x".repeat(200_000));
        let from_b = format!("b{round}-{}", "y".repeat(200_000));
        let expected = sha(current.as_bytes());
        let (sa, sb) = tokio::join!(
            put(a.base.clone(), from_a.clone(), expected.clone()),
            put(b.base.clone(), from_b.clone(), expected),
        );
        let mut outcome = [sa, sb];
        outcome.sort_unstable();
        assert_eq!(outcome, [200, 412], "round {round}: exactly one wins");
        current = if sa == 200 { from_a } else { from_b };
        assert_eq!(
            std::fs::read_to_string(cluster.repo().join("same.txt")).unwrap(),
            current,
            "round {round}: the winner's content, whole"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_is_followed_from_a_replica_that_does_not_run_it_in_order_with_none_missing() {
    let cluster = Cluster::new(Duration::from_millis(700), &[]).await;
    let runs = cluster.start().await;
    let follows = cluster.start().await;
    let http = client();
    let files: Vec<String> = (0..5).map(|f| format!("ev/f{f}.py")).collect();
    let job = start_async(&http, &runs.base, &files).await;
    let stream = http
        .get(format!("{}/jobs/{job}/events", follows.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let followed: Vec<(i64, String)> = sse_events(&stream);
    let stored = http
        .get(format!("{}/jobs/{job}/events", runs.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stored = sse_events(&stored);
    assert!(followed.len() > 5, "{stream}");
    assert_eq!(
        followed.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        (1..=followed.len() as i64).collect::<Vec<_>>(),
        "in order, none missing"
    );
    assert_eq!(followed.last().unwrap().1, "done");
    assert_eq!(
        followed, stored,
        "the same events as the replica running it"
    );
}

/// `GET /jobs/{id}` on the replica at `base`, as the holder of `key`.
async fn job_as(http: &reqwest::Client, base: &str, key: &str, id: &str) -> Value {
    http.get(format!("{base}/jobs/{id}"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `(id, event)` of each event of an SSE body.
fn sse_events(body: &str) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let mut id = None;
        let mut name = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                name = Some(v.trim().to_string());
            }
        }
        if let (Some(id), Some(name)) = (id, name) {
            out.push((id, name));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_whose_replicas_keep_dying_ends_failed_with_the_reason_and_its_answer_stored() {
    let cluster = Cluster::new(Duration::from_secs(20), &[]).await;
    let mut first = cluster.start().await;
    let http = client();
    let files = vec!["dies/a.py".to_string()];
    let r = http
        .post(format!("{}/write_codebase", first.base))
        .header("prefer", "respond-async")
        .header("idempotency-key", "keeps-dying")
        .json(&batch(&files))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let job = r.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cluster
            .fake
            .until_in_flight(None, 1, Duration::from_secs(10))
            .await
    );
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    // As if three replicas had already died running it.
    cluster.query(&format!(
        "UPDATE jobs SET attempts = 3, lease_until = now() - interval '1 second' WHERE id = '{job}'"
    ));
    let next = cluster.start().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let ended = loop {
        let j: Value = http
            .get(format!("{}/jobs/{job}", next.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if j["status"] != "running" {
            break j;
        }
        assert!(Instant::now() < deadline, "the job never ended: {j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["attempts"], 4, "{ended}");
    let reason = ended["error"].as_str().unwrap();
    assert!(reason.contains("stopped 4 times"), "{reason}");
    // The repeat gets the stored answer: the file failed with the reason.
    let again = http
        .post(format!("{}/write_codebase", next.base))
        .header("idempotency-key", "keeps-dying")
        .json(&batch(&files))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["status"], "error", "{again}");
    assert!(
        again["results"][0]["error"]
            .as_str()
            .unwrap()
            .contains("stopped 4 times"),
        "{again}"
    );
    assert!(!cluster.repo().join("dies/a.py").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_limited_to_n_batches_runs_n_across_three_replicas_not_3n() {
    const PER_KEY: usize = 2;
    let (cluster, api) = Cluster::with_key_limited_to(PER_KEY, Duration::from_secs(4)).await;
    let replicas = [
        cluster.start().await,
        cluster.start().await,
        cluster.start().await,
    ];
    let http = client();
    let mut sent = Vec::new();
    for i in 0..3 * PER_KEY {
        let req = http
            .post(format!("{}/write_codebase", replicas[i % 3].base))
            .bearer_auth(&api.key)
            .header("prefer", "respond-async")
            .json(&batch(&[format!("lim/f{i}.py")]));
        sent.push(tokio::spawn(async move {
            req.send().await.unwrap().status().as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for s in sent {
        statuses.push(s.await.unwrap());
    }
    let accepted = statuses.iter().filter(|s| **s == 202).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((accepted, refused), (PER_KEY, 2 * PER_KEY), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replicas_batches_keep_their_keys_slots_on_the_replica_that_resumes_them() {
    const PER_KEY: usize = 2;
    let (cluster, api) = Cluster::with_key_limited_to(PER_KEY, Duration::from_secs(8)).await;
    let mut dies = cluster.start().await;
    let resumes = cluster.start().await;
    let http = client();
    let post = |base: &str, i: usize| {
        http.post(format!("{base}/write_codebase"))
            .bearer_auth(&api.key)
            .header("prefer", "respond-async")
            .json(&batch(&[format!("slots/f{i}.py")]))
            .send()
    };
    let mut jobs = Vec::new();
    for i in 0..PER_KEY {
        let r = post(&dies.base, i).await.unwrap();
        assert_eq!(r.status(), 202);
        jobs.push(
            r.json::<Value>().await.unwrap()["job_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert!(
        cluster
            .fake
            .until_in_flight(None, PER_KEY, Duration::from_secs(10))
            .await
    );
    dies.child.kill().unwrap();
    dies.child.wait().unwrap();
    let killed = Instant::now();

    // Both resumed by the other replica...
    for job in &jobs {
        loop {
            let j = job_as(&http, &resumes.base, &api.key, job).await;
            if j["attempts"].as_i64().unwrap_or(0) > 0 {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "never resumed: {j}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // ...and past the moment the dead replica's own hold on their slots ran out (10 s from its
    // last renewal), while they still run.
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(killed.elapsed())).await;
    let running = cluster.query(&format!(
        "SELECT count(*) FROM jobs WHERE status = 'running' AND id IN ('{}', '{}')",
        jobs[0], jobs[1]
    ));
    assert_eq!(running, vec!["2".to_string()], "the resumed jobs still run");
    let r = post(&resumes.base, 10).await.unwrap();
    assert_eq!(
        r.status(),
        429,
        "the key runs its {PER_KEY} batches, resumed on another replica: no third"
    );

    // Given back once each when they end: the key runs two batches again, not more.
    for job in &jobs {
        loop {
            let j = job_as(&http, &resumes.base, &api.key, job).await;
            if j["status"] != "running" {
                assert_eq!(j["status"], "done", "{j}");
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(60),
                "never ended: {j}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let statuses = [
        post(&resumes.base, 11).await.unwrap().status().as_u16(),
        post(&resumes.base, 12).await.unwrap().status().as_u16(),
        post(&resumes.base, 13).await.unwrap().status().as_u16(),
    ];
    assert_eq!(statuses, [202, 202, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keys_request_rate_is_one_bucket_across_replicas() {
    let api = writ_core::keys::generate("rate-test");
    let entry = writ_core::keys::config_entry(&api.key).unwrap();
    let cluster = Cluster::new(
        Duration::from_millis(10),
        &[
            ("WRIT_API_KEYS", entry.as_str()),
            ("WRIT_RATE_LIMIT_PER_MIN", "6"),
            ("WRIT_RATE_LIMIT_BURST", "3"),
        ],
    )
    .await;
    let replicas = [
        cluster.start().await,
        cluster.start().await,
        cluster.start().await,
    ];
    let http = client();
    let mut statuses = Vec::new();
    for i in 0..9 {
        let r = http
            .get(format!("{}/jobs", replicas[i % 3].base))
            .bearer_auth(&api.key)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        3,
        "a burst of 3 for the key, not 3 per replica: {statuses:?}"
    );
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_stopping_hands_its_unfinished_jobs_back_and_another_resumes_them_at_once() {
    let cluster = Cluster::new(Duration::from_secs(3), &[("WRIT_SHUTDOWN_GRACE_SECS", "1")]).await;
    let mut stopping = cluster.start().await;
    let stays = cluster.start().await;
    let http = client();
    let files: Vec<String> = (0..3).map(|f| format!("term/f{f}.py")).collect();
    let job = start_async(&http, &stopping.base, &files).await;
    assert!(
        cluster
            .fake
            .until_in_flight(None, 1, Duration::from_secs(10))
            .await
    );
    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &stopping.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut claimed_after = None;
    let done = loop {
        let j: Value = http
            .get(format!("{}/jobs/{job}", stays.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if claimed_after.is_none() && j["attempts"].as_i64().unwrap() > 0 {
            claimed_after = Some(sent.elapsed());
        }
        if j["status"] != "running" {
            break j;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "the job never ended: {j}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(
        done["attempts"], 1,
        "resumed once, by the other replica: {done}"
    );
    assert_eq!(done["response"]["succeeded"], 3, "{done}");
    // Handed back after the 1 s grace and claimed by the next claim (every 2 s); waiting for the
    // lease to lapse instead would take at least 7 s (10 s from its last renewal).
    let claimed_after = claimed_after.unwrap();
    assert!(
        claimed_after < Duration::from_secs(6),
        "resumed at once, not after the lease lapsed: {claimed_after:?}"
    );
    let code = stopping.child.wait().unwrap();
    assert!(
        code.success(),
        "the stopping replica exits cleanly: {code:?}"
    );
    eprintln!(
        "SIGTERM hand-back: job claimed by the other replica {:.1} s after the signal",
        claimed_after.as_secs_f64()
    );
}

/// One stateless MCP request (protocol 2026-07-28: no session, the protocol in every request),
/// and the JSON-RPC answer, whether it came as JSON or as SSE.
async fn mcp_stateless(http: &reqwest::Client, base: &str, method: &str, params: Value) -> Value {
    mcp_stateless_with(http, base, method, params, json!({})).await
}

/// [`mcp_stateless`] from a client declaring `capabilities`.
async fn mcp_stateless_with(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    params: Value,
    capabilities: Value,
) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "replicas-test", "version": "1"},
    });
    let mut req = http
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    // What the request is about: the tool, or the task.
    if let Some(name) = params["name"].as_str().or(params["taskId"].as_str()) {
        req = req.header("mcp-name", name);
    }
    let text = req.send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:").or(Some(l)))
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_clients_of_the_current_revision_reach_any_replica_and_a_batch_is_fetched_from_another()
{
    let cluster = Cluster::new(Duration::from_millis(200), &[]).await;
    let a = cluster.start().await;
    let b = cluster.start().await;
    let http = client();
    let answer = mcp_stateless(
        &http,
        &a.base,
        "tools/call",
        json!({"name": "write_codebase", "arguments": batch(&["mcp/a.py".to_string()])}),
    )
    .await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let id = answer["result"]["structuredContent"]["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string();
    // No session: the next request goes to the other replica.
    let listed = mcp_stateless(
        &http,
        &b.base,
        "tools/call",
        json!({"name": "list_files", "arguments": {"dir": "mcp"}}),
    )
    .await;
    assert_eq!(
        listed["result"]["structuredContent"]["entries"][0]["name"], "a.py",
        "{listed}"
    );
    let job: Value = http
        .get(format!("{}/jobs/{id}", b.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(job["status"], "done", "{job}");
    assert_eq!(job["response"]["succeeded"], 1, "{job}");

    // A client that takes MCP tasks starts the batch on one replica and polls it on the other.
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let created = mcp_stateless_with(
        &http,
        &a.base,
        "tools/call",
        json!({"name": "write_codebase", "arguments": batch(&["mcp/tasked.py".to_string()])}),
        tasks.clone(),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task_id = created["result"]["taskId"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let got = mcp_stateless_with(
            &http,
            &b.base,
            "tasks/get",
            json!({"taskId": task_id}),
            tasks.clone(),
        )
        .await;
        match got["result"]["status"].as_str() {
            Some("completed") => break got,
            Some("working") if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => panic!("task {task_id} on the other replica: {got}"),
        }
    };
    assert_eq!(done["result"]["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["succeeded"], 1,
        "{done}"
    );
    assert!(cluster.repo().join("mcp/tasked.py").exists());
}
