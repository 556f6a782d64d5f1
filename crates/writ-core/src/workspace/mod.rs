//! The workspace (`REPO_DIR`, every path confined beneath it) as the core sees it.
//!
//! Implementations must resolve every path beneath the root at open time (symlinks included),
//! write atomically and durably (temp file in the same directory, fsync, rename, fsync of the
//! directory), and never leave a temp file behind on failure.
//!
//! A write comes in two steps, [`Workspace::stage`] and [`StagedWrite::publish`], so that what
//! must be durable before a file changes (its audit record) can be committed while the file's
//! content is being made durable, instead of one after the other. Files written together are
//! staged together ([`Workspace::stage_all`]) and published together ([`StagedGroup::publish`]),
//! so that a directory they share is synced once, not once per file.

use std::path::Path;

use async_trait::async_trait;
use serde::Serialize;

use crate::path::RepoPath;
use crate::search::{MapFiles, MapQuery, SearchError, SearchQuery, SearchResults, Walk};

pub(crate) mod error;

pub use error::WorkspaceError;

/// Held while one path is being written; writers of one path queue on it: within this process,
/// and, where replicas share `REPO_DIR`, across them ([`SharedLocks`]). Dropping it releases both.
pub struct PathLock {
    // Declared first, so dropped first: the shared lock is let go (queued for release) before the
    // next writer in this process can take the local one.
    shared: SharedPart,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

/// The part of a [`PathLock`] that holds against other processes.
enum SharedPart {
    /// This process is the only writer of its `REPO_DIR`.
    ThisProcessOnly,
    Held(SharedLock),
    /// Other processes write the same `REPO_DIR`, but the shared lock could not be taken: a
    /// write under this lock must not be published.
    NotTaken,
}

impl PathLock {
    /// Where this process is the only writer of its `REPO_DIR`.
    pub fn local(local: tokio::sync::OwnedMutexGuard<()>) -> Self {
        PathLock {
            shared: SharedPart::ThisProcessOnly,
            _local: local,
        }
    }

    /// Where other processes write the same `REPO_DIR`: `shared` is the lock taken against them,
    /// `None` when it could not be taken.
    pub fn across_processes(
        local: tokio::sync::OwnedMutexGuard<()>,
        shared: Option<SharedLock>,
    ) -> Self {
        PathLock {
            shared: match shared {
                Some(held) => SharedPart::Held(held),
                None => SharedPart::NotTaken,
            },
            _local: local,
        }
    }

    /// Whether this lock still excludes every other writer of its path, asked just before a
    /// write is published: false once the shared lock was lost (its database session dropped,
    /// which released it on the server) or was never taken.
    pub async fn still_held(&self) -> bool {
        match &self.shared {
            SharedPart::ThisProcessOnly => true,
            SharedPart::Held(held) => held.still_held().await,
            SharedPart::NotTaken => false,
        }
    }
}

/// A lock held against other processes until dropped (whatever the implementation keeps to
/// release it).
pub type SharedLock = Box<dyn HeldLock>;

/// One lock of [`SharedLocks`], held until dropped.
#[async_trait]
pub trait HeldLock: Send + Sync {
    /// Whether the lock is still held: false once whatever held it (a database session) is
    /// gone, since other processes may then have taken it. Costs at most one round trip.
    async fn still_held(&self) -> bool;
}

/// Locks by name shared by every process of one deployment (replicas over one database and one
/// `REPO_DIR`), so that writers of one path on different replicas are serialised.
#[async_trait]
pub trait SharedLocks: Send + Sync + std::fmt::Debug {
    /// Waits until `key` is held by no other process, then holds it until the guard is dropped.
    /// An error means the lock could not be taken (the database is away).
    async fn lock(&self, key: &str) -> Result<SharedLock, crate::store::StoreError>;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DirEntry {
    pub name: String,
    pub size: u64,
    pub is_dir: bool,
}

/// A write whose content is durable but not yet visible ([`Workspace::stage`]). Dropped without
/// being published, it leaves nothing behind: no temp file, and no directory it created that is
/// still empty.
#[async_trait]
pub trait StagedWrite: Send {
    /// Puts the staged content in place of the target (one rename: readers see the old file or
    /// the new one, whole) and syncs the directories the write changed.
    async fn publish(self: Box<Self>) -> Result<(), WorkspaceError>;
}

/// Several writes staged in one step ([`Workspace::stage_all`]). Dropped without being
/// published, it discards every one of them.
#[async_trait]
pub trait StagedGroup: Send {
    /// Publishes every write that was staged, together (their renames, then each directory they
    /// changed synced once). One result per write, in the order they were staged; a write that
    /// could not be staged gives its staging error here.
    async fn publish(self: Box<Self>) -> Vec<Result<(), WorkspaceError>>;
}

/// One write of [`Workspace::stage_all`].
pub struct ToStage<'a> {
    pub path: &'a RepoPath,
    pub content: &'a [u8],
    pub create_dirs: bool,
}

#[async_trait]
pub trait Workspace: Send + Sync + 'static {
    /// Absolute path of `REPO_DIR`, for reports (`write_path`).
    fn root(&self) -> &Path;

    /// The workspace's name, recorded on every request, operation and job made in it so that
    /// listings can be filtered by it and a restart reconciles a write in the right directory.
    fn name(&self) -> &str {
        crate::workspace_registry::WorkspaceName::DEFAULT
    }

    /// Serialises writers of one path within this process.
    async fn lock(&self, path: &RepoPath) -> PathLock;

    /// Entries of a directory, sorted by name.
    async fn list(&self, dir: &RepoPath) -> Result<Vec<DirEntry>, WorkspaceError>;

    /// The file's bytes, `None` when it does not exist. A directory or special file is an error.
    async fn read(&self, path: &RepoPath) -> Result<Option<Vec<u8>>, WorkspaceError>;

    /// At most the first `max_bytes` of the file, with its full size, so that a reader of a huge
    /// file never holds more than it returns. `None` when it does not exist.
    async fn read_head(
        &self,
        path: &RepoPath,
        max_bytes: usize,
    ) -> Result<Option<(Vec<u8>, u64)>, WorkspaceError> {
        Ok(self.read(path).await?.map(|mut bytes| {
            let size = bytes.len() as u64;
            bytes.truncate(max_bytes);
            (bytes, size)
        }))
    }

    /// The largest file a recorded write may leave behind (after an append, the whole file);
    /// `None`: no bound.
    fn max_file_bytes(&self) -> Option<usize> {
        None
    }

    /// Checks, without changing anything, that `path` could be written: it resolves beneath the
    /// root, is not a directory or special file, and its parent exists (or `create_dirs`).
    async fn check_target(&self, path: &RepoPath, create_dirs: bool) -> Result<(), WorkspaceError>;

    /// [`Workspace::check_target`] and [`Workspace::read`] in one step, for each target (path,
    /// `create_dirs`) in order: the content a write of the path would replace (`None`: there is
    /// no such file yet). A write reads its target under its path lock; a group of writes reads
    /// all of theirs in one hand-off to wherever the reads run.
    async fn read_targets(
        &self,
        targets: &[(RepoPath, bool)],
    ) -> Vec<Result<Option<Vec<u8>>, WorkspaceError>>;

    /// The first half of a write: checks the target, creates its missing parents if
    /// `create_dirs`, and writes `content` durably to a temp file beside it that no reader can
    /// see. [`StagedWrite::publish`] is the second half.
    async fn stage(
        &self,
        path: &RepoPath,
        content: &[u8],
        create_dirs: bool,
    ) -> Result<Box<dyn StagedWrite>, WorkspaceError>;

    /// [`Workspace::stage`] for several files in one step: their contents made durable as one
    /// group (each target checked as `stage` checks it; one refused target fails only its own
    /// write, which [`StagedGroup::publish`] reports).
    async fn stage_all(&self, writes: &[ToStage<'_>]) -> Box<dyn StagedGroup>;

    /// Replaces the file's content atomically and durably, creating parents if `create_dirs`.
    async fn write_atomic(
        &self,
        path: &RepoPath,
        content: &[u8],
        create_dirs: bool,
    ) -> Result<(), WorkspaceError> {
        self.stage(path, content, create_dirs)
            .await?
            .publish()
            .await
    }

    /// Removes a regular file (durably: the directory is synced). Absent is not an error.
    async fn remove(&self, path: &RepoPath) -> Result<(), WorkspaceError>;

    /// Writes and removes a probe file, for `/readyz` and `writ check`.
    async fn probe_writable(&self) -> Result<(), WorkspaceError>;

    /// Searches the files beneath `query.dir` line by line (see [`crate::search`]). A workspace
    /// that cannot search says so.
    async fn search(&self, query: SearchQuery) -> Result<SearchResults, SearchError> {
        let _ = query;
        Err(SearchError::Pattern(
            "this workspace cannot be searched".to_owned(),
        ))
    }

    /// The files whose import lines name `path` (see [`crate::search::import_names`]), each with
    /// how many of its lines do, in path order; `None` when no index of the workspace can answer
    /// from a current view (the caller then does without, or searches).
    async fn importers(&self, path: &RepoPath) -> Option<Vec<(RepoPath, usize)>> {
        let _ = path;
        None
    }

    /// The files the repository map may rank for `query.path`, from an index of the workspace;
    /// `None` when no index can answer from a current view (the map then walks the workspace).
    async fn map_files(&self, query: &MapQuery) -> Option<MapFiles> {
        let _ = query;
        None
    }

    /// [`Workspace::map_files`] and its `searches` (their results in order) for each of `asks`,
    /// answered in order: the repository map asks them for every file of a batch, and a
    /// workspace with an index answers them all on one blocking thread rather than one each.
    /// `None` as for `map_files`, and then nothing was searched.
    async fn map_lookups(
        &self,
        asks: Vec<(MapQuery, Vec<SearchQuery>)>,
    ) -> Option<Vec<(MapFiles, Vec<Result<SearchResults, SearchError>>)>> {
        let mut answers = Vec::with_capacity(asks.len());
        for (query, searches) in asks {
            let files = self.map_files(&query).await?;
            let mut results = Vec::with_capacity(searches.len());
            for search in searches {
                results.push(self.search(search).await);
            }
            answers.push((files, results));
        }
        Some(answers)
    }

    /// The files beneath `dir` (recursively, in path order) whose path from the root matches
    /// `glob` (gitignore-style) when one is given, at most `max_files` of them, `.gitignore` and
    /// protected paths honoured, symlinks not followed.
    async fn walk(
        &self,
        dir: &RepoPath,
        glob: Option<&str>,
        max_files: usize,
    ) -> Result<Walk, SearchError> {
        let _ = (dir, glob, max_files);
        Ok(Walk::default())
    }
}
