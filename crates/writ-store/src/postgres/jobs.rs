//! [`JobStore`] on PostgreSQL (schema: `migrations/postgres/0003_jobs.sql`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::jobs::{Job, JobEvent, JobStatus, JobStore, NewJob};

use super::{PgStore, column};
use crate::error::from_sqlx;
use crate::listing::parse_column;

const JOB_COLUMNS: &str =
    "id, status, is_async, files, created_at, heartbeat_at, finished_at, batch_status, error";

fn job_from_row(row: &PgRow, with_response: bool) -> Result<Job, StoreError> {
    let files: Json<Vec<String>> = column(row, "files")?;
    let response: Option<Json<serde_json::Value>> = if with_response {
        column(row, "response")?
    } else {
        None
    };
    Ok(Job {
        id: column(row, "id")?,
        status: parse_column("status", column(row, "status")?)?,
        is_async: column(row, "is_async")?,
        files: files.0,
        created_at: column(row, "created_at")?,
        heartbeat_at: column(row, "heartbeat_at")?,
        finished_at: column(row, "finished_at")?,
        batch_status: column(row, "batch_status")?,
        response: response.map(|r| r.0),
        error: column(row, "error")?,
    })
}

#[async_trait]
impl JobStore for PgStore {
    async fn insert_job(&self, job: &NewJob) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO jobs (id, status, is_async, files, created_at, heartbeat_at) VALUES ($1, 'queued', $2, $3, $4, $4)",
        )
        .bind(job.id)
        .bind(job.is_async)
        .bind(Json(&job.files))
        .bind(job.created_at)
        .execute(self.pool())
        .await
        .map_err(|err| from_sqlx("insert job", err))?;
        Ok(())
    }

    async fn heartbeat_job(&self, id: Uuid, status: JobStatus) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET status = $2, heartbeat_at = now() WHERE id = $1 AND status IN ('queued', 'running')",
        )
        .bind(id)
        .bind(status.as_str())
        .execute(self.pool())
        .await
        .map_err(|err| from_sqlx("heartbeat job", err))?;
        Ok(())
    }

    async fn finish_job(
        &self,
        id: Uuid,
        status: JobStatus,
        batch_status: Option<&str>,
        response: Option<&serde_json::Value>,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE jobs SET status = $2, batch_status = $3, response = $4, error = $5, finished_at = now(), heartbeat_at = now() \
             WHERE id = $1 AND status IN ('queued', 'running')",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(batch_status)
        .bind(response.map(Json))
        .bind(error)
        .execute(self.pool())
        .await
        .map_err(|err| from_sqlx("finish job", err))?;
        Ok(done.rows_affected() == 1)
    }

    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS}, response FROM jobs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .map_err(|err| from_sqlx("get job", err))?;
        row.map(|r| job_from_row(&r, true)).transpose()
    }

    async fn list_jobs(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs ORDER BY created_at DESC LIMIT $1"
        )))
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await
        .map_err(|err| from_sqlx("list jobs", err))?;
        rows.iter().map(|r| job_from_row(r, false)).collect()
    }

    async fn stale_jobs(&self, before: DateTime<Utc>) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE status IN ('queued', 'running') AND heartbeat_at < $1 ORDER BY created_at"
        )))
        .bind(before)
        .fetch_all(self.pool())
        .await
        .map_err(|err| from_sqlx("list stale jobs", err))?;
        rows.iter().map(|r| job_from_row(r, false)).collect()
    }

    async fn append_job_event(&self, event: &JobEvent) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO job_events (job_id, seq, created_at, name, data) VALUES ($1, $2, $3, $4, $5)")
            .bind(event.job_id)
            .bind(event.seq)
            .bind(event.created_at)
            .bind(&event.name)
            .bind(Json(&event.data))
            .execute(self.pool())
            .await
            .map_err(|err| from_sqlx("append job event", err))?;
        Ok(())
    }

    async fn append_job_events(&self, events: &[JobEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut query = sqlx::QueryBuilder::new(
            "INSERT INTO job_events (job_id, seq, created_at, name, data) ",
        );
        query.push_values(events, |mut row, e| {
            row.push_bind(e.job_id)
                .push_bind(e.seq)
                .push_bind(e.created_at)
                .push_bind(&e.name)
                .push_bind(Json(&e.data));
        });
        query
            .build()
            .execute(self.pool())
            .await
            .map_err(|err| from_sqlx("append job events", err))?;
        Ok(())
    }

    async fn job_events(
        &self,
        id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<JobEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT job_id, seq, created_at, name, data FROM job_events WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await
        .map_err(|err| from_sqlx("read job events", err))?;
        rows.iter()
            .map(|row| {
                let data: Json<serde_json::Value> = column(row, "data")?;
                Ok(JobEvent {
                    job_id: column(row, "job_id")?,
                    seq: column(row, "seq")?,
                    created_at: column(row, "created_at")?,
                    name: column(row, "name")?,
                    data: data.0,
                })
            })
            .collect()
    }
}
