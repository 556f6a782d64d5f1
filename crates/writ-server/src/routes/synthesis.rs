//! `POST /write_codebase`: the HTTP translation of [`crate::service::synthesis`] — headers in
//! (`Idempotency-Key`, `Prefer: respond-async`), 200 / 202 out, and writ's own time on the batch.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::time::Instant;

use crate::error::{ApiError, ErrorCode};
use crate::extract::body_error;
use crate::headers::{ApiHeaders, header_map};
use writ_core::synthesis::Begun;

use crate::service::synthesis::{BatchCall, Running, accepted_body, begin, submit_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// The headers `POST /write_codebase` reads.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct BatchHeaders {
    /// `respond-async` answers 202 with a job id at once instead of waiting.
    pub prefer: Option<String>,
    /// A repeat with the same key and body returns the stored response without calling any
    /// model; the same key with another body is 409.
    #[serde(rename = "idempotency-key")]
    #[schemars(length(min = 1, max = 255))]
    pub idempotency_key: Option<String>,
}

/// The headers of a batch's answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BatchAnswerHeaders {
    /// `true` when this is a stored response replayed for an Idempotency-Key.
    #[serde(
        rename = "idempotent-replayed",
        skip_serializing_if = "Option::is_none"
    )]
    pub replayed: Option<bool>,
    /// writ's own time on this batch in milliseconds (3 decimals): its duration minus the
    /// critical path of its upstream calls (the slowest file's candidates, arbiter and
    /// fallback). Also the Prometheus histogram writ_batch_overhead_seconds.
    #[serde(rename = "x-writ-overhead-ms")]
    #[schemars(example = "0.842")]
    pub overhead_ms: String,
}

/// The headers of a batch accepted to run in the background.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct AcceptedHeaders {
    /// /jobs/{id}
    pub location: String,
    /// `respond-async` when the request's `Prefer` header asked for it (absent when only
    /// `options.async` did).
    #[serde(rename = "preference-applied", skip_serializing_if = "Option::is_none")]
    pub preference_applied: Option<&'static str>,
}

/// Write up to five files, each chosen among several models' candidates.
pub async fn write_codebase(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<crate::access::Caller>>,
    grant: Option<axum::Extension<crate::access::Grant>>,
    ApiHeaders(headers): ApiHeaders<BatchHeaders>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let prefer_async = headers.prefer.as_deref().is_some_and(prefers_async);
    let begun = begin(
        &state,
        BatchCall {
            request_id,
            caller: caller.map(|axum::Extension(c)| c.0),
            scopes: grant.as_ref().map(|axum::Extension(g)| g.scopes),
            scope: grant.and_then(|axum::Extension(g)| g.scope),
            idempotency_key: idempotency_key(headers.idempotency_key.as_deref())?,
            prefer_async,
            body: &body,
        },
    )
    .await?;
    let done = match begun {
        Begun::Replayed(done) => *done,
        Begun::Fresh(Running {
            handle,
            is_async: true,
        }) => {
            return Ok(accepted(
                handle.job_id(),
                state.workspace.name(),
                prefer_async,
            ));
        }
        Begun::Fresh(Running { handle, .. }) => handle.answer().await.map_err(submit_error)?,
    };
    let mut resp = (StatusCode::OK, Json(&done.response)).into_response();
    // Measured after the body is serialised, so it covers all of writ's own work on the batch.
    let overhead = started.elapsed().saturating_sub(done.upstream);
    if !done.replayed {
        metrics::histogram!(crate::telemetry::BATCH_OVERHEAD).record(overhead.as_secs_f64());
    }
    resp.headers_mut().extend(header_map(&BatchAnswerHeaders {
        replayed: done.replayed.then_some(true),
        overhead_ms: format!("{:.3}", overhead.as_secs_f64() * 1000.0),
    }));
    Ok(resp)
}

/// `Prefer: respond-async` (RFC 7240), possibly among other preferences.
fn prefers_async(prefer: &str) -> bool {
    prefer
        .split(',')
        .any(|p| p.trim().eq_ignore_ascii_case("respond-async"))
}

/// 202 with where to follow the job; `Preference-Applied` only answers a `Prefer` header the
/// caller sent (RFC 7240), not `options.async` in the body.
fn accepted(job_id: uuid::Uuid, workspace: &str, preferred: bool) -> Response {
    let body = accepted_body(job_id, workspace);
    let headers = AcceptedHeaders {
        location: body.location.clone(),
        preference_applied: preferred.then_some("respond-async"),
    };
    (StatusCode::ACCEPTED, header_map(&headers), Json(body)).into_response()
}

fn idempotency_key(sent: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(key) = sent else {
        return Ok(None);
    };
    let key = key.trim();
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.is_ascii() {
        return Err(ApiError::new(
            ErrorCode::InvalidHeader,
            format!(
                "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters"
            ),
        )
        .with_field("idempotency-key"));
    }
    Ok(Some(key.to_string()))
}
