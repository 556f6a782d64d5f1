//! `POST /write_codebase`: the HTTP translation of the synthesis core.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Instant;
use writ_core::content::sha256_hex;
use writ_core::synthesis::runner::Started;
use writ_core::synthesis::{Batch, Submission, SubmitError, Submitted, WriteCodebaseRequest};

use crate::error::{ApiError, ErrorCode, store_error};
use crate::extract::{body_error, json_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// writ's own time on a batch in milliseconds (3 decimals): its duration minus the critical
/// path of its upstream calls.
pub const OVERHEAD_HEADER: &str = "x-writ-overhead-ms";
/// The same, as a Prometheus histogram (replays excluded: they make no upstream calls).
pub const BATCH_OVERHEAD: &str = "writ_batch_overhead_seconds";

/// Write up to five files, each chosen among several models' candidates.
pub async fn write_codebase(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<crate::auth::Caller>>,
    grant: Option<axum::Extension<crate::auth::Grant>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let begun = begin(
        &state,
        BatchCall {
            request_id,
            caller: caller.map(|axum::Extension(c)| c.0),
            scopes: grant.as_ref().map(|axum::Extension(g)| g.scopes),
            scope: grant.and_then(|axum::Extension(g)| g.scope),
            idempotency_key: idempotency_key(&headers)?,
            prefer_async: prefers_async(&headers),
            body: &body,
        },
    )
    .await?;
    let done = match begun {
        Begun::Replayed(done) => done,
        Begun::Accepted { job_id } => return Ok(accepted(job_id)),
        Begun::Running { answer, .. } => answer
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)?
            .map_err(submit_error)?,
    };
    let mut resp = (StatusCode::OK, Json(&done.response)).into_response();
    if done.replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    // Measured after the body is serialised, so it covers all of writ's own work on the batch.
    let overhead = started.elapsed().saturating_sub(done.upstream);
    if !done.replayed {
        metrics::histogram!(BATCH_OVERHEAD).record(overhead.as_secs_f64());
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", overhead.as_secs_f64() * 1000.0)) {
        resp.headers_mut().insert(OVERHEAD_HEADER, v);
    }
    Ok(resp)
}

/// One `write_codebase` call, from `POST /write_codebase` or the `write_codebase` tool.
pub struct BatchCall<'a> {
    pub request_id: uuid::Uuid,
    pub caller: Option<String>,
    /// Every scope the key holds, when auth is on: `options.validation` runs commands, which
    /// needs `run` beside `write`.
    pub scopes: Option<writ_core::keys::Scopes>,
    /// The key's scope that allowed the batch, when auth is on.
    pub scope: Option<writ_core::keys::Scope>,
    pub idempotency_key: Option<String>,
    /// `Prefer: respond-async`; `options.async` in the body means the same.
    pub prefer_async: bool,
    /// The request as JSON, hashed for idempotency and parsed with unknown keys refused.
    pub body: &'a [u8],
}

/// How a batch was taken on.
pub enum Begun {
    /// A repeated `Idempotency-Key`: the stored answer.
    Replayed(Submitted),
    /// An async batch: it runs; the caller follows `/jobs/{job_id}`.
    Accepted { job_id: uuid::Uuid },
    /// The batch runs in its own task; `answer` resolves when it is done. Dropping `answer` lets
    /// it run on and be recorded all the same.
    Running {
        job_id: uuid::Uuid,
        answer: tokio::sync::oneshot::Receiver<
            Result<Result<Submitted, SubmitError>, tokio::task::JoinError>,
        >,
    },
}

/// Validates a batch, checks the limits and the model configuration, records and starts it.
/// Every refusal happens here, before any model is called or anything written.
pub async fn begin(state: &AppState, call: BatchCall<'_>) -> Result<Begun, ApiError> {
    let Json(req) =
        Json::<WriteCodebaseRequest>::from_bytes(call.body).map_err(|e| json_error(&e))?;
    let batch = Batch::parse(req)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.message).with_field(e.field))?;

    if let Some(problem) = state.settings.models.problem_for(batch.options().models()) {
        return Err(unavailable(&problem));
    }
    // Validation runs the server's commands on the caller's behalf: the same scope as POST /run.
    if batch.options().validation().is_some()
        && let Some(held) = call.scopes
        && !held.contains(writ_core::keys::Scope::Run)
    {
        return Err(
            crate::auth::insufficient_scope(writ_core::keys::Scope::Run, held)
                .with_field("options.validation"),
        );
    }

    let submission = Submission {
        request_id: call.request_id,
        caller: call.caller,
        scope: call.scope,
        idempotency_key: call.idempotency_key,
        body_sha256: sha256_hex(call.body),
        body: std::str::from_utf8(call.body).ok().map(str::to_owned),
        batch,
    };
    // Refused at once rather than queued; the permit travels with the task it bounds.
    let permit = state
        .limits
        .admit_batch(submission.caller.as_deref())
        .await?;
    let Some(runner) = state.jobs.clone() else {
        return Err(unavailable(
            "no model provider could be set up; see the server log and `writ check`",
        ));
    };
    let is_async = call.prefer_async || submission.batch.options().run_async();
    // In its own task: a client hanging up must not cancel the checks and records of `start`
    // half-way; the batch itself then runs in the runner's task, so it completes, is recorded,
    // and can be fetched later by idempotency key or from /operations.
    let started_job = tokio::spawn(async move { runner.start(submission, is_async).await })
        .await
        .map_err(ApiError::internal)?
        .map_err(submit_error)?;
    match started_job {
        Started::Replayed(done) => Ok(Begun::Replayed(done)),
        Started::Running { job_id, handle } => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            // The in-flight permit lives as long as the batch, not as long as this request.
            tokio::spawn(async move {
                let _permit = permit;
                let _ = tx.send(handle.await);
            });
            Ok(if is_async {
                Begun::Accepted { job_id }
            } else {
                Begun::Running { job_id, answer: rx }
            })
        }
    }
}

/// The body of a 202: where to follow the job.
pub fn accepted_body(job_id: uuid::Uuid) -> serde_json::Value {
    let location = format!("/jobs/{job_id}");
    serde_json::json!({
        "job_id": job_id,
        "status": "queued",
        "location": location,
        "events": format!("{location}/events"),
    })
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

/// 202 with where to follow the job.
fn accepted(job_id: uuid::Uuid) -> Response {
    let location = format!("/jobs/{job_id}");
    let mut resp = (StatusCode::ACCEPTED, Json(accepted_body(job_id))).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(axum::http::header::LOCATION, v);
    }
    resp.headers_mut().insert(
        "preference-applied",
        HeaderValue::from_static("respond-async"),
    );
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

fn unavailable(message: &str) -> ApiError {
    ApiError::new(ErrorCode::ModelsUnavailable, message)
}

pub(crate) fn submit_error(err: SubmitError) -> ApiError {
    match err {
        SubmitError::Invalid(e) => {
            ApiError::new(ErrorCode::InvalidRequest, e.message).with_field(e.field)
        }
        SubmitError::IdempotencyConflict => {
            ApiError::new(ErrorCode::IdempotencyConflict, err.to_string())
                .with_field("Idempotency-Key")
        }
        SubmitError::InProgress => {
            let mut e = ApiError::new(ErrorCode::IdempotencyInProgress, err.to_string())
                .with_field("Idempotency-Key");
            e.retry_after_secs = Some(5);
            e
        }
        SubmitError::Audit(store) => store_error(store),
        SubmitError::Unavailable(why) => ApiError::new(ErrorCode::CommandsUnavailable, why),
    }
}
