//! The audit store going away under load, through a TCP proxy between this test's writ and
//! PostgreSQL that the test cuts and restores (a failover as writ sees it: connections reset,
//! new ones refused): an outage within `WRIT_STORE_OUTAGE_WAIT` costs batches latency, not
//! failures; a longer one answers 503 with nothing written, and the retry with the same
//! `Idempotency-Key` gets the batch done.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, Backend, DbProxy, FALLBACK, MODELS, TestApp};

/// A server whose database is reached through a proxy the test holds.
async fn spawn_behind_proxy(outage_wait: &str, latency: Duration) -> (TestApp, DbProxy) {
    let database_url = writ_store::testing::fresh_postgres_url().await;
    let proxy = DbProxy::start(&database_url).await;
    let proxied = proxy.url_for(&database_url);
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Postgres,
        &[
            ("DATABASE_URL", proxied.as_str()),
            ("WRIT_STORE_OUTAGE_WAIT", outage_wait),
            ("WRIT_RATE_LIMIT_PER_MIN", "0"),
        ],
    )
    .await;
    // Every model gives the same file, so each file has one distinct candidate and no arbiter.
    for m in MODELS.iter().chain([&ARBITER, &FALLBACK]) {
        app.fake().script(
            m,
            Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
                .with_latency(Latency::fixed(latency)),
        );
    }
    (app, proxy)
}

fn two_files(prefix: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": format!("{prefix}/a.py"), "code_description": "add"},
                     {"filename": format!("{prefix}/b.py"), "code_description": "add"}]})
}

/// How one batch ended, as a client that retries 503 and 409 with the same key sees it.
struct Outcome {
    /// The batch's answer: the synchronous body, or the async job's stored answer.
    answer: Value,
    /// 503s and 409s answered before it.
    retries: u32,
    /// Statuses of 500 and above other than 503.
    server_errors: Vec<u16>,
}

/// Drives one batch to its end: sends it (again on 503 and 409, with the same key) and, when
/// async, follows its job until it ends.
async fn drive(app: &TestApp, body: &Value, key: &str, is_async: bool) -> Outcome {
    let until = Instant::now() + Duration::from_secs(150);
    let mut retries = 0;
    let mut server_errors = Vec::new();
    let job = loop {
        assert!(Instant::now() < until, "batch {key} never answered");
        let mut rb = app
            .client
            .post(app.url("/write_codebase"))
            .header("idempotency-key", key)
            .json(body);
        if is_async {
            rb = rb.header("prefer", "respond-async");
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        let answer: Value = r.json().await.unwrap_or(Value::Null);
        match status {
            200 => {
                return Outcome {
                    answer,
                    retries,
                    server_errors,
                };
            }
            202 => break answer["job_id"].as_str().unwrap().to_string(),
            409 | 503 => retries += 1,
            s => {
                server_errors.push(s);
                retries += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    loop {
        assert!(Instant::now() < until, "job {job} never ended");
        let r = app
            .client
            .get(app.url(&format!("/jobs/{job}")))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let view: Value = r.json().await.unwrap_or(Value::Null);
        match status {
            200 if view["status"] == "done" || view["status"] == "failed" => {
                return Outcome {
                    answer: view["response"].clone(),
                    retries,
                    server_errors,
                };
            }
            200 | 503 => {}
            s => server_errors.push(s),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn a_database_outage_shorter_than_the_wait_costs_batches_latency_not_failures() {
    let (app, proxy) = spawn_behind_proxy("30", Duration::from_millis(700)).await;
    let app = std::sync::Arc::new(app);
    let started = Instant::now();
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let app = app.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                // Batches until well after the outage (from 2 s to 8 s).
                let mut n = 0;
                while started.elapsed() < Duration::from_secs(11) {
                    let prefix = format!("c{client}/n{n}");
                    let key = format!("outage-{client}-{n}");
                    let is_async = (client + n) % 2 == 1;
                    let began = Instant::now();
                    let outcome = drive(&app, &two_files(&prefix), &key, is_async).await;
                    outcomes.push((prefix, is_async, began, began.elapsed(), outcome));
                    n += 1;
                }
                outcomes
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.cut();
    let cut_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let (ready, _) = app.json("/readyz").await;
    assert_eq!(ready, 503, "not ready while the store is away");
    tokio::time::sleep(cut_at + Duration::from_secs(6) - Instant::now()).await;
    proxy.restore();

    let mut batches = 0;
    let mut kept_through = 0;
    for client in clients {
        for (prefix, is_async, began, took, outcome) in client.await.unwrap() {
            batches += 1;
            assert!(
                outcome.server_errors.is_empty(),
                "{prefix}: {:?}",
                outcome.server_errors
            );
            assert_eq!(
                outcome.answer["status"], "success",
                "{prefix} (async: {is_async}): {}",
                outcome.answer
            );
            for file in ["a.py", "b.py"] {
                assert!(
                    app.repo_dir.join(&prefix).join(file).exists(),
                    "{prefix}/{file} is on disk"
                );
            }
            // Sent before the cut, answered after it, without a retry: it kept its results
            // through the outage.
            if !is_async
                && began < cut_at
                && outcome.retries == 0
                && began + took > cut_at + Duration::from_secs(5)
            {
                kept_through += 1;
            }
        }
    }
    assert!(batches >= 12, "only {batches} batches driven");
    assert!(
        kept_through >= 1,
        "no synchronous batch was in flight through the outage"
    );
    assert_eq!(app.json("/readyz").await.0, 200);
}

#[tokio::test]
async fn an_outage_longer_than_the_wait_answers_503_writes_nothing_and_the_retry_with_its_key_succeeds()
 {
    let (app, proxy) = spawn_behind_proxy("2", Duration::from_millis(1500)).await;
    let body = two_files("late");
    let batch = {
        let client = app.client.clone();
        let url = app.url("/write_codebase");
        let body = body.clone();
        tokio::spawn(async move {
            let r = client
                .post(url)
                .header("idempotency-key", "late-1")
                .json(&body)
                .send()
                .await
                .unwrap();
            let retry_after = r.headers().contains_key("retry-after");
            (
                r.status().as_u16(),
                retry_after,
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        })
    };
    // Recorded, and the models are answering: the database goes away until past the wait.
    let recorded = Instant::now() + Duration::from_secs(10);
    while app.json("/jobs").await.1["jobs"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < recorded, "the batch was never recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    let (status, retry_after, answer) = batch.await.unwrap();
    assert_eq!(status, 503, "{answer}");
    assert!(retry_after, "a 503 says when to retry");
    assert_eq!(answer["error"]["code"], "audit_unavailable", "{answer}");
    assert!(
        app.files_on_disk().is_empty(),
        "nothing written: {:?}",
        app.files_on_disk()
    );

    // The batch's records are there without its answer: once its lease lapses, a replica (this
    // one) resumes it, and the retry waits for its answer.
    proxy.restore();
    let outcome = drive(&app, &body, "late-1", false).await;
    assert!(
        outcome.server_errors.is_empty(),
        "{:?}",
        outcome.server_errors
    );
    assert_eq!(outcome.answer["status"], "success", "{}", outcome.answer);
    let mut on_disk = app.files_on_disk();
    on_disk.sort();
    assert_eq!(on_disk, ["late/a.py", "late/b.py"]);
}
