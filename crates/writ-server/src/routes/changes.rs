//! Change sets held for review: `GET /changes`, `GET /changes/{id}`, `GET /changes/{id}/events`,
//! `POST /changes/{id}/apply` and `POST /changes/{id}/reject`, over
//! [`crate::service::changes`]. A decision's body is optional: none means every open hunk.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use schemars::{Schema, SchemaGenerator};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use writ_core::changes::{AppliedChange, ApplyChange, ChangeView, RejectChange, RejectedChange};
use writ_core::synthesis::progress::DECISION_EVENTS;

use crate::access::{AuditedCaller, Viewer};
use crate::error::{ApiError, ErrorCode};
use crate::extract::{ApiQuery, body_error, json_error};
use crate::headers::ApiHeaders;
use crate::routes::jobs::{EventsHeaders, names_where};
use crate::service::changes::{self, ChangeList, ListChanges, reviewer};
use crate::state::AppState;
use crate::telemetry::RequestId;

/// The change set a path names.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ChangeId {
    /// The change set's id (`change_id` of the answer that proposed it).
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
}

/// One server-sent event of a change set's stream.
#[derive(Debug, schemars::JsonSchema)]
#[schemars(inline)]
pub struct ChangeEventFrame {
    /// 1 for the proposal, then one per decision: the `Last-Event-ID` to resume after it.
    pub id: String,
    /// The event's name, the same as its `data`'s `type`.
    #[schemars(schema_with = "change_event_names")]
    pub event: String,
    /// The event as JSON.
    pub data: String,
}

fn change_event_names(generator: &mut SchemaGenerator) -> Schema {
    names_where(generator, |name| {
        name == "change_proposed" || DECISION_EVENTS.contains(&name)
    })
}

fn body<T: DeserializeOwned + Default>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let Json(value) = Json::<T>::from_bytes(&body).map_err(|e| json_error(&e))?;
    Ok(value)
}

/// Change sets of this workspace awaiting review (or every one), newest first.
pub async fn list_changes(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    ApiQuery(p): ApiQuery<ListChanges>,
) -> Result<Json<ChangeList>, ApiError> {
    let who = reviewer(request_id, who.caller, who.scope, "GET /changes", &viewer);
    Ok(Json(changes::list(&state, &who, p).await?))
}

/// One change set: its state, files, hunks, why each file was chosen and the checks' evidence.
pub async fn get_change(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    Path(ChangeId { id }): Path<ChangeId>,
) -> Result<Json<ChangeView>, ApiError> {
    let who = reviewer(
        request_id,
        who.caller,
        who.scope,
        "GET /changes/{id}",
        &viewer,
    );
    Ok(Json(changes::show(&state, &who, &id).await?))
}

/// Apply a change set's hunks (all open ones by default), all or nothing.
pub async fn post_apply(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    Path(ChangeId { id }): Path<ChangeId>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<AppliedChange>, ApiError> {
    let req: ApplyChange = body(&state, raw)?;
    let who = reviewer(
        request_id,
        who.caller,
        who.scope,
        "POST /changes/{id}/apply",
        &viewer,
    );
    let answer = changes::apply(&state, &who, &id, req).await?;
    wake(&state, answer.change_id);
    Ok(Json(answer))
}

/// Reject a change set's hunks (all open ones by default).
pub async fn post_reject(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    Path(ChangeId { id }): Path<ChangeId>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<RejectedChange>, ApiError> {
    let req: RejectChange = body(&state, raw)?;
    let who = reviewer(
        request_id,
        who.caller,
        who.scope,
        "POST /changes/{id}/reject",
        &viewer,
    );
    let answer = changes::reject(&state, &who, &id, req).await?;
    wake(&state, answer.change_id);
    Ok(Json(answer))
}

/// Server-Sent Events of one change set; `Last-Event-ID` resumes after that event.
pub async fn change_events(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    who: AuditedCaller,
    viewer: Viewer,
    Path(ChangeId { id }): Path<ChangeId>,
    ApiHeaders(headers): ApiHeaders<EventsHeaders>,
) -> Result<Response, ApiError> {
    let who = reviewer(
        request_id,
        who.caller,
        who.scope,
        "GET /changes/{id}/events",
        &viewer,
    );
    let change = changes::show(&state, &who, &id).await?;
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
    let hub = state.jobs.as_deref().map(|j| j.hub());
    let stream =
        crate::service::jobs::follow_change(state.store.clone(), hub, change.change_id, after).map(
            |e| {
                Ok::<_, Infallible>(
                    SseEvent::default()
                        .id(e.seq.to_string())
                        .event(e.name.clone())
                        .data(e.data.to_string()),
                )
            },
        );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// Wakes this process's followers of the change set's stream (others poll).
fn wake(state: &AppState, change: uuid::Uuid) {
    if let Some(jobs) = &state.jobs {
        jobs.hub().notify(change);
    }
}
