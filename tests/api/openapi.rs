//! openapi.yaml and the router must describe the same routes.

use std::collections::BTreeSet;

use writ_tests::{Backend, spawn_app};

fn spec() -> yaml_serde::Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml")).unwrap();
    yaml_serde::from_str(&text).unwrap()
}

#[test]
fn the_spec_lists_exactly_the_routes_the_router_serves() {
    let spec = spec();
    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_mapping().unwrap() {
        for (method, _) in item.as_mapping().unwrap() {
            let m = method.as_str().unwrap();
            if ["get", "put", "post", "delete", "patch"].contains(&m) {
                documented.insert(format!("{} {}", m.to_uppercase(), path.as_str().unwrap()));
            }
        }
    }
    let served: BTreeSet<String> = writ_server::routes::api_routes()
        .iter()
        .map(|r| format!("{} {}", r.method, r.openapi_path()))
        .collect();
    assert_eq!(
        documented, served,
        "openapi.yaml and routes::api_routes() have drifted"
    );
}

#[tokio::test]
async fn the_server_serves_the_checked_in_spec() {
    let app = spawn_app(Backend::Sqlite).await;
    let served = app.get("/openapi.yaml").await.text().await.unwrap();
    let on_disk =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml")).unwrap();
    assert_eq!(served, on_disk);
}

/// Every `required` property of the named schema (and of the schemas it references for nested
/// objects and arrays) is present in `value`, and no property is there that the schema lacks.
fn assert_matches_schema(
    spec: &yaml_serde::Value,
    name: &str,
    value: &serde_json::Value,
    at: &str,
) {
    let schema = &spec["components"]["schemas"][name];
    let props = schema["properties"].as_mapping().unwrap();
    let obj = value
        .as_object()
        .unwrap_or_else(|| panic!("{at}: not an object: {value}"));
    for req in schema["required"].as_sequence().into_iter().flatten() {
        let key = req.as_str().unwrap();
        assert!(
            obj.contains_key(key),
            "{at}: '{key}' is required by {name} but missing: {value}"
        );
    }
    for (key, v) in obj {
        let prop = props
            .get(yaml_serde::Value::String(key.clone()))
            .unwrap_or_else(|| panic!("{at}: '{key}' is not in schema {name}"));
        if let (Some(allowed), Some(s)) = (prop["enum"].as_sequence(), v.as_str()) {
            assert!(
                allowed.iter().any(|a| a.as_str() == Some(s)),
                "{at}.{key} = {s:?} is not in the spec's enum {allowed:?}"
            );
        }
        let target = prop["$ref"]
            .as_str()
            .or_else(|| prop["items"]["$ref"].as_str());
        if let Some(r) = target {
            let child = r.rsplit('/').next().unwrap();
            match v {
                serde_json::Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        assert_matches_schema(spec, child, item, &format!("{at}.{key}[{i}]"));
                    }
                }
                serde_json::Value::Object(_) => {
                    assert_matches_schema(spec, child, v, &format!("{at}.{key}"))
                }
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn real_answers_have_the_shapes_the_spec_describes() {
    use writ_fake_upstream::{Script, Step};
    let spec = spec();
    let app = writ_tests::spawn_app_with_models(Backend::Sqlite).await;
    for (i, m) in writ_tests::MODELS.iter().enumerate() {
        app.fake()
            .script(m, Script::always(Step::code("python", format!("v = {i}"))));
    }
    app.fake().script(
        writ_tests::ARBITER,
        Script::always(Step::verdict(1, "fine")),
    );
    let (_, batch) = app
        .post_write_codebase(&serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "a.py", "code_description": "d"}, {"filename": "b.png", "code_description": "d"}]}))
        .await;
    assert_matches_schema(&spec, "WriteCodebaseResponse", &batch, "write_codebase");
    let (_, job) = app
        .json(&format!("/jobs/{}", batch["request_id"].as_str().unwrap()))
        .await;
    assert_matches_schema(&spec, "Job", &job, "job");
    assert_matches_schema(
        &spec,
        "WriteCodebaseResponse",
        &job["response"],
        "job.response",
    );
    let (_, jobs) = app.json("/jobs").await;
    assert_matches_schema(&spec, "Job", &jobs["jobs"][0], "jobs[0]");

    let put: serde_json::Value = app
        .put_file("a.py", "", "v = 9\n")
        .await
        .json()
        .await
        .unwrap();
    assert_matches_schema(&spec, "WriteResult", &put, "put");
    let (_, ops) = app.json("/operations").await;
    for (i, op) in ops["operations"].as_array().unwrap().iter().enumerate() {
        assert_matches_schema(&spec, "Operation", op, &format!("operations[{i}]"));
    }
    let (_, listing) = app.json("/files").await;
    for (i, e) in listing["entries"].as_array().unwrap().iter().enumerate() {
        assert_matches_schema(&spec, "DirEntry", e, &format!("files.entries[{i}]"));
    }
    let (status, accepted) = app
        .post_write_codebase(&serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "c.py", "code_description": "d"}], "options": {"async": true}}))
        .await;
    assert_eq!(status, 202, "{accepted}");
    assert_matches_schema(&spec, "JobAccepted", &accepted, "accepted");
    let (_, ready) = app.json("/readyz").await;
    assert_matches_schema(&spec, "Readiness", &ready, "readyz");
    let (_, err) = app.json("/operations?limit=0").await;
    assert_matches_schema(&spec, "Error", &err, "error");

    // A write session through its states: awaiting content, needs corrections, done.
    let begun: serde_json::Value = app
        .client
        .post(app.url("/write_sessions"))
        .json(&serde_json::json!({"target_file": "s.txt", "operation": "create", "intent": "x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_matches_schema(&spec, "WriteSession", &begun, "write_sessions");
    let id = begun["id"].as_str().unwrap();
    let sent: serde_json::Value = app
        .client
        .post(app.url(&format!("/write_sessions/{id}/content")))
        .body(&b"a\xffb\nDONE\n"[..])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sent["state"], "needs_corrections", "{sent}");
    assert_matches_schema(&spec, "WriteSession", &sent, "write_sessions content");
    let corrected: serde_json::Value = app
        .client
        .post(app.url(&format!("/write_sessions/{id}/corrections")))
        .json(&serde_json::json!({"corrections": [{"offset": 1, "replacement": "-"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(corrected["state"], "done", "{corrected}");
    assert_matches_schema(
        &spec,
        "WriteSession",
        &corrected,
        "write_sessions corrections",
    );
}

// ---- The document pinned to the Rust types ------------------------------------------------

use writ_core::audit::{FileKind, OperationKind, OperationStatus, RequestStatus, Selection};
use writ_core::files::WriteMode;
use writ_core::jobs::JobStatus;
use writ_core::keys::Scope;
use writ_core::model::ErrorClass;
use writ_core::sessions::SessionState;
use writ_core::synthesis::image::ImageFormat;
use writ_core::synthesis::progress::Event;
use writ_server::access::Access;
use writ_server::error::ErrorCode;

/// Every variant of a unit-variant enum, as serde writes it, after checking that each reads back
/// as itself. The `match` makes a variant missing from the list a compile error, so a new variant
/// cannot be added in Rust without this test (and so the spec) hearing of it.
macro_rules! wire_names {
    ($t:ident { $($v:ident),+ $(,)? }) => {{
        fn exhaustive(x: $t) {
            match x { $($t::$v => {}),+ }
        }
        let mut names = BTreeSet::new();
        for v in [$($t::$v),+] {
            exhaustive(v);
            let wire = serde_json::to_value(v).unwrap();
            let back: $t = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(back, v, "{} does not round-trip through serde", stringify!($t));
            assert!(names.insert(wire.as_str().unwrap().to_string()), "duplicate {wire}");
        }
        names
    }};
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The `enum` of the schema found by walking `path` from the document root.
fn spec_enum(spec: &yaml_serde::Value, path: &[&str]) -> BTreeSet<String> {
    let mut node = spec;
    for key in path {
        node = match key.parse::<usize>() {
            Ok(i) if node.is_sequence() => &node[i],
            _ => &node[*key],
        };
    }
    node["enum"]
        .as_sequence()
        .unwrap_or_else(|| panic!("no enum at {}", path.join(".")))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn schema_enum(spec: &yaml_serde::Value, schema: &str, property: &str) -> BTreeSet<String> {
    spec_enum(
        spec,
        &["components", "schemas", schema, "properties", property],
    )
}

/// The names of every progress event, as the `type` tag serde writes.
fn event_names() -> BTreeSet<String> {
    fn exhaustive(e: &Event) {
        match e {
            Event::Queued { .. }
            | Event::FileStarted { .. }
            | Event::CandidateStarted { .. }
            | Event::CandidateFinished { .. }
            | Event::ArbiterStarted { .. }
            | Event::ArbiterChose { .. }
            | Event::ValidationStarted { .. }
            | Event::ValidationFinished { .. }
            | Event::RepairStarted { .. }
            | Event::ChecksGenerated { .. }
            | Event::AgreementComputed { .. }
            | Event::ArbiterAskedInputs { .. }
            | Event::StoppedEarly { .. }
            | Event::RoundStarted { .. }
            | Event::FileWritten { .. }
            | Event::FileFailed { .. }
            | Event::Done { .. } => {}
        }
    }
    let f = || "a.py".to_string();
    let m = || "m/x".to_string();
    let all = [
        Event::Queued { files: vec![f()] },
        Event::FileStarted { file: f() },
        Event::CandidateStarted {
            file: f(),
            model: m(),
        },
        Event::CandidateFinished {
            file: f(),
            model: m(),
            latency_ms: 1,
            ok: true,
            error_class: None,
            parsed: Some(true),
        },
        Event::ArbiterStarted {
            file: f(),
            model: m(),
            candidates: 2,
        },
        Event::ArbiterChose {
            file: f(),
            candidate: 1,
            model: m(),
            reason: "r".into(),
        },
        Event::ValidationStarted {
            file: f(),
            candidates: 2,
        },
        Event::ValidationFinished {
            file: f(),
            model: m(),
            round: 0,
            passed: true,
            exit_code: Some(0),
            duration_ms: 5,
        },
        Event::RepairStarted {
            file: f(),
            round: 1,
            models: 2,
        },
        Event::ChecksGenerated {
            file: f(),
            models: 1,
            tests: 4,
            discarded: 1,
        },
        Event::AgreementComputed {
            file: f(),
            groups: 2,
            tied: 1,
            clusters: None,
        },
        Event::ArbiterAskedInputs {
            file: f(),
            inputs: 2,
        },
        Event::StoppedEarly {
            file: f(),
            passed: m(),
            cancelled: 2,
        },
        Event::RoundStarted {
            file: f(),
            round: 2,
            models: 2,
        },
        Event::FileWritten {
            file: f(),
            operation: "created".into(),
            bytes: 1,
            sha256: "0".repeat(64),
        },
        Event::FileFailed {
            file: f(),
            error: "e".into(),
        },
        Event::Done {
            status: "success".into(),
        },
    ];
    let mut out = BTreeSet::new();
    for e in &all {
        exhaustive(e);
        let wire = serde_json::to_value(e).unwrap();
        let back: Event = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(&back, e);
        assert_eq!(
            wire["type"],
            e.name(),
            "the SSE name and the JSON type agree"
        );
        assert!(out.insert(wire["type"].as_str().unwrap().to_string()));
    }
    assert_eq!(out.len(), all.len(), "each event kind listed once");
    out
}

#[test]
fn every_enum_in_the_spec_lists_exactly_the_values_serde_produces() {
    let spec = spec();
    let minus = |all: &BTreeSet<String>, drop: &[&str]| -> BTreeSet<String> {
        all.difference(&names(drop)).cloned().collect()
    };

    let kinds = wire_names!(FileKind {
        Code,
        Image,
        Direct,
        Run
    });
    assert_eq!(schema_enum(&spec, "Operation", "kind"), kinds);
    // A batch's file is never the caller's own content, nor a command run.
    assert_eq!(
        schema_enum(&spec, "FileResult", "kind"),
        minus(&kinds, &["direct", "run"])
    );

    let selections = wire_names!(Selection {
        SingleCandidate,
        Arbiter,
        ArbiterFailedFirstViable,
        Fallback,
        Rollback,
        Direct,
        Validated,
        ValidatedArbiter,
        Repaired,
        Agreement,
        Behaviour,
        Distinguished,
        AgreementArbiter,
    });
    assert_eq!(schema_enum(&spec, "Operation", "selection"), selections);
    // Rollback and direct are written by the audit log, never chosen for a batch's file.
    assert_eq!(
        schema_enum(&spec, "FileResult", "selection"),
        minus(&selections, &["rollback", "direct"])
    );

    let classes = wire_names!(ErrorClass {
        RequestTimeout,
        RateLimited,
        ServerError,
        Timeout,
        Network,
        MidStream,
        BadResponse,
        BadRequest,
        Unauthorized,
        PaymentRequired,
        Forbidden,
        NotFound,
        CircuitOpen,
        DeadlineExceeded,
        Cancelled,
        NoCode,
        BadImage,
        EditFailed,
        Elided,
        RemovedDefinitions,
        Shrunk,
    });
    assert_eq!(schema_enum(&spec, "Candidate", "error_class"), classes);

    let operations = wire_names!(OperationKind {
        Created,
        Updated,
        Unchanged,
        Failed,
        Deleted
    });
    assert_eq!(schema_enum(&spec, "Operation", "operation"), operations);
    // Only an edit request deletes.
    assert_eq!(
        schema_enum(&spec, "FileResult", "operation"),
        minus(&operations, &["deleted"])
    );
    // A direct write that fails answers an error, not a result.
    assert_eq!(
        schema_enum(&spec, "WriteResult", "operation"),
        minus(&operations, &["failed", "deleted"])
    );

    let statuses = wire_names!(OperationStatus {
        Pending,
        Succeeded,
        Failed
    });
    assert_eq!(schema_enum(&spec, "Operation", "status"), statuses);
    let filter = spec["paths"]["/operations"]["get"]["parameters"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("status"))
        .unwrap();
    assert_eq!(spec_enum(filter, &["schema"]), statuses);

    let requests = wire_names!(RequestStatus {
        Running,
        Success,
        PartialSuccess,
        Error
    });
    // Only a finished batch has a body or a batch status.
    assert_eq!(
        schema_enum(&spec, "WriteCodebaseResponse", "status"),
        minus(&requests, &["running"])
    );
    assert_eq!(
        schema_enum(&spec, "Job", "batch_status"),
        minus(&requests, &["running"])
    );

    let jobs = wire_names!(JobStatus {
        Queued,
        Running,
        Done,
        Failed
    });
    assert_eq!(schema_enum(&spec, "Job", "status"), jobs);
    assert_eq!(
        schema_enum(&spec, "JobAccepted", "status"),
        names(&["queued"])
    );

    let formats = wire_names!(ImageFormat {
        Png,
        Jpeg,
        Gif,
        Webp
    });
    assert_eq!(schema_enum(&spec, "ImageOptions", "format"), formats);

    let session_states = wire_names!(SessionState {
        AwaitingContent,
        AwaitingDoneOrMoreContent,
        NeedsCorrections,
        Finalizing,
        Done,
        Failed,
        Expired
    });
    assert_eq!(schema_enum(&spec, "WriteSession", "state"), session_states);
    let modes = wire_names!(WriteMode {
        Create,
        Overwrite,
        Append
    });
    assert_eq!(schema_enum(&spec, "WriteSession", "operation"), modes);
    assert_eq!(schema_enum(&spec, "WriteSessionBegin", "operation"), modes);
    assert_eq!(
        schema_enum(&spec, "WriteSessionReceipt", "operation"),
        minus(&operations, &["deleted"])
    );

    let events = event_names();
    let sse = &spec["paths"]["/jobs/{id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"]["properties"]["event"];
    assert_eq!(spec_enum(sse, &[]), events);

    let codes = wire_names!(ErrorCode {
        AlreadyExists,
        AuditUnavailable,
        AuthUnavailable,
        BodyTooLarge,
        BudgetExceeded,
        Busy,
        Cancelled,
        ChangedSince,
        CommandsUnavailable,
        Conflict,
        CrossSite,
        EditFailed,
        FileTooLarge,
        HistoryExpired,
        HostNotAllowed,
        IdempotencyConflict,
        IdempotencyInProgress,
        InsufficientScope,
        Internal,
        InvalidArguments,
        InvalidBody,
        InvalidCursor,
        InvalidHeader,
        InvalidParameter,
        InvalidPath,
        InvalidRequest,
        InvalidUtf8,
        McpTransport,
        ModelsUnavailable,
        NoSpace,
        NotADirectory,
        NotAFile,
        NotFound,
        ParentMissing,
        PreconditionFailed,
        ProtectedPath,
        RateLimited,
        RepositoryTooLarge,
        RunQueueFull,
        SessionState,
        TooLarge,
        TooManyBatches,
        TooManyRuns,
        TooManyWriteSessions,
        Unauthorized,
        UnsupportedMediaType,
        ValidationFailed,
    });
    assert_eq!(
        spec_enum(&spec, &["components", "schemas", "ErrorCode"]),
        codes
    );
    for code in &codes {
        let parsed: ErrorCode = serde_json::from_value(serde_json::json!(code)).unwrap();
        assert_eq!(parsed.as_str(), code, "as_str and serde agree");
    }

    // The match makes a new scope a compile error here until the spec lists it.
    fn exhaustive(s: Scope) {
        match s {
            Scope::Read | Scope::Write | Scope::Run | Scope::Admin => {}
        }
    }
    Scope::ALL.into_iter().for_each(exhaustive);
    let scopes: BTreeSet<String> = Scope::ALL.iter().map(|s| s.as_str().to_string()).collect();
    assert_eq!(
        spec_enum(&spec, &["components", "schemas", "Scope"]),
        scopes
    );
    assert_eq!(
        spec_enum(
            &spec,
            &[
                "components",
                "schemas",
                "InsufficientScope",
                "properties",
                "error",
                "properties",
                "code"
            ]
        ),
        names(&["insufficient_scope"])
    );
}

#[test]
fn each_operation_names_the_scope_the_route_table_requires() {
    let spec = spec();
    for route in writ_server::routes::api_routes() {
        let path = route.openapi_path();
        let op = &spec["paths"][path.as_str()][route.method.to_lowercase().as_str()];
        let what = format!("{} {path}", route.method);
        let (declared, answers_403) = match route.access {
            Access::Open => (None, false),
            Access::Scope(scope) => (Some(scope.as_str()), true),
            Access::PerTool => (
                Some("tool"),
                route.path == "/tools/call" || route.path == "/workspaces/{name}/{*rest}",
            ),
        };
        assert_eq!(
            op["x-writ-scope"].as_str(),
            declared,
            "{what}: x-writ-scope"
        );
        assert_eq!(
            op["responses"]["403"].is_mapping(),
            answers_403,
            "{what}: documents 403 insufficient_scope"
        );
    }
}

/// The field names a `deny_unknown_fields` struct accepts, read from serde's own refusal of an
/// unknown field ("unknown field `…`, expected one of `a`, `b`").
macro_rules! accepted_fields {
    ($t:ty) => {{
        let err = serde_json::from_value::<$t>(serde_json::json!({"zz_not_a_field": 0}))
            .expect_err("deny_unknown_fields refuses an unknown field");
        let text = err.to_string();
        let expected = text
            .split_once("expected")
            .unwrap_or_else(|| panic!("{}: {text}", stringify!($t)))
            .1;
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect::<BTreeSet<String>>()
    }};
}

fn properties(node: &yaml_serde::Value) -> BTreeSet<String> {
    node["properties"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_request_schemas_have_exactly_the_fields_the_request_types_accept() {
    use writ_core::synthesis::batch::{
        BatchOptions, FileRequest, StragglerOptions, WriteCodebaseRequest,
    };
    use writ_core::synthesis::image::ImageOptions;
    let spec = spec();
    let request = &spec["components"]["schemas"]["WriteCodebaseRequest"];
    let options = &request["properties"]["options"];
    let checks = [
        (
            "WriteCodebaseRequest",
            request,
            accepted_fields!(WriteCodebaseRequest),
        ),
        (
            "WriteCodebaseRequest.files[]",
            &request["properties"]["files"]["items"],
            accepted_fields!(FileRequest),
        ),
        (
            "WriteCodebaseRequest.options",
            options,
            accepted_fields!(BatchOptions),
        ),
        (
            "WriteCodebaseRequest.options.straggler",
            &options["properties"]["straggler"],
            accepted_fields!(StragglerOptions),
        ),
        (
            "ImageOptions",
            &spec["components"]["schemas"]["ImageOptions"],
            accepted_fields!(ImageOptions),
        ),
        (
            "WorkspaceCreate",
            &spec["components"]["schemas"]["WorkspaceCreate"],
            accepted_fields!(writ_server::service::workspaces::CreateWorkspace),
        ),
        (
            "WriteSessionBegin",
            &spec["components"]["schemas"]["WriteSessionBegin"],
            accepted_fields!(writ_core::sessions::BeginSession),
        ),
        (
            "WriteSessionCorrections",
            &spec["components"]["schemas"]["WriteSessionCorrections"],
            accepted_fields!(writ_server::routes::write_sessions::Corrections),
        ),
        (
            "WriteSessionCorrections.corrections[]",
            &spec["components"]["schemas"]["WriteSessionCorrections"]["properties"]["corrections"]
                ["items"],
            accepted_fields!(writ_core::sessions::Correction),
        ),
    ];
    for (name, schema, rust) in checks {
        assert!(!rust.is_empty(), "{name}: serde listed no fields");
        assert_eq!(properties(schema), rust, "{name}: spec vs Rust fields");
        assert_eq!(
            schema["additionalProperties"].as_bool(),
            Some(false),
            "{name} refuses unknown fields, as the type does"
        );
    }
}

// ---- A snapshot of the document's surface -------------------------------------------------

fn schema_label(schema: &yaml_serde::Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        return r.rsplit('/').next().unwrap().to_string();
    }
    if let Some(all) = schema["allOf"].as_sequence() {
        let parts: Vec<String> = all.iter().map(schema_label).collect();
        return format!("allOf({})", parts.join(", "));
    }
    if let Some(r) = schema["items"]["$ref"].as_str() {
        return format!("[{}]", r.rsplit('/').next().unwrap());
    }
    match schema["properties"].as_mapping() {
        Some(_) => {
            let props: Vec<String> = properties(schema)
                .into_iter()
                .map(|p| {
                    let inner = &schema["properties"][p.as_str()];
                    match inner["$ref"].as_str().or(inner["items"]["$ref"].as_str()) {
                        Some(r) => format!("{p}:{}", r.rsplit('/').next().unwrap()),
                        None => p,
                    }
                })
                .collect();
            format!("{{{}}}", props.join(", "))
        }
        None => schema["type"].as_str().unwrap_or("any").to_string(),
    }
}

/// One line per (path, method, status) with the media types and schemas answered, then one line
/// per component schema with its properties (required ones marked `*`).
fn surface(spec: &yaml_serde::Value) -> String {
    let mut lines = Vec::new();
    for (path, item) in spec["paths"].as_mapping().unwrap() {
        let path = path.as_str().unwrap();
        for (method, op) in item.as_mapping().unwrap() {
            let method = method.as_str().unwrap();
            if !["get", "put", "post", "delete", "patch"].contains(&method) {
                continue;
            }
            let m = method.to_uppercase();
            if let Some(body) = op["requestBody"]["content"].as_mapping() {
                for (media, c) in body {
                    lines.push(format!(
                        "{path} {m} request {} {}",
                        media.as_str().unwrap(),
                        schema_label(&c["schema"])
                    ));
                }
            }
            for (status, resp) in op["responses"].as_mapping().unwrap() {
                let status = status.as_str().unwrap();
                let resp = match resp["$ref"].as_str() {
                    Some(r) => {
                        let name = r.rsplit('/').next().unwrap();
                        lines.push(format!("{path} {m} {status} response {name}"));
                        continue;
                    }
                    None => resp,
                };
                match resp["content"].as_mapping() {
                    Some(content) => {
                        for (media, c) in content {
                            lines.push(format!(
                                "{path} {m} {status} {} {}",
                                media.as_str().unwrap(),
                                schema_label(&c["schema"])
                            ));
                        }
                    }
                    None => lines.push(format!("{path} {m} {status} (no body)")),
                }
            }
        }
    }
    lines.sort();
    let mut schemas = Vec::new();
    for (name, schema) in spec["components"]["schemas"].as_mapping().unwrap() {
        let required: BTreeSet<&str> = schema["required"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|r| r.as_str().unwrap())
            .collect();
        let props: Vec<String> = schema["properties"]
            .as_mapping()
            .map(|_| properties(schema))
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                if required.contains(p.as_str()) {
                    format!("{p}*")
                } else {
                    p
                }
            })
            .collect();
        schemas.push(format!(
            "schema {} {{{}}}",
            name.as_str().unwrap(),
            props.join(", ")
        ));
    }
    schemas.sort();
    lines.extend(schemas);
    lines.join("\n") + "\n"
}

#[test]
fn the_document_surface_matches_the_checked_in_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/api/openapi.snapshot");
    let now = surface(&spec());
    if std::env::var_os("WRIT_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &now).unwrap();
        return;
    }
    let before = std::fs::read_to_string(path)
        .expect("tests/api/openapi.snapshot exists (WRIT_UPDATE_SNAPSHOTS=1 writes it)");
    if before != now {
        let old: BTreeSet<&str> = before.lines().collect();
        let new: BTreeSet<&str> = now.lines().collect();
        let gone: Vec<&&str> = old.difference(&new).collect();
        let added: Vec<&&str> = new.difference(&old).collect();
        panic!(
            "openapi.yaml's surface changed; review it and rerun with WRIT_UPDATE_SNAPSHOTS=1.\n\
             gone: {gone:#?}\nadded: {added:#?}"
        );
    }
}
