//! What the two backends do differently, and nothing else: the [`Dialect`] trait, implemented for
//! [`sqlx::Postgres`] in [`crate::postgres`] and for [`sqlx::Sqlite`] in [`crate::sqlite`].
//!
//! Everything the statements bind or read that both backends handle the same way (UUIDs, text,
//! integers, booleans, byte strings, JSON through sqlx's [`Json`]) is listed once as supertraits of
//! [`Dialect`], so the shared statements in `store` can be generic over the backend without
//! repeating sqlx's `Encode`/`Decode`/`Type` bounds at every function.

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use sqlx::migrate::{Migrate, Migrator};
use sqlx::types::Json;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, QueryBuilder, Row, Type,
};
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::CandidateRecord;

use crate::error::from_sqlx;

/// A boxed future, as sqlx's executors return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One backend's SQL dialect. Sealed: only PostgreSQL and SQLite implement it.
pub trait Dialect:
    Database<Connection: Migrate>
    + sealed::Sealed
    + Executes
    + for<'a> Binds<'a, Uuid>
    + for<'a> Binds<'a, i64>
    + for<'a> Binds<'a, f64>
    + for<'a> Binds<'a, Option<i64>>
    + for<'a> Binds<'a, bool>
    + for<'a> Binds<'a, Option<bool>>
    + for<'a> Binds<'a, &'a str>
    + for<'a> Binds<'a, Option<&'a str>>
    + for<'a> Binds<'a, &'a [u8]>
    + for<'a> Binds<'a, Option<&'a [u8]>>
    + for<'a> Binds<'a, Json<&'a serde_json::Value>>
    + for<'a> Binds<'a, Option<Json<&'a serde_json::Value>>>
    + for<'a> Binds<'a, Json<&'a [CandidateRecord]>>
    + for<'a> Binds<'a, Json<&'a [String]>>
    + Reads<Uuid>
    + Reads<String>
    + Reads<Option<String>>
    + Reads<i64>
    + Reads<f64>
    + Reads<Option<i64>>
    + Reads<bool>
    + Reads<Option<bool>>
    + Reads<Vec<u8>>
    + Reads<Option<Vec<u8>>>
    + Reads<Json<serde_json::Value>>
    + Reads<Option<Json<serde_json::Value>>>
    + Reads<Json<Vec<CandidateRecord>>>
    + Reads<Json<Vec<String>>>
{
    /// What [`writ_core::AuditLog::backend`] reports.
    const BACKEND: &'static str;
    /// Whether only one process may use a database at a time (SQLite's file and its locks belong
    /// to one host), for the coming `AuditLog::single_process`.
    const SINGLE_PROCESS: bool;
    /// Writer tasks committing record writes (see `store::commit`).
    const WRITERS: usize;
    /// Whether several writes can be one statement (`WITH w AS (INSERT …) UPDATE …`), which
    /// saves a round trip per write on a server.
    const WRITABLE_CTES: bool;
    /// Ends a `SELECT` whose rows a claim takes over, so concurrent claims on other replicas
    /// skip them instead of waiting or taking them twice (empty where one process writes).
    const SKIP_LOCKED: &'static str;
    /// Opens a transaction that will write.
    const BEGIN_WRITE: &'static str;
    /// Ends a `SELECT` of a row the transaction is about to change, so that a writer on another
    /// replica holding [`Self::FOR_SHARE`] on it is waited for (empty where one process writes:
    /// its transactions are serial).
    const FOR_UPDATE: &'static str;
    /// Ends a `SELECT` of a row another write depends on, so that the row cannot be deleted until
    /// the write commits, and one deleted meanwhile is not seen (empty where one process writes).
    const FOR_SHARE: &'static str;
    /// Put before a `SELECT` to get its plan instead of its rows.
    const EXPLAIN: &'static str;
    /// The column of [`Self::EXPLAIN`]'s rows that describes a step of the plan.
    const PLAN_COLUMN: &'static str;
    /// A one-row, one-column query: whether sqlx's `_sqlx_migrations` table exists.
    const MIGRATIONS_TABLE_EXISTS: &'static str;

    /// The schema for this backend (`migrations/<backend>` at the workspace root).
    fn migrator() -> &'static Migrator;

    /// Texts of a migration that some builds applied before it took its present text, as
    /// (version, SHA-384 hex). The builds of 2026-11-22 carried migration 0002 with a comment
    /// that spoke of the project's history rather than the product; it was reworded in place the
    /// next day, the SQL unchanged. Migrations are append-only since (`migrations/SHA384SUMS`
    /// pins them), and such a database is stamped with the present text's checksum instead of
    /// being refused at start-up.
    const REWORDED_MIGRATIONS: &'static [(i64, &'static str)];

    /// How many rows a write statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// Binds a point in time (or NULL) in this backend's representation.
    fn bind_time(query: &mut QueryBuilder<Self>, at: Option<DateTime<Utc>>);

    /// Reads back a point in time written by [`Self::bind_time`].
    fn read_time(row: &Self::Row, column: &str) -> Result<Option<DateTime<Utc>>, StoreError>;
}

/// A value `Self` can bind as a statement parameter. `'a` is how long the value's borrows last
/// (sqlx encodes the value into the arguments at once, so any will do).
pub trait Binds<'a, T: 'a>: Database {
    fn bind_value(query: &mut QueryBuilder<Self>, value: T);
}

impl<'a, DB, T> Binds<'a, T> for DB
where
    DB: Database,
    T: 'a + Encode<'a, DB> + Type<DB>,
{
    fn bind_value(query: &mut QueryBuilder<Self>, value: T) {
        query.push_bind(value);
    }
}

/// A value `Self` can read out of a row by column name.
pub trait Reads<T>: Database {
    fn read_value(row: &Self::Row, column: &str) -> Result<T, StoreError>;
}

impl<DB, T> Reads<T> for DB
where
    DB: Database,
    T: for<'r> Decode<'r, DB> + Type<DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
{
    fn read_value(row: &Self::Row, column: &str) -> Result<T, StoreError> {
        row.try_get(column)
            .map_err(|err| from_sqlx(&format!("read column {column}"), err))
    }
}

/// Runs a built statement on one connection. A trait with a blanket impl so that sqlx's
/// higher-ranked executor bound is written here once instead of on every generic function.
pub trait Executes: Database {
    fn execute<'e>(
        conn: &'e mut Self::Connection,
        query: &'e mut QueryBuilder<Self>,
    ) -> BoxFuture<'e, Result<Self::QueryResult, sqlx::Error>>;

    fn fetch_all<'e>(
        conn: &'e mut Self::Connection,
        query: &'e mut QueryBuilder<Self>,
    ) -> BoxFuture<'e, Result<Vec<Self::Row>, sqlx::Error>>;

    fn fetch_optional<'e>(
        conn: &'e mut Self::Connection,
        query: &'e mut QueryBuilder<Self>,
    ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>>;
}

impl<DB> Executes for DB
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    fn execute<'e>(
        conn: &'e mut Self::Connection,
        query: &'e mut QueryBuilder<Self>,
    ) -> BoxFuture<'e, Result<Self::QueryResult, sqlx::Error>> {
        conn.execute(query.build())
    }

    fn fetch_all<'e>(
        conn: &'e mut Self::Connection,
        query: &'e mut QueryBuilder<Self>,
    ) -> BoxFuture<'e, Result<Vec<Self::Row>, sqlx::Error>> {
        conn.fetch_all(query.build())
    }

    fn fetch_optional<'e>(
        conn: &'e mut Self::Connection,
        query: &'e mut QueryBuilder<Self>,
    ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>> {
        conn.fetch_optional(query.build())
    }
}

pub(crate) mod sealed {
    /// Keeps [`super::Dialect`] to the backends this crate has schemas for.
    pub trait Sealed {}
    impl Sealed for sqlx::Postgres {}
    impl Sealed for sqlx::Sqlite {}
}
