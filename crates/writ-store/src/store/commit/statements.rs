//! Statement coalescing: a commit's records, in order, as few statements as the backend allows
//! (runs of pending rows and of completions become one part each; PostgreSQL joins the parts of
//! a statement as a `WITH` query of data-modifying statements), each checking the rows it
//! changed.

use sqlx::types::Json;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::{AuditWrite, Operation, OperationOutcome};

use crate::dialect::Dialect;
use crate::error::from_sqlx;
use crate::store::Sql;
use crate::store::audit::selection_to_column;
use crate::store::changes::{ChangeTable, expected_rows, push_part};

/// `writes` in order, atomically, in as few statements as the backend allows ([`statements`]).
/// A single statement needs no `BEGIN` and `COMMIT` (it is atomic by itself), which saves two
/// round trips on the commit a caller waits for.
pub(super) async fn transaction<D: Dialect>(
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

/// `writes` in order on `conn`, inside a transaction the caller holds (a change that must land
/// with its audit records, or not at all).
pub(crate) async fn within<D: Dialect>(
    conn: &mut D::Connection,
    writes: &[AuditWrite],
) -> Result<(), StoreError> {
    let writes: Vec<&AuditWrite> = writes.iter().collect();
    for statement in statements::<D>(&writes) {
        statement.run::<D>(conn).await?;
    }
    Ok(())
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
    /// A change-set write's part on one of the tables it touches.
    Change(&'w AuditWrite, ChangeTable),
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
            (
                AuditWrite::ProposeChange { .. }
                | AuditWrite::DecideChange { .. }
                | AuditWrite::WithdrawDecision { .. },
                _,
            ) => parts.extend(
                ChangeTable::of(write)
                    .iter()
                    .map(|table| Part::Change(write, *table)),
            ),
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
            Part::One(AuditWrite::KeepContent { .. }) => "kept_contents",
            Part::One(
                AuditWrite::InsertOperation { .. } | AuditWrite::CompleteOperation { .. },
            ) => "operations",
            Part::Change(_, table) => table.name(),
            // Never made: a change-set write is split into `Part::Change`s.
            Part::One(
                AuditWrite::ProposeChange { .. }
                | AuditWrite::DecideChange { .. }
                | AuditWrite::WithdrawDecision { .. },
            ) => "change_sets",
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
            Part::One(AuditWrite::KeepContent { .. }) => "keep content",
            Part::Change(AuditWrite::ProposeChange { .. }, _) => "insert change set",
            Part::Change(AuditWrite::DecideChange { .. }, _) => "record a decision on a change set",
            Part::Change(_, _) => "withdraw a decision on a change set",
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
            Part::One(AuditWrite::InsertJob { job, .. }) => Expect::Every(
                1,
                format!(
                    "no workspace named '{}': it was deleted as the batch was admitted",
                    job.workspace
                ),
            ),
            Part::One(AuditWrite::InsertRequest(_)) => Expect::Rows(1),
            Part::Change(write, table) => match expected_rows(write, *table) {
                Some((n, missing)) => Expect::Every(n, missing),
                None => Expect::Any,
            },
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
            Part::Change(write, table) => push_part(sql, write, *table),
        }
    }
}

fn push_insert_operations<D: Dialect>(sql: &mut Sql<D>, ops: &[&Operation]) {
    sql.push(
        "INSERT INTO operations (id, request_id, created_at, finished_at, filename, kind, \
         operation, status, chosen_model, selection, arbiter_reason, candidates, \
         previous_sha256, sha256, bytes, error, duration_ms, detail, workspace, caller) VALUES ",
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
                // Its request's: an operation is always in the workspace its request was made in.
                .computed(
                    "COALESCE((SELECT workspace FROM requests WHERE id = ",
                    op.request_id,
                    "), 'default')",
                )
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
                 body_sha256, status, workspace) VALUES ",
            );
            sql.tuple(|row| {
                row.bind(req.id)
                    .bind_time(req.received_at)
                    .bind(req.route.as_str())
                    .bind(req.caller.as_deref())
                    .bind(req.scope.map(|s| s.as_str()))
                    .bind(req.idempotency_key.as_deref())
                    .bind(req.body_sha256.as_deref())
                    .bind(writ_core::audit::RequestStatus::Running.as_str())
                    .bind(req.workspace.as_str());
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
        AuditWrite::InsertJob { job, status } => {
            crate::store::jobs::statements::push_insert_job(sql, job, *status)
        }
        AuditWrite::FinishJob {
            id,
            status,
            batch_status,
            response,
            error,
        } => crate::store::jobs::statements::push_finish_job(
            sql,
            *id,
            *status,
            batch_status.as_deref(),
            response.as_ref(),
            error.as_deref(),
        ),
        AuditWrite::AppendEvents(events) => {
            crate::store::jobs::statements::push_insert_events(sql, events)
        }
        // Split into parts of their own by `statements`.
        AuditWrite::ProposeChange { .. }
        | AuditWrite::DecideChange { .. }
        | AuditWrite::WithdrawDecision { .. } => {}
        AuditWrite::KeepContent { sha256, content } => {
            sql.push("INSERT INTO kept_contents (sha256, kept_at, content) VALUES ");
            sql.tuple(|row| {
                row.bind(sha256.as_str())
                    .bind_time(chrono::Utc::now())
                    .bind(content.as_slice());
            });
            sql.push(" ON CONFLICT (sha256) DO UPDATE SET kept_at = excluded.kept_at");
        }
    }
}
