//! Context from the repository in the candidates' prompts: the files, folders and globs a batch
//! names (`context`), its `constraints`, the repository map, and the prompt tokens each part used.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{
    ARBITER, Backend, MODELS, TestApp, spawn_app_with_models, spawn_app_with_models_and,
};

fn put(app: &TestApp, rel: &str, content: &str) {
    let path = app.repo_dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// `count` one-line functions named `<prefix>_<i>`.
fn functions(prefix: &str, count: usize) -> String {
    let one = |i| format!("def {prefix}_{i}(amount):\n    return amount + {i}\n\n");
    (0..count).map(one).collect()
}

/// A module at `rel` importing `name` from `module` and calling it in `bill`.
fn put_user(app: &TestApp, rel: &str, module: &str, name: &str) {
    let text =
        format!("from {module} import {name}\n\n\ndef bill(total):\n    return {name}(total)\n");
    put(app, rel, &text);
}

fn script_models(app: &TestApp) {
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "def report():\n    return 1\n")),
        );
    }
}

fn prompt(app: &TestApp) -> String {
    app.fake().calls_for(MODELS[0])[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

const RECORD: &str = "a function record(entry) that appends it to a list";

/// Waits until a search finds each of `words` (identifiers written by `put`): the workspace's
/// index learns of files written behind writ's back from its watcher, a few milliseconds later.
async fn until_searchable(app: &TestApp, words: &[&str]) {
    for word in words {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (status, body) = app.json(&format!("/search?pattern={word}")).await;
            assert_eq!(status, 200, "{body}");
            if body["matches"].as_array().is_some_and(|m| !m.is_empty()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{word} never became searchable"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Writes the one file `path` with the scripted models: its answer, and the repository map of
/// the first model's prompt.
async fn map_for(app: &TestApp, path: &str, description: &str) -> (Value, String) {
    script_models(app);
    let (status, body) = app
        .post_write_codebase(&json!({
            "command": "write_codebase",
            "files": [{"filename": path, "code_description": description}]
        }))
        .await;
    assert_eq!(status, 200, "{body}");
    let p = prompt(app);
    let at = p
        .find("## Repository map")
        .unwrap_or_else(|| panic!("no map: {p}"));
    (body, p[at..].to_owned())
}

/// A small project: a pricing module with a helper, a constants module, docs, an ignored
/// build folder and a protected folder.
fn project(app: &TestApp) {
    put(app, ".gitignore", "build/\n");
    put(
        app,
        "shop/pricing.py",
        "from shop.constants import VAT_RATE\n\n\ndef apply_discount(amount, percent):\n    return amount * (1 - percent / 100)\n\n\ndef with_vat(amount):\n    return amount * (1 + VAT_RATE)\n",
    );
    put(
        app,
        "shop/constants.py",
        "VAT_RATE = 0.2\nCURRENCY = \"EUR\"\n",
    );
    put(
        app,
        "docs/api.md",
        "# API\n\nTotals are rounded to cents.\n",
    );
    put(app, "build/generated.py", "def generated():\n    pass\n");
    put(app, ".git/config", "[core]\n");
}

fn batch(extra: Value) -> Value {
    let mut body = json!({
        "command": "write_codebase",
        "files": [{"filename": "shop/report.py",
                   "code_description": "a function report(amounts) that prints each amount with the discount applied"}]
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}

#[tokio::test]
async fn named_files_folders_and_globs_and_the_constraints_reach_the_candidates_and_the_arbiter() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    project(&app);
    for (i, m) in MODELS.iter().enumerate() {
        app.fake().script(
            m,
            Script::always(Step::code(
                "python",
                format!("def report():\n    return {i}\n"),
            )),
        );
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "first")));
    let body = batch(json!({
        "context": ["docs/api.md", "shop/", "**/constants.py"],
        "constraints": "Use type hints everywhere.",
    }));
    let mut body = body;
    body["files"][0]["constraints"] = json!("No print statements; use logging.");
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    let p = prompt(&app);
    assert!(p.contains("## Rules the code must follow\nUse type hints everywhere.\nNo print statements; use logging."), "{p}");
    assert!(p.contains("### \"docs/api.md\" (current content)"), "{p}");
    assert!(p.contains("Totals are rounded to cents."), "{p}");
    assert!(p.contains("### the folder \"shop\"/"), "{p}");
    assert!(p.contains("pricing.py ("), "the folder's tree: {p}");
    assert!(
        p.contains("VAT_RATE = 0.2"),
        "the glob's file shown whole: {p}"
    );
    assert!(
        !p.contains("generated"),
        "ignored files are never shown: {p}"
    );
    let arbiter = app.fake().calls_for(ARBITER)[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(arbiter.contains("Use type hints everywhere."), "{arbiter}");
    assert!(
        arbiter.contains("No print statements; use logging."),
        "{arbiter}"
    );

    let parts = &answer["results"][0]["prompt_tokens_by_part"];
    for part in ["task", "constraints", "named_context", "repo_map", "total"] {
        assert!(parts[part].as_u64().unwrap() > 0, "{part}: {parts}");
    }
    assert_eq!(parts["current_file"], 0);
    let sum: u64 = [
        "task",
        "constraints",
        "named_context",
        "imported_files",
        "repo_map",
        "current_file",
        "recent_operations",
    ]
    .iter()
    .map(|k| parts[*k].as_u64().unwrap())
    .sum();
    assert!(sum <= parts["total"].as_u64().unwrap(), "{parts}");
}

#[tokio::test]
async fn unknown_protected_and_empty_context_is_refused_naming_the_field_before_any_model_call() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    project(&app);
    script_models(&app);
    for (extra, field) in [
        (json!({"context": ["docs/missing.md"]}), "context[0]"),
        (
            json!({"context": ["docs/api.md", ".git/config"]}),
            "context[1]",
        ),
        (json!({"context": ["**/*.rs"]}), "context[0]"),
        (json!({"context": ["../outside"]}), "context[0]"),
        (json!({"constraints": "x".repeat(10_001)}), "constraints"),
        (
            json!({"options": {"repo_map_tokens": 16_001}}),
            "options.repo_map_tokens",
        ),
    ] {
        let (status, body) = app.post_write_codebase(&batch(extra.clone())).await;
        assert_eq!(status, 422, "{extra}: {body}");
        assert_eq!(body["error"]["field"], field, "{extra}: {body}");
    }
    let mut per_file = batch(json!({}));
    per_file["files"][0]["context"] = json!(["nowhere/"]);
    let (status, body) = app.post_write_codebase(&per_file).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "files[0].context[0]");
    assert!(
        app.fake().calls_for(MODELS[0]).is_empty(),
        "no model was called"
    );
    assert!(!app.repo_dir.join("shop/report.py").exists());
}

#[tokio::test]
async fn the_repository_map_shows_the_helpers_and_constants_the_description_does_not_name() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    project(&app);
    until_searchable(&app, &["apply_discount", "VAT_RATE"]).await;
    script_models(&app);
    let (status, body) = app.post_write_codebase(&batch(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    let p = prompt(&app);
    let map = &p[p
        .find("## Repository map")
        .unwrap_or_else(|| panic!("no map: {p}"))..];
    assert!(
        map.contains("def apply_discount(amount, percent):"),
        "{map}"
    );
    assert!(map.contains("VAT_RATE = 0.2"), "{map}");
    assert!(!map.contains("generated"), "{map}");

    // Off for one batch: no map, and its part is 0.
    app.fake().clear_calls();
    let (_, body) = app
        .post_write_codebase(&batch(json!({"options": {"repo_map_tokens": 0}})))
        .await;
    assert!(!prompt(&app).contains("## Repository map"));
    assert_eq!(body["results"][0]["prompt_tokens_by_part"]["repo_map"], 0);
}

#[tokio::test]
async fn the_map_budget_is_configurable_and_bounds_the_map() {
    let app = spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_REPO_MAP_TOKENS", "0")]).await;
    project(&app);
    script_models(&app);
    app.post_write_codebase(&batch(json!({}))).await;
    assert!(
        !prompt(&app).contains("## Repository map"),
        "off by configuration"
    );

    // A big project: the map stays within the batch's budget.
    for i in 0..60 {
        let defs: String = (0..20)
            .map(|j| format!("def helper_{i}_{j}(amount, percent):\n    return amount\n\n"))
            .collect();
        put(&app, &format!("shop/module_{i}.py"), &defs);
    }
    until_searchable(&app, &["helper_59_19"]).await;
    app.fake().clear_calls();
    let (_, body) = app
        .post_write_codebase(&batch(json!({"options": {"repo_map_tokens": 500}})))
        .await;
    let used = body["results"][0]["prompt_tokens_by_part"]["repo_map"]
        .as_u64()
        .unwrap();
    assert!(used > 300 && used <= 560, "{used}");
}

#[tokio::test]
async fn the_files_importing_the_file_being_written_come_before_files_that_only_mention_it() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    // Same folder and a mention of its name, but no import line.
    put(
        &app,
        "shop/notes.py",
        "# the ledger is kept elsewhere\n\n\ndef notes_helper():\n    pass\n",
    );
    // Another folder, but it imports the file: a user of what the batch writes.
    put_user(&app, "app/billing.py", "shop.ledger", "post");
    until_searchable(&app, &["notes_helper", "bill"]).await;
    let (_, map) = map_for(&app, "shop/ledger.py", RECORD).await;
    let importer = map
        .find("app/billing.py")
        .unwrap_or_else(|| panic!("{map}"));
    let mention = map.find("shop/notes.py").unwrap_or_else(|| panic!("{map}"));
    assert!(importer < mention, "the importer is ranked first: {map}");
}

#[tokio::test]
async fn files_related_only_by_their_top_folder_fill_at_most_a_quarter_of_the_map() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    // Sixty modules beneath the same top folder, in other folders, sharing no word with the
    // description: the project's layout, not code the file needs (about 6,000 tokens of
    // outlines in all).
    for i in 0..60 {
        let defs: String = (0..12)
            .map(|j| format!("def zq_{i}_{j}(x, y):\n    return x\n\n"))
            .collect();
        put(&app, &format!("app/area_{i}/mod_{i}.py"), &defs);
    }
    // A user of the file being written: related by a look-up, shown whatever the filler.
    put_user(
        &app,
        "app/billing/billing.py",
        "app.ledger.entries",
        "record",
    );
    until_searchable(&app, &["zq_59_11", "bill"]).await;
    let (body, map) = map_for(&app, "app/ledger/entries.py", RECORD).await;
    assert!(map.contains("app/billing/billing.py"), "{map}");
    let fillers = map.matches("app/area_").count();
    assert!(fillers >= 1, "some of the layout is shown: {map}");
    let used = body["results"][0]["prompt_tokens_by_part"]["repo_map"]
        .as_u64()
        .unwrap();
    // The default budget is 2,000 tokens: a quarter for fillers, the importer and the heading
    // beside them.
    assert!(used <= 700, "{used} tokens: {map}");
}

#[tokio::test]
async fn a_file_of_thousands_of_definitions_leaves_room_in_the_map_for_its_neighbours() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    // Sorted first by path, and alone far over the budget.
    put(&app, "app/big.py", &functions("helper", 1_250));
    for name in ["ledger", "money", "totals"] {
        put(
            &app,
            &format!("app/{name}.py"),
            &format!("def {name}_of(x):\n    return x\n"),
        );
    }
    until_searchable(&app, &["helper_1249", "ledger_of", "money_of", "totals_of"]).await;
    let (body, map) = map_for(&app, "app/report.py", RECORD).await;
    for shown in [
        "app/big.py",
        "app/ledger.py",
        "app/money.py",
        "app/totals.py",
    ] {
        assert!(map.contains(shown), "{shown} is in the map: {map}");
    }
    assert!(map.contains("more lines of definitions"), "{map}");
    let used = body["results"][0]["prompt_tokens_by_part"]["repo_map"]
        .as_u64()
        .unwrap();
    assert!(used <= 2_100, "{used}");
}
