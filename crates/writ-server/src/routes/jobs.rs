//! Jobs: `GET /jobs`, `GET /jobs/{id}` and the progress event stream `GET /jobs/{id}/events`
//! (the events as [`crate::service::jobs::follow`] reads them, as Server-Sent Events).
//!
//! Every `write_codebase` batch is a job whose id is its request id, so a synchronous call can be
//! followed by its `X-Request-Id` too.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;
use writ_core::AuditStore;
use writ_core::audit::RequestStatus;
use writ_core::jobs::{Job, JobEvent, JobFilter, JobStatus};
use writ_core::synthesis::BatchResponse;
use writ_core::synthesis::jobs::Jobs;
use writ_core::synthesis::progress::{DECISION_EVENTS, Event};

use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error};
use crate::extract::ApiQuery;
use crate::headers::ApiHeaders;
use crate::service::jobs::follow;

const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 200;

/// The query of `GET /jobs`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// How many jobs, newest first.
    #[schemars(range(min = 1, max = 200), extend("default" = 20))]
    limit: Option<u32>,
    /// Only this workspace's jobs (none for a workspace the key may not use).
    workspace: Option<String>,
}

/// `GET /jobs`'s answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct JobList {
    /// The jobs, without their response bodies.
    pub jobs: Vec<JobView>,
}

/// The path of `/jobs/{id}` and its event stream.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct JobId {
    /// The job id, which is the batch's request id.
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
}

/// The headers `GET /jobs/{id}/events` reads.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct EventsHeaders {
    /// Replay only the events after this one (the `id` of an event of this stream).
    #[serde(
        rename = "last-event-id",
        default,
        deserialize_with = "crate::headers::parsed"
    )]
    pub last_event_id: Option<u64>,
}

/// Recent batches, newest first.
pub async fn list_jobs(
    State(store): State<Arc<dyn AuditStore>>,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<JobList>, ApiError> {
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
        )
        .with_field("limit"));
    }
    let filter = JobFilter {
        caller: viewer.only().map(str::to_owned),
        workspaces: crate::service::operations::visible_workspaces(&viewer, p.workspace.as_deref()),
        unfinished: false,
    };
    let jobs = store.list_jobs(&filter, limit).await.map_err(store_error)?;
    Ok(Json(JobList {
        jobs: jobs.iter().map(job_view).collect(),
    }))
}

/// One batch: its state and, once done, the same body the synchronous call returns.
pub async fn get_job(
    State(store): State<Arc<dyn AuditStore>>,
    viewer: Viewer,
    Path(JobId { id }): Path<JobId>,
) -> Result<Json<JobView>, ApiError> {
    let job = find(store.as_ref(), &viewer, &id).await?;
    Ok(Json(job_view(&job)))
}

/// Server-Sent Events of one batch; `Last-Event-ID` resumes after that event.
pub async fn job_events(
    State(store): State<Arc<dyn AuditStore>>,
    State(jobs): State<Option<Arc<Jobs>>>,
    viewer: Viewer,
    Path(JobId { id }): Path<JobId>,
    ApiHeaders(headers): ApiHeaders<EventsHeaders>,
) -> Result<Response, ApiError> {
    let job = find(store.as_ref(), &viewer, &id).await?;
    let after = match headers.last_event_id.map(i64::try_from) {
        None => 0,
        Some(Ok(after)) => after,
        Some(Err(_)) => {
            return Err(ApiError::new(
                ErrorCode::InvalidHeader,
                "last-event-id must be the id of an event of this stream",
            )
            .with_field("last-event-id"));
        }
    };
    let stream = follow(store, jobs.as_deref().map(Jobs::hub), job.id, after)
        .map(|e| Ok::<_, Infallible>(sse(&e)));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// One server-sent event of a job's stream.
#[derive(Debug, schemars::JsonSchema)]
#[schemars(inline)]
pub struct EventFrame {
    /// 1, 2, 3, … per job: the `Last-Event-ID` to resume after it.
    pub id: String,
    /// The event's name, the same as its `data`'s `type`.
    #[schemars(schema_with = "event_names")]
    pub event: String,
    /// The event as JSON.
    pub data: String,
}

/// Every name an [`Event`] goes by on a batch's stream: the `type` of each of its shapes, but
/// the decisions on a change set, which only its own stream carries.
fn event_names(generator: &mut SchemaGenerator) -> Schema {
    names_where(generator, |name| !DECISION_EVENTS.contains(&name))
}

/// The `type`s of the [`Event`] shapes whose name `keep` keeps, as a string enum.
pub(crate) fn names_where(generator: &mut SchemaGenerator, keep: impl Fn(&str) -> bool) -> Schema {
    let events = Event::json_schema(generator);
    let names: Vec<Value> = events
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|shape| shape.pointer("/properties/type/const").cloned())
        .filter(|name| name.as_str().is_some_and(&keep))
        .collect();
    schemars::json_schema!({"type": "string", "enum": names})
}

fn sse(e: &JobEvent) -> SseEvent {
    let frame = EventFrame {
        id: e.seq.to_string(),
        event: e.name.clone(),
        data: e.data.to_string(),
    };
    SseEvent::default()
        .id(frame.id)
        .event(frame.event)
        .data(frame.data)
}

/// The job, when `viewer` may see it: another key's job is answered as absent.
async fn find(store: &dyn AuditStore, viewer: &Viewer, raw: &str) -> Result<Job, ApiError> {
    let id = Uuid::parse_str(raw).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!("id must be a UUID, got '{raw}'"),
        )
        .with_field("id")
    })?;
    crate::service::jobs::find(store, viewer, id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no job {id}")))
}

/// Where a workspace's routes are: `/workspaces/{name}`, or nothing for `default` (whose routes
/// are also the routes without a prefix).
pub fn workspace_prefix(workspace: &str) -> String {
    if workspace == writ_core::workspace_registry::WorkspaceName::DEFAULT {
        String::new()
    } else {
        format!("/workspaces/{workspace}")
    }
}

/// A batch's job, as `GET /jobs/{id}` and the job listing answer it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Job")]
pub struct JobView {
    /// The job's id, which is its batch's request id.
    pub id: Uuid,
    pub status: JobStatus,
    /// Accepted with `options.async` (202), not answered on the request's own connection.
    #[serde(rename = "async")]
    pub is_async: bool,
    /// The batch's files, in its order.
    pub files: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// When the replica running it last said it was alive.
    pub heartbeat_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The batch's own status once done.
    pub batch_status: Option<RequestStatus>,
    /// Why a failed job stopped (while it waits to be resumed: why its last run stopped).
    pub error: Option<String>,
    /// How many times another run took the job over after its replica died or stopped (0: it
    /// ran once). Past 3 the job ends failed.
    pub attempts: u32,
    /// The workspace the batch writes in (`default`: REPO_DIR); a replica resuming the job
    /// writes there too.
    pub workspace: String,
    /// The same body the synchronous call returns, once done.
    #[schemars(with = "Option<BatchResponse>")]
    pub response: Option<Value>,
    /// The URL of the event stream.
    pub events: String,
}

fn job_view(job: &Job) -> JobView {
    JobView {
        id: job.id,
        status: job.status,
        is_async: job.is_async,
        files: job.files.clone(),
        created_at: job.created_at,
        heartbeat_at: job.heartbeat_at,
        finished_at: job.finished_at,
        batch_status: job
            .batch_status
            .as_deref()
            .and_then(|s| serde_json::from_value(Value::String(s.to_owned())).ok()),
        error: job.error.clone(),
        attempts: u32::try_from(job.attempts).unwrap_or(0),
        workspace: job.workspace.clone(),
        response: job.response.clone(),
        events: format!(
            "{}/jobs/{}/events",
            workspace_prefix(&job.workspace),
            job.id
        ),
    }
}
