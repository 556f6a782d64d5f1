//! The audit store: the PostgreSQL and SQLite implementations of [`writ_core::AuditStore`].
//!
//! - [`connect`] picks the backend from `DATABASE_URL` at start-up and hands back the trait object
//!   the rest of writ talks to; nothing outside this crate names a backend.
//! - `store` ([`SqlStore`]) holds every statement, written once with sqlx's `QueryBuilder` (which
//!   writes each backend's placeholders) and generic over the backend; it also states the store's
//!   one clock rule. Runtime queries only (no live database at build time), every value bound.
//! - `dialect` ([`Dialect`]) is what the backends do differently; [`postgres`] ([`PgStore`]) and
//!   [`sqlite`] ([`SqliteStore`]) implement it and own their connection settings.
//! - `error` turns sqlx errors into [`StoreError`] without ever quoting a bound value, and
//!   [`redact_url`] (in `url`, with the connection errors both backends share) keeps passwords out
//!   of every message.
//! - `listing` holds what both backends share about reading rows back: the column lists, the
//!   cursor format of the newest-first listing, and the decoding of enum columns.
//! - `store::keys` and `store::jobs`: [`writ_core::keys::KeyStore`] (API keys, hashed) and
//!   [`writ_core::jobs::JobStore`], for both backends.
//! - [`locks`] ([`AdvisoryLocks`], [`shared_locks`]): PostgreSQL advisory locks that serialise
//!   writers of one path across replicas.
//! - [`pg_limits`] ([`PgLimits`], [`shared_limits`]): per-key rate and batch limits in PostgreSQL,
//!   one for every replica.
//! - [`testing`] makes fresh databases for tests (this crate's and other crates').
//!
//! The schemas live in `migrations/postgres` and `migrations/sqlite` at the workspace root and are
//! embedded into the binary at compile time.

// First, so that its column-list macros are in scope for the statements.
#[macro_use]
mod listing;
mod dialect;
mod error;
pub mod locks;
pub mod pg_limits;
pub mod postgres;
pub mod sqlite;
mod store;
pub mod testing;
mod url;

use std::sync::Arc;
use std::time::Duration;

pub use dialect::Dialect;
pub use locks::AdvisoryLocks;
pub use pg_limits::PgLimits;
pub use postgres::PgStore;
pub use sqlite::SqliteStore;
pub use store::SqlStore;
pub use url::redact_url;
use writ_core::{AuditStore, StoreError};

/// Which implementation a `DATABASE_URL` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    /// Reads the scheme of `database_url`: `postgres://`, `postgresql://`, `sqlite://` or `sqlite:`.
    pub fn from_url(database_url: &str) -> Result<Self, StoreError> {
        let lower = database_url.trim_start().to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else if lower.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else {
            Err(StoreError::Other(format!(
                "DATABASE_URL must start with postgres://, postgresql://, sqlite:// or sqlite: ({})",
                url::describe_scheme(database_url)
            )))
        }
    }
}

/// Connects to the audit store named by `database_url` (the value of `DATABASE_URL`).
///
/// SQLite creates the file if it is missing. The connection is tried at once, so a database that
/// is down fails start-up with [`StoreError::Unavailable`] in a few seconds rather than at the
/// first write. The schema is not touched: call [`writ_core::AuditLog::migrate`] for that.
pub async fn connect(database_url: &str) -> Result<Arc<dyn AuditStore>, StoreError> {
    connect_for_batches(database_url, postgres::DEFAULT_READERS as usize).await
}

/// [`connect`] for a server that runs up to `batches_in_flight` batches at once: PostgreSQL's
/// read pool gets one connection per batch (a batch holds one only for a statement; the group
/// commit's writers have their own), between 4 and 64 so that a few replicas still fit in the
/// server's default 100 connections. SQLite's pool does not depend on it.
pub async fn connect_for_batches(
    database_url: &str,
    batches_in_flight: usize,
) -> Result<Arc<dyn AuditStore>, StoreError> {
    let readers = readers_for(batches_in_flight);
    let store: Arc<dyn AuditStore> = match Backend::from_url(database_url)? {
        Backend::Postgres => Arc::new(PgStore::connect_with(database_url, readers).await?),
        Backend::Sqlite => Arc::new(SqliteStore::connect(database_url).await?),
    };
    tracing::info!(backend = store.backend(), url = %redact_url(database_url), "audit store connected");
    Ok(store)
}

/// The locks replicas sharing `database_url` use to serialise writers of one path: PostgreSQL's
/// advisory locks; `None` for SQLite, which serves one process.
pub fn shared_locks(
    database_url: &str,
) -> Result<Option<Arc<dyn writ_core::workspace::SharedLocks>>, StoreError> {
    Ok(match Backend::from_url(database_url)? {
        Backend::Postgres => Some(Arc::new(AdvisoryLocks::connect(database_url)?)),
        Backend::Sqlite => None,
    })
}

/// The per-key limits replicas sharing `database_url` hold together; `None` for SQLite, whose
/// one process keeps them in memory.
pub fn shared_limits(
    database_url: &str,
) -> Result<Option<Arc<dyn writ_core::shared_limits::LimitStore>>, StoreError> {
    Ok(match Backend::from_url(database_url)? {
        Backend::Postgres => Some(Arc::new(PgLimits::connect(database_url)?)),
        Backend::Sqlite => None,
    })
}

/// PostgreSQL read connections for `batches_in_flight` batches at once (see [`connect_for_batches`]).
fn readers_for(batches_in_flight: usize) -> u32 {
    u32::try_from(batches_in_flight)
        .unwrap_or(u32::MAX)
        .clamp(4, 64)
}

/// Whether every up-migration `migrator` embeds is recorded as applied with the same checksum.
/// A checksum mismatch counts as "not migrated": the schema is not the one this build expects,
/// and [`writ_core::AuditLog::migrate`] would refuse to run. A text listed in `reworded` counts
/// (its SQL is the same, and `migrate` re-stamps it).
fn migrations_applied(
    migrator: &sqlx::migrate::Migrator,
    applied: &[(i64, Vec<u8>)],
    reworded: &[(i64, &str)],
) -> bool {
    migrator
        .iter()
        .filter(|migration| !migration.migration_type.is_down_migration())
        .all(|migration| {
            applied.iter().any(|(version, checksum)| {
                *version == migration.version
                    && (**checksum == *migration.checksum
                        || reworded
                            .iter()
                            .any(|(v, old)| v == version && hex::encode(checksum) == *old))
            })
        })
}

/// Opens and closes one connection, so that a database that is down is reported with its cause
/// ("connection refused", "password authentication failed") within `timeout`; a pool retries until
/// its acquire timeout and then only says that it timed out.
/// How long a pooled connection may sit idle and still be lent without a check.
pub(crate) const CHECK_IDLE_AFTER: Duration = Duration::from_secs(10);

/// Settings of the group commit's writer pools. sqlx checks every connection with a round trip
/// before lending it, which would double the round trips of a one-statement commit; a writer's
/// connection is checked only after sitting idle a while, and a commit that finds its connection
/// closed (a server restart in between) is made again on a checked one (`store::commit`).
fn writer_pool_options<DB: sqlx::Database>(
    max_connections: u32,
    acquire_timeout: Duration,
) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > CHECK_IDLE_AFTER {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

async fn probe<C: sqlx::Connection>(options: &C::Options, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, C::connect_with(options)).await {
        Ok(Ok(connection)) => {
            // The database answered; a failed goodbye on this throwaway connection changes nothing.
            drop(sqlx::Connection::close(connection).await);
            Ok(())
        }
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no connection within {} s", timeout.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_pool_follows_the_in_flight_limit_within_bounds() {
        assert_eq!(readers_for(32), 32);
        assert_eq!(readers_for(48), 48);
        assert_eq!(readers_for(1), 4);
        assert_eq!(readers_for(100_000), 64);
    }
}
