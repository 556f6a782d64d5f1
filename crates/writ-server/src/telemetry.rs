//! Logging, metrics and the request-id middleware.
//!
//! Every request gets an id (the caller's `X-Request-Id` when it is a UUID, else a new UUIDv7)
//! that is in its span, in its response headers and in its audit rows.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;
use uuid::Uuid;

/// writ's own time on a batch (its duration minus the critical path of its upstream calls), as a
/// Prometheus histogram; replays are not counted (they make no upstream calls).
pub const BATCH_OVERHEAD: &str = "writ_batch_overhead_seconds";

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The id of the request being served; handlers take it as an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(pub Uuid);

/// JSON logs when `WRIT_LOG_FORMAT=json`, readable text otherwise; level from `RUST_LOG`.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if std::env::var("WRIT_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // A second init (tests start several servers in one process) is harmless.
    let _ = result;
}

/// The process-wide Prometheus recorder; installed once, shared by every server in the process.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // A real histogram, not the exporter's default summary, so replicas can be aggregated;
            // the buckets span a sub-millisecond overhead up to a pathological second.
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(BATCH_OVERHEAD.to_string()),
                    &[
                        0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
                    ],
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder is installed, in which case ours just stays local.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Assigns the request id, opens the request's span, and records HTTP metrics.
pub async fn request_context(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Uuid::parse_str(v.trim()).ok())
        .unwrap_or_else(Uuid::now_v7);
    req.extensions_mut().insert(RequestId(id));
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = req.method().clone();
    let span = tracing::info_span!("request", request_id = %id, method = %method, route = %route);
    let started = Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = resp.status().as_u16().to_string();
    span.in_scope(
        || tracing::info!(status = %status, elapsed_ms = elapsed.as_millis() as u64, "served"),
    );
    metrics::counter!("writ_http_requests_total", "method" => method.to_string(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("writ_http_request_duration_seconds", "method" => method.to_string(), "route" => route)
        .record(elapsed.as_secs_f64());
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}
