//! A batch's own audit record — its request and its job — from the commit that opens it to the
//! one that closes it, and the gate every write of the batch waits at in between.
//!
//! - [`opening`] / [`commit_opening`]: the request and the job, in one commit (through a store
//!   outage of up to `WRIT_STORE_OUTAGE_WAIT`), before an async batch's 202 or beside a waiting
//!   batch's fan-out.
//! - [`Recorded`]: whether that commit is known; nothing of the batch is written, and no answer
//!   given, before it is (a refused commit is [`NotRecorded`]).
//! - [`closing`] / [`commit_closing`]: the request's status and stored answer and the job's end, in
//!   the commit that also completes the batch's writes.
//!
//! The operations (one per file written) are not here: they are the `files` module's, which
//! every write — a batch's or a direct one — goes through. A job failed because its process is
//! gone is closed by `jobs::liveness`, which first claims it conditionally.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::watch;
use uuid::Uuid;

use crate::audit::{AuditWrite, NewRequest, SynthesisStore};
use crate::jobs::{JobStatus, Lease, NewJob};
use crate::store::StoreError;
use crate::synthesis::lease::{LeaseHold, lease_until};
use crate::synthesis::outage::OutageWait;
use crate::synthesis::response::BatchResponse;
use crate::synthesis::submission::Submission;

/// The route a batch's request is recorded under.
pub(crate) const ROUTE: &str = "POST /write_codebase";

/// The request a batch is recorded as.
pub(crate) fn request(sub: &Submission) -> NewRequest {
    NewRequest {
        idempotency_key: sub.idempotency_key.clone(),
        ..NewRequest::opened(
            sub.request_id,
            ROUTE,
            sub.caller.clone(),
            sub.scope,
            sub.workspace.clone(),
        )
        .with_body(sub.body_sha256.clone())
    }
}

/// The commit that opens a batch: its request, and its job (running; leased to `owner` where
/// replicas share the store).
pub(crate) fn opening(sub: &Submission, is_async: bool, owner: Option<&str>) -> Vec<AuditWrite> {
    vec![
        AuditWrite::InsertRequest(request(sub)),
        AuditWrite::InsertJob {
            job: NewJob {
                id: sub.request_id,
                created_at: Utc::now(),
                is_async,
                files: sub
                    .batch
                    .files()
                    .iter()
                    .map(|f| f.path.to_string())
                    .collect(),
                lease: owner.map(|owner| Lease {
                    owner: owner.to_string(),
                    until: lease_until(Utc::now()),
                }),
                request: sub.body.clone(),
                workspace: sub.workspace.clone(),
            },
            status: JobStatus::Running,
        },
    ]
}

/// Commits a batch's opening through an outage of up to `outage_wait`. The job's lease is
/// written afresh with each try (a lease dated from the first try could have run out by the
/// time the record commits), and the hold learns it from the try that committed.
pub(crate) async fn commit_opening(
    store: &dyn SynthesisStore,
    mut opening: Vec<AuditWrite>,
    lease: Option<&LeaseHold>,
    outage_wait: Duration,
) -> Result<(), StoreError> {
    let mut wait: Option<OutageWait> = None;
    loop {
        let asked = tokio::time::Instant::now();
        for write in &mut opening {
            if let AuditWrite::InsertJob { job, .. } = write
                && let Some(lease) = &mut job.lease
            {
                lease.until = lease_until(Utc::now());
            }
        }
        match store.commit(opening.clone()).await {
            Ok(()) => {
                if let Some(lease) = lease {
                    lease.renewed(asked);
                }
                return Ok(());
            }
            Err(StoreError::Unavailable(why))
                if wait
                    .get_or_insert_with(|| OutageWait::start(outage_wait))
                    .pause(&why)
                    .await => {}
            Err(e) => return Err(e),
        }
    }
}

/// How a batch's job ends.
pub(crate) enum JobEnd<'a> {
    /// It ran to its answer (whatever its files' outcomes).
    Done,
    /// It could not go on, for this reason.
    Failed(&'a str),
}

/// The commit that closes a batch: `completions` (its writes' records, settled), the request's
/// status and stored answer, and the job's end. The answer is stored once, on the request: a
/// job without an answer of its own gives its request's (they share the id), so the closing
/// statement carries it once.
pub(crate) fn closing(
    job_id: Uuid,
    answer: &BatchResponse,
    end: JobEnd<'_>,
    completions: Vec<AuditWrite>,
) -> Vec<AuditWrite> {
    let body = serde_json::to_value(answer).unwrap_or(serde_json::Value::Null);
    let (status, error) = match end {
        JobEnd::Done => (JobStatus::Done, None),
        JobEnd::Failed(reason) => (JobStatus::Failed, Some(reason.to_string())),
    };
    let mut writes = completions;
    writes.extend([
        AuditWrite::FinishRequest {
            id: job_id,
            status: answer.status,
            duration_ms: answer.duration_ms as i64,
            response: Some(body),
        },
        AuditWrite::FinishJob {
            id: job_id,
            status,
            batch_status: Some(answer.status.as_str().to_string()),
            response: None,
            error,
        },
    ]);
    writes
}

/// Commits a batch's closing through an outage of up to `outage_wait`, each try only once the
/// job's lease is known held.
pub(crate) async fn commit_closing(
    recorded: &Recorded,
    store: &dyn SynthesisStore,
    closing: Vec<AuditWrite>,
    outage_wait: Duration,
) -> Result<(), StoreError> {
    let mut wait: Option<OutageWait> = None;
    loop {
        let outcome = match recorded.lease_held().await {
            Ok(()) => store.commit(closing.clone()).await,
            Err(e) => Err(e),
        };
        match outcome {
            Err(StoreError::Unavailable(why))
                if wait
                    .get_or_insert_with(|| OutageWait::start(outage_wait))
                    .pause(&why)
                    .await => {}
            outcome => return outcome,
        }
    }
}

/// The batch's request record did not commit: nothing of the batch may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the batch's request could not be recorded; nothing was written")]
pub(crate) struct NotRecorded;

/// Whether a batch's records (its request and job) are committed. They commit while the models
/// run; nothing of the batch is written, and no answer given, before they are. Where the job is
/// leased, its lease must also be known held before each write (after an outage it may have run
/// out, and another replica may have claimed the job); and a commit that gave up after the
/// whole outage wait is noted here, so that the batch answers 503 instead of its files' errors.
#[derive(Clone)]
pub(crate) struct Recorded {
    committed: watch::Receiver<Option<bool>>,
    lease: Option<Arc<LeaseHold>>,
    gave_up: Arc<OnceLock<StoreError>>,
}

impl Recorded {
    /// Records already committed (an async batch's, a resumed job's).
    pub(crate) fn already() -> Self {
        Recorded::pending(watch::channel(Some(true)).1)
    }

    /// Records whose commit reports `Some(committed)` on `rx` once it is over.
    pub(crate) fn pending(rx: watch::Receiver<Option<bool>>) -> Self {
        Recorded {
            committed: rx,
            lease: None,
            gave_up: Arc::default(),
        }
    }

    /// The same records, of a job held by `lease`.
    pub(crate) fn with_lease(mut self, lease: Option<Arc<LeaseHold>>) -> Self {
        self.lease = lease;
        self
    }

    /// Waits for the commit. A failed commit (or one abandoned) is [`NotRecorded`]: the caller
    /// writes nothing.
    pub(crate) async fn wait(&self) -> Result<(), NotRecorded> {
        let mut rx = self.committed.clone();
        match rx.wait_for(Option::is_some).await.map(|v| *v) {
            Ok(Some(true)) => Ok(()),
            _ => Err(NotRecorded),
        }
    }

    /// Whether the batch may write now as far as its lease goes: a lease that may have run out
    /// is renewed first. `Err(Unavailable)`: the store cannot be asked (wait and try again);
    /// `Err(Conflict)`: another replica holds the job (write nothing; the run is being stopped).
    pub(crate) async fn lease_held(&self) -> Result<(), StoreError> {
        match &self.lease {
            None => Ok(()),
            Some(lease) => lease.confirm().await,
        }
    }

    /// Notes that a commit gave up after the whole outage wait.
    pub(crate) fn give_up(&self, err: StoreError) {
        let _ = self.gave_up.set(err);
    }

    /// The store's failure if a commit of the batch gave up after the whole outage wait.
    pub(crate) fn gave_up(&self) -> Option<StoreError> {
        self.gave_up.get().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesis::response::FileResult;

    #[tokio::test]
    async fn the_gate_opens_only_on_a_commit_that_succeeded() {
        let (tx, rx) = watch::channel(None);
        let gate = Recorded::pending(rx);
        tx.send(Some(true)).expect("gate listening");
        assert_eq!(gate.wait().await, Ok(()));

        let (tx, rx) = watch::channel(None);
        let gate = Recorded::pending(rx);
        tx.send(Some(false)).expect("gate listening");
        assert_eq!(gate.wait().await, Err(NotRecorded));

        // A commit abandoned (its task gone) is not a commit.
        let (tx, rx) = watch::channel(None);
        let gate = Recorded::pending(rx);
        drop(tx);
        assert_eq!(gate.wait().await, Err(NotRecorded));
    }

    #[test]
    fn a_closing_stores_the_answer_once_on_the_request_after_the_writes_it_completes() {
        let id = Uuid::now_v7();
        let answer = BatchResponse::assemble(
            id,
            "/repo".into(),
            vec![FileResult::failed(
                "a.py",
                crate::audit::FileKind::Code,
                "no model answered",
                Vec::new(),
            )],
            12,
        );
        let completion = AuditWrite::FinishJob {
            id: Uuid::now_v7(),
            status: JobStatus::Running,
            batch_status: None,
            response: None,
            error: None,
        };

        let writes = closing(
            id,
            &answer,
            JobEnd::Failed("the models are away"),
            vec![completion],
        );

        assert_eq!(
            writes.len(),
            3,
            "the completion, then the request and the job"
        );
        match &writes[1] {
            AuditWrite::FinishRequest {
                id: req,
                status,
                duration_ms,
                response,
            } => {
                assert_eq!(*req, id);
                assert_eq!(*status, answer.status);
                assert_eq!(*duration_ms, 12);
                assert_eq!(
                    response.as_ref(),
                    Some(&serde_json::to_value(&answer).expect("json"))
                );
            }
            other => panic!("expected the request's closing, got {other:?}"),
        }
        match &writes[2] {
            AuditWrite::FinishJob {
                id: job,
                status,
                batch_status,
                response,
                error,
            } => {
                assert_eq!(*job, id);
                assert_eq!(*status, JobStatus::Failed);
                assert_eq!(batch_status.as_deref(), Some(answer.status.as_str()));
                assert!(
                    response.is_none(),
                    "the answer is stored once, on the request"
                );
                assert_eq!(error.as_deref(), Some("the models are away"));
            }
            other => panic!("expected the job's closing, got {other:?}"),
        }
    }
}
