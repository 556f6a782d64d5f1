//! Logging, metrics and the request-id middleware.
//!
//! Every request gets an id (the caller's `X-Request-Id` when it is a UUID, else a new UUIDv7)
//! that is in its span, in its response headers and in its audit rows.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;
use uuid::Uuid;

use crate::config::LogSettings;

/// writ's own time on a batch (its duration minus the critical path of its upstream calls), as a
/// Prometheus histogram; replays are not counted (they make no upstream calls).
pub const BATCH_OVERHEAD: &str = "writ_batch_overhead_seconds";

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The id of the request being served; handlers take it as an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(pub Uuid);

#[cfg(feature = "otel")]
mod otel;

/// What logging and tracing keep until the process ends: the trace exporter, flushed on drop.
pub struct TelemetryGuard {
    #[cfg(feature = "otel")]
    _traces: Option<otel::Traces>,
}

/// JSON logs when `WRIT_LOG_FORMAT=json`, readable text otherwise; level from `RUST_LOG` (both
/// from the environment or `writ.toml`, [`LogSettings`]). Traces over OTLP when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the `otel` feature), at `info` whatever `RUST_LOG` says,
/// so quiet logs still give whole traces.
pub fn init_logging(log: &LogSettings) -> TelemetryGuard {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, fmt};
    let filter = EnvFilter::try_new(&log.filter).unwrap_or_else(|e| {
        // Logging is not up yet: stderr is where the operator looks.
        let _ = writeln!(
            std::io::stderr(),
            "writ: RUST_LOG {:?} is not a filter ({e}); logging at info",
            log.filter
        );
        EnvFilter::new("info,sqlx=warn")
    });
    let logs = if log.json {
        fmt::layer().json().with_writer(std::io::stderr).boxed()
    } else {
        fmt::layer().with_writer(std::io::stderr).boxed()
    };
    let registry = tracing_subscriber::registry().with(logs.with_filter(filter));
    #[cfg(feature = "otel")]
    let (registry, traces) = match otel::layer() {
        Some((layer, traces)) => (
            // Spans, and the warnings and errors logged inside them (their events): an info
            // line would cost an event per request and say what the logs already say.
            registry.with(Some(
                layer
                    .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                        meta.is_span() || *meta.level() <= tracing::Level::WARN
                    }))
                    .with_filter(
                        tracing_subscriber::filter::Targets::new()
                            .with_default(tracing::Level::INFO)
                            .with_target("sqlx", tracing::Level::WARN),
                    ),
            )),
            Some(traces),
        ),
        None => (registry.with(None), None),
    };
    // A second init (tests start several servers in one process) is harmless.
    let _ = registry.try_init();
    TelemetryGuard {
        #[cfg(feature = "otel")]
        _traces: traces,
    }
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
    // The caller's trace, when it sends one (W3C Trace Context): the span continues it.
    let [traceparent, tracestate] = ["traceparent", "tracestate"].map(|name| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    // `otel.*` and `http.*` name the span as OpenTelemetry's HTTP conventions do; `request_id`
    // is the trace's link to the audit (the request's id in `/operations` and `/requests`).
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        traceparent = traceparent.as_deref(),
        tracestate = tracestate.as_deref(),
    );
    let started = Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    span.record("http.response.status_code", resp.status().as_u16());
    // A server span is an error for a 5xx only (OpenTelemetry's HTTP conventions).
    if resp.status().is_server_error() {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", resp.status().to_string());
    }
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
