//! Speed features end to end: the straggler policy (cut-off calls recorded as `cancelled`) and
//! writ's own overhead reported per batch (`x-writ-overhead-ms`, `writ_batch_overhead_seconds`).
//! How fast writ is gets measured by `writ-bench`, not here.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, MODELS, TestApp, on_both_backends};

fn one_file(name: &str, options: Value) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": name, "code_description": "a function add(a, b) returning the sum"}],
           "options": options})
}

/// Two quick candidates with different code, the third as given, and a decisive arbiter.
fn two_quick_and(app: &TestApp, third: Script) {
    app.fake().script(
        MODELS[0],
        Script::always(Step::code("python", "def add(a, b):\n    return a + b")),
    );
    app.fake().script(
        MODELS[1],
        Script::always(Step::code("python", "def add(a, b):\n    return b + a")),
    );
    app.fake().script(MODELS[2], third);
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the plainest")));
}

async fn a_hanging_straggler_is_cut_off_and_recorded_as_cancelled(app: TestApp) {
    two_quick_and(&app, Script::always(Step::Hang));
    let started = Instant::now();
    let (status, body) = app
        .post_write_codebase(&one_file(
            "calc.py",
            json!({"straggler": {"enough": 2, "extra_ms": 100}}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    // Without the policy the batch would wait for the model deadline (two minutes).
    assert!(started.elapsed() < Duration::from_secs(30));
    let r = &body["results"][0];
    assert_eq!(r["success"], true, "{body}");
    assert_eq!(r["selection"], "arbiter");
    let cut = &r["candidates"][2];
    assert_eq!(cut["model"], MODELS[2]);
    assert_eq!(cut["ok"], false);
    assert_eq!(cut["error_class"], "cancelled");
    assert!(
        cut["error"].as_str().unwrap().contains("straggler policy"),
        "{cut}"
    );
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            r["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["candidates"][2]["error_class"], "cancelled");
}

async fn by_default_every_candidate_is_waited_for(app: TestApp) {
    two_quick_and(
        &app,
        Script::always(Step::code(
            "python",
            "def add(a, b):\n    return sum((a, b))",
        ))
        .with_latency(Latency::fixed(Duration::from_millis(300))),
    );
    let (status, body) = app
        .post_write_codebase(&one_file("calc.py", json!({})))
        .await;
    assert_eq!(status, 200, "{body}");
    let candidates = body["results"][0]["candidates"].as_array().unwrap();
    assert!(candidates.iter().all(|c| c["ok"] == true), "{candidates:?}");
}

async fn a_relative_extra_wait_still_takes_a_straggler_that_arrives_in_time(app: TestApp) {
    // The third answers ~50 ms after the others; 100× the first latency is ample.
    two_quick_and(
        &app,
        Script::always(Step::code(
            "python",
            "def add(a, b):\n    return sum((a, b))",
        ))
        .with_latency(Latency::fixed(Duration::from_millis(50))),
    );
    let (status, body) = app
        .post_write_codebase(&one_file(
            "calc.py",
            json!({"straggler": {"enough": "all_but_slowest", "extra_factor": 100.0}}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["candidates"][2]["ok"], true, "{body}");
}

async fn a_bad_straggler_option_is_refused_naming_the_field_before_any_model_is_called(
    app: TestApp,
) {
    let (status, body) = app
        .post_write_codebase(&one_file(
            "calc.py",
            json!({"straggler": {"enough": 0, "extra_ms": 10}}),
        ))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "options.straggler.enough");
    assert!(app.fake().calls().is_empty());
    assert!(app.files_on_disk().is_empty());
}

async fn the_overhead_header_leaves_out_the_time_spent_waiting_on_models(app: TestApp) {
    let slow = Latency::fixed(Duration::from_millis(500));
    for m in MODELS.iter().chain([&ARBITER]) {
        let step = if *m == ARBITER {
            Step::verdict(1, "the plainest")
        } else {
            Step::code("python", format!("def add(a, b):\n    return a + b  # {m}"))
        };
        app.fake()
            .script(m, Script::always(step).with_latency(slow));
    }
    let (count_before, sum_before) = writ_tests::overhead_histogram(&app).await;
    let send = || {
        app.client
            .post(app.url("/write_codebase"))
            .header("idempotency-key", "overhead-1")
            .json(&one_file("calc.py", json!({})))
            .send()
    };
    let started = Instant::now();
    let resp = send().await.unwrap();
    let overhead_ms: f64 = resp
        .headers()
        .get("x-writ-overhead-ms")
        .expect("the overhead header is sent")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(body["results"][0]["selection"], "arbiter", "{body}");

    // writ always does some work of its own (validation, audit rows, the file, the body).
    assert!(overhead_ms > 0.0, "overhead {overhead_ms} ms");
    // Candidates (500 ms, at once) then the arbiter (500 ms) are upstream time, not writ's: what
    // is left of the elapsed time once the overhead is taken off is that critical path, give or
    // take loopback HTTP on a busy machine. Counting no upstream time makes the overhead too
    // large; counting every call (2 s) instead of the critical path makes it too small (zero).
    let upstream_ms = elapsed_ms - overhead_ms;
    assert!(
        (1000.0..1000.0 + 750.0).contains(&upstream_ms),
        "overhead {overhead_ms} ms of {elapsed_ms} ms leaves {upstream_ms} ms for the models"
    );
    assert!(overhead_ms < 1000.0, "overhead {overhead_ms} ms");

    // The histogram got exactly this batch, with the header's value.
    let (count_after, sum_after) = writ_tests::overhead_histogram(&app).await;
    assert_eq!(count_after - count_before, 1.0);
    let recorded_ms = (sum_after - sum_before) * 1000.0;
    assert!(
        (recorded_ms - overhead_ms).abs() < 0.01,
        "histogram {recorded_ms} ms, header {overhead_ms} ms"
    );

    // A replay calls no model and is not a batch writ ran: the histogram does not move.
    let replay = send().await.unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(writ_tests::overhead_histogram(&app).await.0, count_after);
}

on_both_backends!(with_models:
    a_hanging_straggler_is_cut_off_and_recorded_as_cancelled,
    by_default_every_candidate_is_waited_for,
    a_relative_extra_wait_still_takes_a_straggler_that_arrives_in_time,
    a_bad_straggler_option_is_refused_naming_the_field_before_any_model_is_called,
    the_overhead_header_leaves_out_the_time_spent_waiting_on_models,
);
