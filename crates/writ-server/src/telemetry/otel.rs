//! Traces over OTLP/HTTP (protobuf), as the OpenTelemetry SDKs configure them: on when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and with the
//! SDK's other `OTEL_*` variables (headers, timeout, `OTEL_BSP_*` batching, `OTEL_SERVICE_NAME`)
//! read by the SDK itself. writ's `tracing` spans become the trace: one per request, with a span
//! per file, model call (GenAI attributes), arbiter, sandboxed run and store commit.
//!
//! Spans go out from the SDK's batch processor on a thread of its own, so a slow or absent
//! collector never holds a request; what it cannot take is dropped, not queued without bound.
//!
//! The layer that makes them is writ's own ([`SpanLayer`]), not `tracing-opentelemetry`: writ's
//! spans need a name, a kind, attributes and their parent, and that bridge also builds an
//! OpenTelemetry context, a sampler's result and an SDK span for each — about 45,000
//! instructions a span on the request's path, which put a five-file batch's 35 spans at half a
//! millisecond. Here a span is a small record in the registry's extensions, handed to the batch
//! processor as `SpanData` when it closes. Sampling follows `OTEL_TRACES_SAMPLER` (`always_on`,
//! `always_off`, `traceidratio` and their `parentbased_` forms, decided at the trace's root as
//! the SDK decides it) and `OTEL_TRACES_SAMPLER_ARG`.
//!
//! A request that arrives with a W3C `traceparent` (and `tracestate`) continues the caller's
//! trace: its span's parent is the caller's span, remote, and a `parentbased_` sampler follows
//! the caller's sampled flag. The model calls pass the context on to the provider
//! ([`writ_core::trace_context`]). Warnings and errors logged inside a span become its events;
//! an error makes the span's status an error with the message.

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The exporter, kept so that what it holds is sent before the process ends.
pub struct Traces {
    processor: Arc<BatchSpanProcessor>,
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.processor.shutdown() {
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
pub fn layer() -> Option<(SpanLayer, Traces)> {
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
    let sampler = match Sampler::from_env() {
        Ok(sampler) => sampler,
        Err(e) => {
            eprintln!("writ: {e}; sampling every trace");
            Sampler::ALL
        }
    };
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("writ");
    }
    // The batch processor reads `OTEL_BSP_*` itself.
    let mut processor = BatchSpanProcessor::builder(exporter).build();
    processor.set_resource(&resource.build());
    let processor = Arc::new(processor);
    writ_core::trace_context::install(current_context);
    let layer = SpanLayer {
        processor: Arc::clone(&processor),
        scope: InstrumentationScope::builder("writ").build(),
        sampler,
        ids: Ids::default(),
    };
    Some((layer, Traces { processor }))
}

/// Which traces are kept, decided at a trace's root as the SDK's samplers decide: by the trace
/// id's ratio, or, for the `parentbased_` forms (the default), by a remote parent's flag when
/// the request came with one.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sampler {
    /// Traces whose id's upper 63 random bits fall below this bound are kept, as the SDK's
    /// `TraceIdRatioBased` keeps them (`u64::MAX`: all, `0`: none).
    bound: u64,
    /// A remote parent's sampled flag decides (`parentbased_*`, and the default).
    parent_based: bool,
}

impl Sampler {
    const ALL: Sampler = Sampler {
        bound: u64::MAX,
        parent_based: true,
    };

    fn from_env() -> Result<Sampler, String> {
        let name = std::env::var("OTEL_TRACES_SAMPLER").unwrap_or_default();
        let arg = std::env::var("OTEL_TRACES_SAMPLER_ARG").ok();
        Sampler::parse(name.trim(), arg.as_deref())
    }

    fn parse(name: &str, arg: Option<&str>) -> Result<Sampler, String> {
        let parent_based = name.is_empty() || name.starts_with("parentbased_");
        let bound = match name.strip_prefix("parentbased_").unwrap_or(name) {
            "" | "always_on" => u64::MAX,
            "always_off" => 0,
            "traceidratio" => {
                let ratio = match arg.map(str::trim) {
                    None | Some("") => 1.0,
                    Some(a) => a.parse::<f64>().map_err(|_| {
                        format!("OTEL_TRACES_SAMPLER_ARG {a:?} is not a ratio between 0 and 1")
                    })?,
                };
                if !(0.0..=1.0).contains(&ratio) {
                    return Err(format!(
                        "OTEL_TRACES_SAMPLER_ARG {ratio} is not a ratio between 0 and 1"
                    ));
                }
                if ratio >= 1.0 {
                    u64::MAX
                } else {
                    (ratio * (1u64 << 63) as f64) as u64
                }
            }
            other => {
                return Err(format!(
                    "OTEL_TRACES_SAMPLER {other:?} is not one writ knows (always_on, always_off, traceidratio, parentbased_*)"
                ));
            }
        };
        Ok(Sampler {
            bound,
            parent_based,
        })
    }

    /// Whether the trace `trace` is kept; `remote`: the sampled flag of the caller's span, when
    /// the request came with one.
    fn keeps(self, trace: u128, remote: Option<bool>) -> bool {
        match remote {
            Some(sampled) if self.parent_based => sampled,
            _ => self.bound == u64::MAX || ((trace as u64) >> 1) < self.bound,
        }
    }
}

/// Span and trace ids: a counter through the process's random SipHash keys, unique within the
/// process and unpredictable across processes, without a lock or a generator per thread.
#[derive(Default)]
struct Ids {
    keys: std::collections::hash_map::RandomState,
    next: AtomicU64,
}

impl Ids {
    fn next(&self) -> u64 {
        loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let id = self.keys.hash_one(n);
            if id != 0 {
                return id;
            }
        }
    }

    fn trace(&self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }
}

/// Makes each span an OpenTelemetry span: named by `otel.name` (else its name), of the kind
/// `otel.kind` says, with every other field as an attribute, and handed to the batch processor
/// when it closes.
pub struct SpanLayer {
    processor: Arc<BatchSpanProcessor>,
    scope: InstrumentationScope,
    sampler: Sampler,
    ids: Ids,
}

/// What a span holds until it closes, in the registry's extensions.
struct Open {
    trace: TraceId,
    id: SpanId,
    parent: SpanId,
    /// The parent is the caller's span, in another process (`traceparent`).
    remote_parent: bool,
    /// The caller's `tracestate`, passed on to the trace's every span.
    state: Option<Arc<str>>,
    /// `false`: the trace was not sampled; nothing is recorded or sent.
    sampled: bool,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    /// `otel.status_code` as recorded, and the message of the error that set it.
    status: StatusCode,
    status_message: Option<String>,
    events: SpanEvents,
}

/// A span's status until it closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusCode {
    Unset,
    Ok,
    Error,
}

/// Events kept per span, as the SDK's default span limits keep them; later ones are counted.
const MAX_EVENTS: usize = 128;

/// The `traceparent` and `tracestate` fields of a request's span.
#[derive(Default)]
struct Incoming {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Visit for Incoming {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "traceparent" => self.traceparent = Some(value.to_owned()),
            "tracestate" => self.tracestate = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if matches!(field.name(), "traceparent" | "tracestate") {
            self.record_str(field, format!("{value:?}").trim_matches('"'));
        }
    }
}

/// An event's message and fields.
struct Logged {
    message: Option<String>,
    attributes: Vec<KeyValue>,
}

impl Visit for Logged {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_owned());
        } else {
            self.attributes
                .push(KeyValue::new(field.name(), value.to_owned()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

/// The W3C context of the current span, for an outgoing request's headers: the span's own id
/// as the parent the callee sees.
fn current_context() -> Option<writ_core::trace_context::TraceContext> {
    tracing::Span::current()
        .with_subscriber(|(id, dispatch)| {
            let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
            let span = registry.span(id)?;
            let extensions = span.extensions();
            let open = extensions.get::<Open>()?;
            Some(writ_core::trace_context::TraceContext {
                traceparent: writ_core::trace_context::format_traceparent(
                    u128::from_be_bytes(open.trace.to_bytes()),
                    u64::from_be_bytes(open.id.to_bytes()),
                    open.sampled,
                ),
                tracestate: open.state.as_deref().map(str::to_owned),
            })
        })
        .flatten()
}

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Open>()
                .map(|o| (o.trace, o.id, false, o.state.clone(), o.sampled))
        });
        let (trace, parent, remote_parent, state, sampled) = match parent {
            Some(p) => p,
            None => {
                // A root: the caller's trace when the request says which (`traceparent`).
                let mut incoming = Incoming::default();
                attrs.record(&mut incoming);
                match incoming
                    .traceparent
                    .as_deref()
                    .and_then(writ_core::trace_context::parse_traceparent)
                {
                    Some((trace, span, sampled)) => (
                        TraceId::from(trace),
                        SpanId::from(span),
                        true,
                        incoming.tracestate.map(Arc::from),
                        self.sampler.keeps(trace, Some(sampled)),
                    ),
                    None => {
                        let trace = self.ids.trace();
                        (
                            TraceId::from(trace),
                            SpanId::INVALID,
                            false,
                            None,
                            self.sampler.keeps(trace, None),
                        )
                    }
                }
            }
        };
        let mut open = Open {
            trace,
            id: SpanId::from(self.ids.next()),
            parent,
            remote_parent,
            state,
            sampled,
            name: Cow::Borrowed(attrs.metadata().name()),
            kind: SpanKind::Internal,
            start: SystemTime::now(),
            attributes: Vec::new(),
            status: StatusCode::Unset,
            status_message: None,
            events: SpanEvents::default(),
        };
        if sampled {
            attrs.record(&mut open);
        }
        span.extensions_mut().insert(open);
    }

    /// A warning or an error logged inside a span (the filter lets no other event through):
    /// one of its events, and an error makes its status an error with the message.
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(open) = extensions.get_mut::<Open>() else {
            return;
        };
        if !open.sampled {
            return;
        }
        let mut logged = Logged {
            message: None,
            attributes: Vec::new(),
        };
        event.record(&mut logged);
        let level = *event.metadata().level();
        let message = logged
            .message
            .unwrap_or_else(|| event.metadata().name().to_owned());
        if level == tracing::Level::ERROR && open.status == StatusCode::Unset {
            open.status = StatusCode::Error;
            open.status_message = Some(message.clone());
        }
        if open.events.events.len() >= MAX_EVENTS {
            open.events.dropped_count += 1;
            return;
        }
        logged
            .attributes
            .push(KeyValue::new("level", level.as_str()));
        open.events.events.push(opentelemetry::trace::Event::new(
            message,
            SystemTime::now(),
            logged.attributes,
            0,
        ));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        if let Some(open) = extensions.get_mut::<Open>()
            && open.sampled
        {
            values.record(open);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        if !open.sampled {
            return;
        }
        let status = match open.status {
            StatusCode::Unset => Status::Unset,
            StatusCode::Ok => Status::Ok,
            StatusCode::Error => Status::error(open.status_message.unwrap_or_default()),
        };
        let state = open
            .state
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or(TraceState::NONE);
        self.processor.on_end(SpanData {
            span_context: SpanContext::new(open.trace, open.id, TraceFlags::SAMPLED, false, state),
            parent_span_id: open.parent,
            parent_span_is_remote: open.remote_parent,
            span_kind: open.kind,
            name: open.name,
            start_time: open.start,
            end_time: SystemTime::now(),
            attributes: open.attributes,
            dropped_attributes_count: 0,
            events: open.events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

impl Open {
    fn set(&mut self, field: &Field, value: Value) {
        match field.name() {
            "otel.name" => self.name = Cow::Owned(value.as_str().into_owned()),
            "otel.kind" => {
                self.kind = match value.as_str().as_ref() {
                    "server" => SpanKind::Server,
                    "client" => SpanKind::Client,
                    "producer" => SpanKind::Producer,
                    "consumer" => SpanKind::Consumer,
                    _ => SpanKind::Internal,
                }
            }
            "otel.status_code" => {
                self.status = match value.as_str().to_ascii_lowercase().as_str() {
                    "ok" => StatusCode::Ok,
                    "error" => StatusCode::Error,
                    _ => StatusCode::Unset,
                }
            }
            "otel.status_description" => {
                self.status_message = Some(value.as_str().into_owned());
            }
            // The caller's context: the span's parent, not an attribute.
            "traceparent" | "tracestate" => {}
            name => {
                // A field recorded twice keeps its last value, as the SDK's span does.
                if let Some(kv) = self
                    .attributes
                    .iter_mut()
                    .find(|kv| kv.key.as_str() == name)
                {
                    kv.value = value;
                } else {
                    self.attributes.push(KeyValue::new(name, value));
                }
            }
        }
    }
}

impl Visit for Open {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, Value::from(value.to_owned()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(v) => self.set(field, Value::I64(v)),
            Err(_) => self.set(field, Value::from(value.to_string())),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, Value::F64(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_are_read_as_the_sdk_reads_them() {
        assert_eq!(Sampler::parse("", None), Ok(Sampler::ALL));
        assert_eq!(
            Sampler::parse("parentbased_always_on", None),
            Ok(Sampler::ALL)
        );
        assert_eq!(
            Sampler::parse("always_off", None),
            Ok(Sampler {
                bound: 0,
                parent_based: false
            })
        );
        assert_eq!(
            Sampler::parse("parentbased_traceidratio", Some("0.5")),
            Ok(Sampler {
                bound: 1u64 << 62,
                parent_based: true
            })
        );
        assert!(Sampler::parse("traceidratio", Some("1.5")).is_err());
        assert!(Sampler::parse("traceidratio", Some("half")).is_err());
        assert!(Sampler::parse("jaeger_remote", None).is_err());
    }

    #[test]
    fn a_ratio_keeps_about_its_share_of_traces_and_the_extremes_all_or_none() {
        let ids = Ids::default();
        let half = Sampler::parse("traceidratio", Some("0.25")).unwrap();
        let kept = (0..10_000)
            .filter(|_| half.keeps(ids.trace(), None))
            .count();
        assert!(
            (2_200..2_800).contains(&kept),
            "{kept} of 10,000 kept at 0.25"
        );
        assert!((0..1_000).all(|_| Sampler::ALL.keeps(ids.trace(), None)));
        let none = Sampler::parse("always_off", None).unwrap();
        assert!((0..1_000).all(|_| !none.keeps(ids.trace(), None)));
    }

    #[test]
    fn a_callers_sampled_flag_decides_for_a_parent_based_sampler_only() {
        let trace = Ids::default().trace();
        let based = Sampler::parse("parentbased_always_off", None).unwrap();
        assert!(based.keeps(trace, Some(true)));
        assert!(!Sampler::ALL.keeps(trace, Some(false)));
        let plain = Sampler::parse("always_on", None).unwrap();
        assert!(plain.keeps(trace, Some(false)));
    }

    #[test]
    fn ids_are_never_zero_and_do_not_repeat() {
        let ids = Ids::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = ids.next();
            assert_ne!(id, 0);
            assert!(seen.insert(id), "an id repeated");
        }
    }
}
