//! Every batch runs as a job: recorded in the store, its progress events persisted in order and
//! announced to live subscribers, its heartbeat kept fresh, its answer stored when it ends.
//!
//! The caller either waits for the answer (synchronous `write_codebase`) or gets the job id at
//! once (`Prefer: respond-async`). Either way the batch runs in its own task, so a caller that
//! hangs up never cancels it. Jobs whose process died are failed with a reason by
//! [`fail_stale_jobs`], at start-up and periodically.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use crate::audit::{AuditStore, RequestStatus, StoreError};
use crate::jobs::{JobEvent, JobStatus, NewJob};
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::run::Synthesizer;
use crate::synthesis::submission::{Submission, SubmitError, Submitted};

/// How often a running job refreshes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Tells subscribers in this process that a job has new events (they then read the store, so
/// subscribers on other replicas, which poll, see the same sequence).
#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Uuid>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(1024).0,
        }
    }
}

impl EventHub {
    pub fn subscribe(&self) -> broadcast::Receiver<Uuid> {
        self.tx.subscribe()
    }
    fn notify(&self, job: Uuid) {
        // No subscriber is fine.
        let _ = self.tx.send(job);
    }
}

/// What `start` hands back.
pub enum Started {
    /// A repeated `Idempotency-Key`: the stored answer.
    Replayed(Submitted),
    /// The job runs; await the handle for its answer, or drop it to let it run on.
    Running {
        job_id: Uuid,
        handle: tokio::task::JoinHandle<Submitted>,
    },
}

/// The one entry to synthesis: HTTP, MCP and the CLI start every batch here.
pub struct JobRunner {
    synthesizer: Arc<Synthesizer>,
    hub: EventHub,
}

impl JobRunner {
    pub fn new(synthesizer: Arc<Synthesizer>, hub: EventHub) -> Self {
        JobRunner { synthesizer, hub }
    }

    /// Wakes this process's subscribers of job events.
    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    /// Checks, records and starts a batch. Errors here are the caller's (4xx) or the store's (503);
    /// after `Ok(Running)` the batch belongs to its own task.
    pub async fn start(&self, sub: Submission, is_async: bool) -> Result<Started, SubmitError> {
        if let Some(replay) = self.synthesizer.prepare(&sub).await? {
            return Ok(Started::Replayed(replay));
        }
        let store = self.synthesizer.store.clone();
        let job = NewJob {
            id: sub.request_id,
            created_at: Utc::now(),
            is_async,
            files: sub.batch.files.iter().map(|f| f.path.to_string()).collect(),
        };
        store.insert_job(&job).await.map_err(SubmitError::Audit)?;

        let synthesizer = self.synthesizer.clone();
        let hub = self.hub.clone();
        let job_id = sub.request_id;
        let handle = tokio::spawn(async move { run_job(synthesizer, hub, sub).await });
        Ok(Started::Running { job_id, handle })
    }
}

async fn run_job(synthesizer: Arc<Synthesizer>, hub: EventHub, sub: Submission) -> Submitted {
    let store = synthesizer.store.clone();
    let job_id = sub.request_id;
    if let Err(e) = store.heartbeat_job(job_id, JobStatus::Running).await {
        tracing::warn!(job = %job_id, error = %e, "could not mark the job running");
    }
    // Aborted when this function ends in any way, a panic included: a job whose batch is gone
    // must stop looking alive, so that it is failed as interrupted.
    let heartbeat = AbortOnDrop(tokio::spawn({
        let store = store.clone();
        async move {
            loop {
                tokio::time::sleep(HEARTBEAT_EVERY).await;
                if let Err(e) = store.heartbeat_job(job_id, JobStatus::Running).await {
                    tracing::warn!(job = %job_id, error = %e, "job heartbeat failed");
                }
            }
        }
    }));

    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_events(store.clone(), hub.clone(), job_id, rx));
    let sink = ChannelSink { tx };
    let submitted = synthesizer.execute(&sub, &sink).await;
    drop(heartbeat);

    // The answer is stored before `done` is announced, so whoever reacts to `done` by reading
    // the job finds its answer there.
    let batch_status = submitted.response.status;
    let body = serde_json::to_value(&submitted.response).unwrap_or(serde_json::Value::Null);
    if let Err(e) = store
        .finish_job(
            job_id,
            JobStatus::Done,
            Some(batch_status.as_str()),
            Some(&body),
            None,
        )
        .await
    {
        tracing::error!(job = %job_id, error = %e, "batch done but its job record could not be closed");
    }
    sink.emit(Event::Done {
        status: batch_status.as_str().to_string(),
    });
    drop(sink);
    let _ = writer.await;
    submitted
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Queues events from the (synchronous) sink for the writer task, keeping their order.
struct ChannelSink {
    tx: mpsc::UnboundedSender<Event>,
}

impl ProgressSink for ChannelSink {
    fn emit(&self, event: Event) {
        let _ = self.tx.send(event);
    }
}

/// Most events written in one statement.
const EVENTS_PER_WRITE: usize = 256;

async fn write_events(
    store: Arc<dyn AuditStore>,
    hub: EventHub,
    job_id: Uuid,
    mut rx: mpsc::UnboundedReceiver<Event>,
) {
    let mut seq = 0_i64;
    let mut burst: Vec<JobEvent> = Vec::new();
    let stamp = |event: Event, seq: &mut i64| {
        *seq += 1;
        JobEvent {
            job_id,
            seq: *seq,
            created_at: Utc::now(),
            name: event.name().to_string(),
            data: serde_json::to_value(&event).unwrap_or(serde_json::Value::Null),
        }
    };
    // Whatever arrived while the last write ran goes out in the next one, so a burst of events
    // (the fan-out of a five-file batch) costs a few commits, not one each.
    while let Some(event) = rx.recv().await {
        burst.push(stamp(event, &mut seq));
        while burst.len() < EVENTS_PER_WRITE {
            match rx.try_recv() {
                Ok(event) => burst.push(stamp(event, &mut seq)),
                Err(_) => break,
            }
        }
        if let Err(e) = store.append_job_events(&burst).await {
            // Progress is best effort; the batch and its audit trail do not depend on it.
            tracing::warn!(job = %job_id, events = burst.len(), error = %e, "could not store progress events");
        }
        burst.clear();
        hub.notify(job_id);
    }
}

/// Fails every unfinished job whose heartbeat is older than `older_than`: its process is gone.
/// The request record is closed too, and a final `done` event ends any stream following it.
/// Returns how many jobs were failed.
pub async fn fail_stale_jobs(
    store: &dyn AuditStore,
    older_than: Duration,
    hub: Option<&EventHub>,
) -> Result<usize, StoreError> {
    let cutoff =
        Utc::now() - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::zero());
    let mut failed = 0;
    for job in store.stale_jobs(cutoff).await? {
        let reason = format!(
            "interrupted: the process running this batch stopped before it finished (last heartbeat {}); \
             files written before that are listed in /operations?request_id={}",
            job.heartbeat_at.to_rfc3339(),
            job.id
        );
        if !store
            .finish_job(
                job.id,
                JobStatus::Failed,
                Some("error"),
                None,
                Some(&reason),
            )
            .await?
        {
            continue;
        }
        failed += 1;
        if let Err(e) = store
            .finish_request(job.id, RequestStatus::Error, 0, None)
            .await
        {
            tracing::warn!(job = %job.id, error = %e, "could not close the request of an interrupted job");
        }
        let last = store
            .job_events(job.id, 0, u32::MAX)
            .await
            .map(|e| e.last().map(|e| e.seq).unwrap_or(0))
            .unwrap_or(0);
        let done = Event::Done {
            status: "failed".into(),
        };
        let event = JobEvent {
            job_id: job.id,
            seq: last + 1,
            created_at: Utc::now(),
            name: done.name().to_string(),
            data: serde_json::json!({"type": "done", "status": "failed", "error": reason}),
        };
        let _ = store.append_job_event(&event).await;
        if let Some(hub) = hub {
            hub.notify(job.id);
        }
        tracing::warn!(job = %job.id, "failed an interrupted job");
    }
    Ok(failed)
}
