//! What a workspace may spend and how hard it may be used, whoever's key uses it: a workspace's
//! budget refuses the next batch in it before any model is called once spent, while another
//! workspace (and the same key there) goes on; its request rate and batch slots are shared by
//! every key using it, and another workspace's are its own (a tool call naming it included). A
//! write through a replica that still holds a deleted workspace is refused; the CLI sets and
//! shows a workspace's budget.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tempfile::TempDir;
use writ_core::keys::{self, Scope, Scopes};
use writ_fake_upstream::{Latency, Script, Step};
use writ_tests::{Backend, TestApp};

/// A server with a fake upstream and a workspaces directory, `extra` settings, an admin key and
/// two agent keys that may use the workspaces `a` and `b`, which are made empty (with `a_body`'s
/// other fields, e.g. a budget, for `a`).
struct Team {
    app: TestApp,
    dir: TempDir,
    admin: String,
    one: String,
    two: String,
}

/// A workspace's request bucket: three requests, then one a minute.
const THREE_THEN_ONE_A_MINUTE: [(&str, &str); 2] = [
    ("WRIT_WORKSPACE_RATE_LIMIT_PER_MIN", "1"),
    ("WRIT_WORKSPACE_RATE_LIMIT_BURST", "3"),
];

async fn team(backend: Backend, extra: &[(&str, &str)], a_body: Value) -> Team {
    let fake = writ_fake_upstream::FakeUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let base = fake.base_url();
    let list = writ_tests::MODELS.join(",");
    let mut settings = vec![
        ("WRIT_WORKSPACES_DIR", root.as_str()),
        ("OPENROUTER_BASE_URL", base.as_str()),
        ("CODE_LIST", list.as_str()),
        ("CODE_MODEL", writ_tests::ARBITER),
        ("CODE_GEN_MODEL", writ_tests::FALLBACK),
        ("WRIT_MODEL_BACKOFF_MS", "10"),
    ];
    settings.extend_from_slice(extra);
    let (settings, dirs) = writ_tests::test_settings_with(backend, &settings).await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let admin = keys::generate_with_scopes(
        "ops",
        Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]),
    );
    store.create_key(&admin.record).await.unwrap();
    let agent = Scopes::of(&[Scope::Read, Scope::Write]);
    let mut one = keys::generate_with_scopes("agent one", agent);
    one.record.workspaces = Some(vec!["a".to_owned(), "b".to_owned()]);
    store.create_key(&one.record).await.unwrap();
    let mut two = keys::generate_with_scopes("agent two", agent);
    two.record.workspaces = Some(vec!["a".to_owned(), "b".to_owned()]);
    store.create_key(&two.record).await.unwrap();
    drop(store);
    let mut app = writ_tests::spawn_with(settings, dirs, backend).await;
    app.fake = Some(fake);
    let mut a = a_body;
    a["name"] = json!("a");
    for body in [a, json!({"name": "b"})] {
        let r = app
            .client
            .post(app.url("/workspaces"))
            .bearer_auth(&admin.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{body}: {}", r.text().await.unwrap());
    }
    Team {
        app,
        dir,
        admin: admin.key,
        one: one.key,
        two: two.key,
    }
}

impl Team {
    async fn send(&self, r: reqwest::RequestBuilder) -> (u16, Value) {
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, key: &str, path: &str) -> (u16, Value) {
        self.send(self.app.client.get(self.app.url(path)).bearer_auth(key))
            .await
    }

    /// A batch of one file in `workspace`; `prefer_async` asks for the job at once.
    async fn batch(
        &self,
        key: &str,
        workspace: &str,
        file: &str,
        prefer_async: bool,
    ) -> (u16, Value) {
        let mut r = self
            .app
            .client
            .post(
                self.app
                    .url(&format!("/workspaces/{workspace}/write_codebase")),
            )
            .bearer_auth(key)
            .json(&json!({"command": "write_codebase",
                "files": [{"filename": file, "code_description": "a function add(a, b) returning the sum"}]}));
        if prefer_async {
            r = r.header("prefer", "respond-async");
        }
        self.send(r).await
    }

    async fn put_budget(&self, workspace: &str, budget: Value) -> (u16, Value) {
        self.send(
            self.app
                .client
                .put(self.app.url(&format!("/workspaces/{workspace}/budget")))
                .bearer_auth(&self.admin)
                .json(&budget),
        )
        .await
    }
}

async fn a_workspace_past_its_budget_refuses_the_next_batch_before_any_model_call_and_another_does_not(
    backend: Backend,
) {
    let t = team(
        backend,
        &[],
        json!({"budget": {"daily_tokens": 1, "monthly_cost": 100.0}}),
    )
    .await;
    // Made with its budget, and nothing spent yet.
    let (status, a) = t.get(&t.admin, "/workspaces/a").await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(
        a["budget"],
        json!({"daily_tokens": 1, "monthly_cost": 100.0})
    );
    assert_eq!(a["spend"][0]["period"], "day");
    assert_eq!(a["spend"][0]["tokens"], 0);
    assert_eq!(a["spend"][0]["tokens_limit"], 1);
    assert_eq!(a["spend"][1]["period"], "month");
    assert_eq!(a["spend"][1]["cost_limit"], 100.0);

    // The first batch starts below the limit, crosses it, and finishes.
    let (status, done) = t.batch(&t.one, "a", "first.py", false).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["results"][0]["success"], true, "{done}");
    let (_, a) = t.get(&t.admin, "/workspaces/a").await;
    let spent = a["spend"][0]["tokens"].as_u64().unwrap();
    assert!(
        spent > 1,
        "the batch's tokens are the workspace's spend: {a}"
    );

    // Now no key may start a batch there, and no model is asked.
    let calls_before = t.app.fake().calls().len();
    for key in [&t.two, &t.one, &t.admin] {
        let (status, refused) = t.batch(key, "a", "second.py", false).await;
        assert_eq!(status, 402, "{refused}");
        let error = &refused["error"];
        assert_eq!(error["code"], "budget_exceeded");
        assert_eq!(error["field"], "daily_tokens");
        assert_eq!(error["details"]["budget"], "workspace");
        assert_eq!(error["details"]["workspace"], "a");
        assert_eq!(error["details"]["limit"], 1.0);
        assert_eq!(error["details"]["spent"], spent as f64);
        assert!(error["details"]["resets_at"].is_string());
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("this workspace's daily budget") && message.contains("'a'"),
            "{message}"
        );
    }
    assert_eq!(t.app.fake().calls().len(), calls_before);
    assert!(!t.dir.path().join("a/second.py").exists());

    // The same key in another workspace, and the key's own spend, are untouched.
    let (status, elsewhere) = t.batch(&t.one, "b", "second.py", false).await;
    assert_eq!(status, 200, "{elsewhere}");
    assert!(t.dir.path().join("b/second.py").exists());
    let (_, b) = t.get(&t.admin, "/workspaces/b").await;
    assert_eq!(b["budget"], json!({}));
    assert!(b["spend"][0]["tokens"].as_u64().unwrap() > 0, "{b}");
    assert!(b["spend"][0].get("tokens_limit").is_none(), "{b}");

    // Each workspace's spend is on /metrics.
    let (_, metrics) = t.get(&t.admin, "/metrics").await;
    let metrics = metrics.as_str().unwrap();
    assert_eq!(
        writ_tests::metric(
            metrics,
            "writ_workspace_spend_tokens",
            &[("workspace", "a"), ("period", "day")]
        ),
        spent as f64
    );

    // A budget that is not one is refused by name; an unknown workspace is 404; only an admin
    // sets one.
    let (status, bad) = t.put_budget("a", json!({"daily_cost": -1})).await;
    assert_eq!(status, 422, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("daily_cost")
    );
    let (status, _) = t.put_budget("nowhere", json!({"daily_tokens": 5})).await;
    assert_eq!(status, 404);
    let (status, _) = t
        .send(
            t.app
                .client
                .put(t.app.url("/workspaces/a/budget"))
                .bearer_auth(&t.one)
                .json(&json!({})),
        )
        .await;
    assert_eq!(status, 403);

    // Lifted, the workspace runs again.
    let (status, lifted) = t.put_budget("a", json!({})).await;
    assert_eq!(status, 200, "{lifted}");
    assert_eq!(lifted["budget"], json!({}));
    let (status, again) = t.batch(&t.two, "a", "second.py", false).await;
    assert_eq!(status, 200, "{again}");
    assert!(t.dir.path().join("a/second.py").exists());
}

async fn two_keys_in_one_workspace_share_its_request_rate_and_another_workspace_keeps_its_own(
    backend: Backend,
) {
    // Three requests into a workspace, then one a minute.
    let t = team(backend, &THREE_THEN_ONE_A_MINUTE, json!({})).await;
    for key in [&t.one, &t.one, &t.two] {
        let (status, body) = t.get(key, "/workspaces/a/files").await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, refused) = t.get(&t.two, "/workspaces/a/files").await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "rate_limited");
    assert_eq!(refused["error"]["details"]["limit"], "workspace");
    assert_eq!(refused["error"]["details"]["workspace"], "a");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("workspace 'a'") && message.contains("WRIT_WORKSPACE_RATE_LIMIT_PER_MIN"),
        "{message}"
    );
    // Another spelling of the name the router serves draws on the same bucket: `%61` is `a`.
    for spelling in ["/workspaces/%61/files", "/workspaces/%61/files/x.py"] {
        let (status, refused) = t.get(&t.one, spelling).await;
        assert_eq!(status, 429, "{spelling}: {refused}");
        assert_eq!(refused["error"]["details"]["workspace"], "a", "{spelling}");
    }
    // Another workspace, and the routes that are in none, are not held back.
    let (status, _) = t.get(&t.two, "/workspaces/b/files").await;
    assert_eq!(status, 200);
    let (status, _) = t.get(&t.admin, "/workspaces").await;
    assert_eq!(status, 200);
}

async fn a_tool_call_naming_a_workspace_draws_on_its_request_bucket_over_tools_call_and_mcp(
    backend: Backend,
) {
    let t = team(backend, &THREE_THEN_ONE_A_MINUTE, json!({})).await;
    let tool_call = |key: &str, workspace: &str| {
        t.app
            .client
            .post(t.app.url("/tools/call"))
            .bearer_auth(key)
            .json(&json!({"name": "list_files", "arguments": {"workspace": workspace}}))
    };
    let config =
        StreamableHttpClientTransportConfig::with_uri(t.app.url("/mcp")).auth_header(t.two.clone());
    let transport = StreamableHttpClientTransport::with_client(t.app.client.clone(), config);
    let mcp = ().serve(transport).await.unwrap();
    let mcp_list = |workspace: &str| {
        CallToolRequestParams::new("list_files")
            .with_arguments(json!({"workspace": workspace}).as_object().unwrap().clone())
    };

    // The bucket's three tokens: a function call, an MCP call and an HTTP request, all in `a`
    // (opening the MCP session is in no workspace and takes none).
    let (status, body) = t.send(tool_call(&t.one, "a")).await;
    assert_eq!(status, 200, "{body}");
    let listed = mcp.call_tool(mcp_list("a")).await.unwrap();
    assert_eq!(listed.is_error, Some(false), "{listed:?}");
    let (status, body) = t.get(&t.one, "/workspaces/a/files").await;
    assert_eq!(status, 200, "{body}");

    // Now each way in is refused as an HTTP request to the workspace is.
    let (status, refused) = t.get(&t.two, "/workspaces/a/files").await;
    assert_eq!(status, 429, "{refused}");
    let r = tool_call(&t.two, "a").send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], refused["error"]["code"]);
    assert_eq!(body["error"]["details"], refused["error"]["details"]);
    assert_eq!(body["error"]["details"]["limit"], "workspace");
    assert_eq!(body["error"]["details"]["workspace"], "a");
    let content = body["content"].as_str().unwrap();
    assert!(
        content.contains("rate_limited") && content.contains("WRIT_WORKSPACE_RATE_LIMIT_PER_MIN"),
        "{content}"
    );
    let over_mcp = mcp.call_tool(mcp_list("a")).await.unwrap();
    assert_eq!(
        over_mcp.is_error,
        Some(true),
        "a tool error, not a protocol error"
    );
    let error = &over_mcp.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["code"], "rate_limited");
    assert_eq!(error["details"], refused["error"]["details"]);
    let text = serde_json::to_string(&over_mcp.content).unwrap();
    assert!(text.contains("workspace 'a'"), "{text}");

    // Another workspace keeps its own bucket, by either way in.
    let (status, body) = t.send(tool_call(&t.two, "b")).await;
    assert_eq!(status, 200, "{body}");
    let listed = mcp.call_tool(mcp_list("b")).await.unwrap();
    assert_eq!(listed.is_error, Some(false), "{listed:?}");
    mcp.cancel().await.unwrap();
}

async fn the_cli_sets_shows_and_clears_a_workspaces_budget(backend: Backend) {
    use writ_server::remote_cli::{Remote, WorkspaceBudget, WorkspacesCommand, workspaces};
    let t = team(backend, &[], json!({})).await;
    let remote = Remote {
        url: t.app.address.clone(),
        api_key: Some(t.admin.clone()),
    };
    let budget = |name: &str, budget: WorkspaceBudget, clear: bool| WorkspacesCommand::Budget {
        name: name.into(),
        budget,
        clear,
    };
    let create = WorkspacesCommand::Create {
        name: "c".into(),
        directory: None,
        worktree_of: None,
        branch: None,
        from: None,
        budget: WorkspaceBudget {
            daily_tokens: Some(1),
            monthly_cost: Some(2.5),
            ..Default::default()
        },
    };
    workspaces(&remote, &create, &mut Vec::new()).await.unwrap();
    let (_, c) = t.get(&t.admin, "/workspaces/c").await;
    assert_eq!(c["budget"], json!({"daily_tokens": 1, "monthly_cost": 2.5}));

    // Set, then shown with the spend; only the limits given are set.
    let mut out = Vec::new();
    let half = WorkspaceBudget {
        daily_cost: Some(0.5),
        ..Default::default()
    };
    workspaces(&remote, &budget("a", half, false), &mut out)
        .await
        .unwrap();
    let shown = String::from_utf8(out).unwrap();
    assert!(
        shown.contains("day\tcost 0.000000 of 0.5\ttokens 0 of no limit"),
        "{shown}"
    );
    assert!(
        shown.contains("month\tcost 0.000000 of no limit"),
        "{shown}"
    );
    let (_, a) = t.get(&t.admin, "/workspaces/a").await;
    assert_eq!(a["budget"], json!({"daily_cost": 0.5}));
    let mut out = Vec::new();
    workspaces(
        &remote,
        &budget("a", WorkspaceBudget::default(), false),
        &mut out,
    )
    .await
    .unwrap();
    assert!(String::from_utf8(out).unwrap().contains("of 0.5"));

    // Refused by name, and for a workspace that is not one; cleared.
    let negative = WorkspaceBudget {
        monthly_tokens: Some(0),
        daily_cost: Some(-1.0),
        ..Default::default()
    };
    let err = workspaces(&remote, &budget("a", negative, false), &mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("daily_cost"), "{err}");
    let err = workspaces(
        &remote,
        &budget("nowhere", WorkspaceBudget::default(), true),
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
    workspaces(
        &remote,
        &budget("a", WorkspaceBudget::default(), true),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    let (_, a) = t.get(&t.admin, "/workspaces/a").await;
    assert_eq!(a["budget"], json!({}));
}

async fn two_keys_in_one_workspace_share_its_batch_slots_and_another_workspace_keeps_its_own(
    backend: Backend,
) {
    let t = team(
        backend,
        &[("WRIT_MAX_BATCHES_PER_WORKSPACE", "1")],
        json!({}),
    )
    .await;
    for m in writ_tests::MODELS {
        t.app.fake().script(
            m,
            Script::always(Step::code("python", "a = 1"))
                .with_latency(Latency::fixed(std::time::Duration::from_millis(1500))),
        );
    }
    let (status, accepted) = t.batch(&t.one, "a", "slow.py", true).await;
    assert_eq!(status, 202, "{accepted}");
    let (status, refused) = t.batch(&t.two, "a", "other.py", true).await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "too_many_batches");
    assert_eq!(refused["error"]["details"]["limit"], "workspace");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("workspace 'a'") && message.contains("WRIT_MAX_BATCHES_PER_WORKSPACE"),
        "{message}"
    );
    let (status, elsewhere) = t.batch(&t.two, "b", "other.py", true).await;
    assert_eq!(status, 202, "{elsewhere}");
    // Once a's batch ends, its slot is free for either key.
    let job = accepted["job_id"].as_str().unwrap();
    for _ in 0..200 {
        let (_, body) = t.get(&t.one, &format!("/workspaces/a/jobs/{job}")).await;
        if body["status"] == "done" || body["status"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut admitted = 0;
    for _ in 0..40 {
        let (status, _) = t.batch(&t.two, "a", "after.py", true).await;
        if status == 202 {
            admitted = status;
            break;
        }
        // The slot is given back just after the job ends.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(admitted, 202);
}

/// A second server on the first's PostgreSQL database, workspaces directory and fake upstream.
async fn replica_of(t: &Team, extra: &[(&str, &str)]) -> TestApp {
    let url = t.app.database_url.clone();
    let root = t.dir.path().to_str().unwrap().to_owned();
    let base = t.app.fake().base_url();
    let list = writ_tests::MODELS.join(",");
    let mut settings = vec![
        ("DATABASE_URL", url.as_str()),
        ("WRIT_WORKSPACES_DIR", root.as_str()),
        ("OPENROUTER_BASE_URL", base.as_str()),
        ("CODE_LIST", list.as_str()),
        ("CODE_MODEL", writ_tests::ARBITER),
        ("CODE_GEN_MODEL", writ_tests::FALLBACK),
    ];
    settings.extend_from_slice(extra);
    let (settings, dirs) = writ_tests::test_settings_with(Backend::Postgres, &settings).await;
    writ_tests::spawn_with(settings, dirs, Backend::Postgres).await
}

#[tokio::test]
async fn two_replicas_share_a_workspaces_budget_and_its_request_bucket() {
    let limits = THREE_THEN_ONE_A_MINUTE;
    let t = team(
        Backend::Postgres,
        &limits,
        json!({"budget": {"daily_tokens": 1}}),
    )
    .await;
    let second = replica_of(&t, &limits).await;
    // One request into `a` on the first replica: the batch that spends the budget.
    let (status, done) = t.batch(&t.one, "a", "first.py", false).await;
    assert_eq!(status, 200, "{done}");
    // The second replica sees the spend and refuses the next batch (the bucket's second token).
    let r = second
        .client
        .post(second.url("/workspaces/a/write_codebase"))
        .bearer_auth(&t.two)
        .json(&json!({"command": "write_codebase",
            "files": [{"filename": "second.py", "code_description": "a constant"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 402);
    let refused: Value = r.json().await.unwrap();
    assert_eq!(refused["error"]["details"]["budget"], "workspace");
    // The third token, on the first replica; then the bucket is empty on both.
    let (status, _) = t.get(&t.one, "/workspaces/a/files").await;
    assert_eq!(status, 200);
    let r = second
        .client
        .get(second.url("/workspaces/a/files"))
        .bearer_auth(&t.two)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        429,
        "one bucket for the workspace on every replica"
    );
    second.stop().await;
}

#[tokio::test]
async fn writes_through_a_replica_that_still_holds_a_deleted_workspace_are_refused_and_write_nothing()
 {
    let t = team(Backend::Postgres, &[], json!({})).await;
    let second = replica_of(&t, &[]).await;
    let on_second = |r: reqwest::RequestBuilder| r.bearer_auth(&t.one);
    std::fs::write(t.dir.path().join("a/kept.txt"), "one\n").unwrap();
    // The second replica opens `a` (a write there) and begins a write session in it.
    let (status, body) = t
        .send(on_second(
            second
                .client
                .put(second.url("/workspaces/a/files/before.txt"))
                .body("before\n"),
        ))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, session) = t
        .send(on_second(
            second
                .client
                .post(second.url("/workspaces/a/write_sessions"))
                .json(&json!({"target_file": "session.txt", "operation": "create", "intent": "a test file"})),
        ))
        .await;
    assert_eq!(status, 201, "{session}");
    let session = session["id"].as_str().unwrap().to_owned();

    // The first replica deletes `a`; the second still has it open.
    let (status, deleted) = t
        .send(
            t.app
                .client
                .delete(t.app.url("/workspaces/a"))
                .bearer_auth(&t.admin),
        )
        .await;
    assert_eq!(status, 200, "{deleted}");
    let (status, _) = t.get(&t.one, "/workspaces/a/files").await;
    assert_eq!(status, 404, "forgotten at once where it was deleted");

    // Every way of writing through the second replica is refused by name, and writes nothing.
    let refused_by_name = |status: u16, body: &Value| {
        assert_eq!(status, 404, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("no workspace named 'a'") && message.contains("deleted"),
            "{message}"
        );
    };
    let (status, body) = t
        .send(on_second(
            second
                .client
                .put(second.url("/workspaces/a/files/after.txt"))
                .body("after\n"),
        ))
        .await;
    refused_by_name(status, &body);
    assert_eq!(body["error"]["field"], "name");
    let (status, body) = t
        .send(on_second(
            second.client.post(second.url("/workspaces/a/edits")).json(
                &json!({"files": [{"path": "kept.txt", "edits": [{"old": "one", "new": "two"}]}]}),
            ),
        ))
        .await;
    refused_by_name(status, &body);
    let (status, body) = t
        .send(on_second(
            second
                .client
                .post(second.url(&format!("/workspaces/a/write_sessions/{session}/content")))
                .header("content-type", "text/plain")
                .body("from a session\n"),
        ))
        .await;
    assert!(status < 300, "{body}");
    let (status, body) = t
        .send(on_second(second.client.post(second.url(&format!(
            "/workspaces/a/write_sessions/{session}/finish"
        )))))
        .await;
    refused_by_name(status, &body);

    let root = t.dir.path().join("a");
    assert!(!root.join("after.txt").exists());
    assert!(!root.join("session.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("kept.txt")).unwrap(),
        "one\n",
        "the files are kept, unchanged"
    );
    assert!(root.join("before.txt").exists());
    second.stop().await;
}

writ_tests::on_both_backends!(backend:
    a_workspace_past_its_budget_refuses_the_next_batch_before_any_model_call_and_another_does_not,
    two_keys_in_one_workspace_share_its_request_rate_and_another_workspace_keeps_its_own,
    a_tool_call_naming_a_workspace_draws_on_its_request_bucket_over_tools_call_and_mcp,
    the_cli_sets_shows_and_clears_a_workspaces_budget,
    two_keys_in_one_workspace_share_its_batch_slots_and_another_workspace_keeps_its_own,
);
