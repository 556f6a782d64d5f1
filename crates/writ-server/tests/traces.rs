//! Traces over OTLP, as an operator's tracing backend receives them: the real `writ` binary with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at the fake upstream's OTLP receiver. One batch is one
//! trace, rooted at its HTTP request (whose `request_id` is the batch's id in the audit), with a
//! span per file, per model call (GenAI attributes), for the arbiter and for each store commit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
mod support;
use support::free_port;
use writ_fake_upstream::{FakeUpstream, ReceivedSpan, Script, Step};

const MODELS: [&str; 2] = ["alpha/one", "beta/two"];
const ARBITER: &str = "judge/arbiter";

struct Writ(Child);

impl Drop for Writ {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start_writ(
    dir: &std::path::Path,
    fake: &FakeUpstream,
    otlp: Option<&str>,
) -> (Writ, String) {
    let port = free_port();
    let log = dir.join("writ.log");
    std::fs::create_dir_all(dir.join("repo")).unwrap();
    let mut cmd = support::writ_serve(dir, port, &fake.base_url(), &MODELS, ARBITER, &log);
    // Quiet logs: traces do not depend on the log level.
    cmd.env("RUST_LOG", "warn")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    if let Some(endpoint) = otlp {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    let child = cmd.spawn().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    support::wait_until_healthy(&base, &log).await;
    (Writ(child), base)
}

fn script(fake: &FakeUpstream) {
    // Two different candidates per file: the arbiter is asked.
    fake.script(
        MODELS[0],
        Script::always(Step::code("python", "def f():\n    return 1\n")),
    );
    fake.script(
        MODELS[1],
        Script::always(Step::code("python", "def f():\n    return 2\n")),
    );
    fake.script(
        ARBITER,
        Script::always(Step::verdict(1, "the first is right")),
    );
}

async fn batch(base: &str) -> Value {
    let r = support::client_with(Duration::from_secs(30))
        .post(format!("{base}/write_codebase"))
        .json(&json!({"command": "write_codebase", "files": [
            {"filename": "a.py", "code_description": "f returns one"},
            {"filename": "b.py", "code_description": "f returns one"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// The spans of the trace whose root carries `request_id`, once its store commits are in.
async fn trace_of(fake: &FakeUpstream, request_id: &str) -> Vec<ReceivedSpan> {
    let started = Instant::now();
    loop {
        let spans = fake.spans();
        if let Some(root) = spans
            .iter()
            .find(|s| s.attributes.get("request_id").map(String::as_str) == Some(request_id))
        {
            let trace: Vec<ReceivedSpan> = spans
                .iter()
                .filter(|s| s.trace_id == root.trace_id)
                .cloned()
                .collect();
            if trace.iter().filter(|s| s.name == "store_commit").count() >= 2 {
                return trace;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no whole trace for {request_id}: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_batch_is_one_trace_from_its_request_down_to_each_model_call_and_commit() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    script(&fake);
    let (_writ, base) = start_writ(dir.path(), &fake, Some(&fake.otlp_endpoint())).await;

    let answer = batch(&base).await;
    let request_id = answer["request_id"].as_str().unwrap().to_string();
    let trace = trace_of(&fake, &request_id).await;

    let by_id: HashMap<&str, &ReceivedSpan> =
        trace.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let root = trace
        .iter()
        .find(|s| s.parent_span_id.is_empty())
        .expect("a root");
    assert_eq!(root.name, "POST /write_codebase");
    assert_eq!(root.kind, 2, "a server span");
    assert_eq!(root.attributes["request_id"], request_id);
    assert_eq!(root.attributes["http.response.status_code"], "200");
    assert_eq!(root.service.as_deref(), Some("writ"));
    // Every span hangs from the root: the batch's own task stays in the request's trace.
    for span in &trace {
        let mut at = span;
        while !at.parent_span_id.is_empty() {
            at = by_id
                .get(at.parent_span_id.as_str())
                .unwrap_or_else(|| panic!("{} has a parent outside the trace", span.name));
        }
        assert_eq!(at.span_id, root.span_id);
    }

    let files: Vec<&str> = trace
        .iter()
        .filter(|s| s.name == "file")
        .map(|s| s.attributes["path"].as_str())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.contains(&"a.py") && files.contains(&"b.py"));

    let calls: Vec<&ReceivedSpan> = trace
        .iter()
        .filter(|s| {
            s.attributes
                .get("gen_ai.operation.name")
                .map(String::as_str)
                == Some("chat")
        })
        .collect();
    // Two candidates and one arbiter call per file.
    assert_eq!(calls.len(), 6, "{calls:#?}");
    for call in &calls {
        let model = &call.attributes["gen_ai.request.model"];
        assert_eq!(call.name, format!("chat {model}"));
        assert_eq!(call.kind, 3, "a client span");
        assert!(
            call.attributes["gen_ai.usage.input_tokens"]
                .parse::<u64>()
                .unwrap()
                > 0
        );
        assert!(
            call.attributes["gen_ai.usage.output_tokens"]
                .parse::<u64>()
                .unwrap()
                > 0
        );
        assert!(
            call.attributes
                .contains_key("gen_ai.response.finish_reasons")
        );
        // Each call sits under its file.
        let mut at = *call;
        while at.name != "file" {
            at = by_id[at.parent_span_id.as_str()];
        }
    }
    let arbiters: Vec<&ReceivedSpan> = trace.iter().filter(|s| s.name == "arbiter").collect();
    assert_eq!(arbiters.len(), 2);
    for a in arbiters {
        let call = calls
            .iter()
            .find(|c| c.parent_span_id == a.span_id)
            .expect("the arbiter's model call is under it");
        assert_eq!(call.attributes["gen_ai.request.model"], ARBITER);
    }
}

/// The caller's trace and span, as its `traceparent` names them.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_callers_traceparent_makes_the_batch_part_of_its_trace_and_the_provider_joins_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    script(&fake);
    // The second model fails every time: its call spans say why, as an error status.
    fake.script(
        MODELS[1],
        Script::always(Step::status_with_body(
            400,
            r#"{"error":{"message":"no such model here"}}"#,
        )),
    );
    let (_writ, base) = start_writ(dir.path(), &fake, Some(&fake.otlp_endpoint())).await;

    let r = support::client_with(Duration::from_secs(30))
        .post(format!("{base}/write_codebase"))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .header("tracestate", "vendor=opaque")
        .json(&json!({"command": "write_codebase", "files": [
            {"filename": "a.py", "code_description": "f returns one"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let request_id = answer["request_id"].as_str().unwrap().to_string();
    let started = Instant::now();
    let trace = loop {
        let spans = fake.spans();
        let root = spans.iter().find(|s| {
            s.attributes.get("request_id").map(String::as_str) == Some(request_id.as_str())
        });
        if let Some(root) = root
            && spans
                .iter()
                .any(|s| s.trace_id == root.trace_id && s.name == "store_commit")
        {
            break spans
                .into_iter()
                .filter(|s| s.trace_id == CALLER_TRACE)
                .collect::<Vec<_>>();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no trace: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The request's span continues the caller's trace, under the caller's span.
    let root = trace
        .iter()
        .find(|s| s.attributes.get("request_id") == Some(&request_id))
        .unwrap_or_else(|| panic!("the request's span is in the caller's trace: {trace:#?}"));
    assert_eq!(root.parent_span_id, CALLER_SPAN);
    assert_eq!(root.trace_state, "vendor=opaque");
    assert!(!root.attributes.contains_key("traceparent"), "{root:?}");
    // Every span of the batch is in it, with the caller's state.
    assert!(
        trace.iter().filter(|s| s.name == "file").count() == 1,
        "{trace:#?}"
    );
    assert!(trace.iter().all(|s| s.trace_state == "vendor=opaque"));

    // Each call to the provider carries the context, naming its own call span as the parent.
    let calls = fake.calls();
    assert!(!calls.is_empty());
    let call_spans: Vec<&ReceivedSpan> = trace
        .iter()
        .filter(|s| s.attributes.contains_key("gen_ai.request.model"))
        .collect();
    for call in &calls {
        let parent = call
            .header("traceparent")
            .unwrap_or_else(|| panic!("a call without traceparent: {:?}", call.headers));
        let parts: Vec<&str> = parent.split('-').collect();
        assert_eq!(
            (parts[0], parts[1], parts[3]),
            ("00", CALLER_TRACE, "01"),
            "{parent}"
        );
        let span = call_spans
            .iter()
            .find(|s| s.span_id == parts[2])
            .unwrap_or_else(|| panic!("{parent} names no call span"));
        assert_eq!(span.attributes["gen_ai.request.model"], call.model);
        assert_eq!(call.header("tracestate"), Some("vendor=opaque"));
    }

    // The failing model's call spans are errors, with the provider's message.
    let failed: Vec<&&ReceivedSpan> = call_spans
        .iter()
        .filter(|s| s.attributes["gen_ai.request.model"] == MODELS[1])
        .collect();
    assert!(!failed.is_empty());
    for span in failed {
        assert_eq!(span.status_code, 2, "{span:?}");
        assert!(
            span.status_message.contains("no such model here"),
            "{span:?}"
        );
        // What writ logged of it inside the span is one of its events.
        assert!(
            span.events.iter().any(|(name, attributes)| {
                attributes.get("level").map(String::as_str) == Some("WARN")
                    && (name.contains("model call failed") || name.contains("no such model here"))
            }),
            "{span:?}"
        );
    }
    // A call that succeeded is not.
    assert!(
        call_spans
            .iter()
            .filter(|s| s.attributes["gen_ai.request.model"] == MODELS[0])
            .all(|s| s.status_code == 0)
    );
}

#[tokio::test]
async fn a_caller_that_does_not_sample_its_trace_gets_none_exported_and_a_bad_traceparent_starts_a_new_one()
 {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await.unwrap();
    script(&fake);
    let (_writ, base) = start_writ(dir.path(), &fake, Some(&fake.otlp_endpoint())).await;
    let client = support::client_with(Duration::from_secs(30));
    let send = |traceparent: String| {
        client
            .post(format!("{base}/write_codebase"))
            .header("traceparent", traceparent)
            .json(&json!({"command": "write_codebase", "files": [
                {"filename": "a.py", "code_description": "f returns one"}]}))
            .send()
    };
    // Not sampled by the caller: the default sampler follows it; the provider still hears it.
    let unsampled = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let r = send(format!("00-{unsampled}-{CALLER_SPAN}-00"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(fake.calls().iter().all(|c| {
        c.header("traceparent")
            .is_some_and(|p| p.starts_with(&format!("00-{unsampled}-")) && p.ends_with("-00"))
    }));
    // Malformed: a trace of writ's own, exported as ever.
    let r = send("00-not-a-trace-01".to_owned()).await.unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let trace = trace_of(&fake, answer["request_id"].as_str().unwrap()).await;
    let root = trace
        .iter()
        .find(|s| s.parent_span_id.is_empty())
        .expect("a root of its own");
    assert_ne!(root.trace_id, unsampled);
    assert!(fake.spans().iter().all(|s| s.trace_id != unsampled));
}
