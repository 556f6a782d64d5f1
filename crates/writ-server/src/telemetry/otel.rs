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
//! the SDK decides a trace without a remote parent) and `OTEL_TRACES_SAMPLER_ARG`.

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
            Sampler::Ratio(u64::MAX)
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
    let layer = SpanLayer {
        processor: Arc::clone(&processor),
        scope: InstrumentationScope::builder("writ").build(),
        sampler,
        ids: Ids::default(),
    };
    Some((layer, Traces { processor }))
}

/// Which traces are kept, decided at a trace's root: the SDK's samplers for a trace without a
/// remote parent (writ takes none), where a child follows its parent.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sampler {
    /// Traces whose id's upper 63 random bits fall below this bound are kept, as the SDK's
    /// `TraceIdRatioBased` keeps them (`u64::MAX`: all, `0`: none).
    Ratio(u64),
}

impl Sampler {
    fn from_env() -> Result<Sampler, String> {
        let name = std::env::var("OTEL_TRACES_SAMPLER").unwrap_or_default();
        let arg = std::env::var("OTEL_TRACES_SAMPLER_ARG").ok();
        Sampler::parse(name.trim(), arg.as_deref())
    }

    fn parse(name: &str, arg: Option<&str>) -> Result<Sampler, String> {
        match name.strip_prefix("parentbased_").unwrap_or(name) {
            "" | "always_on" => Ok(Sampler::Ratio(u64::MAX)),
            "always_off" => Ok(Sampler::Ratio(0)),
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
                Ok(if ratio >= 1.0 {
                    Sampler::Ratio(u64::MAX)
                } else {
                    Sampler::Ratio((ratio * (1u64 << 63) as f64) as u64)
                })
            }
            other => Err(format!(
                "OTEL_TRACES_SAMPLER {other:?} is not one writ knows (always_on, always_off, traceidratio, parentbased_*)"
            )),
        }
    }

    fn keeps(self, trace: u128) -> bool {
        let Sampler::Ratio(bound) = self;
        bound == u64::MAX || ((trace as u64) >> 1) < bound
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
    /// `false`: the trace was not sampled; nothing is recorded or sent.
    sampled: bool,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    status: Status,
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
                .map(|o| (o.trace, o.id, o.sampled))
        });
        let (trace, parent, sampled) = match parent {
            Some(p) => p,
            None => {
                let trace = self.ids.trace();
                (
                    TraceId::from(trace),
                    SpanId::INVALID,
                    self.sampler.keeps(trace),
                )
            }
        };
        let mut open = Open {
            trace,
            id: SpanId::from(self.ids.next()),
            parent,
            sampled,
            name: Cow::Borrowed(attrs.metadata().name()),
            kind: SpanKind::Internal,
            start: SystemTime::now(),
            attributes: Vec::new(),
            status: Status::Unset,
        };
        if sampled {
            attrs.record(&mut open);
        }
        span.extensions_mut().insert(open);
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
        self.processor.on_end(SpanData {
            span_context: SpanContext::new(
                open.trace,
                open.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: open.parent,
            parent_span_is_remote: false,
            span_kind: open.kind,
            name: open.name,
            start_time: open.start,
            end_time: SystemTime::now(),
            attributes: open.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: open.status,
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
                    "ok" => Status::Ok,
                    "error" => Status::error(""),
                    _ => Status::Unset,
                }
            }
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
        assert_eq!(Sampler::parse("", None), Ok(Sampler::Ratio(u64::MAX)));
        assert_eq!(
            Sampler::parse("parentbased_always_on", None),
            Ok(Sampler::Ratio(u64::MAX))
        );
        assert_eq!(Sampler::parse("always_off", None), Ok(Sampler::Ratio(0)));
        assert_eq!(
            Sampler::parse("parentbased_traceidratio", Some("0.5")),
            Ok(Sampler::Ratio(1u64 << 62))
        );
        assert!(Sampler::parse("traceidratio", Some("1.5")).is_err());
        assert!(Sampler::parse("traceidratio", Some("half")).is_err());
        assert!(Sampler::parse("jaeger_remote", None).is_err());
    }

    #[test]
    fn a_ratio_keeps_about_its_share_of_traces_and_the_extremes_all_or_none() {
        let ids = Ids::default();
        let half = Sampler::parse("traceidratio", Some("0.25")).unwrap();
        let kept = (0..10_000).filter(|_| half.keeps(ids.trace())).count();
        assert!(
            (2_200..2_800).contains(&kept),
            "{kept} of 10,000 kept at 0.25"
        );
        assert!((0..1_000).all(|_| Sampler::Ratio(u64::MAX).keeps(ids.trace())));
        assert!((0..1_000).all(|_| !Sampler::Ratio(0).keeps(ids.trace())));
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
