//! Undo and restore end to end: `POST /requests/{id}/undo`, `POST /operations/{id}/restore` and
//! the `undo` tool over MCP, byte for byte on the real filesystem.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use writ_tests::{
    Backend, MODELS, TestApp, on_both_backends, spawn_app, spawn_app_with_models, spawn_with,
    test_settings_with,
};

pub(crate) fn seed(app: &TestApp, name: &str, content: &[u8]) {
    let path = app.repo_dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

pub(crate) fn bytes(app: &TestApp, name: &str) -> Option<Vec<u8>> {
    std::fs::read(app.repo_dir.join(name)).ok()
}

pub(crate) async fn undo(app: &TestApp, request_id: &Value, body: Value) -> (u16, Value) {
    let id = request_id.as_str().unwrap();
    app.post_json(&format!("/requests/{id}/undo"), &body).await
}

/// Five files writ never wrote before, each with its own bytes: CRLF, a BOM, no final newline.
const ORIGINALS: [(&str, &[u8]); 5] = [
    ("crlf.py", b"def a():\r\n    return 1\r\n"),
    ("bom.txt", b"\xEF\xBB\xBFone\ntwo\n"),
    ("no_newline.txt", b"alpha\nbeta"),
    ("mixed.md", b"# title\r\nbody\nend"),
    ("src/deep.rs", b"fn main() {\r\n    println!(\"x\");\r\n}"),
];

async fn edit_the_five(app: &TestApp) -> Value {
    for (name, content) in ORIGINALS {
        seed(app, name, content);
    }
    let (status, body) = app
        .post_json(
            "/edits",
            &json!({"files": [
                {"path": "crlf.py", "edits": [{"old": "return 1", "new": "return 10"}]},
                {"path": "bom.txt", "edits": [{"old": "two", "new": "TWO"}]},
                {"path": "no_newline.txt", "edits": [{"old": "beta", "new": "gamma"}]},
                {"path": "mixed.md", "edits": [{"old": "body", "new": "BODY"}]},
                {"path": "src/deep.rs", "edits": [{"old": "\"x\"", "new": "\"y\""}]},
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn a_five_file_batch_is_undone_byte_for_byte_and_the_undo_is_undone_in_turn(app: TestApp) {
    let batch = edit_the_five(&app).await;
    let edited: Vec<Vec<u8>> = ORIGINALS
        .iter()
        .map(|(n, _)| bytes(&app, n).unwrap())
        .collect();

    let (status, dry) = undo(&app, &batch["request_id"], json!({"dry_run": true})).await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["files"].as_array().unwrap().len(), 5, "{dry}");
    assert!(
        dry["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["action"] == "restore")
    );
    for (i, (name, _)) in ORIGINALS.iter().enumerate() {
        assert_eq!(
            bytes(&app, name).unwrap(),
            edited[i],
            "a dry run writes nothing"
        );
    }

    let (status, undone) = undo(&app, &batch["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(undone["undone_request_id"], batch["request_id"]);
    for (name, original) in ORIGINALS {
        assert_eq!(
            bytes(&app, name).unwrap(),
            original,
            "{name} back byte for byte"
        );
    }
    let (_, ops) = app
        .json(&format!(
            "/operations?request_id={}",
            undone["request_id"].as_str().unwrap()
        ))
        .await;
    let ops = ops["operations"].as_array().unwrap();
    assert_eq!(
        ops.len(),
        5,
        "the undo is recorded as one request of its own"
    );
    assert!(
        ops.iter()
            .all(|op| op["detail"]["undo_of"] == batch["request_id"]),
        "{ops:?}"
    );

    let (status, redone) = undo(&app, &undone["request_id"], json!({})).await;
    assert_eq!(status, 200, "{redone}");
    for (i, (name, _)) in ORIGINALS.iter().enumerate() {
        assert_eq!(
            bytes(&app, name).unwrap(),
            edited[i],
            "undo of the undo redoes {name}"
        );
    }
}

async fn an_undo_is_refused_naming_the_file_changed_since_and_nothing_changes(app: TestApp) {
    let batch = edit_the_five(&app).await;
    let r = app.put_file("bom.txt", "", "someone else's work\n").await;
    assert_eq!(r.status().as_u16(), 200);
    let before: Vec<Option<Vec<u8>>> = ORIGINALS.iter().map(|(n, _)| bytes(&app, n)).collect();

    let (status, refused) = undo(&app, &batch["request_id"], json!({})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "changed_since");
    let changed = refused["error"]["details"]["files"].as_array().unwrap();
    assert_eq!(changed.len(), 1, "{refused}");
    assert_eq!(changed[0]["path"], "bom.txt");
    let after: Vec<Option<Vec<u8>>> = ORIGINALS.iter().map(|(n, _)| bytes(&app, n)).collect();
    assert_eq!(before, after, "a refused undo changes nothing");

    let (status, forced) = undo(&app, &batch["request_id"], json!({"force": true})).await;
    assert_eq!(status, 200, "{forced}");
    let replaced: Vec<&Value> = forced["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["replaced_later_change"] == true)
        .map(|f| &f["path"])
        .collect();
    assert_eq!(replaced, [&json!("bom.txt")]);
    for (name, original) in ORIGINALS {
        assert_eq!(bytes(&app, name).unwrap(), original);
    }
}

async fn deletes_moves_and_creations_are_undone_and_a_request_that_wrote_nothing_says_so(
    app: TestApp,
) {
    seed(&app, "gone.txt", b"keep me\r\n");
    seed(&app, "old/name.bin", b"\x00\x01\x02");
    let (status, edits) = app
        .post_json(
            "/edits",
            &json!({"files": [
                {"path": "gone.txt", "delete": true},
                {"path": "old/name.bin", "move_to": "new/name.bin"},
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{edits}");
    let created = app.put_file("fresh.txt", "mode=create", "new\n").await;
    let created: Value = created.json().await.unwrap();

    let (status, undone) = undo(&app, &edits["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(bytes(&app, "gone.txt").unwrap(), b"keep me\r\n");
    assert_eq!(bytes(&app, "old/name.bin").unwrap(), b"\x00\x01\x02");
    assert!(
        bytes(&app, "new/name.bin").is_none(),
        "the move is taken back"
    );

    let (status, undone) = undo(&app, &created["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(undone["files"][0]["action"], "remove");
    assert!(bytes(&app, "fresh.txt").is_none());

    let (status, again) = undo(&app, &created["request_id"], json!({})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["files"], json!([]), "nothing left to undo");

    let unknown = json!(uuid::Uuid::now_v7().to_string());
    let (status, body) = undo(&app, &unknown, json!({})).await;
    assert_eq!(status, 404, "{body}");
}

async fn a_restore_writes_an_operations_content_back_and_honours_expected_sha256(app: TestApp) {
    let first = app.put_file("v.txt", "", "version one\r\n").await;
    let first: Value = first.json().await.unwrap();
    let second = app.put_file("v.txt", "", "version two").await;
    let second: Value = second.json().await.unwrap();

    let op = first["operation_id"].as_str().unwrap();
    let (status, refused) = app
        .post_json(
            &format!("/operations/{op}/restore"),
            &json!({"expected_sha256": first["sha256"]}),
        )
        .await;
    assert_eq!(status, 412, "{refused}");
    assert_eq!(refused["error"]["code"], "precondition_failed");
    assert_eq!(bytes(&app, "v.txt").unwrap(), b"version two");

    let (status, restored) = app
        .post_json(
            &format!("/operations/{op}/restore"),
            &json!({"expected_sha256": second["sha256"]}),
        )
        .await;
    assert_eq!(status, 200, "{restored}");
    assert_eq!(bytes(&app, "v.txt").unwrap(), b"version one\r\n");

    let (status, undone) = undo(&app, &restored["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(
        bytes(&app, "v.txt").unwrap(),
        b"version two",
        "a restore is undoable"
    );
}

pub(crate) async fn concurrent_undo_and_writes_on_one_file_never_tear_it(app: TestApp) {
    let original = b"original\r\n".repeat(2000);
    seed(&app, "hot.txt", &original);
    let written = app.put_file("hot.txt", "", "by writ\n".repeat(2000)).await;
    let written: Value = written.json().await.unwrap();
    let writer_content = "by a writer\n".repeat(2000);

    let undo_call = undo(&app, &written["request_id"], json!({"force": true}));
    let write_call = app.put_file("hot.txt", "", writer_content.clone());
    let ((status, body), w) = tokio::join!(undo_call, write_call);
    assert!(status == 200 || status == 412, "{status} {body}");
    assert_eq!(w.status().as_u16(), 200);
    let now = bytes(&app, "hot.txt").unwrap();
    assert!(
        now == original || now == writer_content.as_bytes(),
        "the file is one whole version, not a mix"
    );
}

/// An app that keeps contents one second and prunes every second.
async fn forgetful(backend: Backend) -> TestApp {
    let (settings, dirs) = test_settings_with(
        backend,
        &[
            ("WRIT_HISTORY_RETENTION", "1s"),
            ("WRIT_RECONCILE_AFTER_SECS", "1"),
        ],
    )
    .await;
    spawn_with(settings, dirs, backend).await
}

async fn once_the_retention_has_passed_an_undo_answers_history_expired_naming_the_files(
    backend: Backend,
) {
    let app = forgetful(backend).await;
    let batch = edit_the_five(&app).await;
    let edited: Vec<Vec<u8>> = ORIGINALS
        .iter()
        .map(|(n, _)| bytes(&app, n).unwrap())
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let (status, body) = loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let (status, body) = undo(&app, &batch["request_id"], json!({"dry_run": true})).await;
        if status != 200 || std::time::Instant::now() > deadline {
            break (status, body);
        }
    };
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["error"]["code"], "history_expired");
    assert_eq!(
        body["error"]["details"]["files"].as_array().unwrap().len(),
        5,
        "{body}"
    );
    for (i, (name, _)) in ORIGINALS.iter().enumerate() {
        assert_eq!(bytes(&app, name).unwrap(), edited[i], "nothing changed");
    }
}

mod retention {
    use super::*;
    on_both_backends!(
        backend: once_the_retention_has_passed_an_undo_answers_history_expired_naming_the_files
    );
}

on_both_backends!(
    a_five_file_batch_is_undone_byte_for_byte_and_the_undo_is_undone_in_turn,
    an_undo_is_refused_naming_the_file_changed_since_and_nothing_changes,
    deletes_moves_and_creations_are_undone_and_a_request_that_wrote_nothing_says_so,
    a_restore_writes_an_operations_content_back_and_honours_expected_sha256,
    concurrent_undo_and_writes_on_one_file_never_tear_it,
);

#[tokio::test]
async fn a_batch_is_undone_over_mcp() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    for m in MODELS {
        app.fake().script(
            m,
            writ_fake_upstream::Script::always(writ_fake_upstream::Step::code(
                "python",
                "def add(a, b):\n    return a + b",
            )),
        );
    }
    let (status, batch) = app
        .post_write_codebase(&json!({"command": "write_codebase",
            "files": [{"filename": "calc.py", "code_description": "a function add(a, b)"}]}))
        .await;
    assert_eq!(status, 200, "{batch}");
    assert!(bytes(&app, "calc.py").is_some());

    let config = StreamableHttpClientTransportConfig::with_uri(app.url("/mcp"));
    let transport = StreamableHttpClientTransport::with_client(app.client.clone(), config);
    let client = ().serve(transport).await.unwrap();
    let answer = client
        .call_tool(
            CallToolRequestParams::new("undo").with_arguments(
                json!({"request_id": batch["request_id"]})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(answer.is_error, Some(false), "{answer:?}");
    let result = answer.structured_content.unwrap();
    assert_eq!(result["files"][0]["path"], "calc.py");
    assert_eq!(result["files"][0]["action"], "remove");
    assert!(
        bytes(&app, "calc.py").is_none(),
        "the batch's file is removed"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_undo_body_is_checked_and_an_unknown_field_is_named() {
    let app = spawn_app(Backend::Sqlite).await;
    let written = app.put_file("a.txt", "", "a\n").await;
    let written: Value = written.json().await.unwrap();
    let (status, body) = undo(&app, &written["request_id"], json!({"forse": true})).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("forse"),
        "{body}"
    );
    assert_eq!(bytes(&app, "a.txt").unwrap(), b"a\n");
}

mod git;
