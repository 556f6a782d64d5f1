//! Group commit: every record write ([`writ_core::AuditLog::commit`] and the single-record
//! methods that go through it) is queued for a few writer tasks, and each writer commits whatever
//! has queued up while the previous commit ran, in one transaction.
//!
//! Why: single-row commits would each wait for a pooled connection and a WAL flush of their own,
//! and under load that chain, not the models, would set a batch's latency. Grouped, the five
//! pending rows of a five-file batch, or the closing records of twenty batches that finished
//! together, cost one flush. SQLite gets one writer (its file has one write lock, so
//! more would only queue on it); PostgreSQL a few, so one slow transaction does not stall the
//! rest.
//!
//! Each caller's writes (a "unit") stay all-or-nothing: if a shared transaction fails on a
//! statement, the units in it are retried one transaction each, so one unit's conflict (a
//! replayed idempotency key) fails that unit alone. A store that is unavailable fails every
//! unit at once instead of retrying each into the same outage.
//!
//! The parts: this module the queue, the writers and the retry of a spoiled transaction;
//! `kept` the connection each writer keeps between commits; `statements` how a commit's
//! records are coalesced into as few statements as the backend allows.

mod kept;
mod statements;

use std::sync::{Arc, OnceLock};

use sqlx::Pool;
use tokio::sync::{Mutex, mpsc, oneshot};
use writ_core::StoreError;
use writ_core::audit::AuditWrite;

use crate::dialect::Dialect;

pub(crate) use self::kept::{Kept, Work};
pub(crate) use self::statements::within;

/// Most units one transaction takes: bounds a transaction's size (each may hold a file's
/// content) and how long a unit queued behind it waits.
const UNITS_PER_COMMIT: usize = 128;

/// One caller's writes and where to send the outcome.
struct Unit {
    writes: Vec<AuditWrite>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// The queue in front of the writer tasks. The tasks start on the first commit (inside the
/// runtime that makes it) and end when the store's last clone is dropped.
pub(crate) struct GroupCommit<D: Dialect> {
    pool: Pool<D>,
    /// Whether each writer keeps its connection ([`Kept`]): only when `pool` is the writers' own,
    /// since kept connections would otherwise starve the reads that share it.
    keep: bool,
    queue: OnceLock<mpsc::UnboundedSender<Unit>>,
}

impl<D: Dialect> GroupCommit<D> {
    pub(crate) fn new(pool: Pool<D>, keep: bool) -> Self {
        GroupCommit {
            pool,
            keep,
            queue: OnceLock::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Queues `writes` as one unit and waits until they are committed (or refused).
    pub(crate) async fn commit(&self, writes: Vec<AuditWrite>) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let (done, outcome) = oneshot::channel();
        self.queue()
            .send(Unit { writes, done })
            .map_err(|_| StoreError::Unavailable("the audit writer has stopped".into()))?;
        outcome
            .await
            .map_err(|_| StoreError::Unavailable("the audit writer has stopped".into()))?
    }

    fn queue(&self) -> &mpsc::UnboundedSender<Unit> {
        self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let rx = Arc::new(Mutex::new(rx));
            for _ in 0..D::WRITERS {
                let kept = Kept::new(self.pool.clone(), self.keep);
                tokio::spawn(write_loop(kept, rx.clone()));
            }
            tx
        })
    }
}

/// One writer: takes everything queued (up to a transaction's worth) and commits it. While it
/// commits, another writer may take the next group.
async fn write_loop<D: Dialect>(
    mut kept: Kept<D>,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Unit>>>,
) {
    loop {
        let units = {
            let mut rx = queue.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut units = vec![first];
            while units.len() < UNITS_PER_COMMIT {
                match rx.try_recv() {
                    Ok(unit) => units.push(unit),
                    Err(_) => break,
                }
            }
            units
        };
        commit_units(&mut kept, units).await;
    }
}

async fn commit_units<D: Dialect>(kept: &mut Kept<D>, units: Vec<Unit>) {
    let all: Vec<&AuditWrite> = units.iter().flat_map(|u| &u.writes).collect();
    match kept.run(Work::Records(&all)).await {
        Ok(()) => {
            for unit in units {
                let _ = unit.done.send(Ok(()));
            }
        }
        // The store is not there: every unit hears so at once, none is retried into the outage.
        Err(StoreError::Unavailable(why)) => {
            for unit in units {
                let _ = unit.done.send(Err(StoreError::Unavailable(why.clone())));
            }
        }
        Err(err) if units.len() == 1 => {
            if let Some(unit) = units.into_iter().next() {
                let _ = unit.done.send(Err(err));
            }
        }
        Err(_) => {
            // One unit spoiled the shared transaction: each gets its own, and its own answer.
            for unit in units {
                let writes: Vec<&AuditWrite> = unit.writes.iter().collect();
                let _ = unit.done.send(kept.run(Work::Records(&writes)).await);
            }
        }
    }
}
