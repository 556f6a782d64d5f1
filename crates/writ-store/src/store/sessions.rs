//! [`SessionStore`] for both backends (schema: `migrations/<backend>/0005_write_sessions.sql`).
//!
//! A session's content is its rows in `write_session_chunks`, one per chunk, read back in `seq`
//! order: an append inserts only the new bytes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::files::WriteMode;
use writ_core::sessions::{
    ChunkAppend, SessionState, SessionStore, SessionTransition, WriteSession,
};

use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;
use crate::error::from_sqlx;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! session_columns {
    () => {
        "id, caller, target_file, operation, intent, create_dirs, state, bytes_received, chunks, \
         tail, correction_rounds, created_at, updated_at, finished_at, receipt, error, git_commit, \
         workspace, review"
    };
}

/// The states a session is stored in while it waits on its caller.
const OPEN: &str = " state IN ('awaiting_content', 'needs_corrections')";

fn operation_to_column(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::Create => "create",
        WriteMode::Overwrite => "overwrite",
        WriteMode::Append => "append",
    }
}

fn operation_from_column(value: &str) -> Result<WriteMode, StoreError> {
    match value {
        "create" => Ok(WriteMode::Create),
        "overwrite" => Ok(WriteMode::Overwrite),
        "append" => Ok(WriteMode::Append),
        other => Err(StoreError::Other(format!(
            "column operation: unknown write mode {other}"
        ))),
    }
}

fn session_from_row<D: Dialect>(row: &D::Row) -> Result<WriteSession, StoreError> {
    let row = Record::<D>(row);
    let receipt: Option<Json<serde_json::Value>> = row.get("receipt")?;
    Ok(WriteSession {
        id: row.get("id")?,
        caller: row.get("caller")?,
        target_file: row.get("target_file")?,
        operation: operation_from_column(&row.get::<String>("operation")?)?,
        intent: row.get("intent")?,
        create_dirs: row.get("create_dirs")?,
        state: row.parse("state")?,
        bytes_received: row.get("bytes_received")?,
        chunks: row.get("chunks")?,
        tail: row.get("tail")?,
        correction_rounds: row.get("correction_rounds")?,
        created_at: row.time("created_at")?,
        updated_at: row.time("updated_at")?,
        finished_at: row.optional_time("finished_at")?,
        receipt: receipt.map(|json| json.0),
        error: row.get("error")?,
        commit: row.get("git_commit")?,
        workspace: row.get("workspace")?,
        review: row.get("review")?,
    })
}

#[async_trait]
impl<D: Dialect> SessionStore for SqlStore<D> {
    async fn insert_write_session(&self, s: &WriteSession) -> Result<(), StoreError> {
        let mut sql = Sql::new(concat!(
            "INSERT INTO write_sessions (",
            session_columns!(),
            ") VALUES "
        ));
        sql.tuple(|row| {
            row.bind(s.id)
                .bind(s.caller.as_deref())
                .bind(s.target_file.as_str())
                .bind(operation_to_column(s.operation))
                .bind(s.intent.as_deref())
                .bind(s.create_dirs)
                .bind(s.state.as_str())
                .bind(s.bytes_received)
                .bind(s.chunks)
                .bind(s.tail.as_slice())
                .bind(s.correction_rounds)
                .bind_time(s.created_at)
                .bind_time(s.updated_at)
                .bind_time(s.finished_at)
                .bind(s.receipt.as_ref().map(Json))
                .bind(s.error.as_deref())
                .bind(s.commit)
                .bind(s.workspace.as_str())
                .bind(s.review);
        });
        sql.execute(self, "insert write session").await?;
        Ok(())
    }

    async fn get_write_session(&self, id: Uuid) -> Result<Option<WriteSession>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            session_columns!(),
            " FROM write_sessions WHERE id = "
        ));
        sql.bind(id);
        let row = sql.fetch_optional(self, "get write session").await?;
        row.map(|row| session_from_row::<D>(&row)).transpose()
    }

    async fn append_write_session_chunk(
        &self,
        append: &ChunkAppend<'_>,
    ) -> Result<bool, StoreError> {
        let mut update = Sql::<D>::new("UPDATE write_sessions SET chunks = ");
        update
            .bind(append.seq)
            .push(", bytes_received = ")
            .bind(append.bytes_received)
            .push(", tail = ")
            .bind(append.tail)
            .push(", updated_at = ")
            .bind_time(append.at)
            .push(" WHERE id = ")
            .bind(append.session_id)
            .push(" AND state = 'awaiting_content' AND chunks = ")
            .bind(append.seq - 1);
        let mut insert: Sql<D> =
            Sql::new("INSERT INTO write_session_chunks (session_id, seq, content) VALUES ");
        insert.tuple(|row| {
            row.bind(append.session_id)
                .bind(append.seq)
                .bind(append.content);
        });
        // The counters and the chunk commit together; the update's condition is what makes a
        // racing append lose instead of taking the same place.
        let mut tx = self
            .pool
            .begin_with(D::BEGIN_WRITE)
            .await
            .map_err(|err| from_sqlx("begin append chunk", err))?;
        if update.execute_on(&mut tx, "count chunk").await? != 1 {
            return Ok(false);
        }
        insert.execute_on(&mut tx, "append chunk").await?;
        tx.commit()
            .await
            .map_err(|err| from_sqlx("commit append chunk", err))?;
        Ok(true)
    }

    async fn write_session_content(&self, id: Uuid) -> Result<Vec<u8>, StoreError> {
        let mut sql = Sql::new("SELECT content FROM write_session_chunks WHERE session_id = ");
        sql.bind(id).push(" ORDER BY seq");
        let rows = sql.fetch_all(self, "read write session content").await?;
        let mut content = Vec::new();
        for row in &rows {
            content.extend_from_slice(&Record::<D>(row).get::<Vec<u8>>("content")?);
        }
        Ok(content)
    }

    async fn transition_write_session(
        &self,
        id: Uuid,
        change: &SessionTransition<'_>,
    ) -> Result<bool, StoreError> {
        if change.from.is_empty() {
            return Ok(false);
        }
        let mut update = Sql::<D>::new("UPDATE write_sessions SET state = ");
        update
            .bind(change.to.as_str())
            .push(", updated_at = ")
            .bind_time(change.at);
        if matches!(
            change.to,
            SessionState::Done | SessionState::Failed | SessionState::Expired
        ) {
            update.push(", finished_at = ").bind_time(change.at);
        }
        if let Some(receipt) = change.receipt {
            update.push(", receipt = ").bind(Json(receipt));
        }
        if let Some(error) = change.error {
            update.push(", error = ").bind(error);
        }
        if change.count_correction {
            update.push(", correction_rounds = correction_rounds + 1");
        }
        update.push(" WHERE id = ").bind(id).push(" AND state IN (");
        for (i, state) in change.from.iter().enumerate() {
            if i > 0 {
                update.push(", ");
            }
            update.bind(state.as_str());
        }
        update.push(")");
        let mut tx = self
            .pool
            .begin_with(D::BEGIN_WRITE)
            .await
            .map_err(|err| from_sqlx("begin write session change", err))?;
        if update.execute_on(&mut tx, "change write session").await? != 1 {
            return Ok(false);
        }
        if change.content.is_some() || change.drop_content {
            let mut delete = Sql::<D>::new("DELETE FROM write_session_chunks WHERE session_id = ");
            delete.bind(id);
            delete
                .execute_on(&mut tx, "drop write session content")
                .await?;
        }
        if let Some(content) = change.content {
            let mut insert: Sql<D> =
                Sql::new("INSERT INTO write_session_chunks (session_id, seq, content) VALUES ");
            insert.tuple(|row| {
                row.bind(id).bind(0_i64).bind(content);
            });
            insert
                .execute_on(&mut tx, "replace write session content")
                .await?;
        }
        super::commit::within::<D>(&mut tx, change.records).await?;
        tx.commit()
            .await
            .map_err(|err| from_sqlx("commit write session change", err))?;
        Ok(true)
    }

    async fn count_open_write_sessions(
        &self,
        caller: Option<&str>,
        since: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let mut sql = Sql::new("SELECT COUNT(*) AS open FROM write_sessions WHERE");
        sql.push(OPEN).push(" AND updated_at >= ").bind_time(since);
        match caller {
            Some(caller) => sql.push(" AND caller = ").bind(caller),
            None => sql.push(" AND caller IS NULL"),
        };
        let row = sql
            .fetch_optional(self, "count open write sessions")
            .await?;
        let open: i64 = match &row {
            Some(row) => Record::<D>(row).get("open")?,
            None => 0,
        };
        Ok(open.max(0) as u64)
    }

    async fn abandoned_write_sessions(
        &self,
        before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<WriteSession>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            session_columns!(),
            " FROM write_sessions WHERE"
        ));
        sql.push(OPEN)
            .push(" AND updated_at < ")
            .bind_time(before)
            .push(" ORDER BY updated_at LIMIT ")
            .bind(i64::from(limit));
        let rows = sql.fetch_all(self, "list abandoned write sessions").await?;
        rows.iter().map(session_from_row::<D>).collect()
    }
}
