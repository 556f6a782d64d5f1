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
    let (_, ready) = app.json("/readyz").await;
    assert_matches_schema(&spec, "Readiness", &ready, "readyz");
    let (_, err) = app.json("/operations?limit=0").await;
    assert_matches_schema(&spec, "Error", &err, "error");
}
