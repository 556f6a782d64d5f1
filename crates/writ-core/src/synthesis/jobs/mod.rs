//! Every batch runs as a job: recorded in the store, its progress events persisted in order and
//! announced to live subscribers, its heartbeat kept fresh, its answer stored when it ends.
//!
//! The caller either waits for the answer (synchronous `write_codebase`) or gets the job id at
//! once (`Prefer: respond-async`). Either way the batch runs in its own task, so a caller that
//! hangs up never cancels it.
//!
//! Where replicas share the store (PostgreSQL), the replica running a job holds a lease on it
//! and renews it ([`LEASE`], [`RENEW_EVERY`]). A replica that dies stops renewing; once the lease
//! lapsed, another replica claims the job ([`Jobs::take_over_lapsed`]) and resumes it: the
//! batch's pending operations are settled against the disk, files already written stay as they
//! are, the rest are generated and written, and the answer (every file's result) is stored once.
//! A job claimed more than [`MAX_RESUMES`] times ends `failed` with the reason. A replica that
//! stops hands its jobs back ([`Jobs::hand_back`]) so another resumes them at once.
//! On SQLite (one process) jobs carry no lease: those whose process died are failed with a
//! reason by [`fail_stale_jobs`], at start-up and periodically.
//!
//! Beside this file: `events` (the progress writer), `liveness` (leases and stale jobs) and
//! `resume` (taking over a dead replica's job).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tracing::Instrument;
use uuid::Uuid;

use crate::audit::{
    AuditWrite, CallRecord, FileKind, Operation, OperationFilter, OperationStatus, SynthesisStore,
};
use crate::jobs::{ClaimedJob, JobEvent, JobStatus};
use crate::store::StoreError;
use crate::synthesis::batch::{Batch, WriteCodebaseRequest};
use crate::synthesis::progress::{DONE, Event, ProgressSink};
use crate::synthesis::record::{self, JobEnd, Recorded};
use crate::synthesis::response::{BatchResponse, FileResult, ImageInfo};
use crate::synthesis::stage::{Present, Synthesizer};
use crate::synthesis::submission::{BatchAnswer, Begun, Submission, SubmitError};

mod admission;
mod events;
mod liveness;
mod resume;

pub use crate::synthesis::lease::{LEASE, RENEW_EVERY};
use crate::synthesis::lease::{LeaseHold, lease_until};
use events::{ChannelSink, write_events};
pub use liveness::fail_stale_jobs;
use liveness::{keep_alive, raised};
use resume::{announce_failed, failed_answer, merge_resumed, resume};

pub use admission::{AdmissionPorts, AdmitError, Admitted, BatchRequest, parse_request};

/// How often a running job refreshes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

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
    /// Wakes the streams following `job` (a job's, or a change set's: its id is its stream's).
    pub fn notify(&self, job: Uuid) {
        // No subscriber is fine.
        let _ = self.tx.send(job);
    }
}

/// A running batch: its job id and its answer. The batch runs in its own task, which also holds
/// the caller's admission permit until the batch ends; dropping the handle (an async caller, a
/// caller who hung up) lets the batch run on and be recorded all the same.
pub struct BatchHandle {
    job_id: Uuid,
    task: tokio::task::JoinHandle<Result<BatchAnswer, SubmitError>>,
}

impl BatchHandle {
    pub fn job_id(&self) -> Uuid {
        self.job_id
    }

    /// Waits for the batch's answer. It can still be a refusal: a synchronous batch's records
    /// commit while its models run.
    pub async fn answer(self) -> Result<BatchAnswer, SubmitError> {
        self.task
            .await
            .unwrap_or_else(|e| Err(SubmitError::Lost(e.to_string())))
    }
}

/// The one entry to synthesis: HTTP, MCP and the CLI start every batch here.
/// The synthesizer of each named workspace (its workspace, its sandbox runner), for a batch
/// accepted in it and for a job resumed in the workspace it was accepted in.
#[async_trait::async_trait]
pub trait WorkspaceSynthesizers: Send + Sync {
    /// `None` when there is no workspace of that name (it was deleted).
    async fn synthesizer_for(
        &self,
        workspace: &str,
    ) -> Result<Option<Arc<Synthesizer>>, StoreError>;
}

/// A batch whose targets admission let through ([`Jobs::admit_targets`]): what it is started
/// with.
pub(crate) struct Prepared {
    synthesizer: Arc<Synthesizer>,
    present: Present,
    budgets: crate::budgets::BatchBudgets,
}

pub struct Jobs {
    /// The synthesizer of `default` (`REPO_DIR`).
    synthesizer: Arc<Synthesizer>,
    /// Those of the other workspaces; `None`: batches are served in `default` only.
    workspaces: Option<Arc<dyn WorkspaceSynthesizers>>,
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
#[derive(Debug, Clone)]
enum Stopped {
    /// Its lease could not be renewed in time, or another replica holds it now.
    LeaseLost,
    /// This process is stopping and handed the job back.
    HandedBack,
    /// The store stayed unreachable for the whole outage wait: what the run had not written is
    /// not written; the job is resumed (or failed as interrupted) once the store is back.
    Outage(StoreError),
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

impl Jobs {
    pub fn new(synthesizer: Arc<Synthesizer>, hub: EventHub) -> Self {
        Jobs {
            synthesizer,
            workspaces: None,
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

    /// Batches in named workspaces too, each run by that workspace's synthesizer.
    pub fn with_workspaces(mut self, workspaces: Arc<dyn WorkspaceSynthesizers>) -> Self {
        self.workspaces = Some(workspaces);
        self
    }

    /// The synthesizer that writes in `workspace`; `None` when there is no such workspace.
    pub async fn synthesizer_for(
        &self,
        workspace: &str,
    ) -> Result<Option<Arc<Synthesizer>>, StoreError> {
        if workspace == self.synthesizer.workspace.name() {
            return Ok(Some(self.synthesizer.clone()));
        }
        match &self.workspaces {
            Some(workspaces) => workspaces.synthesizer_for(workspace).await,
            None => Ok(None),
        }
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
    pub async fn take_over_lapsed(&self) -> Result<usize, StoreError> {
        let Some(owner) = self.owner.clone() else {
            return Ok(0);
        };
        let now = Utc::now();
        let claimed = self
            .synthesizer
            .store
            .take_over_jobs(&owner, now, lease_until(now), CLAIM_AT_MOST)
            .await?;
        let count = claimed.len();
        for job in claimed {
            tracing::warn!(job = %job.job.id, attempt = job.attempts, workspace = %job.job.workspace, "resuming a job whose lease lapsed");
            // Resumed in the workspace it was accepted in, never in this replica's default.
            let synthesizer = match self.synthesizer_for(&job.job.workspace).await {
                Ok(Some(synthesizer)) => synthesizer,
                Ok(None) => {
                    let reason = format!(
                        "not resumed: its workspace '{}' no longer exists",
                        job.job.workspace
                    );
                    resume::fail_claimed(&self.synthesizer, &self.hub, &job, &reason).await;
                    continue;
                }
                Err(e) => {
                    let _ = self
                        .synthesizer
                        .store
                        .release_lease(job.job.id, &owner, Some(&format!("not resumed: {e}")))
                        .await;
                    continue;
                }
            };
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

    /// The synthesizer of the submission's workspace, or the refusal for a workspace gone.
    pub(crate) async fn synthesizer_of(
        &self,
        sub: &Submission,
    ) -> Result<Arc<Synthesizer>, SubmitError> {
        self.synthesizer_for(&sub.workspace)
            .await
            .map_err(SubmitError::Audit)?
            .ok_or_else(|| {
                SubmitError::Unavailable(format!("no workspace named '{}'", sub.workspace))
            })
    }

    /// Admission's replay ([`super::admission`]): the stored answer of a repeated
    /// `Idempotency-Key`, waited for while its batch still runs.
    pub(crate) async fn replay(
        &self,
        sub: &Submission,
    ) -> Result<Option<Box<BatchAnswer>>, SubmitError> {
        let synthesizer = self.synthesizer_of(sub).await?;
        Ok(synthesizer.replay(sub).await?.map(Box::new))
    }

    /// Admission's targets ([`super::admission`]): the models, the files on disk and their
    /// `expected_sha256`, the validation commands, and how the batch degrades near a limit of
    /// `budgets` (which every model call asks again). Nothing is recorded or taken.
    pub(crate) async fn admit_targets(
        &self,
        synthesizer: Arc<Synthesizer>,
        sub: &Submission,
        budgets: crate::budgets::BatchBudgets,
    ) -> Result<Prepared, SubmitError> {
        let mut present = synthesizer.check_fresh(sub).await?;
        if let Some(degraded) = budgets
            .degraded(synthesizer.store.as_ref(), Utc::now())
            .await
            .map_err(SubmitError::Audit)?
        {
            present.degraded = Some(synthesizer.degrade(sub, degraded).await);
        }
        Ok(Prepared {
            synthesizer,
            present,
            budgets,
        })
    }

    /// Starts a batch admission let through ([`Jobs::admit`]), holding its slot. Errors here are
    /// the store's (503), or a replay when another request with the same key got in first;
    /// after `Ok(Running)` the batch belongs to its own task.
    ///
    /// The request and its job are recorded in one commit. An async caller's 202 waits for it
    /// (it promises a job to follow); a waiting caller's batch starts its models at once and
    /// the commit runs beside them, since the answer comes long after it anyway.
    ///
    /// The admitted batch's permit is whatever bounds the caller's batches in flight: it is held
    /// by the batch's task and released when the batch ends, however long the caller waits.
    pub async fn start<P: Send + 'static>(
        &self,
        admitted: Admitted<P>,
        is_async: bool,
    ) -> Result<Begun<BatchHandle>, SubmitError> {
        let Admitted {
            submission: sub,
            prepared:
                Prepared {
                    synthesizer,
                    present,
                    budgets,
                },
            permit,
        } = admitted;
        let opening = record::opening(&sub, is_async, self.owner.as_deref());
        let events = self.events();
        let job_id = sub.request_id;
        let (guard, stop) = self.running.enter(job_id);
        let lease = self
            .owner
            .clone()
            .map(|owner| LeaseHold::new(synthesizer.store.clone(), job_id, owner));
        let ctx = JobContext {
            owner: self.owner.clone(),
            lease,
            stop,
            first_seq: 0,
            resumed: None,
            budgets,
            _running: guard,
        };
        let handle = if is_async {
            if let Err(e) = synthesizer.store.commit(opening).await {
                return synthesizer
                    .not_recorded(&sub, e)
                    .await
                    .map(|answer| Begun::Replayed(Box::new(answer)));
            }
            // The batch's task stays in the request's span (its trace), though it outlives it.
            tokio::spawn(
                async move {
                    let _permit = permit;
                    run_job(
                        &synthesizer,
                        events,
                        &sub,
                        present,
                        Recorded::already(),
                        ctx,
                    )
                    .await
                    .map_err(|_| SubmitError::InProgress)
                }
                .in_current_span(),
            )
        } else {
            tokio::spawn(
                async move {
                    let _permit = permit;
                    record_and_run(synthesizer, events, sub, present, opening, ctx).await
                }
                .in_current_span(),
            )
        };
        Ok(Begun::Fresh(BatchHandle {
            job_id,
            task: handle,
        }))
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
    present: Present,
    opening: Vec<AuditWrite>,
    ctx: JobContext,
) -> Result<BatchAnswer, SubmitError> {
    let (recorded_tx, recorded_rx) = watch::channel(None);
    let store = synthesizer.store.clone();
    let outage_wait = synthesizer.config.store_outage_wait;
    let lease = ctx.lease.clone();
    let commit = async move {
        let outcome =
            record::commit_opening(store.as_ref(), opening, lease.as_deref(), outage_wait).await;
        let _ = recorded_tx.send(Some(outcome.is_ok()));
        outcome
    };
    let run = run_job(
        &synthesizer,
        events,
        &sub,
        present,
        Recorded::pending(recorded_rx),
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
            submitted = &mut run => return submitted.map_err(Stopped::into_submit_error),
        }
    }
}

impl Stopped {
    /// What a waiting caller hears of a run that stopped.
    fn into_submit_error(self) -> SubmitError {
        match self {
            // The store is away: 503, and a retry with the same key runs or replays the batch.
            Stopped::Outage(e) => SubmitError::Audit(e),
            // The job goes on elsewhere: the caller retries with its `Idempotency-Key` and gets
            // the answer once the job is done.
            Stopped::LeaseLost | Stopped::HandedBack => SubmitError::InProgress,
        }
    }
}

/// How one run of a job goes beyond its batch: who holds its lease, what stops it, where its
/// events continue, and what an earlier attempt already wrote.
struct JobContext {
    /// The lease holder (this replica) where jobs are leased.
    owner: Option<Arc<str>>,
    /// Its hold on the job's lease, where jobs are leased.
    lease: Option<Arc<LeaseHold>>,
    /// Turns true when this process hands the job back.
    stop: watch::Receiver<bool>,
    /// The last event number an earlier attempt stored (0 for a first run).
    first_seq: i64,
    resumed: Option<Resumed>,
    /// Whose spend its model calls count in, and the budgets that stop them.
    budgets: crate::budgets::BatchBudgets,
    _running: RunningGuard,
}

/// What a resumed job's earlier attempts settled: the files already written stay as they are and
/// are part of the one answer.
struct Resumed {
    /// Each written file's result, with its position in the batch.
    written: Vec<(usize, FileResult)>,
    /// Every file of the batch in order, to place each result.
    order: Vec<String>,
    created_at: DateTime<Utc>,
}

async fn run_job(
    synthesizer: &Synthesizer,
    events: EventQueue,
    sub: &Submission,
    present: Present,
    recorded: Recorded,
    ctx: JobContext,
) -> Result<BatchAnswer, Stopped> {
    let store = synthesizer.store.clone();
    let job_id = sub.request_id;
    let lost = match &ctx.lease {
        Some(lease) => lease.lost(),
        // Never raised: its sender is gone.
        None => watch::channel(false).1,
    };
    let recorded = recorded.with_lease(ctx.lease.clone());
    // Aborted when this function ends in any way, a panic included: a job whose batch is gone
    // must stop looking alive, so that it is failed as interrupted (or resumed elsewhere).
    let heartbeat = AbortOnDrop(tokio::spawn(keep_alive(
        store.clone(),
        job_id,
        ctx.lease.clone(),
        recorded.clone(),
    )));

    let sink = ChannelSink {
        job_id,
        seq: AtomicI64::new(ctx.first_seq),
        tx: events,
    };
    let execute = async {
        if sub.batch.files().is_empty() {
            // Every file was written by an earlier attempt; the run that wrote the last of them may
            // have stopped before its commit.
            let mut response = BatchResponse::assemble(
                job_id,
                synthesizer.workspace.root().display().to_string(),
                Vec::new(),
                0,
            );
            response.commit = synthesizer.commit_batch(sub, &present, &[]).await;
            return (
                BatchAnswer {
                    response,
                    replayed: false,
                    upstream: Duration::ZERO,
                },
                Vec::new(),
            );
        }
        // Every model call of the run is counted, and refused once a budget is spent.
        let metered = synthesizer.metered(ctx.budgets.clone());
        metered.execute(sub, present, &sink, &recorded).await
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

    // A batch that wrote nothing still closes its records, once they exist; records that
    // never committed have nothing to close (and the batch wrote nothing).
    if recorded.wait().await.is_err() {
        return Ok(submitted);
    }
    // A write gave up after the whole outage wait: the rest of the batch is not written, and its
    // answer is the store's unavailability, not its files' errors. The job is left running: once
    // the store is back its lease lapses and a replica resumes it (on SQLite, it is failed as
    // interrupted), so a retry with the same key gets its answer.
    if let Some(e) = recorded.gave_up() {
        return Err(Stopped::Outage(e));
    }
    if let Some(resumed) = &ctx.resumed {
        submitted.response = merge_resumed(resumed, submitted.response);
    }
    report_overlaps(synthesizer, sub, &mut submitted.response, &sink).await;
    // The completions of the batch's writes, the request's closing, its stored answer and the
    // job's, in one commit; and before `done` is announced, so whoever reacts to `done` by
    // reading the job finds its answer there.
    let batch_status = submitted.response.status;
    let finish = record::closing(job_id, &submitted.response, JobEnd::Done, completions);
    if let Err(e) = record::commit_closing(
        &recorded,
        store.as_ref(),
        finish,
        synthesizer.config.store_outage_wait,
    )
    .await
    {
        // The files are written and their pending records hold their content: reconciliation
        // settles them; the job is resumed (or failed as interrupted) once its lease or
        // heartbeat is stale.
        tracing::error!(job = %job_id, error = %e, "batch done but its records could not be closed");
        if let StoreError::Unavailable(_) = e {
            return Err(Stopped::Outage(e));
        }
    }
    sink.emit(Event::Done {
        status: batch_status.as_str().to_string(),
    });
    Ok(submitted)
}

/// Puts in the answer, and the stream, the paths the batch wrote that other workspaces of its
/// repository changed too. Finding them never fails the batch: its files are written already.
async fn report_overlaps(
    synthesizer: &Synthesizer,
    sub: &Submission,
    response: &mut BatchResponse,
    sink: &dyn ProgressSink,
) {
    let Some(finder) = &synthesizer.overlaps else {
        return;
    };
    // Written on disk: not a dry run's content, not a proposal held for review.
    let written: Vec<String> = response
        .results
        .iter()
        .filter(|r| {
            r.success && r.operation_id.is_some() && r.content.is_none() && r.proposal.is_none()
        })
        .map(|r| r.filename.clone())
        .collect();
    if written.is_empty() {
        return;
    }
    match finder
        .overlaps(&sub.workspace, &written, sub.caller.as_deref())
        .await
    {
        Ok(found) => {
            for overlap in &found {
                sink.emit(Event::Overlap(overlap.clone()));
            }
            response.overlaps = found;
        }
        Err(e) => {
            tracing::warn!(job = %sub.request_id, error = %e, "could not look for overlaps with other workspaces")
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
