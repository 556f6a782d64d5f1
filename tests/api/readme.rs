//! The README is a tested quick start: its shell blocks run in order, as a newcomer would paste
//! them into one shell, against the real `writ` binary serving on loopback with the fake upstream
//! answering for the README's own model ids. A block that needs what a test cannot have (a real
//! provider, a release build, the suite itself) says so in a `<!-- readme-test: skip (why) -->`
//! line just above it; every other block runs, and any HTTP error answer or failing command fails
//! the test. The JSON answer the README shows is held against the real answer of its request.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use writ_fake_upstream::{FakeUpstream, Script, Step};

const SKIP: &str = "<!-- readme-test: skip (";

struct Block {
    line: usize,
    lang: String,
    text: String,
    skipped: Option<String>,
}

fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let lines: Vec<&str> = readme.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if let Some(lang) = lines[i].strip_prefix("```")
            && !lang.is_empty()
        {
            let skipped = i
                .checked_sub(1)
                .and_then(|p| lines[p].strip_prefix(SKIP))
                .map(|why| why.trim_end_matches(") -->").to_string());
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].starts_with("```") {
                end += 1;
            }
            out.push(Block {
                line: i + 1,
                lang: lang.to_string(),
                text: lines[start..end].join("\n"),
                skipped,
            });
            i = end;
        }
        i += 1;
    }
    out
}

/// The `writ` binary cargo built beside this test's.
fn writ_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let writ = dir.join("writ");
    assert!(
        writ.exists(),
        "{} is built with the workspace",
        writ.display()
    );
    writ
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Keys that the README's objects have, which the real one must have too.
fn keys_shown(shown: &Value, real: &Value, at: &str, missing: &mut Vec<String>) {
    match (shown, real) {
        (Value::Object(s), Value::Object(r)) => {
            for (k, v) in s {
                match r.get(k) {
                    None => missing.push(format!("{at}.{k}")),
                    Some(rv) => keys_shown(v, rv, &format!("{at}.{k}"), missing),
                }
            }
        }
        (Value::Array(s), Value::Array(r)) => {
            if let (Some(sv), Some(rv)) = (s.first(), r.first()) {
                keys_shown(sv, rv, &format!("{at}[0]"), missing);
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_quick_start_runs_top_to_bottom_against_a_real_writ() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let all = blocks(&readme);
    let run: Vec<&Block> = all
        .iter()
        .filter(|b| b.lang == "sh" && b.skipped.is_none())
        .collect();
    assert!(
        run.len() >= 3,
        "the quick start's blocks run: {}",
        run.len()
    );
    for b in all.iter().filter(|b| b.skipped.is_some()) {
        assert!(
            !b.skipped.as_deref().unwrap().trim().is_empty(),
            "README.md:{}: a skipped block says why",
            b.line
        );
    }

    // The README's own model ids, answered by the fake.
    let fake = FakeUpstream::start().await.unwrap();
    let code = "from flask import Flask, jsonify\n\napp = Flask(__name__)\n\n\n@app.get(\"/health\")\ndef health():\n    return jsonify(status=\"ok\")\n";
    for m in [
        "openai/gpt-4.1-mini",
        "anthropic/claude-sonnet-4",
        "google/gemini-2.5-flash",
    ] {
        fake.script(m, Script::always(Step::code("python", code)));
    }
    fake.script(
        "openai/gpt-4.1",
        Script::always(Step::verdict(1, "uses jsonify and an explicit route")),
    );

    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::copy(root.join("README.md"), cwd.join("README.md")).unwrap();
    let port = free_port();
    let db = format!("sqlite://{}/writ.db", cwd.display());
    let writ = writ_binary();
    let base = fake.base_url();
    let env: Vec<(&str, String)> = vec![
        ("DATABASE_URL", db.clone()),
        ("REPO_DIR", cwd.join("workspace").display().to_string()),
        (
            "WRIT_WORKSPACES_DIR",
            cwd.join("workspaces").display().to_string(),
        ),
        ("OPENROUTER_BASE_URL", base.clone()),
        (
            "CODE_LIST",
            "openai/gpt-4.1-mini,anthropic/claude-sonnet-4,google/gemini-2.5-flash".into(),
        ),
        ("CODE_MODEL", "openai/gpt-4.1".into()),
        ("WRIT_LOCAL_MODEL", "off".into()),
        ("RUST_LOG", "warn".into()),
    ];
    let mut server = tokio::process::Command::new(&writ)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..200 {
        if client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(up, "writ serves");

    // One shell, as a newcomer's: the blocks in order, each announced, `localhost:8080` being
    // this server; curl fails on an error answer, as the README's calls are meant to succeed.
    let mut script = String::from("set -e\ncurl() { command curl --fail-with-body \"$@\"; }\n");
    for (i, b) in run.iter().enumerate() {
        script.push_str(&format!("echo '@@block {i} (README.md:{})@@'\n", b.line));
        script.push_str(
            &b.text
                .replace("localhost:8080", &format!("127.0.0.1:{port}")),
        );
        script.push('\n');
    }
    script.push_str("echo '@@end@@'\n");
    let bin_dir = writ.parent().unwrap().display().to_string();
    let out = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env(
            "PATH",
            format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default()),
        )
        .env("GIT_AUTHOR_NAME", "newcomer")
        .env("GIT_AUTHOR_EMAIL", "newcomer@example.com")
        .env("GIT_COMMITTER_NAME", "newcomer")
        .env("GIT_COMMITTER_EMAIL", "newcomer@example.com")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let _ = server.kill().await;
    assert!(
        out.status.success() && stdout.contains("@@end@@"),
        "the README's blocks stopped:\n{stdout}\n{stderr}"
    );

    // What the blocks did is there.
    assert_eq!(
        std::fs::read_to_string(cwd.join("workspace/docs/readme.md")).unwrap(),
        readme
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join("workspace/src/app.py")).unwrap(),
        code
    );
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(cwd.join("workspaces/task-42"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&status.stdout), "?? hello.py\n");

    // The answer the README shows has the real answer's shape: every key it shows is there.
    let batch_block = run
        .iter()
        .position(|b| b.text.contains("/write_codebase"))
        .expect("the README sends a batch");
    let answer_text = stdout
        .split(&format!("@@block {batch_block} "))
        .nth(1)
        .and_then(|rest| rest.split_once("@@\n"))
        .map(|(_, rest)| rest.split("@@block").next().unwrap_or_default())
        .unwrap();
    let real: Value = serde_json::from_str(answer_text.trim()).unwrap();
    assert_eq!(real["status"], "success", "{real}");
    let shown = all
        .iter()
        .find(|b| b.lang == "json" && b.text.contains("\"results\""))
        .expect("the README shows the answer");
    let shown: Value = serde_json::from_str(&shown.text).unwrap();
    let mut missing = Vec::new();
    keys_shown(&shown, &real, "answer", &mut missing);
    assert!(
        missing.is_empty(),
        "the README shows fields the answer lacks: {missing:?}\n{real}"
    );
}
