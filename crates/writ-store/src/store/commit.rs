//! Group commit: every record write ([`AuditStore::commit`] and the single-record methods that
//! go through it) is queued for a few writer tasks, and each writer commits whatever has queued
//! up while the previous commit ran, in one transaction.
//!
//! Why: a batch used to be a chain of single-row commits, each waiting for a pooled connection
//! and a WAL flush of its own, and under load the chain, not the models, set the latency. Now
//! the five pending rows of a five-file batch, or the closing records of twenty batches that
//! finished together, cost one flush. SQLite gets one writer (its file has one write lock, so
//! more would only queue on it); PostgreSQL a few, so one slow transaction does not stall the
//! rest.
//!
//! Each caller's writes (a "unit") stay all-or-nothing: if a shared transaction fails on a
//! statement, the units in it are retried one transaction each, so one unit's conflict (a
//! replayed idempotency key) fails that unit alone. A store that is unavailable fails every
//! unit at once instead of retrying each into the same outage.

use std::sync::{Arc, OnceLock};

use sqlx::Pool;
use sqlx::types::Json;
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::{AuditWrite, Operation};

use super::jobs::insert_events;
use super::{Sql, selection_to_column};
use crate::dialect::Dialect;
use crate::error::from_sqlx;

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
    queue: OnceLock<mpsc::UnboundedSender<Unit>>,
}

impl<D: Dialect> GroupCommit<D> {
    pub(crate) fn new(pool: Pool<D>) -> Self {
        GroupCommit {
            pool,
            queue: OnceLock::new(),
        }
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
                tokio::spawn(write_loop(self.pool.clone(), rx.clone()));
            }
            tx
        })
    }
}

/// One writer: takes everything queued (up to a transaction's worth) and commits it. While it
/// commits, another writer may take the next group.
async fn write_loop<D: Dialect>(pool: Pool<D>, queue: Arc<Mutex<mpsc::UnboundedReceiver<Unit>>>) {
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
        commit_units(&pool, units).await;
    }
}

async fn commit_units<D: Dialect>(pool: &Pool<D>, units: Vec<Unit>) {
    let all: Vec<&AuditWrite> = units.iter().flat_map(|u| &u.writes).collect();
    match transaction(pool, &all).await {
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
                let _ = unit.done.send(transaction(pool, &writes).await);
            }
        }
    }
}

/// `writes` in order, in one transaction. Runs of operation inserts (the pending rows of files
/// that finished together) become one multi-row statement.
async fn transaction<D: Dialect>(pool: &Pool<D>, writes: &[&AuditWrite]) -> Result<(), StoreError> {
    let mut tx = pool
        .begin_with(D::BEGIN_WRITE)
        .await
        .map_err(|err| from_sqlx("begin audit commit", err))?;
    let mut i = 0;
    while i < writes.len() {
        let run = writes[i..]
            .iter()
            .take_while(|w| matches!(w, AuditWrite::InsertOperation { .. }))
            .count();
        if run > 0 {
            insert_operations::<D>(&mut *tx, &writes[i..i + run]).await?;
            i += run;
            continue;
        }
        apply::<D>(&mut *tx, writes[i]).await?;
        i += 1;
    }
    tx.commit()
        .await
        .map_err(|err| from_sqlx("commit audit records", err))
}

async fn insert_operations<D: Dialect>(
    conn: &mut D::Connection,
    writes: &[&AuditWrite],
) -> Result<(), StoreError> {
    let mut ops: Vec<&Operation> = Vec::with_capacity(writes.len());
    let mut contents: Vec<(Uuid, &[u8])> = Vec::new();
    for w in writes {
        if let AuditWrite::InsertOperation { operation, content } = w {
            ops.push(operation);
            if let Some(content) = content {
                contents.push((operation.id, content));
            }
        }
    }
    let mut sql = Sql::<D>::new(
        "INSERT INTO operations (id, request_id, created_at, finished_at, filename, kind, \
         operation, status, chosen_model, selection, arbiter_reason, candidates, \
         previous_sha256, sha256, bytes, error, duration_ms, detail, caller) VALUES ",
    );
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.tuple(|row| {
            row.bind(op.id)
                .bind(op.request_id)
                .bind_time(op.created_at)
                .bind_time(op.finished_at)
                .bind(op.filename.as_str())
                .bind(op.kind.as_str())
                .bind(op.operation.as_str())
                .bind(op.status.as_str())
                .bind(op.chosen_model.as_deref())
                .bind(selection_to_column(op))
                .bind(op.arbiter_reason.as_deref())
                .bind(Json(op.candidates.as_slice()))
                .bind(op.previous_sha256.as_deref())
                .bind(op.sha256.as_deref())
                .bind(op.bytes)
                .bind(op.error.as_deref())
                .bind(op.duration_ms)
                .bind(op.detail.as_ref().map(Json))
                .computed(
                    "COALESCE((SELECT caller FROM requests WHERE id = ",
                    op.request_id,
                    "), '')",
                );
        });
    }
    sql.execute_on(conn, "insert operation").await?;
    if contents.is_empty() {
        return Ok(());
    }
    let mut sql = Sql::<D>::new("INSERT INTO operation_contents (operation_id, content) VALUES ");
    for (i, (id, content)) in contents.into_iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.tuple(|row| {
            row.bind(id).bind(content);
        });
    }
    sql.execute_on(conn, "insert operation content").await?;
    Ok(())
}

async fn apply<D: Dialect>(conn: &mut D::Connection, write: &AuditWrite) -> Result<(), StoreError> {
    match write {
        AuditWrite::InsertRequest(req) => {
            let mut sql = Sql::<D>::new(
                "INSERT INTO requests (id, received_at, route, caller, scope, idempotency_key, \
                 body_sha256, status) VALUES ",
            );
            sql.tuple(|row| {
                row.bind(req.id)
                    .bind_time(req.received_at)
                    .bind(req.route.as_str())
                    .bind(req.caller.as_deref())
                    .bind(req.scope.map(|s| s.as_str()))
                    .bind(req.idempotency_key.as_deref())
                    .bind(req.body_sha256.as_deref())
                    .bind(writ_core::audit::RequestStatus::Running.as_str());
            });
            sql.execute_on(conn, "insert request").await?;
        }
        AuditWrite::FinishRequest {
            id,
            status,
            duration_ms,
            response,
        } => {
            let mut sql = Sql::<D>::new("UPDATE requests SET status = ");
            sql.bind(status.as_str())
                .push(", finished_at = ")
                .bind_time(chrono::Utc::now())
                .push(", duration_ms = ")
                .bind(*duration_ms)
                .push(", response = ")
                .bind(response.as_ref().map(Json))
                .push(" WHERE id = ")
                .bind(*id);
            if sql.execute_on(conn, "finish request").await? == 0 {
                return Err(StoreError::Other(format!("no request {id}")));
            }
        }
        AuditWrite::InsertOperation { .. } => {
            insert_operations::<D>(conn, std::slice::from_ref(&write)).await?;
        }
        AuditWrite::CompleteOperation { id, outcome } => {
            let mut sql = Sql::<D>::new("UPDATE operations SET status = ");
            sql.bind(outcome.status.as_str())
                .push(", operation = ")
                .bind(outcome.operation.as_str())
                .push(", error = ")
                .bind(outcome.error.as_deref())
                .push(", finished_at = ")
                .bind_time(outcome.finished_at)
                .push(", duration_ms = ")
                .bind(outcome.duration_ms)
                .push(" WHERE id = ")
                .bind(*id);
            if sql.execute_on(conn, "complete operation").await? == 0 {
                return Err(StoreError::Other(format!("no operation {id}")));
            }
        }
        AuditWrite::InsertJob { job, status } => {
            super::jobs::insert_job::<D>(job, *status)
                .execute_on(conn, "insert job")
                .await?;
        }
        AuditWrite::FinishJob {
            id,
            status,
            batch_status,
            response,
            error,
        } => {
            super::jobs::finish_job::<D>(
                *id,
                *status,
                batch_status.as_deref(),
                response.as_ref(),
                error.as_deref(),
            )
            .execute_on(conn, "finish job")
            .await?;
        }
        AuditWrite::AppendEvents(events) => {
            if !events.is_empty() {
                insert_events::<D>(events)
                    .execute_on(conn, "append job events")
                    .await?;
            }
        }
    }
    Ok(())
}
