//! The index's answers to the repository map: the files that may rank for one file, found by
//! look-ups (names, tests, folder, importers, a fill of its top folder) instead of a walk.

use super::*;

impl Index {
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
pub(super) struct Names {
    /// By file name without its last extension.
    stems: HashMap<Box<str>, BTreeSet<Key>>,
    /// The files whose name (ASCII-lowercased) holds `test`.
    tests: BTreeSet<Key>,
    /// How many files have each extension, lowercased (`""`: none).
    extensions: HashMap<Box<str>, usize>,
}

impl Names {
    /// Files a new file; returns the bytes it adds.
    pub(super) fn add(&mut self, key: &Key) -> usize {
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
    pub(super) fn remove(&mut self, key: &Key) -> usize {
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
}
