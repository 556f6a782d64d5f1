//! Write sessions end to end: content in raw chunks, finished by a `DONE` line or explicitly,
//! checked as UTF-8 only at the end (with correction rounds), bounded, per caller, expiring, and
//! kept in the store across a restart.

use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use writ_core::keys;
use writ_tests::{Backend, TestApp, spawn_with, test_settings_with};

async fn spawn(backend: Backend, extra: &[(&str, &str)]) -> TestApp {
    let (settings, dirs) = test_settings_with(backend, extra).await;
    spawn_with(settings, dirs, backend).await
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn answer(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn begin(app: &TestApp, key: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = app.client.post(app.url("/write_sessions")).json(&body);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    answer(req.send().await.unwrap()).await
}

async fn begin_ok(app: &TestApp, target: &str, operation: &str) -> String {
    let (status, body) = begin(
        app,
        None,
        json!({"target_file": target, "operation": operation, "intent": "a test file", "create_dirs": true}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "awaiting_content", "{body}");
    body["id"].as_str().unwrap().to_string()
}

async fn send(app: &TestApp, key: Option<&str>, id: &str, chunk: &[u8]) -> (u16, Value) {
    let mut req = app
        .client
        .post(app.url(&format!("/write_sessions/{id}/content")))
        .header("content-type", "text/plain")
        .body(chunk.to_vec());
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    answer(req.send().await.unwrap()).await
}

async fn post(app: &TestApp, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = app.client.post(app.url(path));
    if let Some(body) = body {
        req = req.json(&body);
    }
    answer(req.send().await.unwrap()).await
}

async fn state_of(app: &TestApp, id: &str) -> Value {
    let (status, body) = app.json(&format!("/write_sessions/{id}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// 220 lines of the kind a model streams, with two-, three- and four-byte characters.
fn model_text() -> String {
    (1..=220)
        .map(|i| format!("line {i}: café → naïve 🦀 {}\n", "x".repeat(i % 17)))
        .collect()
}

/// The text in chunks of uneven sizes, cut at byte positions (some inside a character).
fn chunks_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    let sizes = [1_usize, 7, 13, 64, 3, 250, 5, 1000, 2, 31];
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let end = (at + sizes[i % sizes.len()]).min(bytes.len());
        out.push(bytes[at..end].to_vec());
        at = end;
        i += 1;
    }
    out
}

async fn a_model_style_session_lands_byte_exact_without_its_done_line(backend: Backend) {
    let app = spawn(backend, &[]).await;
    let id = begin_ok(&app, "src/streamed.py", "create").await;
    let text = model_text();
    let mut chunks = chunks_of(text.as_bytes());
    assert!(
        chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
        "some chunk boundary falls inside a character"
    );
    // The DONE line arrives split over two chunks, as a stream would send it.
    chunks.push(b"DO".to_vec());
    chunks.push(b"NE\n".to_vec());
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.iter().enumerate() {
        let (status, body) = send(&app, None, &id, chunk).await;
        assert_eq!(status, 200, "chunk {i}: {body}");
        if i < last {
            assert_eq!(body["state"], "awaiting_content", "chunk {i}: {body}");
            assert!(
                !app.repo_dir.join("src/streamed.py").exists(),
                "nothing is written before the end"
            );
        } else {
            assert_eq!(body["state"], "done", "{body}");
            assert_eq!(body["chunks"], chunks.len());
            let receipt = &body["receipt"];
            assert_eq!(receipt["operation"], "created");
            assert_eq!(receipt["bytes"], text.len());
            assert_eq!(receipt["sha256"], sha256(text.as_bytes()));
        }
    }
    let on_disk = std::fs::read(app.repo_dir.join("src/streamed.py")).unwrap();
    assert_eq!(
        on_disk,
        text.as_bytes(),
        "byte-exact, without the DONE line"
    );

    // The write is in the audit log under the session's route, before the answer came back.
    let body = state_of(&app, &id).await;
    let op_id = body["receipt"]["operation_id"].as_str().unwrap();
    let (status, op) = app.json(&format!("/operations/{op_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(op["status"], "succeeded");
    assert_eq!(op["content"], text);
    let store = writ_store::connect(&app.database_url).await.unwrap();
    let request_id = body["receipt"]["request_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let request = store.get_request(request_id).await.unwrap().unwrap();
    assert_eq!(request.route, format!("POST /write_sessions/{id}"));
}

#[tokio::test]
async fn an_explicit_finish_writes_once_and_a_second_finish_answers_the_same_receipt() {
    let app = spawn(Backend::Sqlite, &[]).await;
    std::fs::write(app.repo_dir.join("notes.txt"), "first\n").unwrap();
    let id = begin_ok(&app, "notes.txt", "append").await;
    send(&app, None, &id, b"second\n").await;
    // A chunk whose last line only contains DONE does not finish.
    let (_, body) = send(&app, None, &id, b"NOT DONE\n").await;
    assert_eq!(body["state"], "awaiting_content");

    let (status, first) = post(&app, &format!("/write_sessions/{id}/finish"), None).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["state"], "done");
    assert_eq!(first["receipt"]["operation"], "updated");
    let expected = "first\nsecond\nNOT DONE\n";
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("notes.txt")).unwrap(),
        expected
    );
    assert_eq!(first["receipt"]["sha256"], sha256(expected.as_bytes()));

    let (status, again) = post(&app, &format!("/write_sessions/{id}/finish"), None).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        again["receipt"], first["receipt"],
        "the same receipt, not a second write"
    );
    let (_, ops) = app.json("/operations?filename=notes.txt").await;
    assert_eq!(ops["operations"].as_array().unwrap().len(), 1, "{ops}");

    let (status, body) = send(&app, None, &id, b"late\n").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "session_state");
    assert_eq!(body["error"]["details"]["state"], "done");
}

#[tokio::test]
async fn invalid_utf8_asks_for_corrections_by_offset_and_a_correction_round_writes_the_file() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let id = begin_ok(&app, "fix.txt", "create").await;
    send(&app, None, &id, b"caf\xe9 au lait\n").await;
    let (status, body) = send(&app, None, &id, b"na\xefve\nDONE\n").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "needs_corrections", "{body}");
    let invalid = body["invalid_utf8"].as_array().unwrap();
    let offsets: Vec<u64> = invalid
        .iter()
        .map(|i| i["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, vec![3, 15]);
    assert_eq!(invalid[0]["bytes_hex"], "e9");
    assert!(invalid[1]["context"].as_str().unwrap().contains("ve"));
    assert!(!app.repo_dir.join("fix.txt").exists());
    // The state says the same when asked again.
    assert_eq!(
        state_of(&app, &id).await["invalid_utf8"],
        body["invalid_utf8"]
    );

    // An offset the session did not list is refused by name, changing nothing.
    let (status, err) = post(
        &app,
        &format!("/write_sessions/{id}/corrections"),
        Some(json!({"corrections": [{"offset": 5, "replacement": "x"}]})),
    )
    .await;
    assert_eq!(status, 422, "{err}");
    assert_eq!(err["error"]["field"], "corrections[0].offset");

    let (status, done) = post(
        &app,
        &format!("/write_sessions/{id}/corrections"),
        Some(json!({"corrections": [
            {"offset": 3, "replacement": "é"},
            {"offset": 15, "replacement": "ï"},
        ]})),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["correction_rounds"], 1);
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("fix.txt")).unwrap(),
        "café au lait\nnaïve\n"
    );
}

#[tokio::test]
async fn after_three_correction_rounds_what_is_still_invalid_becomes_a_replacement_character() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let id = begin_ok(&app, "lossy.txt", "create").await;
    send(&app, None, &id, b"a\xffb\xffc\xffd\xffe\n").await;
    let (_, mut body) = post(&app, &format!("/write_sessions/{id}/finish"), None).await;
    assert_eq!(body["state"], "needs_corrections", "{body}");
    for round in 1..=3 {
        // Each round fixes the first sequence still listed; the last one is never fixed.
        let offset = body["invalid_utf8"][0]["offset"].as_u64().unwrap();
        let (status, next) = post(
            &app,
            &format!("/write_sessions/{id}/corrections"),
            Some(json!({"corrections": [{"offset": offset, "replacement": "-"}]})),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(next["correction_rounds"], round);
        if round < 3 {
            assert_eq!(next["state"], "needs_corrections", "{next}");
            assert_eq!(next["invalid_utf8"].as_array().unwrap().len(), 4 - round);
            let (status, _) = send(&app, None, &id, b"more").await;
            assert_eq!(status, 409, "no content while corrections are due");
        } else {
            assert_eq!(next["state"], "done", "{next}");
            assert_eq!(next["receipt"]["replaced_invalid"], 1);
        }
        body = next;
    }
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("lossy.txt")).unwrap(),
        "a-b-c-d\u{fffd}e\n"
    );
}

#[tokio::test]
async fn a_paused_stream_asks_whether_it_is_done_and_more_content_resumes_it() {
    let app = spawn(Backend::Sqlite, &[("WRITE_SESSION_IDLE_MS", "100")]).await;
    let id = begin_ok(&app, "paused.md", "overwrite").await;
    let (_, body) = send(&app, None, &id, b"# Title\n").await;
    assert_eq!(body["state"], "awaiting_content");
    assert!(body.get("message").is_none(), "{body}");
    let mut seen = Value::Null;
    for _ in 0..100 {
        seen = state_of(&app, &id).await;
        if seen["state"] == "awaiting_done_or_more_content" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen["state"], "awaiting_done_or_more_content", "{seen}");
    assert_eq!(
        seen["message"],
        "If you're finished, reply with DONE on its own line; otherwise continue."
    );
    assert_eq!(seen["bytes_received"], 8);
    assert_eq!(seen["chunks"], 1);
    assert!(seen["created_at"].is_string() && seen["updated_at"].is_string());

    let (status, body) = send(&app, None, &id, b"body\n").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "awaiting_content", "{body}");
    let (_, body) = send(&app, None, &id, b"DONE").await;
    assert_eq!(body["state"], "done", "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("paused.md")).unwrap(),
        "# Title\nbody\n"
    );
}

async fn expiry_record(app: &TestApp, filename: &str) -> Option<Value> {
    let (_, ops) = app.json(&format!("/operations?filename={filename}")).await;
    ops["operations"].as_array()?.first().cloned()
}

/// [`expiry_record`], asked again until it is there or `within` has passed.
async fn expiry_record_within(app: &TestApp, filename: &str, within: Duration) -> Option<Value> {
    let until = std::time::Instant::now() + within;
    loop {
        let found = expiry_record(app, filename).await;
        if found.is_some() || std::time::Instant::now() >= until {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_abandoned_session_expires_on_access_and_in_the_sweep_and_the_audit_log_says_so() {
    let app = spawn(
        Backend::Sqlite,
        &[
            ("WRITE_SESSION_TTL_SECS", "1"),
            ("WRIT_RECONCILE_AFTER_SECS", "1"),
        ],
    )
    .await;
    // One session is looked at again (lazy expiry), the other never (the periodic sweep).
    let looked_at = begin_ok(&app, "looked.txt", "create").await;
    let forgotten = begin_ok(&app, "forgotten.txt", "create").await;
    send(&app, None, &looked_at, b"half a file").await;
    send(&app, None, &forgotten, b"another half").await;

    let mut body = Value::Null;
    for _ in 0..100 {
        body = state_of(&app, &looked_at).await;
        if body["state"] == "expired" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(body["state"], "expired", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("expired"),
        "{body}"
    );
    let (status, err) = send(&app, None, &looked_at, b"too late").await;
    assert_eq!(status, 409, "{err}");
    // The periodic sweep may have been the one to expire it: its record follows its claim on
    // the session by a statement or two, so the state can read `expired` a moment before.
    let op = expiry_record_within(&app, "looked.txt", Duration::from_secs(1))
        .await
        .expect("the expiry is in the audit log");
    assert_eq!(op["status"], "failed");
    assert_eq!(op["detail"]["write_session"]["id"], looked_at.as_str());
    assert_eq!(op["detail"]["write_session"]["bytes_received"], 11);

    let swept = expiry_record_within(&app, "forgotten.txt", Duration::from_secs(10))
        .await
        .expect("the sweep expires a session nobody looks at");
    assert_eq!(swept["detail"]["write_session"]["id"], forgotten.as_str());
    assert!(
        swept["error"]
            .as_str()
            .unwrap()
            .contains("nothing was written")
    );
    assert_eq!(app.files_on_disk(), Vec::<String>::new());
}

async fn a_session_survives_a_restart(backend: Backend) {
    let app = spawn(backend, &[]).await;
    let id = begin_ok(&app, "kept.rs", "create").await;
    send(&app, None, &id, "fn main() {\n    // é".as_bytes()).await;
    // A chunk ending inside a character, then the server goes away.
    send(&app, None, &id, b"\xe2\x86").await;
    let app = app.restart_with(&[]).await;
    let body = state_of(&app, &id).await;
    assert_eq!(body["chunks"], 2, "{body}");
    send(&app, None, &id, b"\x92\n}\n").await;
    let (status, body) = send(&app, None, &id, b"DONE\n").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "done", "{body}");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("kept.rs")).unwrap(),
        "fn main() {\n    // é→\n}\n"
    );
}

#[tokio::test]
async fn bad_input_is_refused_by_name_and_limit_and_writes_nothing() {
    let app = spawn(
        Backend::Sqlite,
        &[
            ("WRITE_SESSION_MAX_CHUNK_BYTES", "64"),
            ("WRITE_SESSION_MAX_BYTES", "100"),
            ("WRITE_SESSION_MAX_OPEN", "3"),
        ],
    )
    .await;
    // Unknown sessions, and ids that are not ids.
    for id in [uuid::Uuid::now_v7().to_string(), "nope".to_string()] {
        let (status, body) = send(&app, None, &id, b"x").await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["field"], "id");
        let (status, _) = app.json(&format!("/write_sessions/{id}")).await;
        assert_eq!(status, 404);
    }

    // The target is checked at begin.
    std::fs::write(app.repo_dir.join("exists.txt"), "keep me").unwrap();
    let (status, body) = begin(
        &app,
        None,
        json!({"target_file": "exists.txt", "operation": "create"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_exists");
    std::fs::create_dir_all(app.repo_dir.join(".git")).unwrap();
    let (status, body) = begin(
        &app,
        None,
        json!({"target_file": ".git/config", "operation": "overwrite"}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "protected_path");
    assert_eq!(body["error"]["field"], "target_file");
    let (status, body) = begin(
        &app,
        None,
        json!({"target_file": "../out.txt", "operation": "create"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = begin(
        &app,
        None,
        json!({"target_file": "a.txt", "operation": "replace"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("operation"),
        "{body}"
    );

    // Chunk and session bounds.
    let id = begin_ok(&app, "bounded.txt", "create").await;
    let (status, body) = send(&app, None, &id, &[b'x'; 65]).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["field"], "body");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRITE_SESSION_MAX_CHUNK_BYTES")
    );
    assert_eq!(body["error"]["details"]["limit"], 64);
    send(&app, None, &id, &[b'x'; 64]).await;
    let (status, body) = send(&app, None, &id, &[b'y'; 40]).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRITE_SESSION_MAX_BYTES")
    );
    assert_eq!(
        state_of(&app, &id).await["bytes_received"],
        64,
        "the refused chunk was not kept"
    );

    // Open sessions per caller: `bounded.txt` is one; two more fill the bound.
    begin_ok(&app, "two.txt", "create").await;
    begin_ok(&app, "three.txt", "create").await;
    let (status, body) = begin(
        &app,
        None,
        json!({"target_file": "four.txt", "operation": "create"}),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRITE_SESSION_MAX_OPEN")
    );

    assert_eq!(app.files_on_disk(), vec!["exists.txt".to_string()]);
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("exists.txt")).unwrap(),
        "keep me"
    );
    assert!(!app.repo_dir.join("bounded.txt").exists());
}

#[tokio::test]
async fn a_session_belongs_to_the_key_that_began_it() {
    let alice = keys::generate("alice");
    let bob = keys::generate("bob");
    let entries = format!(
        "{},{}",
        keys::config_entry(&alice.key).unwrap(),
        keys::config_entry(&bob.key).unwrap()
    );
    let app = spawn(Backend::Sqlite, &[("WRIT_API_KEYS", entries.as_str())]).await;
    let (status, body) = begin(
        &app,
        Some(&alice.key),
        json!({"target_file": "alice.txt", "operation": "create"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();

    let (status, _) = send(&app, Some(&bob.key), &id, b"bob was here\nDONE\n").await;
    assert_eq!(status, 404, "another key's session does not exist for it");
    let r = app
        .client
        .get(app.url(&format!("/write_sessions/{id}")))
        .bearer_auth(&bob.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let (status, _) = send(&app, None, &id, b"anyone\n").await;
    assert_eq!(status, 401);

    let (status, body) = send(&app, Some(&alice.key), &id, b"alice's\nDONE\n").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "done");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("alice.txt")).unwrap(),
        "alice's\n"
    );
}

#[tokio::test]
async fn a_session_whose_whole_content_is_done_writes_an_empty_file() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let id = begin_ok(&app, "empty.txt", "create").await;
    let (_, body) = send(&app, None, &id, b"DONE").await;
    assert_eq!(body["state"], "done", "{body}");
    assert_eq!(std::fs::read(app.repo_dir.join("empty.txt")).unwrap(), b"");
}

#[tokio::test]
async fn racing_finishes_write_once_and_both_answer_the_same_receipt() {
    let app = spawn(Backend::Postgres, &[]).await;
    let id = begin_ok(&app, "raced.txt", "create").await;
    send(&app, None, &id, b"one writer\n").await;
    let finish = format!("/write_sessions/{id}/finish");
    let (a, b) = tokio::join!(post(&app, &finish, None), post(&app, &finish, None));
    assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
    assert_eq!(a.1["receipt"], b.1["receipt"]);
    let (_, ops) = app.json("/operations?filename=raced.txt").await;
    assert_eq!(ops["operations"].as_array().unwrap().len(), 1, "{ops}");
}

#[tokio::test]
async fn chunks_sent_at_once_are_each_kept_exactly_once() {
    let app = spawn(Backend::Postgres, &[]).await;
    let id = begin_ok(&app, "many.txt", "create").await;
    let lines: Vec<String> = (0..8).map(|i| format!("line {i}\n")).collect();
    let mut sends = tokio::task::JoinSet::new();
    for line in &lines {
        let request = app
            .client
            .post(app.url(&format!("/write_sessions/{id}/content")))
            .body(line.clone());
        sends.spawn(async move { answer(request.send().await.unwrap()).await });
    }
    while let Some(sent) = sends.join_next().await {
        let (status, body) = sent.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let body = state_of(&app, &id).await;
    assert_eq!(body["chunks"], 8, "{body}");
    let (_, done) = post(&app, &format!("/write_sessions/{id}/finish"), None).await;
    assert_eq!(done["state"], "done", "{done}");
    let mut written: Vec<String> = std::fs::read_to_string(app.repo_dir.join("many.txt"))
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    written.sort();
    assert_eq!(written, lines, "each chunk once, in some order");
}

#[tokio::test]
async fn a_finalisation_the_server_never_completed_is_failed_with_where_to_look() {
    let app = spawn(Backend::Sqlite, &[("WRITE_SESSION_TTL_SECS", "1")]).await;
    let id = begin_ok(&app, "cut.txt", "create").await;
    // What a process killed between claiming the session and recording the write leaves behind.
    let store = writ_store::connect(&app.database_url).await.unwrap();
    let claimed = store
        .transition_write_session(
            id.parse().unwrap(),
            &writ_core::sessions::SessionTransition {
                at: chrono::Utc::now() - chrono::TimeDelta::seconds(5),
                ..writ_core::sessions::SessionTransition::new(
                    &[writ_core::sessions::SessionState::AwaitingContent],
                    writ_core::sessions::SessionState::Finalizing,
                )
            },
        )
        .await
        .unwrap();
    assert!(claimed);
    let (status, body) = post(&app, &format!("/write_sessions/{id}/finish"), None).await;
    assert_eq!(status, 409, "{body}");
    let body = state_of(&app, &id).await;
    assert_eq!(body["state"], "failed", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains(&format!("POST /write_sessions/{id}")),
        "{body}"
    );
}

#[tokio::test]
async fn a_read_only_key_may_not_begin_a_session_and_the_write_records_its_scope() {
    use writ_core::keys::{Scope, Scopes};
    let key = keys::generate("reader");
    let entry =
        keys::config_entry_with_scopes(&key.key, Some(Scopes::of(&[Scope::Read, Scope::Write])))
            .unwrap();
    let reader = keys::generate("reader-only");
    let reader_entry =
        keys::config_entry_with_scopes(&reader.key, Some(Scopes::of(&[Scope::Read]))).unwrap();
    let entries = format!("{entry},{reader_entry}");
    let app = spawn(Backend::Sqlite, &[("WRIT_API_KEYS", entries.as_str())]).await;

    let (status, body) = begin(
        &app,
        Some(&reader.key),
        json!({"target_file": "r.txt", "operation": "create"}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_scope");

    let (status, body) = begin(
        &app,
        Some(&key.key),
        json!({"target_file": "w.txt", "operation": "create"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let (status, body) = send(&app, Some(&key.key), &id, b"written\nDONE\n").await;
    assert_eq!(status, 200, "{body}");
    // The finalising write is recorded with the scope that allowed it.
    let store = writ_store::connect(&app.database_url).await.unwrap();
    let request_id = body["receipt"]["request_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let request = store.get_request(request_id).await.unwrap().unwrap();
    assert_eq!(request.scope, Some(Scope::Write));
    assert!(request.caller.is_some());
}

#[tokio::test]
async fn an_empty_chunk_is_refused_and_counts_for_nothing() {
    let app = spawn(Backend::Sqlite, &[]).await;
    let id = begin_ok(&app, "empty.txt", "create").await;
    let (status, body) = send(&app, None, &id, b"").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "body", "{body}");
    let state = state_of(&app, &id).await;
    assert_eq!(state["chunks"], 0, "{state}");
    assert_eq!(state["state"], "awaiting_content", "{state}");
}

writ_tests::on_both_backends!(backend:
    a_model_style_session_lands_byte_exact_without_its_done_line,
    a_session_survives_a_restart,
);
