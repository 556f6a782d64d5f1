//! `POST /write_codebase`: the HTTP translation of [`crate::service::synthesis`] — headers in
//! (`Idempotency-Key`, `Prefer: respond-async`), 200 / 202 out, and writ's own time on the batch.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Instant;

use crate::error::{ApiError, ErrorCode};
use crate::extract::body_error;
use writ_core::synthesis::Begun;

use crate::service::synthesis::{BatchCall, Running, accepted_body, begin, submit_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// writ's own time on a batch in milliseconds (3 decimals): its duration minus the critical
/// path of its upstream calls.
pub const OVERHEAD_HEADER: &str = "x-writ-overhead-ms";

/// Write up to five files, each chosen among several models' candidates.
pub async fn write_codebase(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<crate::access::Caller>>,
    grant: Option<axum::Extension<crate::access::Grant>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let prefer_async = prefers_async(&headers);
    let begun = begin(
        &state,
        BatchCall {
            request_id,
            caller: caller.map(|axum::Extension(c)| c.0),
            scopes: grant.as_ref().map(|axum::Extension(g)| g.scopes),
            scope: grant.and_then(|axum::Extension(g)| g.scope),
            idempotency_key: idempotency_key(&headers)?,
            prefer_async,
            body: &body,
        },
    )
    .await?;
    let done = match begun {
        Begun::Replayed(done) => done,
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
    if done.replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    // Measured after the body is serialised, so it covers all of writ's own work on the batch.
    let overhead = started.elapsed().saturating_sub(done.upstream);
    if !done.replayed {
        metrics::histogram!(crate::telemetry::BATCH_OVERHEAD).record(overhead.as_secs_f64());
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", overhead.as_secs_f64() * 1000.0)) {
        resp.headers_mut().insert(OVERHEAD_HEADER, v);
    }
    Ok(resp)
}

/// `Prefer: respond-async` (RFC 7240), possibly among other preferences.
fn prefers_async(headers: &HeaderMap) -> bool {
    headers.get_all("prefer").iter().any(|v| {
        v.to_str()
            .map(|s| {
                s.split(',')
                    .any(|p| p.trim().eq_ignore_ascii_case("respond-async"))
            })
            .unwrap_or(false)
    })
}

/// 202 with where to follow the job; `Preference-Applied` only answers a `Prefer` header the
/// caller sent (RFC 7240), not `options.async` in the body.
fn accepted(job_id: uuid::Uuid, workspace: &str, preferred: bool) -> Response {
    let body = accepted_body(job_id, workspace);
    let location = body.location.clone();
    let mut resp = (StatusCode::ACCEPTED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(axum::http::header::LOCATION, v);
    }
    if preferred {
        resp.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("respond-async"),
        );
    }
    resp
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = v.to_str().map(str::trim).unwrap_or("");
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(ApiError::new(
            ErrorCode::InvalidHeader,
            format!(
                "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters"
            ),
        )
        .with_field("Idempotency-Key"));
    }
    Ok(Some(key.to_string()))
}
