//! `GET /search` and the `search_files` tool: matches with line numbers and context, `.gitignore`
//! and protected paths honoured, bad input refused naming the field.

use serde_json::{Value, json};
use writ_tests::{Backend, TestApp, spawn_with, test_settings_with};

async fn app_with_tree() -> TestApp {
    let (settings, dirs) =
        test_settings_with(Backend::Sqlite, &[("WRIT_PROTECTED_PATHS", ".git,secrets")]).await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let put = |rel: &str, content: &str| {
        let path = app.repo_dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    put(".gitignore", "dist/\n");
    put(
        "src/pricing.py",
        "RATE = 0.2\n\ndef total(net):\n    return net * (1 + RATE)\n",
    );
    put(
        "src/report.py",
        "from pricing import total\n\nprint(total(10))\n",
    );
    put("dist/bundle.py", "def total(net): pass\n");
    put("secrets/token.py", "def total(): return 'secret'\n");
    put(".git/hooks/total", "total\n");
    app
}

async fn search(app: &TestApp, query: &str) -> (u16, Value) {
    app.json(&format!("/search?{query}")).await
}

#[tokio::test]
async fn a_search_answers_matching_lines_with_numbers_and_context_and_skips_ignored_and_protected_files()
 {
    let app = app_with_tree().await;
    let (status, body) = search(&app, "pattern=def%20total&context_lines=1").await;
    assert_eq!(status, 200, "{body}");
    let matches = body["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 1, "{body}");
    assert_eq!(matches[0]["path"], "src/pricing.py");
    assert_eq!(matches[0]["line_number"], 3);
    assert_eq!(matches[0]["line"], "def total(net):");
    assert_eq!(matches[0]["before"], json!([""]));
    assert_eq!(matches[0]["after"], json!(["    return net * (1 + RATE)"]));
    assert!(body.get("stopped").is_none());

    let (_, body) = search(
        &app,
        "pattern=TOTAL%5C(&regex=true&ignore_case=true&glob=*.py",
    )
    .await;
    let paths: Vec<&str> = body["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["src/pricing.py", "src/report.py"], "{body}");

    let (_, body) = search(&app, "pattern=total&max_matches=1").await;
    assert_eq!(body["matches"].as_array().unwrap().len(), 1);
    assert_eq!(body["stopped"], "max_matches");
}

#[tokio::test]
async fn bad_search_input_is_refused_naming_the_field() {
    let app = app_with_tree().await;
    for (query, field) in [
        ("pattern=total(&regex=true", "pattern"),
        ("pattern=", "pattern"),
        ("pattern=total&glob=src/%5B", "glob"),
        ("pattern=total&max_matches=0", "max_matches"),
        ("pattern=total&max_matches=501", "max_matches"),
        ("pattern=total&context_lines=11", "context_lines"),
        ("pattern=total&dir=../up", "dir"),
    ] {
        let (status, body) = search(&app, query).await;
        assert!([400, 422].contains(&status), "{query}: {status} {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let (status, body) = search(&app, "pattern=total(&regex=true").await;
    assert_eq!(status, 422);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not compile")
    );
    let (status, _) = search(&app, "pattern=total&dir=nowhere").await;
    assert_eq!(status, 404);
    let (status, body) = search(&app, "pattern=total&dir=secrets").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "protected_path");
    assert_eq!(body["error"]["field"], "dir");
}

#[tokio::test]
async fn the_search_files_tool_answers_grep_like_lines() {
    let app = app_with_tree().await;
    let r = app
        .client
        .post(app.url("/tools/call"))
        .json(
            &json!({"name": "search_files", "arguments": {"pattern": "RATE", "context_lines": 0}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let text = body["content"].as_str().unwrap_or_else(|| panic!("{body}"));
    assert!(text.contains("src/pricing.py:1: RATE = 0.2"), "{text}");
    assert!(
        text.contains("src/pricing.py:4:     return net * (1 + RATE)"),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
    assert_eq!(body["result"]["files_matched"], 1, "{body}");
}
