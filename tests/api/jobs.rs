//! Async batches, the progress event stream, and jobs that outlive a crash.

use std::time::Duration;

use serde_json::{Value, json};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp, on_both_backends, spawn_with, test_settings};

fn batch(files: &[&str]) -> Value {
    json!({"command": "write_codebase",
           "files": files.iter().map(|f| json!({"filename": f, "code_description": "a small module"})).collect::<Vec<_>>()})
}

/// (id, event name, data) of each SSE event in `text`.
fn parse_sse(text: &str) -> Vec<(i64, String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut id = None;
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            Some((id?, name?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

async fn events(app: &TestApp, job: &str, last_event_id: Option<i64>) -> Vec<(i64, String, Value)> {
    let mut req = app.client.get(app.url(&format!("/jobs/{job}/events")));
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id.to_string());
    }
    let r = tokio::time::timeout(Duration::from_secs(20), req.send())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = tokio::time::timeout(Duration::from_secs(20), r.text())
        .await
        .expect("the stream ends after done")
        .unwrap();
    parse_sse(&text)
}

async fn wait_done(app: &TestApp, job: &str) -> Value {
    for _ in 0..200 {
        let (status, body) = app.json(&format!("/jobs/{job}")).await;
        assert_eq!(status, 200, "{body}");
        if body["status"] == "done" || body["status"] == "failed" {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {job} did not finish");
}

async fn an_async_batch_answers_202_and_its_job_ends_with_the_synchronous_body(app: TestApp) {
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "a = 1"))
                .with_latency(Latency::fixed(Duration::from_millis(300))),
        );
    }
    let r = app
        .client
        .post(app.url("/write_codebase"))
        .header("prefer", "respond-async")
        .json(&batch(&["a.py"]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.headers()["preference-applied"], "respond-async");
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let body: Value = r.json().await.unwrap();
    let job = body["job_id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/jobs/{job}"));
    assert!(
        !app.repo_dir.join("a.py").exists(),
        "answered before the models did"
    );

    let done = wait_done(&app, &job).await;
    assert_eq!(done["status"], "done");
    assert_eq!(done["batch_status"], "success");
    assert_eq!(done["response"]["request_id"], job);
    assert_eq!(done["response"]["results"][0]["filename"], "a.py");
    assert_eq!(
        done["response"]["results"][0]["selection"],
        "single_candidate"
    );
    assert!(app.repo_dir.join("a.py").exists());
    let (_, listed) = app.json("/jobs").await;
    assert_eq!(listed["jobs"][0]["id"], job.as_str());
}

async fn options_async_is_the_same_as_prefer_respond_async(app: TestApp) {
    let mut body = batch(&["b.py"]);
    body["options"] = json!({"async": true});
    let r = app
        .client
        .post(app.url("/write_codebase"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let headers = r.headers().clone();
    let answer: Value = r.json().await.unwrap();
    let job = answer["job_id"].as_str().unwrap();
    assert_eq!(headers["location"], format!("/jobs/{job}").as_str());
    assert_eq!(answer["location"], format!("/jobs/{job}"));
    assert_eq!(answer["events"], format!("/jobs/{job}/events"));
    // The body asked for it, not a Prefer header: no preference was applied.
    assert!(headers.get("preference-applied").is_none(), "{headers:?}");
    let done = wait_done(&app, job).await;
    assert_eq!(done["batch_status"], "success");
}

async fn the_event_stream_tells_each_step_in_order_and_ends_after_done(app: TestApp) {
    for (i, m) in MODELS.iter().enumerate() {
        app.fake()
            .script(m, Script::always(Step::code("python", format!("v = {i}"))));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "shortest")));
    let (status, answer) = app.post_write_codebase(&batch(&["x.py", "y.py"])).await;
    assert_eq!(status, 200, "{answer}");
    let job = answer["request_id"].as_str().unwrap().to_string();

    let all = events(&app, &job, None).await;
    let ids: Vec<i64> = all.iter().map(|e| e.0).collect();
    assert_eq!(
        ids,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "ids count up from 1"
    );
    let names: Vec<&str> = all.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(names.first(), Some(&"queued"));
    assert_eq!(names.last(), Some(&"done"));
    for expected in [
        "file_started",
        "candidate_started",
        "candidate_finished",
        "arbiter_started",
        "arbiter_chose",
        "file_written",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    assert_eq!(
        names.iter().filter(|n| **n == "candidate_finished").count(),
        6,
        "3 models × 2 files"
    );
    assert_eq!(names.iter().filter(|n| **n == "file_written").count(), 2);
    let finished = all.iter().find(|e| e.1 == "candidate_finished").unwrap();
    assert!(
        finished.2["latency_ms"].is_u64()
            && finished.2["ok"] == true
            && finished.2["parsed"] == true,
        "{}",
        finished.2
    );
    let chose = all.iter().find(|e| e.1 == "arbiter_chose").unwrap();
    assert_eq!(chose.2["reason"], "shortest");
    let written = all.iter().find(|e| e.1 == "file_written").unwrap();
    assert_eq!(written.2["operation"], "created");
    assert_eq!(all.last().unwrap().2["status"], "success");

    let rest = events(&app, &job, Some(3)).await;
    assert_eq!(
        rest.first().map(|e| e.0),
        Some(4),
        "Last-Event-ID replays only what came after"
    );
    assert_eq!(rest.len(), all.len() - 3);
}

async fn a_failed_file_is_an_event_too(app: TestApp) {
    for m in MODELS.iter().chain([&writ_tests::FALLBACK]) {
        app.fake().script(m, Script::always(Step::status(400)));
    }
    let (_, answer) = app.post_write_codebase(&batch(&["bad.py"])).await;
    let all = events(&app, answer["request_id"].as_str().unwrap(), None).await;
    let failed = all
        .iter()
        .find(|e| e.1 == "file_failed")
        .expect("file_failed");
    assert!(
        failed.2["error"].as_str().unwrap().contains("failed"),
        "{}",
        failed.2
    );
    assert_eq!(failed.2["file"], "bad.py", "{}", failed.2);
    // Each model's refusal is its own event, classed, and none of them claims success.
    let finished: Vec<&Value> = all
        .iter()
        .filter(|e| e.1 == "candidate_finished")
        .map(|e| &e.2)
        .collect();
    for m in MODELS {
        let mine: Vec<&&Value> = finished.iter().filter(|e| e["model"] == *m).collect();
        assert_eq!(
            mine.len(),
            1,
            "one candidate_finished for {m}: {finished:?}"
        );
        assert_eq!(mine[0]["ok"], false, "{}", mine[0]);
        assert_eq!(mine[0]["error_class"], "bad_request", "{}", mine[0]);
    }
    assert!(
        finished.iter().all(|e| e["error_class"] == "bad_request"),
        "{finished:?}"
    );
    assert_eq!(all.last().map(|e| e.1.as_str()), Some("done"), "{all:?}");
}

async fn a_subscriber_follows_a_running_batch_live(app: TestApp) {
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "slow = 1"))
                .with_latency(Latency::fixed(Duration::from_millis(700))),
        );
    }
    let r = app
        .client
        .post(app.url("/write_codebase"))
        .header("prefer", "respond-async")
        .json(&batch(&["slow.py"]))
        .send()
        .await
        .unwrap();
    let job = r.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = app
        .client
        .get(app.url(&format!("/jobs/{job}/events")))
        .send()
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let first = String::from_utf8_lossy(&first).to_string();
    assert!(
        first.contains("event: queued") || first.contains("event:queued"),
        "{first}"
    );
    let (_, job_now) = app.json(&format!("/jobs/{job}")).await;
    assert_ne!(
        job_now["status"], "done",
        "the first event arrived while the batch was still running"
    );
    let mut rest = first;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    let names: Vec<String> = parse_sse(&rest).into_iter().map(|e| e.1).collect();
    assert_eq!(names.last().map(String::as_str), Some("done"), "{names:?}");
}

async fn unknown_jobs_and_bad_ids_are_clear_errors(app: TestApp) {
    let (status, _) = app.json(&format!("/jobs/{}", uuid::Uuid::now_v7())).await;
    assert_eq!(status, 404);
    let (status, body) = app.json("/jobs/not-a-uuid").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "id");
    let (status, body) = app.json("/jobs?limit=0").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "limit");
}

/// Batches that run together share commits (group commit) and one event writer. Each answer
/// still comes after its records are closed: the job holds the answer, the request is closed,
/// every file's operation has succeeded — read the moment the answer arrives, without waiting.
/// Events are stored in the background; every job's arrive in full, numbered without gaps.
async fn concurrent_batches_answer_with_every_record_closed_and_every_event_stored(app: TestApp) {
    for (i, m) in MODELS.iter().enumerate() {
        app.fake()
            .script(m, Script::always(Step::code("python", format!("v = {i}"))));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "shortest")));
    let answers = futures::future::join_all((0..12).map(|b| {
        let app = &app;
        async move {
            let files: Vec<String> = (0..3).map(|f| format!("b{b}/f{f}.py")).collect();
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            let (status, answer) = app.post_write_codebase(&batch(&files)).await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["status"], "success", "{answer}");
            let job = answer["request_id"].as_str().unwrap().to_string();
            // At once: no poll, no sleep.
            let (status, ops) = app
                .json(&format!("/operations?request_id={job}&limit=100"))
                .await;
            assert_eq!(status, 200, "{ops}");
            let statuses: Vec<&str> = ops["operations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["status"].as_str().unwrap())
                .collect();
            assert_eq!(statuses, ["succeeded"; 3], "{ops}");
            let (status, record) = app.json(&format!("/jobs/{job}")).await;
            assert_eq!(status, 200, "{record}");
            assert_eq!(record["status"], "done", "{record}");
            assert_eq!(record["response"]["request_id"], answer["request_id"]);
            job
        }
    }))
    .await;
    for job in answers {
        let all = events(&app, &job, None).await;
        let ids: Vec<i64> = all.iter().map(|e| e.0).collect();
        assert_eq!(ids, (1..=all.len() as i64).collect::<Vec<_>>(), "{job}");
        assert_eq!(all.first().map(|e| e.1.as_str()), Some("queued"));
        assert_eq!(all.last().map(|e| e.1.as_str()), Some("done"));
        assert_eq!(
            all.iter().filter(|e| e.1 == "file_written").count(),
            3,
            "{job}"
        );
    }
}

on_both_backends!(with_models:
    an_async_batch_answers_202_and_its_job_ends_with_the_synchronous_body,
    options_async_is_the_same_as_prefer_respond_async,
    the_event_stream_tells_each_step_in_order_and_ends_after_done,
    a_failed_file_is_an_event_too,
    a_subscriber_follows_a_running_batch_live,
    unknown_jobs_and_bad_ids_are_clear_errors,
    concurrent_batches_answer_with_every_record_closed_and_every_event_stored,
);

/// A job that was running when its process died (heartbeat long stopped) is failed with a
/// reason at the next start, its request closed, and its event stream ended.
async fn a_job_interrupted_by_a_crash_is_failed_with_a_reason_at_the_next_start(backend: Backend) {
    use writ_core::jobs::{JobEvent, JobStatus, NewJob};
    let (settings, dirs) = test_settings(backend).await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let job = uuid::Uuid::now_v7();
    let long_ago = chrono::Utc::now() - chrono::TimeDelta::minutes(10);
    store
        .insert_request(&writ_core::audit::NewRequest {
            id: job,
            received_at: long_ago,
            route: "POST /write_codebase".into(),
            caller: None,
            scope: None,
            idempotency_key: None,
            body_sha256: None,
            workspace: "default".into(),
        })
        .await
        .unwrap();
    store
        .insert_job(&NewJob {
            id: job,
            created_at: long_ago,
            is_async: true,
            files: vec!["a.py".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    store.heartbeat_job(job, JobStatus::Running).await.unwrap();
    store
        .append_job_event(&JobEvent {
            job_id: job,
            seq: 1,
            created_at: long_ago,
            name: "queued".into(),
            data: json!({"type": "queued"}),
        })
        .await
        .unwrap();
    // The heartbeat above is "now"; make it stale as a dead process would leave it.
    drop(store);
    age_heartbeat(&settings.database_url, job).await;

    let app = spawn_with(settings, dirs, backend).await;
    let (_, body) = app.json(&format!("/jobs/{job}")).await;
    assert_eq!(body["status"], "failed", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("interrupted"),
        "{body}"
    );
    // Its answer is stored, for a repeat of its Idempotency-Key: the file failed with the reason.
    assert_eq!(body["response"]["status"], "error", "{body}");
    assert!(
        body["response"]["results"][0]["error"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{body}"
    );
    let all = events(&app, &job.to_string(), None).await;
    assert_eq!(all.last().map(|e| e.1.as_str()), Some("done"));
    assert_eq!(all.last().unwrap().2["status"], "failed");
}

async fn age_heartbeat(database_url: &str, job: uuid::Uuid) {
    if database_url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(database_url).await.unwrap();
        sqlx::query("UPDATE jobs SET heartbeat_at = now() - interval '10 minutes' WHERE id = $1")
            .bind(job)
            .execute(&pool)
            .await
            .unwrap();
    } else {
        let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
        let old = (chrono::Utc::now() - chrono::TimeDelta::minutes(10)).timestamp_micros();
        sqlx::query("UPDATE jobs SET heartbeat_at = ?1 WHERE id = ?2")
            .bind(old)
            .bind(job)
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// Its own module: the batch tests above hold this file's `sqlite` and `postgres` modules.
mod restart {
    use super::*;
    on_both_backends!(backend: a_job_interrupted_by_a_crash_is_failed_with_a_reason_at_the_next_start);
}

/// A batch's progress events reach the database in a few bursts, not a statement each: each
/// statement is a transaction on the server. Rows inserted by one statement share their `xmin`.
/// How the writer gathers a burst (the linger, `done`) is tested in `runner::tests` without
/// timing; this bound holds on a loaded machine too (four to fourteen statements then, three or
/// four idle).
#[tokio::test]
async fn postgres_a_batchs_progress_events_are_stored_in_a_few_statements() {
    let app = writ_tests::spawn_app_with_models(Backend::Postgres).await;
    // The candidates answer 2 ms apart, so their events do not arrive all at once.
    let latency = |ms| Latency::fixed(Duration::from_millis(ms));
    for (i, m) in MODELS.iter().enumerate() {
        app.fake().script(
            m,
            Script::always(Step::code("python", format!("v = {i}")))
                .with_latency(latency(40 + 2 * i as u64)),
        );
    }
    app.fake().script(
        ARBITER,
        Script::always(Step::verdict(1, "shortest")).with_latency(latency(40)),
    );
    let files = ["e/a.py", "e/b.py", "e/c.py", "e/d.py", "e/f.py"];
    let (status, answer) = app.post_write_codebase(&batch(&files)).await;
    assert_eq!(status, 200, "{answer}");
    let job = answer["request_id"].as_str().unwrap().to_string();
    let streamed = events(&app, &job, None).await;
    assert_eq!(streamed.last().unwrap().1, "done");

    let db = sqlx::PgPool::connect(&app.database_url).await.unwrap();
    let (rows, statements): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT xmin::text) FROM job_events WHERE job_id = $1::uuid",
    )
    .bind(&job)
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(rows as usize, streamed.len());
    assert!(rows > 40, "{rows} events");
    // One statement per event would be `rows`; a burst's events share one. The bound leaves room
    // for a loaded machine, whose scheduler splits bursts more often (14 seen for 52 events on a
    // CI run that was also building): half the events per statement still tells bursts from a
    // statement each.
    assert!(
        statements * 2 <= rows,
        "{rows} events were stored by {statements} statements"
    );
}
