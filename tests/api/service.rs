//! Health, readiness, metrics, request ids, and errors for unknown routes.

use writ_tests::{TestApp, on_both_backends};

async fn healthz_and_readyz_report_each_check(app: TestApp) {
    let (status, body) = app.json("/healthz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, body) = app.json("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"]["database"]["ok"], true);
    assert_eq!(body["checks"]["repo_dir"]["ok"], true);
    assert_eq!(
        body["checks"]["provider"]["required"], false,
        "no models configured: direct routes still work"
    );
}

async fn metrics_count_requests_by_route_and_status(app: TestApp) {
    use writ_tests::metric;
    let series = |text: &str, method: &str, status: &str| {
        metric(
            text,
            "writ_http_requests_total",
            &[
                ("method", method),
                ("route", "/files/{*path}"),
                ("status", status),
            ],
        )
    };
    let before = app.get("/metrics").await.text().await.unwrap();

    assert_eq!(app.get("/files/missing-1.txt").await.status(), 404);
    assert_eq!(app.get("/files/missing-2.txt").await.status(), 404);
    assert_eq!(app.put_file("m.txt", "", "x").await.status(), 201);
    assert_eq!(app.put_file("m.txt", "", "y").await.status(), 200);
    assert_eq!(app.get("/nope").await.status(), 404);

    let after = app.get("/metrics").await.text().await.unwrap();
    let moved = |method, status| series(&after, method, status) - series(&before, method, status);
    assert_eq!(moved("GET", "404"), 2.0, "{after}");
    assert_eq!(moved("PUT", "201"), 1.0, "{after}");
    assert_eq!(moved("PUT", "200"), 1.0, "{after}");
    assert_eq!(moved("GET", "200"), 0.0, "{after}");
    // An unknown path is counted under one label, not under the path itself.
    let unmatched = |t: &str| {
        metric(
            t,
            "writ_http_requests_total",
            &[("route", "unmatched"), ("status", "404")],
        )
    };
    assert_eq!(unmatched(&after) - unmatched(&before), 1.0, "{after}");
    assert!(!after.contains("route=\"/nope\""), "{after}");

    let writes = |t: &str, op: &str| {
        metric(
            t,
            "writ_writes_total",
            &[("kind", "direct"), ("operation", op)],
        )
    };
    assert_eq!(
        writes(&after, "created") - writes(&before, "created"),
        1.0,
        "{after}"
    );
    assert_eq!(
        writes(&after, "updated") - writes(&before, "updated"),
        1.0,
        "{after}"
    );
}

async fn a_caller_request_id_is_kept_and_lands_in_the_audit_log(app: TestApp) {
    let id = uuid::Uuid::now_v7();
    let r = app
        .client
        .put(app.url("/files/r.txt"))
        .header("x-request-id", id.to_string())
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], id.to_string().as_str());
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["request_id"], id.to_string());
    let (_, ops) = app.json(&format!("/operations?request_id={id}")).await;
    assert_eq!(ops["operations"].as_array().unwrap().len(), 1);
}

async fn an_unknown_route_is_a_json_404(app: TestApp) {
    let (status, body) = app.json("/nope").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
}

on_both_backends!(
    healthz_and_readyz_report_each_check,
    metrics_count_requests_by_route_and_status,
    a_caller_request_id_is_kept_and_lands_in_the_audit_log,
    an_unknown_route_is_a_json_404,
);
