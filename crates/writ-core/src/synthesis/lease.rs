//! A replica's lease on the job it runs, where replicas share the store (PostgreSQL): how long
//! it lasts ([`LEASE`]), how often it is renewed ([`RENEW_EVERY`]), and the hold the renewing
//! task and the batch's writes share ([`LeaseHold`]), so that a write goes ahead only under a
//! lease known held.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use uuid::Uuid;

use crate::audit::SynthesisStore;
use crate::store::StoreError;

/// How long a replica's hold on a job lasts unless renewed. Short enough that a killed
/// replica's jobs are resumed within seconds, long enough that a few slow renewals in a row
/// (a busy database) do not hand a live job to another replica.
pub const LEASE: Duration = Duration::from_secs(10);

/// How often the owner renews its leases: three tries before one lapses.
pub const RENEW_EVERY: Duration = Duration::from_secs(3);

/// When a lease taken or renewed at `now` runs out.
pub(crate) fn lease_until(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::from_std(LEASE).unwrap_or(chrono::Duration::seconds(10))
}

/// A replica's hold on a job's lease, shared by the task that renews it (`jobs::liveness::keep_alive`) and the
/// batch's writes, which ask it before each write ([`LeaseHold::confirm`]).
pub(crate) struct LeaseHold {
    store: Arc<dyn SynthesisStore>,
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
    pub(crate) fn new(store: Arc<dyn SynthesisStore>, job_id: Uuid, owner: Arc<str>) -> Arc<Self> {
        Arc::new(LeaseHold {
            store,
            job_id,
            owner,
            until: Mutex::new(tokio::time::Instant::now() + LEASE),
            lost: watch::channel(false).0,
        })
    }

    /// Turns true when another replica holds the job.
    pub(crate) fn lost(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }

    /// The lease was written (a record with it committed, a renewal) by a statement asked at
    /// `asked`.
    pub(crate) fn renewed(&self, asked: tokio::time::Instant) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        *until = (*until).max(asked + LEASE);
    }

    pub(crate) fn held_until(&self) -> tokio::time::Instant {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews the lease. `Ok(false)`: another replica holds the job (or it ended), and `lost` is
    /// raised.
    pub(crate) async fn renew(&self) -> Result<bool, StoreError> {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::synthesis::doubles::store::MemoryStore;
    use std::sync::PoisonError;

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
