//! Jobs: `GET /jobs`, `GET /jobs/{id}` and the progress event stream `GET /jobs/{id}/events`.
//!
//! Every `write_codebase` batch is a job whose id is its request id, so a synchronous call can be
//! followed by its `X-Request-Id` too. The stream replays from the store (after `Last-Event-ID`)
//! and then follows: woken at once by this process's hub, or by polling when the batch runs on
//! another replica. It ends after `done`.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use uuid::Uuid;
use writ_core::jobs::{Job, JobEvent};

use crate::auth::Viewer;
use crate::error::{ApiError, ErrorCode, store_error};
use crate::extract::ApiQuery;
use crate::state::AppState;

const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 200;
/// A stream not woken by this process (the batch runs elsewhere) looks again this often.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// Events read from the store per round.
const EVENTS_PER_READ: u32 = 200;
/// Polls a finished job's stream waits for its `done` event before ending without it.
const FINAL_GRACE_POLLS: u32 = 3;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    limit: Option<u32>,
}

/// Recent batches, newest first.
pub async fn list_jobs(
    State(state): State<AppState>,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
        )
        .with_field("limit"));
    }
    let jobs = match viewer.only() {
        None => state.store.list_jobs(limit).await,
        Some(own) => state.store.list_jobs_of(own, limit).await,
    }
    .map_err(store_error)?;
    Ok(Json(
        json!({ "jobs": jobs.iter().map(job_json).collect::<Vec<_>>() }),
    ))
}

/// One batch: its state and, once done, the same body the synchronous call returns.
pub async fn get_job(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = find(&state, &viewer, &id).await?;
    Ok(Json(job_json(&job)))
}

/// Server-Sent Events of one batch; `Last-Event-ID` resumes after that event.
pub async fn job_events(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let job = find(&state, &viewer, &id).await?;
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidHeader,
                    "Last-Event-ID must be the id of an event of this stream",
                )
                .with_field("Last-Event-ID")
            })?,
    };
    let stream = follow(state, job.id, after).map(|e| Ok::<_, Infallible>(sse(&e)));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

struct Cursor {
    state: AppState,
    job: Uuid,
    after: i64,
    wake: broadcast::Receiver<Uuid>,
    finished: bool,
    /// Polls seen since the job was final without its `done` event.
    grace_polls: u32,
}

/// A job's events after `after`, in order, replayed from the store and then followed until
/// `done`. The SSE stream and the `write_codebase` tool's progress notifications read this.
pub fn follow(state: AppState, job: Uuid, after: i64) -> impl Stream<Item = JobEvent> {
    let wake = state.hub.subscribe();
    let cursor = Cursor {
        state,
        job,
        after,
        wake,
        finished: false,
        grace_polls: 0,
    };
    stream::unfold(cursor, |mut c| async move {
        if c.finished {
            return None;
        }
        loop {
            let events = match c.state.store.job_events(c.job, c.after, EVENTS_PER_READ).await {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(job = %c.job, error = %e, "event stream: store unavailable, retrying");
                    Vec::new()
                }
            };
            if !events.is_empty() {
                c.after = events.last().map(|e| e.seq).unwrap_or(c.after);
                c.finished = events.iter().any(|e| e.name == "done");
                return Some((stream::iter(events), c));
            }
            // Nothing new. A job that is over announces `done` just after it is marked so; give
            // that event a few polls to land, then end the stream anyway (the store may have
            // lost it), so no subscriber waits forever.
            if let Ok(Some(job)) = c.state.store.get_job(c.job).await
                && job.status.is_final()
            {
                c.grace_polls += 1;
                if c.grace_polls > FINAL_GRACE_POLLS {
                    return None;
                }
            }
            wait_for(&mut c).await;
        }
    })
    .flatten()
}

async fn wait_for(c: &mut Cursor) {
    let deadline = tokio::time::sleep(POLL_EVERY);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            got = c.wake.recv() => match got {
                Ok(id) if id == c.job => return,
                Ok(_) => {}
                // Missed wake-ups: look at the store now.
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    (&mut deadline).await;
                    return;
                }
            },
        }
    }
}

fn sse(e: &JobEvent) -> SseEvent {
    SseEvent::default()
        .id(e.seq.to_string())
        .event(e.name.clone())
        .data(e.data.to_string())
}

/// The job, when `viewer` may see it: another key's job is answered as absent.
async fn find(state: &AppState, viewer: &Viewer, raw: &str) -> Result<Job, ApiError> {
    let id = Uuid::parse_str(raw).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!("id must be a UUID, got '{raw}'"),
        )
        .with_field("id")
    })?;
    let not_found = || ApiError::not_found(format!("no job {id}"));
    let job = state
        .store
        .get_job(id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    if viewer.only().is_some() {
        // A job's id is its request's id.
        let made_by = state
            .store
            .get_request(id)
            .await
            .map_err(store_error)?
            .and_then(|r| r.caller);
        if !viewer.sees(made_by.as_deref()) {
            return Err(not_found());
        }
    }
    Ok(job)
}

fn job_json(job: &Job) -> Value {
    json!({
        "id": job.id,
        "status": job.status.as_str(),
        "async": job.is_async,
        "files": job.files,
        "created_at": job.created_at,
        "heartbeat_at": job.heartbeat_at,
        "finished_at": job.finished_at,
        "batch_status": job.batch_status,
        "error": job.error,
        "attempts": job.attempts,
        "response": job.response,
        "events": format!("/jobs/{}/events", job.id),
    })
}
