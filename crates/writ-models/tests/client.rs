//! The OpenRouter client against the fake upstream, over real HTTP on loopback.
//!
//! Durations are scaled down (tens of milliseconds) and timing assertions are lower bounds
//! (the client waited at least this long) with generous upper bounds, so a busy machine slows
//! these tests down without failing them.

#![expect(
    clippy::unwrap_used,
    reason = "helpers outside #[test] fns fail the test on unexpected errors too"
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use secrecy::SecretString;
use writ_core::model::{ChatMessage, ChatRequest, ErrorClass, ModelClient, ModelError};
use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};
use writ_models::{BreakerPolicy, ClientConfig, OpenRouterClient, RetryPolicy};

const KEY: &str = "sk-or-v1-test-5ecret-do-not-print-0123456789";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client tuned for tests: small waits, a high breaker threshold so that only the breaker
/// tests see it open.
fn config(fake: &FakeUpstream, stream: bool) -> ClientConfig {
    ClientConfig {
        base_url: fake.base_url(),
        api_key: Some(SecretString::from(KEY)),
        referer: Some("https://writ.example".to_owned()),
        title: Some("writ tests".to_owned()),
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: ms(10),
            max_backoff: ms(40),
            total_deadline: Duration::from_secs(20),
        },
        call_timeout: Duration::from_secs(10),
        first_byte_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        stream,
        breaker: BreakerPolicy {
            failure_threshold: 1000,
            cool_down: Duration::from_secs(1),
        },
        ..ClientConfig::default()
    }
}

async fn start() -> FakeUpstream {
    FakeUpstream::start().await.unwrap()
}

fn client(cfg: ClientConfig) -> OpenRouterClient {
    OpenRouterClient::new(cfg).unwrap()
}

fn ask(model: &str) -> ChatRequest {
    ChatRequest {
        model: model.to_owned(),
        messages: vec![
            ChatMessage::system("You write code."),
            ChatMessage::user("Write a Python function that adds two ints."),
        ],
        temperature: Some(0.2),
        max_tokens: Some(512),
        ..ChatRequest::default()
    }
}

async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(ms(10)).await;
    }
}

/// Time between the arrival of call `i` and call `i + 1` at the fake.
fn gaps(fake: &FakeUpstream, model: &str) -> Vec<Duration> {
    let calls = fake.calls_for(model);
    calls
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at))
        .collect()
}

#[tokio::test]
async fn each_http_status_is_classified_and_retried_only_when_retryable() {
    let fake = start().await;
    let table = [
        (400, ErrorClass::BadRequest, false),
        (401, ErrorClass::Unauthorized, false),
        (402, ErrorClass::PaymentRequired, false),
        (403, ErrorClass::Forbidden, false),
        (404, ErrorClass::NotFound, false),
        (408, ErrorClass::RequestTimeout, true),
        (429, ErrorClass::RateLimited, true),
        (500, ErrorClass::ServerError, true),
        (502, ErrorClass::ServerError, true),
        (503, ErrorClass::ServerError, true),
        (504, ErrorClass::ServerError, true),
    ];
    for stream in [false, true] {
        let client = client(config(&fake, stream));
        for (status, class, retried) in table {
            let model = format!("status-{status}-stream-{stream}");
            fake.script(&model, Script::always(Step::status(status)));
            let err = client.chat(ask(&model)).await.unwrap_err();
            assert_eq!(err.class, class, "HTTP {status} (stream: {stream})");
            assert_eq!(err.status, Some(status));
            assert!(
                !err.message.is_empty() && err.message != "(empty body)",
                "the provider's message is kept: {err}"
            );
            let expected_calls = if retried { 2 } else { 1 };
            assert_eq!(
                fake.calls_for(&model).len(),
                expected_calls,
                "HTTP {status} (stream: {stream})"
            );
            assert_eq!(err.attempts, expected_calls as u32);
        }
    }
}

#[tokio::test]
async fn a_401_is_permanent_and_not_retried() {
    let fake = start().await;
    fake.script("m", Script::always(Step::status(401)));
    let client = client(ClientConfig {
        retry: RetryPolicy {
            max_attempts: 5,
            ..config(&fake, true).retry
        },
        ..config(&fake, true)
    });
    let err = client.chat(ask("m")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Unauthorized);
    assert!(err.message.contains("No auth credentials found"), "{err}");
    assert_eq!(fake.calls().len(), 1);
    let readiness = client.readiness();
    assert!(!readiness.ready);
    assert!(
        readiness.detail.contains("rejected the API key") && readiness.detail.contains("401"),
        "{readiness:?}"
    );
}

#[tokio::test]
async fn readiness_recovers_after_a_later_success() {
    let fake = start().await;
    fake.script(
        "m",
        Script::steps([Step::status(402)]).then(Step::text("ok")),
    );
    let client = client(config(&fake, false));
    assert!(client.readiness().ready);
    client.chat(ask("m")).await.unwrap_err();
    let readiness = client.readiness();
    assert!(
        !readiness.ready && readiness.detail.contains("insufficient credits"),
        "{readiness:?}"
    );
    client.chat(ask("m")).await.unwrap();
    assert!(client.readiness().ready);
}

#[tokio::test]
async fn a_402_without_retry_after_is_permanent_but_with_retry_after_is_retried_after_the_wait() {
    let fake = start().await;
    fake.script("broke", Script::always(Step::status(402)));
    fake.script(
        "budget",
        Script::steps([Step::status_with_retry_after(402, "1")]).then(Step::text("ok")),
    );
    let client = client(config(&fake, false));

    let err = client.chat(ask("broke")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::PaymentRequired);
    assert_eq!(fake.calls_for("broke").len(), 1);

    let answer = client.chat(ask("budget")).await.unwrap();
    assert_eq!((answer.content.as_str(), answer.attempts), ("ok", 2));
    assert!(gaps(&fake, "budget")[0] >= Duration::from_secs(1));
}

#[tokio::test]
async fn retry_after_seconds_is_honoured() {
    let fake = start().await;
    fake.script(
        "m",
        Script::steps([Step::status_with_retry_after(429, "1")]).then(Step::text("ok")),
    );
    let client = client(config(&fake, true));
    let answer = client.chat(ask("m")).await.unwrap();
    assert_eq!(answer.attempts, 2);
    let gap = gaps(&fake, "m")[0];
    assert!(
        gap >= Duration::from_secs(1),
        "retried after {gap:?}, before the asked 1 s"
    );
    assert!(gap < Duration::from_secs(5), "retried only after {gap:?}");
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let fake = start().await;
    let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
    fake.script(
        "m",
        Script::steps([Step::status_with_retry_after(503, at)]).then(Step::text("ok")),
    );
    let client = client(config(&fake, false));
    client.chat(ask("m")).await.unwrap();
    // HTTP dates have whole seconds, so "now + 2 s" is between 1 and 2 s away.
    let gap = gaps(&fake, "m")[0];
    assert!(gap >= ms(950), "retried after {gap:?}");
    assert!(gap < Duration::from_secs(5), "retried only after {gap:?}");
}

#[tokio::test]
async fn a_retry_after_beyond_the_deadline_gives_up_at_once() {
    let fake = start().await;
    fake.script(
        "m",
        Script::always(Step::status_with_retry_after(429, "60")),
    );
    let mut cfg = config(&fake, false);
    cfg.retry.total_deadline = Duration::from_secs(3);
    let started = Instant::now();
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?} for a retry that could not happen",
        started.elapsed()
    );
    assert_eq!(err.class, ErrorClass::DeadlineExceeded);
    assert_eq!(err.status, Some(429));
    assert!(err.message.contains("rate_limited"), "{err}");
    assert_eq!(fake.calls().len(), 1);
}

#[tokio::test]
async fn retryable_errors_are_retried_with_bounded_backoff_until_attempts_run_out() {
    let fake = start().await;
    fake.script("flaky", Script::fail_then(3, 503, Step::text("ok")));
    fake.script("down", Script::always(Step::status(500)));
    let mut cfg = config(&fake, true);
    cfg.retry = RetryPolicy {
        max_attempts: 4,
        initial_backoff: ms(50),
        max_backoff: ms(100),
        total_deadline: Duration::from_secs(20),
    };
    let client = client(cfg);

    let answer = client.chat(ask("flaky")).await.unwrap();
    assert_eq!((answer.content.as_str(), answer.attempts), ("ok", 4));
    // Full jitter: each wait is somewhere in [0, cap]; the caps are 50, 100, 100 ms.
    for (gap, cap) in gaps(&fake, "flaky").into_iter().zip([50, 100, 100]) {
        assert!(
            gap < ms(cap + 1000),
            "a wait of {gap:?} is far beyond its {cap} ms cap"
        );
    }

    let err = client.chat(ask("down")).await.unwrap_err();
    assert_eq!((err.class, err.attempts), (ErrorClass::ServerError, 4));
    assert_eq!(fake.calls_for("down").len(), 4);
}

#[tokio::test]
async fn the_total_deadline_bounds_retries() {
    let fake = start().await;
    fake.script(
        "m",
        Script::always(Step::status(500)).with_latency(Latency::fixed(ms(30))),
    );
    let mut cfg = config(&fake, false);
    cfg.retry = RetryPolicy {
        max_attempts: 1000,
        initial_backoff: ms(20),
        max_backoff: ms(50),
        total_deadline: ms(500),
    };
    let started = Instant::now();
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= ms(400),
        "gave up after {took:?}, well before the deadline"
    );
    assert!(
        took < ms(1500),
        "the 500 ms deadline let the call run {took:?}"
    );
    assert_eq!(err.class, ErrorClass::DeadlineExceeded);
    assert!(
        err.message.contains("server_error"),
        "the last error is kept: {err}"
    );
    assert!(fake.calls().len() >= 3, "it did retry inside the deadline");
}

#[tokio::test]
async fn the_total_deadline_cuts_a_hung_attempt() {
    let fake = start().await;
    fake.script("m", Script::always(Step::Hang));
    let mut cfg = config(&fake, false);
    cfg.retry.total_deadline = ms(300);
    let started = Instant::now();
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.class, ErrorClass::DeadlineExceeded);
}

#[tokio::test]
async fn a_hung_upstream_hits_the_call_timeout_and_is_retried() {
    let fake = start().await;
    fake.script("m", Script::always(Step::Hang));
    let mut cfg = config(&fake, false);
    cfg.call_timeout = ms(200);
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout);
    assert!(err.message.contains("call timeout"), "{err}");
    assert_eq!(fake.calls().len(), 2);
}

#[tokio::test]
async fn the_first_byte_timeout_catches_a_silent_stream() {
    let fake = start().await;
    fake.script("m", Script::always(Step::Hang));
    let mut cfg = config(&fake, true);
    cfg.first_byte_timeout = ms(200);
    let started = Instant::now();
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the 10 s call timeout fired instead"
    );
    assert_eq!(err.class, ErrorClass::Timeout);
    assert!(err.message.contains("first byte"), "{err}");
}

#[tokio::test]
async fn the_idle_timeout_catches_a_stream_that_stalls_halfway() {
    let fake = start().await;
    fake.script(
        "m",
        Script::steps([Step::Stall { after_chunks: 2 }]).then(Step::text("ok")),
    );
    let mut cfg = config(&fake, true);
    cfg.idle_timeout = ms(200);
    let started = Instant::now();
    let answer = client(cfg).chat(ask("m")).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the 10 s call timeout fired instead"
    );
    assert_eq!((answer.content.as_str(), answer.attempts), ("ok", 2));
}

#[tokio::test]
async fn the_breaker_opens_after_consecutive_failures_and_recovers_after_cool_down() {
    let fake = start().await;
    fake.script("m", Script::fail_then(3, 500, Step::text("back")));
    let mut cfg = config(&fake, false);
    cfg.retry.max_attempts = 1;
    cfg.breaker = BreakerPolicy {
        failure_threshold: 3,
        cool_down: Duration::from_secs(60),
    };
    let client = client(cfg);

    for _ in 0..3 {
        assert_eq!(
            client.chat(ask("m")).await.unwrap_err().class,
            ErrorClass::ServerError
        );
    }
    let started = Instant::now();
    let err = client.chat(ask("m")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::CircuitOpen);
    assert!(err.message.contains("3 consecutive failures"), "{err}");
    assert!(started.elapsed() < ms(200), "an open breaker fails fast");
    assert_eq!(
        fake.calls().len(),
        3,
        "an open breaker sends nothing upstream"
    );
    assert!(
        client.chat(ask("other")).await.is_ok(),
        "other models are not affected"
    );

    // Just before the cool-down ends the model is still skipped; just after, it is probed. The
    // clock is moved, not waited for: paused only for the jump, so the HTTP calls around it run
    // on real time.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(59)).await;
    tokio::time::resume();
    assert_eq!(
        client.chat(ask("m")).await.unwrap_err().class,
        ErrorClass::CircuitOpen,
        "still open before the cool-down ends"
    );
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(2)).await;
    tokio::time::resume();
    assert_eq!(
        client.chat(ask("m")).await.unwrap().content,
        "back",
        "the probe after the cool-down goes through"
    );
    assert!(
        client.chat(ask("m")).await.is_ok(),
        "and the breaker is closed again"
    );
    assert_eq!(fake.calls_for("m").len(), 5);
}

#[tokio::test]
async fn the_breaker_stops_the_retries_of_a_call_once_it_opens() {
    let fake = start().await;
    fake.script("m", Script::always(Step::status(503)));
    let mut cfg = config(&fake, false);
    cfg.retry.max_attempts = 10;
    cfg.breaker = BreakerPolicy {
        failure_threshold: 2,
        cool_down: Duration::from_secs(60),
    };
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::CircuitOpen);
    assert_eq!(fake.calls().len(), 2);
}

#[tokio::test]
async fn dropping_the_call_cancels_the_upstream_request() {
    let fake = start().await;
    fake.script("hang", Script::always(Step::Hang));
    fake.script("stall", Script::always(Step::Stall { after_chunks: 1 }));
    for (model, stream) in [("hang", false), ("stall", true)] {
        let client = client(config(&fake, stream));
        let call = client.chat(ask(model));
        let outcome = tokio::time::timeout(ms(300), call).await;
        assert!(
            outcome.is_err(),
            "the call should still be running when dropped"
        );
        wait_until(
            "the upstream sees the request go away",
            Duration::from_secs(3),
            || fake.in_flight_for(model) == 0,
        )
        .await;
        // "Nothing more arrives" has no event to wait for: give a retry (10-40 ms backoff here)
        // several times its delay to show up.
        tokio::time::sleep(ms(200)).await;
        assert_eq!(
            fake.calls_for(model).len(),
            1,
            "nothing was retried after the drop"
        );
    }
}

#[tokio::test]
async fn sse_keep_alive_comments_are_ignored() {
    let fake = start().await;
    let text = "A long answer that is streamed in many small chunks, with keep-alive comments between them.";
    fake.script("m", Script::always(Step::text(text)).with_trickle(ms(2)));
    let answer = client(config(&fake, true)).chat(ask("m")).await.unwrap();
    assert_eq!(answer.content, text);
    assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn a_mid_stream_error_is_retryable() {
    let fake = start().await;
    fake.script(
        "recovers",
        Script::steps([Step::stream_mid_error(2, "upstream provider disconnected")])
            .then(Step::text("whole")),
    );
    fake.script(
        "broken",
        Script::always(Step::stream_mid_error(1, "upstream provider disconnected")),
    );
    let client = client(config(&fake, true));

    let answer = client.chat(ask("recovers")).await.unwrap();
    assert_eq!(
        (answer.content.as_str(), answer.attempts),
        ("whole", 2),
        "the partial answer is not kept"
    );

    let err = client.chat(ask("broken")).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::MidStream);
    assert!(
        err.message.contains("upstream provider disconnected"),
        "{err}"
    );
    assert_eq!(fake.calls_for("broken").len(), 2);
}

#[tokio::test]
async fn an_error_inside_a_200_is_an_error() {
    let fake = start().await;
    fake.script(
        "busy",
        Script::always(Step::error_in_200(502, "Provider returned error")),
    );
    fake.script(
        "badkey",
        Script::always(Step::error_in_200(401, "User not found.")),
    );
    for stream in [false, true] {
        fake.clear_calls();
        let client = client(config(&fake, stream));
        let err = client.chat(ask("busy")).await.unwrap_err();
        assert_eq!(
            (err.class, err.status),
            (ErrorClass::ServerError, Some(502)),
            "stream: {stream}"
        );
        assert!(err.message.contains("Provider returned error"), "{err}");
        assert_eq!(fake.calls_for("busy").len(), 2, "retryable code, retried");

        let err = client.chat(ask("badkey")).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Unauthorized, "stream: {stream}");
        assert_eq!(
            fake.calls_for("badkey").len(),
            1,
            "permanent code, not retried"
        );
        assert!(!client.readiness().ready);
    }
}

#[tokio::test]
async fn malformed_truncated_and_empty_bodies_are_retryable_bad_responses() {
    let fake = start().await;
    fake.script("malformed", Script::always(Step::Malformed));
    fake.script("truncated", Script::always(Step::Truncated));
    fake.script("empty", Script::always(Step::Empty));
    for stream in [false, true] {
        fake.clear_calls();
        let client = client(config(&fake, stream));
        for model in ["malformed", "truncated", "empty"] {
            let err = client.chat(ask(model)).await.unwrap_err();
            assert_eq!(
                err.class,
                ErrorClass::BadResponse,
                "{model} (stream: {stream}): {err}"
            );
            assert_eq!(
                fake.calls_for(model).len(),
                2,
                "{model} (stream: {stream}) is retried"
            );
        }
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_retryable_network_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let cfg = ClientConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: ms(10),
            max_backoff: ms(10),
            total_deadline: Duration::from_secs(10),
        },
        ..ClientConfig::default()
    };
    let err = client(cfg).chat(ask("m")).await.unwrap_err();
    assert_eq!((err.class, err.attempts), (ErrorClass::Network, 2), "{err}");
}

#[tokio::test]
async fn concurrency_per_model_is_bounded() {
    let fake = start().await;
    fake.script(
        "m",
        Script::always(Step::text("ok")).with_latency(Latency::fixed(ms(80))),
    );
    let mut cfg = config(&fake, true);
    cfg.max_concurrent_per_model = 2;
    let client = client(cfg);
    let results = futures::future::join_all((0..8).map(|_| client.chat(ask("m")))).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        fake.peak_in_flight_for("m"),
        2,
        "at most 2 at once, and the limit is used"
    );
}

#[tokio::test]
async fn concurrency_in_total_is_bounded() {
    let fake = start().await;
    for model in ["a", "b", "c"] {
        fake.script(
            model,
            Script::always(Step::text("ok")).with_latency(Latency::fixed(ms(80))),
        );
    }
    let mut cfg = config(&fake, false);
    cfg.max_concurrent_per_model = 4;
    cfg.max_concurrent_total = 3;
    let client = client(cfg);
    let calls = ["a", "b", "c"]
        .iter()
        .flat_map(|m| std::iter::repeat_n(*m, 3))
        .map(|m| client.chat(ask(m)));
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(fake.peak_in_flight(), 3);
}

#[tokio::test]
async fn usage_cost_generation_id_and_images_are_parsed() {
    let fake = start().await;
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    fake.script(
        "painter",
        Script::always(Step::Image {
            data_url: png.to_owned(),
            content: "Here it is.".to_owned(),
        }),
    );
    for stream in [false, true] {
        let answer = client(config(&fake, stream))
            .chat(ask("painter"))
            .await
            .unwrap();
        assert_eq!(answer.content, "Here it is.", "stream: {stream}");
        assert_eq!(answer.images, vec![png.to_owned()], "stream: {stream}");
        assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
        assert!(
            answer
                .generation_id
                .as_deref()
                .is_some_and(|id| id.starts_with("gen-")),
            "{:?}",
            answer.generation_id
        );
        assert!(answer.usage.prompt_tokens.is_some_and(|n| n > 0));
        assert!(answer.usage.completion_tokens.is_some_and(|n| n > 0));
        assert!(answer.usage.cost.is_some_and(|c| c > 0.0));
        assert_eq!(answer.attempts, 1);
        assert!(answer.latency > Duration::ZERO);
    }
}

#[tokio::test]
async fn time_to_first_token_is_measured_when_streaming() {
    let fake = start().await;
    fake.script(
        "m",
        Script::always(Step::text("x".repeat(200)))
            .with_latency(Latency::fixed(ms(50)))
            .with_trickle(ms(10)),
    );
    let answer = client(config(&fake, true)).chat(ask("m")).await.unwrap();
    let ttft = answer.time_to_first_token.unwrap();
    assert!(
        ttft >= ms(50) && ttft < answer.latency,
        "ttft {ttft:?}, latency {:?}",
        answer.latency
    );
    let answer = client(config(&fake, false)).chat(ask("m")).await.unwrap();
    assert_eq!(answer.time_to_first_token, None);
}

#[tokio::test]
async fn attribution_headers_the_bearer_key_and_the_request_fields_are_sent() {
    let fake = start().await;
    let client = client(config(&fake, true));
    let req = ChatRequest {
        seed: Some(7),
        response_format: Some(
            serde_json::json!({"type": "json_schema", "json_schema": {"name": "verdict"}}),
        ),
        modalities: Some(vec!["image".to_owned(), "text".to_owned()]),
        ..ask("m")
    };
    client.chat(req).await.unwrap();
    let call = &fake.calls()[0];
    assert_eq!(
        call.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(call.header("http-referer"), Some("https://writ.example"));
    assert_eq!(call.header("x-title"), Some("writ tests"));
    let body = &call.body;
    assert_eq!(body["model"], "m");
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(body["max_tokens"], 512);
    assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);
    assert_eq!(body["seed"], 7);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["modalities"], serde_json::json!(["image", "text"]));
    assert_eq!(body["stream"], true);
}

#[tokio::test]
async fn any_openai_compatible_base_url_works_without_a_key() {
    let fake = start().await;
    let cfg = ClientConfig {
        base_url: format!("{}/", fake.base_url()),
        provider_name: "local".to_owned(),
        ..ClientConfig::default()
    };
    let client = client(cfg);
    let answer = client.chat(ask("llama")).await.unwrap();
    assert!(
        answer.content.starts_with("```python"),
        "{}",
        answer.content
    );
    assert_eq!(fake.calls()[0].header("authorization"), None);
    assert_eq!(client.readiness().name, "local");
    assert!(client.readiness().ready);
}

#[tokio::test]
async fn openrouter_without_a_key_is_not_ready() {
    let client = client(ClientConfig::default());
    let readiness = client.readiness();
    assert!(
        !readiness.ready && readiness.detail.contains("no API key"),
        "{readiness:?}"
    );
}

/// Collects everything the tracing subscriber writes.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_api_key_never_appears_in_logs_or_errors() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = start().await;
    // Some providers echo the key back ("Incorrect API key provided: sk-...").
    let echo =
        format!(r#"{{"error":{{"code":401,"message":"Incorrect API key provided: {KEY}"}}}}"#);
    fake.script("echo", Script::always(Step::status_with_body(401, echo)));
    fake.script("flaky", Script::fail_then(1, 503, Step::text("ok")));
    fake.script("hang", Script::always(Step::Hang));
    let cfg = config(&fake, true);
    let cfg_debug = format!("{cfg:?}");
    let client = client(ClientConfig {
        first_byte_timeout: ms(100),
        ..cfg
    });

    let mut errors: Vec<ModelError> = Vec::new();
    errors.push(client.chat(ask("echo")).await.unwrap_err());
    client.chat(ask("flaky")).await.unwrap();
    errors.push(client.chat(ask("hang")).await.unwrap_err());

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("retrying model call") && logs.contains("model call failed"),
        "the logs were captured:\n{logs}"
    );
    assert!(!logs.contains(KEY), "the key is in the logs:\n{logs}");
    for err in &errors {
        assert!(
            !format!("{err:?}").contains(KEY) && !err.to_string().contains(KEY),
            "{err:?}"
        );
    }
    assert!(
        errors[0]
            .message
            .contains("Incorrect API key provided: [REDACTED]"),
        "{}",
        errors[0]
    );
    assert!(!cfg_debug.contains(KEY), "{cfg_debug}");
    assert!(!format!("{client:?}").contains(KEY));
    assert!(
        !client.readiness().detail.contains(KEY),
        "{:?}",
        client.readiness()
    );
}

/// A `metrics` recorder that keeps counters, gauges and histogram samples by name and labels.
#[derive(Default)]
struct TestRecorder {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn key_text(key: &metrics::Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl metrics::Recorder for TestRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(
            self.counters
                .lock()
                .unwrap()
                .entry(key_text(key))
                .or_default()
                .clone(),
        )
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(
            self.gauges
                .lock()
                .unwrap()
                .entry(key_text(key))
                .or_default()
                .clone(),
        )
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::from_arc(
            self.histograms
                .lock()
                .unwrap()
                .entry(key_text(key))
                .or_default()
                .clone(),
        )
    }
}

impl TestRecorder {
    fn counter(&self, key: &str) -> u64 {
        self.counters
            .lock()
            .unwrap()
            .get(key)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
    fn gauge(&self, key: &str) -> f64 {
        self.gauges
            .lock()
            .unwrap()
            .get(key)
            .map_or(0.0, |g| f64::from_bits(g.load(Ordering::Relaxed)))
    }
    fn samples(&self, key: &str) -> usize {
        self.histograms
            .lock()
            .unwrap()
            .get(key)
            .map_or(0, |h| h.0.lock().unwrap().len())
    }
}

#[test]
fn metrics_count_calls_outcomes_retries_latency_ttft_tokens_and_cost() {
    let recorder = TestRecorder::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let fake = start().await;
            fake.script("m", Script::fail_then(1, 429, Step::text("ok")));
            fake.script("bad", Script::always(Step::status(400)));
            let client = client(config(&fake, true));
            client.chat(ask("m")).await.unwrap();
            client.chat(ask("m")).await.unwrap();
            client.chat(ask("bad")).await.unwrap_err();
        });
    });
    assert_eq!(
        recorder.counter("writ_model_calls_total{model=m,outcome=ok}"),
        2
    );
    assert_eq!(
        recorder.counter("writ_model_calls_total{model=bad,outcome=bad_request}"),
        1
    );
    assert_eq!(
        recorder.counter("writ_model_attempt_failures_total{class=rate_limited,model=m}"),
        1
    );
    assert_eq!(recorder.counter("writ_model_retries_total{model=m}"), 1);
    assert_eq!(recorder.counter("writ_model_retries_total{model=bad}"), 0);
    assert_eq!(
        recorder.samples("writ_model_latency_seconds{model=m,outcome=ok}"),
        2
    );
    assert_eq!(recorder.samples("writ_model_ttft_seconds{model=m}"), 2);
    assert!(recorder.counter("writ_model_tokens_total{kind=prompt,model=m}") > 0);
    assert!(recorder.counter("writ_model_tokens_total{kind=completion,model=m}") > 0);
    assert!(recorder.gauge("writ_model_cost_total{model=m}") > 0.0);
}
