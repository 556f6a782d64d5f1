//! Budgets per key across two servers on one PostgreSQL database: a batch that starts past its
//! key's budget is refused before any model is called, on whichever server it reaches; the batch
//! that crossed the budget still wrote its file, and every call it made is counted.

use serde_json::{Value, json};
use writ_core::keys::{self, Scope, Scopes};
use writ_fake_upstream::{Script, Step};
use writ_tests::{Backend, MODELS, TestApp};

fn one_file(name: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": name, "code_description": "a function add(a, b) returning the sum"}]})
}

async fn post_batch(app: &TestApp, key: &str, body: &Value) -> (u16, Value) {
    let r = app
        .client
        .post(app.url("/write_codebase"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn get(app: &TestApp, key: &str, path: &str) -> (u16, Value) {
    let r = app
        .client
        .get(app.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_key_past_its_budget_is_refused_before_any_model_call_on_every_replica() {
    // Keys are issued before the servers start, so that both start with auth on.
    let fake = writ_fake_upstream::FakeUpstream::start().await.unwrap();
    // Three different answers: the arbiter is asked, and what it costs is the key's spend too.
    for (i, m) in MODELS.iter().enumerate() {
        fake.script(
            m,
            Script::always(Step::code(
                "python",
                format!("def add(a, b):\n    total = a + b  # {i}\n    return total"),
            )),
        );
    }
    fake.script(
        writ_tests::ARBITER,
        Script::always(Step::verdict(2, "the second")),
    );
    let base = fake.base_url();
    let list = MODELS.join(",");
    let models = [
        ("OPENROUTER_BASE_URL", base.as_str()),
        ("CODE_LIST", list.as_str()),
        ("CODE_MODEL", writ_tests::ARBITER),
        ("CODE_GEN_MODEL", writ_tests::FALLBACK),
    ];
    let (settings, dirs) = writ_tests::test_settings_with(Backend::Postgres, &models).await;
    let url = settings.database_url.to_string();
    let store = writ_store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let key = keys::generate_with_scopes("ci", Scopes::of(&[Scope::Read, Scope::Write]));
    store.create_key(&key.record).await.unwrap();
    let admin = keys::generate_with_scopes("ops", Scopes::of(&[Scope::Read, Scope::Admin]));
    store.create_key(&admin.record).await.unwrap();
    let other = keys::generate_with_scopes("other", Scopes::of(&[Scope::Read]));
    store.create_key(&other.record).await.unwrap();
    let first = writ_tests::spawn_with(settings, dirs, Backend::Postgres).await;
    let mut shared = models.to_vec();
    shared.push(("DATABASE_URL", url.as_str()));
    let (settings, dirs) = writ_tests::test_settings_with(Backend::Postgres, &shared).await;
    let second = writ_tests::spawn_with(settings, dirs, Backend::Postgres).await;
    let id = key.record.id.clone();

    // One token a day: the first batch starts below it and its first calls cross it; the calls
    // asked after (the arbiter) are refused, and the file is still written.
    let r = first
        .client
        .put(first.url(&format!("/keys/{id}/budget")))
        .bearer_auth(&admin.key)
        .json(&json!({"daily_tokens": 1, "monthly_cost": 100.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, body) = post_batch(&first, &key.key, &one_file("a.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["success"], true, "{body}");
    assert!(first.repo_dir.join("a.py").exists());

    let (status, spend) = get(&second, &key.key, &format!("/keys/{id}/spend")).await;
    assert_eq!(status, 200, "{spend}");
    let day = &spend["windows"][0];
    assert_eq!(day["period"], "day");
    assert_eq!(day["tokens_limit"], 1);
    // A file's `calls` is absent when nothing but candidates was asked: under load the budget's
    // one token may refuse a candidate, and one viable candidate needs no arbiter.
    let tokens = |calls: &Value| -> u64 {
        calls
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| {
                c["prompt_tokens"].as_u64().unwrap_or(0)
                    + c["completion_tokens"].as_u64().unwrap_or(0)
            })
            .sum()
    };
    let file = &body["results"][0];
    assert_ne!(file["selection"], "arbiter", "{body}");
    let recorded = tokens(&file["candidates"]) + tokens(&file["calls"]);
    assert!(recorded > 1, "{body}");
    assert_eq!(day["tokens"].as_u64().unwrap(), recorded, "{spend}");
    assert_eq!(
        day["calls"].as_u64().unwrap() as usize,
        fake.calls().len(),
        "every call made is counted, none refused is: {spend}"
    );

    // The next batch, on the other server, is refused without a model call.
    let calls_before = fake.calls().len();
    let (status, refused) = post_batch(&second, &key.key, &one_file("b.py")).await;
    assert_eq!(status, 402, "{refused}");
    assert_eq!(refused["error"]["code"], "budget_exceeded");
    assert_eq!(refused["error"]["field"], "daily_tokens");
    assert_eq!(refused["error"]["details"]["limit"], 1.0);
    assert_eq!(refused["error"]["details"]["spent"], recorded as f64);
    assert!(refused["error"]["details"]["resets_at"].is_string());
    assert_eq!(fake.calls().len(), calls_before);
    assert!(!second.repo_dir.join("b.py").exists());

    // Another key cannot read this key's spend; the spend is on /metrics.
    let (status, _) = get(&first, &other.key, &format!("/keys/{id}/spend")).await;
    assert_eq!(status, 404);
    let metrics = first
        .client
        .get(first.url("/metrics"))
        .bearer_auth(&admin.key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        writ_tests::metric(
            &metrics,
            "writ_key_spend_tokens",
            &[("key", &id), ("period", "day")]
        ),
        recorded as f64
    );

    // Lifting the budget lets the key run again.
    let r = second
        .client
        .put(second.url(&format!("/keys/{id}/budget")))
        .bearer_auth(&admin.key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, body) = post_batch(&second, &key.key, &one_file("b.py")).await;
    assert_eq!(status, 200, "{body}");
    second.stop().await;
    first.stop().await;
}
