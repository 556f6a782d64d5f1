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
use sqlx::pool::PoolConnection;
use sqlx::types::Json;
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::{AuditWrite, Operation, OperationOutcome};

use super::jobs::push_insert_events;
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
    match rechecked(|lend| transaction(pool, &all, lend)).await {
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
                let _ = unit.done.send(transaction(pool, &writes, Lend::AsIs).await);
            }
        }
    }
}

/// Whether a commit's connection is checked with a round trip before use.
#[derive(Clone, Copy)]
pub(super) enum Lend {
    AsIs,
    Checked,
}

/// Runs `attempt` on a connection lent as is and, if the store was unavailable, once more on one
/// checked open. Writers take their connections unchecked (see `crate::pool_options`), so the
/// first use after a server restart finds a closed one; if the server is really gone, the second
/// attempt fails the same way.
pub(super) async fn rechecked<T, Fut>(attempt: impl Fn(Lend) -> Fut) -> Result<T, StoreError>
where
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    match attempt(Lend::AsIs).await {
        Err(StoreError::Unavailable(_)) => attempt(Lend::Checked).await,
        outcome => outcome,
    }
}

/// A connection from `pool`, pinged first when `lend` asks; one that does not answer is closed
/// and the next one tried.
pub(super) async fn connection<D: Dialect>(
    pool: &Pool<D>,
    lend: Lend,
) -> Result<PoolConnection<D>, StoreError> {
    let acquire = || async {
        pool.acquire()
            .await
            .map_err(|err| from_sqlx("audit commit", err))
    };
    if let Lend::Checked = lend {
        for _ in 0..pool.options().get_max_connections() {
            let mut conn = acquire().await?;
            if sqlx::Connection::ping(&mut *conn).await.is_ok() {
                return Ok(conn);
            }
            conn.close_on_drop();
        }
    }
    acquire().await
}

/// `writes` in order, atomically, in as few statements as the backend allows ([`statements`]).
/// A single statement needs no `BEGIN` and `COMMIT` (it is atomic by itself), which saves two
/// round trips on the commit a caller waits for.
async fn transaction<D: Dialect>(
    pool: &Pool<D>,
    writes: &[&AuditWrite],
    lend: Lend,
) -> Result<(), StoreError> {
    let mut statements = statements::<D>(writes);
    if statements.is_empty() {
        return Ok(());
    }
    let mut conn = connection(pool, lend).await?;
    // One statement is atomic by itself, if it also checks its own row counts before it commits
    // (PostgreSQL's statements do, see `Statement::run`); SQLite checks after, so a statement
    // whose count can be wrong runs in a transaction there.
    if statements.len() == 1
        && (D::WRITABLE_CTES || !statements[0].checked())
        && let Some(only) = statements.pop()
    {
        return only.run::<D>(&mut conn).await;
    }
    let mut tx = sqlx::Connection::begin_with(&mut *conn, D::BEGIN_WRITE)
        .await
        .map_err(|err| from_sqlx("begin audit commit", err))?;
    for statement in statements {
        statement.run::<D>(&mut tx).await?;
    }
    tx.commit()
        .await
        .map_err(|err| from_sqlx("commit audit records", err))
}

/// One statement of a commit: one or more parts, each changing one table; several parts are
/// joined as a `WITH` query of data-modifying statements (PostgreSQL).
struct Statement<'w> {
    parts: Vec<Part<'w>>,
}

/// What one part of a statement writes. Runs of pending rows (the files of a batch that finished
/// together) and of completions (a batch's closing) are one part each.
enum Part<'w> {
    /// The rows, and the contents to store with them (moved to an `InsertContents` part).
    InsertOperations(Vec<&'w Operation>, Vec<(Uuid, &'w [u8])>),
    InsertContents(Vec<(Uuid, &'w [u8])>),
    CompleteOperations(Vec<(Uuid, &'w OperationOutcome)>),
    One(&'w AuditWrite),
}

/// How many rows a part must change, or the commit fails.
enum Expect {
    Rows(u64),
    /// This many, or one of them is missing (named in the message).
    Every(u64, String),
    AtLeastOne(String),
    Any,
}

/// Splits `writes` into parts, in order, and joins neighbouring parts into one statement where
/// the backend allows it ([`Dialect::WRITABLE_CTES`]) and it is safe: the parts of one statement
/// all see the database as it was before it, so a statement never holds two parts on one table
/// (an update could miss the row its neighbour inserts), nor a pending row beside a request
/// insert (the row's caller is read from its request).
fn statements<'w, D: Dialect>(writes: &[&'w AuditWrite]) -> Vec<Statement<'w>> {
    let mut parts: Vec<Part<'w>> = Vec::new();
    for &write in writes {
        match (write, parts.last_mut()) {
            (
                AuditWrite::InsertOperation { operation, content },
                Some(Part::InsertOperations(ops, contents)),
            ) => {
                ops.push(operation);
                contents.extend(content.as_deref().map(|c| (operation.id, c)));
            }
            (AuditWrite::InsertOperation { operation, content }, _) => {
                parts.push(Part::InsertOperations(
                    vec![operation],
                    content
                        .as_deref()
                        .map(|c| (operation.id, c))
                        .into_iter()
                        .collect(),
                ))
            }
            (
                AuditWrite::CompleteOperation { id, outcome },
                Some(Part::CompleteOperations(run)),
            ) => {
                run.push((*id, outcome));
            }
            (AuditWrite::CompleteOperation { id, outcome }, _) => {
                parts.push(Part::CompleteOperations(vec![(*id, outcome)]));
            }
            (AuditWrite::AppendEvents(events), _) if events.is_empty() => {}
            (write, _) => parts.push(Part::One(write)),
        }
    }
    // Each run of pending rows brings its contents, right after it.
    let mut with_contents = Vec::with_capacity(parts.len() + 1);
    for part in parts {
        match part {
            Part::InsertOperations(ops, contents) => {
                with_contents.push(Part::InsertOperations(ops, Vec::new()));
                if !contents.is_empty() {
                    with_contents.push(Part::InsertContents(contents));
                }
            }
            part => with_contents.push(part),
        }
    }

    let mut statements: Vec<Statement<'w>> = Vec::new();
    for part in with_contents {
        if D::WRITABLE_CTES
            && let Some(last) = statements.last_mut()
            && last.admits(&part)
        {
            last.parts.push(part);
        } else {
            statements.push(Statement { parts: vec![part] });
        }
    }
    statements
}

impl<'w> Statement<'w> {
    fn admits(&self, part: &Part<'w>) -> bool {
        let table = part.table();
        let reads_requests = matches!(part, Part::InsertOperations(..));
        self.parts.iter().all(|p| {
            p.table() != table
                && !(reads_requests && matches!(p, Part::One(AuditWrite::InsertRequest(_))))
                && !(matches!(p, Part::InsertOperations(..))
                    && matches!(part, Part::One(AuditWrite::InsertRequest(_))))
        })
    }

    /// Whether a part's row count can come out wrong (an update whose row is missing).
    fn checked(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p.expect(), Expect::Every(..) | Expect::AtLeastOne(_)))
    }

    async fn run<D: Dialect>(self, conn: &mut D::Connection) -> Result<(), StoreError> {
        if !D::WRITABLE_CTES || (self.parts.len() == 1 && !self.checked()) {
            for part in &self.parts {
                let mut sql = Sql::<D>::new("");
                part.push_sql(&mut sql);
                let changed = sql.execute_on(conn, part.what()).await?;
                part.expect().check(changed)?;
            }
            return Ok(());
        }
        // WITH w0 AS (… RETURNING 1), w1 AS (…) SELECT writ_expect((SELECT count(*) FROM w0) = $n,
        // 'no operation …') AND …: the server refuses the whole statement if a count is wrong.
        let mut sql = Sql::<D>::new("WITH ");
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.push(&format!("w{i} AS ("));
            part.push_sql(&mut sql);
            sql.push(" RETURNING 1)");
        }
        sql.push(" SELECT true");
        for (i, part) in self.parts.iter().enumerate() {
            let (op, rows, missing) = match part.expect() {
                Expect::Rows(n) => (
                    " = ",
                    n,
                    format!("an audit write changed a row count other than {n}"),
                ),
                Expect::Every(n, missing) => (" = ", n, missing),
                Expect::AtLeastOne(missing) => (" >= ", 1, missing),
                Expect::Any => continue,
            };
            sql.push(&format!(" AND writ_expect((SELECT count(*) FROM w{i}){op}"))
                .bind(i64::try_from(rows).unwrap_or(i64::MAX))
                .push(", ")
                .bind(missing.as_str())
                .push(")");
        }
        sql.execute_on(conn, "commit audit records").await?;
        Ok(())
    }
}

impl Expect {
    fn check(self, changed: u64) -> Result<(), StoreError> {
        match self {
            Expect::Rows(n) if changed != n => Err(StoreError::Other(format!(
                "an audit write changed {changed} rows instead of {n}"
            ))),
            Expect::Every(n, missing) if changed != n => Err(StoreError::Other(missing)),
            Expect::AtLeastOne(missing) if changed == 0 => Err(StoreError::Other(missing)),
            _ => Ok(()),
        }
    }
}

impl Part<'_> {
    fn table(&self) -> &'static str {
        match self {
            Part::InsertOperations(..) | Part::CompleteOperations(_) => "operations",
            Part::InsertContents(_) => "operation_contents",
            Part::One(AuditWrite::InsertRequest(_) | AuditWrite::FinishRequest { .. }) => {
                "requests"
            }
            Part::One(AuditWrite::InsertJob { .. } | AuditWrite::FinishJob { .. }) => "jobs",
            Part::One(AuditWrite::AppendEvents(_)) => "job_events",
            Part::One(
                AuditWrite::InsertOperation { .. } | AuditWrite::CompleteOperation { .. },
            ) => "operations",
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Part::InsertOperations(..) => "insert operation",
            Part::InsertContents(_) => "insert operation content",
            Part::CompleteOperations(_) => "complete operation",
            Part::One(AuditWrite::InsertRequest(_)) => "insert request",
            Part::One(AuditWrite::FinishRequest { .. }) => "finish request",
            Part::One(AuditWrite::InsertJob { .. }) => "insert job",
            Part::One(AuditWrite::FinishJob { .. }) => "finish job",
            Part::One(AuditWrite::AppendEvents(_)) => "append job events",
            Part::One(_) => "audit write",
        }
    }

    fn expect(&self) -> Expect {
        match self {
            Part::InsertOperations(ops, _) => Expect::Rows(ops.len() as u64),
            Part::InsertContents(contents) => Expect::Rows(contents.len() as u64),
            Part::CompleteOperations(run) => Expect::Every(
                run.len() as u64,
                format!(
                    "no operation {}",
                    run.iter()
                        .map(|(id, _)| id.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Part::One(AuditWrite::FinishRequest { id, .. }) => {
                Expect::AtLeastOne(format!("no request {id}"))
            }
            Part::One(AuditWrite::InsertRequest(_) | AuditWrite::InsertJob { .. }) => {
                Expect::Rows(1)
            }
            // A job already ended changes no row, and events may be replays of ones stored.
            Part::One(_) => Expect::Any,
        }
    }

    /// The statement's SQL and values, appended to `sql`.
    fn push_sql<D: Dialect>(&self, sql: &mut Sql<D>) {
        match self {
            Part::InsertOperations(ops, _) => push_insert_operations(sql, ops),
            Part::InsertContents(contents) => {
                sql.push("INSERT INTO operation_contents (operation_id, content) VALUES ");
                for (i, (id, content)) in contents.iter().enumerate() {
                    if i > 0 {
                        sql.push(", ");
                    }
                    sql.tuple(|row| {
                        row.bind(*id).bind(*content);
                    });
                }
            }
            Part::CompleteOperations(run) => push_complete_operations(sql, run),
            Part::One(write) => push_one(sql, write),
        }
    }
}

fn push_insert_operations<D: Dialect>(sql: &mut Sql<D>, ops: &[&Operation]) {
    sql.push(
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
}

/// Every completion of the run in one `UPDATE … FROM`, the new values given as a `UNION ALL` of
/// rows (a form both backends read alike).
fn push_complete_operations<D: Dialect>(sql: &mut Sql<D>, run: &[(Uuid, &OperationOutcome)]) {
    sql.push(
        "UPDATE operations SET status = v.status, operation = v.operation, error = v.error, \
         finished_at = v.finished_at, duration_ms = v.duration_ms FROM (",
    );
    for (i, (id, outcome)) in run.iter().enumerate() {
        sql.push(if i == 0 {
            "SELECT "
        } else {
            " UNION ALL SELECT "
        });
        let names = i == 0;
        let col = |sql: &mut Sql<D>, name: &str| {
            if names {
                sql.push(&format!(" AS {name}"));
            }
        };
        sql.bind(*id);
        col(sql, "id");
        sql.push(", ").bind(outcome.status.as_str());
        col(sql, "status");
        sql.push(", ").bind(outcome.operation.as_str());
        col(sql, "operation");
        sql.push(", ").bind(outcome.error.as_deref());
        col(sql, "error");
        sql.push(", ").bind_time(outcome.finished_at);
        col(sql, "finished_at");
        sql.push(", ").bind(outcome.duration_ms);
        col(sql, "duration_ms");
    }
    sql.push(") AS v WHERE operations.id = v.id");
}

fn push_one<D: Dialect>(sql: &mut Sql<D>, write: &AuditWrite) {
    match write {
        AuditWrite::InsertRequest(req) => {
            sql.push(
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
        }
        AuditWrite::FinishRequest {
            id,
            status,
            duration_ms,
            response,
        } => {
            sql.push("UPDATE requests SET status = ")
                .bind(status.as_str())
                .push(", finished_at = ")
                .bind_time(chrono::Utc::now())
                .push(", duration_ms = ")
                .bind(*duration_ms)
                .push(", response = ")
                .bind(response.as_ref().map(Json))
                .push(" WHERE id = ")
                .bind(*id);
        }
        AuditWrite::InsertOperation { operation, .. } => {
            push_insert_operations(sql, &[operation]);
        }
        AuditWrite::CompleteOperation { id, outcome } => {
            push_complete_operations(sql, &[(*id, outcome)]);
        }
        AuditWrite::InsertJob { job, status } => super::jobs::push_insert_job(sql, job, *status),
        AuditWrite::FinishJob {
            id,
            status,
            batch_status,
            response,
            error,
        } => super::jobs::push_finish_job(
            sql,
            *id,
            *status,
            batch_status.as_deref(),
            response.as_ref(),
            error.as_deref(),
        ),
        AuditWrite::AppendEvents(events) => push_insert_events(sql, events),
    }
}
