//! Keeping the index current: the updater thread applies each queued change — a refresh of
//! one path, read in place where it can be, or walked — and keeps the import graph and the map's
//! look-ups in step with the files.

use super::*;
use crate::trigrams::filter_of;

impl Index {
    /// The updater: applies queued changes in order until the index is dropped.
    pub(super) fn update(&self) {
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

impl State {
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
