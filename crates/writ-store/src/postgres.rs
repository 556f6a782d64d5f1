//! The PostgreSQL audit store: [`PgStore`], its connection pool, and its SQL.
//!
//! The schema is `migrations/postgres`. Timestamps are `TIMESTAMPTZ` (microseconds), UUIDs native,
//! candidates and responses `JSONB`, file contents `BYTEA` in their own table.

mod jobs;
mod keys;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{Decode, Postgres, QueryBuilder, Row, Type};
use uuid::Uuid;
use writ_core::audit::{
    CandidateRecord, Cursor, NewRequest, Operation, OperationFilter, OperationOutcome,
    OperationPage, RequestRecord, RequestStatus,
};
use writ_core::{AuditStore, StoreError};

use crate::error::{from_migrate, from_sqlx};
use crate::listing::{decode_cursor, fetch_size, into_page, parse_column};
use crate::url::{redact_url, scrub};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Enough for a busy replica (each batch holds a connection only per statement or short
/// transaction) while leaving PostgreSQL's default 100 connections for several replicas.
const MAX_CONNECTIONS: u32 = 10;
/// Short, so that a database that is down turns into a quick 503 and a red `/readyz`, not a
/// request hanging for the default 30 s.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// The audit store on PostgreSQL. Cheap to clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Opens a pool on `database_url` and checks that one connection can be made.
    pub async fn connect(database_url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(database_url).map_err(|err| {
            StoreError::Other(scrub(
                &format!(
                    "DATABASE_URL {} is not a usable PostgreSQL URL: {err}",
                    redact_url(database_url)
                ),
                database_url,
            ))
        })?;
        let options = options.application_name("writ");
        crate::probe::<sqlx::PgConnection>(&options, ACQUIRE_TIMEOUT)
            .await
            .map_err(|cause| {
                // Whatever the cause (refused, auth, no such database), start-up cannot go on and an
                // operator has to act: that is "unavailable", not a bug in a statement.
                StoreError::Unavailable(scrub(
                    &format!(
                        "cannot connect to PostgreSQL at {}: {cause}",
                        redact_url(database_url)
                    ),
                    database_url,
                ))
            })?;
        // Lazy: the probe has just shown the server answers, and connections open on demand.
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    /// Wraps a pool configured elsewhere.
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The pool, for operational queries this trait does not cover (and for tests that seed rows
    /// in bulk).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// PostgreSQL's plan (`EXPLAIN`, text format) for the exact statement
    /// [`AuditStore::list_operations`] would run, so operators and tests can check that a
    /// filtered listing walks an index rather than the table.
    pub async fn explain_list_operations(
        &self,
        filter: &OperationFilter,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<String, StoreError> {
        let after = cursor.map(decode_cursor).transpose()?;
        let mut query = listing_query("EXPLAIN ", filter, after, fetch_size(limit));
        let lines: Vec<String> = query
            .build_query_scalar()
            .fetch_all(&self.pool)
            .await
            .map_err(|err| from_sqlx("explain operation listing", err))?;
        Ok(lines.join("\n"))
    }
}

/// The newest-first listing. `prefix` is empty or `EXPLAIN `; every value is bound.
fn listing_query(
    prefix: &'static str,
    filter: &OperationFilter,
    after: Option<i64>,
    fetch: i64,
) -> QueryBuilder<Postgres> {
    let mut query = QueryBuilder::new(prefix);
    query.push(concat!(
        "SELECT ",
        operation_columns!(),
        " FROM operations WHERE TRUE"
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
            .push(" AND request_id IN (SELECT id FROM requests WHERE caller IS NOT DISTINCT FROM ")
            .push_bind(caller.clone())
            .push(")");
    }
    if let Some(since) = filter.since {
        query.push(" AND created_at >= ").push_bind(since);
    }
    if let Some(until) = filter.until {
        query.push(" AND created_at < ").push_bind(until);
    }
    if let Some(seq) = after {
        query.push(" AND seq < ").push_bind(seq);
    }
    query.push(" ORDER BY seq DESC LIMIT ").push_bind(fetch);
    query
}

fn column<'r, T>(row: &'r PgRow, name: &str) -> Result<T, StoreError>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    row.try_get(name)
        .map_err(|err| from_sqlx("read audit row", err))
}

fn operation_from_row(row: &PgRow) -> Result<(i64, Operation), StoreError> {
    let candidates: Json<Vec<CandidateRecord>> = column(row, "candidates")?;
    let operation = Operation {
        id: column(row, "id")?,
        request_id: column(row, "request_id")?,
        created_at: column(row, "created_at")?,
        finished_at: column(row, "finished_at")?,
        filename: column(row, "filename")?,
        kind: parse_column("kind", column(row, "kind")?)?,
        operation: parse_column("operation", column(row, "operation")?)?,
        status: parse_column("status", column(row, "status")?)?,
        chosen_model: column(row, "chosen_model")?,
        selection: column::<Option<String>>(row, "selection")?
            .map(|s| parse_column("selection", &s))
            .transpose()?,
        arbiter_reason: column(row, "arbiter_reason")?,
        candidates: candidates.0,
        previous_sha256: column(row, "previous_sha256")?,
        sha256: column(row, "sha256")?,
        bytes: column(row, "bytes")?,
        error: column(row, "error")?,
        duration_ms: column(row, "duration_ms")?,
        detail: column::<Option<Json<serde_json::Value>>>(row, "detail")?.map(|json| json.0),
    };
    Ok((column(row, "seq")?, operation))
}

fn request_from_row(row: &PgRow) -> Result<RequestRecord, StoreError> {
    let response: Option<Json<serde_json::Value>> = column(row, "response")?;
    Ok(RequestRecord {
        id: column(row, "id")?,
        received_at: column(row, "received_at")?,
        route: column(row, "route")?,
        caller: column(row, "caller")?,
        idempotency_key: column(row, "idempotency_key")?,
        body_sha256: column(row, "body_sha256")?,
        status: parse_column("status", column(row, "status")?)?,
        finished_at: column(row, "finished_at")?,
        duration_ms: column(row, "duration_ms")?,
        response: response.map(|json| json.0),
    })
}

#[async_trait]
impl AuditStore for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn single_process(&self) -> bool {
        false
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|err| from_sqlx("ping", err))?;
        Ok(())
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // sqlx takes an advisory lock first, so replicas starting together apply each migration once.
        MIGRATOR.run(&self.pool).await.map_err(from_migrate)
    }

    async fn is_migrated(&self) -> Result<bool, StoreError> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
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
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(req.id)
        .bind(req.received_at)
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
        let finished_at: DateTime<Utc> = Utc::now();
        let done = sqlx::query(
            "UPDATE requests SET status = $2, finished_at = $3, duration_ms = $4, response = $5 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(finished_at)
        .bind(duration_ms)
        .bind(response.map(Json))
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
            " FROM requests WHERE id = $1"
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
            " FROM requests WHERE COALESCE(caller, '') = $1 AND idempotency_key = $2"
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
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|err| from_sqlx("begin insert operation", err))?;
        sqlx::query(
            "INSERT INTO operations (id, request_id, created_at, finished_at, filename, kind, operation, \
             status, chosen_model, selection, arbiter_reason, candidates, previous_sha256, sha256, bytes, \
             error, duration_ms, detail) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        )
        .bind(op.id)
        .bind(op.request_id)
        .bind(op.created_at)
        .bind(op.finished_at)
        .bind(&op.filename)
        .bind(op.kind.as_str())
        .bind(op.operation.as_str())
        .bind(op.status.as_str())
        .bind(&op.chosen_model)
        .bind(op.selection.map(|s| s.as_str()))
        .bind(&op.arbiter_reason)
        .bind(Json(&op.candidates))
        .bind(&op.previous_sha256)
        .bind(&op.sha256)
        .bind(op.bytes)
        .bind(&op.error)
        .bind(op.duration_ms)
        .bind(op.detail.as_ref().map(Json))
        .execute(&mut *tx)
        .await
        .map_err(|err| from_sqlx("insert operation", err))?;
        if let Some(content) = content {
            sqlx::query("INSERT INTO operation_contents (operation_id, content) VALUES ($1, $2)")
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
            "UPDATE operations SET status = $2, operation = $3, error = $4, finished_at = $5, \
             duration_ms = $6 WHERE id = $1",
        )
        .bind(id)
        .bind(outcome.status.as_str())
        .bind(outcome.operation.as_str())
        .bind(&outcome.error)
        .bind(outcome.finished_at)
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
            ", content FROM operations LEFT JOIN operation_contents ON operation_id = id WHERE id = $1"
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
        // The literal (not a bound value) is what lets the planner use the partial pending index.
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
