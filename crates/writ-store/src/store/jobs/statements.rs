//! The job records' statements the group commit writes (a batch's job opened and closed with
//! its request, its progress events in bursts), apart from the [`JobStore`] reads and updates
//! beside them, which go through the group commit themselves.
//!
//! [`JobStore`]: writ_core::jobs::JobStore

use chrono::Utc;
use sqlx::types::Json;
use uuid::Uuid;
use writ_core::jobs::{JobEvent, JobStatus, NewJob};

use crate::dialect::Dialect;
use crate::store::Sql;

/// Only these may still change: a heartbeat or a finish never touches a job that has ended.
pub(super) const UNFINISHED: &str = " AND status IN ('queued', 'running')";

pub(crate) fn push_insert_events<D: Dialect>(sql: &mut Sql<D>, events: &[JobEvent]) {
    sql.push("INSERT INTO job_events (job_id, seq, created_at, name, data) VALUES ");
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.tuple(|row| {
            row.bind(event.job_id)
                .bind(event.seq)
                .bind_time(event.created_at)
                .bind(event.name.as_str())
                .bind(Json(&event.data));
        });
    }
}

/// Inserts the job only while its workspace is stored (or is `default`, never stored): the row is
/// read [`Dialect::FOR_SHARE`], so a deletion of the workspace either waits for this commit (and
/// then sees the job) or has committed (and the job is not inserted: the commit fails, naming the
/// workspace, before the batch writes anything).
pub(crate) fn push_insert_job<D: Dialect>(sql: &mut Sql<D>, job: &NewJob, status: JobStatus) {
    sql.push(
        "INSERT INTO jobs (id, status, is_async, files, created_at, heartbeat_at, owner, \
         lease_until, request, workspace) SELECT * FROM (VALUES ",
    );
    sql.tuple(|row| {
        row.bind(job.id)
            .bind(status.as_str())
            .bind(job.is_async)
            .bind(Json(job.files.as_slice()))
            .bind_time(job.created_at)
            .bind_time(job.created_at)
            .bind(job.lease.as_ref().map(|l| l.owner.as_str()))
            .bind_time(job.lease.as_ref().map(|l| l.until))
            .bind(job.request.as_deref())
            .bind(job.workspace.as_str());
    });
    sql.push(") AS v WHERE ")
        .bind(job.workspace.as_str())
        .push(" = 'default' OR EXISTS (SELECT 1 FROM workspaces WHERE name = ")
        .bind(job.workspace.as_str())
        .push(D::FOR_SHARE)
        .push(")");
}

/// Ends a job that has not ended yet (changes no row otherwise).
pub(crate) fn push_finish_job<D: Dialect>(
    sql: &mut Sql<D>,
    id: Uuid,
    status: JobStatus,
    batch_status: Option<&str>,
    response: Option<&serde_json::Value>,
    error: Option<&str>,
) {
    let now = Utc::now();
    sql.push("UPDATE jobs SET status = ")
        .bind(status.as_str())
        .push(", batch_status = ")
        .bind(batch_status)
        .push(", response = ")
        .bind(response.map(Json))
        .push(", error = ")
        .bind(error)
        .push(", finished_at = ")
        .bind_time(now)
        .push(", heartbeat_at = ")
        .bind_time(now)
        .push(" WHERE id = ")
        .bind(id)
        .push(UNFINISHED);
}
