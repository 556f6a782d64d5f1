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
