//! A budget that degrades instead of refusing (`on_limit: "degrade"`): from `degrade_at` of a
//! limit a batch asks one model, from halfway to the limit only the cheapest, and at the limit
//! it is refused with 402 as any budget's batch is. What each batch gave up is in its answer.
//! On both stores.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp};

fn one_file(name: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": name, "code_description": "a function add(a, b) returning the sum"}]})
}

async fn put_budget(app: &TestApp, budget: Value) -> (u16, Value) {
    let r = app
        .client
        .put(app.url("/workspaces/default/budget"))
        .json(&budget)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The tokens the workspace spent today.
async fn spent(app: &TestApp) -> u64 {
    let (status, body) = app.json("/workspaces/default").await;
    assert_eq!(status, 200, "{body}");
    body["spend"][0]["tokens"].as_u64().unwrap()
}

/// A daily token limit at which what was spent is `share` of it.
async fn limit_at(app: &TestApp, share: f64) -> Value {
    let limit = (spent(app).await as f64 / share).ceil() as u64;
    json!({"daily_tokens": limit, "on_limit": "degrade", "degrade_at": 0.5})
}

fn calls(app: &TestApp) -> Vec<usize> {
    MODELS
        .iter()
        .map(|m| app.fake().calls_for(m).len())
        .collect()
}

async fn degrades_then_refuses(backend: Backend) {
    let app = writ_tests::spawn_app_with_models_and(backend, &[]).await;
    // Three distinct answers, the second the shortest (so its candidates cost least).
    let answers = [
        "def add(a, b):\n    # the sum of a and b, computed the long way round\n    total = 0\n    total += a\n    total += b\n    return total\n",
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    result = a + b\n    return result\n",
    ];
    for (m, code) in MODELS.iter().zip(answers) {
        app.fake()
            .script(m, Script::always(Step::code("python", code)));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the first one")));

    // Below `degrade_at`: as usual.
    let (status, body) = app.post_write_codebase(&one_file("a.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["results"][0]["candidates"].as_array().unwrap().len(),
        3
    );
    assert!(body.get("degraded").is_none(), "{body}");

    // A limit that does not say `degrade_at` without `on_limit: degrade` is refused.
    let (status, refused) = put_budget(&app, json!({"daily_tokens": 10, "degrade_at": 0.5})).await;
    assert_eq!(status, 422, "{refused}");
    let (status, refused) = put_budget(
        &app,
        json!({"daily_tokens": 10, "on_limit": "degrade", "degrade_at": 1.5}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("degrade_at")
    );

    // 60% spent, past degrade_at (50%): one model, no arbiter.
    let (status, set) = put_budget(&app, limit_at(&app, 0.6).await).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["budget"]["on_limit"], "degrade", "{set}");
    assert_eq!(set["budget"]["degrade_at"], 0.5, "{set}");
    let before = calls(&app);
    let arbiter_before = app.fake().calls_for(ARBITER).len();
    let (status, body) = app.post_write_codebase(&one_file("b.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["degraded"]["level"], "fewer_models", "{body}");
    assert_eq!(body["degraded"]["budget"], "workspace", "{body}");
    assert_eq!(body["degraded"]["limit_kind"], "tokens", "{body}");
    assert!(
        body["degraded"]["message"]
            .as_str()
            .unwrap()
            .contains("each file asks one model"),
        "{body}"
    );
    let candidates = body["results"][0]["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 1, "{body}");
    assert_eq!(candidates[0]["model"], MODELS[0], "{body}");
    let after = calls(&app);
    assert_eq!(
        (
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ),
        (1, 0, 0)
    );
    assert_eq!(app.fake().calls_for(ARBITER).len(), arbiter_before);
    assert!(app.repo_dir.join("b.py").exists());

    // 90% spent, past halfway to the limit: only the cheapest model.
    let (status, _) = put_budget(&app, limit_at(&app, 0.9).await).await;
    assert_eq!(status, 200);
    let before = calls(&app);
    let (status, body) = app.post_write_codebase(&one_file("c.py")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["degraded"]["level"], "cheapest_model", "{body}");
    assert_eq!(body["degraded"]["model"], MODELS[1], "{body}");
    let after = calls(&app);
    assert_eq!(
        (
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ),
        (0, 1, 0)
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("c.py")).unwrap(),
        answers[1]
    );

    // At the limit: 402, no model called.
    let (status, _) = put_budget(&app, limit_at(&app, 1.0).await).await;
    assert_eq!(status, 200);
    let before = calls(&app);
    let (status, body) = app.post_write_codebase(&one_file("d.py")).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
    assert_eq!(calls(&app), before);
    assert!(!app.repo_dir.join("d.py").exists());
}

#[tokio::test]
async fn a_degrading_budget_asks_fewer_then_the_cheapest_model_then_refuses_on_sqlite() {
    degrades_then_refuses(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_degrading_budget_asks_fewer_then_the_cheapest_model_then_refuses_on_postgres() {
    degrades_then_refuses(Backend::Postgres).await;
}
