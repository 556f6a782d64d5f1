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
use regex_syntax::hir::{Class, Hir, HirKind};
use writ_core::search::{
    Freshness, SearchQuery, SearchResults, Walk, content_key, import_names, import_stem,
    imports_in, module_keys, module_names,
};

use crate::rules::Rules;
use crate::search::{Candidate, FileStat, PathFilter, Prepared, Tree, within};

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

    /// The updater: applies queued changes in order until the index is dropped.
    fn update(&self) {
        loop {
            let batch = {
                let state = self.lock();
                let mut state = self
                    .changed
                    .wait_while(state, |s| s.queue.is_empty() && !s.stopping)
                    .unwrap_or_else(|e| e.into_inner());
                if state.stopping {
                    return;
                }
                std::mem::take(&mut state.queue)
            };
            let taken = batch.len() as u64;
            let mut paths: Vec<String> = if batch.len() > MAX_QUEUED {
                vec![String::new()]
            } else {
                batch
            };
            paths.sort();
            paths.dedup();
            // A refresh of a directory covers every path beneath it.
            let covered: Vec<String> = paths
                .iter()
                .filter(|p| !paths.iter().any(|d| *d != **p && within(p, d)))
                .cloned()
                .collect();
            let mut directories = Vec::new();
            for rel in covered {
                self.refresh(&rel);
                if !rel.is_empty()
                    && self
                        .tree
                        .root
                        .symlink_metadata(&rel)
                        .is_ok_and(|m| m.is_dir())
                {
                    directories.push(rel);
                }
            }
            let mut state = self.lock();
            state.applied += taken;
            if state.state == IndexState::Building {
                state.state = IndexState::Ready;
                tracing::info!(
                    files = state.files.len(),
                    bytes = state.bytes,
                    "the workspace index is ready"
                );
            }
            drop(state);
            self.applied.notify_all();
            // What was reported is applied, so nobody waits through the settling: the second
            // walk only finds files made in a new directory before its watch began, which the
            // watcher will never report.
            if !directories.is_empty() {
                std::thread::sleep(SETTLE);
                for rel in directories {
                    self.refresh(&rel);
                }
            }
        }
    }

    /// Brings the index's view of `rel` (a file or a directory) in line with the tree.
    fn refresh(&self, rel: &str) {
        if self.refresh_in_place(rel) {
            return;
        }
        // What is walked may hold changed ignore files, or folders that are something else now.
        let beneath = {
            let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
            rules.forget(rel);
            // A folder is read by itself with its ancestors' rules, rather than walked from the
            // root past every sibling folder on the way.
            (!rel.is_empty())
                .then(|| rules.files_beneath(&self.tree, rel))
                .flatten()
        };
        let walked: Vec<FileStat> =
            beneath.unwrap_or_else(|| self.tree.stats(rel, false).collect());
        let now = SystemTime::now();
        let to_read: Vec<&FileStat> = {
            let state = self.lock();
            walked
                .iter()
                .filter(|f| {
                    // The path itself was reported changed: read it whatever its time says.
                    f.rel == rel
                        || state
                            .files
                            .get(&Key(f.rel.clone()))
                            .is_none_or(|e| e.size != f.size || racy(e, f.modified))
                })
                .collect()
        };
        let mut read: Vec<(Key, Entry)> = Vec::with_capacity(PROGRESS_EVERY);
        for f in to_read {
            read.push((Key(f.rel.clone()), self.entry(f, now)));
            if read.len() == PROGRESS_EVERY {
                self.insert(std::mem::take(&mut read));
            }
        }
        self.insert(read);
        let present: HashSet<&str> = walked.iter().map(|f| f.rel.as_str()).collect();
        self.remove_beneath(rel, &present);
    }

    /// Refreshes `rel` without a walk where it can: a path the walk never shows (protected, or
    /// gone) leaves the index with what was beneath it; a file the index already holds that is
    /// still a file is read again (its ignore files have not changed since it was walked, or
    /// their change would have queued its folder); a new file is judged by the ignore rules of
    /// the folders on its way ([`Rules`]) and read, or left out. `false`: only a walk can tell
    /// (a folder, a link, a folder on the way that is not one).
    fn refresh_in_place(&self, rel: &str) -> bool {
        if rel.is_empty() {
            return false;
        }
        let meta = if self.tree.protected.covers(rel) {
            None
        } else {
            match self.tree.root.symlink_metadata(rel) {
                Ok(meta) => Some(meta),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(_) => return false,
            }
        };
        let Some(meta) = meta else {
            self.remove_beneath(rel, &HashSet::new());
            return true;
        };
        if !meta.is_file() {
            return false;
        }
        if !self.lock().files.contains_key(&Key(rel.to_owned())) {
            let shown = self
                .rules
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .shows(&self.tree, rel);
            // A folder the index knew at this path is gone: a file is there now.
            self.remove_beneath(rel, &HashSet::from([rel]));
            match shown {
                None => return false,
                Some(false) => return true,
                Some(true) => {}
            }
        }
        let stat = FileStat {
            rel: rel.to_owned(),
            size: meta.len(),
            modified: meta.modified().ok().map(|t| t.into_std()),
        };
        let entry = self.entry(&stat, SystemTime::now());
        self.insert(vec![(Key(stat.rel), entry)]);
        true
    }

    /// Drops every file at or beneath `rel` that `present` does not hold.
    fn remove_beneath(&self, rel: &str, present: &HashSet<&str>) {
        let mut state = self.lock();
        let gone: Vec<Key> = state
            .files
            .range(Key(rel.to_owned())..)
            .take_while(|(k, _)| within(&k.0, rel))
            .filter(|(k, _)| !present.contains(k.0.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            if let Some(entry) = state.files.remove(&key) {
                state.bytes -= entry.bytes(&key);
                let named = state.names.remove(&key);
                state.bytes -= named;
                state.unlink(&key, &entry);
            }
        }
    }

    fn insert(&self, entries: Vec<(Key, Entry)>) {
        let mut state = self.lock();
        for (key, entry) in entries {
            state.bytes += entry.bytes(&key);
            for import in &entry.imports {
                state
                    .importers
                    .entry(import_stem(import).into())
                    .or_default()
                    .insert(key.clone());
            }
            let old = state.files.insert(key.clone(), entry);
            if old.is_none() {
                let added = state.names.add(&key);
                state.bytes += added;
            }
            if let Some(old) = old {
                state.bytes -= old.bytes(&key);
                let state = &mut *state;
                let kept: HashSet<&str> = state.files[&key]
                    .imports
                    .iter()
                    .map(|i| import_stem(i))
                    .collect();
                for import in &old.imports {
                    let stem = import_stem(import);
                    if !kept.contains(stem) {
                        unlink_one(&mut state.importers, stem, &key);
                    }
                }
            }
        }
    }

    /// The files importing `rel`, with how many of their import lines name it; `None` when the
    /// index is not current.
    pub fn importers(&self, rel: &str) -> Option<Vec<(String, usize)>> {
        let state = self.current(CATCH_UP)?;
        Some(state.importers_of(rel))
    }

    /// The files the repository map may rank for `rel` (see [`writ_core::search::MapQuery`]),
    /// each found by a look-up: the files `modules` name (by their name), `rel`'s tests (among
    /// the files named for tests), the files of its folder (a range of the ordered files, each
    /// subfolder skipped in one step), its importers, and up to `fill` more files of its
    /// extension beneath its top folder, in walk order. From the index once it has applied the
    /// changes queued before the call, or as it stands when that takes longer than
    /// [`MAP_CATCH_UP`] (the answer says how many were pending); `None` before the first build
    /// ends.
    pub fn map_files(
        &self,
        rel: &str,
        modules: &[String],
        exclude: &[String],
        fill: usize,
    ) -> Option<MapAnswer> {
        // Changes reported before the map began are usually applied within milliseconds: the
        // map waits that long (a batch right after a write sees the write), and no longer, so
        // that with many batches writing it does not queue behind them.
        let (guard, pending) = match self.current(MAP_CATCH_UP) {
            Some(state) => (state, 0),
            None => self.as_indexed()?,
        };
        let state: &State = &guard;
        let mut seen: HashSet<&str> = HashSet::new();
        let mut files: Vec<(String, u64, Option<u64>)> = Vec::new();
        for module in modules {
            let [a, b] = module_keys(module);
            for name in if a == b { vec![a] } else { vec![a, b] } {
                for key in state.names.stems.get(name).into_iter().flatten() {
                    if module_names(module, &key.0) {
                        take(state, key, &mut seen, &mut files);
                    }
                }
            }
        }
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let own_stem = name
            .rsplit_once('.')
            .map_or(name, |(s, _)| s)
            .to_ascii_lowercase();
        if own_stem.len() >= 2 {
            for key in &state.names.tests {
                if file_name(&key.0).to_ascii_lowercase().contains(&own_stem) {
                    take(state, key, &mut seen, &mut files);
                }
            }
        }
        // The folder's own files rank by being there (and by language) unless a look-up found
        // them: ties the map breaks by path, so the first `fill` of the file's extension and
        // the first `fill` of the rest are all it could show of them, and a folder of thousands
        // costs a map what a folder of a hundred does.
        let own_ext = extension_of(name);
        let (mut same, mut other) = (0, 0);
        for (key, entry) in state.direct_files(dir) {
            if same >= fill && other >= fill {
                break;
            }
            let taken = if extension_of(file_name(&key.0)).eq_ignore_ascii_case(own_ext) {
                &mut same
            } else {
                &mut other
            };
            if *taken < fill && take_entry(key, entry, &mut seen, &mut files) {
                *taken += 1;
            }
        }
        let importers = state.importers_of(rel);
        for (path, _) in &importers {
            take(state, &Key(path.clone()), &mut seen, &mut files);
        }
        if let Some((top, _)) = rel.split_once('/') {
            let ext = own_ext;
            let mut added = 0;
            for (key, entry) in state
                .files
                .range((Bound::Excluded(Key(top.to_owned())), Bound::Unbounded))
                .take_while(|(k, _)| within(&k.0, top))
                .take(MAX_FILL_LOOKS)
            {
                if added == fill {
                    break;
                }
                // Compared in place: the fill looks at up to MAX_FILL_LOOKS names a map.
                if extension_of(file_name(&key.0)).eq_ignore_ascii_case(ext)
                    && take_entry(key, entry, &mut seen, &mut files)
                {
                    added += 1;
                }
            }
        }
        let mut extensions: HashMap<String, usize> = state
            .names
            .extensions
            .iter()
            .map(|(e, n)| (e.to_string(), *n))
            .collect();
        for path in exclude {
            if state.files.contains_key(&Key(path.clone()))
                && let Some(n) = extensions.get_mut(&extension(file_name(path)))
            {
                *n -= 1;
            }
        }
        Some(MapAnswer {
            files,
            importers,
            extensions: extensions.into_iter().collect(),
            pending,
        })
    }

    fn entry(&self, f: &FileStat, now: SystemTime) -> Entry {
        let bytes = if f.size > MAX_FILTERED_BYTES {
            None
        } else {
            self.tree.read(&f.rel, MAX_FILTERED_BYTES)
        };
        let filter = bytes.as_deref().and_then(filter_of);
        let content = bytes.as_deref().map(content_key);
        let imports = match bytes {
            Some(bytes)
                if f.rel
                    .rsplit_once('.')
                    .is_some_and(|(_, ext)| IMPORTING.contains(&ext)) =>
            {
                imports_in(&String::from_utf8_lossy(&bytes))
                    .into_iter()
                    .map(String::into_boxed_str)
                    .collect()
            }
            _ => Box::default(),
        };
        Entry {
            size: f.size,
            modified: f.modified,
            read_at: now,
            filter,
            imports,
            content,
        }
    }
}

/// The index's answer to the repository map (see [`Index::map_files`]).
pub(crate) struct MapAnswer {
    /// Paths from the root, with their sizes and content keys.
    pub files: Vec<(String, u64, Option<u64>)>,
    pub importers: Vec<(String, usize)>,
    pub extensions: Vec<(String, usize)>,
    /// Changes queued but not applied when the answer was made.
    pub pending: u64,
}

/// Files of the top folder looked at at most for the map's fill: a folder of other languages
/// ends the fill early instead of costing a pass over it.
const MAX_FILL_LOOKS: usize = 20_000;

/// What the repository map looks files up by: each file's name without its extension (the
/// modules that may name it), whether its name is a test's, and its extension (counted).
#[derive(Default)]
struct Names {
    /// By file name without its last extension.
    stems: HashMap<Box<str>, BTreeSet<Key>>,
    /// The files whose name (ASCII-lowercased) holds `test`.
    tests: BTreeSet<Key>,
    /// How many files have each extension, lowercased (`""`: none).
    extensions: HashMap<Box<str>, usize>,
}

impl Names {
    /// Files a new file; returns the bytes it adds.
    fn add(&mut self, key: &Key) -> usize {
        let name = file_name(&key.0);
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        self.stems
            .entry(stem.into())
            .or_default()
            .insert(key.clone());
        *self
            .extensions
            .entry(extension(name).into_boxed_str())
            .or_default() += 1;
        let mut bytes = key.0.len() + 40;
        if name.to_ascii_lowercase().contains("test") {
            self.tests.insert(key.clone());
            bytes += key.0.len() + 40;
        }
        bytes
    }

    /// Takes a file out; returns the bytes [`Names::add`] said it added.
    fn remove(&mut self, key: &Key) -> usize {
        let name = file_name(&key.0);
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        if let Some(keys) = self.stems.get_mut(stem) {
            keys.remove(key);
            if keys.is_empty() {
                self.stems.remove(stem);
            }
        }
        let ext = extension(name);
        if let Some(n) = self.extensions.get_mut(ext.as_str()) {
            *n -= 1;
            if *n == 0 {
                self.extensions.remove(ext.as_str());
            }
        }
        let mut bytes = key.0.len() + 40;
        if self.tests.remove(key) {
            bytes += key.0.len() + 40;
        }
        bytes
    }
}

/// The last part of a path.
fn file_name(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// A file name's extension, lowercased (`""`: none).
fn extension(name: &str) -> String {
    extension_of(name).to_ascii_lowercase()
}

/// The extension of a file name as written (`""`: none).
fn extension_of(name: &str) -> &str {
    name.rsplit_once('.').map_or("", |(_, e)| e)
}

/// Adds the file at `key` to the map's files, once.
fn take<'a>(
    state: &'a State,
    key: &Key,
    seen: &mut HashSet<&'a str>,
    files: &mut Vec<(String, u64, Option<u64>)>,
) {
    if let Some((key, entry)) = state.files.get_key_value(key) {
        take_entry(key, entry, seen, files);
    }
}

/// Adds an indexed file to the map's files unless it is there already; whether it was added.
fn take_entry<'a>(
    key: &'a Key,
    entry: &Entry,
    seen: &mut HashSet<&'a str>,
    files: &mut Vec<(String, u64, Option<u64>)>,
) -> bool {
    let new = seen.insert(key.0.as_str());
    if new {
        files.push((key.0.clone(), entry.size, entry.content));
    }
    new
}

impl State {
    /// The files importing `rel`, with how many of their import lines name it.
    fn importers_of(&self, rel: &str) -> Vec<(String, usize)> {
        let name = file_name(rel);
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        let Some(keys) = self.importers.get(stem) else {
            return Vec::new();
        };
        keys.iter()
            .filter(|k| k.0 != rel)
            .filter_map(|k| {
                let n = self
                    .files
                    .get(k)?
                    .imports
                    .iter()
                    .filter(|i| import_names(i, rel))
                    .count();
                (n > 0).then(|| (k.0.clone(), n))
            })
            .collect()
    }

    /// The files directly in `dir` (`""`: the root), in walk order: a range of the ordered
    /// files, each subfolder's files skipped in one step, so it costs the folder's own files
    /// and subfolders, not everything beneath it.
    fn direct_files(&self, dir: &str) -> Vec<(&Key, &Entry)> {
        let mut out = Vec::new();
        let mut from = if dir.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(Key(dir.to_owned()))
        };
        loop {
            let mut skip_to = None;
            for (key, entry) in self.files.range((from.clone(), Bound::Unbounded)) {
                if !within(&key.0, dir) {
                    return out;
                }
                let rest = if dir.is_empty() {
                    key.0.as_str()
                } else {
                    &key.0[dir.len() + 1..]
                };
                match rest.split_once('/') {
                    None => out.push((key, entry)),
                    Some((sub, _)) => {
                        // Past every path of the subfolder: its name, then a part no real
                        // name sorts after.
                        let mut past = String::with_capacity(key.0.len() + 8);
                        if !dir.is_empty() {
                            past.push_str(dir);
                            past.push('/');
                        }
                        past.push_str(sub);
                        past.push_str("/\u{10FFFF}\u{10FFFF}");
                        skip_to = Some(Key(past));
                        break;
                    }
                }
            }
            match skip_to {
                Some(past) if Bound::Excluded(past.clone()) != from => {
                    from = Bound::Excluded(past);
                }
                _ => return out,
            }
        }
    }

    /// Takes `entry`'s edges out of the import graph.
    fn unlink(&mut self, key: &Key, entry: &Entry) {
        for import in &entry.imports {
            unlink_one(&mut self.importers, import_stem(import), key);
        }
    }
}

fn unlink_one(importers: &mut HashMap<Box<str>, BTreeSet<Key>>, stem: &str, key: &Key) {
    if let Some(keys) = importers.get_mut(stem) {
        keys.remove(key);
        if keys.is_empty() {
            importers.remove(stem);
        }
    }
}

/// Whether a rescan must read the file again: its time moved, or is too close to its last read
/// to tell a later change in the same tick apart.
fn racy(entry: &Entry, modified: Option<SystemTime>) -> bool {
    if entry.modified != modified {
        return true;
    }
    match modified {
        None => true,
        Some(m) => m + Duration::from_secs(1) >= entry.read_at,
    }
}

/// The watcher, shared with the threads that add a watch for a new top folder.
type SharedWatcher = Arc<Mutex<notify::RecommendedWatcher>>;

/// Starts the watcher on the root: every reported path is queued for a refresh; an overflow or
/// an error queues the root.
///
/// The root is watched by itself and each top folder but `.git` recursively, rather than the
/// root recursively: a commit writes the repository's index in 8 KiB pieces, and every piece was
/// an event the watcher's thread woke for — hundreds a commit, competing with it for the cores.
/// A top folder made later is watched as it is reported (from a thread of its own: the
/// watcher's thread, which reports it, cannot also add a watch), and refreshed whole, so what
/// was made in it before its watch began is found.
fn watch(index: &Arc<Index>) -> notify::Result<SharedWatcher> {
    use notify::Watcher as _;
    let weak = Arc::downgrade(index);
    let root = index.tree.root_path.clone();
    let shared: Arc<OnceLock<Weak<Mutex<notify::RecommendedWatcher>>>> = Arc::default();
    let slot = Arc::clone(&shared);
    let handler = move |event: notify::Result<notify::Event>| {
        let Some(index) = weak.upgrade() else {
            return;
        };
        match event {
            // Opening and reading change nothing (and the index's own reads would otherwise
            // report themselves, round and round).
            Ok(event) if event.kind.is_access() && !event.need_rescan() => {}
            Ok(event) if !event.need_rescan() => {
                let named = matches!(
                    event.kind,
                    notify::EventKind::Create(_)
                        | notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
                );
                for path in &event.paths {
                    if named
                        && path.parent() == Some(root.as_path())
                        && path.file_name().is_some_and(|n| n != ".git")
                        && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
                        && let Some(watcher) = slot.get().and_then(Weak::upgrade)
                    {
                        index.lock().watching += 1;
                        watch_later(watcher, path.clone(), Arc::downgrade(&index));
                    }
                    if let Some(rel) = watched(&root, path) {
                        index.changed(&rel);
                    }
                }
            }
            Ok(_) => index.changed(""),
            Err(e) => {
                tracing::warn!(error = %e, "the workspace watcher reported an error: rescanning");
                index.changed("");
            }
        }
    };
    // Symlinks are never followed, as the walk does not follow them: a link to `/usr` must not
    // put a watch on every directory beneath it.
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher = notify::RecommendedWatcher::new(handler, config)?;
    let root = &index.tree.root_path;
    watcher.watch(root, notify::RecursiveMode::NonRecursive)?;
    let shared_watcher = Arc::new(Mutex::new(watcher));
    let _ = shared.set(Arc::downgrade(&shared_watcher));
    for entry in std::fs::read_dir(root).map_err(notify::Error::io)? {
        let entry = entry.map_err(notify::Error::io)?;
        if entry.file_name() == ".git" || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let watched = shared_watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .watch(&entry.path(), notify::RecursiveMode::Recursive);
        match watched {
            Ok(()) => {}
            // Gone since it was listed: nothing to watch.
            Err(e)
                if matches!(&e.kind, notify::ErrorKind::PathNotFound)
                    || matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) =>
                {}
            Err(e) => return Err(e),
        }
    }
    Ok(shared_watcher)
}

/// Watches the new top folder `path`, then refreshes it; a watch that cannot be added leaves the
/// index to rescans of the root (a warning says so).
fn watch_later(watcher: SharedWatcher, path: std::path::PathBuf, index: Weak<Index>) {
    let weak = index.clone();
    let spawned = std::thread::Builder::new()
        .name("writ-index-watch".into())
        .spawn(move || {
            use notify::Watcher as _;
            let added = watcher
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .watch(&path, notify::RecursiveMode::Recursive);
            let Some(index) = index.upgrade() else {
                return;
            };
            match added {
                Ok(()) => {
                    if let Some(rel) = watched(&index.tree.root_path, &path) {
                        index.changed(&rel);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "a new folder could not be watched: rescanning");
                    index.changed("");
                }
            }
            index.watch_added();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "a new folder could not be watched (no thread)");
        if let Some(index) = weak.upgrade() {
            index.changed("");
            index.watch_added();
        }
    }
}

/// The path to refresh for a reported change of `path`: `None` inside `.git`; an ignore file
/// stands for the directory it rules.
fn watched(root: &Path, path: &Path) -> Option<String> {
    let rel = crate::search::relative(root, path)?;
    if rel.split('/').any(|c| c == ".git") {
        return None;
    }
    Some(ruled_by(&rel).to_owned())
}

/// The path a change of `rel` refreshes: an ignore file stands for the folder it rules.
fn ruled_by(rel: &str) -> &str {
    match rel.rsplit_once('/') {
        Some((dir, ".gitignore" | ".ignore")) => dir,
        None if rel == ".gitignore" || rel == ".ignore" => "",
        _ => rel,
    }
}

/// A trigram's key: its three bytes, ASCII-lowercased.
fn trigram(a: u8, b: u8, c: u8) -> u32 {
    (u32::from(a.to_ascii_lowercase()) << 16)
        | (u32::from(b.to_ascii_lowercase()) << 8)
        | u32::from(c.to_ascii_lowercase())
}

/// Bits set per trigram: three probes at eight bits per distinct trigram make a false "maybe"
/// about 3 % per trigram (one probe: 12 %), for the same memory.
const PROBES: u64 = 3;

/// The bits of `gram` in a filter of `words` 64-bit words (a power of two), as (word, mask).
fn bits(gram: u32, words: usize) -> impl Iterator<Item = (usize, u64)> {
    let size = (words * 64) as u64;
    let h = u64::from(gram).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // Two halves of one hash, combined (Kirsch–Mitzenmacher): as good as independent hashes.
    let (a, b) = (h >> 32, (h & 0xFFFF_FFFF) | 1);
    (0..PROBES).map(move |i| {
        let at = a.wrapping_add(i.wrapping_mul(b)) & (size - 1);
        ((at / 64) as usize, 1 << (at % 64))
    })
}

/// The filter of a file's bytes; `None` when the searcher may not see them as they are (binary
/// data, or a byte-order mark it would transcode).
fn filter_of(bytes: &[u8]) -> Option<Box<[u64]>> {
    if bytes.contains(&0) || bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return None;
    }
    let mut grams: Vec<u32> = bytes
        .windows(3)
        .map(|w| trigram(w[0], w[1], w[2]))
        .collect();
    grams.sort_unstable();
    grams.dedup();
    let words = (grams.len() * 8).div_ceil(64).max(1).next_power_of_two();
    let mut filter = vec![0_u64; words].into_boxed_slice();
    for g in grams {
        for (word, mask) in bits(g, words) {
            filter[word] |= mask;
        }
    }
    Some(filter)
}

/// What any match of a pattern holds, as trigrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing known: every file may match.
    Anything,
    /// Every one of these trigrams.
    All(Vec<u32>),
    And(Vec<Need>),
    Or(Vec<Need>),
}

impl Need {
    /// What a match of the query holds, read from the pattern as the searcher parses it.
    pub fn of(query: &SearchQuery) -> Need {
        let pattern = if query.regex {
            query.pattern.clone()
        } else {
            regex_syntax::escape(&query.pattern)
        };
        match regex_syntax::ParserBuilder::new()
            .case_insensitive(query.ignore_case)
            .build()
            .parse(&pattern)
        {
            Ok(hir) => Need::of_hir(&hir).simplified(),
            Err(_) => Need::Anything,
        }
    }

    fn of_hir(hir: &Hir) -> Need {
        match hir.kind() {
            HirKind::Literal(lit) => Need::of_text(&lit.0),
            HirKind::Capture(c) => Need::of_hir(&c.sub),
            HirKind::Repetition(r) if r.min >= 1 => Need::of_hir(&r.sub),
            HirKind::Concat(subs) => {
                let mut needs = Vec::new();
                let mut run: Vec<u8> = Vec::new();
                for sub in subs {
                    match literal_bytes(sub) {
                        Some(bytes) => run.extend_from_slice(&bytes),
                        None => {
                            needs.push(Need::of_text(&std::mem::take(&mut run)));
                            needs.push(Need::of_hir(sub));
                        }
                    }
                }
                needs.push(Need::of_text(&run));
                Need::And(needs)
            }
            HirKind::Alternation(subs) => Need::Or(subs.iter().map(Need::of_hir).collect()),
            _ => Need::Anything,
        }
    }

    fn of_text(text: &[u8]) -> Need {
        if text.len() < 3 {
            return Need::Anything;
        }
        let mut grams: Vec<u32> = text.windows(3).map(|w| trigram(w[0], w[1], w[2])).collect();
        grams.sort_unstable();
        grams.dedup();
        Need::All(grams)
    }

    fn simplified(self) -> Need {
        match self {
            Need::And(needs) => {
                let needs: Vec<Need> = needs
                    .into_iter()
                    .map(Need::simplified)
                    .filter(|n| *n != Need::Anything)
                    .collect();
                match needs.len() {
                    0 => Need::Anything,
                    1 => needs.into_iter().next().unwrap_or(Need::Anything),
                    _ => Need::And(needs),
                }
            }
            Need::Or(needs) => {
                // Trigrams are kept in one case, so `apply|Apply|APPLY` are one branch: a file
                // the first rules out is not probed twice more.
                let mut unique: Vec<Need> = Vec::with_capacity(needs.len());
                for need in needs.into_iter().map(Need::simplified) {
                    if !unique.contains(&need) {
                        unique.push(need);
                    }
                }
                let needs = unique;
                if needs.is_empty() || needs.contains(&Need::Anything) {
                    Need::Anything
                } else {
                    Need::Or(needs)
                }
            }
            other => other,
        }
    }

    fn holds(&self, filter: &[u64]) -> bool {
        match self {
            Need::Anything => true,
            Need::All(grams) => grams
                .iter()
                .all(|g| bits(*g, filter.len()).all(|(word, mask)| filter[word] & mask != 0)),
            Need::And(needs) => needs.iter().all(|n| n.holds(filter)),
            Need::Or(needs) => needs.iter().any(|n| n.holds(filter)),
        }
    }
}

/// The bytes `hir` matches when it matches exactly one text up to ASCII case (a literal, or a
/// class such as `[aA]` that case-insensitivity makes of one); `None` otherwise.
fn literal_bytes(hir: &Hir) -> Option<Vec<u8>> {
    match hir.kind() {
        HirKind::Literal(lit) => Some(lit.0.to_vec()),
        HirKind::Class(Class::Unicode(class)) => {
            let mut chars = Vec::new();
            for range in class.ranges() {
                for c in range.start()..=range.end() {
                    chars.push(c);
                    if chars.len() > 2 {
                        return None;
                    }
                }
            }
            one_ascii(chars.into_iter().map(u32::from))
        }
        HirKind::Class(Class::Bytes(class)) => {
            let mut bytes = Vec::new();
            for range in class.ranges() {
                for b in range.start()..=range.end() {
                    bytes.push(b);
                    if bytes.len() > 2 {
                        return None;
                    }
                }
            }
            one_ascii(bytes.into_iter().map(u32::from))
        }
        _ => None,
    }
}

/// The one ASCII byte that every code point of `points` is, up to case.
fn one_ascii(points: impl Iterator<Item = u32>) -> Option<Vec<u8>> {
    let mut one: Option<u8> = None;
    for p in points {
        let b = u8::try_from(p).ok().filter(u8::is_ascii)?;
        let lower = b.to_ascii_lowercase();
        if one.is_some_and(|o| o != lower) {
            return None;
        }
        one = Some(lower);
    }
    one.map(|b| vec![b])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use writ_core::RepoPath;

    fn query(pattern: &str, regex: bool, ignore_case: bool) -> SearchQuery {
        SearchQuery {
            pattern: pattern.into(),
            regex,
            ignore_case,
            dir: RepoPath::root(),
            glob: None,
            context_lines: 0,
            max_matches: 100,
            max_files: 100,
            max_file_bytes: 1 << 20,
            time_limit: Duration::from_secs(5),
            freshness: Freshness::Current,
            keep_compiled: false,
        }
    }

    fn may_match(pattern: &str, regex: bool, ignore_case: bool, text: &str) -> bool {
        let filter = filter_of(text.as_bytes()).unwrap();
        Need::of(&query(pattern, regex, ignore_case)).holds(&filter)
    }

    #[test]
    fn keys_sort_as_the_walk_yields_paths() {
        let mut keys = [Key("a.py".into()), Key("a/b.py".into()), Key("B".into())];
        keys.sort();
        let order: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        assert_eq!(order, ["B", "a/b.py", "a.py"]);
    }

    #[test]
    fn a_literal_needs_its_trigrams_and_case_folding_keeps_them() {
        assert!(may_match(
            "apply_discount",
            false,
            false,
            "def apply_discount(x):"
        ));
        assert!(may_match("APPLY", false, true, "def apply_discount(x):"));
        assert!(!may_match(
            "apply_discount",
            false,
            false,
            "def something_else_entirely(x):"
        ));
    }

    #[test]
    fn an_alternation_needs_one_branch_and_an_optional_part_nothing() {
        assert_eq!(
            Need::of(&query("(foo|ba)x", true, false)),
            Need::Anything,
            "a branch too short to need a trigram lets every file through"
        );
        assert!(may_match(
            r"\bdef (parse|merge)_\w+",
            true,
            false,
            "def merge_all()"
        ));
        assert!(!may_match(
            r"\bdef (parse|merge)_\w+",
            true,
            false,
            "def split_all()"
        ));
        assert_eq!(Need::of(&query("(abc)?", true, false)), Need::Anything);
    }

    #[test]
    fn branches_that_differ_only_in_case_are_one_branch() {
        let need = Need::of(&query("(?-u)tariff|Tariff|TARIFF|levy|LEVY", true, false));
        let Need::Or(branches) = &need else {
            panic!("an alternation: {need:?}");
        };
        assert_eq!(branches.len(), 2, "{need:?}");
        assert!(may_match(
            "(?-u)tariff|Tariff|TARIFF",
            true,
            false,
            "class TariffTable:"
        ));
        assert!(!may_match(
            "(?-u)tariff|Tariff|TARIFF",
            true,
            false,
            "class Schedule:"
        ));
    }

    #[test]
    fn a_case_insensitive_class_that_may_be_another_letter_breaks_the_run() {
        // `k` also matches the Kelvin sign: the run stops there.
        assert_eq!(
            Need::of(&query("kabc", true, true)),
            Need::All(vec![trigram(b'a', b'b', b'c')])
        );
    }

    #[test]
    fn binary_files_and_byte_order_marks_are_never_ruled_out() {
        assert!(filter_of(b"ab\0cd").is_none());
        assert!(filter_of(&[0xFF, 0xFE, b'a', 0]).is_none());
        assert!(filter_of(b"plain text").is_some());
    }

    #[test]
    fn an_ignore_file_stands_for_its_directory_and_git_is_not_watched() {
        let root = Path::new("/r");
        assert_eq!(
            watched(root, Path::new("/r/a/.gitignore")),
            Some("a".into())
        );
        assert_eq!(
            watched(root, Path::new("/r/.gitignore")),
            Some(String::new())
        );
        assert_eq!(watched(root, Path::new("/r/.git/index")), None);
        assert_eq!(
            watched(root, Path::new("/r/src/a.py")),
            Some("src/a.py".into())
        );
    }
}
