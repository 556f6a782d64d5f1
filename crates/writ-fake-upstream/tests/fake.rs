//! The fake upstream from the outside: what a client sees over HTTP, the admin routes, and the
//! binary that benchmarks run.

#![expect(
    clippy::unwrap_used,
    reason = "helpers outside #[test] fns fail the test on unexpected errors too"
)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use writ_fake_upstream::{FakeUpstream, Script, Step};

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn chat(model: &str, prompt: &str, stream: bool) -> Value {
    json!({ "model": model, "stream": stream, "messages": [{ "role": "user", "content": prompt }] })
}

async fn post(base_url: &str, body: &Value) -> reqwest::Response {
    http()
        .post(format!("{base_url}/chat/completions"))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_unscripted_model_answers_a_fenced_block_in_the_asked_language() {
    let fake = FakeUpstream::start().await.unwrap();
    let answer: Value = post(
        &fake.base_url(),
        &chat("any/model", "Write src/lib.rs in Rust", false),
    )
    .await
    .json()
    .await
    .unwrap();
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("```rust\n"), "{content}");
    assert_eq!(answer["object"], "chat.completion");
    assert!(answer["id"].as_str().unwrap().starts_with("gen-"));
    assert!(answer["usage"]["cost"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn steps_are_played_in_order_then_the_repeated_step() {
    let fake = FakeUpstream::start().await.unwrap();
    fake.script("m", Script::fail_then(2, 503, Step::text("ok")));
    fake.script(
        "limited",
        Script::always(Step::status_with_retry_after(429, "3")),
    );
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            post(&fake.base_url(), &chat("m", "hi", false))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [503, 503, 200, 200]);
    let limited = post(&fake.base_url(), &chat("limited", "hi", false)).await;
    assert_eq!(limited.headers()["retry-after"], "3");
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["code"], 429);
    assert_eq!(fake.calls_for("m").len(), 4);
    assert_eq!(
        fake.calls()[0].header("Authorization"),
        Some("Bearer sk-test")
    );
}

#[tokio::test]
async fn a_route_answers_the_calls_whose_first_prompt_names_its_file_repairs_included() {
    let fake = FakeUpstream::start().await.unwrap();
    fake.script("m", Script::always(Step::text("plain")));
    fake.route(
        "m",
        "Write the file `a.py`",
        Script::steps([Step::text("a first"), Step::text("a second")]),
    );
    let put = http()
        .put(format!("http://{}/_fake/route", fake.addr()))
        .json(
            &json!({"model": "m", "prompt_contains": "Write the file `b.py`",
                      "script": {"then": {"kind": "text", "content": "b"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    let base = fake.base_url();
    let a = chat(
        "m",
        "Write the file `a.py` (Python). Other files: `b.py`",
        false,
    );
    // A repair keeps the first user message and adds a later one that names another file.
    let a_repair = json!({"model": "m", "messages": [
        {"role": "user", "content": "Write the file `a.py` (Python)."},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "Write the file `b.py` failed"}]});
    let b = chat("m", "Write the file `b.py` (Python).", false);
    let other = chat("m", "Write the file `c.py` (Python).", false);
    let mut got = Vec::new();
    for body in [a, b, a_repair, other] {
        let answer: Value = post(&base, &body).await.json().await.unwrap();
        got.push(
            answer["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(got, ["a first", "b", "a second", "plain"]);
}

#[tokio::test]
async fn a_streamed_answer_has_keep_alives_content_chunks_usage_and_done() {
    let fake = FakeUpstream::start().await.unwrap();
    fake.script(
        "m",
        Script::always(Step::code_in_prose("python", "print('hi')")),
    );
    let response = post(&fake.base_url(), &chat("m", "hi", true)).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    assert!(text.starts_with(": OPENROUTER PROCESSING\n\n"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(content.contains("```python\nprint('hi')\n```"), "{content}");
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop")
    );
    assert!(chunks.last().unwrap()["usage"]["cost"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn scripts_and_calls_are_reachable_over_the_admin_routes() {
    let fake = FakeUpstream::start().await.unwrap();
    let admin = format!("http://{}/_fake", fake.addr());
    let script = json!({ "then": { "kind": "verdict", "choice": 2, "reason": "smaller diff" } });
    let put = http()
        .put(format!("{admin}/script/judge"))
        .json(&script)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);

    let answer: Value = post(&fake.base_url(), &chat("judge", "pick one", false))
        .await
        .json()
        .await
        .unwrap();
    let verdict: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(verdict, json!({ "choice": 2, "reason": "smaller diff" }));

    let calls: Value = http()
        .get(format!("{admin}/calls"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(calls[0]["model"], "judge");
    assert_eq!(calls[0]["body"]["messages"][0]["content"], "pick one");
    assert!(
        !calls[0]["headers"]["authorization"]
            .as_str()
            .unwrap()
            .contains("sk-test"),
        "bearer tokens are masked"
    );

    http()
        .delete(format!("{admin}/calls"))
        .send()
        .await
        .unwrap();
    assert!(fake.calls().is_empty());
}

#[tokio::test]
async fn the_binary_serves_a_script_file_on_the_address_it_prints() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let script = dir.join(format!("fake-upstream-script-{}.json", std::process::id()));
    let file = json!({
        "models": { "flaky": { "steps": [{ "kind": "status", "status": 502 }], "then": { "kind": "text", "content": "ok" } } },
        "default": { "then": { "kind": "text", "content": "default" } }
    });
    std::fs::write(&script, file.to_string()).unwrap();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ-fake-upstream"))
        .args(["--addr", "127.0.0.1:0", "--script"])
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base_url = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        base_url.starts_with("http://127.0.0.1:") && base_url.ends_with("/v1"),
        "{base_url}"
    );

    assert_eq!(
        post(&base_url, &chat("flaky", "hi", false)).await.status(),
        502
    );
    let ok: Value = post(&base_url, &chat("flaky", "hi", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ok["choices"][0]["message"]["content"], "ok");
    let other: Value = post(&base_url, &chat("unknown", "hi", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["choices"][0]["message"]["content"], "default");

    child.kill().await.unwrap();
    std::fs::remove_file(&script).ok();
}
