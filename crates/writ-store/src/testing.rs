//! Fresh databases for tests — this crate's conformance suite and other crates' integration tests.
//!
//! Always compiled (not behind `cfg(test)`) so that other crates' tests can use it; nothing in the
//! service calls it.
//!
//! PostgreSQL tests never skip: if the server is unreachable, [`fresh_postgres_url`] panics with a
//! message saying what to set, because a suite that silently passes without its database is worse
//! than one that fails.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, Connection};
use uuid::Uuid;

use crate::url::{redact_url, with_database};

/// Environment variable naming the PostgreSQL server tests create their databases on; the URL
/// must name a database the user can connect to (`postgres`) and the user needs `CREATEDB`.
pub const PG_URL_ENV: &str = "WRIT_TEST_PG_URL";
/// Used when [`PG_URL_ENV`] is unset: a local server with trust authentication.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// Environment variable with the prefix of test database names (so they can be found and dropped).
pub const DB_PREFIX_ENV: &str = "WRIT_TEST_DB_PREFIX";
/// Used when [`DB_PREFIX_ENV`] is unset.
pub const DEFAULT_DB_PREFIX: &str = "writ_test";

/// Creates an empty PostgreSQL database named `{prefix}_{uuid}` and returns its URL.
///
/// # Panics
/// If the server cannot be reached, the database cannot be created, or the prefix is not a plain
/// lower-case identifier.
pub async fn fresh_postgres_url() -> String {
    let admin_url = std::env::var(PG_URL_ENV).unwrap_or_else(|_| DEFAULT_PG_URL.to_owned());
    let prefix = std::env::var(DB_PREFIX_ENV).unwrap_or_else(|_| DEFAULT_DB_PREFIX.to_owned());
    // The name is spliced into CREATE DATABASE (identifiers cannot be bound), so only characters
    // that need no quoting are allowed; 30 keeps the name within PostgreSQL's 63-byte limit.
    let prefix_ok = !prefix.is_empty()
        && prefix.len() <= 30
        && prefix.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !prefix_ok {
        panic!(
            "{DB_PREFIX_ENV}={prefix:?} must be 1-30 characters of [a-z0-9_], not starting with a digit"
        );
    }
    let name = format!("{prefix}_{}", Uuid::now_v7().simple());

    let options = PgConnectOptions::from_str(&admin_url).unwrap_or_else(|err| {
        panic!(
            "{PG_URL_ENV}={} is not a PostgreSQL URL: {err}",
            redact_url(&admin_url)
        )
    });
    let mut admin = match tokio::time::timeout(
        Duration::from_secs(10),
        PgConnection::connect_with(&options),
    )
    .await
    {
        Ok(Ok(connection)) => connection,
        Ok(Err(err)) => panic!(
            "PostgreSQL is unreachable at {} ({err}); PostgreSQL tests do not skip. Start the server \
             or set {PG_URL_ENV} to a reachable admin URL.",
            redact_url(&admin_url)
        ),
        Err(_) => panic!(
            "PostgreSQL at {} did not answer within 10 s; PostgreSQL tests do not skip. Start the \
             server or set {PG_URL_ENV} to a reachable admin URL.",
            redact_url(&admin_url)
        ),
    };
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "cannot create test database {name} at {}: {err}",
                redact_url(&admin_url)
            )
        });
    // The database exists whatever happens to this goodbye.
    drop(admin.close().await);
    with_database(&admin_url, &name)
}

/// Drops a database [`fresh_postgres_url`] made, given its URL, through the admin URL it was made
/// on. For callers that make many in one process (the benchmark makes one per row); test runs
/// drop theirs by prefix when they end.
pub async fn drop_postgres_database(url: &str) -> Result<(), String> {
    let name = PgConnectOptions::from_str(url)
        .map_err(|err| format!("{} is not a PostgreSQL URL: {err}", redact_url(url)))?
        .get_database()
        .map(str::to_owned)
        .ok_or_else(|| format!("{} names no database", redact_url(url)))?;
    // Spliced into the statement like the name `fresh_postgres_url` made: the same characters.
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!("{name:?} is not a database this module made"));
    }
    let admin_url = std::env::var(PG_URL_ENV).unwrap_or_else(|_| DEFAULT_PG_URL.to_owned());
    let options = PgConnectOptions::from_str(&admin_url)
        .map_err(|err| format!("{PG_URL_ENV}={}: {err}", redact_url(&admin_url)))?;
    let mut admin = PgConnection::connect_with(&options)
        .await
        .map_err(|err| format!("connecting to {}: {err}", redact_url(&admin_url)))?;
    let dropped = sqlx::query(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .map(drop)
    .map_err(|err| format!("dropping {name}: {err}"));
    drop(admin.close().await);
    dropped
}

/// A `sqlite://` URL for a database file (not yet created) inside `dir`, typically a
/// `tempfile::TempDir` the test keeps alive.
pub fn fresh_sqlite_url(dir: &Path) -> String {
    format!(
        "sqlite://{}",
        dir.join(format!("audit-{}.db", Uuid::now_v7().simple()))
            .display()
    )
}
