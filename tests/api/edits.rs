//! `POST /edits` and the `edit_files` tool end to end: `str_replace` and `apply_patch` over
//! several files, all or nothing, byte for byte outside the edits.

use serde_json::{Value, json};
use writ_tests::{Backend, TestApp, on_both_backends, spawn_app};

async fn post(app: &TestApp, body: Value) -> (u16, Value) {
    let r = app
        .client
        .post(app.url("/edits"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, json)
}

fn seed(app: &TestApp, name: &str, content: &str) {
    let path = app.repo_dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn read(app: &TestApp, name: &str) -> String {
    std::fs::read_to_string(app.repo_dir.join(name)).unwrap()
}

async fn str_replace_changes_three_files_keeping_their_own_line_endings(app: TestApp) {
    seed(&app, "a.py", "def a():\n    return 1\n");
    seed(&app, "b.py", "def b():\r\n    return 2\r\n\r\nX = 1\r\n");
    seed(&app, "c.txt", "one\ntwo\nthree");
    let (status, body) = post(
        &app,
        json!({"files": [
            {"path": "a.py", "edits": [{"old": "return 1", "new": "return 10"}]},
            {"path": "b.py", "edits": [{"old": "    return 2\n", "new": "    return 20\n    # twenty\n"}]},
            {"path": "c.txt", "edits": [{"old": "two", "new": "TWO"}]},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(read(&app, "a.py"), "def a():\n    return 10\n");
    assert_eq!(
        read(&app, "b.py"),
        "def b():\r\n    return 20\r\n    # twenty\r\n\r\nX = 1\r\n"
    );
    assert_eq!(
        read(&app, "c.txt"),
        "one\nTWO\nthree",
        "no final newline added"
    );
    let files = body["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert_eq!(files[1]["change"]["lines_added"], 2, "{body}");
    assert_eq!(files[1]["change"]["lines_removed"], 1, "{body}");
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            files[1]["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["detail"]["change"], files[1]["change"]);
    assert_eq!(op["kind"], "direct");
}

async fn a_patch_with_one_hunk_that_does_not_apply_changes_no_file(app: TestApp) {
    seed(&app, "src/one.py", "def one():\n    return 1\n");
    seed(&app, "src/two.py", "def two():\n    return 2\n");
    let patch = "*** Begin Patch\n*** Update File: src/one.py\n@@ def one():\n-    return 1\n+    return 11\n*** Add File: src/three.py\n+THREE = 3\n*** Update File: src/two.py\n@@ def two():\n-    return 22\n+    return 222\n*** End Patch\n";
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "edit_failed");
    assert_eq!(body["error"]["details"]["path"], "src/two.py");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("'src/two.py' hunk 1"), "{message}");
    assert!(
        message.contains("     2 |     return 2"),
        "the closest lines: {message}"
    );
    assert_eq!(read(&app, "src/one.py"), "def one():\n    return 1\n");
    assert!(!app.repo_dir.join("src/three.py").exists());

    let fixed = patch.replace("-    return 22", "-    return 2");
    let (status, body) = post(&app, json!({"patch": fixed})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(read(&app, "src/one.py"), "def one():\n    return 11\n");
    assert_eq!(read(&app, "src/two.py"), "def two():\n    return 222\n");
    assert_eq!(read(&app, "src/three.py"), "THREE = 3\n");
    let ops: Vec<&str> = body["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["operation"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["updated", "created", "updated"]);
}

async fn a_stale_expected_sha256_is_a_412_and_nothing_changes(app: TestApp) {
    seed(&app, "a.py", "x = 1\n");
    seed(&app, "b.py", "y = 1\n");
    let (status, body) = post(
        &app,
        json!({"files": [
            {"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 2"}]},
            {"path": "b.py", "expected_sha256": "0".repeat(64), "edits": [{"old": "y = 1", "new": "y = 2"}]},
        ]}),
    )
    .await;
    assert_eq!(status, 412, "{body}");
    assert_eq!(body["error"]["code"], "precondition_failed");
    assert_eq!(read(&app, "a.py"), "x = 1\n");
    assert_eq!(read(&app, "b.py"), "y = 1\n");
}

async fn a_text_found_twice_is_refused_unless_replace_all(app: TestApp) {
    seed(&app, "a.py", "x = 1\nx = 1\n");
    let edit = |all: bool| json!({"files": [{"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 2", "replace_all": all}]}]});
    let (status, body) = post(&app, edit(false)).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("occurs 2 times (at lines 1, 2)"),
        "{body}"
    );
    let (status, body) = post(&app, edit(true)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(read(&app, "a.py"), "x = 2\nx = 2\n");
}

async fn a_patch_that_renames_and_deletes_files_applies_whole_and_the_audit_keeps_what_it_removed(
    app: TestApp,
) {
    seed(&app, "src/old_name.py", "def f():\n    return 1\n");
    seed(&app, "src/obsolete.py", "GONE = True\r\n");
    seed(&app, "src/keep.py", "x = 1\n");
    let patch = "*** Begin Patch\n*** Update File: src/old_name.py\n*** Move to: pkg/new_name.py\n@@ def f():\n-    return 1\n+    return 2\n*** Delete File: src/obsolete.py\n*** Update File: src/keep.py\n-x = 1\n+x = 2\n*** End Patch\n";
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 200, "{body}");
    assert!(!app.repo_dir.join("src/old_name.py").exists());
    assert!(!app.repo_dir.join("src/obsolete.py").exists());
    assert_eq!(read(&app, "pkg/new_name.py"), "def f():\n    return 2\n");
    assert_eq!(read(&app, "src/keep.py"), "x = 2\n");
    let files = body["files"].as_array().unwrap();
    let summary: Vec<(&str, &str)> = files
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("src/old_name.py", "deleted"),
            ("pkg/new_name.py", "created"),
            ("src/obsolete.py", "deleted"),
            ("src/keep.py", "updated"),
        ]
    );
    assert_eq!(files[0]["moved_to"], "pkg/new_name.py", "{body}");
    assert_eq!(files[1]["moved_from"], "src/old_name.py", "{body}");
    assert!(files[2].get("sha256").is_none(), "{body}");

    // What undo needs: each removal is an operation of its own that keeps what the file held.
    let (_, deleted) = app
        .json(&format!(
            "/operations/{}",
            files[2]["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(deleted["operation"], "deleted", "{deleted}");
    assert_eq!(deleted["status"], "succeeded", "{deleted}");
    assert_eq!(deleted["content"], "GONE = True\r\n", "{deleted}");
    assert_eq!(deleted["previous_sha256"], files[2]["previous_sha256"]);
    let (_, source) = app
        .json(&format!(
            "/operations/{}",
            files[0]["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(source["content"], "def f():\n    return 1\n", "{source}");
    assert_eq!(source["detail"]["moved_to"], "pkg/new_name.py", "{source}");
    let (_, destination) = app
        .json(&format!(
            "/operations/{}",
            files[1]["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(destination["detail"]["moved_from"], "src/old_name.py");
    assert_eq!(destination["content"], "def f():\n    return 2\n");
}

async fn str_replace_deletes_and_moves_files_and_honours_expected_sha256(app: TestApp) {
    seed(&app, "a.py", "x = 1\n");
    seed(&app, "b.py", "y = 1\n");
    seed(&app, "c.bin", "\u{1}\u{2}");
    let stale = json!({"files": [
        {"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 2"}]},
        {"path": "b.py", "delete": true, "expected_sha256": "0".repeat(64)},
    ]});
    let (status, body) = post(&app, stale).await;
    assert_eq!(status, 412, "{body}");
    assert_eq!(read(&app, "a.py"), "x = 1\n");
    assert_eq!(read(&app, "b.py"), "y = 1\n");

    let (status, body) = post(
        &app,
        json!({"files": [
            {"path": "a.py", "move_to": "lib/a.py", "edits": [{"old": "x = 1", "new": "x = 2"}]},
            {"path": "b.py", "delete": true},
            {"path": "c.bin", "move_to": "data/c.bin"},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(read(&app, "lib/a.py"), "x = 2\n");
    assert!(!app.repo_dir.join("a.py").exists());
    assert!(!app.repo_dir.join("b.py").exists());
    assert_eq!(read(&app, "data/c.bin"), "\u{1}\u{2}");
    assert_eq!(body["files"].as_array().unwrap().len(), 5, "{body}");
}

async fn a_move_onto_an_existing_file_or_a_protected_path_changes_nothing(app: TestApp) {
    seed(&app, "a.py", "x = 1\n");
    seed(&app, "b.py", "y = 1\n");
    seed(&app, ".git/config", "[core]\n");
    let (status, body) = post(
        &app,
        json!({"files": [
            {"path": "b.py", "edits": [{"old": "y = 1", "new": "y = 2"}]},
            {"path": "a.py", "move_to": "b2.py"},
            {"path": "c.py", "delete": true},
        ]}),
    )
    .await;
    assert_eq!(status, 422, "a missing file cannot be deleted: {body}");
    let patch = "*** Begin Patch\n*** Update File: b.py\n-y = 1\n+y = 2\n*** Update File: a.py\n*** Move to: b.py\n*** End Patch\n";
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 422, "{body}");
    let patch = "*** Begin Patch\n*** Update File: a.py\n*** Move to: c.py\n*** End Patch\n";
    seed(&app, "c.py", "z = 1\n");
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a move never replaces a file"),
        "{body}"
    );
    let patch = "*** Begin Patch\n*** Update File: a.py\n-x = 1\n+x = 2\n*** Delete File: .git/config\n*** End Patch\n";
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "protected_path");
    let patch = "*** Begin Patch\n*** Update File: a.py\n*** Move to: .git/hooks/pre-commit\n*** End Patch\n";
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(read(&app, "a.py"), "x = 1\n");
    assert_eq!(read(&app, "b.py"), "y = 1\n");
    assert_eq!(read(&app, "c.py"), "z = 1\n");
    assert_eq!(read(&app, ".git/config"), "[core]\n");
    assert!(!app.repo_dir.join("b2.py").exists());
}

on_both_backends!(
    str_replace_changes_three_files_keeping_their_own_line_endings,
    a_patch_with_one_hunk_that_does_not_apply_changes_no_file,
    a_stale_expected_sha256_is_a_412_and_nothing_changes,
    a_text_found_twice_is_refused_unless_replace_all,
    a_patch_that_renames_and_deletes_files_applies_whole_and_the_audit_keeps_what_it_removed,
    str_replace_deletes_and_moves_files_and_honours_expected_sha256,
    a_move_onto_an_existing_file_or_a_protected_path_changes_nothing,
);

#[tokio::test]
async fn a_one_megabyte_file_is_changed_by_an_edit_with_nothing_cut() {
    let app = spawn_app(Backend::Sqlite).await;
    let big: String = (0..22_500)
        .map(|i| format!("line_{i:05} = {i}  # padding padding padding\n"))
        .collect();
    assert!(big.len() > 1_000_000);
    seed(&app, "big.py", &big);
    let (status, body) = post(
        &app,
        json!({"files": [{"path": "big.py", "edits": [{"old": "line_22499 = 22499", "new": "line_22499 = -1"}]}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let after = read(&app, "big.py");
    assert_eq!(after.len(), big.len() - 3);
    assert_eq!(after, big.replace("line_22499 = 22499", "line_22499 = -1"));
}

#[tokio::test]
async fn edits_that_fail_the_checks_are_not_written_and_edits_that_pass_are() {
    let commands = r#"{"python": ["python3", "{args}"]}"#;
    let app =
        writ_tests::spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_COMMANDS", commands)])
            .await;
    seed(&app, "calc.py", "def add(a, b):\n    return a + b\n");
    seed(
        &app,
        "tests/check_calc.py",
        "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom calc import add\nassert add(2, 3) == 5\nprint('1 passed')\n",
    );
    let edit = |new: &str| {
        json!({"files": [{"path": "calc.py", "edits": [{"old": "return a + b", "new": new}]}],
               "validation": {"commands": [{"name": "python", "args": ["tests/check_calc.py"]}], "timeout_secs": 20}})
    };
    let (status, body) = post(&app, edit("return a - b")).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "validation_failed");
    assert!(
        body["error"]["details"]["output_tail"]
            .as_str()
            .unwrap()
            .contains("AssertionError"),
        "{body}"
    );
    assert_eq!(read(&app, "calc.py"), "def add(a, b):\n    return a + b\n");

    let (status, body) = post(&app, edit("return b + a")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["validated"], true);
    assert_eq!(read(&app, "calc.py"), "def add(a, b):\n    return b + a\n");
}

#[tokio::test]
async fn protected_and_escaping_targets_are_refused_and_nothing_changes() {
    let app = spawn_app(Backend::Sqlite).await;
    seed(&app, ".git/config", "[core]\n");
    seed(&app, "a.py", "x = 1\n");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.py"), "s = 1\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.py"),
        app.repo_dir.join("link.py"),
    )
    .unwrap();
    let patch = |target: &str| {
        format!(
            "*** Begin Patch\n*** Update File: a.py\n-x = 1\n+x = 2\n*** Update File: {target}\n-s = 1\n+s = 2\n*** End Patch\n"
        )
    };
    let (status, body) = post(&app, json!({"patch": patch(".git/config")})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "protected_path");
    let (status, body) = post(&app, json!({"patch": patch("link.py")})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_path");
    assert_eq!(read(&app, "a.py"), "x = 1\n");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.py")).unwrap(),
        "s = 1\n"
    );
}

#[tokio::test]
async fn malformed_requests_name_the_field() {
    let app = spawn_app(Backend::Sqlite).await;
    seed(&app, "a.py", "x = 1\n");
    let cases = [
        (json!({}), "files"),
        (json!({"files": [], "patch": "x"}), "patch"),
        (json!({"patch": "hello"}), "patch"),
        (
            json!({"files": [{"path": "../a.py", "edits": [{"old": "x", "new": "y"}]}]}),
            "files[0].path",
        ),
        (
            json!({"files": [{"path": "a.py", "edits": []}]}),
            "files[0].edits",
        ),
        (
            json!({"files": [{"path": "a.py", "delete": true, "edits": [{"old": "x", "new": "y"}]}]}),
            "files[0].delete",
        ),
        (
            json!({"files": [{"path": "a.py", "move_to": "b.py"}, {"path": "b.py", "delete": true}]}),
            "files[1].path",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = post(&app, body.clone()).await;
        assert_eq!(status, 422, "{body} -> {answer}");
        assert_eq!(answer["error"]["field"], field, "{body} -> {answer}");
    }
    assert_eq!(read(&app, "a.py"), "x = 1\n");
}

#[tokio::test]
async fn the_edit_files_tool_answers_with_the_diff() {
    let app = spawn_app(Backend::Sqlite).await;
    seed(&app, "a.py", "x = 1\n");
    let r = app
        .client
        .post(app.url("/tools/call"))
        .json(&json!({"name": "edit_files", "arguments": {"files": [{"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 2"}]}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let text = body["content"].as_str().unwrap_or_default().to_string() + &body.to_string();
    assert!(text.contains("-x = 1") && text.contains("+x = 2"), "{body}");
    assert_eq!(read(&app, "a.py"), "x = 2\n");
}

#[tokio::test]
async fn the_edit_files_tool_describes_and_performs_deletes_and_moves() {
    let app = spawn_app(Backend::Sqlite).await;
    seed(&app, "a.py", "x = 1\n");
    seed(&app, "b.py", "y = 1\n");
    let (status, tools) = app.json("/tools").await;
    assert_eq!(status, 200, "{tools}");
    let listed = tools.to_string();
    let schema = listed
        .find("\"edit_files\"")
        .map(|at| &listed[at..])
        .unwrap_or_default();
    assert!(
        schema.contains("\"move_to\"") && schema.contains("\"delete\""),
        "{tools}"
    );
    let r = app
        .client
        .post(app.url("/tools/call"))
        .json(&json!({"name": "edit_files", "arguments": {"files": [
            {"path": "a.py", "move_to": "pkg/a.py"},
            {"path": "b.py", "delete": true},
        ]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let text = body["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("deleted 'a.py' (moved to 'pkg/a.py')"),
        "{body}"
    );
    assert!(text.contains("deleted 'b.py'"), "{body}");
    assert_eq!(read(&app, "pkg/a.py"), "x = 1\n");
    assert!(!app.repo_dir.join("a.py").exists());
    assert!(!app.repo_dir.join("b.py").exists());
}

#[tokio::test]
async fn a_patch_keeps_every_lines_own_ending_and_reports_the_punctuation_fallback() {
    let app = spawn_app(Backend::Sqlite).await;
    seed(
        &app,
        "m.txt",
        "same\r\nold\nsame\r\nquote = \u{201C}hi\u{201D}\r\ntail\n",
    );
    // The blank line before the end marker is what models often leave there.
    let patch = "*** Begin Patch\n  *** Update File: m.txt\n@@\n same\n-old\n+new\n@@\n-quote = \"hi\"\n+quote = \"bye\"\n\n*** End Patch\n";
    let (status, body) = post(&app, json!({"patch": patch})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        read(&app, "m.txt"),
        "same\r\nnew\nsame\r\nquote = \"bye\"\r\ntail\n"
    );
    assert_eq!(body["files"][0]["edit_fallback"], "punctuation", "{body}");
}
