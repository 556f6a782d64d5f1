//! [`LimitStore`] on PostgreSQL (schema: `migrations/postgres/0011_shared_limits.sql`,
//! `0012_batch_slots_follow_jobs.sql` and `0022_workspace_batch_slots.sql`): each limit is one statement, so taking a token or a batch
//! slot costs the caller one round trip. A batch slot is named by its batch's id, which is its
//! job's: the slot outlives a replica that dies or hands the job back, passes to the replica that
//! claims the job, and is given back when the job ends — by the statement that ends it.
//! A small pool of its own, so that limits are never queued behind batches' reads.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::shared_limits::LimitStore;

use crate::error::from_sqlx;

/// Connections for the limits: each check holds one for one statement.
const CONNECTIONS: u32 = 4;

/// The limits of one PostgreSQL database, shared by every replica using it.
#[derive(Clone, Debug)]
pub struct PgLimits {
    pool: PgPool,
}

impl PgLimits {
    /// Connects lazily to `database_url` (whose schema `AuditLog::migrate` has set up).
    pub fn connect(database_url: &str) -> Result<Self, StoreError> {
        let options = crate::postgres::connect_options(database_url)?;
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy_with(options);
        Ok(PgLimits { pool })
    }
}

#[async_trait]
impl LimitStore for PgLimits {
    async fn take_token(
        &self,
        caller: &str,
        per_sec: f64,
        burst: f64,
    ) -> Result<Option<f64>, StoreError> {
        // The row lock of the upsert orders replicas taking from one bucket; the refill uses the
        // database's clock, the one clock every replica shares. A refused take changes nothing
        // and reads back the tokens left, for Retry-After.
        let taken: Option<f64> = sqlx::query_scalar(
            "INSERT INTO rate_buckets AS b (caller, tokens, at) VALUES ($1, $2 - 1, now()) \
             ON CONFLICT (caller) DO UPDATE SET \
               tokens = LEAST($2, b.tokens + EXTRACT(EPOCH FROM now() - b.at)::float8 * $3) - 1, \
               at = now() \
             WHERE LEAST($2, b.tokens + EXTRACT(EPOCH FROM now() - b.at)::float8 * $3) >= 1 \
             RETURNING tokens",
        )
        .bind(caller)
        .bind(burst)
        .bind(per_sec)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| from_sqlx("take a request token", e))?;
        if taken.is_some() {
            return Ok(None);
        }
        let left: f64 = sqlx::query_scalar(
            "SELECT LEAST($2, tokens + EXTRACT(EPOCH FROM now() - at)::float8 * $3) \
             FROM rate_buckets WHERE caller = $1",
        )
        .bind(caller)
        .bind(burst)
        .bind(per_sec)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| from_sqlx("read a request bucket", e))?
        .unwrap_or(0.0);
        Ok(Some(((1.0 - left) / per_sec).max(0.0)))
    }

    async fn take_batch_slot(
        &self,
        caller: &str,
        slot: Uuid,
        job: Uuid,
        holder: &str,
        max: i64,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT writ_take_batch_slot($1, $2, $3, $4, $5, $6)")
            .bind(slot)
            .bind(job)
            .bind(caller)
            .bind(holder)
            .bind(max)
            .bind(until)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| from_sqlx("take a batch slot", e))
    }

    async fn release_batch_slot(&self, slot: Uuid) -> Result<(), StoreError> {
        // A slot whose job is unfinished stays: the job was handed back or its lease lost, and
        // the replica resuming it holds the slot until the job ends (migrations 0012, 0022).
        sqlx::query(
            "DELETE FROM batch_slots s WHERE id = $1 AND NOT EXISTS \
             (SELECT 1 FROM jobs j WHERE j.id = s.job AND j.status IN ('queued', 'running'))",
        )
        .bind(slot)
        .execute(&self.pool)
        .await
        .map_err(|e| from_sqlx("release a batch slot", e))?;
        Ok(())
    }

    async fn renew_batch_slots(
        &self,
        holder: &str,
        until: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        // Rows another statement holds are skipped, not waited for: they are being given back
        // or taken over (a job ending or claimed, migration 0012), and waiting for them while
        // holding others could deadlock with a commit that ends several jobs.
        sqlx::query(
            "UPDATE batch_slots SET until = $2 WHERE id IN \
             (SELECT id FROM batch_slots WHERE holder = $1 FOR UPDATE SKIP LOCKED)",
        )
        .bind(holder)
        .bind(until)
        .execute(&self.pool)
        .await
        .map_err(|e| from_sqlx("renew batch slots", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PgStore;
    use crate::testing::fresh_postgres_url;
    use writ_core::AuditLog;

    /// A key's slot, named by its batch's job.
    trait KeySlots {
        async fn take_key_slot(
            &self,
            caller: &str,
            slot: Uuid,
            holder: &str,
            max: i64,
            until: DateTime<Utc>,
        ) -> Result<bool, StoreError>;
    }

    impl KeySlots for PgLimits {
        async fn take_key_slot(
            &self,
            caller: &str,
            slot: Uuid,
            holder: &str,
            max: i64,
            until: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            self.take_batch_slot(caller, slot, slot, holder, max, until)
                .await
        }
    }

    async fn limits() -> PgLimits {
        let url = fresh_postgres_url().await;
        PgStore::connect(&url)
            .await
            .unwrap()
            .migrate()
            .await
            .unwrap();
        PgLimits::connect(&url).unwrap()
    }

    #[tokio::test]
    async fn a_keys_batch_slots_are_counted_across_holders_and_lapse_with_their_holder() {
        let limits = limits().await;
        let later = Utc::now() + chrono::Duration::seconds(30);
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        assert!(limits.take_key_slot("k", a, "one", 2, later).await.unwrap());
        assert!(limits.take_key_slot("k", b, "two", 2, later).await.unwrap());
        assert!(
            !limits
                .take_key_slot("k", c, "three", 2, later)
                .await
                .unwrap()
        );
        assert!(
            limits
                .take_key_slot("other", c, "three", 2, later)
                .await
                .unwrap()
        );
        limits.release_batch_slot(a).await.unwrap();
        assert!(
            limits
                .take_key_slot("k", Uuid::now_v7(), "three", 2, later)
                .await
                .unwrap()
        );
        // "two" dies: its slot lapses instead of being renewed.
        limits
            .renew_batch_slots("two", Utc::now() - chrono::Duration::seconds(1))
            .await
            .unwrap();
        assert!(
            limits
                .take_key_slot("k", Uuid::now_v7(), "three", 2, later)
                .await
                .unwrap()
        );
    }

    /// How many slots `caller` holds, and who holds them.
    async fn holders(url: &str, caller: &str) -> Vec<String> {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        sqlx::query_scalar("SELECT holder FROM batch_slots WHERE caller = $1 ORDER BY holder")
            .bind(caller)
            .fetch_all(&mut conn)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_resumed_job_keeps_its_keys_and_workspaces_batch_slots_until_it_ends_and_gives_them_back_once()
     {
        use writ_core::audit::{AuditWrite, NewRequest};
        use writ_core::jobs::{JobStatus, JobStore, Lease, NewJob};
        let url = fresh_postgres_url().await;
        let store = PgStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let limits = PgLimits::connect(&url).unwrap();
        let now = Utc::now();
        let later = now + chrono::Duration::seconds(30);
        // Replica "one" admits the key's only batch (N = 1) and records its job; the batch also
        // takes its workspace's only slot, a row of its own that records the job.
        let job = Uuid::now_v7();
        assert!(
            limits
                .take_key_slot("k", job, "one", 1, later)
                .await
                .unwrap()
        );
        let workspace_slot = Uuid::now_v7();
        assert!(
            limits
                .take_batch_slot("workspace:w", workspace_slot, job, "one", 1, later)
                .await
                .unwrap()
        );
        store
            .commit(vec![
                AuditWrite::InsertRequest(NewRequest {
                    id: job,
                    received_at: now,
                    route: "POST /write_codebase".into(),
                    caller: Some("k".into()),
                    scope: None,
                    idempotency_key: None,
                    body_sha256: None,
                    workspace: "default".into(),
                }),
                AuditWrite::InsertJob {
                    job: NewJob {
                        id: job,
                        created_at: now,
                        is_async: true,
                        files: vec!["a.py".into()],
                        lease: Some(Lease {
                            owner: "one".into(),
                            until: now - chrono::Duration::seconds(1),
                        }),
                        request: Some("{}".into()),
                        workspace: "default".into(),
                    },
                    status: JobStatus::Running,
                },
            ])
            .await
            .unwrap();
        // "one" dies: neither its lease nor its slot is renewed, and its batch task's release
        // (a stopping replica's) does not give the slot of an unfinished job back.
        limits
            .renew_batch_slots("one", now - chrono::Duration::seconds(1))
            .await
            .unwrap();
        limits.release_batch_slot(job).await.unwrap();
        limits.release_batch_slot(workspace_slot).await.unwrap();
        assert!(
            !limits
                .take_key_slot("k", Uuid::now_v7(), "three", 1, later)
                .await
                .unwrap(),
            "the unfinished job still counts against the key"
        );
        assert!(
            !limits
                .take_key_slot("workspace:w", Uuid::now_v7(), "three", 1, later)
                .await
                .unwrap(),
            "and against its workspace"
        );

        // "two" claims the job: the slot is its own now, renewed with its other slots.
        let claimed = store
            .take_over_jobs("two", Utc::now(), later, 16)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(holders(&url, "k").await, vec!["two".to_string()]);
        assert_eq!(holders(&url, "workspace:w").await, vec!["two".to_string()]);
        limits.renew_batch_slots("two", later).await.unwrap();
        assert!(
            !limits
                .take_key_slot("k", Uuid::now_v7(), "three", 1, later)
                .await
                .unwrap(),
            "the key still runs its one batch, on the replica that resumed it"
        );

        // The job ends: its slot is given back by the same commit, and only that one.
        assert!(
            limits
                .take_key_slot("other", Uuid::now_v7(), "two", 1, later)
                .await
                .unwrap()
        );
        store
            .commit(vec![AuditWrite::FinishJob {
                id: job,
                status: JobStatus::Done,
                batch_status: Some("success".into()),
                response: None,
                error: None,
            }])
            .await
            .unwrap();
        assert_eq!(holders(&url, "k").await, Vec::<String>::new());
        assert_eq!(holders(&url, "workspace:w").await, Vec::<String>::new());
        assert_eq!(holders(&url, "other").await, vec!["two".to_string()]);
        assert!(
            limits
                .take_key_slot("k", Uuid::now_v7(), "three", 1, later)
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn a_bucket_is_one_for_every_replica_and_says_when_a_token_is_back() {
        let limits = limits().await;
        let other = limits.clone();
        assert_eq!(limits.take_token("k", 1.0, 2.0).await.unwrap(), None);
        assert_eq!(other.take_token("k", 1.0, 2.0).await.unwrap(), None);
        let wait = limits.take_token("k", 1.0, 2.0).await.unwrap().unwrap();
        assert!(wait > 0.0 && wait <= 1.0, "{wait}");
        assert_eq!(limits.take_token("another", 1.0, 2.0).await.unwrap(), None);
    }
}
