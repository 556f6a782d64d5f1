//! sqlx errors as [`StoreError`]s.
//!
//! The variant is what callers branch on: a unique violation is a [`StoreError::Conflict`] (a
//! replayed idempotency key), anything that says "the database is not there right now" is
//! [`StoreError::Unavailable`] (the HTTP layer answers 503 and `/readyz` goes red), the rest is
//! [`StoreError::Other`]. Messages name the statement and the database's primary message, never a
//! bound value: the audit log holds file contents and they must not surface in logs.

use sqlx::error::{DatabaseError, ErrorKind};
use sqlx::migrate::MigrateError;
use writ_core::StoreError;

/// Maps an error raised while running `what` (a short verb phrase such as `"insert operation"`).
pub(crate) fn from_sqlx(what: &str, err: sqlx::Error) -> StoreError {
    match err {
        sqlx::Error::Database(db) => from_database(what, db.as_ref()),
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(format!("{what}: {err}")),
        sqlx::Error::Migrate(migrate) => from_migrate(*migrate),
        other => StoreError::Other(format!("{what}: {other}")),
    }
}

pub(crate) fn from_migrate(err: MigrateError) -> StoreError {
    match err {
        MigrateError::Execute(err) => from_sqlx("run migrations", err),
        MigrateError::ExecuteMigration(err, version) => {
            from_sqlx(&format!("apply migration {version}"), err)
        }
        other => StoreError::Other(format!("migrations: {other}")),
    }
}

fn from_database(what: &str, db: &dyn DatabaseError) -> StoreError {
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    if db.kind() == ErrorKind::UniqueViolation {
        // PostgreSQL names the constraint; SQLite's message names the columns. Neither quotes the
        // duplicate value (PostgreSQL keeps that in DETAIL, which is not read here).
        let which = db.constraint().unwrap_or_else(|| db.message());
        return StoreError::Conflict(format!("{what}: unique constraint violated ({which})"));
    }
    let message = format!("{what}: {} (code {code})", db.message());
    let unavailable = if db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        is_unavailable_sqlstate(&code)
    } else {
        is_unavailable_sqlite_code(&code)
    };
    if unavailable {
        StoreError::Unavailable(message)
    } else {
        StoreError::Other(message)
    }
}

/// PostgreSQL SQLSTATEs that mean the server cannot serve anyone right now, rather than that this
/// statement is wrong: 08 connection exception, 53 insufficient resources (disk full, too many
/// connections), 57P shutdown / cannot connect now, 28 authentication (a rotated password takes
/// every new connection down), 3D000 the database is gone, 55000 the database refuses
/// connections (`ALLOW_CONNECTIONS false`: an operator took it out of service; writ's statements
/// raise 55000 for nothing else).
fn is_unavailable_sqlstate(code: &str) -> bool {
    ["08", "53", "57P", "28", "3D000", "55000"]
        .iter()
        .any(|prefix| code.starts_with(prefix))
}

/// SQLite extended result codes whose primary code (the low byte) means the file cannot be used
/// right now: 5 BUSY (the busy timeout ran out), 6 LOCKED, 10 IOERR, 13 FULL, 14 CANTOPEN.
fn is_unavailable_sqlite_code(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|extended| matches!(extended & 0xff, 5 | 6 | 10 | 13 | 14))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_connection_and_resource_states_are_unavailable() {
        for code in ["08006", "53100", "57P01", "28P01", "3D000", "55000"] {
            assert!(is_unavailable_sqlstate(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02", "22021"] {
            assert!(!is_unavailable_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn sqlite_busy_and_io_codes_are_unavailable() {
        for code in ["5", "517", "6", "10", "266", "13", "14"] {
            assert!(is_unavailable_sqlite_code(code), "{code}");
        }
        for code in ["1", "19", "2067", "1555"] {
            assert!(!is_unavailable_sqlite_code(code), "{code}");
        }
    }
}
