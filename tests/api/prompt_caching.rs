//! Prompts laid out for providers' prompt caches: the files of one batch share a large context
//! (the task and the files it names), and every call after the first to the same model finds
//! that shared part in the model's cache, reads cached tokens from the usage, records them per
//! candidate and pays the cached price for them.

use serde_json::{Value, json};
use writ_fake_upstream::{FakeUpstream, Script, Step};
use writ_tests::{Backend, MODELS, TestApp, spawn_app_with_models};

fn put(app: &TestApp, rel: &str, content: &str) {
    let path = app.repo_dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// About 20,000 tokens (at four characters a token) shared by the five files: a 40,000-character
/// task and four named documents of 10,000 characters.
fn five_files_sharing_a_large_context(app: &TestApp) -> Value {
    for d in 0..4 {
        put(
            app,
            &format!("docs/part{d}.md"),
            &format!("Rule {d}: totals are rounded to cents and never negative.\n").repeat(172),
        );
    }
    let task =
        "The shop computes prices, taxes and receipts for every order it takes. ".repeat(556);
    let files: Vec<Value> = ["cart", "pay", "tax", "receipt", "stock"]
        .iter()
        .map(|f| {
            json!({"filename": format!("shop/{f}.py"),
                   "code_description": format!("the {f} module: one function report() returning 1")})
        })
        .collect();
    json!({"command": "write_codebase", "task_description": task,
           "context": ["docs/part0.md", "docs/part1.md", "docs/part2.md", "docs/part3.md"],
           "files": files})
}

/// The per-candidate usage of one model across the batch's files, in the order the model was
/// called: (prompt tokens, cached tokens, cost).
fn usage_of(answer: &Value, model: &str) -> Vec<(u64, u64, f64)> {
    let mut rows: Vec<(u64, u64, f64)> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["candidates"].as_array().unwrap().iter())
        .filter(|c| c["model"] == model && c["round"].is_null())
        .map(|c| {
            (
                c["prompt_tokens"].as_u64().unwrap(),
                c["cached_tokens"].as_u64().unwrap_or(0),
                c["cost"].as_f64().unwrap(),
            )
        })
        .collect();
    // The first call of a model is the one its cache had nothing for.
    rows.sort_by_key(|r| r.1);
    rows
}

#[tokio::test]
async fn the_second_and_later_files_asked_of_a_model_read_the_shared_context_from_its_cache() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "def report():\n    return 1\n")),
        );
    }
    let body = five_files_sharing_a_large_context(&app);
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    let mut billed_with = 0;
    let mut prompt_later = 0;
    for m in MODELS {
        let rows = usage_of(&answer, m);
        assert_eq!(rows.len(), 5, "{m} answered each of the five files");
        assert_eq!(rows[0].1, 0, "{m}'s first call finds nothing in its cache");
        for &(prompt, cached, cost) in &rows[1..] {
            assert!(
                cached >= 19_000 && cached <= prompt,
                "{m}: {cached} of {prompt} prompt tokens read from the cache"
            );
            // Cached tokens are billed at a tenth of the price, so a later call costs less than
            // the first although its prompt is as long.
            assert!(cost < rows[0].2, "{m}: {cost} < {}", rows[0].2);
            billed_with += prompt - cached;
            prompt_later += prompt;
        }
    }

    // The same calls with each file's own part first (the layout before the shared part was
    // put first) reach a fresh fake: the prompts differ from their first lines, so nothing is
    // served from the cache.
    let fresh = FakeUpstream::start().await.unwrap();
    let client = reqwest::Client::new();
    let mut billed_without = 0;
    for m in MODELS {
        fresh.script(
            m,
            Script::always(Step::code("python", "def report():\n    return 1\n")),
        );
        for (i, call) in app.fake().calls_for(m).into_iter().enumerate() {
            let mut request = call.body.clone();
            let user = request["messages"][1]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            let at = user
                .find("# This file\n")
                .expect("the file's own part is marked");
            request["messages"][1]["content"] = json!(format!("{}{}", &user[at..], &user[..at]));
            request["stream"] = json!(false);
            let usage: Value = client
                .post(format!("{}/chat/completions", fresh.base_url()))
                .json(&request)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let usage = &usage["usage"];
            if i > 0 {
                billed_without += usage["prompt_tokens"].as_u64().unwrap()
                    - usage["prompt_tokens_details"]["cached_tokens"]
                        .as_u64()
                        .unwrap_or(0);
            }
        }
    }
    assert!(
        billed_with * 2 <= billed_without,
        "at least half fewer billed input tokens: {billed_with} with the layout, {billed_without} without"
    );
    println!(
        "prompt caching, five files x {} models, 2nd+ calls: prompt tokens {prompt_later}, billed input tokens with the layout {billed_with}, without {billed_without} ({:.1}% fewer)",
        MODELS.len(),
        100.0 * (1.0 - billed_with as f64 / billed_without as f64)
    );
}
