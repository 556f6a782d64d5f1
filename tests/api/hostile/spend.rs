//! Every model call counts against its key's and its workspace's budgets when it is made,
//! whatever becomes of the batch: a dry run, files that fail, calls cut off. Counters fed only by
//! what was written let a key with a budget of one token spend without limit.

use serde_json::{Value, json};
use writ_core::budgets::Budget;
use writ_core::keys::{self, Scope, Scopes};
use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

/// A server over `fake` whose one key (returned with its id) has `key_budget`, and whose
/// `default` workspace has `workspace_budget`.
async fn app_with_budgets(
    backend: Backend,
    fake: &FakeUpstream,
    key_budget: Budget,
    workspace_budget: Budget,
) -> (TestApp, String, String) {
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
            ("WRIT_FALLBACK_BACKOFF_MS", "10"),
            ("WRIT_MAX_BATCHES_PER_KEY", "16"),
        ],
    )
    .await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let key = keys::generate_with_scopes(
        "agent",
        Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]),
    );
    store.create_key(&key.record).await.unwrap();
    store
        .set_key_budget(&key.record.id, &key_budget)
        .await
        .unwrap();
    store
        .set_workspace_budget("default", &workspace_budget)
        .await
        .unwrap();
    drop(store);
    let app = writ_tests::spawn_with(settings, dirs, backend).await;
    (app, key.key, key.record.id)
}

fn answering(fake: &FakeUpstream) {
    for (i, m) in MODELS.iter().enumerate() {
        fake.script(
            m,
            Script::always(Step::code(
                "python",
                format!("def add(a, b):\n    return a + b  # {i}\n"),
            )),
        );
    }
    fake.script(ARBITER, Script::always(Step::verdict(1, "the first")));
}

fn batch(file: &str, dry_run: bool) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": file, "code_description": "a function add(a, b) returning the sum"}],
           "options": {"dry_run": dry_run}})
}

async fn post(app: &TestApp, key: &str, body: &Value) -> (u16, Value) {
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

/// The day's window of `path`'s spend (`GET /keys/{id}/spend` or `GET /workspaces/{name}`).
async fn day_spent(app: &TestApp, key: &str, path: &str) -> Value {
    let r = app
        .client
        .get(app.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    let body: Value = r.json().await.unwrap();
    let windows = body
        .get("windows")
        .or_else(|| body.get("spend"))
        .unwrap_or_else(|| panic!("{body}"));
    windows[0].clone()
}

/// The tokens a batch's answer says its calls spent: every candidate and every other call (none
/// for a refusal).
fn tokens_in(answer: &Value) -> u64 {
    let mut total = 0;
    for file in answer["results"].as_array().into_iter().flatten() {
        // A file none of whose calls was made lists none.
        for record in file["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(file["calls"].as_array().into_iter().flatten())
        {
            total += record["prompt_tokens"].as_u64().unwrap_or(0)
                + record["completion_tokens"].as_u64().unwrap_or(0);
        }
    }
    total
}

#[tokio::test]
async fn a_dry_run_spends_the_keys_budget_and_the_next_batch_is_refused_before_any_model_call() {
    let fake = FakeUpstream::start().await.unwrap();
    answering(&fake);
    let one_token = Budget {
        daily_tokens: Some(1),
        ..Budget::default()
    };
    let (app, key, id) =
        app_with_budgets(Backend::Sqlite, &fake, one_token, Budget::default()).await;

    let (status, answer) = post(&app, &key, &batch("a.py", true)).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("def add"),
        "{answer}"
    );
    assert!(
        !app.repo_dir.join("a.py").exists(),
        "a dry run writes nothing"
    );

    let day = day_spent(&app, &key, &format!("/keys/{id}/spend")).await;
    assert_eq!(day["tokens"].as_u64().unwrap(), tokens_in(&answer), "{day}");
    assert_eq!(
        day["calls"].as_u64().unwrap() as usize,
        fake.calls().len(),
        "every call that reached the provider is counted: {day}"
    );
    let calls_before = fake.calls().len();
    let (status, refused) = post(&app, &key, &batch("b.py", true)).await;
    assert_eq!(status, 402, "{refused}");
    assert_eq!(refused["error"]["field"], "daily_tokens");
    assert_eq!(fake.calls().len(), calls_before, "no model was called");
}

#[tokio::test]
async fn a_batch_whose_every_file_fails_spends_the_workspaces_budget_all_the_same() {
    let fake = FakeUpstream::start().await.unwrap();
    // Prose without code: every candidate fails, the fallback too, and nothing is written.
    fake.set_default(Script::always(Step::text(
        "I would rather describe the function than write it.",
    )));
    let (app, key, _) = app_with_budgets(
        Backend::Postgres,
        &fake,
        Budget::default(),
        Budget {
            daily_tokens: Some(1),
            ..Budget::default()
        },
    )
    .await;

    let (status, answer) = post(&app, &key, &batch("a.py", false)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][0]["success"], false, "{answer}");
    assert!(!app.repo_dir.join("a.py").exists());

    let day = day_spent(&app, &key, "/workspaces/default").await;
    assert!(day["tokens"].as_u64().unwrap() > 0, "{day}");
    assert_eq!(
        day["calls"].as_u64().unwrap() as usize,
        fake.calls().len(),
        "{day}"
    );
    let (status, refused) = post(&app, &key, &batch("b.py", false)).await;
    assert_eq!(status, 402, "{refused}");
    assert_eq!(
        refused["error"]["details"]["budget"], "workspace",
        "{refused}"
    );
}

/// Batches admitted together, past a budget one call's prompt already exceeds: the calls that
/// passed the check before any of them was counted run and count; none starts after. Prints the
/// figures docs/costs.md quotes.
#[tokio::test]
async fn concurrent_batches_overshoot_a_budget_by_at_most_the_calls_already_in_flight() {
    const BATCHES: usize = 4;
    const LATENCY: std::time::Duration = std::time::Duration::from_millis(1500);
    let fake = FakeUpstream::start().await.unwrap();
    for m in MODELS.iter().chain([&ARBITER]) {
        fake.script(
            m,
            Script::always(Step::code("python", "def add(a, b):\n    return a + b\n"))
                .with_latency(Latency::fixed(LATENCY)),
        );
    }
    let limit = 1;
    let (app, key, id) = app_with_budgets(
        Backend::Postgres,
        &fake,
        Budget {
            daily_tokens: Some(limit),
            ..Budget::default()
        },
        Budget::default(),
    )
    .await;

    let bodies: Vec<Value> = (0..BATCHES)
        .map(|i| batch(&format!("f{i}.py"), true))
        .collect();
    let answers = futures::future::join_all(bodies.iter().map(|body| post(&app, &key, body))).await;

    let admitted = answers.iter().filter(|(s, _)| *s == 200).count();
    let refused = answers.iter().filter(|(s, _)| *s == 402).count();
    assert_eq!(admitted + refused, BATCHES, "{answers:?}");
    let calls = fake.calls();
    let first = calls.iter().map(|c| c.at).min().unwrap();
    assert!(
        calls.iter().all(|c| c.at < first + LATENCY),
        "no call started once one had ended: every counted call was in flight together"
    );
    let day = day_spent(&app, &key, &format!("/keys/{id}/spend")).await;
    assert_eq!(
        day["calls"].as_u64().unwrap() as usize,
        calls.len(),
        "{day}"
    );
    let spent = day["tokens"].as_u64().unwrap();
    let answered: u64 = answers.iter().map(|(_, a)| tokens_in(a)).sum();
    assert_eq!(
        spent, answered,
        "the overshoot is exactly what those calls spent"
    );
    let per_call = spent / calls.len().max(1) as u64;
    assert!(spent - limit <= calls.len() as u64 * (per_call + 1));
    eprintln!(
        "budget overshoot: {BATCHES} batches at once, {admitted} admitted, {refused} refused; \
         {} calls in flight passed the check, {spent} tokens spent against a limit of {limit} \
         (~{per_call} tokens a call)",
        calls.len()
    );
}
