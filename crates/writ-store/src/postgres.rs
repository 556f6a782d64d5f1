//! The PostgreSQL audit store: [`PgStore`], its connection pool, and its [`Dialect`].
//!
//! The schema is `migrations/postgres`. Timestamps are `TIMESTAMPTZ` (microseconds), UUIDs native,
//! candidates and responses `JSONB`, file contents `BYTEA` in their own table. The statements are
//! shared with SQLite (see `store`).

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult, PgRow, PgSslMode};
use sqlx::{PgPool, Postgres, QueryBuilder};
use writ_core::StoreError;

use crate::dialect::{Dialect, Reads};
use crate::store::SqlStore;
use crate::url::{is_local_host, no_connection, sets_param, unusable_url};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

/// For reads (the group commit's writers have their own, `Dialect::WRITERS`). One per batch the
/// default in-flight limit admits (`WRIT_MAX_BATCHES_IN_FLIGHT`, 32): each batch
/// holds a connection only per statement or short transaction, so a full replica never waits long
/// for one. With the group commit's four and the progress events' one, a busy replica holds 37
/// (they open on demand): two fit in PostgreSQL's default 100 connections, three need a lower
/// in-flight limit or a higher `max_connections`. (With 10, 400
/// batches at once timed out in the pool: measured with `WRIT_LOAD_BATCHES=400` on the sibling
/// files test in tests/api/edges.rs.)
pub(crate) const DEFAULT_READERS: u32 = 32;
/// Short, so that a database that is down turns into a quick 503 and a red `/readyz`, not a
/// request hanging for the default 30 s.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// The audit store on PostgreSQL. Cheap to clone (the pool is shared).
pub type PgStore = SqlStore<Postgres>;

impl PgStore {
    /// Opens a pool on `database_url` and checks that one connection can be made.
    pub async fn connect(database_url: &str) -> Result<Self, StoreError> {
        Self::connect_with(database_url, DEFAULT_READERS).await
    }

    /// [`Self::connect`] with `readers` connections in the read pool.
    pub async fn connect_with(database_url: &str, readers: u32) -> Result<Self, StoreError> {
        let options = connect_options(database_url)?;
        crate::probe::<sqlx::PgConnection>(&options, ACQUIRE_TIMEOUT)
            .await
            .map_err(|cause| {
                no_connection("cannot connect to PostgreSQL at", database_url, &cause)
            })?;
        Self::connect_lazy(options, readers)
    }
}

/// How writ connects to `database_url`: every connection of a store, and the advisory-lock
/// session of [`crate::locks::AdvisoryLocks`], the same way.
pub(crate) fn connect_options(database_url: &str) -> Result<PgConnectOptions, StoreError> {
    let mut options = PgConnectOptions::from_str(database_url)
        .map_err(|err| unusable_url("PostgreSQL", database_url, err))?
        .application_name("writ")
        // Every listing writ makes is a newest-first page walked along an index. Without
        // fresh statistics (a new database, autovacuum off) the planner prefers a bitmap
        // scan that reads every matching row and sorts them: measured as most of
        // PostgreSQL's CPU under load, growing with the table.
        .options([("enable_bitmapscan", "off")]);
    // TLS to a server on this machine protects nothing, and costs a handshake per connection
    // and CPU on every round trip (a tenth of a batch's overhead on loopback). Unless the
    // URL or PGSSLMODE asks for a mode, a local server is spoken to in clear; any other host
    // keeps the driver's default (`prefer`).
    if !sets_param(database_url, "sslmode")
        && std::env::var_os("PGSSLMODE").is_none()
        && is_local_host(options.get_host())
    {
        options = options.ssl_mode(PgSslMode::Disable);
    }
    Ok(options)
}

impl PgStore {
    fn connect_lazy(options: PgConnectOptions, readers: u32) -> Result<Self, StoreError> {
        // Lazy: the probe has just shown the server answers, and connections open on demand.
        let writers: PgPool = crate::writer_pool_options(Postgres::WRITERS as u32, ACQUIRE_TIMEOUT)
            .connect_lazy_with(options.clone());
        // Progress events are written in bursts by one task per process and hold nothing up: no
        // answer, file or record waits for them, so their commits need not wait for the WAL
        // flush either. On one disk, each such flush queued beside the pending records' and the
        // files' syncs, on a batch's critical path (eight per five-file batch at a low rate). A
        // later synchronous commit (every batch's closing) flushes them anyway; a database crash
        // can lose the last fraction of a second of progress, never a record.
        let progress: PgPool = crate::writer_pool_options(1, ACQUIRE_TIMEOUT)
            .connect_lazy_with(options.clone().options([("synchronous_commit", "off")]));
        let pool: PgPool = PgPoolOptions::new()
            .max_connections(readers.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        Ok(Self::from_pools(pool, writers).with_progress_pool(progress))
    }
}

impl Dialect for Postgres {
    const SINGLE_PROCESS: bool = false;
    // Replicas claiming jobs together skip the rows another claim holds.
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    // A few, so one slow transaction (a large file's content) does not hold up the others;
    // PostgreSQL flushes concurrent commits together anyway.
    const WRITABLE_CTES: bool = true;
    const WRITERS: usize = 4;
    const BACKEND: &'static str = "postgres";
    const BEGIN_WRITE: &'static str = "BEGIN";
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const FOR_SHARE: &'static str = " FOR SHARE";
    const EXPLAIN: &'static str = "EXPLAIN ";
    const PLAN_COLUMN: &'static str = "QUERY PLAN";
    const MIGRATIONS_TABLE_EXISTS: &'static str =
        "SELECT to_regclass('_sqlx_migrations') IS NOT NULL AS present";

    const REWORDED_MIGRATIONS: &'static [(i64, &'static str)] = &[(
        2,
        "0c0f9f7f485bb7c064852d4a774d980e00e0232b41b4efa4459cb53829b30cb0631f0f786834151e5a85918532fd39f8",
    )];

    fn migrator() -> &'static Migrator {
        &MIGRATOR
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn bind_time(query: &mut QueryBuilder<Self>, at: Option<DateTime<Utc>>) {
        query.push_bind(at);
    }

    fn read_time(row: &PgRow, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        <Self as Reads<Option<DateTime<Utc>>>>::read_value(row, column)
    }
}
