//! API key scopes end to end: every route requires the scope the route table declares, a key
//! without it is refused 403 `insufficient_scope` (naming what was needed and what the key holds),
//! the tools require their own scope on `/tools/call` and over MCP, keys from `WRIT_API_KEYS`
//! and from the store carry scopes, and the audit record says which scope allowed a write.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use uuid::Uuid;
use writ_core::keys::{self, Scope, Scopes};
use writ_server::access::Access;
use writ_server::routes::api_routes;
use writ_tests::{Backend, TestApp};

/// The routes answered without a key: the probes, and the dashboard's page (it holds no data and
/// asks the person for a key before it reads any). A route added to this list is a decision.
const OPEN_PATHS: [&str; 3] = ["/", "/healthz", "/readyz"];

const COMMANDS: &str = r#"{"echo": ["echo", "{args}"]}"#;

/// Keys by what they hold: one per single scope, and one per "everything but this scope".
struct Keys {
    only: Vec<(Scope, String)>,
    all_but: Vec<(Scope, String)>,
    /// A `WRIT_API_KEYS` entry without scopes, as written before scopes existed.
    legacy: String,
}

impl Keys {
    fn only(&self, scope: Scope) -> &str {
        &self.only.iter().find(|(s, _)| *s == scope).unwrap().1
    }

    fn all_but(&self, scope: Scope) -> &str {
        &self.all_but.iter().find(|(s, _)| *s == scope).unwrap().1
    }
}

/// A server whose keys are all in `WRIT_API_KEYS`, with `echo` as a command.
async fn app_with_keys() -> (TestApp, Keys) {
    let mut entries = Vec::new();
    let mut only = Vec::new();
    let mut all_but = Vec::new();
    for scope in Scope::ALL {
        let key = keys::generate(scope.as_str());
        entries.push(keys::config_entry_with_scopes(&key.key, Some(Scopes::of(&[scope]))).unwrap());
        only.push((scope, key.key));
        let rest: Vec<Scope> = Scope::ALL.into_iter().filter(|s| *s != scope).collect();
        let key = keys::generate("rest");
        entries.push(keys::config_entry_with_scopes(&key.key, Some(Scopes::of(&rest))).unwrap());
        all_but.push((scope, key.key));
    }
    let legacy = keys::generate("legacy");
    entries.push(keys::config_entry(&legacy.key).unwrap());
    let entries = entries.join(",");
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[
            ("WRIT_API_KEYS", entries.as_str()),
            ("WRIT_COMMANDS", COMMANDS),
        ],
    )
    .await;
    let keys = Keys {
        only,
        all_but,
        legacy: legacy.key,
    };
    (app, keys)
}

/// The route's path with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{*path}", "scoped.txt")
        .replace("{name}", "default")
        .replace("{*rest}", "files")
        .replace("{id}", &Uuid::now_v7().to_string())
}

async fn call(app: &TestApp, key: Option<&str>, method: &str, path: &str) -> reqwest::Response {
    let mut rb = app
        .client
        .request(method.parse().unwrap(), app.url(&concrete(path)));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    rb = match (method, path) {
        ("PUT", _) => rb.body("hello\n"),
        ("POST", "/run") => rb.json(&json!({"command": "echo", "args": ["hi"]})),
        ("POST", "/tools/call") => rb.json(&json!({"name": "list_files"})),
        ("POST", "/write_codebase") => rb.json(&json!({"command": "write_codebase", "files": []})),
        ("POST", "/mcp") => rb
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        _ => rb,
    };
    rb.send().await.unwrap()
}

#[test]
fn every_route_requires_the_scope_its_method_implies() {
    for route in api_routes() {
        let what = format!("{} {}", route.method, route.path);
        let expected = match (route.method, route.path) {
            (_, p) if OPEN_PATHS.contains(&p) => Access::Open,
            (_, "/mcp") | ("POST", "/tools/call") => Access::PerTool,
            // Inside a workspace: the route inside decides, as a tool does.
            (_, "/workspaces/{name}/{*rest}") => Access::PerTool,
            // A key lists the workspaces it may use (the dashboard's picker).
            ("GET", "/workspaces") => Access::Scope(Scope::Read),
            // Making, merging, budgeting and removing workspaces is administration.
            (
                _,
                "/workspaces"
                | "/workspaces/{name}"
                | "/workspaces/{name}/merge"
                | "/workspaces/{name}/budget",
            ) => Access::Scope(Scope::Admin),
            ("POST", "/run") => Access::Scope(Scope::Run),
            // Setting what a key may spend is key management.
            ("PUT", "/keys/{id}/budget") => Access::Scope(Scope::Admin),
            ("GET", _) => Access::Scope(Scope::Read),
            ("PUT" | "POST" | "DELETE", _) => Access::Scope(Scope::Write),
            _ => panic!("{what}: no rule for this method; decide the scope it needs"),
        };
        assert_eq!(route.access, expected, "{what}");
    }
    let open: Vec<&str> = api_routes()
        .iter()
        .filter(|r| r.access == Access::Open)
        .map(|r| r.path)
        .collect();
    assert_eq!(
        open, OPEN_PATHS,
        "the route table opens exactly the probes and the dashboard"
    );
    let table = writ_server::routes::access_table();
    for path in OPEN_PATHS {
        assert!(
            table.is_open(path),
            "{path}: the auth layer reads it as open"
        );
    }
    assert!(!table.is_open("/write_codebase"));
}

#[tokio::test]
async fn route_by_route_a_key_without_the_scope_is_refused_and_one_with_it_is_let_through() {
    let (app, keys) = app_with_keys().await;
    for route in api_routes() {
        let what = format!("{} {}", route.method, route.path);
        match route.access {
            Access::Open => {
                let r = call(&app, None, route.method, route.path).await;
                assert!(
                    ![401, 403].contains(&r.status().as_u16()),
                    "{what}: {}",
                    r.status()
                );
            }
            Access::Scope(needed) => {
                let r = call(&app, Some(keys.all_but(needed)), route.method, route.path).await;
                assert_eq!(r.status(), 403, "{what}");
                let body: Value = r.json().await.unwrap();
                assert_eq!(
                    body["error"]["code"], "insufficient_scope",
                    "{what}: {body}"
                );
                assert_eq!(body["error"]["details"]["required_scope"], needed.as_str());
                let message = body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(&format!("`{needed}`")),
                    "{what}: {message}"
                );
                assert!(!message.contains(keys.all_but(needed)), "never the key");

                let r = call(&app, Some(keys.only(needed)), route.method, route.path).await;
                assert!(
                    ![401, 403].contains(&r.status().as_u16()),
                    "{what} with only `{needed}`: {}",
                    r.status()
                );
            }
            Access::PerTool => {
                // Any valid key gets in; the tool called decides (see the tool tests below).
                let r = call(&app, Some(keys.only(Scope::Read)), route.method, route.path).await;
                assert!(
                    ![401, 403].contains(&r.status().as_u16()),
                    "{what}: {}",
                    r.status()
                );
                let r = call(&app, None, route.method, route.path).await;
                assert_eq!(r.status(), 401, "{what} without a key");
            }
        }
    }
}

#[tokio::test]
async fn a_read_only_key_can_look_but_not_write_or_run() {
    let (app, keys) = app_with_keys().await;
    let read = keys.only(Scope::Read);
    assert_eq!(call(&app, Some(read), "GET", "/files").await.status(), 200);
    assert_eq!(
        call(&app, Some(read), "GET", "/operations").await.status(),
        200
    );
    // HEAD is served by the GET route and needs what GET needs.
    assert_eq!(call(&app, Some(read), "HEAD", "/files").await.status(), 200);
    let write = keys.only(Scope::Write);
    assert_eq!(
        call(&app, Some(write), "HEAD", "/files").await.status(),
        403
    );
    for (method, path) in [
        ("PUT", "/files/{*path}"),
        ("POST", "/write_codebase"),
        ("POST", "/run"),
    ] {
        let r = call(&app, Some(read), method, path).await;
        assert_eq!(r.status(), 403, "{method} {path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["details"]["key_scopes"], json!(["read"]));
    }
    assert!(!app.repo_dir.join("scoped.txt").exists(), "nothing written");
    let ops: Value = call(&app, Some(read), "GET", "/operations")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ops["operations"], json!([]), "nothing recorded");
}

#[tokio::test]
async fn a_write_key_cannot_run_commands_and_a_run_key_or_a_legacy_key_can() {
    let (app, keys) = app_with_keys().await;
    let write = keys.only(Scope::Write);
    let r = call(&app, Some(write), "POST", "/run").await;
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["details"]["required_scope"], "run");
    assert_eq!(body["error"]["details"]["key_scopes"], json!(["write"]));

    for key in [keys.only(Scope::Run), keys.legacy.as_str()] {
        let r = call(&app, Some(key), "POST", "/run").await;
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert!(body.to_string().contains("hi"), "{body}");
    }
    // Keys from before scopes (no scopes in their entry) keep writing too, but not `admin`.
    assert_eq!(
        call(&app, Some(&keys.legacy), "PUT", "/files/{*path}")
            .await
            .status()
            .as_u16()
            / 100,
        2
    );
}

#[tokio::test]
async fn the_audit_record_names_the_scope_that_allowed_each_call() {
    // A key issued by the store (as `writ keys create` does), with write and run.
    let (settings, dirs) =
        writ_tests::test_settings_with(Backend::Postgres, &[("WRIT_COMMANDS", COMMANDS)]).await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let key = keys::generate_with_scopes("ci", Scopes::of(&[Scope::Write, Scope::Run]));
    store.create_key(&key.record).await.unwrap();
    let app = writ_tests::spawn_with(settings, dirs, Backend::Postgres).await;

    let put_id = Uuid::now_v7();
    let r = app
        .client
        .put(app.url("/files/audited.txt"))
        .bearer_auth(&key.key)
        .header("x-request-id", put_id.to_string())
        .body("hello\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let run_id = Uuid::now_v7();
    let r = app
        .client
        .post(app.url("/run"))
        .bearer_auth(&key.key)
        .header("x-request-id", run_id.to_string())
        .json(&json!({"command": "echo", "args": ["hi"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let tool_id = Uuid::now_v7();
    let r = app
        .client
        .post(app.url("/tools/call"))
        .bearer_auth(&key.key)
        .header("x-request-id", tool_id.to_string())
        .json(&json!({"name": "write_file", "arguments": {"path": "tool.txt", "content": "x\n"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    for (id, scope, route) in [
        (put_id, Scope::Write, "PUT /files/{path}"),
        (run_id, Scope::Run, "POST /run"),
        (tool_id, Scope::Write, "tool write_file"),
    ] {
        let record = store.get_request(id).await.unwrap().unwrap();
        assert_eq!(record.route, route);
        assert_eq!(record.caller.as_deref(), Some(key.record.id.as_str()));
        assert_eq!(record.scope, Some(scope), "{route}");
    }
    // The key has no `read`: it may write but not look.
    let r = app
        .client
        .get(app.url("/operations"))
        .bearer_auth(&key.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn without_keys_every_scope_is_open_and_nothing_is_recorded_as_a_scope() {
    let app = writ_tests::spawn_app(Backend::Sqlite).await;
    let id = Uuid::now_v7();
    let r = app
        .client
        .put(app.url("/files/open.txt"))
        .header("x-request-id", id.to_string())
        .body("hi\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let store = writ_store::connect(&app.database_url).await.unwrap();
    let record = store.get_request(id).await.unwrap().unwrap();
    assert_eq!(record.caller, None);
    assert_eq!(record.scope, None);
}

#[tokio::test]
async fn a_tool_outside_the_keys_scopes_is_refused_on_tools_call_and_over_mcp() {
    let (app, keys) = app_with_keys().await;
    let read = keys.only(Scope::Read);

    let r = app
        .client
        .post(app.url("/tools/call"))
        .bearer_auth(read)
        .json(&json!({"name": "write_file", "arguments": {"path": "t.txt", "content": "x\n"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_scope");
    assert!(
        body["content"].as_str().unwrap().contains("`write`"),
        "{body}"
    );

    let write_only = keys.only(Scope::Write);
    let r = app
        .client
        .post(app.url("/tools/call"))
        .bearer_auth(write_only)
        .json(&json!({"name": "read_file", "arguments": {"path": "t.txt"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "reading needs `read`");

    let config = StreamableHttpClientTransportConfig::with_uri(app.url("/mcp")).auth_header(read);
    let transport = StreamableHttpClientTransport::with_client(app.client.clone(), config);
    let client = ().serve(transport).await.unwrap();
    let listed = client
        .call_tool(CallToolRequestParams::new("list_files"))
        .await
        .unwrap();
    assert_eq!(listed.is_error, Some(false), "{listed:?}");
    let refused = client
        .call_tool(
            CallToolRequestParams::new("write_file").with_arguments(
                json!({"path": "t.txt", "content": "x\n"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        refused.is_error,
        Some(true),
        "a tool error, not a protocol error"
    );
    let text = serde_json::to_string(&refused.content).unwrap();
    assert!(
        text.contains("insufficient_scope") && text.contains("`write`"),
        "{text}"
    );
    client.cancel().await.unwrap();
    assert!(!app.repo_dir.join("t.txt").exists(), "nothing written");
}

#[tokio::test]
async fn a_batch_that_runs_checks_needs_the_run_scope_beside_write() {
    let (app, keys) = app_with_keys().await;
    let body = json!({"command": "write_codebase",
        "files": [{"filename": "a.py", "code_description": "x = 1"}],
        "options": {"validation": {"commands": [{"name": "echo", "args": ["a.py"]}]}}});
    let post = |key: &str| {
        app.client
            .post(app.url("/write_codebase"))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    let r = post(keys.only(Scope::Write)).await.unwrap();
    assert_eq!(r.status(), 403);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "insufficient_scope", "{answer}");
    assert_eq!(answer["error"]["field"], "options.validation", "{answer}");
    assert!(app.fake().calls().is_empty(), "no model was called");
    // With `run` too (every scope but admin), the batch is taken.
    let r = post(keys.all_but(Scope::Admin)).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}
