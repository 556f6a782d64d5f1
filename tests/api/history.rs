//! Undo (`POST /requests/{id}/undo`, the `undo_request` tool) end to end: a batch over files
//! writ never wrote, in every shape a file comes in, taken back byte for byte and redone; an undo
//! refused over a later change with nothing touched, then forced; deletions, moves and created
//! files put back; a dry run; over MCP.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, FALLBACK, MODELS, TestApp, on_both_backends};

/// The same file in five shapes: CRLF, a BOM, no final newline, all three, and plain.
const SHAPES: [(&str, &[u8]); 5] = [
    ("a.py", b"def f():\r\n    return 1\r\n"),
    ("b.py", b"\xef\xbb\xbfdef f():\n    return 1\n"),
    ("c.py", b"def f():\n    return 1"),
    ("d.py", b"\xef\xbb\xbfdef f():\r\n    return 1"),
    ("e.py", b"def f():\n    return 1\n"),
];

async fn app_with_models(backend: Backend) -> TestApp {
    let app = writ_tests::spawn_app_with_models(backend).await;
    // Every model adds g() to whatever file it is asked for: one candidate, no arbiter.
    for m in MODELS.iter().chain([&ARBITER, &FALLBACK]) {
        app.fake().script(
            m,
            Script::always(Step::code(
                "python",
                "def f():\n    return 1\n\n\ndef g():\n    return 2\n",
            )),
        );
    }
    app
}

fn seed(app: &TestApp, name: &str, content: &[u8]) {
    let path = app.repo_dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn bytes(app: &TestApp, name: &str) -> Option<Vec<u8>> {
    std::fs::read(app.repo_dir.join(name)).ok()
}

async fn undo(app: &TestApp, request_id: &str, body: Value) -> (u16, Value) {
    let r = app
        .client
        .post(app.url(&format!("/requests/{request_id}/undo")))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

async fn five_file_batch(app: &TestApp) -> String {
    for (name, content) in SHAPES {
        seed(app, name, content);
    }
    let files: Vec<Value> = SHAPES
        .iter()
        .map(|(name, _)| json!({"filename": name, "code_description": "add g() returning 2"}))
        .collect();
    let (status, answer) = app
        .post_write_codebase(&json!({"command": "write_codebase", "files": files}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "success", "{answer}");
    for (name, before) in SHAPES {
        let after = bytes(app, name).unwrap();
        assert_ne!(after, before, "{name} was changed by the batch");
        assert!(String::from_utf8_lossy(&after).contains("def g()"));
    }
    answer["request_id"].as_str().unwrap().to_string()
}

async fn a_batch_over_files_of_every_shape_is_undone_byte_for_byte_and_redone(app: TestApp) {
    let batch = five_file_batch(&app).await;
    let written: Vec<Vec<u8>> = SHAPES
        .iter()
        .map(|(n, _)| bytes(&app, n).unwrap())
        .collect();

    let (status, undone) = undo(&app, &batch, json!({})).await;

    assert_eq!(status, 200, "{undone}");
    assert_eq!(undone["undone_request_id"], batch.as_str());
    assert_eq!(undone["files"].as_array().unwrap().len(), 5, "{undone}");
    for (name, before) in SHAPES {
        assert_eq!(bytes(&app, name).as_deref(), Some(before), "{name}");
    }
    assert!(
        undone["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["operation"] == "updated")
    );
    // The undo is a request of its own, recorded like any write.
    let undo_id = undone["request_id"].as_str().unwrap().to_string();
    let (_, ops) = app.json(&format!("/operations?request_id={undo_id}")).await;
    assert_eq!(ops["operations"].as_array().unwrap().len(), 5, "{ops}");

    // Undoing the undo puts the batch back.
    let (status, redone) = undo(&app, &undo_id, json!({})).await;
    assert_eq!(status, 200, "{redone}");
    for ((name, _), after) in SHAPES.iter().zip(&written) {
        assert_eq!(bytes(&app, name).as_ref(), Some(after), "{name}");
    }
}

async fn an_undo_over_a_later_change_is_refused_naming_it_and_touches_nothing_unless_forced(
    app: TestApp,
) {
    let batch = five_file_batch(&app).await;
    let later = app
        .put_file("c.py", "", "def f():\n    return 'mine'\n")
        .await;
    assert_eq!(later.status(), 200);
    let now: Vec<Option<Vec<u8>>> = SHAPES.iter().map(|(n, _)| bytes(&app, n)).collect();

    let (status, refused) = undo(&app, &batch, json!({})).await;

    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "changed_since");
    let named: Vec<&str> = refused["error"]["details"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["c.py"]);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("c.py")
    );
    let after: Vec<Option<Vec<u8>>> = SHAPES.iter().map(|(n, _)| bytes(&app, n)).collect();
    assert_eq!(after, now, "nothing was written");

    let (status, forced) = undo(&app, &batch, json!({"force": true})).await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(
        forced["replaced_later_changes"][0]["path"], "c.py",
        "{forced}"
    );
    for (name, before) in SHAPES {
        assert_eq!(bytes(&app, name).as_deref(), Some(before), "{name}");
    }
}

async fn deletions_moves_and_created_files_are_put_back(app: TestApp) {
    seed(&app, "docs/x.txt", b"x\r\nstays x\r\n");
    seed(&app, "docs/y.txt", b"y");
    let r = app
        .client
        .post(app.url("/edits"))
        .json(&json!({"files": [
            {"path": "docs/x.txt", "delete": true},
            {"path": "docs/y.txt", "move_to": "docs/z.txt"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let edits: Value = r.json().await.unwrap();
    assert_eq!(bytes(&app, "docs/x.txt"), None);
    assert_eq!(bytes(&app, "docs/z.txt").as_deref(), Some(&b"y"[..]));

    let (status, undone) = undo(&app, edits["request_id"].as_str().unwrap(), json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(
        bytes(&app, "docs/x.txt").as_deref(),
        Some(&b"x\r\nstays x\r\n"[..])
    );
    assert_eq!(bytes(&app, "docs/y.txt").as_deref(), Some(&b"y"[..]));
    assert_eq!(
        bytes(&app, "docs/z.txt"),
        None,
        "the move's destination is gone"
    );

    // A created file is removed; undoing again finds nothing left to do.
    let created = app.put_file("new.txt", "", "fresh\n").await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    let id = created["request_id"].as_str().unwrap();
    let (status, undone) = undo(&app, id, json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(undone["files"][0]["operation"], "deleted");
    assert_eq!(bytes(&app, "new.txt"), None);
}

async fn a_dry_run_says_what_would_change_and_writes_nothing(app: TestApp) {
    seed(&app, "a.txt", b"old\n");
    let written = app.put_file("a.txt", "", "new\n").await;
    let written: Value = written.json().await.unwrap();
    let id = written["request_id"].as_str().unwrap();

    let (status, dry) = undo(&app, id, json!({"dry_run": true})).await;

    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["files"][0]["path"], "a.txt");
    assert_eq!(dry["files"][0]["operation"], "updated");
    assert_eq!(dry["files"][0]["change"]["lines_removed"], 1, "{dry}");
    assert_eq!(bytes(&app, "a.txt").as_deref(), Some(&b"new\n"[..]));
    let (_, ops) = app
        .json(&format!(
            "/operations?request_id={}",
            dry["request_id"].as_str().unwrap()
        ))
        .await;
    assert!(
        ops["operations"].as_array().unwrap().is_empty(),
        "nothing recorded: {ops}"
    );
}

async fn unknown_and_malformed_request_ids_are_refused_by_name(app: TestApp) {
    let (status, body) = undo(&app, "01a21a95-cf94-74d7-ac31-84e4aa18957d", json!({})).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = undo(&app, "not-a-uuid", json!({})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "id");
    let (status, body) = undo(
        &app,
        "01a21a95-cf94-74d7-ac31-84e4aa18957d",
        json!({"forse": true}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
}

async fn an_undo_over_mcp_puts_the_file_back(app: TestApp) {
    seed(&app, "m.txt", b"mine\r\n");
    let written = app.put_file("m.txt", "", "theirs\n").await;
    let written: Value = written.json().await.unwrap();

    let answer = super::tools::mcp_stateless(
        &app,
        "tools/call",
        json!({"name": "undo_request", "arguments": {"request_id": written["request_id"]}}),
        false,
    )
    .await;

    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("updated 'm.txt'"), "{text}");
    assert_eq!(bytes(&app, "m.txt").as_deref(), Some(&b"mine\r\n"[..]));
}

on_both_backends!(
    app app_with_models:
    a_batch_over_files_of_every_shape_is_undone_byte_for_byte_and_redone,
    an_undo_over_a_later_change_is_refused_naming_it_and_touches_nothing_unless_forced,
    deletions_moves_and_created_files_are_put_back,
    a_dry_run_says_what_would_change_and_writes_nothing,
    unknown_and_malformed_request_ids_are_refused_by_name,
    an_undo_over_mcp_puts_the_file_back,
);
