//! The SQLite audit store: [`SqliteStore`], its connection settings, and its SQL.
//!
//! The schema is `migrations/sqlite`. UUIDs are 16-byte BLOBs, timestamps INTEGER microseconds
//! since the epoch (numeric order is time order, and the precision matches PostgreSQL), JSON is
//! TEXT written by serde_json, file contents BLOBs in their own table.
//!
//! Durability over speed: WAL with `synchronous=FULL`, so an acknowledged write survives a power
//! cut. Writers are serialised by SQLite; `busy_timeout` makes them queue instead of failing.

mod jobs;
mod keys;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Decode, QueryBuilder, Row, Sqlite, Type};
use uuid::Uuid;
use writ_core::audit::{
    CandidateRecord, Cursor, NewRequest, Operation, OperationFilter, OperationOutcome,
    OperationPage, RequestRecord, RequestStatus,
};
use writ_core::{AuditStore, StoreError};

use crate::error::{from_migrate, from_sqlx};
use crate::listing::{decode_cursor, fetch_size, into_page, parse_column};
use crate::url::{redact_url, scrub};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/sqlite");

/// WAL lets readers run beside the one writer; more connections than this only queue on the
/// write lock.
const MAX_CONNECTIONS: u32 = 4;
/// A writer waits this long for the write lock before the statement fails as unavailable.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// A little longer than [`BUSY_TIMEOUT`], so that a queue of writers reports the lock, not the pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(6);
/// Takes the write lock at `BEGIN`: a deferred transaction that reads first cannot wait for the
/// lock later (SQLite answers `SQLITE_BUSY` at once to avoid a deadlock).
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// The audit store on SQLite. Cheap to clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file named by `database_url` (`sqlite://path`,
    /// `sqlite:path`, or `sqlite::memory:`) and checks that one connection can be made.
    pub async fn connect(database_url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(database_url).map_err(|err| {
            StoreError::Other(scrub(
                &format!(
                    "DATABASE_URL {} is not a usable SQLite URL: {err}",
                    redact_url(database_url)
                ),
                database_url,
            ))
        })?;
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        crate::probe::<sqlx::SqliteConnection>(&options, ACQUIRE_TIMEOUT)
            .await
            .map_err(|cause| {
                StoreError::Unavailable(scrub(
                    &format!(
                        "cannot open SQLite database {}: {cause}",
                        redact_url(database_url)
                    ),
                    database_url,
                ))
            })?;
        let mut pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT);
        if is_in_memory(database_url) {
            // An in-memory database lives as long as one connection to it: never let the pool
            // close the last one.
            pool = pool
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let pool = pool.connect_lazy_with(options);
        Ok(Self { pool })
    }

    /// Wraps a pool configured elsewhere (the caller is then responsible for the pragmas above).
    pub fn from_pool(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// The pool, for operational queries this trait does not cover (and for tests that seed rows
    /// in bulk).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// SQLite's plan (`EXPLAIN QUERY PLAN`, one step per line) for the exact statement
    /// [`AuditStore::list_operations`] would run, so operators and tests can check that a
    /// filtered listing walks an index instead of sorting the table.
    pub async fn explain_list_operations(
        &self,
        filter: &OperationFilter,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<String, StoreError> {
        let after = cursor.map(decode_cursor).transpose()?;
        let mut query = listing_query("EXPLAIN QUERY PLAN ", filter, after, fetch_size(limit));
        let rows = query
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|err| from_sqlx("explain operation listing", err))?;
        let steps = rows
            .iter()
            .map(|row| column::<String>(row, "detail"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(steps.join("\n"))
    }
}

fn is_in_memory(database_url: &str) -> bool {
    database_url.contains(":memory:") || database_url.contains("mode=memory")
}

fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

fn from_micros(column_name: &str, micros: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| StoreError::Other(format!("column {column_name}: timestamp out of range")))
}

fn timestamp(row: &SqliteRow, name: &str) -> Result<DateTime<Utc>, StoreError> {
    from_micros(name, column(row, name)?)
}

fn optional_timestamp(row: &SqliteRow, name: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
    column::<Option<i64>>(row, name)?
        .map(|micros| from_micros(name, micros))
        .transpose()
}

/// The newest-first listing. `prefix` is empty or `EXPLAIN QUERY PLAN `; every value is bound.
fn listing_query(
    prefix: &'static str,
    filter: &OperationFilter,
    after: Option<i64>,
    fetch: i64,
) -> QueryBuilder<Sqlite> {
    let mut query = QueryBuilder::new(prefix);
    query.push(concat!(
        "SELECT ",
        operation_columns!(),
        " FROM operations WHERE 1"
    ));
    if let Some(request_id) = filter.request_id {
        query.push(" AND request_id = ").push_bind(request_id);
    }
    if let Some(filename) = &filter.filename {
        query.push(" AND filename = ").push_bind(filename.clone());
    }
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(model) = &filter.model {
        query.push(" AND chosen_model = ").push_bind(model.clone());
    }
    if let Some(caller) = &filter.caller {
        query
            .push(" AND request_id IN (SELECT id FROM requests WHERE caller IS ")
            .push_bind(caller.clone())
            .push(")");
    }
    if let Some(since) = filter.since {
        query.push(" AND created_at >= ").push_bind(micros(since));
    }
    if let Some(until) = filter.until {
        query.push(" AND created_at < ").push_bind(micros(until));
    }
    if let Some(seq) = after {
        query.push(" AND seq < ").push_bind(seq);
    }
    query.push(" ORDER BY seq DESC LIMIT ").push_bind(fetch);
    query
}

fn column<'r, T>(row: &'r SqliteRow, name: &str) -> Result<T, StoreError>
where
    T: Decode<'r, Sqlite> + Type<Sqlite>,
{
    row.try_get(name)
        .map_err(|err| from_sqlx("read audit row", err))
}

/// Names the column when serde_json fails to write it (it cannot for these types, but the error
/// must still not be swallowed).
fn json_text(column_name: &str, encoded: serde_json::Result<String>) -> Result<String, StoreError> {
    encoded.map_err(|err| StoreError::Other(format!("encode {column_name}: {err}")))
}

fn operation_from_row(row: &SqliteRow) -> Result<(i64, Operation), StoreError> {
    let candidates: Vec<CandidateRecord> = serde_json::from_str(column(row, "candidates")?)
        .map_err(|err| StoreError::Other(format!("column candidates: {err}")))?;
    let operation = Operation {
        id: column(row, "id")?,
        request_id: column(row, "request_id")?,
        created_at: timestamp(row, "created_at")?,
        finished_at: optional_timestamp(row, "finished_at")?,
        filename: column(row, "filename")?,
        kind: parse_column("kind", column(row, "kind")?)?,
        operation: parse_column("operation", column(row, "operation")?)?,
        status: parse_column("status", column(row, "status")?)?,
        chosen_model: column(row, "chosen_model")?,
        selection: column::<Option<String>>(row, "selection")?
            .map(|s| parse_column("selection", &s))
            .transpose()?,
        arbiter_reason: column(row, "arbiter_reason")?,
        candidates,
        previous_sha256: column(row, "previous_sha256")?,
        sha256: column(row, "sha256")?,
        bytes: column(row, "bytes")?,
        error: column(row, "error")?,
        duration_ms: column(row, "duration_ms")?,
        detail: column::<Option<&str>>(row, "detail")?
            .map(serde_json::from_str)
            .transpose()
            .map_err(|err| StoreError::Other(format!("column detail: {err}")))?,
    };
    Ok((column(row, "seq")?, operation))
}

fn request_from_row(row: &SqliteRow) -> Result<RequestRecord, StoreError> {
    let response = column::<Option<&str>>(row, "response")?
        .map(serde_json::from_str)
        .transpose()
        .map_err(|err| StoreError::Other(format!("column response: {err}")))?;
    Ok(RequestRecord {
        id: column(row, "id")?,
        received_at: timestamp(row, "received_at")?,
        route: column(row, "route")?,
        caller: column(row, "caller")?,
        idempotency_key: column(row, "idempotency_key")?,
        body_sha256: column(row, "body_sha256")?,
        status: parse_column("status", column(row, "status")?)?,
        finished_at: optional_timestamp(row, "finished_at")?,
        duration_ms: column(row, "duration_ms")?,
        response,
    })
}

#[async_trait]
impl AuditStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn single_process(&self) -> bool {
        true
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|err| from_sqlx("ping", err))?;
        Ok(())
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await.map_err(from_migrate)
    }

    async fn is_migrated(&self) -> Result<bool, StoreError> {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|err| from_sqlx("look for the migrations table", err))?;
        if !exists {
            return Ok(false);
        }
        let applied: Vec<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await
                .map_err(|err| from_sqlx("read applied migrations", err))?;
        Ok(crate::migrations_applied(&MIGRATOR, &applied))
    }

    async fn insert_request(&self, req: &NewRequest) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO requests (id, received_at, route, caller, idempotency_key, body_sha256, status) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .bind(req.id)
        .bind(micros(req.received_at))
        .bind(&req.route)
        .bind(&req.caller)
        .bind(&req.idempotency_key)
        .bind(&req.body_sha256)
        .bind(RequestStatus::Running.as_str())
        .execute(&self.pool)
        .await
        .map_err(|err| from_sqlx("insert request", err))?;
        Ok(())
    }

    async fn finish_request(
        &self,
        id: Uuid,
        status: RequestStatus,
        duration_ms: i64,
        response: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        let response = response
            .map(|value| json_text("response", serde_json::to_string(value)))
            .transpose()?;
        let done = sqlx::query(
            "UPDATE requests SET status = ?2, finished_at = ?3, duration_ms = ?4, response = ?5 \
             WHERE id = ?1",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(micros(Utc::now()))
        .bind(duration_ms)
        .bind(response)
        .execute(&self.pool)
        .await
        .map_err(|err| from_sqlx("finish request", err))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Other(format!("no request {id}")));
        }
        Ok(())
    }

    async fn get_request(&self, id: Uuid) -> Result<Option<RequestRecord>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE id = ?1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|err| from_sqlx("get request", err))?;
        row.as_ref().map(request_from_row).transpose()
    }

    async fn find_request_by_idempotency_key(
        &self,
        caller: Option<&str>,
        key: &str,
    ) -> Result<Option<RequestRecord>, StoreError> {
        // Same expression as requests_idempotency_key_idx, so the lookup is an index probe.
        let row = sqlx::query(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE COALESCE(caller, '') = ?1 AND idempotency_key = ?2"
        ))
        .bind(caller.unwrap_or(""))
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|err| from_sqlx("find request by idempotency key", err))?;
        row.as_ref().map(request_from_row).transpose()
    }

    async fn insert_operation(
        &self,
        op: &Operation,
        content: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        let candidates = json_text("candidates", serde_json::to_string(&op.candidates))?;
        let detail = op
            .detail
            .as_ref()
            .map(|d| json_text("detail", serde_json::to_string(d)))
            .transpose()?;
        let mut tx = self
            .pool
            .begin_with(BEGIN_WRITE)
            .await
            .map_err(|err| from_sqlx("begin insert operation", err))?;
        sqlx::query(
            "INSERT INTO operations (id, request_id, created_at, finished_at, filename, kind, operation, \
             status, chosen_model, selection, arbiter_reason, candidates, previous_sha256, sha256, bytes, \
             error, duration_ms, detail) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        )
        .bind(op.id)
        .bind(op.request_id)
        .bind(micros(op.created_at))
        .bind(op.finished_at.map(micros))
        .bind(&op.filename)
        .bind(op.kind.as_str())
        .bind(op.operation.as_str())
        .bind(op.status.as_str())
        .bind(&op.chosen_model)
        .bind(op.selection.map(|s| s.as_str()))
        .bind(&op.arbiter_reason)
        .bind(candidates)
        .bind(&op.previous_sha256)
        .bind(&op.sha256)
        .bind(op.bytes)
        .bind(&op.error)
        .bind(op.duration_ms)
        .bind(detail)
        .execute(&mut *tx)
        .await
        .map_err(|err| from_sqlx("insert operation", err))?;
        if let Some(content) = content {
            sqlx::query("INSERT INTO operation_contents (operation_id, content) VALUES (?1, ?2)")
                .bind(op.id)
                .bind(content)
                .execute(&mut *tx)
                .await
                .map_err(|err| from_sqlx("insert operation content", err))?;
        }
        tx.commit()
            .await
            .map_err(|err| from_sqlx("commit insert operation", err))
    }

    async fn complete_operation(
        &self,
        id: Uuid,
        outcome: &OperationOutcome,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE operations SET status = ?2, operation = ?3, error = ?4, finished_at = ?5, \
             duration_ms = ?6 WHERE id = ?1",
        )
        .bind(id)
        .bind(outcome.status.as_str())
        .bind(outcome.operation.as_str())
        .bind(&outcome.error)
        .bind(micros(outcome.finished_at))
        .bind(outcome.duration_ms)
        .execute(&self.pool)
        .await
        .map_err(|err| from_sqlx("complete operation", err))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Other(format!("no operation {id}")));
        }
        Ok(())
    }

    async fn get_operation(
        &self,
        id: Uuid,
    ) -> Result<Option<(Operation, Option<Vec<u8>>)>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            operation_columns!(),
            ", content FROM operations LEFT JOIN operation_contents ON operation_id = id WHERE id = ?1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|err| from_sqlx("get operation", err))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (_, operation) = operation_from_row(&row)?;
        Ok(Some((operation, column(&row, "content")?)))
    }

    async fn list_operations(
        &self,
        filter: &OperationFilter,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<OperationPage, StoreError> {
        let after = cursor.map(decode_cursor).transpose()?;
        let mut query = listing_query("", filter, after, fetch_size(limit));
        let rows = query
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|err| from_sqlx("list operations", err))?;
        let rows = rows
            .iter()
            .map(operation_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let (operations, next_cursor) = into_page(rows, limit);
        Ok(OperationPage {
            operations,
            next_cursor,
        })
    }

    async fn pending_operations(&self) -> Result<Vec<Operation>, StoreError> {
        // The literal (not a bound value) is what lets SQLite use the partial pending index.
        let rows = sqlx::query(concat!(
            "SELECT ",
            operation_columns!(),
            " FROM operations WHERE status = 'pending' ORDER BY seq"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|err| from_sqlx("list pending operations", err))?;
        rows.iter()
            .map(|row| operation_from_row(row).map(|(_, op)| op))
            .collect()
    }
}
