//! Review before it lands, end to end: batches, edits and write sessions proposed as change sets
//! (`options.review`, `WRIT_REVIEW`), read, applied per file and per hunk, rejected, undone, on
//! both stores, with the real files checked on disk.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{Backend, MODELS, TestApp, on_both_backends, spawn_app_with_models_and};

/// A Python module of `n` assignments, those in `changed` (1-based) given another value.
fn module(n: usize, changed: &[usize]) -> String {
    (1..=n)
        .map(|i| {
            if changed.contains(&i) {
                format!("v{i} = {}\n", i * 100)
            } else {
                format!("v{i} = {i}\n")
            }
        })
        .collect()
}

fn seed(app: &TestApp, name: &str, content: &str) {
    let path = app.repo_dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn on_disk(app: &TestApp, name: &str) -> Option<String> {
    std::fs::read_to_string(app.repo_dir.join(name)).ok()
}

fn hunk_ids(file: &Value) -> Vec<String> {
    file["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

async fn apply(app: &TestApp, id: &str, body: Value) -> (u16, Value) {
    app.post_json(&format!("/changes/{id}/apply"), &body).await
}

/// Proposes a change of `app.py` (three hunks) through `POST /edits` with review, and returns
/// the answer.
async fn propose_three_hunks(app: &TestApp) -> Value {
    seed(app, "app.py", &module(30, &[]));
    let (status, body) = app
        .post_json(
            "/edits",
            &json!({"files": [{"path": "app.py", "edits": [
                {"old": "v3 = 3\n", "new": "v3 = 300\n"},
                {"old": "v15 = 15\n", "new": "v15 = 1500\n"},
                {"old": "v27 = 27\n", "new": "v27 = 2700\n"},
            ]}], "review": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn a_batch_is_proposed_applied_in_part_undone_and_then_applied_whole(app: TestApp) {
    let base = module(30, &[]);
    seed(&app, "app.py", &base);
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", module(30, &[3, 15, 27]))),
        );
    }
    let (status, proposed) = app
        .post_write_codebase(&json!({"command": "write_codebase",
            "task_description": "retune the settings",
            "files": [
                {"filename": "app.py", "code_description": "multiply v3, v15 and v27 by 100"},
            ],
            "options": {"review": true}}))
        .await;
    assert_eq!(status, 200, "{proposed}");
    assert_eq!(proposed["status"], "awaiting_review", "{proposed}");
    let id = proposed["change_id"].as_str().unwrap().to_string();
    let result = &proposed["results"][0];
    assert_eq!(result["operation"], "proposed");
    assert_eq!(
        result["proposal"]["base_sha256"],
        writ_core::content::sha256_hex(base.as_bytes())
    );
    let ids = hunk_ids(&result["proposal"]);
    assert_eq!(ids.len(), 3, "{result}");
    assert_eq!(on_disk(&app, "app.py").unwrap(), base, "nothing lands");

    let (status, listed) = app.json("/changes").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["changes"][0]["change_id"], id.as_str());
    let (_, shown) = app.json(&format!("/changes/{id}")).await;
    assert_eq!(shown["state"], "open");
    assert_eq!(hunk_ids(&shown["files"][0]), ids, "hunk ids are stable");
    assert_eq!(shown["files"][0]["chosen_model"], MODELS[0]);
    assert_eq!(
        shown["files"][0]["candidates"].as_array().unwrap().len(),
        3,
        "the evidence: every candidate"
    );

    // Two hunks of three.
    let (status, part) = apply(
        &app,
        &id,
        json!({"hunks": {"app.py": [ids[0], ids[2]]}, "comment": "not v15 yet"}),
    )
    .await;
    assert_eq!(status, 200, "{part}");
    assert_eq!(part["state"], "partially_applied");
    assert_eq!(on_disk(&app, "app.py").unwrap(), module(30, &[3, 27]));

    // Undo takes the apply back like any request.
    let (status, undone) = app
        .post_json(
            &format!("/requests/{}/undo", part["request_id"].as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(on_disk(&app, "app.py").unwrap(), base);

    // The rest lands on the base again.
    let (status, rest) = apply(&app, &id, json!({})).await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest["state"], "applied");
    assert_eq!(rest["files"][0]["hunks"], json!([ids[1]]));
    assert_eq!(on_disk(&app, "app.py").unwrap(), module(30, &[15]));
    let (status, again) = apply(&app, &id, json!({})).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "already_applied");

    // The proposal's operation holds the candidates; the decisions count under their model.
    let (_, ops) = app
        .json(&format!(
            "/operations?request_id={}",
            proposed["request_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(ops["operations"][0]["operation"], "proposed", "{ops}");
    let (_, stats) = app.json("/stats/models").await;
    let first = stats["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == MODELS[0])
        .unwrap();
    assert_eq!(first["chosen"], 1, "{first}");
    assert_eq!(first["applied"], 1, "{first}");

    // The change set's own stream: its proposal, then each decision, then it ends.
    let events = app
        .client
        .get(app.url(&format!("/changes/{id}/events")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let names: Vec<&str> = events
        .lines()
        .filter_map(|l| l.strip_prefix("event:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        names,
        ["change_proposed", "change_applied", "change_applied"]
    );
}

async fn a_base_changed_since_is_refused_by_name_then_merged_with_rebase(app: TestApp) {
    let proposed = propose_three_hunks(&app).await;
    let id = proposed["change_id"].as_str().unwrap();
    // Someone changes the file after the proposal, away from its hunks.
    let theirs = format!("# owned by ops\n{}", module(30, &[]));
    seed(&app, "app.py", &theirs);
    let (_, shown) = app.json(&format!("/changes/{id}")).await;
    assert_eq!(shown["state"], "stale", "{shown}");

    let (status, refused) = apply(&app, id, json!({})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "changed_since");
    assert_eq!(refused["error"]["details"]["files"][0]["path"], "app.py");
    assert_eq!(
        on_disk(&app, "app.py").unwrap(),
        theirs,
        "a refusal changes nothing"
    );

    let (status, merged) = apply(&app, id, json!({"rebase": true})).await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["files"][0]["rebased"], true);
    assert_eq!(
        on_disk(&app, "app.py").unwrap(),
        format!("# owned by ops\n{}", module(30, &[3, 15, 27]))
    );
}

async fn a_rebase_onto_a_line_changed_since_answers_the_conflicting_hunk(app: TestApp) {
    let proposed = propose_three_hunks(&app).await;
    let id = proposed["change_id"].as_str().unwrap();
    let ids = hunk_ids(&proposed["files"][0]["proposal"]);
    let theirs = module(30, &[]).replace("v15 = 15\n", "v15 = -15\n");
    seed(&app, "app.py", &theirs);

    let (status, refused) = apply(&app, id, json!({"rebase": true})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "merge_conflict");
    let hunks = &refused["error"]["details"]["files"][0]["hunks"];
    assert_eq!(hunks.as_array().unwrap().len(), 1, "{refused}");
    assert_eq!(hunks[0]["id"], ids[1].as_str());
    assert!(hunks[0]["diff"].as_str().unwrap().contains("+v15 = 1500"));
    assert_eq!(on_disk(&app, "app.py").unwrap(), theirs);
    // The hunks that do not conflict merge on their own.
    let (status, _) = apply(
        &app,
        id,
        json!({"rebase": true, "hunks": {"app.py": [ids[0], ids[2]]}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        on_disk(&app, "app.py").unwrap(),
        module(30, &[3, 27]).replace("v15 = 15\n", "v15 = -15\n")
    );
}

async fn of_two_applies_of_one_change_set_at_once_exactly_one_lands(app: TestApp) {
    let proposed = propose_three_hunks(&app).await;
    let id = proposed["change_id"].as_str().unwrap();
    let (one, two) = tokio::join!(apply(&app, id, json!({})), apply(&app, id, json!({})));
    let statuses = [one.0, two.0];
    assert!(
        statuses.contains(&200) && statuses.contains(&409),
        "{one:?} / {two:?}"
    );
    let lost = if one.0 == 409 { &one.1 } else { &two.1 };
    assert_eq!(lost["error"]["code"], "already_applied", "{lost}");
    assert_eq!(on_disk(&app, "app.py").unwrap(), module(30, &[3, 15, 27]));
    let (_, ops) = app.json("/operations?filename=app.py").await;
    let writes = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["operation"] == "updated")
        .count();
    assert_eq!(writes, 1, "{ops}");
}

async fn refusals_are_clear_and_change_nothing(app: TestApp) {
    let proposed = propose_three_hunks(&app).await;
    let id = proposed["change_id"].as_str().unwrap();
    let before = on_disk(&app, "app.py");

    let unknown = uuid::Uuid::now_v7();
    let (status, body) = apply(&app, &unknown.to_string(), json!({})).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = apply(&app, id, json!({"hunks": {"app.py": ["feedface00"]}})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "unknown_hunk");
    assert_eq!(body["error"]["field"], "hunks.app.py[0]");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("feedface00")
    );
    let (status, body) = apply(&app, id, json!({"files": ["other.py"]})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "files[0]");
    let (status, body) = apply(&app, id, json!({"surprise": true})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "surprise");
    assert_eq!(on_disk(&app, "app.py"), before);

    // Rejected hunks are recorded per file with their model, and counted.
    let ids = hunk_ids(&proposed["files"][0]["proposal"]);
    let (status, rejected) = app
        .post_json(
            &format!("/changes/{id}/reject"),
            &json!({"hunks": {"app.py": [ids[1]]}, "comment": "keep v15"}),
        )
        .await;
    assert_eq!(status, 200, "{rejected}");
    assert_eq!(rejected["state"], "open");
    let (status, body) = apply(&app, id, json!({"hunks": {"app.py": [ids[1]]}})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_rejected");
    let (status, applied) = apply(&app, id, json!({})).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["state"], "partially_applied");
    assert_eq!(on_disk(&app, "app.py").unwrap(), module(30, &[3, 27]));
    let (_, ops) = app.json("/operations?filename=app.py").await;
    let rejection = ops["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["operation"] == "rejected")
        .cloned()
        .unwrap();
    assert_eq!(rejection["detail"]["review"]["comment"], "keep v15");
    let (status, body) = apply(&app, id, json!({})).await;
    assert_eq!(status, 409, "{body}");
}

async fn an_expired_change_set_answers_gone_and_is_not_listed(backend: Backend) {
    let app = spawn_app_with_models_and(backend, &[("WRIT_REVIEW_TTL", "1s")]).await;
    let proposed = propose_three_hunks(&app).await;
    let id = proposed["change_id"].as_str().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    let (status, body) = apply(&app, id, json!({})).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["error"]["code"], "change_expired");
    let (_, shown) = app.json(&format!("/changes/{id}")).await;
    assert_eq!(shown["state"], "expired");
    let (_, listed) = app.json("/changes").await;
    assert!(listed["changes"].as_array().unwrap().is_empty(), "{listed}");
    assert_eq!(on_disk(&app, "app.py").unwrap(), module(30, &[]));
}

async fn the_server_default_holds_a_write_session_for_review(backend: Backend) {
    let app = spawn_app_with_models_and(backend, &[("WRIT_REVIEW", "1")]).await;
    let (status, begun) = app
        .post_json(
            "/write_sessions",
            &json!({"target_file": "notes/big.md", "operation": "create", "create_dirs": true}),
        )
        .await;
    assert_eq!(status, 201, "{begun}");
    let sid = begun["id"].as_str().unwrap();
    let r = app
        .client
        .post(app.url(&format!("/write_sessions/{sid}/content")))
        .body("# Notes\nfirst\nDONE\n")
        .send()
        .await
        .unwrap();
    let done: Value = r.json().await.unwrap();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["receipt"]["operation"], "proposed");
    let id = done["receipt"]["change_id"].as_str().unwrap().to_string();
    assert_eq!(on_disk(&app, "notes/big.md"), None, "nothing lands");
    let (status, applied) = apply(&app, &id, json!({})).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(on_disk(&app, "notes/big.md").unwrap(), "# Notes\nfirst\n");
    // A request that says `review: false` is written at once.
    let (status, edited) = app
        .post_json(
            "/edits",
            &json!({"files": [{"path": "notes/big.md", "edits": [{"old": "first", "new": "second"}]}], "review": false}),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert!(edited.get("change_id").is_none(), "{edited}");
    assert_eq!(on_disk(&app, "notes/big.md").unwrap(), "# Notes\nsecond\n");
}

on_both_backends!(
    app with_models_app:
    a_batch_is_proposed_applied_in_part_undone_and_then_applied_whole,
    a_base_changed_since_is_refused_by_name_then_merged_with_rebase,
    a_rebase_onto_a_line_changed_since_answers_the_conflicting_hunk,
    of_two_applies_of_one_change_set_at_once_exactly_one_lands,
    refusals_are_clear_and_change_nothing,
    an_mcp_client_approves_or_rejects_a_change_set_within_the_call,
);

mod settings {
    use super::*;
    on_both_backends!(
        backend: an_expired_change_set_answers_gone_and_is_not_listed,
        the_server_default_holds_a_write_session_for_review
    );
}

async fn with_models_app(backend: Backend) -> TestApp {
    spawn_app_with_models_and(backend, &[]).await
}

/// A client that takes elicitation and answers writ's question with `approve`.
struct Reviewer {
    approve: bool,
    asked: std::sync::Mutex<Vec<String>>,
}

impl rmcp::ClientHandler for Reviewer {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("reviewer", "1"),
        )
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"approve": self.approve, "comment": "asked in the call"})),
        )
    }
}

/// Over MCP, a client that takes elicitation is asked in the same call whether the change set
/// lands: approved, the file is written; refused, it is rejected and nothing is written. A client
/// without elicitation gets the `change_id` and the change set stays open.
async fn an_mcp_client_approves_or_rejects_a_change_set_within_the_call(app: TestApp) {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let edit = |path: &str| {
        CallToolRequestParams::new("edit_files").with_arguments(
            json!({"files": [{"path": path, "edits": [{"old": "v3 = 3\n", "new": "v3 = 300\n"}]}],
                   "review": true})
            .as_object()
            .unwrap()
            .clone(),
        )
    };
    for (approve, path) in [(true, "yes.py"), (false, "no.py")] {
        seed(&app, path, &module(5, &[]));
        let reviewer = Reviewer {
            approve,
            asked: Default::default(),
        };
        let transport = StreamableHttpClientTransport::with_client(
            app.client.clone(),
            StreamableHttpClientTransportConfig::with_uri(app.url("/mcp")),
        );
        let client = reviewer.serve(transport).await.unwrap();
        let answer = client.call_tool(edit(path)).await.unwrap();
        let result = answer.structured_content.clone().unwrap();
        assert_eq!(answer.is_error, Some(false), "{answer:?}");
        assert_eq!(client.service().asked.lock().unwrap().len(), 1);
        assert!(
            client.service().asked.lock().unwrap()[0].contains(path),
            "the question shows the change"
        );
        let id = result["change_id"].as_str().unwrap();
        let (_, change) = app.json(&format!("/changes/{id}")).await;
        if approve {
            assert_eq!(on_disk(&app, path).unwrap(), module(5, &[3]), "{result}");
            assert_eq!(change["state"], "applied", "{change}");
        } else {
            assert_eq!(on_disk(&app, path).unwrap(), module(5, &[]), "{result}");
            assert_eq!(change["state"], "rejected", "{change}");
        }
        assert!(change.to_string().contains("asked in the call"), "{change}");
        client.cancel().await.unwrap();
    }
    // Without elicitation: the change set waits, open.
    seed(&app, "later.py", &module(5, &[]));
    let transport = StreamableHttpClientTransport::with_client(
        app.client.clone(),
        StreamableHttpClientTransportConfig::with_uri(app.url("/mcp")),
    );
    let client = ().serve(transport).await.unwrap();
    let answer = client.call_tool(edit("later.py")).await.unwrap();
    let result = answer.structured_content.unwrap();
    let id = result["change_id"].as_str().unwrap();
    assert_eq!(app.json(&format!("/changes/{id}")).await.1["state"], "open");
    assert_eq!(on_disk(&app, "later.py").unwrap(), module(5, &[]));
}
