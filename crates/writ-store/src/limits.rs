//! [`LimitStore`] on PostgreSQL (schema: `migrations/postgres/0011_shared_limits.sql`): each
//! limit is one statement, so taking a token or a batch slot costs the caller one round trip.
//! A small pool of its own, so that limits are never queued behind batches' reads.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::limits::LimitStore;

use crate::error::from_sqlx;

/// Connections for the limits: each check holds one for one statement.
const CONNECTIONS: u32 = 4;

/// The limits of one PostgreSQL database, shared by every replica using it.
#[derive(Clone, Debug)]
pub struct PgLimits {
    pool: PgPool,
}

impl PgLimits {
    /// Connects lazily to `database_url` (whose schema `AuditStore::migrate` has set up).
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
        holder: &str,
        max: i64,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT writ_take_batch_slot($1, $2, $3, $4, $5)")
            .bind(slot)
            .bind(caller)
            .bind(holder)
            .bind(max)
            .bind(until)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| from_sqlx("take a batch slot", e))
    }

    async fn release_batch_slot(&self, slot: Uuid) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM batch_slots WHERE id = $1")
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
        sqlx::query("UPDATE batch_slots SET until = $2 WHERE holder = $1")
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
    use writ_core::AuditStore;

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
        assert!(
            limits
                .take_batch_slot("k", a, "one", 2, later)
                .await
                .unwrap()
        );
        assert!(
            limits
                .take_batch_slot("k", b, "two", 2, later)
                .await
                .unwrap()
        );
        assert!(
            !limits
                .take_batch_slot("k", c, "three", 2, later)
                .await
                .unwrap()
        );
        assert!(
            limits
                .take_batch_slot("other", c, "three", 2, later)
                .await
                .unwrap()
        );
        limits.release_batch_slot(a).await.unwrap();
        assert!(
            limits
                .take_batch_slot("k", Uuid::now_v7(), "three", 2, later)
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
                .take_batch_slot("k", Uuid::now_v7(), "three", 2, later)
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
