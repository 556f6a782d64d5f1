//! [`AuditStore`] for both backends: requests and the operations they made (schema:
//! `migrations/<backend>/0001_*.sql` and after), the newest-first listing of operations, and the
//! migrations themselves.

use async_trait::async_trait;
use sqlx::types::Json;
use tracing::Instrument;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::AuditLog;
use writ_core::audit::Selection;
use writ_core::audit::{
    AuditWrite, CandidateRecord, Cursor, NewRequest, Operation, OperationFilter, OperationOutcome,
    OperationPage, RecentOperation, RequestRecord, RequestStatus,
};

use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;
use crate::error::from_migrate;
use crate::listing::{decode_cursor, fetch_size, into_page, parse_column};

impl<D: Dialect> SqlStore<D> {
    /// The backend's plan (PostgreSQL's `EXPLAIN` text, SQLite's `EXPLAIN QUERY PLAN` steps), one
    /// line each, for the exact statement [`AuditLog::list_operations`] would run, so operators
    /// and tests can check that a filtered listing walks an index.
    pub async fn explain_list_operations(
        &self,
        filter: &OperationFilter,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<String, StoreError> {
        let rows = listing(D::EXPLAIN, filter, cursor, limit)?
            .fetch_all(self, "explain operation listing")
            .await?;
        let steps = rows
            .iter()
            .map(|row| Record::<D>(row).get::<String>(D::PLAN_COLUMN))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(steps.join("\n"))
    }
}

/// The `selection` column's value. The one place it is bound, so the field's type can change here
/// alone (with [`selection_from_column`]).
pub(super) fn selection_to_column(op: &Operation) -> Option<&'static str> {
    op.selection.map(Selection::as_str)
}

/// The one place the `selection` column is read back into [`Operation::selection`].
fn selection_from_column(value: Option<String>) -> Result<Option<Selection>, StoreError> {
    value.map(|s| parse_column("selection", &s)).transpose()
}

/// The newest-first listing under `filter`: a page of `limit` (and one more row, to learn whether
/// another page follows) after `cursor`. `prefix` is empty or the dialect's `EXPLAIN`; every value
/// is bound. A cursor this store could not have issued is refused before anything runs.
fn listing<D: Dialect>(
    prefix: &str,
    filter: &OperationFilter,
    cursor: Option<&Cursor>,
    limit: u32,
) -> Result<Sql<D>, StoreError> {
    listing_of(
        prefix,
        operation_columns!(),
        filter,
        cursor,
        fetch_size(limit),
    )
}

/// [`listing`] of some `columns` only, at most `rows` of them.
fn listing_of<D: Dialect>(
    prefix: &str,
    columns: &str,
    filter: &OperationFilter,
    cursor: Option<&Cursor>,
    rows: i64,
) -> Result<Sql<D>, StoreError> {
    let after = cursor.map(decode_cursor).transpose()?;
    let mut sql = Sql::new(prefix);
    sql.push("SELECT ")
        .push(columns)
        .push(" FROM operations WHERE TRUE");
    if let Some(request_id) = filter.request_id {
        sql.push(" AND request_id = ").bind(request_id);
    }
    if let Some(filename) = &filter.filename {
        sql.push(" AND filename = ").bind(filename.as_str());
    }
    if let Some(status) = filter.status {
        sql.push(" AND status = ").bind(status.as_str());
    }
    if let Some(model) = &filter.model {
        sql.push(" AND chosen_model = ").bind(model.as_str());
    }
    match &filter.caller {
        None => {}
        // '' is "no key" (migration 0007): equality either way, so the index is read in order.
        Some(caller) => {
            sql.push(" AND caller = ")
                .bind(caller.as_deref().unwrap_or(""));
        }
    }
    if let Some(workspaces) = &filter.workspaces {
        push_in(&mut sql, "workspace", workspaces);
    }
    if let Some(since) = filter.since {
        sql.push(" AND created_at >= ").bind_time(since);
    }
    if let Some(until) = filter.until {
        sql.push(" AND created_at < ").bind_time(until);
    }
    if let Some(seq) = after {
        sql.push(" AND seq < ").bind(seq);
    }
    sql.push(" ORDER BY seq DESC LIMIT ").bind(rows);
    Ok(sql)
}

/// ` AND column IN (…)`, every name bound; an empty list matches nothing.
pub(super) fn push_in<D: Dialect>(sql: &mut Sql<D>, column: &str, names: &[String]) {
    if names.is_empty() {
        sql.push(" AND FALSE");
        return;
    }
    sql.push(" AND ").push(column).push(" IN (");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.bind(name.as_str());
    }
    sql.push(")");
}

fn operation_from_row<D: Dialect>(row: &D::Row) -> Result<(i64, Operation), StoreError> {
    let row = Record::<D>(row);
    let candidates: Json<Vec<CandidateRecord>> = row.get("candidates")?;
    let detail: Option<Json<serde_json::Value>> = row.get("detail")?;
    let operation = Operation {
        id: row.get("id")?,
        request_id: row.get("request_id")?,
        created_at: row.time("created_at")?,
        finished_at: row.optional_time("finished_at")?,
        filename: row.get("filename")?,
        kind: row.parse("kind")?,
        operation: row.parse("operation")?,
        status: row.parse("status")?,
        chosen_model: row.get("chosen_model")?,
        selection: selection_from_column(row.get("selection")?)?,
        arbiter_reason: row.get("arbiter_reason")?,
        candidates: candidates.0,
        previous_sha256: row.get("previous_sha256")?,
        sha256: row.get("sha256")?,
        bytes: row.get("bytes")?,
        error: row.get("error")?,
        duration_ms: row.get("duration_ms")?,
        detail: detail.map(|json| json.0),
        workspace: row.get("workspace")?,
    };
    Ok((row.get("seq")?, operation))
}

fn request_from_row<D: Dialect>(row: &D::Row) -> Result<RequestRecord, StoreError> {
    let row = Record::<D>(row);
    let response: Option<Json<serde_json::Value>> = row.get("response")?;
    Ok(RequestRecord {
        id: row.get("id")?,
        received_at: row.time("received_at")?,
        route: row.get("route")?,
        caller: row.get("caller")?,
        scope: row
            .get::<Option<String>>("scope")?
            .map(|s| parse_column("scope", &s))
            .transpose()?,
        idempotency_key: row.get("idempotency_key")?,
        body_sha256: row.get("body_sha256")?,
        status: row.parse("status")?,
        finished_at: row.optional_time("finished_at")?,
        duration_ms: row.get("duration_ms")?,
        response: response.map(|json| json.0),
        workspace: row.get("workspace")?,
    })
}

#[async_trait]
impl<D: Dialect> AuditLog for SqlStore<D> {
    fn backend(&self) -> &'static str {
        D::BACKEND
    }

    fn single_process(&self) -> bool {
        D::SINGLE_PROCESS
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Sql::new("SELECT 1").execute(self, "ping").await?;
        Ok(())
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        self.restamp_reworded_migrations().await?;
        // On PostgreSQL sqlx takes an advisory lock first, so replicas starting together apply
        // each migration once.
        D::migrator().run(&self.pool).await.map_err(from_migrate)
    }

    async fn is_migrated(&self) -> Result<bool, StoreError> {
        if !self.migrations_table_exists().await? {
            return Ok(false);
        }
        let applied = Sql::new("SELECT version, checksum FROM _sqlx_migrations WHERE success")
            .fetch_all(self, "read applied migrations")
            .await?
            .iter()
            .map(|row| {
                let row = Record::<D>(row);
                Ok((row.get("version")?, row.get("checksum")?))
            })
            .collect::<Result<Vec<(i64, Vec<u8>)>, StoreError>>()?;
        Ok(crate::migrations_applied(
            D::migrator(),
            &applied,
            D::REWORDED_MIGRATIONS,
        ))
    }

    async fn commit(&self, writes: Vec<AuditWrite>) -> Result<(), StoreError> {
        let span = tracing::info_span!(
            "store_commit",
            db.system.name = D::BACKEND,
            records = writes.len()
        );
        self.writer.commit(writes).instrument(span).await
    }

    async fn insert_request(&self, req: &NewRequest) -> Result<(), StoreError> {
        self.commit(vec![AuditWrite::InsertRequest(req.clone())])
            .await
    }

    async fn finish_request(
        &self,
        id: Uuid,
        status: RequestStatus,
        duration_ms: i64,
        response: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        self.commit(vec![AuditWrite::FinishRequest {
            id,
            status,
            duration_ms,
            response: response.cloned(),
        }])
        .await
    }

    async fn get_request(&self, id: Uuid) -> Result<Option<RequestRecord>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE id = "
        ));
        sql.bind(id);
        let row = sql.fetch_optional(self, "get request").await?;
        row.as_ref().map(request_from_row::<D>).transpose()
    }

    async fn find_request_by_idempotency_key(
        &self,
        caller: Option<&str>,
        key: &str,
    ) -> Result<Option<RequestRecord>, StoreError> {
        // Same expression as requests_idempotency_key_idx, so the lookup is an index probe.
        let mut sql = Sql::new(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE COALESCE(caller, '') = "
        ));
        sql.bind(caller.unwrap_or(""))
            .push(" AND idempotency_key = ")
            .bind(key);
        let row = sql
            .fetch_optional(self, "find request by idempotency key")
            .await?;
        row.as_ref().map(request_from_row::<D>).transpose()
    }

    async fn insert_operation(
        &self,
        op: &Operation,
        content: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.commit(vec![AuditWrite::InsertOperation {
            operation: op.clone(),
            content: content.map(<[u8]>::to_vec),
        }])
        .await
    }

    async fn complete_operation(
        &self,
        id: Uuid,
        outcome: &OperationOutcome,
    ) -> Result<(), StoreError> {
        self.commit(vec![AuditWrite::CompleteOperation {
            id,
            outcome: outcome.clone(),
        }])
        .await
    }

    async fn get_operation(
        &self,
        id: Uuid,
    ) -> Result<Option<(Operation, Option<Vec<u8>>)>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            operation_columns!(),
            ", content FROM operations LEFT JOIN operation_contents ON operation_id = id \
             WHERE id = "
        ));
        sql.bind(id);
        let Some(row) = sql.fetch_optional(self, "get operation").await? else {
            return Ok(None);
        };
        let (_, operation) = operation_from_row::<D>(&row)?;
        Ok(Some((operation, Record::<D>(&row).get("content")?)))
    }

    async fn list_operations(
        &self,
        filter: &OperationFilter,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<OperationPage, StoreError> {
        let rows = listing::<D>("", filter, cursor, limit)?
            .fetch_all(self, "list operations")
            .await?;
        let rows = rows
            .iter()
            .map(operation_from_row::<D>)
            .collect::<Result<Vec<_>, _>>()?;
        let (operations, next_cursor) = into_page(rows, limit);
        Ok(OperationPage {
            operations,
            next_cursor,
        })
    }

    async fn recent_operations(
        &self,
        caller: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RecentOperation>, StoreError> {
        // The listing's own statement, so it walks the same (caller, seq) index; without the
        // candidates and detail JSON, which the prompts never show.
        let filter = OperationFilter {
            caller: Some(caller.map(str::to_string)),
            ..OperationFilter::default()
        };
        let rows = listing_of::<D>(
            "",
            "seq, created_at, filename, operation, chosen_model",
            &filter,
            None,
            i64::from(limit),
        )?
        .fetch_all(self, "list recent operations")
        .await?;
        rows.iter()
            .map(|row| {
                let row = Record::<D>(row);
                Ok(RecentOperation {
                    created_at: row.time("created_at")?,
                    filename: row.get("filename")?,
                    operation: row.parse("operation")?,
                    chosen_model: row.get("chosen_model")?,
                })
            })
            .collect()
    }

    async fn pending_operations(&self) -> Result<Vec<Operation>, StoreError> {
        // The literal (not a bound value) is what lets the planner use the partial pending index.
        let rows = Sql::<D>::new(concat!(
            "SELECT ",
            operation_columns!(),
            " FROM operations WHERE status = 'pending' ORDER BY seq"
        ))
        .fetch_all(self, "list pending operations")
        .await?;
        rows.iter()
            .map(|row| operation_from_row::<D>(row).map(|(_, op)| op))
            .collect()
    }

    async fn kept_content(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = sha256.to_ascii_lowercase();
        let mut sql = Sql::<D>::new("SELECT content FROM kept_contents WHERE sha256 = ");
        sql.bind(key.as_str());
        let Some(row) = sql.fetch_optional(self, "read kept content").await? else {
            return Ok(None);
        };
        Ok(Some(Record::<D>(&row).get("content")?))
    }

    async fn prune_contents(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, StoreError> {
        let mut kept = Sql::<D>::new("DELETE FROM kept_contents WHERE kept_at < ");
        kept.bind_time(before);
        let mut dropped = kept.execute(self, "prune kept contents").await?;
        // Only settled operations: a pending one's content is what reconciliation checks the
        // disk against.
        let mut written = Sql::<D>::new(
            "DELETE FROM operation_contents WHERE operation_id IN \
             (SELECT id FROM operations WHERE status <> 'pending' AND created_at < ",
        );
        written.bind_time(before).push(")");
        dropped += written.execute(self, "prune operation contents").await?;
        Ok(dropped)
    }

    async fn record_commit(&self, request: Uuid, commit: &str) -> Result<(), StoreError> {
        let mut sql = Sql::<D>::new(
            "INSERT INTO request_commits (request_id, commit_id, committed_at) VALUES ",
        );
        sql.tuple(|row| {
            row.bind(request).bind(commit).bind_time(chrono::Utc::now());
        });
        // A request is committed once; a second record (a resumed batch's) names the later
        // commit, which holds every file.
        sql.push(
            " ON CONFLICT (request_id) DO UPDATE SET commit_id = excluded.commit_id, \
             committed_at = excluded.committed_at",
        );
        sql.execute(self, "record request commit").await?;
        Ok(())
    }

    async fn request_commit(&self, request: Uuid) -> Result<Option<String>, StoreError> {
        let mut sql = Sql::<D>::new("SELECT commit_id FROM request_commits WHERE request_id = ");
        sql.bind(request);
        let Some(row) = sql.fetch_optional(self, "read request commit").await? else {
            return Ok(None);
        };
        Ok(Some(Record::<D>(&row).get("commit_id")?))
    }
}
