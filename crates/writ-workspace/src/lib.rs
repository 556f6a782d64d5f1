//! The workspace: `REPO_DIR` as writ reads and writes it, every path confined beneath it.
//!
//! [`RepoWorkspace`] implements [`writ_core::Workspace`]. Its paths arrive already checked
//! lexically ([`RepoPath`]); what this crate adds is the check the filesystem alone can make.
//! Every access goes through one `cap_std::fs::Dir` opened on the canonical root, which resolves
//! each path beneath it with `openat2(RESOLVE_BENEATH)` (or cap-std's emulation on older kernels),
//! so a symlink planted inside the root is refused at open time if it leads outside.
//!
//! Symlinks, in short:
//! - a relative symlink that stays inside the root is followed, as a directory on the way to a
//!   path and as the file `read` returns;
//! - any symlink that leads outside is `Escapes` — and so is every *absolute* symlink, even one
//!   naming a place inside the root, because `RESOLVE_BENEATH` refuses absolute links outright;
//! - a symlink as the *final* component of a write target is refused (`Escapes` if it leads
//!   outside, `SpecialFile` otherwise): the atomic rename would replace the link, not its target;
//! - `list` reports a symlink as itself (never followed).
//!
//! Modules:
//! - `ops`: the synchronous operations, each resolving from the root `Dir`;
//! - `staged`: a write in two halves (temp file written and synced; renamed into place);
//! - `writer`: the thread that does writes in groups, so their syncs share journal commits;
//! - `locks`: per-path write locks whose table shrinks as paths are released;
//! - `protect`: [`ProtectedPaths`], the names and paths no write may touch (and no search shows);
//! - `search`: searching and walking the tree with ripgrep's crates;
//! - `index`: the index walks and searches are answered from, kept current by writ's own writes
//!   and a watcher;
//! - `errors`: cap-std's `io::Error`s as [`WorkspaceError`]s.

mod errors;
mod index;
#[cfg(test)]
mod index_tests;
mod locks;
mod ops;
mod protect;
mod rules;
mod search;
mod staged;
mod trigrams;
mod writer;

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cap_std::fs::Dir;
use writ_core::search::{
    MapFiles, MapQuery, SearchError, SearchQuery, SearchResults, Walk, WalkedFile,
};
use writ_core::workspace::{DirEntry, PathLock, StagedGroup, StagedWrite, ToStage};
use writ_core::{RepoPath, Workspace, WorkspaceError};

pub use crate::index::{IndexState, IndexStatus};
use crate::locks::PathLocks;
pub use crate::protect::ProtectedPaths;
use crate::staged::Prepared;
use crate::writer::Writer;

/// How long a temp-file-shaped file must have been left untouched before
/// [`RepoWorkspace::remove_stale_temp_files`] takes it for debris: far longer than any write
/// holds its temp file, so a write in flight never loses it.
pub const STALE_TEMP_FILE_AGE: Duration = Duration::from_secs(10 * 60);

/// `REPO_DIR`, reachable only through a capability on its root directory.
#[derive(Debug)]
pub struct RepoWorkspace {
    /// The canonical root, for reports; never used to reach files (that would bypass the confinement).
    root_path: PathBuf,
    /// The capability every access goes through, shared with the blocking tasks that use it.
    root: Arc<Dir>,
    /// Writers of one path queue here.
    locks: PathLocks,
    /// Refused for every write and removal, as named and as resolved.
    protected: Arc<ProtectedPaths>,
    /// The largest file a recorded write may leave (see [`Workspace::max_file_bytes`]).
    max_file_bytes: Option<usize>,
    /// Every write goes through it.
    writer: Writer,
    /// Walks and searches are answered from it when it is current (see [`RepoWorkspace::with_index`]).
    index: Option<index::Running>,
    /// Its name (`default` for `REPO_DIR`), which the records of writes in it carry.
    name: String,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Writer")
    }
}

impl RepoWorkspace {
    /// Opens `root` as the workspace, creating it (and its parents) if missing.
    ///
    /// This is the only place ambient authority is used: from here on, the process reaches the
    /// workspace only through the returned value's directory handle.
    pub async fn open(root: impl AsRef<Path>) -> Result<RepoWorkspace, WorkspaceError> {
        let root = root.as_ref().to_path_buf();
        let shown = root.display().to_string();
        let io_error = |source: io::Error| WorkspaceError::Io {
            path: shown.clone(),
            source,
        };

        tokio::fs::create_dir_all(&root).await.map_err(io_error)?;
        let root_path = tokio::fs::canonicalize(&root).await.map_err(io_error)?;
        let to_open = root_path.clone();
        let dir = tokio::task::spawn_blocking(move || {
            Dir::open_ambient_dir(&to_open, cap_std::ambient_authority())
        })
        .await
        .map_err(|e| io_error(io::Error::other(e)))?
        .map_err(io_error)?;

        let root = Arc::new(dir);
        let writer = Writer::start(Arc::clone(&root)).map_err(io_error)?;
        Ok(RepoWorkspace {
            root_path,
            root,
            writer,
            locks: PathLocks::default(),
            protected: Arc::new(ProtectedPaths::default()),
            max_file_bytes: None,
            index: None,
            name: writ_core::workspace_registry::WorkspaceName::DEFAULT.to_owned(),
        })
    }

    /// The workspace named `name` (a named workspace's root; `REPO_DIR` is `default`).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// The workspace, its writers of one path serialised with those of other processes too
    /// (replicas sharing this `REPO_DIR`) through `shared`.
    pub fn with_shared_locks(mut self, shared: Arc<dyn writ_core::workspace::SharedLocks>) -> Self {
        self.locks = std::mem::take(&mut self.locks).with_shared(shared);
        self
    }

    /// The workspace, bounding the size of every file a recorded write leaves.
    pub fn with_max_file_bytes(mut self, limit: usize) -> Self {
        self.max_file_bytes = Some(limit);
        self
    }

    /// The workspace, refusing writes and removals that `protected` covers.
    pub fn with_protected(mut self, protected: ProtectedPaths) -> Self {
        self.protected = Arc::new(protected);
        if self.index.is_some() {
            // The index lists what walks may show: it starts over with the new paths.
            self.index = None;
            return self.with_index();
        }
        self
    }

    /// The workspace, answering walks and searches from an index of its files kept in this
    /// process: built in the background (walks and searches read the tree until it is ready),
    /// kept current by this workspace's writes and a watcher of the root.
    pub fn with_index(mut self) -> Self {
        self.index = Some(index::Index::start(self.tree()));
        self
    }

    /// Where the index stands; `None` without one.
    pub fn index_status(&self) -> Option<IndexStatus> {
        self.index.as_ref().map(|i| i.index.status())
    }

    /// Waits until the index is ready and has applied every change reported before now, within
    /// `bound`; `false` without an index or when the bound runs out.
    pub async fn index_caught_up(&self, bound: Duration) -> bool {
        let Some(index) = self.index.as_ref().map(|i| Arc::clone(&i.index)) else {
            return false;
        };
        tokio::task::spawn_blocking(move || index.caught_up(bound))
            .await
            .unwrap_or(false)
    }

    /// Tells the index that `path` changed (written, removed): whatever is asked of it next
    /// waits for the change to be applied.
    fn indexed_change(&self, path: &str) {
        if let Some(running) = &self.index {
            running.index.changed(path);
        }
    }

    fn index(&self) -> Option<Arc<index::Index>> {
        self.index.as_ref().map(|i| Arc::clone(&i.index))
    }

    /// Runs `op` after refusing a protected `path` (see [`RepoWorkspace::guarded`]).
    async fn run_unprotected<T, F>(&self, path: &RepoPath, op: F) -> Result<T, WorkspaceError>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<Dir>) -> Result<T, WorkspaceError> + Send + 'static,
    {
        let guarded = self.guarded(path, op)?;
        self.run(path.as_str(), guarded).await
    }

    /// `op`, refusing a protected `path` first: judged as named now, and as its directory
    /// resolves on disk where `op` runs (in the same task, so that no symlink swapped in between
    /// the two is missed by more than the op's own checks).
    fn guarded<T, F>(
        &self,
        path: &RepoPath,
        op: F,
    ) -> Result<impl FnOnce(&Arc<Dir>) -> Result<T, WorkspaceError> + Send + 'static, WorkspaceError>
    where
        F: FnOnce(&Arc<Dir>) -> Result<T, WorkspaceError> + Send + 'static,
    {
        self.protected.check(path, path.as_str())?;
        let protected = Arc::clone(&self.protected);
        let root_path = self.root_path.clone();
        let owned = path.clone();
        Ok(move |root: &Arc<Dir>| {
            if !protected.is_empty()
                && let Some(real) = ops::resolved(root, &root_path, &owned)
            {
                protected.check(&owned, &real)?;
            }
            op(root)
        })
    }

    /// Removes the temp files an interrupted write left behind (see [`STALE_TEMP_FILE_AGE`]) and
    /// returns how many it removed. Meant for start-up, before requests are served.
    ///
    /// A write's temp file (`staged`) is anonymous (O_TMPFILE) for nearly its whole life but is
    /// named with a bare UUIDv4 for an instant before its rename
    /// (and throughout the write on filesystems without O_TMPFILE); a crash in that window leaves
    /// it. The name carries no mark of ours, so a user's extension-less file named exactly like a
    /// lowercase UUIDv4 and untouched for ten minutes would be removed too.
    pub async fn remove_stale_temp_files(&self) -> usize {
        let root = Arc::clone(&self.root);
        tokio::task::spawn_blocking(move || {
            ops::remove_stale_temp_files(&root, STALE_TEMP_FILE_AGE)
        })
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the stale temp file sweep did not finish");
            0
        })
    }

    fn tree(&self) -> search::Tree {
        search::Tree {
            root_path: self.root_path.clone(),
            root: Arc::clone(&self.root),
            protected: Arc::clone(&self.protected),
        }
    }

    /// Runs `op` on the blocking pool with the root `Dir`.
    ///
    /// Once started, the operation runs to its end even if the caller's future is dropped, so a
    /// client hanging up never interrupts a write half-way (not that a half-way write would show:
    /// the rename is what publishes it).
    async fn run<T, F>(&self, shown: &str, op: F) -> Result<T, WorkspaceError>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<Dir>) -> Result<T, WorkspaceError> + Send + 'static,
    {
        let root = Arc::clone(&self.root);
        tokio::task::spawn_blocking(move || op(&root))
            .await
            .map_err(|e| WorkspaceError::Io {
                path: shown.to_owned(),
                source: io::Error::other(e),
            })?
    }
    /// Runs each of `reads` (one per path; an `Err` is a read refused before it ran) on one
    /// blocking thread, one after another: for a batch's few small files that is quicker than a
    /// thread each, which costs a wake-up each.
    async fn run_each(
        &self,
        paths: &[RepoPath],
        reads: Vec<Result<Read, WorkspaceError>>,
    ) -> Vec<Result<Option<Vec<u8>>, WorkspaceError>> {
        let shown = paths.first().map(|p| p.to_string()).unwrap_or_default();
        let ran = self
            .run(&shown, move |root| {
                Ok(reads
                    .into_iter()
                    .map(|read| read.and_then(|op| op(root)))
                    .collect::<Vec<_>>())
            })
            .await;
        match ran {
            Ok(reads) => reads,
            // The blocking task itself failed (a panic): every read fails with it.
            Err(e) => paths
                .iter()
                .map(|path| {
                    Err(WorkspaceError::Io {
                        path: path.to_string(),
                        source: io::Error::other(e.to_string()),
                    })
                })
                .collect(),
        }
    }
}

impl RepoWorkspace {
    /// How the writer stages `write` (its path as errors show it); an `Err` if it is refused
    /// before it gets there.
    fn to_prepare(
        &self,
        write: &ToStage<'_>,
    ) -> (String, Result<writer::PrepareOp, WorkspaceError>) {
        let owned = write.path.clone();
        let content = write.content.to_vec();
        let create_dirs = write.create_dirs;
        // The protected-path check is the write's own, whatever directory it shares.
        let prepare = self.guarded(write.path, |_| Ok(())).map(|protected| {
            Box::new(move |root: &Arc<Dir>, parents: &mut staged::Parents| {
                protected(root)?;
                staged::prepare(root, &owned, &content, create_dirs, parents)
            }) as writer::PrepareOp
        });
        (write.path.to_string(), prepare)
    }
}

/// A write the writer never answered for (it answers every request it takes).
fn lost(shown: &str) -> WorkspaceError {
    WorkspaceError::Io {
        path: shown.to_owned(),
        source: io::Error::other("the write was lost"),
    }
}

/// One file's read, to run on the blocking pool.
type Read = Box<dyn FnOnce(&Arc<Dir>) -> Result<Option<Vec<u8>>, WorkspaceError> + Send>;

#[async_trait]
impl Workspace for RepoWorkspace {
    fn root(&self) -> &Path {
        &self.root_path
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn lock(&self, path: &RepoPath) -> PathLock {
        self.locks.lock(path).await
    }

    async fn list(&self, dir: &RepoPath) -> Result<Vec<DirEntry>, WorkspaceError> {
        let owned = dir.clone();
        self.run(&dir.to_string(), move |root| ops::list(root, &owned))
            .await
    }

    async fn search(&self, query: SearchQuery) -> Result<SearchResults, SearchError> {
        let tree = self.tree();
        let index = self.index();
        tokio::task::spawn_blocking(move || {
            let Some(index) = index else {
                return tree.search(&query);
            };
            let started = std::time::Instant::now();
            let prepared = tree.prepare(&query)?;
            match index.search(&query, prepared, started) {
                Some(results) => Ok(results),
                None => tree.search(&query),
            }
        })
        .await
        .map_err(|e| {
            SearchError::Workspace(WorkspaceError::Io {
                path: String::new(),
                source: io::Error::other(e),
            })
        })?
    }

    async fn importers(&self, path: &RepoPath) -> Option<Vec<(RepoPath, usize)>> {
        let index = self.index()?;
        let rel = path.as_str().to_owned();
        let found = tokio::task::spawn_blocking(move || index.importers(&rel))
            .await
            .ok()??;
        Some(
            found
                .into_iter()
                .filter_map(|(p, n)| RepoPath::parse(&p).ok().map(|p| (p, n)))
                .collect(),
        )
    }

    async fn map_files(&self, query: &MapQuery) -> Option<MapFiles> {
        let mut answers = self.map_lookups(vec![(query.clone(), Vec::new())]).await?;
        Some(answers.pop()?.0)
    }

    async fn map_lookups(
        &self,
        asks: Vec<(MapQuery, Vec<SearchQuery>)>,
    ) -> Option<Vec<(MapFiles, Vec<Result<SearchResults, SearchError>>)>> {
        let index = self.index()?;
        let tree = self.tree();
        // One blocking thread for every file's look-ups and searches: each hop to the pool and
        // back costs two context switches, more than an indexed search itself.
        let answers = tokio::task::spawn_blocking(move || {
            asks.iter()
                .map(|(query, searches)| {
                    let exclude: Vec<String> = query
                        .exclude
                        .iter()
                        .map(|p| p.as_str().to_owned())
                        .collect();
                    let found = index.map_files(
                        query.path.as_str(),
                        &query.modules,
                        &exclude,
                        query.fill,
                    )?;
                    let results = searches
                        .iter()
                        .map(|search| {
                            let started = std::time::Instant::now();
                            let prepared = tree.prepare(search)?;
                            match index.search(search, prepared, started) {
                                Some(results) => Ok(results),
                                None => tree.search(search),
                            }
                        })
                        .collect::<Vec<_>>();
                    Some((map_answer(found), results))
                })
                .collect::<Option<Vec<_>>>()
        })
        .await
        .ok()??;
        Some(answers)
    }

    async fn walk(
        &self,
        dir: &RepoPath,
        glob: Option<&str>,
        max_files: usize,
    ) -> Result<Walk, SearchError> {
        let tree = self.tree();
        let owned = dir.clone();
        let glob = glob.map(str::to_owned);
        let index = self.index();
        tokio::task::spawn_blocking(move || {
            if let Some(index) = index {
                let matcher = glob.as_deref().map(|g| tree.glob(g)).transpose()?;
                tree.existing_dir(&owned)?;
                if let Some(walk) = index.walk(owned.as_str(), matcher.as_ref(), max_files) {
                    return Ok(walk);
                }
            }
            tree.walk(&owned, glob.as_deref(), max_files)
        })
        .await
        .map_err(|e| {
            SearchError::Workspace(WorkspaceError::Io {
                path: String::new(),
                source: io::Error::other(e),
            })
        })?
    }

    async fn read(&self, path: &RepoPath) -> Result<Option<Vec<u8>>, WorkspaceError> {
        let owned = path.clone();
        self.run(path.as_str(), move |root| ops::read(root, &owned))
            .await
    }

    async fn read_head(
        &self,
        path: &RepoPath,
        max_bytes: usize,
    ) -> Result<Option<(Vec<u8>, u64)>, WorkspaceError> {
        let owned = path.clone();
        self.run(path.as_str(), move |root| {
            ops::read_head(root, &owned, max_bytes)
        })
        .await
    }

    fn max_file_bytes(&self) -> Option<usize> {
        self.max_file_bytes
    }

    async fn check_target(&self, path: &RepoPath, create_dirs: bool) -> Result<(), WorkspaceError> {
        let owned = path.clone();
        self.run_unprotected(path, move |root| {
            ops::check_target(root, &owned, create_dirs)
        })
        .await
    }

    async fn read_targets(
        &self,
        targets: &[(RepoPath, bool)],
    ) -> Vec<Result<Option<Vec<u8>>, WorkspaceError>> {
        let reads = targets
            .iter()
            .map(|(path, create_dirs)| {
                let owned = path.clone();
                let create_dirs = *create_dirs;
                self.guarded(path, move |root| {
                    ops::check_target(root, &owned, create_dirs)?;
                    ops::read(root, &owned)
                })
                .map(|op| Box::new(op) as Read)
            })
            .collect();
        let paths: Vec<RepoPath> = targets.iter().map(|(p, _)| p.clone()).collect();
        self.run_each(&paths, reads).await
    }

    async fn stage(
        &self,
        path: &RepoPath,
        content: &[u8],
        create_dirs: bool,
    ) -> Result<Box<dyn StagedWrite>, WorkspaceError> {
        let write = ToStage {
            path,
            content,
            create_dirs,
        };
        let mut writes = self.writer.stage_all(vec![self.to_prepare(&write)]).await;
        let prepared = writes.pop().unwrap_or_else(|| Err(lost(path.as_str())))?;
        Ok(Box::new(Staged(StagedFiles {
            writer: self.writer.clone(),
            writes: vec![Ok(prepared)],
            index: self.index(),
        })))
    }

    async fn stage_all(&self, writes: &[ToStage<'_>]) -> Box<dyn StagedGroup> {
        let prepares = writes.iter().map(|w| self.to_prepare(w)).collect();
        Box::new(StagedFiles {
            writer: self.writer.clone(),
            writes: self.writer.stage_all(prepares).await,
            index: self.index(),
        })
    }

    async fn remove(&self, path: &RepoPath) -> Result<(), WorkspaceError> {
        let owned = path.clone();
        let removed = self
            .run_unprotected(path, move |root| ops::remove(root, &owned))
            .await;
        self.indexed_change(path.as_str());
        removed
    }

    /// Through the same writer as every write, so a writer that stopped shows here too.
    async fn probe_writable(&self) -> Result<(), WorkspaceError> {
        let name = format!("{}{}", ops::PROBE_PREFIX, random_suffix());
        let path = RepoPath::parse(&name)?;
        let written = match self.stage(&path, b"writ probe\n", false).await {
            Ok(staged) => staged.publish().await,
            Err(e) => Err(e),
        };
        // Removed even when the write failed: a failed directory sync comes after the rename.
        let removed = self.remove(&path).await;
        written?;
        removed
    }
}

/// A write of this workspace, durable in its temp file, waiting to be published: a group of one
/// (discarded by the writer if dropped first).
struct Staged(StagedFiles);

#[async_trait]
impl StagedWrite for Staged {
    async fn publish(self: Box<Self>) -> Result<(), WorkspaceError> {
        let shown = self.0.shown();
        let mut published = Box::new(self.0).publish().await;
        published.pop().unwrap_or_else(|| Err(lost(&shown)))
    }
}

/// Writes staged together ([`Workspace::stage_all`]), in their order: each durable in its temp
/// file or refused; published together, or discarded by the writer if dropped first.
struct StagedFiles {
    writer: Writer,
    writes: Vec<Result<Prepared, WorkspaceError>>,
    /// Told of every path published, before the publication returns.
    index: Option<Arc<index::Index>>,
}

impl StagedFiles {
    /// The first write's path, for an error about the group.
    fn shown(&self) -> String {
        self.writes
            .iter()
            .find_map(|w| w.as_ref().ok().map(|p| p.path().to_string()))
            .unwrap_or_default()
    }
}

#[async_trait]
impl StagedGroup for StagedFiles {
    async fn publish(mut self: Box<Self>) -> Vec<Result<(), WorkspaceError>> {
        let writes = std::mem::take(&mut self.writes);
        let mut refused: Vec<Option<WorkspaceError>> = Vec::with_capacity(writes.len());
        let mut prepared = Vec::with_capacity(writes.len());
        for write in writes {
            match write {
                Ok(p) => {
                    prepared.push(p);
                    refused.push(None);
                }
                Err(e) => refused.push(Some(e)),
            }
        }
        let paths: Vec<String> = prepared.iter().map(|p| p.path().to_string()).collect();
        let published = self.writer.publish_all(prepared).await;
        if let Some(index) = &self.index {
            for path in &paths {
                index.changed(path);
            }
        }
        let mut published = published.into_iter();
        refused
            .into_iter()
            .map(|refused| match refused {
                Some(e) => Err(e),
                None => published.next().unwrap_or_else(|| Err(lost(""))),
            })
            .collect()
    }
}

impl Drop for StagedFiles {
    fn drop(&mut self) {
        let unpublished: Vec<Prepared> = std::mem::take(&mut self.writes)
            .into_iter()
            .flatten()
            .collect();
        if !unpublished.is_empty() {
            self.writer.discard(unpublished);
        }
    }
}

/// Enough randomness that concurrent probes (several replicas on one volume) do not share a name;
/// std's per-instance SipHash keys supply it without another dependency.
fn random_suffix() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

/// The index's answer to the map as the core takes it: paths checked, content keys by path.
fn map_answer(found: index::MapAnswer) -> MapFiles {
    let contents = found
        .files
        .iter()
        .filter_map(|(p, _, c)| Some((p.clone(), (*c)?)))
        .collect();
    MapFiles {
        files: found
            .files
            .into_iter()
            .filter_map(|(p, size, _)| {
                RepoPath::parse_nonempty(&p)
                    .ok()
                    .map(|path| WalkedFile { path, size })
            })
            .collect(),
        contents,
        importers: found
            .importers
            .into_iter()
            .filter_map(|(p, n)| RepoPath::parse(&p).ok().map(|p| (p, n)))
            .collect(),
        extensions: found.extensions,
        pending: found.pending,
    }
}
