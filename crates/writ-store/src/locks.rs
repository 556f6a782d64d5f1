//! Path locks shared by replicas: PostgreSQL session advisory locks keyed by
//! `hashtextextended(key, 0)`, so that writers of one path on different replicas (one
//! `REPO_DIR`, one database) are serialised.
//!
//! Session locks, not `pg_advisory_xact_lock`: a path is held across its write's stages (the
//! pending record's commit, the staged file's sync, the rename), which are not one transaction.
//! All of a process's locks live on one connection of their own and are only ever tried
//! (`pg_try_advisory_lock`), never waited for on the server, so one path another replica holds
//! does not hold up this process's other paths: a refused try is retried after a short pause.
//! Within the process a path is asked for at most once at a time (the workspace's own lock is
//! taken first), so the session's re-entrant counts never pile up. A lock is given back by a task
//! that sends every release queued meanwhile in one statement.
//!
//! If the session's connection drops, the server releases its locks at once; the guards still
//! held then no longer exclude another replica until their writes end. Each such write still
//! records its operation in that database before publishing, and reconciliation compares every
//! record with the disk.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::{Mutex, mpsc};
use writ_core::StoreError;
use writ_core::workspace::{SharedLock, SharedLocks};

use crate::error::from_sqlx;

/// The longest pause between two tries of a path another replica holds.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// One process's advisory-lock session.
#[derive(Clone)]
pub struct AdvisoryLocks {
    inner: Arc<Inner>,
}

struct Inner {
    options: PgConnectOptions,
    /// `None` until first used, and again after an error (the next use reconnects).
    session: Mutex<Option<PgConnection>>,
    releases: mpsc::UnboundedSender<String>,
}

impl std::fmt::Debug for AdvisoryLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdvisoryLocks")
    }
}

/// Held until dropped; dropping it queues the release.
struct Held {
    key: Option<String>,
    releases: mpsc::UnboundedSender<String>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // The release task ends only with the process.
            let _ = self.releases.send(key);
        }
    }
}

impl AdvisoryLocks {
    /// The locks of `database_url`'s PostgreSQL; the session connects on first use. Must be
    /// called within a Tokio runtime (the release task starts here).
    pub fn connect(database_url: &str) -> Result<Self, StoreError> {
        let options = crate::postgres::connect_options(database_url)?;
        let (releases, queued) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            options,
            session: Mutex::new(None),
            releases,
        });
        tokio::spawn(release_queued(Arc::downgrade(&inner), queued));
        Ok(AdvisoryLocks { inner })
    }

    /// One try: whether `key` is now held by this session.
    async fn try_lock(&self, key: &str) -> Result<bool, StoreError> {
        let mut session = self.inner.session.lock().await;
        let conn = match session.as_mut() {
            Some(conn) => conn,
            None => session.insert(
                PgConnection::connect_with(&self.inner.options)
                    .await
                    .map_err(|e| from_sqlx("open the advisory-lock session", e))?,
            ),
        };
        let got =
            sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
                .bind(key)
                .fetch_one(&mut *conn)
                .await;
        match got {
            Ok(got) => Ok(got),
            Err(e) => {
                *session = None;
                Err(from_sqlx("take an advisory lock", e))
            }
        }
    }
}

#[async_trait]
impl SharedLocks for AdvisoryLocks {
    async fn lock(&self, key: &str) -> Result<SharedLock, StoreError> {
        let mut pause = Duration::from_millis(1);
        while !self.try_lock(key).await? {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
        Ok(Box::new(Held {
            key: Some(key.to_string()),
            releases: self.inner.releases.clone(),
        }))
    }
}

/// Gives back every lock whose guard was dropped, those queued together in one statement, on
/// the session that took them.
async fn release_queued(
    inner: std::sync::Weak<Inner>,
    mut queued: mpsc::UnboundedReceiver<String>,
) {
    while let Some(first) = queued.recv().await {
        let mut keys = vec![first];
        while let Ok(key) = queued.try_recv() {
            keys.push(key);
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut session = inner.session.lock().await;
        // No session: it dropped, and the server released its locks with it.
        let Some(conn) = session.as_mut() else {
            continue;
        };
        let released = sqlx::query(
            "SELECT pg_advisory_unlock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k",
        )
        .bind(&keys)
        .execute(&mut *conn)
        .await;
        if let Err(e) = released {
            tracing::warn!(locks = keys.len(), error = %e, "releasing advisory locks failed; reconnecting, which releases them");
            if let Some(conn) = session.take() {
                drop(conn.close().await);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fresh_postgres_url;

    #[tokio::test]
    async fn a_key_held_by_one_process_waits_for_its_release_in_another() {
        let url = fresh_postgres_url().await;
        let one = AdvisoryLocks::connect(&url).unwrap();
        let other = AdvisoryLocks::connect(&url).unwrap();
        let held = one.lock("writ:path:a.txt").await.unwrap();
        // Another key is free.
        drop(other.lock("writ:path:b.txt").await.unwrap());
        let waiter = tokio::spawn(async move { other.lock("writ:path:a.txt").await.map(drop) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiter.is_finished(),
            "the other process waits while the key is held"
        );
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the release lets the other process in")
            .unwrap()
            .unwrap();
    }
}
