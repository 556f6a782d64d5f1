//! Per-path write locks: writers of one path queue behind each other within this process, and,
//! where replicas share `REPO_DIR` and a database, across processes too ([`SharedLocks`]: the
//! store's advisory locks, taken once the local lock is held, so each process asks for a path at
//! most once at a time). A shared lock that could not be taken, or was lost since, leaves the
//! [`PathLock`] reading not held, and the write under it publishes nothing.
//!
//! The table holds one async mutex per path that someone currently holds or waits for, and
//! nothing else: an entry that only the table itself references is dropped on the next call, so
//! the table never grows beyond the set of paths in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use writ_core::RepoPath;
use writ_core::workspace::{PathLock, SharedLocks};

#[derive(Debug, Default)]
pub(crate) struct PathLocks {
    /// A std mutex is enough: it is held only to look up or insert an entry, never across `.await`.
    table: Mutex<HashMap<RepoPath, Arc<tokio::sync::Mutex<()>>>>,
    /// Other processes' writers of the same `REPO_DIR`, where there are any.
    shared: Option<Arc<dyn SharedLocks>>,
}

/// What a shared lock is named: the workspace's own prefix, so that no other user of the
/// database's advisory locks collides with a path.
fn shared_key(path: &RepoPath) -> String {
    format!("writ:path:{}", path.as_str())
}

impl PathLocks {
    pub(crate) fn with_shared(mut self, shared: Arc<dyn SharedLocks>) -> Self {
        self.shared = Some(shared);
        self
    }

    pub(crate) async fn lock(&self, path: &RepoPath) -> PathLock {
        let entry = {
            // A panic while holding the table cannot leave it inconsistent (every update is a
            // single map operation), so a poisoned table is still usable.
            let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
            // Clones are made only under the table's lock, so a count of 1 means no holder, no
            // waiter, and no one about to become either.
            table.retain(|_, mutex| Arc::strong_count(mutex) > 1);
            Arc::clone(table.entry(path.clone()).or_default())
        };
        let local = entry.lock_owned().await;
        let Some(shared) = &self.shared else {
            return PathLock::local(local);
        };
        let held = match shared.lock(&shared_key(path)).await {
            Ok(held) => Some(held),
            // A write under this lock is refused before it publishes anything
            // ([`PathLock::still_held`]); reads and checks under it go ahead.
            Err(e) => {
                tracing::warn!(path = %path, error = %e, "the shared path lock could not be taken");
                None
            }
        };
        PathLock::across_processes(local, held)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(raw: &str) -> RepoPath {
        RepoPath::parse(raw).unwrap()
    }

    #[tokio::test]
    async fn released_paths_leave_the_table_on_the_next_lock() {
        let locks = PathLocks::default();
        for i in 0..100 {
            drop(locks.lock(&path(&format!("f{i}.txt"))).await);
        }
        let _held = locks.lock(&path("last.txt")).await;
        assert_eq!(locks.len(), 1);
    }

    #[tokio::test]
    async fn a_held_path_is_kept_and_makes_the_next_writer_wait() {
        let locks = Arc::new(PathLocks::default());
        let held = locks.lock(&path("a.txt")).await;
        drop(locks.lock(&path("b.txt")).await);

        let waiter = {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move { drop(locks.lock(&path("a.txt")).await) })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap();
        drop(locks.lock(&path("c.txt")).await);
        assert_eq!(locks.len(), 1);
    }
}
