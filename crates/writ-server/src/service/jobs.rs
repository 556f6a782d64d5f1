//! A job's progress events, followed: the SSE stream of `GET /jobs/{id}/events` and the
//! `write_codebase` tool's progress notifications read the same stream.
//!
//! The stream replays from the store (after the last event seen) and then follows: woken at once
//! by this process's hub, or by polling when the batch runs on another replica. It ends after
//! `done`. A change set's events (`GET /changes/{id}/events`) are followed the same way, until
//! nothing more can be decided on it.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, Stream, StreamExt};
use tokio::sync::broadcast;
use uuid::Uuid;
use writ_core::jobs::{Job, JobEvent};
use writ_core::synthesis::jobs::EventHub;
use writ_core::{AuditStore, StoreError};

use crate::access::Viewer;

/// Whether `viewer` may see what request `request_id` made (its job, its operations): a key sees
/// its own, an admin or a server without keys everything.
pub async fn sees_request(
    store: &dyn AuditStore,
    viewer: &Viewer,
    request_id: Uuid,
) -> Result<bool, StoreError> {
    if viewer.only().is_none() && viewer.workspaces().is_none() {
        return Ok(true);
    }
    let Some(request) = store.get_request(request_id).await? else {
        return Ok(false);
    };
    Ok(viewer.sees(request.caller.as_deref()) && viewer.sees_workspace(&request.workspace))
}

/// Job `id` as `viewer` may see it: `None` when there is none or it is another key's, so that
/// another key's job reads as absent (`GET /jobs/{id}`, MCP `tasks/get`).
pub async fn find(
    store: &dyn AuditStore,
    viewer: &Viewer,
    id: Uuid,
) -> Result<Option<Job>, StoreError> {
    let Some(job) = store.get_job(id).await? else {
        return Ok(None);
    };
    if !viewer.sees_workspace(&job.workspace) {
        return Ok(None);
    }
    // A job's id is its request's id.
    Ok(sees_request(store, viewer, id).await?.then_some(job))
}

/// A stream not woken by this process (the batch runs elsewhere) looks again this often.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// Events read from the store per round.
const EVENTS_PER_READ: u32 = 200;
/// Polls a finished job's stream waits for its `done` event before ending without it.
const FINAL_GRACE_POLLS: u32 = 3;

struct Cursor {
    store: Arc<dyn AuditStore>,
    job: Uuid,
    after: i64,
    wake: broadcast::Receiver<Uuid>,
    finished: bool,
    /// Polls seen since the job was final without its `done` event.
    grace_polls: u32,
    /// Whose events these are, so when they end.
    of: Followed,
}

/// The two streams of events: a job's (ends with `done`) and a change set's (ends once nothing
/// more can be decided on it: every hunk decided, or its time run out).
#[derive(Clone, Copy)]
enum Followed {
    Job,
    Change,
}

impl Followed {
    /// Whether no more events will come.
    async fn is_over(self, store: &dyn AuditStore, id: Uuid) -> bool {
        match self {
            Followed::Job => {
                matches!(store.get_job(id).await, Ok(Some(job)) if job.status.is_final())
            }
            Followed::Change => match store.get_change(id).await {
                Ok(Some(set)) => set.undecided() == 0 || chrono::Utc::now() >= set.expires_at,
                Ok(None) => true,
                Err(_) => false,
            },
        }
    }
}

/// A job's events after `after`, in order, replayed from the store and then followed until
/// `done`. The SSE stream and the `write_codebase` tool's progress notifications read this.
/// `hub` is this process's, when it runs jobs; the stream subscribes to it at once and keeps no
/// borrow of it, so it may outlive the handler that made it.
pub fn follow(
    store: Arc<dyn AuditStore>,
    hub: Option<&EventHub>,
    job: Uuid,
    after: i64,
) -> impl Stream<Item = JobEvent> + use<> {
    follow_events(store, hub, job, after, Followed::Job)
}

/// A change set's events after `after` (`change_proposed`, then each `change_applied` and
/// `change_rejected`), replayed and followed until nothing more can be decided on it.
pub fn follow_change(
    store: Arc<dyn AuditStore>,
    hub: Option<&EventHub>,
    change: Uuid,
    after: i64,
) -> impl Stream<Item = JobEvent> + use<> {
    follow_events(store, hub, change, after, Followed::Change)
}

fn follow_events(
    store: Arc<dyn AuditStore>,
    hub: Option<&EventHub>,
    job: Uuid,
    after: i64,
    of: Followed,
) -> impl Stream<Item = JobEvent> + use<> {
    // Without `Jobs` this process runs no job, so nothing here wakes the stream: it polls.
    let wake = hub.map_or_else(|| EventHub::default().subscribe(), EventHub::subscribe);
    let cursor = Cursor {
        store,
        job,
        after,
        wake,
        finished: false,
        grace_polls: 0,
        of,
    };
    stream::unfold(cursor, |mut c| async move {
        if c.finished {
            return None;
        }
        loop {
            let events = match c.store.job_events(c.job, c.after, EVENTS_PER_READ).await {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(job = %c.job, error = %e, "event stream: store unavailable, retrying");
                    Vec::new()
                }
            };
            if !events.is_empty() {
                c.after = events.last().map(|e| e.seq).unwrap_or(c.after);
                c.finished = matches!(c.of, Followed::Job) && events.iter().any(|e| e.name == "done");
                return Some((stream::iter(events), c));
            }
            // Nothing new. A job that is over announces `done` just after it is marked so; give
            // that event a few polls to land, then end the stream anyway (the store may have
            // lost it), so no subscriber waits forever. A change set's last event commits with
            // its decision, so a few polls see it too.
            if c.of.is_over(c.store.as_ref(), c.job).await {
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
