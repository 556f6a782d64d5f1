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
use std::time::Instant;

use sqlx::Pool;
use sqlx::pool::PoolConnection;
use sqlx::types::Json;
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::{AuditWrite, Operation, OperationOutcome};
use writ_core::jobs::JobEvent;

use super::jobs::push_insert_events;
use super::{Sql, selection_to_column};
use crate::CHECK_IDLE_AFTER;
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

/// Whether a commit's connection is checked with a round trip before use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lend {
    AsIs,
    Checked,
}

/// A writer's connection, kept from one commit to the next. sqlx checks every connection handed
/// back to its pool with a round trip (a `Sync` and its answer) before lending it again: for a
/// one-statement commit, a second round trip — wake-ups and CPU on the server and in this
/// process — after every commit. A writer that keeps its connection skips it; the connection
/// goes back to the pool (and its checks) only after sitting idle (`CHECK_IDLE_AFTER`, as the
/// writer pools check it on lending), after a failed commit, or if the future using it is
/// dropped midway.
pub(super) struct Kept<D: Dialect> {
    pool: Pool<D>,
    /// `false`: every commit takes a connection from the pool and hands it back.
    keep: bool,
    conn: Option<(PoolConnection<D>, Instant)>,
}

impl<D: Dialect> Kept<D> {
    pub(super) fn new(pool: Pool<D>, keep: bool) -> Self {
        Kept {
            pool,
            keep,
            conn: None,
        }
    }

    #[cfg(test)]
    pub(super) fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Does `work` on the writer's connection and, if the store was unavailable, once more on a
    /// connection checked open: the kept one may have been closed by a server restart since its
    /// last use; if the server is really gone, the second attempt fails the same way. A
    /// connection that failed so is closed; one whose work failed otherwise is handed back.
    pub(super) async fn run(&mut self, work: Work<'_>) -> Result<(), StoreError> {
        let mut conn = self.take(Lend::AsIs).await?;
        let outcome = match work.on::<D>(&mut conn).await {
            Err(StoreError::Unavailable(_)) => {
                conn.close_on_drop();
                drop(conn);
                conn = self.take(Lend::Checked).await?;
                work.on::<D>(&mut conn).await
            }
            outcome => outcome,
        };
        match &outcome {
            Ok(()) if self.keep => self.conn = Some((conn, Instant::now())),
            Err(StoreError::Unavailable(_)) => conn.close_on_drop(),
            // Back to the pool, whose check on the way in also sends what a failed transaction
            // left queued (its `ROLLBACK`): kept, it would wait for the next commit, holding the
            // failed transaction's locks until then.
            _ => {}
        }
        outcome
    }

    /// The kept connection if it has not sat idle too long, else one from the pool (pinged
    /// first when `lend` asks). Taken out while in use, so a use that is dropped midway leaves
    /// nothing half-read behind to be kept.
    async fn take(&mut self, lend: Lend) -> Result<PoolConnection<D>, StoreError> {
        if let Some((conn, used)) = self.conn.take()
            && lend == Lend::AsIs
            && used.elapsed() < CHECK_IDLE_AFTER
        {
            return Ok(conn);
        }
        connection(&self.pool, lend).await
    }
}

/// What a writer does on its connection.
#[derive(Clone, Copy)]
pub(super) enum Work<'w> {
    /// Records, atomically ([`transaction`]).
    Records(&'w [&'w AuditWrite]),
    /// Progress events, in one statement.
    Events(&'w [JobEvent]),
}

impl Work<'_> {
    async fn on<D: Dialect>(self, conn: &mut D::Connection) -> Result<(), StoreError> {
        match self {
            Work::Records(writes) => transaction::<D>(conn, writes).await,
            Work::Events(events) => {
                let mut sql = Sql::<D>::new("");
                push_insert_events::<D>(&mut sql, events);
                sql.execute_on(conn, "store progress events")
                    .await
                    .map(|_| ())
            }
        }
    }
}

/// A connection from `pool`, pinged first when `lend` asks; one that does not answer is closed
/// and the next one tried.
async fn connection<D: Dialect>(
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
    conn: &mut D::Connection,
    writes: &[&AuditWrite],
) -> Result<(), StoreError> {
    let mut statements = statements::<D>(writes);
    if statements.is_empty() {
        return Ok(());
    }
    // One statement is atomic by itself, if it also checks its own row counts before it commits
    // (PostgreSQL's statements do, see `Statement::run`); SQLite checks after, so a statement
    // whose count can be wrong runs in a transaction there.
    if statements.len() == 1
        && (D::WRITABLE_CTES || !statements[0].checked())
        && let Some(only) = statements.pop()
    {
        return only.run::<D>(conn).await;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use futures::future::join_all;
    use uuid::Uuid;
    use writ_core::audit::{AuditStore, AuditWrite, NewRequest};
    use writ_core::jobs::{JobEvent, JobStore};

    use crate::testing::{fresh_postgres_url, fresh_sqlite_url};
    use crate::{Dialect, PgStore, SqlStore, SqliteStore};

    fn request() -> NewRequest {
        NewRequest {
            id: Uuid::now_v7(),
            received_at: Utc::now(),
            route: "POST /write_codebase".into(),
            caller: None,
            scope: None,
            idempotency_key: None,
            body_sha256: None,
        }
    }

    /// Commits one after another, then many at once (so that several writers open connections).
    async fn commit_some<D: Dialect>(store: &SqlStore<D>) {
        for _ in 0..10 {
            store.insert_request(&request()).await.unwrap();
        }
        let requests: Vec<NewRequest> = (0..40).map(|_| request()).collect();
        for done in join_all(requests.iter().map(|r| store.insert_request(r))).await {
            done.unwrap();
        }
        // Long enough for a connection handed back to the pool to be checked and idle there.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    /// Every connection the writers opened is still held by a writer, none idle in their pool:
    /// one handed back would cost a round trip (sqlx's check) after every commit.
    async fn assert_writers_keep_their_connections<D: Dialect>(store: &SqlStore<D>) {
        commit_some(store).await;
        let pool = store.writer.pool();
        assert!(pool.size() >= 1, "the writers opened no connection");
        assert_eq!(
            pool.num_idle(),
            0,
            "{} of the writers' {} connections went back to the pool",
            pool.num_idle(),
            pool.size()
        );
    }

    #[tokio::test]
    async fn postgres_writers_keep_their_connections_between_commits() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        assert_writers_keep_their_connections(&store).await;
    }

    #[tokio::test]
    async fn sqlite_writer_keeps_its_connection_between_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::connect(&fresh_sqlite_url(dir.path()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        assert_writers_keep_their_connections(&store).await;
    }

    /// An in-memory SQLite database's writer shares the reads' pool: there it must hand its
    /// connection back, or a writer per connection would leave the reads none.
    #[tokio::test]
    async fn a_writer_sharing_the_reads_pool_hands_its_connection_back() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        store.migrate().await.unwrap();
        commit_some(&store).await;
        let pool = store.writer.pool();
        assert_eq!(pool.num_idle(), pool.size() as usize);
    }

    /// A transaction that failed (two inserts of one request: the second's conflict) leaves no
    /// connection idle in it: kept, the connection would hold its `ROLLBACK` until the next
    /// commit, and the first insert's lock with it.
    #[tokio::test]
    async fn postgres_a_failed_commit_leaves_no_transaction_open() {
        let url = fresh_postgres_url().await;
        let db = url.rsplit('/').next().unwrap().to_owned();
        let store = PgStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let req = request();
        let twice = vec![
            AuditWrite::InsertRequest(req.clone()),
            AuditWrite::InsertRequest(req.clone()),
        ];
        assert!(store.commit(twice).await.is_err());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state LIKE 'idle in transaction%'",
        )
        .bind(&db)
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(open, 0, "a failed transaction was left open");
        tokio::time::timeout(Duration::from_secs(5), store.insert_request(&req))
            .await
            .expect("the request's row is still locked")
            .unwrap();
    }

    /// The progress events' one connection is kept too.
    #[tokio::test]
    async fn postgres_progress_events_keep_their_connection() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        let job = Uuid::now_v7();
        for seq in 1..=5 {
            let event = JobEvent {
                job_id: job,
                seq,
                created_at: Utc::now(),
                name: "file_started".into(),
                data: serde_json::json!({ "seq": seq }),
            };
            store.append_job_events(&[event]).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let progress = store
            .progress
            .clone()
            .expect("PostgreSQL stores events apart");
        let kept = progress.lock().await;
        assert_eq!((kept.pool().size(), kept.pool().num_idle()), (1, 0));
    }
}
