//! One admission, in one order for every batch: parse, replay, scope and models, claims,
//! budgets, targets, slot. A retried batch (the same `Idempotency-Key`) is answered what its first try
//! answered before anything is taken or checked: it never holds a second slot, and a budget its
//! first try spent does not refuse it.

use serde_json::{Value, json};
use writ_core::budgets::Budget;
use writ_core::keys::{self, Scope, Scopes};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

/// A server whose one key may run one batch at a time and spend one token a day.
async fn app(backend: Backend) -> (TestApp, String) {
    let fake = writ_fake_upstream::FakeUpstream::start().await.unwrap();
    let base = fake.base_url();
    let list = MODELS.join(",");
    let (settings, dirs) = writ_tests::test_settings_with(
        backend,
        &[
            ("OPENROUTER_BASE_URL", base.as_str()),
            ("CODE_LIST", list.as_str()),
            ("CODE_MODEL", ARBITER),
            ("CODE_GEN_MODEL", writ_tests::FALLBACK),
            ("WRIT_MODEL_BACKOFF_MS", "10"),
            ("WRIT_MAX_BATCHES_PER_KEY", "1"),
        ],
    )
    .await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let key = keys::generate_with_scopes("agent", Scopes::of(&[Scope::Read, Scope::Write]));
    store.create_key(&key.record).await.unwrap();
    let budget = Budget {
        daily_tokens: Some(1),
        ..Budget::default()
    };
    store.set_key_budget(&key.record.id, &budget).await.unwrap();
    drop(store);
    let mut app = writ_tests::spawn_with(settings, dirs, backend).await;
    for (i, m) in MODELS.iter().enumerate() {
        fake.script(
            m,
            Script::always(Step::code(
                "python",
                format!("def add(a, b):\n    return a + b  # {i}\n"),
            ))
            .with_latency(Latency::fixed(std::time::Duration::from_millis(1500))),
        );
    }
    fake.script(ARBITER, Script::always(Step::verdict(1, "the first")));
    app.fake = Some(fake);
    (app, key.key)
}

async fn post(
    app: &TestApp,
    key: &str,
    body: &Value,
    idempotency: Option<&str>,
    prefer_async: bool,
) -> (u16, Value) {
    let mut r = app
        .client
        .post(app.url("/write_codebase"))
        .bearer_auth(key)
        .json(body);
    if let Some(k) = idempotency {
        r = r.header("idempotency-key", k);
    }
    if prefer_async {
        r = r.header("prefer", "respond-async");
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn batch(file: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": file, "code_description": "a function add(a, b) returning the sum"}]})
}

async fn a_retry_replays_before_it_takes_a_slot_or_meets_a_budget_its_first_try_spent(
    backend: Backend,
) {
    let (app, key) = app(backend).await;
    let (status, accepted) = post(&app, &key, &batch("add.py"), Some("k-1"), true).await;
    assert_eq!(status, 202, "{accepted}");
    // The first try still runs and holds the key's one slot: the retry waits for its answer
    // instead of being refused for the slot it would have taken.
    let (status, replayed) = post(&app, &key, &batch("add.py"), Some("k-1"), false).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["request_id"], accepted["job_id"], "{replayed}");
    assert_eq!(replayed["results"][0]["success"], true, "{replayed}");
    // The first try spent the day's one token: a new batch is refused, a retry still replays.
    let (status, refused) = post(&app, &key, &batch("other.py"), None, false).await;
    assert_eq!(status, 402, "{refused}");
    let (status, again) = post(&app, &key, &batch("add.py"), Some("k-1"), false).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["request_id"], accepted["job_id"]);
    // The same key with another body is the caller's mistake, said as such, not a limit.
    let (status, conflict) = post(&app, &key, &batch("else.py"), Some("k-1"), false).await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(
        conflict["error"]["code"], "idempotency_conflict",
        "{conflict}"
    );
    // Nothing ran twice: each model asked at most once. (Which of them were asked depends on
    // which call reserved the day's one token first; the others were refused by the budget.)
    let asked: Vec<usize> = MODELS
        .iter()
        .map(|m| app.fake().calls_for(m).len())
        .collect();
    assert!(
        asked.iter().all(|&n| n <= 1) && asked.iter().sum::<usize>() >= 1,
        "{asked:?}"
    );
    assert!(!app.repo_dir.join("other.py").exists() && !app.repo_dir.join("else.py").exists());
}

writ_tests::on_both_backends!(backend:
    a_retry_replays_before_it_takes_a_slot_or_meets_a_budget_its_first_try_spent,
);
