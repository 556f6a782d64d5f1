//! The tools agents call: `GET /tools` in the three providers' formats, `POST /tools/call` for
//! every tool (with the failures streamed tool calls produce), and an MCP session over `/mcp`
//! with the official Rust SDK's client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{CallToolRequestParams, ProgressNotificationParam, ProgressToken};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp, spawn_app, spawn_app_with_models};

/// The tools of a server without commands (`run` is offered only with `WRIT_COMMANDS`).
const TOOL_NAMES: [&str; 22] = [
    "write_codebase",
    "list_files",
    "read_file",
    "search_files",
    "write_file",
    "edit_files",
    "list_operations",
    "get_operation",
    "undo",
    "restore",
    "list_changes",
    "show_change",
    "apply_change",
    "reject_change",
    "begin_write_session",
    "append_to_write_session",
    "finish_write_session",
    "claim_paths",
    "list_claims",
    "release_claims",
    "list_overlaps",
    "rebase_workspace",
];

async fn call(app: &TestApp, body: Value) -> (u16, Value) {
    let r = app
        .client
        .post(app.url("/tools/call"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn script_models(app: &TestApp) {
    for (i, m) in MODELS.iter().enumerate() {
        app.fake().script(
            m,
            Script::always(Step::code("python", format!("def f():\n    return {i}\n"))),
        );
    }
    app.fake().script(
        ARBITER,
        Script::always(Step::verdict(2, "returns the most")),
    );
}

/// The README's example request, as the HTTP API documents it.
fn readme_request() -> Value {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let start = readme
        .find("-d '{\n  \"command\": \"write_codebase\"")
        .expect("the README shows a write_codebase request");
    let body = &readme[start + 4..];
    let end = body.find("}'\n").unwrap();
    serde_json::from_str(&body[..=end]).unwrap()
}

/// A small JSON Schema check (the keywords writ's schemas use): enough to say the tool schema
/// accepts a request, and to fail when a field the HTTP API takes is missing from it.
fn accepts(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(alts) = schema["anyOf"].as_array() {
        return alts
            .iter()
            .any(|s| accepts(s, value, at).is_ok())
            .then_some(())
            .ok_or(format!("{at}: no alternative of anyOf accepts {value}"));
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => vec![other.as_str().unwrap()],
        };
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let ok = types.contains(&kind) || (kind == "integer" && types.contains(&"number"));
        if !ok {
            return Err(format!("{at}: {kind} where the schema says {t}"));
        }
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {values:?}"));
    }
    if let Value::Object(obj) = value {
        for r in schema["required"].as_array().into_iter().flatten() {
            if !obj.contains_key(r.as_str().unwrap()) {
                return Err(format!("{at}: required '{r}' missing"));
            }
        }
        for (k, v) in obj {
            match schema["properties"].get(k) {
                Some(s) => accepts(s, v, &format!("{at}.{k}"))?,
                None if schema["additionalProperties"] == false => {
                    return Err(format!("{at}: '{k}' is not in the schema"));
                }
                None => {}
            }
        }
    }
    if let (Value::Array(items), Some(s)) = (value, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            accepts(s, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// Every property path a JSON Schema names (`request.files[].context`), through `anyOf` and
/// array items.
fn properties_of(schema: &Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    for alt in schema["anyOf"].as_array().into_iter().flatten() {
        properties_of(alt, at, out);
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, s) in props {
            let path = format!("{at}.{k}");
            out.insert(path.clone());
            properties_of(s, &path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        properties_of(items, &format!("{at}[]"), out);
    }
}

/// Every key path a JSON value uses, in the form [`properties_of`] names them.
fn keys_used(value: &Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = format!("{at}.{k}");
                out.insert(path.clone());
                keys_used(v, &path, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                keys_used(item, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// Every key anywhere in a Gemini schema, to check it stays inside Gemini's subset.
fn keys_in(schema: &Value, out: &mut std::collections::BTreeSet<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "properties" {
                    for p in v.as_object().unwrap().values() {
                        keys_in(p, out);
                    }
                    out.insert(k.clone());
                    continue;
                }
                out.insert(k.clone());
                keys_in(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| keys_in(i, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_tools_are_declared_in_each_providers_format() {
    let app = spawn_app(Backend::Sqlite).await;

    let (status, openai) = app.json("/tools").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = openai
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "function");
            assert!(t["function"]["description"].as_str().unwrap().len() > 40);
            assert_eq!(t["function"]["parameters"]["type"], "object");
            t["function"]["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names, TOOL_NAMES);
    assert_eq!(app.json("/tools?format=openai").await.1, openai);

    let (_, anthropic) = app.json("/tools?format=anthropic").await;
    for (a, o) in anthropic
        .as_array()
        .unwrap()
        .iter()
        .zip(openai.as_array().unwrap())
    {
        assert_eq!(a["name"], o["function"]["name"]);
        assert_eq!(a["input_schema"], o["function"]["parameters"]);
    }

    let (_, gemini) = app.json("/tools?format=gemini").await;
    let decls = gemini["functionDeclarations"].as_array().unwrap();
    assert_eq!(decls.len(), TOOL_NAMES.len());
    let mut keys = std::collections::BTreeSet::new();
    for d in decls {
        keys_in(&d["parameters"], &mut keys);
    }
    let allowed = [
        "type",
        "description",
        "nullable",
        "enum",
        "items",
        "properties",
        "required",
        "anyOf",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "format",
    ];
    let outside: Vec<&String> = keys
        .iter()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    assert!(outside.is_empty(), "not in Gemini's subset: {outside:?}");
    assert!(!gemini.to_string().contains("\"type\":["), "{gemini}");
    let wc = &decls[0]["parameters"];
    assert_eq!(
        wc["properties"]["files"]["items"]["properties"]["filename"]["nullable"],
        true
    );

    let (status, err) = app.json("/tools?format=mistral").await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["field"], "format");
    assert_eq!(
        err["error"]["message"],
        "format must be one of openai, anthropic, gemini, got 'mistral'"
    );
}

#[tokio::test]
async fn the_write_codebase_schema_accepts_what_the_http_api_accepts() {
    let app = spawn_app(Backend::Sqlite).await;
    let (_, tools) = app.json("/tools?format=anthropic").await;
    let schema = &tools[0]["input_schema"];
    let example = readme_request();
    // The HTTP API takes it...
    let req: writ_core::synthesis::WriteCodebaseRequest =
        serde_json::from_value(example.clone()).unwrap();
    writ_core::synthesis::Batch::parse(req).unwrap();
    // ...and so does the tool's schema, as does a request using every option.
    accepts(schema, &example, "request").unwrap();
    let everything = json!({"command": "write_codebase", "task_description": "t",
        "context": ["docs/"], "constraints": "no globals",
        "files": [{"filename": "a.png", "code_description": "d", "external_imports": [],
                   "internal_imports": ["b.py"], "expected_sha256": "0".repeat(64),
                   "image": {"width": 64, "height": 64, "format": "png"}},
                  {"filename": "b.py", "code_description": "d", "context": ["src/*.py"],
                   "constraints": "typed"}],
        "options": {"models": ["m"], "arbiter_model": "j", "dry_run": true, "atomic": true,
                    "async": false, "image_model": "i", "image": {"format": "png"},
                    "straggler": {"enough": 2, "extra_factor": 0.5},
                    "validation": {"commands": [{"name": "pytest", "args": ["tests/"]}],
                                   "timeout_secs": 30, "repair_rounds": 1, "on_fail": "refuse",
                                   "generate": true, "keep_tests": "tests/test_b.py",
                                   "format": true, "diagnostics": true},
                    "fanout": {"stop_when_passing": true, "first_round": 2},
                    "allow_removals": true, "repo_map_tokens": 500, "commit": true}});
    // The alternatives `everything` cannot hold at once.
    let alternatives = json!({"command": "write_codebase",
        "files": [{"filename": "c.py", "code_description": "d"}],
        "options": {"straggler": {"enough": "all_but_slowest", "extra_ms": 20},
                    "image": {"width": 32, "height": 32}, "review": true,
                    "fanout": {"routing": "adaptive"}, "respect_claims": true}});
    for request in [&everything, &alternatives] {
        let req: writ_core::synthesis::WriteCodebaseRequest =
            serde_json::from_value(request.clone()).unwrap();
        writ_core::synthesis::Batch::parse(req).unwrap();
        accepts(schema, request, "request").unwrap();
    }
    // "Every option" means every one the schema names: a new option fails here until the
    // requests above use it.
    let mut named = std::collections::BTreeSet::new();
    properties_of(schema, "request", &mut named);
    // Every tool's own argument, taken out before the request is parsed.
    named.remove("request.workspace");
    let mut used = std::collections::BTreeSet::new();
    for request in [&everything, &alternatives] {
        keys_used(request, "request", &mut used);
    }
    let missing: Vec<_> = named.difference(&used).collect();
    assert!(
        missing.is_empty(),
        "options no request above uses: {missing:?}"
    );
    // What the HTTP API refuses for its shape, the schema refuses too.
    let unknown = json!({"command": "write_codebase", "files": [{"filename": "a.py", "code_description": "d", "content": "x"}]});
    assert!(accepts(schema, &unknown, "request").is_err());
}

#[tokio::test]
async fn each_tool_runs_through_tools_call() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    script_models(&app);

    let (status, w) = call(
        &app,
        json!({"name": "write_file", "arguments": {"path": "src/a.py", "content": "x = 1\n", "create_dirs": true}}),
    )
    .await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(w["result"]["operation"], "created");
    assert!(
        w["content"]
            .as_str()
            .unwrap()
            .starts_with("created 'src/a.py'")
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("src/a.py")).unwrap(),
        "x = 1\n"
    );

    // OpenAI hands arguments over as a string.
    let (status, r) = call(
        &app,
        json!({"name": "read_file", "arguments": "{\"path\": \"src/a.py\"}"}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["content"], "x = 1\n");
    assert_eq!(r["result"]["sha256"], w["result"]["sha256"]);
    let (_, cut) = call(
        &app,
        json!({"name": "read_file", "arguments": {"path": "src/a.py", "max_chars": 2}}),
    )
    .await;
    assert!(
        cut["content"]
            .as_str()
            .unwrap()
            .starts_with("x \n[writ: 'src/a.py' truncated at 2 of 6")
    );

    let (status, l) = call(&app, json!({"name": "list_files", "input": {"dir": "src"}})).await;
    assert_eq!(status, 200, "{l}");
    assert_eq!(l["result"]["entries"][0]["name"], "a.py");
    assert!(l["content"].as_str().unwrap().contains("a.py (6 bytes)"));

    let (status, b) = call(
        &app,
        json!({"name": "write_codebase", "args": {"command": "write_codebase",
            "files": [{"filename": "src/b.py", "code_description": "a function f"}]}}),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["result"]["status"], "success");
    let text = b["content"].as_str().unwrap();
    assert!(
        text.starts_with("status: success (1 of 1 files succeeded)"),
        "{text}"
    );
    assert!(text.contains("- src/b.py: created"), "{text}");
    assert!(app.repo_dir.join("src/b.py").exists());

    let (status, ops) = call(&app, json!({"name": "list_operations", "arguments": {}})).await;
    assert_eq!(status, 200, "{ops}");
    let list = ops["result"]["operations"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["filename"], "src/b.py");

    let id = list[1]["id"].as_str().unwrap();
    let (status, op) = call(
        &app,
        json!({"name": "get_operation", "arguments": {"id": id}}),
    )
    .await;
    assert_eq!(status, 200, "{op}");
    assert_eq!(op["result"]["content"], "x = 1\n");
    assert!(
        op["content"]
            .as_str()
            .unwrap()
            .ends_with("Content written:\nx = 1\n")
    );
}

#[tokio::test]
async fn truncated_arguments_are_refused_with_where_they_broke_off_and_change_nothing() {
    let app = spawn_app(Backend::Sqlite).await;
    // A streamed tool call cut off inside the content string.
    let truncated = r#"{"path": "a.py", "content": "def f():\n    ret"#;
    let (status, err) = call(&app, json!({"name": "write_file", "arguments": truncated})).await;
    assert_eq!(status, 422, "{err}");
    assert_eq!(err["error"]["code"], "invalid_arguments");
    assert_eq!(err["error"]["field"], "arguments");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("truncated"), "{message}");
    assert!(
        message.contains("EOF while parsing a string at line 1 column 46"),
        "{message}"
    );
    assert!(message.contains("byte offset 46 of 46"), "{message}");
    assert!(
        err["content"]
            .as_str()
            .unwrap()
            .contains("invalid_arguments")
    );

    let (status, err) = call(
        &app,
        json!({"name": "write_file", "arguments": "{\"path\": \"a.py\" \"content\": \"x\"}"}),
    )
    .await;
    assert_eq!(status, 422);
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("expected `,` or `}` at line 1 column 17"),
        "{message}"
    );

    assert!(app.files_on_disk().is_empty());
    let (_, ops) = app.json("/operations").await;
    assert_eq!(ops["operations"], json!([]));
}

#[tokio::test]
async fn refusals_read_as_the_http_api_words_them() {
    let app = spawn_app(Backend::Sqlite).await;
    let (status, err) = call(
        &app,
        json!({"name": "write_file", "arguments": {"path": "../x", "content": "no"}}),
    )
    .await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "invalid_path");
    assert_eq!(err["error"]["field"], "path");
    let (_, http) = app.json("/files?dir=../x").await;
    assert_eq!(err["error"]["message"], http["error"]["message"]);
    assert!(
        err["content"]
            .as_str()
            .unwrap()
            .starts_with("error (invalid_path, field `path`)")
    );

    let (status, err) = call(
        &app,
        json!({"name": "write_file", "arguments": {"path": "a.py", "content": "x", "colour": 1}}),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(err["error"]["field"], "colour");

    let (status, err) = call(
        &app,
        json!({"name": "write_file", "arguments": {"path": "a.py", "content": "x", "expected_sha256": "abc"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["field"], "expected_sha256");

    let (status, err) = call(
        &app,
        json!({"name": "list_operations", "arguments": {"limit": 0}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        err["error"]["message"],
        "limit must be between 1 and 500, got 0"
    );

    let (status, err) = call(&app, json!({"name": "delete_everything", "arguments": {}})).await;
    assert_eq!(status, 404);
    assert_eq!(err["error"]["field"], "name");
    assert_eq!(
        err["error"]["message"],
        format!(
            "no tool named 'delete_everything'; the tools are: {}",
            TOOL_NAMES.join(", ")
        )
    );
    assert!(app.files_on_disk().is_empty());
}

/// Counts the progress notifications the server sends.
#[derive(Clone, Default)]
struct Watcher {
    progress: Arc<AtomicUsize>,
    messages: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ClientHandler for Watcher {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::SeqCst);
        self.messages
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

async fn connect(app: &TestApp, key: Option<&str>) -> RunningService<RoleClient, Watcher> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(app.url("/mcp"));
    if let Some(k) = key {
        config = config.auth_header(k);
    }
    let transport = StreamableHttpClientTransport::with_client(app.client.clone(), config);
    Watcher::default().serve(transport).await.unwrap()
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn an_mcp_client_lists_and_calls_the_tools_over_http() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    script_models(&app);
    let client = connect(&app, None).await;

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, TOOL_NAMES);
    let (_, openai) = app.json("/tools").await;
    assert_eq!(
        Value::Object((*tools[0].input_schema).clone()),
        openai[0]["function"]["parameters"],
        "MCP and function calling declare the same schema"
    );

    let written = client
        .call_tool(
            CallToolRequestParams::new("write_file")
                .with_arguments(args(json!({"path": "notes.md", "content": "# notes\n"}))),
        )
        .await
        .unwrap();
    assert_eq!(written.is_error, Some(false));
    assert_eq!(written.structured_content.unwrap()["operation"], "created");

    let refused = client
        .call_tool(
            CallToolRequestParams::new("read_file").with_arguments(args(json!({"path": "../x"}))),
        )
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let text = refused.content[0].as_text().unwrap().text.clone();
    assert!(
        text.starts_with("error (invalid_path, field `path`)"),
        "{text}"
    );

    // write_codebase with a progress token: progress arrives before the answer.
    let watcher = client.service().clone();
    let mut params = CallToolRequestParams::new("write_codebase").with_arguments(args(json!({
        "command": "write_codebase",
        "files": [{"filename": "f.py", "code_description": "a function f"}]})));
    params.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        ProgressToken(rmcp::model::NumberOrString::Number(7)),
    ));
    let batch = client.call_tool(params).await.unwrap();
    assert_eq!(batch.is_error, Some(false), "{batch:?}");
    assert_eq!(batch.structured_content.unwrap()["status"], "success");
    let messages = watcher.messages.lock().unwrap().clone();
    assert!(
        messages.first().is_some_and(|m| m == "queued: f.py"),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.starts_with("f.py: created (")),
        "{messages:?}"
    );
    assert_eq!(messages.last().map(String::as_str), Some("done: success"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_is_behind_the_api_keys_like_every_route() {
    let key = writ_core::keys::generate("mcp");
    let entry = writ_core::keys::config_entry(&key.key).unwrap();
    let (settings, dirs) =
        writ_tests::test_settings_with(Backend::Sqlite, &[("WRIT_API_KEYS", entry.as_str())]).await;
    let app = writ_tests::spawn_with(settings, dirs, Backend::Sqlite).await;

    let r = app
        .client
        .post(app.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = app
        .client
        .post(app.url("/tools/call"))
        .json(&json!({"name": "list_files"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let client = connect(&app, Some(&key.key)).await;
    let listed = client
        .call_tool(CallToolRequestParams::new("list_files"))
        .await
        .unwrap();
    assert_eq!(listed.is_error, Some(false), "{listed:?}");
    client.cancel().await.unwrap();
}

async fn post_mcp(app: &TestApp, host: Option<&str>, key: Option<&str>) -> (u16, Value) {
    let mut req = app
        .client
        .post(app.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        );
    if let Some(h) = host {
        req = req.header("host", h);
    }
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn an_open_loopback_server_takes_mcp_only_from_loopback_hosts_and_answers_refusals_in_json() {
    let app = spawn_app(Backend::Sqlite).await;
    let (status, _) = post_mcp(&app, None, None).await;
    assert_eq!(status, 200);
    // A page on another name that resolves to 127.0.0.1 (DNS rebinding) is refused, by the same
    // host guard as every route.
    let (status, body) = post_mcp(&app, Some("evil.example"), None).await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed");

    let r = app
        .client
        .post(app.url("/mcp"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "mcp_transport");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("text/event-stream")
    );
}

#[tokio::test]
async fn behind_api_keys_mcp_takes_any_host_like_every_route() {
    let key = writ_core::keys::generate("host");
    let entry = writ_core::keys::config_entry(&key.key).unwrap();
    let (settings, dirs) =
        writ_tests::test_settings_with(Backend::Sqlite, &[("WRIT_API_KEYS", entry.as_str())]).await;
    let app = writ_tests::spawn_with(settings, dirs, Backend::Sqlite).await;
    let (status, body) = post_mcp(&app, Some("writ.internal.example"), Some(&key.key)).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_batch_whose_mcp_caller_cancels_completes_and_is_recorded() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "x = 1\n")).with_latency(
                writ_fake_upstream::Latency::fixed(std::time::Duration::from_millis(400)),
            ),
        );
    }
    let client = connect(&app, None).await;
    let params = CallToolRequestParams::new("write_codebase").with_arguments(args(json!({
        "command": "write_codebase",
        "files": [{"filename": "slow.py", "code_description": "x"}]})));
    // The client gives up while the models are still answering: rmcp sends
    // notifications/cancelled for the abandoned call.
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(150),
        client.call_tool(params),
    )
    .await;
    assert!(gave_up.is_err(), "the call should still be running");
    assert!(!app.repo_dir.join("slow.py").exists());

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, ops) = app.json("/operations?filename=slow.py").await;
        if ops["operations"][0]["status"] == "succeeded" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the batch was not recorded: {ops}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("slow.py")).unwrap(),
        "x = 1\n"
    );
    // The file is written before the job is closed (its answer is stored last): wait for that too.
    loop {
        let (_, jobs) = app.json("/jobs").await;
        if jobs["jobs"][0]["status"] == "done" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the batch's job was not closed: {jobs}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_write_session_runs_through_the_tools_and_ends_with_a_done_line() {
    let app = spawn_app(Backend::Sqlite).await;
    let (status, begun) = call(
        &app,
        json!({"name": "begin_write_session", "arguments": {"target_file": "big.py",
            "operation": "create", "intent": "a module streamed in pieces"}}),
    )
    .await;
    assert_eq!(status, 200, "{begun}");
    assert_eq!(begun["result"]["state"], "awaiting_content");
    let id = begun["result"]["id"].as_str().unwrap().to_string();
    assert!(begun["content"].as_str().unwrap().contains(&id));

    let pieces = ["def f():\n    return 'é", "'\n\n", "print(f())\nDO", "NE\n"];
    let mut last = Value::Null;
    for piece in pieces {
        let (status, answer) = call(
            &app,
            json!({"name": "append_to_write_session", "arguments": {"session_id": id, "chunk": piece}}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        last = answer;
    }
    assert_eq!(last["result"]["state"], "done", "{last}");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("written: created 'big.py'"),
        "{last}"
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("big.py")).unwrap(),
        "def f():\n    return 'é'\n\nprint(f())\n"
    );

    // Finishing again answers the same receipt; an unknown session names its argument.
    let (status, again) = call(
        &app,
        json!({"name": "finish_write_session", "arguments": {"session_id": id}}),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["result"]["receipt"], last["result"]["receipt"]);
    let (status, missing) = call(
        &app,
        json!({"name": "append_to_write_session", "arguments": {"session_id": "nope", "chunk": "x"}}),
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["field"], "session_id");
}

#[tokio::test]
async fn the_run_tool_is_offered_only_when_commands_are_configured() {
    let app = spawn_app(Backend::Sqlite).await;
    let (status, body) = call(
        &app,
        json!({"name": "run", "arguments": {"command": "echo"}}),
    )
    .await;
    assert_eq!(status, 404, "{body}");

    let (settings, dirs) = writ_tests::test_settings_with(
        Backend::Sqlite,
        &[("WRIT_COMMANDS", r#"{"echo": ["echo", "{args}"]}"#)],
    )
    .await;
    let app = writ_tests::spawn_with(settings, dirs, Backend::Sqlite).await;
    let (_, decls) = app.json("/tools?format=anthropic").await;
    let names: Vec<&str> = decls
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"run"), "{names:?}");
    let (status, ran) = call(
        &app,
        json!({"name": "run", "arguments": {"command": "echo", "args": ["hello.txt"]}}),
    )
    .await;
    assert_eq!(status, 200, "{ran}");
    assert_eq!(ran["result"]["exit_code"], 0, "{ran}");
    assert!(
        ran["content"].as_str().unwrap().contains("hello.txt"),
        "{ran}"
    );
    let (status, refused) = call(
        &app,
        json!({"name": "run", "arguments": {"command": "rm", "args": []}}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "command");
}

/// One stateless MCP request (protocol 2026-07-28: no session; the protocol, the client and
/// its capabilities in every request), and its JSON-RPC answer, whether it came as JSON or SSE.
async fn mcp_stateless(app: &TestApp, method: &str, params: Value, tasks: bool) -> Value {
    mcp_stateless_as(app, None, method, params, tasks).await
}

/// [`mcp_stateless`] with an API key.
async fn mcp_stateless_as(
    app: &TestApp,
    key: Option<&str>,
    method: &str,
    params: Value,
    tasks: bool,
) -> Value {
    let mut params = params;
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
    });
    let mut req = app
        .client
        .post(app.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    // The header names what the request is about: the tool, or the task.
    if let Some(name) = params["name"].as_str().or(params["taskId"].as_str()) {
        req = req.header("mcp-name", name);
    }
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let text = req.send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:").or(Some(l)))
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"))
}

#[tokio::test]
async fn a_client_that_takes_tasks_gets_write_codebase_as_a_task_and_polls_it_to_the_answer() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "x = 1\n")).with_latency(
                writ_fake_upstream::Latency::fixed(std::time::Duration::from_millis(300)),
            ),
        );
    }
    let (_, info) = app.json("/readyz").await;
    assert_eq!(info["status"], "ready", "{info}");
    let call = json!({"name": "write_codebase", "arguments": {"command": "write_codebase",
        "files": [{"filename": "tasked.py", "code_description": "x"}]}});
    let created = mcp_stateless(&app, "tools/call", call.clone(), true).await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    let task_id = task["taskId"].as_str().unwrap().to_string();
    // The task's id is the batch's job id: the HTTP API knows it too.
    let (status, _) = app.json(&format!("/jobs/{task_id}")).await;
    assert_eq!(status, 200);
    // Answered before the models: the file is not there yet.
    assert!(!app.repo_dir.join("tasked.py").exists());

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let done = loop {
        let got = mcp_stateless(&app, "tasks/get", json!({"taskId": task_id}), true).await;
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if status == "completed" {
            break got;
        }
        assert_eq!(status, "working", "{got}");
        assert!(std::time::Instant::now() < deadline, "still {got}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let result = &done["result"]["result"];
    assert_eq!(result["isError"], false, "{done}");
    assert_eq!(result["structuredContent"]["succeeded"], 1, "{done}");
    assert_eq!(result["structuredContent"]["request_id"], task_id.as_str());
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("tasked.py")).unwrap(),
        "x = 1\n"
    );

    // Not cancellable once accepted, and said so; an unknown task is an error, not a hang.
    let cancel = mcp_stateless(&app, "tasks/cancel", json!({"taskId": task_id}), true).await;
    assert!(
        cancel["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot be cancelled"),
        "{cancel}"
    );
    let unknown = mcp_stateless(
        &app,
        "tasks/get",
        json!({"taskId": uuid::Uuid::now_v7().to_string()}),
        true,
    )
    .await;
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("no task"),
        "{unknown}"
    );

    // A client that does not declare the extension gets the answer in the call, as before.
    let mut plain = call;
    plain["arguments"]["files"][0]["filename"] = json!("plain.py");
    let answered = mcp_stateless(&app, "tools/call", plain, false).await;
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert_eq!(
        answered["result"]["structuredContent"]["succeeded"], 1,
        "{answered}"
    );
    // And may not poll tasks.
    let refused = mcp_stateless(&app, "tasks/get", json!({"taskId": task_id}), false).await;
    assert!(refused.get("error").is_some(), "{refused}");
}

#[tokio::test]
async fn a_task_is_seen_only_by_the_key_that_started_it() {
    use writ_core::keys::{self, Scope, Scopes};
    let scopes = Some(Scopes::of(&[Scope::Read, Scope::Write]));
    let (mine, theirs) = (keys::generate("mine"), keys::generate("theirs"));
    let entries = [&mine, &theirs]
        .map(|k| keys::config_entry_with_scopes(&k.key, scopes).unwrap())
        .join(",");
    let app =
        writ_tests::spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_API_KEYS", &entries)])
            .await;
    script_models(&app);
    let call = json!({"name": "write_codebase", "arguments": {"command": "write_codebase",
        "files": [{"filename": "owned.py", "code_description": "x"}]}});
    let created = mcp_stateless_as(&app, Some(&mine.key), "tools/call", call, true).await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    let get = json!({"taskId": task_id});
    let seen = mcp_stateless_as(&app, Some(&mine.key), "tasks/get", get.clone(), true).await;
    assert!(seen["result"]["status"].is_string(), "{seen}");
    let hidden = mcp_stateless_as(&app, Some(&theirs.key), "tasks/get", get, true).await;
    assert_eq!(
        hidden["error"]["message"].as_str(),
        Some(format!("no task {task_id}").as_str()),
        "{hidden}"
    );
}

#[tokio::test]
async fn an_mcp_call_to_a_tool_that_does_not_exist_is_the_invalid_params_error() {
    let app = spawn_app(Backend::Sqlite).await;
    let answer = mcp_stateless(
        &app,
        "tools/call",
        json!({"name": "delete_everything", "arguments": {}}),
        false,
    )
    .await;
    assert!(answer.get("result").is_none(), "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        format!(
            "no tool named 'delete_everything'; the tools are: {}",
            TOOL_NAMES.join(", ")
        ),
        "{answer}"
    );
    // A tool that exists and refuses still answers a tool result the model reads.
    let refused = mcp_stateless(
        &app,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "missing.py"}}),
        false,
    )
    .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(app.files_on_disk().is_empty());
}
