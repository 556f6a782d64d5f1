//! The direct file routes: list, read, write, and the sandbox around them.

use sha2::{Digest, Sha256};
use writ_tests::{TestApp, on_both_backends};

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn a_put_creates_the_file_and_a_get_reads_it_back(app: TestApp) {
    let r = app
        .put_file("src/app.py", "create_dirs=true", "print('hi')\n")
        .await;
    assert_eq!(r.status(), 201);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["operation"], "created");
    assert_eq!(body["bytes"], 12);
    assert_eq!(body["sha256"], sha(b"print('hi')\n"));
    assert_eq!(etag, format!("\"{}\"", sha(b"print('hi')\n")));
    assert_eq!(
        std::fs::read(app.repo_dir.join("src/app.py")).unwrap(),
        b"print('hi')\n"
    );

    let r = app.get("/files/src/app.py").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-writ-truncated"], "false");
    assert_eq!(r.text().await.unwrap(), "print('hi')\n");
}

async fn an_update_says_updated_and_shows_a_numbered_preview(app: TestApp) {
    app.put_file("a.txt", "", "one\n").await;
    let r = app.put_file("a.txt", "", "one\ntwo\n").await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["operation"], "updated");
    assert_eq!(body["previous_sha256"], sha(b"one\n"));
    assert_eq!(body["preview"], "     1\tone\n     2\ttwo\n");
    let r = app.put_file("a.txt", "", "one\ntwo\n").await;
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["operation"],
        "unchanged"
    );
}

async fn mode_create_refuses_an_existing_file_and_leaves_it_alone(app: TestApp) {
    app.put_file("a.txt", "", "original").await;
    let r = app.put_file("a.txt", "mode=create", "new").await;
    assert_eq!(r.status(), 409);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "already_exists");
    assert_eq!(body["error"]["field"], "mode");
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("a.txt")).unwrap(),
        "original"
    );
}

async fn append_adds_to_the_end(app: TestApp) {
    let first = app.put_file("log.txt", "mode=append", "a\n").await;
    assert_eq!(first.status(), 201, "appending to no file creates it");
    let first: serde_json::Value = first.json().await.unwrap();
    assert_eq!(first["operation"], "created");
    assert_eq!(first["bytes"], 2);
    assert_eq!(first["sha256"], sha(b"a\n"));
    assert_eq!(first["previous_sha256"], serde_json::Value::Null);

    let second = app.put_file("log.txt", "mode=append", "b\n").await;
    assert_eq!(second.status(), 200);
    let second: serde_json::Value = second.json().await.unwrap();
    assert_eq!(second["operation"], "updated");
    // The result describes the whole file, not the appended piece.
    assert_eq!(second["bytes"], 4);
    assert_eq!(second["sha256"], sha(b"a\nb\n"));
    assert_eq!(second["previous_sha256"], sha(b"a\n"));
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("log.txt")).unwrap(),
        "a\nb\n"
    );

    let (_, ops) = app.json("/operations?filename=log.txt").await;
    let ops = ops["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 2, "{ops:?}");
    // Newest first.
    let (rec2, rec1) = (&ops[0], &ops[1]);
    for (rec, answer) in [(rec1, &first), (rec2, &second)] {
        assert_eq!(rec["id"], answer["operation_id"]);
        assert_eq!(rec["kind"], "direct");
        assert_eq!(rec["selection"], "direct");
        assert_eq!(rec["status"], "succeeded");
        assert_eq!(rec["operation"], answer["operation"]);
        assert_eq!(rec["bytes"], answer["bytes"]);
        assert_eq!(rec["sha256"], answer["sha256"]);
        assert_eq!(rec["previous_sha256"], answer["previous_sha256"]);
    }
    let (status, op) = app
        .json(&format!(
            "/operations/{}",
            second["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{op}");
    assert_eq!(
        op["content"], "a\nb\n",
        "the record holds the file as written"
    );
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            first["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["content"], "a\n");
}

async fn if_match_refuses_a_stale_hash_with_412_and_accepts_the_current_one(app: TestApp) {
    app.put_file("a.txt", "", "v1").await;
    let stale = sha(b"something else");
    let r = app
        .client
        .put(app.url("/files/a.txt"))
        .header("if-match", format!("\"{stale}\""))
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 412);
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("a.txt")).unwrap(),
        "v1"
    );
    let r = app
        .client
        .put(app.url("/files/a.txt"))
        .header("if-match", sha(b"v1"))
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("a.txt")).unwrap(),
        "v2"
    );
}

async fn invalid_utf8_is_refused_with_its_offsets_unless_replacement_is_asked_for(app: TestApp) {
    let r = app
        .put_file("bad.txt", "", b"ok\xff\xfeok\xc3".to_vec())
        .await;
    assert_eq!(r.status(), 422);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_utf8");
    let invalid = body["error"]["details"]["invalid"].as_array().unwrap();
    assert_eq!(invalid[0]["offset"], 2);
    assert_eq!(invalid.last().unwrap()["offset"], 6);
    assert!(!app.repo_dir.join("bad.txt").exists());

    let r = app
        .put_file("bad.txt", "on_invalid_utf8=replace", b"ok\xffok".to_vec())
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("bad.txt")).unwrap(),
        "ok\u{fffd}ok"
    );
}

async fn a_missing_parent_is_an_error_unless_create_dirs(app: TestApp) {
    let r = app.put_file("deep/er/x.rs", "", "fn main() {}").await;
    assert_eq!(r.status(), 409);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "parent_missing");
    assert!(app.files_on_disk().is_empty());
    let r = app
        .put_file("deep/er/x.rs", "create_dirs=true", "fn main() {}")
        .await;
    assert_eq!(r.status(), 201);
}

async fn every_path_attack_is_refused_and_nothing_is_written_or_recorded(app: TestApp) {
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), app.repo_dir.join("escape")).unwrap();
    std::fs::create_dir(app.repo_dir.join("adir")).unwrap();
    let attacks = [
        "..%2Foutside.txt",
        "a/..%2F..%2Foutside.txt",
        "%2Fetc%2Fpasswd",
        "nul%00byte.txt",
        "escape/planted.txt",
        "escape/../escape/planted.txt",
        "adir",
        "%2E%2E/%2E%2E/x",
    ];
    for attack in attacks {
        let r = app.put_file(attack, "create_dirs=true", "pwned").await;
        let status = r.status().as_u16();
        assert!((400..500).contains(&status), "{attack}: got {status}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            body["error"]["message"].as_str().is_some(),
            "{attack}: {body}"
        );
    }
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing written outside REPO_DIR"
    );
    let (_, ops) = app.json("/operations").await;
    assert_eq!(
        ops["operations"].as_array().unwrap().len(),
        0,
        "a refused write records no operation"
    );
    let r = app.get("/files/escape/x").await;
    assert_eq!(r.status(), 400);
    let r = app.get("/files?dir=escape").await;
    assert_eq!(r.status(), 400);
}

async fn a_long_file_is_cut_at_ten_thousand_characters_with_a_marker(app: TestApp) {
    let content = "é".repeat(12_000);
    app.put_file("big.txt", "", content.clone()).await;
    let r = app.get("/files/big.txt").await;
    assert_eq!(r.headers()["x-writ-truncated"], "true");
    assert_eq!(r.headers()["x-writ-size-chars"], "12000");
    assert_eq!(r.headers()["x-writ-size-bytes"], "24000");
    let text = r.text().await.unwrap();
    assert!(text.starts_with(&"é".repeat(10_000)));
    assert!(!text.starts_with(&"é".repeat(10_001)));
    assert!(
        text.contains("truncated at 10000 of 12000 characters"),
        "{}",
        &text[text.len() - 200..]
    );

    let r = app.get("/files/big.txt?max_chars=20000").await;
    assert_eq!(r.headers()["x-writ-truncated"], "false");
    assert_eq!(r.text().await.unwrap(), content);
    let (status, body) = app.json("/files/big.txt?max_chars=99999999").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "max_chars");
}

async fn listing_shows_names_sizes_and_directories(app: TestApp) {
    app.put_file("b.txt", "", "12345").await;
    app.put_file("sub/a.txt", "create_dirs=true", "x").await;
    let (status, body) = app.json("/files").await;
    assert_eq!(status, 200);
    let entries = body["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["name"], "b.txt");
    assert_eq!(entries[0]["size"], 5);
    assert_eq!(entries[0]["is_dir"], false);
    assert_eq!(entries[1]["name"], "sub");
    assert_eq!(entries[1]["is_dir"], true);
    let (_, body) = app.json("/files?dir=sub").await;
    assert_eq!(body["entries"][0]["name"], "a.txt");
    let (status, body) = app.json("/files?dir=nope").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = app.json("/files?colour=red").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "colour");
}

async fn every_write_is_in_the_audit_log_with_its_content(app: TestApp) {
    let r = app.put_file("a.py", "", "x = 1\n").await;
    let put: serde_json::Value = r.json().await.unwrap();
    let (_, list) = app.json("/operations?filename=a.py").await;
    let ops = list["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["id"], put["operation_id"]);
    assert_eq!(ops[0]["request_id"], put["request_id"]);
    assert_eq!(ops[0]["status"], "succeeded");
    assert_eq!(ops[0]["kind"], "direct");
    assert_eq!(ops[0]["sha256"], sha(b"x = 1\n"));
    let (_, one) = app
        .json(&format!(
            "/operations/{}",
            put["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(one["content"], "x = 1\n");
}

on_both_backends!(
    a_put_creates_the_file_and_a_get_reads_it_back,
    an_update_says_updated_and_shows_a_numbered_preview,
    mode_create_refuses_an_existing_file_and_leaves_it_alone,
    append_adds_to_the_end,
    if_match_refuses_a_stale_hash_with_412_and_accepts_the_current_one,
    invalid_utf8_is_refused_with_its_offsets_unless_replacement_is_asked_for,
    a_missing_parent_is_an_error_unless_create_dirs,
    every_path_attack_is_refused_and_nothing_is_written_or_recorded,
    a_long_file_is_cut_at_ten_thousand_characters_with_a_marker,
    listing_shows_names_sizes_and_directories,
    every_write_is_in_the_audit_log_with_its_content,
);

mod limits {
    use writ_tests::{Backend, spawn_with, test_settings};

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_with_413_naming_the_limit() {
        let (mut settings, dirs) = test_settings(Backend::Sqlite).await;
        settings.max_body_bytes = 1024;
        let app = spawn_with(settings, dirs, Backend::Sqlite).await;
        let r = app.put_file("big.txt", "", vec![b'a'; 4096]).await;
        assert_eq!(r.status(), 413);
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("1024 bytes"),
            "{body}"
        );
        assert!(app.files_on_disk().is_empty());
    }
}

mod audit_down {
    use writ_tests::{Backend, spawn_app};

    #[tokio::test]
    async fn with_the_audit_store_down_a_write_is_refused_with_503_and_resumes_when_it_is_back() {
        let app = spawn_app(Backend::Postgres).await;
        let (admin, name) = writ_tests::cut_off_postgres(&app.database_url).await;

        let r = app.put_file("a.txt", "", "must not land").await;
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "audit_unavailable");
        assert!(
            !app.repo_dir.join("a.txt").exists(),
            "no file without its audit record"
        );
        let (status, ready) = app.json("/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(ready["checks"]["database"]["ok"], false);

        writ_tests::let_postgres_back(&admin, &name).await;
        let r = app.put_file("a.txt", "", "lands now").await;
        assert_eq!(r.status(), 201, "writes resume without a restart");
        let (status, _) = app.json("/readyz").await;
        assert_eq!(status, 200);
    }
}
