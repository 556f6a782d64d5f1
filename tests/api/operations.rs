//! Reading the audit log back over HTTP.

use writ_tests::{TestApp, on_both_backends};

async fn operations_page_newest_first_with_a_cursor(app: TestApp) {
    for i in 0..5 {
        app.put_file(&format!("f{i}.txt"), "", format!("{i}")).await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("/operations?limit=2&cursor={c}"),
            None => "/operations?limit=2".to_string(),
        };
        let (status, page) = app.json(&q).await;
        assert_eq!(status, 200, "{page}");
        for op in page["operations"].as_array().unwrap() {
            seen.push(op["filename"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, vec!["f4.txt", "f3.txt", "f2.txt", "f1.txt", "f0.txt"]);
}

async fn filters_narrow_the_listing(app: TestApp) {
    let r = app.put_file("a.txt", "", "1").await;
    let first: serde_json::Value = r.json().await.unwrap();
    app.put_file("b.txt", "", "2").await;
    let (_, by_file) = app.json("/operations?filename=b.txt").await;
    assert_eq!(by_file["operations"].as_array().unwrap().len(), 1);
    let (_, by_req) = app
        .json(&format!(
            "/operations?request_id={}",
            first["request_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(by_req["operations"][0]["filename"], "a.txt");
    let (_, failed) = app.json("/operations?status=failed").await;
    assert_eq!(failed["operations"].as_array().unwrap().len(), 0);
    let (_, future) = app.json("/operations?since=2999-01-01T00:00:00Z").await;
    assert_eq!(future["operations"].as_array().unwrap().len(), 0);
    let (_, past) = app.json("/operations?until=2999-01-01T00:00:00Z").await;
    assert_eq!(past["operations"].as_array().unwrap().len(), 2);
}

async fn bad_listing_parameters_name_the_field(app: TestApp) {
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("status=done", "status"),
        ("since=yesterday", "since"),
        ("request_id=nope", "request_id"),
        ("cursor=%21%21", "cursor"),
        ("sort=asc", "sort"),
    ] {
        let (status, body) = app.json(&format!("/operations?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let (status, _) = app
        .json(&format!("/operations/{}", uuid::Uuid::now_v7()))
        .await;
    assert_eq!(status, 404);
}

on_both_backends!(
    operations_page_newest_first_with_a_cursor,
    filters_narrow_the_listing,
    bad_listing_parameters_name_the_field,
);
