//! The audit store's statements, written once for both backends: [`SqlStore`], and one module
//! per port it implements — [`writ_core::AuditStore`] (requests, operations, migrations) in
//! `audit`, [`writ_core::jobs::JobStore`] in `jobs`, [`writ_core::keys::KeyStore`] in `keys`,
//! [`writ_core::sessions::SessionStore`] in `sessions`, [`writ_core::workspace_registry::WorkspaceStore`]
//! in `workspaces`, [`writ_core::claims::ClaimStore`] in `claims`,
//! [`writ_core::changes::ChangeStore`] in `changes`,
//! [`writ_core::budgets::SpendLedger`] in `spend` —, every record write through the group commit
//! in `commit`, the statements' building blocks in `sql`.
//!
//! Statements are built with sqlx's [`sqlx::QueryBuilder`], which writes each backend's placeholders
//! (`$1` or `?`); every value is bound, never formatted into the SQL. What the backends do
//! differently (timestamps, `BEGIN`, `EXPLAIN`, the migrations) is asked of [`Dialect`].
//!
//! One clock: every timestamp the store writes comes from this process (`Utc::now()` in Rust),
//! never from the database's `now()`. A caller's own timestamps (`created_at`, `before`) are
//! process time too, so comparing the two (a stale heartbeat, for one) means the same thing on
//! either backend and for every replica, whichever database server answers.

mod audit;
mod changes;
mod claims;
mod commit;
mod jobs;
mod keys;
mod sessions;
mod spend;
mod sql;
mod workspaces;

use std::fmt;
use std::sync::Arc;

use sqlx::Pool;
use sqlx::pool::PoolConnection;
use writ_core::StoreError;

use self::commit::{GroupCommit, Kept};
use self::sql::{Record, Sql};
use crate::dialect::Dialect;
use crate::error::from_sqlx;

/// The audit store on either backend: [`crate::PgStore`] or [`crate::SqliteStore`]. Cheap to
/// clone (the pool is shared).
pub struct SqlStore<D: Dialect> {
    pool: Pool<D>,
    /// Every record write goes through here (see `commit`).
    writer: Arc<GroupCommit<D>>,
    /// Where progress events go when they have a connection of their own (PostgreSQL: one that
    /// commits without waiting for the WAL flush); otherwise through `writer` like a record.
    /// One event writer per process uses it, so the lock is not contended.
    progress: Option<Arc<tokio::sync::Mutex<Kept<D>>>>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            writer: self.writer.clone(),
            progress: self.progress.clone(),
        }
    }
}

impl<D: Dialect> fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &D::BACKEND)
            .field("pool", &self.pool)
            .finish()
    }
}

impl<D: Dialect> SqlStore<D> {
    /// Wraps a pool configured elsewhere (the caller is then responsible for the connection
    /// settings `connect` would have applied).
    pub fn from_pool(pool: Pool<D>) -> Self {
        Self {
            // The writers share the pool with the reads: they hand their connections back.
            writer: Arc::new(GroupCommit::new(pool.clone(), false)),
            pool,
            progress: None,
        }
    }

    /// Reads (and the few writes outside the group commit) on `pool`; the group commit's writers
    /// on `writers`, their own connections, so that hundreds of batches queueing to read never
    /// starve the commits every batch is waiting for.
    pub fn from_pools(pool: Pool<D>, writers: Pool<D>) -> Self {
        Self {
            writer: Arc::new(GroupCommit::new(writers, true)),
            pool,
            progress: None,
        }
    }

    /// Progress events are stored on `progress` instead of through the group commit.
    pub(crate) fn with_progress_pool(mut self, progress: Pool<D>) -> Self {
        self.progress = Some(Arc::new(tokio::sync::Mutex::new(Kept::new(progress, true))));
        self
    }

    /// The pool, for operational queries the traits do not cover (and for tests that seed rows
    /// in bulk).
    pub fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    async fn connection(&self, what: &str) -> Result<PoolConnection<D>, StoreError> {
        self.pool
            .acquire()
            .await
            .map_err(|err| from_sqlx(what, err))
    }
}

impl<D: Dialect> SqlStore<D> {
    async fn migrations_table_exists(&self) -> Result<bool, StoreError> {
        let exists = Sql::<D>::new(D::MIGRATIONS_TABLE_EXISTS)
            .fetch_optional(self, "look for the migrations table")
            .await?;
        match exists {
            Some(row) => Record::<D>(&row).get("present"),
            None => Ok(false),
        }
    }

    /// See [`Dialect::REWORDED_MIGRATIONS`]. Only a row holding exactly the old checksum changes,
    /// so a migration whose SQL really differs is still refused by sqlx.
    async fn restamp_reworded_migrations(&self) -> Result<(), StoreError> {
        if !self.migrations_table_exists().await? {
            return Ok(());
        }
        for (version, old) in D::REWORDED_MIGRATIONS {
            let Some(current) = D::migrator().iter().find(|m| m.version == *version) else {
                continue;
            };
            let old = hex::decode(old).map_err(|e| StoreError::Other(e.to_string()))?;
            let mut sql = Sql::<D>::new("UPDATE _sqlx_migrations SET checksum = ");
            sql.bind(current.checksum.as_ref())
                .push(" WHERE version = ")
                .bind(*version)
                .push(" AND checksum = ")
                .bind(old.as_slice());
            sql.execute(self, "re-stamp a reworded migration").await?;
        }
        Ok(())
    }
}
