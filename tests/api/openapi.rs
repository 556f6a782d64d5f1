//! openapi.yaml is the document the code generates (`writ openapi`, crates/writ-server/src/openapi),
//! it lists every route the router serves, and real answers have the shapes it describes.

use std::collections::BTreeSet;

use writ_tests::{Backend, spawn_app};

fn spec() -> yaml_serde::Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml")).unwrap();
    yaml_serde::from_str(&text).unwrap()
}

/// Like crates.io's snapshot of its document: a change to a route or to a type the API reads or
/// writes shows up in review as a diff of openapi.yaml, and cannot land without one.
#[test]
fn the_checked_in_document_is_the_generated_one() {
    let generated = writ_server::openapi::yaml();
    let on_disk =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml")).unwrap();
    if generated != on_disk {
        let (line, (was, now)) = on_disk
            .lines()
            .chain(std::iter::repeat(""))
            .zip(generated.lines().chain(std::iter::repeat("")))
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .unwrap();
        panic!(
            "openapi.yaml is not the document the code generates: run scripts/openapi to \
             regenerate it, and review the diff.\nfirst difference, line {}:\n  file:      {was}\n  generated: {now}",
            line + 1
        );
    }
}

/// Every `$ref` names a schema or response the document holds: a type renamed in Rust, or a
/// response in openapi/operations.rs naming a schema no type registers, cannot leave a reference
/// dangling.
#[test]
fn every_reference_in_the_document_resolves() {
    fn walk(node: &yaml_serde::Value, spec: &yaml_serde::Value, at: &str) {
        match node {
            yaml_serde::Value::Mapping(m) => {
                for (k, v) in m {
                    let key = k.as_str().unwrap_or("?");
                    if key == "$ref" {
                        let target = v.as_str().unwrap();
                        let mut found = spec;
                        for part in target.trim_start_matches("#/").split('/') {
                            found = &found[part];
                        }
                        assert!(!found.is_null(), "{at}: {target} does not resolve");
                    } else {
                        walk(v, spec, &format!("{at}.{key}"));
                    }
                }
            }
            yaml_serde::Value::Sequence(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, spec, &format!("{at}[{i}]"));
                }
            }
            _ => {}
        }
    }
    let spec = spec();
    walk(&spec, &spec, "");
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

/// Every header of writ's own that `answer` carries is one the document lists for its operation
/// and status: headers are written from the same types the document reads them from.
fn assert_headers_documented(
    spec: &yaml_serde::Value,
    path: &str,
    method: &str,
    answer: &reqwest::Response,
) {
    let status = answer.status().as_u16().to_string();
    let listed = &spec["paths"][path][method]["responses"][status.as_str()]["headers"];
    let own = |name: &str| {
        name.starts_with("x-writ-")
            || [
                "etag",
                "location",
                "retry-after",
                "preference-applied",
                "idempotent-replayed",
            ]
            .contains(&name)
    };
    for name in answer
        .headers()
        .keys()
        .map(|n| n.as_str())
        .filter(|n| own(n))
    {
        assert!(
            !listed[name].is_null(),
            "{method} {path} {status} answers the header {name}, which openapi.yaml does not list"
        );
    }
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
    assert_matches_schema(&spec, "BatchResponse", &batch, "write_codebase");
    let (_, job) = app
        .json(&format!("/jobs/{}", batch["request_id"].as_str().unwrap()))
        .await;
    assert_matches_schema(&spec, "Job", &job, "job");
    assert_matches_schema(&spec, "BatchResponse", &job["response"], "job.response");
    let (_, jobs) = app.json("/jobs").await;
    assert_matches_schema(&spec, "Job", &jobs["jobs"][0], "jobs[0]");

    let put = app.put_file("a.py", "", "v = 9\n").await;
    assert_headers_documented(&spec, "/files/{path}", "put", &put);
    let put: serde_json::Value = put.json().await.unwrap();
    assert_matches_schema(&spec, "WriteAnswer", &put, "put");
    let read = app.get("/files/a.py").await;
    assert_headers_documented(&spec, "/files/{path}", "get", &read);
    let (_, ops) = app.json("/operations").await;
    for (i, op) in ops["operations"].as_array().unwrap().iter().enumerate() {
        assert_matches_schema(&spec, "Operation", op, &format!("operations[{i}]"));
    }
    let (_, listing) = app.json("/files").await;
    for (i, e) in listing["entries"].as_array().unwrap().iter().enumerate() {
        assert_matches_schema(&spec, "DirEntry", e, &format!("files.entries[{i}]"));
    }
    let answered = app
        .client
        .post(app.url("/write_codebase"))
        .header("prefer", "respond-async")
        .json(&serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "c.py", "code_description": "d"}]}))
        .send()
        .await
        .unwrap();
    assert_headers_documented(&spec, "/write_codebase", "post", &answered);
    let status = answered.status();
    let accepted: serde_json::Value = answered.json().await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    assert_matches_schema(&spec, "AcceptedBatch", &accepted, "accepted");
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
    assert_matches_schema(&spec, "SessionView", &begun, "write_sessions");
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
    assert_matches_schema(&spec, "SessionView", &sent, "write_sessions content");
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
        "SessionView",
        &corrected,
        "write_sessions corrections",
    );
}

// ---- What is not derived from a type ----------------------------------------------------
// The schemas are derived from the Rust types (crates/writ-server/src/openapi), so they list
// what serde reads and writes by construction. A job's event stream is no JSON body: its event
// names are written out in openapi/operations.rs, and this test pins them to the type.

use writ_core::synthesis::progress::Event;

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
            | Event::ChecksUnavailable { .. }
            | Event::AgreementComputed { .. }
            | Event::ArbiterAskedInputs { .. }
            | Event::StoppedEarly { .. }
            | Event::RoundStarted { .. }
            | Event::Formatted { .. }
            | Event::FileWritten { .. }
            | Event::FileFailed { .. }
            | Event::ChangeProposed { .. }
            | Event::ChangeApplied { .. }
            | Event::ChangeRejected { .. }
            | Event::Overlap(_)
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
            diagnostics: Some(true),
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
        Event::ChecksUnavailable {
            file: f(),
            status: writ_core::audit::GeneratedChecksStatus::NoTests,
            reason: "no test file could be used".into(),
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
        Event::Formatted {
            file: f(),
            command: "fmt".into(),
            changed: true,
            error: None,
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
        Event::Overlap(writ_core::overlaps::Overlap {
            path: f(),
            with: writ_core::overlaps::OverlapWith::Workspace,
            workspace: None,
            branch: None,
            their_commit: None,
            their_request: None,
            since: chrono::Utc::now(),
        }),
        Event::Done {
            status: "success".into(),
        },
        Event::ChangeProposed {
            change_id: uuid::Uuid::nil(),
            state: writ_core::changes::ChangeState::Open,
            files: Vec::new(),
            expires_at: chrono::DateTime::UNIX_EPOCH,
        },
        Event::ChangeApplied {
            change_id: uuid::Uuid::nil(),
            request_id: uuid::Uuid::nil(),
            state: writ_core::changes::ChangeState::Applied,
            files: Vec::new(),
            comment: None,
        },
        Event::ChangeRejected {
            change_id: uuid::Uuid::nil(),
            request_id: uuid::Uuid::nil(),
            state: writ_core::changes::ChangeState::Rejected,
            files: Vec::new(),
            comment: Some("no".into()),
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

/// The events only a change set's own stream carries (a batch's carries its proposal).
const DECISIONS: [&str; 2] = ["change_applied", "change_rejected"];

#[test]
fn the_written_enums_list_exactly_the_values_serde_produces() {
    let spec = spec();
    let events = event_names();
    let stream = |path: &str| {
        spec_enum(
            &spec["paths"][path]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
                ["properties"]["event"],
            &[],
        )
    };
    let batch: BTreeSet<String> = events
        .iter()
        .filter(|e| !DECISIONS.contains(&e.as_str()))
        .cloned()
        .collect();
    assert_eq!(stream("/jobs/{id}/events"), batch);
    let change: BTreeSet<String> = events
        .iter()
        .filter(|e| e.starts_with("change_"))
        .cloned()
        .collect();
    assert_eq!(stream("/changes/{id}/events"), change);
}
