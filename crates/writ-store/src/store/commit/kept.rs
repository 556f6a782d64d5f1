//! The connection each group-commit writer (and the progress writer) keeps from one commit to
//! the next, and the work it does on it.

use std::time::Instant;

use sqlx::Pool;
use sqlx::pool::PoolConnection;
use writ_core::StoreError;
use writ_core::audit::AuditWrite;
use writ_core::jobs::JobEvent;

use super::statements::transaction;
use crate::CHECK_IDLE_AFTER;
use crate::dialect::Dialect;
use crate::error::from_sqlx;
use crate::store::Sql;
use crate::store::jobs::statements::push_insert_events;

/// Whether a commit's connection is checked with a round trip before use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lend {
    AsIs,
    Checked,
}

/// A writer's connection, kept from one commit to the next. sqlx checks every connection handed
/// back to its pool with a round trip (a `Sync` and its answer) before lending it again: for a
/// one-statement commit, a second round trip — wake-ups and CPU on the server and in this
/// process — after every commit. A writer that keeps its connection skips it; the connection
/// goes back to the pool (and its checks) only after sitting idle (`CHECK_IDLE_AFTER`, as the
/// writer pools check it on lending), after a failed commit, or if the future using it is
/// dropped midway.
pub(crate) struct Kept<D: Dialect> {
    pool: Pool<D>,
    /// `false`: every commit takes a connection from the pool and hands it back.
    keep: bool,
    conn: Option<(PoolConnection<D>, Instant)>,
}

impl<D: Dialect> Kept<D> {
    pub(crate) fn new(pool: Pool<D>, keep: bool) -> Self {
        Kept {
            pool,
            keep,
            conn: None,
        }
    }

    #[cfg(test)]
    pub(crate) fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Does `work` on the writer's connection and, if the store was unavailable, once more on a
    /// connection checked open: the kept one may have been closed by a server restart since its
    /// last use; if the server is really gone, the second attempt fails the same way. A
    /// connection that failed so is closed; one whose work failed otherwise is handed back.
    pub(crate) async fn run(&mut self, work: Work<'_>) -> Result<(), StoreError> {
        let mut conn = self.take(Lend::AsIs).await?;
        let outcome = match work.on::<D>(&mut conn).await {
            Err(StoreError::Unavailable(_)) => {
                conn.close_on_drop();
                drop(conn);
                conn = self.take(Lend::Checked).await?;
                work.on::<D>(&mut conn).await
            }
            outcome => outcome,
        };
        match &outcome {
            Ok(()) if self.keep => self.conn = Some((conn, Instant::now())),
            Err(StoreError::Unavailable(_)) => conn.close_on_drop(),
            // Back to the pool, whose check on the way in also sends what a failed transaction
            // left queued (its `ROLLBACK`): kept, it would wait for the next commit, holding the
            // failed transaction's locks until then.
            _ => {}
        }
        outcome
    }

    /// The kept connection if it has not sat idle too long, else one from the pool (pinged
    /// first when `lend` asks). Taken out while in use, so a use that is dropped midway leaves
    /// nothing half-read behind to be kept.
    async fn take(&mut self, lend: Lend) -> Result<PoolConnection<D>, StoreError> {
        if let Some((conn, used)) = self.conn.take()
            && lend == Lend::AsIs
            && used.elapsed() < CHECK_IDLE_AFTER
        {
            return Ok(conn);
        }
        connection(&self.pool, lend).await
    }
}

/// What a writer does on its connection.
#[derive(Clone, Copy)]
pub(crate) enum Work<'w> {
    /// Records, atomically ([`transaction`]).
    Records(&'w [&'w AuditWrite]),
    /// Progress events, in one statement.
    Events(&'w [JobEvent]),
}

impl Work<'_> {
    async fn on<D: Dialect>(self, conn: &mut D::Connection) -> Result<(), StoreError> {
        match self {
            Work::Records(writes) => transaction::<D>(conn, writes).await,
            Work::Events(events) => {
                let mut sql = Sql::<D>::new("");
                push_insert_events::<D>(&mut sql, events);
                sql.execute_on(conn, "store progress events")
                    .await
                    .map(|_| ())
            }
        }
    }
}

/// A connection from `pool`, pinged first when `lend` asks; one that does not answer is closed
/// and the next one tried.
async fn connection<D: Dialect>(
    pool: &Pool<D>,
    lend: Lend,
) -> Result<PoolConnection<D>, StoreError> {
    let acquire = || async {
        pool.acquire()
            .await
            .map_err(|err| from_sqlx("audit commit", err))
    };
    if let Lend::Checked = lend {
        for _ in 0..pool.options().get_max_connections() {
            let mut conn = acquire().await?;
            if sqlx::Connection::ping(&mut *conn).await.is_ok() {
                return Ok(conn);
            }
            conn.close_on_drop();
        }
    }
    acquire().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use futures::future::join_all;
    use uuid::Uuid;
    use writ_core::audit::{AuditLog, AuditWrite, NewRequest};
    use writ_core::jobs::{JobEvent, JobStore};

    use crate::testing::{fresh_postgres_url, fresh_sqlite_url};
    use crate::{Dialect, PgStore, SqlStore, SqliteStore};

    fn request() -> NewRequest {
        NewRequest {
            id: Uuid::now_v7(),
            received_at: Utc::now(),
            route: "POST /write_codebase".into(),
            caller: None,
            scope: None,
            idempotency_key: None,
            body_sha256: None,
            workspace: "default".into(),
        }
    }

    /// Commits one after another, then many at once (so that several writers open connections).
    async fn commit_some<D: Dialect>(store: &SqlStore<D>) {
        for _ in 0..10 {
            store.insert_request(&request()).await.unwrap();
        }
        let requests: Vec<NewRequest> = (0..40).map(|_| request()).collect();
        for done in join_all(requests.iter().map(|r| store.insert_request(r))).await {
            done.unwrap();
        }
        // Long enough for a connection handed back to the pool to be checked and idle there.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    /// Every connection the writers opened is still held by a writer, none idle in their pool:
    /// one handed back would cost a round trip (sqlx's check) after every commit.
    async fn assert_writers_keep_their_connections<D: Dialect>(store: &SqlStore<D>) {
        commit_some(store).await;
        let pool = store.writer.pool();
        assert!(pool.size() >= 1, "the writers opened no connection");
        assert_eq!(
            pool.num_idle(),
            0,
            "{} of the writers' {} connections went back to the pool",
            pool.num_idle(),
            pool.size()
        );
    }

    #[tokio::test]
    async fn postgres_writers_keep_their_connections_between_commits() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        assert_writers_keep_their_connections(&store).await;
    }

    #[tokio::test]
    async fn sqlite_writer_keeps_its_connection_between_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::connect(&fresh_sqlite_url(dir.path()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        assert_writers_keep_their_connections(&store).await;
    }

    /// An in-memory SQLite database's writer shares the reads' pool: there it must hand its
    /// connection back, or a writer per connection would leave the reads none.
    #[tokio::test]
    async fn a_writer_sharing_the_reads_pool_hands_its_connection_back() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        store.migrate().await.unwrap();
        commit_some(&store).await;
        let pool = store.writer.pool();
        assert_eq!(pool.num_idle(), pool.size() as usize);
    }

    /// A transaction that failed (two inserts of one request: the second's conflict) leaves no
    /// connection idle in it: kept, the connection would hold its `ROLLBACK` until the next
    /// commit, and the first insert's lock with it.
    #[tokio::test]
    async fn postgres_a_failed_commit_leaves_no_transaction_open() {
        let url = fresh_postgres_url().await;
        let db = url.rsplit('/').next().unwrap().to_owned();
        let store = PgStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let req = request();
        let twice = vec![
            AuditWrite::InsertRequest(req.clone()),
            AuditWrite::InsertRequest(req.clone()),
        ];
        assert!(store.commit(twice).await.is_err());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state LIKE 'idle in transaction%'",
        )
        .bind(&db)
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(open, 0, "a failed transaction was left open");
        tokio::time::timeout(Duration::from_secs(5), store.insert_request(&req))
            .await
            .expect("the request's row is still locked")
            .unwrap();
    }

    /// The progress events' one connection is kept too.
    #[tokio::test]
    async fn postgres_progress_events_keep_their_connection() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        let job = Uuid::now_v7();
        for seq in 1..=5 {
            let event = JobEvent {
                job_id: job,
                seq,
                created_at: Utc::now(),
                name: "file_started".into(),
                data: serde_json::json!({ "seq": seq }),
            };
            store.append_job_events(&[event]).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let progress = store
            .progress
            .clone()
            .expect("PostgreSQL stores events apart");
        let kept = progress.lock().await;
        assert_eq!((kept.pool().size(), kept.pool().num_idle()), (1, 0));
    }
}
