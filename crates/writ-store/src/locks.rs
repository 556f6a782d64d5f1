//! Path locks shared by replicas: PostgreSQL session advisory locks keyed by
//! `hashtextextended(key, 0)`, so that writers of one path on different replicas (one
//! `REPO_DIR`, one database) are serialised.
//!
//! Session locks, not `pg_advisory_xact_lock`: a path is held across its write's stages (the
//! pending record's commit, the staged file's sync, the rename), which are not one transaction.
//! All of a process's locks live on one connection of their own (`application_name`
//! `writ-path-locks`) and are only ever tried (`pg_try_advisory_lock`), never waited for on the
//! server, so one path another replica holds does not hold up this process's other paths: a
//! refused try is retried after a short pause. Within the process a path is asked for at most
//! once at a time (the workspace's own lock is taken first), so the session's re-entrant counts
//! never pile up. A lock is given back by a task that sends every release queued meanwhile in one
//! statement.
//!
//! If the session's connection drops (the server restarts, an operator terminates the backend,
//! the network fails), the server releases its locks at once, and another replica may take them
//! while this one's guards are still held. So each connection of the session has a generation,
//! bumped whenever one is given up after an error; a guard remembers the generation it was
//! taken under, and [`HeldLock::still_held`] — asked by a write just before it publishes —
//! is false once that generation is gone. A drop nobody has noticed yet is found by the same
//! check: unless the session answered a statement sent after the check was asked, the check
//! sends one (`SELECT 1`; concurrent checks share it), and its failure ends the generation. A
//! write whose lock is lost is failed with nothing published; the next lock opens a new session.
//! What stays is the moment between the check and the rename, a few microseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::{Mutex, MutexGuard, mpsc};
use tokio::time::Instant;
use writ_core::StoreError;
use writ_core::workspace::{HeldLock, SharedLock, SharedLocks};

use crate::error::from_sqlx;

/// The longest pause between two tries of a path another replica holds.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// How the session names itself in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "writ-path-locks";

/// One process's advisory-lock session.
#[derive(Clone)]
pub struct AdvisoryLocks {
    inner: Arc<Inner>,
}

struct Inner {
    options: PgConnectOptions,
    session: Mutex<Session>,
    /// The generation of the session's connection: bumped (under the session's lock) each time
    /// a connection is given up, so that a guard taken on it reads as lost without asking.
    generation: AtomicU64,
    releases: mpsc::UnboundedSender<Release>,
}

/// A lock to give back, and the generation of the connection that took it: one taken on a
/// connection since given up was released by the server, and the same key may by now be held
/// again on the new connection, which a late release must not undo.
struct Release {
    key: String,
    generation: u64,
}

struct Session {
    /// `None` until first used, and again after an error (the next lock reconnects).
    conn: Option<PgConnection>,
    /// When the last statement the connection answered was sent: it was alive then.
    alive_at: Option<Instant>,
}

impl Session {
    /// Gives the connection up after an error: every lock taken on it is gone with it.
    fn lose(&mut self, generation: &AtomicU64) {
        self.conn = None;
        self.alive_at = None;
        generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for AdvisoryLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdvisoryLocks")
    }
}

/// Held until dropped; dropping it queues the release.
struct Held {
    key: Option<String>,
    generation: u64,
    inner: Arc<Inner>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // The release task ends only with the process.
            let _ = self.inner.releases.send(Release {
                key,
                generation: self.generation,
            });
        }
    }
}

#[async_trait]
impl HeldLock for Held {
    async fn still_held(&self) -> bool {
        let inner = &self.inner;
        if inner.generation.load(Ordering::SeqCst) != self.generation {
            return false;
        }
        let asked = Instant::now();
        let mut session = inner.session.lock().await;
        if inner.generation.load(Ordering::SeqCst) != self.generation {
            return false;
        }
        if session.alive_at.is_some_and(|at| at >= asked) {
            return true;
        }
        let sent = Instant::now();
        let Some(conn) = session.conn.as_mut() else {
            return false;
        };
        match sqlx::query("SELECT 1").execute(&mut *conn).await {
            Ok(_) => {
                session.alive_at = Some(sent);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the advisory-lock session dropped; the path locks it held are lost");
                session.lose(&inner.generation);
                false
            }
        }
    }
}

impl AdvisoryLocks {
    /// The locks of `database_url`'s PostgreSQL; the session connects on first use. Must be
    /// called within a Tokio runtime (the release task starts here).
    pub fn connect(database_url: &str) -> Result<Self, StoreError> {
        let options =
            crate::postgres::connect_options(database_url)?.application_name(APPLICATION_NAME);
        let (releases, queued) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            options,
            session: Mutex::new(Session {
                conn: None,
                alive_at: None,
            }),
            generation: AtomicU64::new(0),
            releases,
        });
        tokio::spawn(release_queued(Arc::downgrade(&inner), queued));
        Ok(AdvisoryLocks { inner })
    }

    /// One try: the generation under which `key` is now held by this session, `None` if
    /// another session holds it.
    async fn try_lock(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let mut session = self.inner.session.lock().await;
        let conn = connected(&mut session, &self.inner.options).await?;
        let sent = Instant::now();
        let got =
            sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
                .bind(key)
                .fetch_one(&mut *conn)
                .await;
        match got {
            Ok(got) => {
                session.alive_at = Some(sent);
                Ok(got.then(|| self.inner.generation.load(Ordering::SeqCst)))
            }
            Err(e) => {
                session.lose(&self.inner.generation);
                Err(from_sqlx("take an advisory lock", e))
            }
        }
    }
}

/// The session's connection, opened if it has none.
async fn connected<'s>(
    session: &'s mut MutexGuard<'_, Session>,
    options: &PgConnectOptions,
) -> Result<&'s mut PgConnection, StoreError> {
    if session.conn.is_none() {
        let conn = PgConnection::connect_with(options)
            .await
            .map_err(|e| from_sqlx("open the advisory-lock session", e))?;
        session.conn = Some(conn);
    }
    session
        .conn
        .as_mut()
        .ok_or_else(|| StoreError::Other("the advisory-lock session is missing".into()))
}

#[async_trait]
impl SharedLocks for AdvisoryLocks {
    async fn lock(&self, key: &str) -> Result<SharedLock, StoreError> {
        let mut pause = Duration::from_millis(1);
        let generation = loop {
            if let Some(generation) = self.try_lock(key).await? {
                break generation;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        };
        Ok(Box::new(Held {
            key: Some(key.to_string()),
            generation,
            inner: self.inner.clone(),
        }))
    }
}

/// Gives back every lock whose guard was dropped, those queued together in one statement, on
/// the session that took them.
async fn release_queued(
    inner: std::sync::Weak<Inner>,
    mut queued: mpsc::UnboundedReceiver<Release>,
) {
    while let Some(first) = queued.recv().await {
        let mut all = vec![first];
        while let Ok(release) = queued.try_recv() {
            all.push(release);
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut session = inner.session.lock().await;
        let current = inner.generation.load(Ordering::SeqCst);
        // Taken on a connection since given up: the server released them with it.
        let keys: Vec<String> = all
            .into_iter()
            .filter(|r| r.generation == current)
            .map(|r| r.key)
            .collect();
        let Some(conn) = session.conn.as_mut() else {
            continue;
        };
        if keys.is_empty() {
            continue;
        }
        let sent = Instant::now();
        let released = sqlx::query(
            "SELECT pg_advisory_unlock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k",
        )
        .bind(&keys)
        .execute(&mut *conn)
        .await;
        match released {
            Ok(_) => session.alive_at = Some(sent),
            Err(e) => {
                tracing::warn!(locks = keys.len(), error = %e, "releasing advisory locks failed; reconnecting, which releases them");
                if let Some(conn) = session.conn.take() {
                    drop(conn.close().await);
                }
                session.lose(&inner.generation);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fresh_postgres_url;
    use writ_core::AuditLog;
    use writ_core::audit::{FileKind, OperationFilter, OperationStatus};
    use writ_core::files::{Provenance, WriteError, WriteMode, WriteSpec, recorded_write};

    /// Ends `url`'s advisory-lock session from the server side, as an operator or a failover
    /// would: `pg_terminate_backend` on the backend `pg_stat_activity` names.
    async fn terminate_lock_session(url: &str) {
        let mut admin = PgConnection::connect(url).await.unwrap();
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = $1",
        )
        .bind(APPLICATION_NAME)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert_eq!(ended, vec![true], "one lock session to end");
    }

    #[tokio::test]
    async fn a_lock_whose_session_was_terminated_reads_lost_and_the_next_lock_reconnects() {
        let url = fresh_postgres_url().await;
        let one = AdvisoryLocks::connect(&url).unwrap();
        let other = AdvisoryLocks::connect(&url).unwrap();
        let held = one.lock("writ:path:a.txt").await.unwrap();
        assert!(held.still_held().await);
        // Both sessions exist; end only `one`'s.
        drop(other.lock("writ:path:z.txt").await.unwrap());
        let mut admin = PgConnection::connect(&url).await.unwrap();
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = $1 ORDER BY backend_start LIMIT 1",
        )
        .bind(APPLICATION_NAME)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        sqlx::query("SELECT pg_terminate_backend($1, 5000)")
            .bind(pids[0])
            .execute(&mut admin)
            .await
            .unwrap();

        assert!(
            !held.still_held().await,
            "the guard reports the lock it lost"
        );
        // The server let go of it: the other process takes it at once.
        let theirs = tokio::time::timeout(Duration::from_secs(5), other.lock("writ:path:a.txt"))
            .await
            .expect("the lost lock is free on the server")
            .unwrap();
        drop(theirs);
        // A new lock on the same process opens a new session and holds.
        let again = one.lock("writ:path:a.txt").await.unwrap();
        assert!(again.still_held().await);
        // The lost guard's late release does not undo the lock taken since.
        drop(held);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused =
            tokio::time::timeout(Duration::from_millis(300), other.lock("writ:path:a.txt")).await;
        assert!(refused.is_err(), "the key is still held by the new session");
        assert!(again.still_held().await);
    }

    /// Takes each lock through `locks`, then has its session terminated: the drop a write cannot
    /// see coming, between taking its lock and publishing.
    #[derive(Debug)]
    struct SessionEndsAfterLocking {
        locks: AdvisoryLocks,
        url: String,
    }

    #[async_trait]
    impl SharedLocks for SessionEndsAfterLocking {
        async fn lock(&self, key: &str) -> Result<SharedLock, StoreError> {
            let held = self.locks.lock(key).await?;
            terminate_lock_session(&self.url).await;
            Ok(held)
        }
    }

    #[tokio::test]
    async fn a_write_whose_lock_was_lost_publishes_nothing_and_its_record_says_why() {
        let url = fresh_postgres_url().await;
        let store = crate::PgStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let locks = AdvisoryLocks::connect(&url).unwrap();
        let losing = writ_workspace::RepoWorkspace::open(dir.path())
            .await
            .unwrap()
            .with_shared_locks(Arc::new(SessionEndsAfterLocking {
                locks: locks.clone(),
                url: url.clone(),
            }));
        let spec = WriteSpec {
            path: writ_core::RepoPath::parse("lost.txt").unwrap(),
            content: b"unprotected".to_vec(),
            mode: WriteMode::Overwrite,
            expected_sha256: None,
            create_dirs: false,
        };
        let request = uuid::Uuid::now_v7();

        let refused = recorded_write(
            &store,
            &losing,
            request,
            FileKind::Direct,
            spec.clone(),
            Provenance::default(),
        )
        .await;

        match refused {
            Err(WriteError::LockLost { path }) => assert_eq!(path, "lost.txt"),
            other => panic!("expected the lost lock to refuse the write: {other:?}"),
        }
        assert!(!dir.path().join("lost.txt").exists(), "nothing published");
        let recorded = store
            .list_operations(
                &OperationFilter {
                    request_id: Some(request),
                    ..OperationFilter::default()
                },
                None,
                10,
            )
            .await
            .unwrap()
            .operations;
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].status, OperationStatus::Failed);
        assert!(
            recorded[0]
                .error
                .as_deref()
                .unwrap()
                .contains("is not held"),
            "{:?}",
            recorded[0].error
        );

        // The same process's next write takes its lock on a new session and lands.
        let holding = writ_workspace::RepoWorkspace::open(dir.path())
            .await
            .unwrap()
            .with_shared_locks(Arc::new(locks));
        recorded_write(
            &store,
            &holding,
            uuid::Uuid::now_v7(),
            FileKind::Direct,
            spec,
            Provenance::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("lost.txt")).unwrap(),
            b"unprotected"
        );
    }

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
