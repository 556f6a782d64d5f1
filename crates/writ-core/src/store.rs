//! What every store port shares: the error it answers with. Each domain's records have a port
//! of their own (the audit log in [`crate::audit`], jobs in [`crate::jobs`], keys, write sessions,
//! workspaces); `writ-store` implements them all for PostgreSQL and SQLite.

/// Why a store could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or refused the statement for reasons outside the caller.
    #[error("audit store unavailable: {0}")]
    Unavailable(String),
    /// A unique key (idempotency key, id) already exists.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A cursor the store did not issue.
    #[error("invalid cursor")]
    InvalidCursor,
    #[error("audit store error: {0}")]
    Other(String),
}
