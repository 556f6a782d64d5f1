//! An OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf, as OpenTelemetry's exporters send
//! it), so that the traces writ exports can be checked in tests and counted in benchmarks where
//! no collector runs. Every span received is kept ([`ReceivedSpan`]); `GET /_fake/spans` lists
//! them for a test driving the binary.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;
use serde::Serialize;

/// One span as received, its ids in hex and its attributes as text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a trace's root.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// The resource's `service.name`.
    pub service: Option<String>,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// The span's W3C `tracestate`, as exported.
    pub trace_state: String,
    /// OTLP's status code (0 unset, 1 ok, 2 error) and its message.
    pub status_code: i32,
    pub status_message: String,
    /// Its events: each one's name with its attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
}

#[derive(Debug, Default)]
pub(crate) struct Received {
    spans: Mutex<Vec<ReceivedSpan>>,
}

impl Received {
    pub(crate) fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

pub(crate) fn router(received: Arc<Received>) -> Router {
    Router::new()
        .route("/v1/traces", post(export))
        .route("/_fake/spans", get(list).delete(clear))
        .with_state(received)
}

async fn export(State(received): State<Arc<Received>>, body: Bytes) -> Response {
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("not an OTLP trace export: {e}"),
            )
                .into_response();
        }
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref().map(text))
        });
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                kv.value.as_ref().map(text).unwrap_or_default(),
                            )
                        })
                        .collect(),
                    service: service.clone(),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    trace_state: span.trace_state,
                    status_code: span.status.as_ref().map_or(0, |s| s.code),
                    status_message: span
                        .status
                        .as_ref()
                        .map(|s| s.message.clone())
                        .unwrap_or_default(),
                    events: span
                        .events
                        .iter()
                        .map(|e| {
                            (
                                e.name.clone(),
                                e.attributes
                                    .iter()
                                    .map(|kv| {
                                        (
                                            kv.key.clone(),
                                            kv.value.as_ref().map(text).unwrap_or_default(),
                                        )
                                    })
                                    .collect(),
                            )
                        })
                        .collect(),
                });
            }
        }
    }
    received
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(spans);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

async fn list(State(received): State<Arc<Received>>) -> axum::Json<Vec<ReceivedSpan>> {
    axum::Json(received.spans())
}

async fn clear(State(received): State<Arc<Received>>) -> StatusCode {
    received
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
    StatusCode::NO_CONTENT
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(text).collect();
            format!("[{}]", items.join(","))
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
