//! Every batch runs as a job: recorded in the store, its progress events persisted in order and
//! announced to live subscribers, its heartbeat kept fresh, its answer stored when it ends.
//!
//! The caller either waits for the answer (synchronous `write_codebase`) or gets the job id at
//! once (`Prefer: respond-async`). Either way the batch runs in its own task, so a caller that
//! hangs up never cancels it. Jobs whose process died are failed with a reason by
//! [`fail_stale_jobs`], at start-up and periodically.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use uuid::Uuid;

use crate::audit::{AuditStore, AuditWrite, RequestStatus, StoreError};
use crate::jobs::{JobEvent, JobStatus, NewJob};
use crate::synthesis::progress::{DONE, Event, ProgressSink};
use crate::synthesis::run::{Prior, Synthesizer};
use crate::synthesis::submission::{Prepared, Submission, SubmitError, Submitted};

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
    /// The job runs; await the handle for its answer, or drop it to let it run on. The answer
    /// can still be a refusal: a synchronous batch's records commit while its models run.
    Running {
        job_id: Uuid,
        handle: tokio::task::JoinHandle<Result<Submitted, SubmitError>>,
    },
}

/// Whether a batch's records (its request and job) are committed. They commit while the models
/// run; nothing of the batch is written, and no answer given, before they are.
#[derive(Clone)]
pub struct Recorded(watch::Receiver<Option<bool>>);

impl Recorded {
    fn already() -> Self {
        Recorded(watch::channel(Some(true)).1)
    }

    /// Waits for the commit; `false` if it failed (the batch is then being abandoned).
    pub(crate) async fn wait(&self) -> bool {
        let mut rx = self.0.clone();
        matches!(
            rx.wait_for(Option::is_some).await.map(|v| *v),
            Ok(Some(true))
        )
    }
}

/// The one entry to synthesis: HTTP, MCP and the CLI start every batch here.
pub struct JobRunner {
    synthesizer: Arc<Synthesizer>,
    hub: EventHub,
    /// Every job's events, to the one task that stores them (started with the first batch).
    events: OnceLock<EventQueue>,
}

/// The way to the event writer, and how far it has got.
#[derive(Clone)]
struct EventQueue {
    tx: mpsc::UnboundedSender<JobEvent>,
    progress: Arc<EventProgress>,
}

#[derive(Default)]
struct EventProgress {
    sent: AtomicU64,
    stored: AtomicU64,
    stored_more: Notify,
}

impl EventQueue {
    fn send(&self, event: JobEvent) {
        self.progress.sent.fetch_add(1, Ordering::SeqCst);
        if self.tx.send(event).is_err() {
            self.progress.stored.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl JobRunner {
    pub fn new(synthesizer: Arc<Synthesizer>, hub: EventHub) -> Self {
        JobRunner {
            synthesizer,
            hub,
            events: OnceLock::new(),
        }
    }

    /// Waits (at most `within`) until every event queued so far has been written, so a process
    /// that is stopping does not drop the last events of the batches it just finished.
    pub async fn flush_events(&self, within: Duration) {
        let Some(queue) = self.events.get() else {
            return;
        };
        let progress = &queue.progress;
        let _ = tokio::time::timeout(within, async {
            loop {
                let stored_more = progress.stored_more.notified();
                if progress.stored.load(Ordering::SeqCst) >= progress.sent.load(Ordering::SeqCst) {
                    return;
                }
                stored_more.await;
            }
        })
        .await;
    }

    /// Wakes this process's subscribers of job events.
    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    /// Checks and starts a batch. Errors here are the caller's (4xx) or the store's (503); after
    /// `Ok(Running)` the batch belongs to its own task.
    ///
    /// The request and its job are recorded in one commit. An async caller's 202 waits for it
    /// (it promises a job to follow); a waiting caller's batch starts its models at once and
    /// the commit runs beside them, since the answer comes long after it anyway.
    pub async fn start(&self, sub: Submission, is_async: bool) -> Result<Started, SubmitError> {
        let prior = match self.synthesizer.prepare(&sub).await? {
            Prepared::Replay(replay) => return Ok(Started::Replayed(replay)),
            Prepared::Fresh(prior) => prior,
        };
        let record = vec![
            AuditWrite::InsertRequest(self.synthesizer.request_record(&sub)),
            AuditWrite::InsertJob {
                job: NewJob {
                    id: sub.request_id,
                    created_at: Utc::now(),
                    is_async,
                    files: sub.batch.files.iter().map(|f| f.path.to_string()).collect(),
                },
                status: JobStatus::Running,
            },
        ];
        let synthesizer = self.synthesizer.clone();
        let events = self.events();
        let job_id = sub.request_id;
        let handle = if is_async {
            if let Err(e) = synthesizer.store.commit(record).await {
                return synthesizer
                    .not_recorded(&sub, e)
                    .await
                    .map(Started::Replayed);
            }
            tokio::spawn(async move {
                Ok(run_job(&synthesizer, events, &sub, prior, Recorded::already()).await)
            })
        } else {
            tokio::spawn(
                async move { record_and_run(synthesizer, events, sub, prior, record).await },
            )
        };
        Ok(Started::Running { job_id, handle })
    }

    fn events(&self) -> EventQueue {
        self.events
            .get_or_init(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                let progress = Arc::new(EventProgress::default());
                tokio::spawn(write_events(
                    self.synthesizer.store.clone(),
                    self.hub.clone(),
                    rx,
                    progress.clone(),
                ));
                EventQueue { tx, progress }
            })
            .clone()
    }
}

/// Runs the batch while its records commit; a refused record stops it (nothing was written:
/// writes wait for the record) and is the answer.
async fn record_and_run(
    synthesizer: Arc<Synthesizer>,
    events: EventQueue,
    sub: Submission,
    prior: Prior,
    record: Vec<AuditWrite>,
) -> Result<Submitted, SubmitError> {
    let (recorded_tx, recorded_rx) = watch::channel(None);
    let store = synthesizer.store.clone();
    let commit = async move {
        let outcome = store.commit(record).await;
        let _ = recorded_tx.send(Some(outcome.is_ok()));
        outcome
    };
    let run = run_job(&synthesizer, events, &sub, prior, Recorded(recorded_rx));
    tokio::pin!(commit, run);
    let mut committed = false;
    loop {
        tokio::select! {
            biased;
            outcome = &mut commit, if !committed => {
                committed = true;
                if let Err(e) = outcome {
                    return synthesizer.not_recorded(&sub, e).await;
                }
            }
            submitted = &mut run => return Ok(submitted),
        }
    }
}

async fn run_job(
    synthesizer: &Synthesizer,
    events: EventQueue,
    sub: &Submission,
    prior: Prior,
    recorded: Recorded,
) -> Submitted {
    let store = synthesizer.store.clone();
    let job_id = sub.request_id;
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

    let sink = ChannelSink {
        job_id,
        seq: AtomicI64::new(0),
        tx: events,
    };
    let (submitted, completions) = synthesizer.execute(sub, prior, &sink, &recorded).await;
    drop(heartbeat);

    // A batch that wrote nothing still closes its records, once they exist.
    if !recorded.wait().await {
        return submitted;
    }
    // The completions of the batch's writes, the request's closing, its stored answer and the
    // job's, in one commit; and before `done` is announced, so whoever reacts to `done` by
    // reading the job finds its answer there.
    let batch_status = submitted.response.status;
    let body = serde_json::to_value(&submitted.response).unwrap_or(serde_json::Value::Null);
    let mut finish = completions;
    finish.extend([
        AuditWrite::FinishRequest {
            id: job_id,
            status: batch_status,
            duration_ms: submitted.response.duration_ms as i64,
            response: Some(body),
        },
        // The answer is stored once, on the request: a job without an answer of its own gives
        // its request's (they share the id), so the closing statement carries it once.
        AuditWrite::FinishJob {
            id: job_id,
            status: JobStatus::Done,
            batch_status: Some(batch_status.as_str().to_string()),
            response: None,
            error: None,
        },
    ]);
    if let Err(e) = store.commit(finish).await {
        // The files are written and their pending records hold their content: reconciliation
        // settles them; the job is failed as interrupted once its heartbeat is stale.
        tracing::error!(job = %job_id, error = %e, "batch done but its records could not be closed");
    }
    sink.emit(Event::Done {
        status: batch_status.as_str().to_string(),
    });
    submitted
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Numbers a job's events in the order the batch emits them and queues them for the writer.
struct ChannelSink {
    job_id: Uuid,
    seq: AtomicI64,
    tx: EventQueue,
}

impl ProgressSink for ChannelSink {
    fn emit(&self, event: Event) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.tx.send(JobEvent {
            job_id: self.job_id,
            seq,
            created_at: Utc::now(),
            name: event.name().to_string(),
            data: serde_json::to_value(&event).unwrap_or(serde_json::Value::Null),
        });
    }
}

/// Most events written in one statement: five values each, well under the bound parameters
/// either backend takes in one statement (SQLite's 32,766), so a backlog under load drains in
/// a few large inserts instead of growing.
const EVENTS_PER_WRITE: usize = 2048;

/// How long the event writer waits, once an event has arrived, for the rest of its burst. A
/// batch emits its events in bursts (its files start their calls within a millisecond or two,
/// their answers arrive together, its files are written together), but spread enough that a
/// writer taking whatever was queued wrote a statement for every two or three events at low
/// rates: nine statements for a five-file batch's 52 events, each a transaction on the database.
/// Waiting this long merges a burst into one; live progress is this much later at most, which
/// no one following a model call can see. A `done` event ends the wait (not the burst).
const EVENT_LINGER: Duration = Duration::from_millis(5);

/// Stores every job's events, in bursts: what arrives within [`EVENT_LINGER`] of a burst's
/// first event, and whatever arrived while the last write ran, goes out in one statement, so
/// the events of many batches cost a few commits, and no batch's answer waits for its progress
/// to be stored.
async fn write_events(
    store: Arc<dyn AuditStore>,
    hub: EventHub,
    mut rx: mpsc::UnboundedReceiver<JobEvent>,
    progress: Arc<EventProgress>,
) {
    let mut burst: Vec<JobEvent> = Vec::new();
    while next_burst(&mut rx, &mut burst, EVENT_LINGER).await {
        let mut jobs: Vec<Uuid> = burst.iter().map(|e| e.job_id).collect();
        jobs.sort_unstable();
        jobs.dedup();
        if let Err(e) = store.append_job_events(&burst).await {
            // Progress is best effort; the batch and its audit trail do not depend on it. One
            // job's refused events (a stale-job sweep got in first) must not cost the others.
            if jobs.len() == 1 {
                tracing::warn!(events = burst.len(), error = %e, "could not store progress events");
            } else {
                for job in &jobs {
                    let own: Vec<JobEvent> =
                        burst.iter().filter(|e| e.job_id == *job).cloned().collect();
                    if let Err(e) = store.append_job_events(&own).await {
                        tracing::warn!(job = %job, events = own.len(), error = %e, "could not store progress events");
                    }
                }
            }
        }
        progress
            .stored
            .fetch_add(burst.len() as u64, Ordering::SeqCst);
        progress.stored_more.notify_waiters();
        burst.clear();
        for job in jobs {
            hub.notify(job);
        }
    }
}

/// Waits for an event, then gathers into `burst` every event already queued and those that
/// arrive within `linger` of the first, up to [`EVENTS_PER_WRITE`]. Once a `done` event is among
/// them the gathering stops waiting but still takes what is queued: under load the queue holds
/// many jobs' `done`s, and stopping at the first would cut the bursts small enough for the
/// writer to fall behind. False when the channel is closed and nothing is left to write.
async fn next_burst(
    rx: &mut mpsc::UnboundedReceiver<JobEvent>,
    burst: &mut Vec<JobEvent>,
    linger: Duration,
) -> bool {
    let Some(first) = rx.recv().await else {
        return false;
    };
    let until = tokio::time::Instant::now() + linger;
    let mut waiting = first.name != DONE;
    burst.push(first);
    while burst.len() < EVENTS_PER_WRITE {
        let event = match rx.try_recv() {
            Ok(event) => event,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) if !waiting => break,
            Err(mpsc::error::TryRecvError::Empty) => {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(event)) => event,
                    Ok(None) | Err(_) => break,
                }
            }
        };
        waiting &= event.name != DONE;
        burst.push(event);
    }
    true
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, name: &str) -> JobEvent {
        JobEvent {
            job_id: Uuid::nil(),
            seq,
            created_at: Utc::now(),
            name: name.to_string(),
            data: serde_json::Value::Null,
        }
    }

    fn seqs(burst: &[JobEvent]) -> Vec<i64> {
        burst.iter().map(|e| e.seq).collect()
    }

    /// Far longer than any test waits: a burst that ends before it ended for another reason.
    const LONG: Duration = Duration::from_secs(30);

    /// The next burst's events with a linger of [`LONG`], which must end (within 10 s) for a
    /// reason other than the linger: `why` says which.
    async fn burst_ended_early(rx: &mut mpsc::UnboundedReceiver<JobEvent>, why: &str) -> Vec<i64> {
        let mut burst = Vec::new();
        let gathered = tokio::time::timeout(Duration::from_secs(10), async {
            next_burst(rx, &mut burst, LONG).await
        })
        .await
        .expect(why);
        assert!(gathered);
        seqs(&burst)
    }

    #[tokio::test]
    async fn events_arriving_within_the_linger_go_out_together_and_done_ends_the_wait() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(event(1, "queued")).unwrap();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            tx.send(event(2, "file_started")).unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
            tx.send(event(3, DONE)).unwrap();
            tx.send(event(4, "queued")).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(event(5, "queued")).unwrap();
            tx
        });
        let burst = burst_ended_early(&mut rx, "done ends the wait before the linger does").await;
        // The event queued with `done` goes too; the one sent later waits for the next burst.
        assert_eq!(burst, [1, 2, 3, 4]);
        let _tx = sender.await.unwrap();
        let mut burst = Vec::new();
        assert!(next_burst(&mut rx, &mut burst, Duration::ZERO).await);
        assert_eq!(seqs(&burst), [5]);
    }

    #[tokio::test]
    async fn everything_queued_goes_out_in_one_burst_past_any_done() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for (seq, name) in [
            (1, "queued"),
            (2, DONE),
            (3, "queued"),
            (4, DONE),
            (5, "file_started"),
        ] {
            tx.send(event(seq, name)).unwrap();
        }
        let burst =
            burst_ended_early(&mut rx, "a burst with a done does not wait for the linger").await;
        assert_eq!(burst, [1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn an_event_after_the_linger_starts_the_next_burst() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(event(1, "queued")).unwrap();
        let mut burst = Vec::new();
        assert!(next_burst(&mut rx, &mut burst, Duration::from_millis(20)).await);
        assert_eq!(seqs(&burst), [1]);
        tx.send(event(2, "file_started")).unwrap();
        tx.send(event(3, "file_started")).unwrap();
        burst.clear();
        assert!(next_burst(&mut rx, &mut burst, Duration::from_millis(20)).await);
        assert_eq!(seqs(&burst), [2, 3]);
    }

    #[tokio::test]
    async fn a_closed_queue_ends_the_burst_and_then_the_writer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(event(1, "queued")).unwrap();
        drop(tx);
        let burst = burst_ended_early(&mut rx, "a closed queue does not wait for the linger").await;
        assert_eq!(burst, [1]);
        let mut burst = Vec::new();
        assert!(!next_burst(&mut rx, &mut burst, LONG).await);
        assert!(burst.is_empty());
    }
}
