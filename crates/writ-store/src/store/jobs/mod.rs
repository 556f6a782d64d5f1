//! [`JobStore`] for both backends (schema: `migrations/<backend>/0003_jobs.sql`, leases in
//! `0010_job_leases.sql` on PostgreSQL and `0008_job_leases.sql` on SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::{AuditLog, AuditWrite};
use writ_core::jobs::{ClaimedJob, Job, JobEvent, JobFilter, JobStatus, JobStore, NewJob};

pub(super) mod statements;

use statements::push_finish_job;

use super::commit::Work;
use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! job_columns {
    () => {
        "id, status, is_async, files, created_at, heartbeat_at, finished_at, batch_status, error, \
         attempts, workspace"
    };
}

fn job_from_row<D: Dialect>(row: &D::Row, with_response: bool) -> Result<Job, StoreError> {
    let row = Record::<D>(row);
    let files: Json<Vec<String>> = row.get("files")?;
    let response: Option<Json<serde_json::Value>> = if with_response {
        row.get("response")?
    } else {
        None
    };
    Ok(Job {
        id: row.get("id")?,
        status: row.parse("status")?,
        is_async: row.get("is_async")?,
        files: files.0,
        created_at: row.time("created_at")?,
        heartbeat_at: row.time("heartbeat_at")?,
        finished_at: row.optional_time("finished_at")?,
        batch_status: row.get("batch_status")?,
        response: response.map(|json| json.0),
        error: row.get("error")?,
        attempts: row.get("attempts")?,
        workspace: row.get("workspace")?,
    })
}

fn event_from_row<D: Dialect>(row: &D::Row) -> Result<JobEvent, StoreError> {
    let row = Record::<D>(row);
    let data: Json<serde_json::Value> = row.get("data")?;
    Ok(JobEvent {
        job_id: row.get("job_id")?,
        seq: row.get("seq")?,
        created_at: row.time("created_at")?,
        name: row.get("name")?,
        data: data.0,
    })
}

#[async_trait]
impl<D: Dialect> JobStore for SqlStore<D> {
    async fn insert_job(&self, job: &NewJob) -> Result<(), StoreError> {
        self.commit(vec![AuditWrite::InsertJob {
            job: job.clone(),
            status: JobStatus::Queued,
        }])
        .await
    }

    async fn heartbeat_job(&self, id: Uuid, status: JobStatus) -> Result<(), StoreError> {
        let mut sql = Sql::new("UPDATE jobs SET status = ");
        sql.bind(status.as_str())
            .push(", heartbeat_at = ")
            .bind_time(Utc::now())
            .push(" WHERE id = ")
            .bind(id)
            .push(statements::UNFINISHED);
        sql.execute(self, "heartbeat job").await?;
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
        let mut sql = Sql::new("");
        push_finish_job::<D>(&mut sql, id, status, batch_status, response, error);
        Ok(sql.execute(self, "finish job").await? == 1)
    }

    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        // A batch stores its answer once, on its request (same id); a job with none of its own
        // gives that one.
        let mut sql = Sql::new(concat!(
            "SELECT ",
            job_columns!(),
            ", COALESCE(response, (SELECT r.response FROM requests r WHERE r.id = jobs.id)) \
             AS response FROM jobs WHERE id = "
        ));
        sql.bind(id);
        let row = sql.fetch_optional(self, "get job").await?;
        row.map(|row| job_from_row::<D>(&row, true)).transpose()
    }

    async fn job_request(&self, id: Uuid) -> Result<Option<String>, StoreError> {
        let mut sql = Sql::new("SELECT request FROM jobs WHERE id = ");
        sql.bind(id);
        let Some(row) = sql.fetch_optional(self, "get job request").await? else {
            return Ok(None);
        };
        Record::<D>(&row).get("request")
    }

    async fn list_jobs(&self, filter: &JobFilter, limit: u32) -> Result<Vec<Job>, StoreError> {
        let mut sql = Sql::new(concat!("SELECT ", job_columns!(), " FROM jobs WHERE TRUE"));
        if let Some(caller) = &filter.caller {
            // A job's id is its request's id: the request row says which key made it.
            sql.push(" AND id IN (SELECT id FROM requests WHERE caller = ")
                .bind(caller.as_str())
                .push(")");
        }
        if let Some(workspaces) = &filter.workspaces {
            super::audit::push_in(&mut sql, "workspace", workspaces);
        }
        if filter.unfinished {
            sql.push(statements::UNFINISHED);
        }
        sql.push(" ORDER BY created_at DESC LIMIT ")
            .bind(i64::from(limit));
        let rows = sql.fetch_all(self, "list jobs").await?;
        rows.iter()
            .map(|row| job_from_row::<D>(row, false))
            .collect()
    }

    async fn stale_jobs(&self, before: DateTime<Utc>) -> Result<Vec<Job>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE lease_until IS NULL AND heartbeat_at < "
        ));
        sql.bind_time(before)
            .push(statements::UNFINISHED)
            .push(" ORDER BY created_at");
        let rows = sql.fetch_all(self, "list stale jobs").await?;
        rows.iter()
            .map(|row| job_from_row::<D>(row, false))
            .collect()
    }

    async fn renew_lease(
        &self,
        id: Uuid,
        owner: &str,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut sql = Sql::new("UPDATE jobs SET lease_until = ");
        sql.bind_time(until)
            .push(", heartbeat_at = ")
            .bind_time(Utc::now())
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND owner = ")
            .bind(owner)
            .push(statements::UNFINISHED);
        Ok(sql.execute(self, "renew job lease").await? == 1)
    }

    async fn release_lease(
        &self,
        id: Uuid,
        owner: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        // A lease that ended a moment ago: the next claim, on any replica, takes the job.
        let mut sql = Sql::new("UPDATE jobs SET lease_until = ");
        sql.bind_time(Utc::now() - chrono::Duration::milliseconds(1))
            .push(", error = ")
            .bind(reason)
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND owner = ")
            .bind(owner)
            .push(statements::UNFINISHED);
        Ok(sql.execute(self, "release job lease").await? == 1)
    }

    async fn take_over_jobs(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        let mut sql = Sql::new("UPDATE jobs SET owner = ");
        sql.bind(owner)
            .push(", lease_until = ")
            .bind_time(until)
            .push(", heartbeat_at = ")
            .bind_time(now)
            .push(", attempts = attempts + 1 WHERE id IN (SELECT id FROM jobs WHERE lease_until < ")
            .bind_time(now)
            .push(statements::UNFINISHED)
            .push(" ORDER BY lease_until LIMIT ")
            .bind(i64::from(limit))
            .push(D::SKIP_LOCKED)
            .push(concat!(
                ") RETURNING ",
                job_columns!(),
                ", request, attempts"
            ));
        let rows = sql.fetch_all(self, "claim jobs").await?;
        rows.iter()
            .map(|row| {
                let job = job_from_row::<D>(row, false)?;
                let record = Record::<D>(row);
                Ok(ClaimedJob {
                    request: record.get("request")?,
                    attempts: job.attempts,
                    job,
                })
            })
            .collect()
    }

    async fn append_job_event(&self, event: &JobEvent) -> Result<(), StoreError> {
        self.append_job_events(std::slice::from_ref(event)).await
    }

    async fn append_job_events(&self, events: &[JobEvent]) -> Result<(), StoreError> {
        let Some(progress) = &self.progress else {
            return self
                .commit(vec![AuditWrite::AppendEvents(events.to_vec())])
                .await;
        };
        if events.is_empty() {
            return Ok(());
        }
        // Kept like a group commit writer's connection, and retried the same way after a restart.
        progress.lock().await.run(Work::Events(events)).await
    }

    async fn job_events(
        &self,
        id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<JobEvent>, StoreError> {
        let mut sql =
            Sql::new("SELECT job_id, seq, created_at, name, data FROM job_events WHERE job_id = ");
        sql.bind(id)
            .push(" AND seq > ")
            .bind(after)
            .push(" ORDER BY seq LIMIT ")
            .bind(i64::from(limit));
        let rows = sql.fetch_all(self, "read job events").await?;
        rows.iter().map(event_from_row::<D>).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::PgStore;
    use crate::testing::fresh_postgres_url;

    /// Progress events, and only they, commit without waiting for the WAL flush: a record's
    /// commit (the group commit's connections) must keep the server's `synchronous_commit`.
    #[tokio::test]
    async fn only_progress_events_commit_without_waiting_for_the_wal_flush() {
        let url = fresh_postgres_url().await;
        let store = PgStore::connect(&url).await.unwrap();
        let setting = |pool: sqlx::PgPool| async move {
            sqlx::query_scalar::<_, String>("SHOW synchronous_commit")
                .fetch_one(&pool)
                .await
                .unwrap()
        };
        let server = setting(sqlx::PgPool::connect(&url).await.unwrap()).await;
        let progress = store
            .progress
            .clone()
            .expect("PostgreSQL stores events apart")
            .lock()
            .await
            .pool()
            .clone();
        assert_eq!(setting(progress).await, "off");
        assert_eq!(setting(store.writer.pool().clone()).await, server);
        assert_eq!(setting(store.pool().clone()).await, server);
    }
}
