//! Traces over OTLP/HTTP (protobuf), as the OpenTelemetry SDKs configure them: on when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and with the
//! SDK's other `OTEL_*` variables (headers, timeout, `OTEL_BSP_*` batching, `OTEL_SERVICE_NAME`)
//! read by the SDK itself. writ's `tracing` spans become the trace: one per request, with a span
//! per file, model call (GenAI attributes), arbiter, sandboxed run and store commit.
//!
//! Spans go out from the SDK's batch processor on a thread of its own, so a slow or absent
//! collector never holds a request; what it cannot take is dropped, not queued without bound.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The exporter, kept so that what it holds is sent before the process ends.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces not all sent at shutdown");
        }
    }
}

/// Whether the environment asks for traces.
pub fn wanted() -> bool {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled
        && ENDPOINTS
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// The layer that turns spans into an OTLP trace, when the environment asks for one. An
/// exporter that cannot be built is said on stderr (logging is not up yet) and leaves writ
/// without traces rather than without a start.
pub fn layer<S>() -> Option<(impl Layer<S>, Traces)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if !wanted() {
        return None;
    }
    // The exporter's client is built now, before start-up installs the TLS provider for the
    // model clients; an endpoint may be https.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("writ: traces are off: the OTLP exporter could not be built: {e}");
            return None;
        }
    };
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("writ");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("writ");
    // Per-span work that writ's traces do not use is off: nothing else reads an OpenTelemetry
    // context (activating one costs a clone and a thread-local push on every poll of an
    // instrumented future), and busy/idle times, threads and source locations would be read
    // twice per poll and sent with every span for no question an operator asks of a trace.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_context_activation(false)
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false);
    Some((layer, Traces { provider }))
}
