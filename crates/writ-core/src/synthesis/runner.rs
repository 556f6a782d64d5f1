//! Every batch runs as a job: recorded in the store, its progress events persisted in order and
//! announced to live subscribers, its heartbeat kept fresh, its answer stored when it ends.
//!
//! The caller either waits for the answer (synchronous `write_codebase`) or gets the job id at
//! once (`Prefer: respond-async`). Either way the batch runs in its own task, so a caller that
//! hangs up never cancels it.
//!
//! Where replicas share the store (PostgreSQL), the replica running a job holds a lease on it
//! and renews it ([`LEASE`], [`RENEW_EVERY`]). A replica that dies stops renewing; once the lease
//! lapsed, another replica claims the job ([`JobRunner::claim_lapsed`]) and resumes it: the
//! batch's pending operations are settled against the disk, files already written stay as they
//! are, the rest are generated and written, and the answer (every file's result) is stored once.
//! A job claimed more than [`MAX_RESUMES`] times ends `failed` with the reason. A replica that
//! stops hands its jobs back ([`JobRunner::hand_back`]) so another resumes them at once.
//! On SQLite (one process) jobs carry no lease: those whose process died are failed with a
//! reason by [`fail_stale_jobs`], at start-up and periodically.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast, mpsc, watch};
use uuid::Uuid;

use crate::audit::{
    AuditStore, AuditWrite, FileKind, Operation, OperationFilter, OperationStatus, StoreError,
};
use crate::jobs::{ClaimedJob, JobEvent, JobStatus, Lease, NewJob};
use crate::synthesis::batch::{Batch, WriteCodebaseRequest};
use crate::synthesis::progress::{DONE, Event, ProgressSink};
use crate::synthesis::response::{BatchResponse, FileResult, ImageInfo};
use crate::synthesis::run::{Prior, Synthesizer};
use crate::synthesis::submission::{Prepared, Submission, SubmitError, Submitted};

/// How often a running job refreshes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// How long a replica's hold on a job lasts unless renewed. Short enough that a killed
/// replica's jobs are resumed within seconds, long enough that a few slow renewals in a row
/// (a busy database) do not hand a live job to another replica.
pub const LEASE: Duration = Duration::from_secs(10);

/// How often the owner renews its leases: three tries before one lapses.
pub const RENEW_EVERY: Duration = Duration::from_secs(3);

/// Claims of one job after its first run; the next lapse ends it `failed`.
pub const MAX_RESUMES: i64 = 3;

/// Jobs one claim takes over at most, so one replica does not take every orphan at once.
const CLAIM_AT_MOST: u32 = 16;

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
    /// This replica's name in job leases; `None` where the store serves one process.
    owner: Option<Arc<str>>,
    /// The jobs this process runs, each with the switch that makes it hand the job back.
    running: Arc<Running>,
}

#[derive(Default)]
struct Running {
    jobs: Mutex<HashMap<Uuid, watch::Sender<bool>>>,
    changed: Notify,
}

impl Running {
    fn enter(self: &Arc<Self>, job: Uuid) -> (RunningGuard, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(job, tx);
        (
            RunningGuard {
                running: self.clone(),
                job,
            },
            rx,
        )
    }

    fn count(&self) -> usize {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Takes a job off [`Running`] when its run ends, however it ends.
struct RunningGuard {
    running: Arc<Running>,
    job: Uuid,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.job);
        self.running.changed.notify_waiters();
    }
}

/// Why a job's run stopped before its end; the job itself goes on elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Its lease could not be renewed in time, or another replica holds it now.
    LeaseLost,
    /// This process is stopping and handed the job back.
    HandedBack,
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
            owner: None,
            running: Arc::default(),
        }
    }

    /// Jobs owned by leases under the name `owner` (unique per replica), for a store that
    /// replicas share: renewed while they run, resumed by another replica when they lapse.
    pub fn with_leases(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(Arc::from(owner.into()));
        self
    }

    /// This replica's name in job leases, if jobs are leased.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// How many jobs this process runs now.
    pub fn jobs_running(&self) -> usize {
        self.running.count()
    }

    /// Stops every job this process runs and releases its lease, so that another replica
    /// resumes it at once; waits at most `within` for the runs to stop. Returns how many jobs
    /// were handed back. Without leases, nothing is handed back.
    pub async fn hand_back(&self, within: Duration) -> usize {
        if self.owner.is_none() {
            return 0;
        }
        let jobs: Vec<Uuid> = {
            let running = self
                .running
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for stop in running.values() {
                let _ = stop.send(true);
            }
            running.keys().copied().collect()
        };
        let _ = tokio::time::timeout(within, async {
            loop {
                let changed = self.running.changed.notified();
                if self.running.count() == 0 {
                    return;
                }
                changed.await;
            }
        })
        .await;
        jobs.len()
    }

    /// Claims the jobs whose lease lapsed (their replica died or handed them back) and resumes
    /// each in its own task; a job claimed more than [`MAX_RESUMES`] times is failed instead.
    /// Returns how many jobs were claimed.
    pub async fn claim_lapsed(&self) -> Result<usize, StoreError> {
        let Some(owner) = self.owner.clone() else {
            return Ok(0);
        };
        let now = Utc::now();
        let claimed = self
            .synthesizer
            .store
            .claim_jobs(&owner, now, lease_until(now), CLAIM_AT_MOST)
            .await?;
        let count = claimed.len();
        for job in claimed {
            tracing::warn!(job = %job.job.id, attempt = job.attempts, "resuming a job whose lease lapsed");
            let synthesizer = self.synthesizer.clone();
            let events = self.events();
            let running = self.running.clone();
            let hub = self.hub.clone();
            let owner = owner.clone();
            tokio::spawn(async move {
                resume(synthesizer, events, running, hub, owner, job).await;
            });
        }
        Ok(count)
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
                    lease: self.owner.as_ref().map(|owner| Lease {
                        owner: owner.to_string(),
                        until: lease_until(Utc::now()),
                    }),
                    request: sub.body.clone(),
                },
                status: JobStatus::Running,
            },
        ];
        let synthesizer = self.synthesizer.clone();
        let events = self.events();
        let job_id = sub.request_id;
        let (guard, stop) = self.running.enter(job_id);
        let ctx = JobContext {
            owner: self.owner.clone(),
            stop,
            first_seq: 0,
            resumed: None,
            _running: guard,
        };
        let handle = if is_async {
            if let Err(e) = synthesizer.store.commit(record).await {
                return synthesizer
                    .not_recorded(&sub, e)
                    .await
                    .map(Started::Replayed);
            }
            tokio::spawn(async move {
                run_job(&synthesizer, events, &sub, prior, Recorded::already(), ctx)
                    .await
                    .map_err(|_| SubmitError::InProgress)
            })
        } else {
            tokio::spawn(async move {
                record_and_run(synthesizer, events, sub, prior, record, ctx).await
            })
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
    ctx: JobContext,
) -> Result<Submitted, SubmitError> {
    let (recorded_tx, recorded_rx) = watch::channel(None);
    let store = synthesizer.store.clone();
    let commit = async move {
        let outcome = store.commit(record).await;
        let _ = recorded_tx.send(Some(outcome.is_ok()));
        outcome
    };
    let run = run_job(
        &synthesizer,
        events,
        &sub,
        prior,
        Recorded(recorded_rx),
        ctx,
    );
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
            // A run stopped before its end goes on elsewhere: the caller retries with its
            // `Idempotency-Key` and gets the answer once the job is done.
            submitted = &mut run => return submitted.map_err(|_| SubmitError::InProgress),
        }
    }
}

/// How one run of a job goes beyond its batch: who holds its lease, what stops it, where its
/// events continue, and what an earlier run already wrote.
struct JobContext {
    /// The lease holder (this replica) where jobs are leased.
    owner: Option<Arc<str>>,
    /// Turns true when this process hands the job back.
    stop: watch::Receiver<bool>,
    /// The last event number an earlier run stored (0 for a first run).
    first_seq: i64,
    resumed: Option<Resumed>,
    _running: RunningGuard,
}

/// What a resumed job's earlier runs settled: the files already written stay as they are and
/// are part of the one answer.
struct Resumed {
    /// Each written file's result, with its position in the batch.
    written: Vec<(usize, FileResult)>,
    /// Every file of the batch in order, to place each result.
    order: Vec<String>,
    created_at: DateTime<Utc>,
}

fn lease_until(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::from_std(LEASE).unwrap_or(chrono::Duration::seconds(10))
}

/// Resolves once `flag` turns true; never if its sender is gone without doing so.
async fn raised(mut flag: watch::Receiver<bool>) {
    if flag.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Keeps the job looking alive while its batch runs: the heartbeat, or (where jobs are leased)
/// the lease, renewed. Raises `lost` when the lease is another's, has ended, or could not be
/// renewed before it ran out.
async fn keep_alive(
    store: Arc<dyn AuditStore>,
    job_id: Uuid,
    owner: Option<Arc<str>>,
    lost: watch::Sender<bool>,
) {
    let Some(owner) = owner else {
        loop {
            tokio::time::sleep(HEARTBEAT_EVERY).await;
            if let Err(e) = store.heartbeat_job(job_id, JobStatus::Running).await {
                tracing::warn!(job = %job_id, error = %e, "job heartbeat failed");
            }
        }
    };
    let mut held_until = tokio::time::Instant::now() + LEASE;
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let asked = tokio::time::Instant::now();
        match store
            .renew_lease(job_id, &owner, lease_until(Utc::now()))
            .await
        {
            Ok(true) => held_until = asked + LEASE,
            Ok(false) => {
                tracing::warn!(job = %job_id, "the job's lease is no longer this replica's: stopping its run");
                let _ = lost.send(true);
                return;
            }
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "job lease renewal failed");
                if tokio::time::Instant::now() + RENEW_EVERY >= held_until {
                    tracing::warn!(job = %job_id, "the job's lease runs out before it can be renewed: stopping its run");
                    let _ = lost.send(true);
                    return;
                }
            }
        }
    }
}

async fn run_job(
    synthesizer: &Synthesizer,
    events: EventQueue,
    sub: &Submission,
    prior: Prior,
    recorded: Recorded,
    ctx: JobContext,
) -> Result<Submitted, Stopped> {
    let store = synthesizer.store.clone();
    let job_id = sub.request_id;
    let (lost_tx, lost) = watch::channel(false);
    // Aborted when this function ends in any way, a panic included: a job whose batch is gone
    // must stop looking alive, so that it is failed as interrupted (or resumed elsewhere).
    let heartbeat = AbortOnDrop(tokio::spawn(keep_alive(
        store.clone(),
        job_id,
        ctx.owner.clone(),
        lost_tx,
    )));

    let sink = ChannelSink {
        job_id,
        seq: AtomicI64::new(ctx.first_seq),
        tx: events,
    };
    let execute = async {
        if sub.batch.files.is_empty() {
            // Every file was written by an earlier run.
            return (
                Submitted {
                    response: BatchResponse::assemble(
                        job_id,
                        synthesizer.workspace.root().display().to_string(),
                        Vec::new(),
                        0,
                    ),
                    replayed: false,
                    upstream: Duration::ZERO,
                },
                Vec::new(),
            );
        }
        synthesizer.execute(sub, prior, &sink, &recorded).await
    };
    let (mut submitted, completions) = tokio::select! {
        done = execute => done,
        () = raised(lost) => return Err(Stopped::LeaseLost),
        () = raised(ctx.stop.clone()) => {
            // The run stops here (its writes so far are recorded); the next claim resumes it.
            if let Some(owner) = &ctx.owner
                && let Err(e) = store
                    .release_lease(job_id, owner, Some("handed back by a stopping replica"))
                    .await
            {
                tracing::warn!(job = %job_id, error = %e, "could not hand the job back; it is resumed once its lease lapses");
            }
            return Err(Stopped::HandedBack);
        }
    };
    drop(heartbeat);

    // A batch that wrote nothing still closes its records, once they exist.
    if !recorded.wait().await {
        return Ok(submitted);
    }
    if let Some(resumed) = &ctx.resumed {
        submitted.response = merge_resumed(resumed, submitted.response);
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
        // settles them; the job is resumed (or failed as interrupted) once its lease or
        // heartbeat is stale.
        tracing::error!(job = %job_id, error = %e, "batch done but its records could not be closed");
    }
    sink.emit(Event::Done {
        status: batch_status.as_str().to_string(),
    });
    Ok(submitted)
}

/// The one answer of a resumed batch: the files earlier runs wrote, and this run's, in the
/// batch's order; its duration counted from when the batch was accepted.
fn merge_resumed(resumed: &Resumed, latest: BatchResponse) -> BatchResponse {
    let mut results = resumed.written.clone();
    for result in latest.results {
        let at = resumed
            .order
            .iter()
            .position(|f| *f == result.filename)
            .unwrap_or(usize::MAX);
        results.push((at, result));
    }
    results.sort_by_key(|(at, _)| *at);
    let duration = (Utc::now() - resumed.created_at).num_milliseconds().max(0) as u64;
    let mut merged = BatchResponse::assemble(
        latest.request_id,
        latest.write_path,
        results.into_iter().map(|(_, r)| r).collect(),
        duration,
    );
    merged.upstream = latest.upstream;
    merged
}

/// A written file's result as its succeeded operation records it.
fn written_result(op: &Operation) -> FileResult {
    FileResult {
        filename: op.filename.clone(),
        kind: op.kind,
        success: true,
        operation: Some(op.operation),
        bytes: op.bytes.map(|b| b.max(0) as usize),
        sha256: op.sha256.clone(),
        chosen_model: op.chosen_model.clone(),
        selection: op.selection,
        arbiter_reason: op.arbiter_reason.clone(),
        candidates: op.candidates.clone(),
        operation_id: Some(op.id),
        error: None,
        image: op
            .detail
            .as_ref()
            .and_then(|d| d.get("image"))
            .and_then(|d| serde_json::from_value::<ImageInfo>(d.clone()).ok()),
        content: None,
        validation: None,
        change: op
            .detail
            .as_ref()
            .and_then(|d| d.get("change"))
            .and_then(|d| serde_json::from_value(d.clone()).ok()),
    }
}

/// Why a claimed job cannot be resumed now.
enum NotResumed {
    /// It never can (its request is missing or no longer valid): it ends `failed`.
    Never(String),
    /// The store is away: the lease is handed back and a later claim tries again.
    NotNow(String),
}

/// What a claimed job still has to do, from its records: the batch's pending operations are
/// settled against the disk first (the dead replica may have published them), then every file
/// with a succeeded operation is kept as written.
async fn plan_resume(
    synthesizer: &Synthesizer,
    claimed: &ClaimedJob,
) -> Result<(Submission, Prior, Resumed, i64), NotResumed> {
    let job = &claimed.job;
    let Some(body) = &claimed.request else {
        return Err(NotResumed::Never(
            "its request was recorded without its body, so it cannot be resumed".into(),
        ));
    };
    let request: WriteCodebaseRequest = serde_json::from_str(body)
        .map_err(|e| NotResumed::Never(format!("its recorded request cannot be read: {e}")))?;
    let batch = Batch::parse(request)
        .map_err(|e| NotResumed::Never(format!("its recorded request is not valid now: {e}")))?;
    let store = synthesizer.store.as_ref();
    let not_now = |e: StoreError| NotResumed::NotNow(e.to_string());
    let record = store
        .get_request(job.id)
        .await
        .map_err(not_now)?
        .ok_or_else(|| NotResumed::Never("its request record is missing".into()))?;
    let ops = batch_operations(store, job.id).await.map_err(not_now)?;
    let mut written: HashMap<String, Operation> = HashMap::new();
    for mut op in ops {
        if op.status == OperationStatus::Pending {
            match crate::files::settle_pending(store, synthesizer.workspace.as_ref(), &op)
                .await
                .map_err(not_now)?
            {
                Some(status) => op.status = status,
                None => continue,
            }
        }
        if op.status == OperationStatus::Succeeded {
            written.insert(op.filename.clone(), op);
        }
    }
    let order: Vec<String> = batch.files.iter().map(|f| f.path.to_string()).collect();
    let mut kept = Vec::new();
    let mut remaining = Vec::new();
    for (at, file) in batch.files.iter().enumerate() {
        match written.get(file.path.as_str()) {
            Some(op) => kept.push((at, written_result(op))),
            None => remaining.push(file.clone()),
        }
    }
    let sub = Submission {
        request_id: job.id,
        caller: record.caller,
        scope: record.scope,
        idempotency_key: record.idempotency_key,
        body_sha256: record.body_sha256.unwrap_or_default(),
        body: Some(body.clone()),
        batch: Batch {
            files: remaining,
            ..batch
        },
    };
    let prior = synthesizer
        .prepare_resumed(&sub)
        .await
        .map_err(|e| NotResumed::Never(format!("its files cannot be written now: {e}")))?;
    let last_seq = store
        .job_events(job.id, 0, u32::MAX)
        .await
        .map_err(not_now)?
        .last()
        .map(|e| e.seq)
        .unwrap_or(0);
    let resumed = Resumed {
        written: kept,
        order,
        created_at: job.created_at,
    };
    Ok((sub, prior, resumed, last_seq))
}

/// Every operation recorded for one batch (a batch has a handful of files, each written at most
/// a few times across its runs).
async fn batch_operations(
    store: &dyn AuditStore,
    request: Uuid,
) -> Result<Vec<Operation>, StoreError> {
    let filter = OperationFilter {
        request_id: Some(request),
        ..OperationFilter::default()
    };
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_operations(&filter, cursor.as_ref(), 100).await?;
        all.extend(page.operations);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(all),
        }
    }
}

/// Resumes one claimed job on this replica, or ends it `failed` when it was claimed too often
/// or can never be resumed.
async fn resume(
    synthesizer: Arc<Synthesizer>,
    events: EventQueue,
    running: Arc<Running>,
    hub: EventHub,
    owner: Arc<str>,
    claimed: ClaimedJob,
) {
    let job_id = claimed.job.id;
    if claimed.attempts > MAX_RESUMES {
        let reason = format!(
            "interrupted: its replica stopped {} times before it finished{}",
            claimed.attempts,
            claimed
                .job
                .error
                .as_deref()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        );
        fail_claimed(&synthesizer, &hub, &claimed, &reason).await;
        return;
    }
    let (sub, prior, resumed, last_seq) = match plan_resume(&synthesizer, &claimed).await {
        Ok(plan) => plan,
        Err(NotResumed::Never(why)) => {
            fail_claimed(&synthesizer, &hub, &claimed, &format!("not resumed: {why}")).await;
            return;
        }
        Err(NotResumed::NotNow(why)) => {
            tracing::warn!(job = %job_id, reason = %why, "could not resume a job now; handing it back");
            let _ = synthesizer
                .store
                .release_lease(job_id, &owner, Some(&format!("not resumed: {why}")))
                .await;
            return;
        }
    };
    let (guard, stop) = running.enter(job_id);
    let ctx = JobContext {
        owner: Some(owner),
        stop,
        first_seq: last_seq,
        resumed: Some(resumed),
        _running: guard,
    };
    match run_job(&synthesizer, events, &sub, prior, Recorded::already(), ctx).await {
        Ok(done) => {
            tracing::info!(job = %job_id, status = done.response.status.as_str(), "resumed job done")
        }
        Err(stopped) => {
            tracing::warn!(job = %job_id, ?stopped, "resumed job stopped before its end")
        }
    }
}

/// Ends a claimed job `failed` with `reason`. Its answer is still stored once, so a caller
/// retrying with its `Idempotency-Key` gets it: the files earlier runs wrote, and the others
/// failed with the reason.
async fn fail_claimed(
    synthesizer: &Synthesizer,
    hub: &EventHub,
    claimed: &ClaimedJob,
    reason: &str,
) {
    let store = synthesizer.store.as_ref();
    let job = &claimed.job;
    let write_path = synthesizer.workspace.root().display().to_string();
    let response = failed_answer(store, job, write_path, reason).await;
    let duration = response.duration_ms;
    let body = serde_json::to_value(&response).unwrap_or(serde_json::Value::Null);
    let closed = store
        .commit(vec![
            AuditWrite::FinishRequest {
                id: job.id,
                status: response.status,
                duration_ms: duration as i64,
                response: Some(body),
            },
            AuditWrite::FinishJob {
                id: job.id,
                status: JobStatus::Failed,
                batch_status: Some(response.status.as_str().to_string()),
                response: None,
                error: Some(reason.to_string()),
            },
        ])
        .await;
    if let Err(e) = closed {
        tracing::error!(job = %job.id, error = %e, "could not fail a job that cannot be resumed");
        return;
    }
    announce_failed(store, hub, job.id, reason).await;
    tracing::warn!(job = %job.id, reason, "failed a job that could not be resumed");
}

/// The answer of a job that ends `failed`: the files its runs wrote (as their records say), the
/// others failed with `reason`. Stored like any answer, so a repeat of its `Idempotency-Key`
/// gets it.
async fn failed_answer(
    store: &dyn AuditStore,
    job: &crate::jobs::Job,
    write_path: String,
    reason: &str,
) -> BatchResponse {
    let ops = batch_operations(store, job.id).await.unwrap_or_default();
    let results: Vec<FileResult> = job
        .files
        .iter()
        .map(|file| {
            let mine = ops.iter().filter(|op| op.filename == *file);
            match mine
                .clone()
                .find(|op| op.status == OperationStatus::Succeeded)
            {
                Some(op) => written_result(op),
                None => FileResult::failed(
                    file,
                    mine.map(|op| op.kind).next().unwrap_or(FileKind::Code),
                    reason,
                    Vec::new(),
                ),
            }
        })
        .collect();
    let duration = (Utc::now() - job.created_at).num_milliseconds().max(0) as u64;
    BatchResponse::assemble(job.id, write_path, results, duration)
}

/// The final `done` event of a failed job, after its last stored one, so every stream following
/// it ends.
async fn announce_failed(store: &dyn AuditStore, hub: &EventHub, job: Uuid, reason: &str) {
    let last = store
        .job_events(job, 0, u32::MAX)
        .await
        .map(|e| e.last().map(|e| e.seq).unwrap_or(0))
        .unwrap_or(0);
    let event = JobEvent {
        job_id: job,
        seq: last + 1,
        created_at: Utc::now(),
        name: DONE.to_string(),
        data: serde_json::json!({"type": "done", "status": "failed", "error": reason}),
    };
    let _ = store.append_job_event(&event).await;
    hub.notify(job);
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
    write_path: &std::path::Path,
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
        // Its answer is stored, so a repeat of its Idempotency-Key gets it.
        let answer = failed_answer(store, &job, write_path.display().to_string(), &reason).await;
        let body = serde_json::to_value(&answer).ok();
        if let Err(e) = store
            .finish_request(
                job.id,
                answer.status,
                answer.duration_ms as i64,
                body.as_ref(),
            )
            .await
        {
            tracing::warn!(job = %job.id, error = %e, "could not close the request of an interrupted job");
        }
        match hub {
            Some(hub) => announce_failed(store, hub, job.id, &reason).await,
            None => announce_failed(store, &EventHub::default(), job.id, &reason).await,
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
