//! How a running job shows it is alive, and what happens when it is not: the lease its replica
//! renews (PostgreSQL), and on SQLite the jobs whose process died, failed with a reason.

use super::*;

/// Resolves once `flag` turns true; never if its sender is gone without doing so.
pub(super) async fn raised(mut flag: watch::Receiver<bool>) {
    if flag.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Keeps the job looking alive while its batch runs: the heartbeat, or (where jobs are leased)
/// the lease, renewed. A renewal that finds the lease another's raises `lost`.
///
/// While the store cannot be reached, the lease may run out: the run goes on (its results are
/// kept through the outage), but writes nothing until a renewal succeeds again
/// ([`LeaseHold::confirm`]); a replica that claimed the job meanwhile makes that renewal fail
/// and this run stop.
///
/// Nothing is renewed before the job's row is committed (`recorded`): a synchronous batch's
/// records commit beside its fan-out, and on a busy database that commit can outlast the first
/// renewal, which would then find no row and take the job for lost. The lease is taken with the
/// row, so it runs from there.
pub(super) async fn keep_alive(
    store: Arc<dyn SynthesisStore>,
    job_id: Uuid,
    lease: Option<Arc<LeaseHold>>,
    recorded: Recorded,
) {
    if recorded.wait().await.is_err() {
        // No row to keep alive: the run writes nothing and ends on its own.
        return;
    }
    let Some(lease) = lease else {
        loop {
            tokio::time::sleep(HEARTBEAT_EVERY).await;
            if let Err(e) = store.heartbeat_job(job_id, JobStatus::Running).await {
                tracing::warn!(job = %job_id, error = %e, "job heartbeat failed");
            }
        }
    };
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        match lease.renew().await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "job lease renewal failed");
                if lease.held_until() <= tokio::time::Instant::now() {
                    tracing::warn!(job = %job_id, "the job's lease ran out before it could be renewed: its writes wait for the next renewal");
                }
            }
        }
    }
}

/// Fails every unfinished job whose heartbeat is older than `older_than`: its process is gone.
/// The request record is closed too, and a final `done` event ends any stream following it.
/// Returns how many jobs were failed.
pub async fn fail_stale_jobs(
    store: &dyn SynthesisStore,
    older_than: Duration,
    hub: Option<&EventHub>,
    write_path: &std::path::Path,
) -> Result<usize, StoreError> {
    let cutoff =
        Utc::now() - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::zero());
    let mut failed = 0;
    for job in store.stale_jobs(cutoff).await? {
        let reason = format!(
            "interrupted: the process running this batch stopped before it finished (last heartbeat {}); \
             files written before that are listed in /operations?request_id={}",
            job.heartbeat_at.to_rfc3339(),
            job.id
        );
        if !store
            .finish_job(
                job.id,
                JobStatus::Failed,
                Some("error"),
                None,
                Some(&reason),
            )
            .await?
        {
            continue;
        }
        failed += 1;
        // Its answer is stored, so a repeat of its Idempotency-Key gets it.
        let answer = failed_answer(store, &job, write_path.display().to_string(), &reason).await;
        let body = serde_json::to_value(&answer).ok();
        if let Err(e) = store
            .finish_request(
                job.id,
                answer.status,
                answer.duration_ms as i64,
                body.as_ref(),
            )
            .await
        {
            tracing::warn!(job = %job.id, error = %e, "could not close the request of an interrupted job");
        }
        match hub {
            Some(hub) => announce_failed(store, hub, job.id, &reason).await,
            None => announce_failed(store, &EventHub::default(), job.id, &reason).await,
        }
        tracing::warn!(job = %job.id, "failed an interrupted job");
    }
    Ok(failed)
}
