//! The workspace's index, kept in the process: every file a walk would find (`.gitignore` and
//! protected paths honoured), in walk order, each with a filter of the trigrams its text holds.
//! Walks and searches are answered from it, so they cost what the answer needs instead of a read
//! of the whole tree.
//!
//! - **The filter.** Each file keeps a bit set of its (ASCII-lowercased) trigrams, three bits per
//!   trigram hashed into eight bits per distinct trigram (a Bloom filter: about one false
//!   "maybe" in thirty per trigram, never a false "no"). A search's pattern is read into
//!   the trigrams any match must hold ([`Need`]); a file whose filter lacks them is ruled out
//!   without being read, every other file is read and searched exactly as the walk's search
//!   does, so the answer is the walk's answer.
//! - **The map's look-ups.** Beside the files, the index keeps what the repository map finds
//!   files by — names without extension, test files, extension counts, the import graph
//!   backwards, a content key per file — so the map asks for the files that may rank
//!   ([`Index::map_files`]) instead of listing the tree.
//! - **Kept current.** One thread applies changes in order: the first build (a walk of the root,
//!   reported as progress), then every path writ writes or removes, and every path the watcher
//!   reports changed outside writ. A change is a refresh of its path: a path gone (or protected)
//!   is dropped, a file already indexed read again in place, a new file judged by the ignore
//!   rules of the folders on its way ([`Rules`]), a folder read by itself with those rules; the
//!   root, links and ignore files are walked again from the root by the walker. A watcher that
//!   overflowed or failed, and a changed ignore file, refresh the directory they cover — the
//!   bounded rescan, which reads only files whose size or time changed.
//! - **Never stale.** Each change is queued before it is applied; a caller's walk or search waits
//!   (within [`CATCH_UP`]) until the index has applied every change queued before it started.
//!   Before the first build ends, after the watcher failed for good, or when the wait runs out,
//!   the workspace walks the tree as it would without an index. The repository map alone reads
//!   the index as it stands ([`Freshness::AsIndexed`]) and says how many changes were pending.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use ignore::overrides::Override;
use writ_core::search::{
    Freshness, SearchQuery, SearchResults, Walk, content_key, import_names, import_stem,
    imports_in, module_keys, module_names,
};

mod apply;
mod map;
mod watch;

pub(crate) use map::MapAnswer;
use map::Names;
use watch::{SharedWatcher, ruled_by, watch};

use crate::rules::Rules;
use crate::search::{Candidate, FileStat, PathFilter, Prepared, Tree, within};
use crate::trigrams::Need;

/// How long a walk or search waits for the index to apply the changes queued before it; past
/// it, the tree is walked instead.
pub const CATCH_UP: Duration = Duration::from_millis(500);
/// How long the repository map waits for the index to apply the changes queued before it; past
/// it, the map reads the index as it stands and says how many changes were pending.
pub const MAP_CATCH_UP: Duration = Duration::from_millis(100);
/// Files larger than this are not filtered: every search reads them.
const MAX_FILTERED_BYTES: u64 = 1 << 20;
/// Changes waiting past this many are applied as one rescan of the root.
const MAX_QUEUED: usize = 4_096;
/// Files indexed between two reports of the first build's progress.
const PROGRESS_EVERY: usize = 1_000;
/// How long after refreshing a directory that changed it is walked again: the watcher starts
/// watching a new directory only after reporting it, so a file made in it in between is found
/// by the second walk.
const SETTLE: Duration = Duration::from_millis(50);

/// Where the index stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexState {
    /// The first build is walking the tree; walks and searches walk it too meanwhile.
    Building,
    /// Walks and searches are answered from the index.
    Ready,
    /// The watcher could not be started: walks and searches walk the tree.
    Off,
}

/// What the index holds, for reports and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexStatus {
    pub state: IndexState,
    /// Files indexed (during the first build: so far).
    pub files: usize,
    /// The index's own memory, estimated from what it holds.
    pub bytes: usize,
    /// Changes queued and not yet applied.
    pub pending: u64,
}

/// One indexed file.
struct Entry {
    size: u64,
    modified: Option<SystemTime>,
    /// When the file was read: a change in the same tick as its read would leave its time
    /// unchanged, so a rescan reads again a file modified no earlier than a second before it.
    read_at: SystemTime,
    /// `None`: every search reads the file (too large, unreadable, binary or with a byte-order
    /// mark, which the searcher would transcode first).
    filter: Option<Box<[u64]>>,
    /// The modules its import lines name (files with an extension of [`IMPORTING`] only): its
    /// edges in the import graph.
    imports: Box<[Box<str>]>,
    /// Its [`content_key`], when it was read: the repository map's outlines are kept by it.
    content: Option<u64>,
}

/// The extensions of the files whose import lines the index reads.
const IMPORTING: &[&str] = &["py", "pyi", "js", "jsx", "mjs", "cjs", "ts", "tsx", "rs"];

impl Entry {
    fn may_match(&self, need: &Need) -> bool {
        match &self.filter {
            None => true,
            Some(bits) => need.holds(bits),
        }
    }

    fn bytes(&self, key: &Key) -> usize {
        std::mem::size_of::<Entry>()
            + std::mem::size_of::<Key>()
            + key.0.len()
            + self.filter.as_ref().map_or(0, |f| f.len() * 8)
            + self.imports.iter().map(|i| i.len() + 16 + key.0.len() + 24).sum::<usize>()
            // a B-tree's node share per entry, about
            + 16
    }
}

/// A path from the root, ordered as the walk yields it (component by component, so `a/b.py`
/// comes before `a.py`).
#[derive(Clone, PartialEq, Eq)]
struct Key(String);

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.split('/').cmp(other.0.split('/'))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

struct State {
    state: IndexState,
    files: BTreeMap<Key, Entry>,
    /// The import graph backwards: by a module's last part ([`import_stem`]), the files with an
    /// import line ending in it. Kept with `files`, entry by entry.
    importers: HashMap<Box<str>, BTreeSet<Key>>,
    /// The repository map's look-ups ([`Index::map_files`]), kept with `files`.
    names: Names,
    bytes: usize,
    /// Paths to refresh, in order (`""`: the root).
    queue: Vec<String>,
    /// Changes queued since the start, and applied.
    queued: u64,
    applied: u64,
    /// New top folders whose watch is being added: what was made in them so far is reported
    /// only by the refresh queued once the watch is on.
    watching: usize,
    /// `queued` when the last of those refreshes was queued.
    watched_through: u64,
    stopping: bool,
}

/// The index of one workspace root (see the module's notes).
pub(crate) struct Index {
    tree: Tree,
    state: Mutex<State>,
    /// Signalled when changes are queued: the updater waits on it.
    changed: Condvar,
    /// Signalled when changes are applied: walks, searches and maps wait on it. Apart from
    /// `changed` so that each write queued does not wake every waiting map (a hundred and
    /// more with many batches in flight).
    applied: Condvar,
    /// The ignore rules of the folders new files were judged in (the updater's alone).
    rules: Mutex<Rules>,
}

/// The index with its updater thread and watcher; dropping it stops both.
pub(crate) struct Running {
    pub index: Arc<Index>,
    _watcher: Option<SharedWatcher>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Index")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.index.lock().stopping = true;
        self.index.changed.notify_all();
        self.index.applied.notify_all();
    }
}

impl Index {
    /// Starts the first build in the background and the watcher on the root.
    pub fn start(tree: Tree) -> Running {
        let index = Arc::new(Index {
            tree,
            state: Mutex::new(State {
                state: IndexState::Building,
                files: BTreeMap::new(),
                importers: HashMap::new(),
                names: Names::default(),
                bytes: 0,
                queue: vec![String::new()],
                queued: 1,
                applied: 0,
                watching: 0,
                watched_through: 0,
                stopping: false,
            }),
            changed: Condvar::new(),
            applied: Condvar::new(),
            rules: Mutex::new(Rules::default()),
        });
        let watcher = match watch(&index) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, root = %index.tree.root_path.display(),
                    "the workspace index is off (the watcher did not start): walks and searches read the tree");
                index.lock().state = IndexState::Off;
                None
            }
        };
        if watcher.is_some() {
            let updater = Arc::clone(&index);
            let spawned = std::thread::Builder::new()
                .name("writ-index".into())
                .spawn(move || updater.update());
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "the workspace index is off (no thread)");
                index.lock().state = IndexState::Off;
            }
        }
        Running {
            index,
            _watcher: watcher,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> IndexStatus {
        let state = self.lock();
        IndexStatus {
            state: state.state,
            files: state.files.len(),
            bytes: state.bytes,
            pending: state.queued - state.applied,
        }
    }

    /// Queues a refresh of `rel` (a path from the root; `""` for the root): everything asked
    /// of the index afterwards waits for it.
    pub fn changed(&self, rel: &str) {
        let mut state = self.lock();
        if state.state == IndexState::Off {
            return;
        }
        // Whoever reports it (writ's own write or the watcher), an ignore file's change is a
        // change of everything it rules.
        state.queue.push(ruled_by(rel).to_owned());
        state.queued += 1;
        drop(state);
        self.changed.notify_all();
    }

    /// A new top folder's watch is on and its refresh queued (see [`watch_later`]).
    fn watch_added(&self) {
        let mut state = self.lock();
        state.watching = state.watching.saturating_sub(1);
        state.watched_through = state.queued;
        drop(state);
        self.applied.notify_all();
    }

    /// The index once it has applied every change queued before now; `None` if it is not ready
    /// or does not catch up within `bound`.
    fn current(&self, bound: Duration) -> Option<MutexGuard<'_, State>> {
        let state = self.lock();
        if state.state != IndexState::Ready {
            return None;
        }
        let queued = state.queued;
        // A new top folder being watched holds changes not reported yet: its refresh counts as
        // queued before now.
        let wanted = |s: &State| queued.max(s.watched_through);
        let (state, _) = self
            .applied
            .wait_timeout_while(state, bound, |s| {
                (s.watching > 0 || s.applied < wanted(s)) && s.state == IndexState::Ready
            })
            .unwrap_or_else(|e| e.into_inner());
        let current = state.state == IndexState::Ready
            && state.watching == 0
            && state.applied >= wanted(&state);
        current.then_some(state)
    }

    /// The index as it stands, without waiting for queued changes, and how many are queued; `None`
    /// before the first build ends or once the index is off.
    fn as_indexed(&self) -> Option<(MutexGuard<'_, State>, u64)> {
        let state = self.lock();
        if state.state != IndexState::Ready {
            return None;
        }
        let pending = state.queued - state.applied;
        Some((state, pending))
    }

    /// The index as `freshness` asks for it (see [`Index::current`], [`Index::as_indexed`]).
    fn fresh(&self, freshness: Freshness) -> Option<MutexGuard<'_, State>> {
        match freshness {
            Freshness::Current => self.current(CATCH_UP),
            Freshness::AsIndexed => self.as_indexed().map(|(state, _)| state),
        }
    }

    /// Waits until the index has applied every change queued before now, within `bound`.
    pub fn caught_up(&self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if self.current(bound).is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The walk's answer, from the index; `None` when the tree must be walked instead.
    pub fn walk(&self, dir: &str, glob: Option<&Override>, max_files: usize) -> Option<Walk> {
        let state = self.current(CATCH_UP)?;
        let from = if dir.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(Key(dir.to_owned()))
        };
        let files = state
            .files
            .range((from, Bound::Unbounded))
            .take_while(|(k, _)| within(&k.0, dir))
            .map(|(k, e)| (k.0.clone(), e.size));
        Some(self.tree.walk_in(files, glob, max_files))
    }

    /// The search's answer, from the index; `None` when the tree must be walked instead.
    pub fn search(
        &self,
        query: &SearchQuery,
        prepared: Prepared,
        started: Instant,
    ) -> Option<SearchResults> {
        let need = &*prepared.need;
        let candidates: Vec<Candidate> = {
            let state = self.fresh(query.freshness)?;
            let dir = query.dir.as_str();
            let paths = PathFilter::of(query.glob.as_deref(), prepared.glob.as_ref());
            let mut candidates = Vec::new();
            let mut ruled_out = 0;
            // The files of the directory asked for: a range of the ordered files.
            let from = if dir.is_empty() {
                Bound::Unbounded
            } else {
                Bound::Excluded(Key(dir.to_owned()))
            };
            for (k, e) in state
                .files
                .range((from, Bound::Unbounded))
                .take_while(|(k, _)| within(&k.0, dir))
            {
                if !paths.matches(&k.0) {
                    continue;
                }
                if e.size > query.max_file_bytes || e.may_match(need) {
                    if ruled_out > 0 {
                        candidates.push(Candidate::RuledOut(std::mem::take(&mut ruled_out)));
                    }
                    candidates.push(Candidate::File {
                        rel: k.0.clone(),
                        size: e.size,
                    });
                } else {
                    ruled_out += 1;
                }
            }
            if ruled_out > 0 {
                candidates.push(Candidate::RuledOut(ruled_out));
            }
            candidates
        };
        Some(
            self.tree
                .search_in(query, prepared.matcher, candidates.into_iter(), started),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn keys_sort_as_the_walk_yields_paths() {
        let mut keys = [Key("a.py".into()), Key("a/b.py".into()), Key("B".into())];
        keys.sort();
        let order: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        assert_eq!(order, ["B", "a/b.py", "a.py"]);
    }
}
