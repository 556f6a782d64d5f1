//! The SQLite audit store: [`SqliteStore`], its connection settings, and its [`Dialect`].
//!
//! The schema is `migrations/sqlite`. UUIDs are 16-byte BLOBs, timestamps INTEGER microseconds
//! since the epoch (numeric order is time order, and the precision matches PostgreSQL), JSON is
//! TEXT written by serde_json, file contents BLOBs in their own table. The statements are shared
//! with PostgreSQL (see `store`).
//!
//! Durability over speed: WAL with `synchronous=FULL`, so an acknowledged write survives a power
//! cut. Writers are serialised by SQLite; `busy_timeout` makes them queue instead of failing.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite};
use writ_core::StoreError;

use crate::dialect::{Dialect, Reads};
use crate::store::SqlStore;
use crate::url::{no_connection, unusable_url};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/sqlite");

/// WAL lets readers run beside the one writer; more connections than this only queue on the
/// write lock.
const MAX_CONNECTIONS: u32 = 4;
/// A writer waits this long for the write lock before the statement fails as unavailable.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// A little longer than [`BUSY_TIMEOUT`], so that a queue of writers reports the lock, not the pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(6);

/// The audit store on SQLite. Cheap to clone (the pool is shared).
pub type SqliteStore = SqlStore<Sqlite>;

impl SqliteStore {
    /// Opens (creating if missing) the database file named by `database_url` (`sqlite://path`,
    /// `sqlite:path`, or `sqlite::memory:`) and checks that one connection can be made.
    pub async fn connect(database_url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(database_url)
            .map_err(|err| unusable_url("SQLite", database_url, err))?;
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        crate::probe::<sqlx::SqliteConnection>(&options, ACQUIRE_TIMEOUT)
            .await
            .map_err(|cause| no_connection("cannot open SQLite database", database_url, &cause))?;
        let mut pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT);
        if is_in_memory(database_url) {
            // An in-memory database lives as long as one connection to it: never let the pool
            // close the last one (and the writer shares it: another pool would be another
            // database).
            pool = pool
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
            return Ok(Self::from_pool(pool.connect_lazy_with(options)));
        }
        let writer = crate::writer_pool_options(Sqlite::WRITERS as u32, ACQUIRE_TIMEOUT)
            .connect_lazy_with(options.clone());
        Ok(Self::from_pools(pool.connect_lazy_with(options), writer))
    }
}

fn is_in_memory(database_url: &str) -> bool {
    database_url.contains(":memory:") || database_url.contains("mode=memory")
}

impl Dialect for Sqlite {
    const SINGLE_PROCESS: bool = true;
    // One process: nothing else can hold the rows.
    const SKIP_LOCKED: &'static str = "";
    // The database file has one write lock: a second writer would only wait on it.
    const WRITABLE_CTES: bool = false;
    const WRITERS: usize = 1;
    const BACKEND: &'static str = "sqlite";
    /// Takes the write lock at `BEGIN`: a deferred transaction that reads first cannot wait for
    /// the lock later (SQLite answers `SQLITE_BUSY` at once to avoid a deadlock).
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    // Writes are serial (one write lock), and a write transaction takes it at BEGIN.
    const FOR_UPDATE: &'static str = "";
    const FOR_SHARE: &'static str = "";
    const EXPLAIN: &'static str = "EXPLAIN QUERY PLAN ";
    const PLAN_COLUMN: &'static str = "detail";
    const MIGRATIONS_TABLE_EXISTS: &'static str = "SELECT EXISTS (SELECT 1 FROM sqlite_master \
         WHERE type = 'table' AND name = '_sqlx_migrations') AS present";

    const REWORDED_MIGRATIONS: &'static [(i64, &'static str)] = &[(
        2,
        "5fdce9c296aef719a1cb9eefb165881c0a075d11eba869248fe43a1247e92d59686306e76fc19ee32c5fe1ebfc8d0355",
    )];

    fn migrator() -> &'static Migrator {
        &MIGRATOR
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    /// INTEGER microseconds since the epoch.
    fn bind_time(query: &mut QueryBuilder<Self>, at: Option<DateTime<Utc>>) {
        query.push_bind(at.map(|at| at.timestamp_micros()));
    }

    fn read_time(row: &SqliteRow, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        <Self as Reads<Option<i64>>>::read_value(row, column)?
            .map(|micros| {
                DateTime::from_timestamp_micros(micros).ok_or_else(|| {
                    StoreError::Other(format!("column {column}: timestamp out of range"))
                })
            })
            .transpose()
    }
}
