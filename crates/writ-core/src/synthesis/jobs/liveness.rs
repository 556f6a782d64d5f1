//! How a running job shows it is alive, and what happens when it is not: the lease its replica
//! renews (PostgreSQL), and on SQLite the jobs whose process died, failed with a reason.

use super::*;

pub(crate) fn lease_until(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::from_std(LEASE).unwrap_or(chrono::Duration::seconds(10))
}

/// Resolves once `flag` turns true; never if its sender is gone without doing so.
pub(super) async fn raised(mut flag: watch::Receiver<bool>) {
    if flag.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A replica's hold on a job's lease, shared by the task that renews it ([`keep_alive`]) and the
/// batch's writes, which ask it before each write ([`LeaseHold::confirm`]).
pub(crate) struct LeaseHold {
    store: Arc<dyn AuditStore>,
    job_id: Uuid,
    owner: Arc<str>,
    /// Until when the lease is known held, on this process's clock: when the last renewal that
    /// succeeded was asked, plus [`LEASE`].
    until: Mutex<tokio::time::Instant>,
    /// Raised when another replica holds the job: its run stops.
    lost: watch::Sender<bool>,
}

/// How much of the lease must remain for a write to go ahead without renewing it first: more
/// than a write's commit and publish take.
const WRITE_MARGIN: Duration = RENEW_EVERY;

impl LeaseHold {
    /// The hold on a lease taken (or renewed) just now.
    pub(crate) fn new(store: Arc<dyn AuditStore>, job_id: Uuid, owner: Arc<str>) -> Arc<Self> {
        Arc::new(LeaseHold {
            store,
            job_id,
            owner,
            until: Mutex::new(tokio::time::Instant::now() + LEASE),
            lost: watch::channel(false).0,
        })
    }

    /// Turns true when another replica holds the job.
    pub(super) fn lost(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }

    /// The lease was written (a record with it committed, a renewal) by a statement asked at
    /// `asked`.
    pub(crate) fn renewed(&self, asked: tokio::time::Instant) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        *until = (*until).max(asked + LEASE);
    }

    fn held_until(&self) -> tokio::time::Instant {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews the lease. `Ok(false)`: another replica holds the job (or it ended), and `lost` is
    /// raised.
    pub(super) async fn renew(&self) -> Result<bool, StoreError> {
        let asked = tokio::time::Instant::now();
        let renewed = self
            .store
            .renew_lease(self.job_id, &self.owner, lease_until(Utc::now()))
            .await?;
        if renewed {
            self.renewed(asked);
        } else {
            tracing::warn!(job = %self.job_id, "the job's lease is no longer this replica's: stopping its run");
            let _ = self.lost.send(true);
        }
        Ok(renewed)
    }

    /// Before a write: the lease is renewed first unless it is known held for a while yet. A
    /// lease that ran out while the store could not be reached may have been claimed by another
    /// replica, which would then write the same files.
    pub(crate) async fn confirm(&self) -> Result<(), StoreError> {
        if self.held_until() > tokio::time::Instant::now() + WRITE_MARGIN {
            return Ok(());
        }
        match self.renew().await? {
            true => Ok(()),
            false => Err(StoreError::Conflict(
                "the job's lease is held by another replica; this run writes nothing more".into(),
            )),
        }
    }
}

/// Keeps the job looking alive while its batch runs: the heartbeat, or (where jobs are leased)
/// the lease, renewed. A renewal that finds the lease another's raises `lost`.
///
/// While the store cannot be reached, the lease may run out: the run goes on (its results are
/// kept through the outage), but writes nothing until a renewal succeeds again
/// ([`LeaseHold::confirm`]); a replica that claimed the job meanwhile makes that renewal fail
/// and this run stop.
///
/// Nothing is renewed before the job's row is committed (`recorded`): a synchronous batch's
/// records commit beside its fan-out, and on a busy database that commit can outlast the first
/// renewal, which would then find no row and take the job for lost. The lease is taken with the
/// row, so it runs from there.
pub(super) async fn keep_alive(
    store: Arc<dyn AuditStore>,
    job_id: Uuid,
    lease: Option<Arc<LeaseHold>>,
    recorded: Recorded,
) {
    if recorded.wait().await.is_err() {
        // No row to keep alive: the run writes nothing and ends on its own.
        return;
    }
    let Some(lease) = lease else {
        loop {
            tokio::time::sleep(HEARTBEAT_EVERY).await;
            if let Err(e) = store.heartbeat_job(job_id, JobStatus::Running).await {
                tracing::warn!(job = %job_id, error = %e, "job heartbeat failed");
            }
        }
    };
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        match lease.renew().await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "job lease renewal failed");
                if lease.held_until() <= tokio::time::Instant::now() {
                    tracing::warn!(job = %job_id, "the job's lease ran out before it could be renewed: its writes wait for the next renewal");
                }
            }
        }
    }
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
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::synthesis::doubles::store::MemoryStore;

    const OWNER: &str = "replica-a";

    fn held_by(owner: &str) -> (Arc<MemoryStore>, Arc<LeaseHold>) {
        let store = Arc::new(MemoryStore::default());
        *store
            .lease_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(owner.into());
        let hold = LeaseHold::new(store.clone(), Uuid::now_v7(), Arc::from(OWNER));
        (store, hold)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_early_in_the_lease_asks_the_store_nothing_and_one_near_its_end_renews_it() {
        let (store, hold) = held_by(OWNER);

        hold.confirm().await.expect("held");
        assert_eq!(store.renewals.load(Ordering::SeqCst), 0);

        tokio::time::advance(LEASE - WRITE_MARGIN).await;
        hold.confirm().await.expect("renewed");
        assert_eq!(store.renewals.load(Ordering::SeqCst), 1);
        // The renewal counts from when it was asked: the next write goes ahead without another.
        hold.confirm().await.expect("held");
        assert_eq!(store.renewals.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_finds_another_replica_holding_the_job_stops_the_run_and_refuses_the_write()
     {
        let (_store, hold) = held_by("replica-b");
        let lost = hold.lost();
        tokio::time::advance(LEASE).await;

        let refused = hold.confirm().await.expect_err("another replica holds it");

        assert!(matches!(refused, StoreError::Conflict(_)), "{refused:?}");
        assert!(*lost.borrow(), "the run is told to stop");
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_store_is_away_a_lapsing_lease_holds_writes_back_until_a_renewal_succeeds() {
        let (store, hold) = held_by(OWNER);
        tokio::time::advance(LEASE).await;
        store.unreachable.store(true, Ordering::SeqCst);

        let held_back = hold.confirm().await.expect_err("the store cannot be asked");
        assert!(
            matches!(held_back, StoreError::Unavailable(_)),
            "{held_back:?}"
        );
        assert!(
            !*hold.lost().borrow(),
            "an unreachable store is not a lost lease"
        );

        store.unreachable.store(false, Ordering::SeqCst);
        hold.confirm()
            .await
            .expect("renewed once the store is back");
        assert_eq!(store.renewals.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_report_of_an_older_renewal_never_shortens_the_hold() {
        let (store, hold) = held_by(OWNER);
        let first = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        hold.renewed(tokio::time::Instant::now());
        hold.renewed(first);

        tokio::time::advance(Duration::from_secs(6)).await;
        // 11 s in: held until 5 s + LEASE, more than the margin away, so no renewal is asked
        // (had the older report won, the hold would end at LEASE, within the margin).
        assert!(hold.held_until() > tokio::time::Instant::now());
        hold.confirm().await.expect("held");
        assert_eq!(store.renewals.load(Ordering::SeqCst), 0);
    }
}
