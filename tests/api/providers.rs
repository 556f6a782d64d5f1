//! A provider per model, against two fake upstreams at once: `CODE_LIST` names one model served
//! by OpenRouter (the app's fake, as `OPENROUTER_BASE_URL`) and one served by a provider of its
//! own (`[[models]]`, a second fake), each call reaching only its model's provider with that
//! provider's key and headers. The second provider reports no cost, as vLLM or OpenAI do: writ
//! prices its calls from the entry, and the answer, the operations, `/stats/models` and the spend
//! ledger all show that cost.

use std::time::Duration;

use serde_json::{Value, json};
use writ_fake_upstream::{FakeUpstream, RecordedCall, Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp, on_both_backends};

const DIRECT: &str = "direct/coder";
const DIRECT_KEY: &str = "sk-direct-0123456789abcdef";
const OPENROUTER_KEY: &str = "sk-or-v1-fedcba9876543210";
/// The direct provider's prices per million tokens: input, output, cached input.
const PRICES: (f64, f64, f64) = (3.0, 15.0, 0.3);

struct TwoProviders {
    app: TestApp,
    /// Serves [`DIRECT`], reporting no cost.
    direct: FakeUpstream,
}

async fn two_providers(backend: Backend) -> TwoProviders {
    let direct = FakeUpstream::start().await.unwrap();
    direct.report_cost(false);
    direct.script(
        DIRECT,
        Script::always(Step::code("python", "def f():\n    return 1\n")),
    );
    let entries = json!([
        {"id": "direct/*", "base_url": direct.base_url(), "api_key_env": "DIRECT_PROVIDER_KEY",
         "headers": {"X-Tenant": "writ-tests"},
         "input_price": PRICES.0, "output_price": PRICES.1, "cached_input_price": PRICES.2},
        // OpenRouter reports its own cost, which wins over a price.
        {"id": MODELS[0], "input_price": 1000, "output_price": 1000},
    ])
    .to_string();
    let list = format!("{},{DIRECT}", MODELS[0]);
    let app = writ_tests::spawn_app_with_models_and(
        backend,
        &[
            ("CODE_LIST", &list),
            ("WRIT_MODEL_PROVIDERS", &entries),
            ("DIRECT_PROVIDER_KEY", DIRECT_KEY),
            ("OPENROUTER_API_KEY", OPENROUTER_KEY),
        ],
    )
    .await;
    app.fake().script(
        MODELS[0],
        Script::always(Step::code("python", "def f():\n    return 0\n")),
    );
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(2, "the second")));
    TwoProviders { app, direct }
}

async fn write_two_files(app: &TestApp) -> Value {
    let (status, answer) = app
        .post_write_codebase(&json!({"command": "write_codebase", "files": [
            {"filename": "a.py", "code_description": "f returns a number"},
            {"filename": "b.py", "code_description": "f returns another number"}]}))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

fn candidates_of<'a>(answer: &'a Value, model: &str) -> Vec<&'a Value> {
    answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["candidates"].as_array().unwrap())
        .filter(|c| c["model"] == model)
        .collect()
}

/// What the direct provider's prices make of a candidate's tokens.
fn priced(candidate: &Value) -> f64 {
    let tokens = |field: &str| candidate[field].as_u64().unwrap_or(0) as f64;
    let (prompt, cached) = (tokens("prompt_tokens"), tokens("cached_tokens"));
    ((prompt - cached) * PRICES.0 + cached * PRICES.2 + tokens("completion_tokens") * PRICES.1)
        / 1e6
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn authorization(call: &RecordedCall) -> &str {
    call.header("authorization").unwrap_or("")
}

async fn each_provider_gets_only_its_models_calls_with_its_own_key_and_headers(t: TwoProviders) {
    let answer = write_two_files(&t.app).await;

    let direct_calls = t.direct.calls();
    assert_eq!(direct_calls.len(), 2, "one candidate a file");
    for call in &direct_calls {
        assert_eq!(call.model, DIRECT);
        assert_eq!(authorization(call), format!("Bearer {DIRECT_KEY}"));
        assert_eq!(call.header("x-tenant"), Some("writ-tests"));
    }
    let openrouter_calls = t.app.fake().calls();
    assert!(openrouter_calls.iter().all(|c| c.model != DIRECT));
    for model in [MODELS[0], ARBITER] {
        assert!(
            openrouter_calls.iter().any(|c| c.model == model),
            "{model} went to OpenRouter"
        );
    }
    for call in &openrouter_calls {
        assert_eq!(authorization(call), format!("Bearer {OPENROUTER_KEY}"));
        assert_eq!(
            call.header("x-tenant"),
            None,
            "the headers are the entry's own"
        );
    }

    let (_, ready) = t.app.json("/readyz").await;
    let (_, ops) = t.app.json("/operations?limit=50").await;
    for shown in [answer.to_string(), ready.to_string(), ops.to_string()] {
        assert!(!shown.contains(DIRECT_KEY) && !shown.contains(OPENROUTER_KEY));
    }
    assert_eq!(ready["checks"]["provider"]["ok"], true, "{ready}");
}

async fn a_provider_without_a_cost_is_priced_from_its_entry_everywhere_cost_is_shown(
    t: TwoProviders,
) {
    let answer = write_two_files(&t.app).await;

    // In the answer: the direct model's cost is its tokens at the entry's prices; OpenRouter's
    // cost is what it reported ($1 and $2 a million), not the entry's price of 1000.
    let direct = candidates_of(&answer, DIRECT);
    assert_eq!(direct.len(), 2, "{answer}");
    let mut direct_cost = 0.0;
    for c in &direct {
        assert!(c["prompt_tokens"].as_u64().unwrap() > 0, "{c}");
        let cost = c["cost"]
            .as_f64()
            .expect("a cost, though the provider gave none");
        assert!(close(cost, priced(c)), "{cost} = {} for {c}", priced(c));
        direct_cost += cost;
    }
    for c in candidates_of(&answer, MODELS[0]) {
        let cost = c["cost"].as_f64().unwrap();
        assert!(cost < 0.01, "OpenRouter's own figure: {cost}");
    }

    // In the operations, which `/stats/models` counts from.
    let (_, ops) = t.app.json("/operations?limit=50").await;
    let recorded: f64 = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|op| op["candidates"].as_array().unwrap())
        .filter(|c| c["model"] == DIRECT)
        .map(|c| c["cost"].as_f64().unwrap())
        .sum();
    assert!(close(recorded, direct_cost), "{recorded} vs {direct_cost}");
    let (status, stats) = t.app.json("/stats/models").await;
    assert_eq!(status, 200, "{stats}");
    let row = stats["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == DIRECT)
        .unwrap_or_else(|| panic!("no row for {DIRECT}: {stats}"));
    assert!(
        close(row["cost"].as_f64().unwrap(), direct_cost),
        "{row} vs {direct_cost}"
    );

    // In the spend ledger budgets are checked against: every call's cost of the batch, the
    // priced ones included (its last additions run in tasks of their own, so it may lag).
    let total: f64 = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let calls = r["calls"].as_array().into_iter().flatten();
            r["candidates"].as_array().unwrap().iter().chain(calls)
        })
        .filter_map(|c| c["cost"].as_f64())
        .sum();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, workspace) = t.app.json("/workspaces/default").await;
        assert_eq!(status, 200, "{workspace}");
        let spent = workspace["spend"][0]["cost"].as_f64().unwrap_or(0.0);
        if close(spent, total) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ledger holds {spent}, the calls cost {total}: {workspace}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

on_both_backends!(app two_providers:
    each_provider_gets_only_its_models_calls_with_its_own_key_and_headers,
    a_provider_without_a_cost_is_priced_from_its_entry_everywhere_cost_is_shown,
);
