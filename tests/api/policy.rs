//! What a key holder may ask of writ's configuration: only the models the operator allows, and
//! a batch shape that cannot make a file and a directory of one name.

use serde_json::json;
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS};

const PRICEY: &str = "frontier/most-expensive";

fn batch(options: serde_json::Value) -> serde_json::Value {
    json!({"command": "write_codebase",
           "files": [{"filename": "a.py", "code_description": "x = 1"}],
           "options": options})
}

#[tokio::test]
async fn a_batch_may_name_only_configured_models_unless_the_operator_allows_more() {
    let app = writ_tests::spawn_app_with_models(Backend::Sqlite).await;
    for (options, field) in [
        (json!({"models": [MODELS[0], PRICEY]}), "options.models[1]"),
        (json!({"arbiter_model": PRICEY}), "options.arbiter_model"),
        (json!({"image_model": PRICEY}), "options.image_model"),
    ] {
        let (status, body) = app.post_write_codebase(&batch(options.clone())).await;
        assert_eq!(status, 422, "{options}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("WRIT_ALLOWED_MODELS"),
            "{body}"
        );
    }
    assert!(app.fake().calls().is_empty(), "no model was called");
    assert!(app.files_on_disk().is_empty());
    // A configured model may be named.
    app.fake()
        .script(MODELS[1], Script::always(Step::code("python", "x = 1")));
    let (status, body) = app
        .post_write_codebase(&batch(json!({"models": [MODELS[1]]})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["success"], true, "{body}");
}

#[tokio::test]
async fn the_allow_list_admits_the_models_it_names_and_only_those() {
    let allowed = format!("{PRICEY},{}", MODELS[0]);
    let app = writ_tests::spawn_app_with_models_and(
        Backend::Sqlite,
        &[("WRIT_ALLOWED_MODELS", allowed.as_str())],
    )
    .await;
    app.fake()
        .script(PRICEY, Script::always(Step::code("python", "x = 1")));
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "ok")));
    let (status, body) = app
        .post_write_codebase(&batch(json!({"models": [PRICEY]})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["chosen_model"], PRICEY, "{body}");
    let (status, body) = app
        .post_write_codebase(&batch(json!({"models": [MODELS[2]]})))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "options.models[0]");
}

#[tokio::test]
async fn a_file_and_a_directory_of_the_same_name_in_one_batch_are_refused() {
    let app = writ_tests::spawn_app_with_models(Backend::Sqlite).await;
    let body = json!({"command": "write_codebase", "files": [
        {"filename": "x", "code_description": "a file"},
        {"filename": "x/y.py", "code_description": "a file under x"}]});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "files[1].filename");
    assert!(app.fake().calls().is_empty());
    assert!(app.files_on_disk().is_empty());
}
