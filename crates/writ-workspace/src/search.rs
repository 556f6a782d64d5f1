//! Searching and walking the workspace with ripgrep's crates: `ignore` walks the tree the way `rg`
//! does (`.gitignore` and `.ignore` files, without needing a git repository), `grep-searcher`
//! and `grep-regex` search each file line by line.
//!
//! The walk starts at the root even when a subdirectory is asked for, so that the root's
//! `.gitignore` applies beneath it, and prunes what lies elsewhere; it never reads an ignore
//! file above the root. Symlinks are not followed, `.git` and protected paths are pruned, and
//! every file is opened through the root's capability (`RESOLVE_BENEATH`), so nothing outside
//! `REPO_DIR` is read even if the tree changes during the walk.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cap_std::fs::Dir;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use ignore::overrides::{Override, OverrideBuilder};
use writ_core::search::{
    SearchError, SearchMatch, SearchQuery, SearchResults, SearchStop, Walk, WalkedFile,
};
use writ_core::{RepoPath, WorkspaceError};

use crate::protect::ProtectedPaths;
use crate::trigrams::Need;

/// A matching or context line longer than this many characters is cut (minified files would
/// otherwise fill an answer with one line).
const MAX_LINE_CHARS: usize = 400;
/// The compiled regex's size bounds: a hostile pattern fails to compile instead of eating memory.
const REGEX_SIZE_LIMIT: usize = 10 << 20;

/// What a walk needs of the workspace.
#[derive(Clone)]
pub(crate) struct Tree {
    pub root_path: PathBuf,
    pub root: Arc<Dir>,
    pub protected: Arc<ProtectedPaths>,
}

impl Tree {
    /// The walker over `dir`, yielding regular files only (with their path from the root).
    fn files(&self, dir: &RepoPath) -> impl Iterator<Item = (String, u64)> + use<> {
        self.stats(dir.as_str(), true).map(|f| (f.rel, f.size))
    }

    /// The walker over `wanted` (a directory or a file, from the root; empty for the root),
    /// yielding the regular files there with their size and modification time; in walk order
    /// when `sorted`. Unsorted costs far less on the way down: the walker reads a directory it
    /// will prune whole before pruning it only to sort it, so a sorted walk to one file reads
    /// every sibling folder on its path.
    pub fn stats(&self, wanted: &str, sorted: bool) -> impl Iterator<Item = FileStat> + use<> {
        let root_path = self.root_path.clone();
        let protected = Arc::clone(&self.protected);
        let wanted = wanted.to_owned();
        let filter_root = root_path.clone();
        let mut builder = ignore::WalkBuilder::new(&root_path);
        builder
            .hidden(false)
            .parents(false)
            .require_git(false)
            .git_global(false)
            .follow_links(false)
            .filter_entry(move |entry| {
                let Some(rel) = relative(&filter_root, entry.path()) else {
                    return true; // the root itself
                };
                if rel.is_empty() {
                    return true;
                }
                if entry.file_name() == ".git" || protected.covers(&rel) {
                    return false;
                }
                // On the way to the directory asked for, or beneath it.
                within(&rel, &wanted) || (is_dir(entry) && within(&wanted, &rel))
            });
        if sorted {
            builder.sort_by_file_name(|a, b| a.cmp(b));
        }
        builder.build().filter_map(move |entry| {
            let entry = entry.ok()?;
            let kind = entry.file_type()?;
            if !kind.is_file() {
                return None;
            }
            let rel = relative(&root_path, entry.path())?;
            if rel.is_empty() {
                return None;
            }
            let meta = entry.metadata().ok();
            Some(FileStat {
                rel,
                size: meta.as_ref().map_or(0, |m| m.len()),
                modified: meta.and_then(|m| m.modified().ok()),
            })
        })
    }

    pub fn walk(
        &self,
        dir: &RepoPath,
        glob: Option<&str>,
        max_files: usize,
    ) -> Result<Walk, SearchError> {
        let glob = glob.map(|g| self.glob(g)).transpose()?;
        self.existing_dir(dir)?;
        Ok(self.walk_in(self.files(dir), glob.as_ref(), max_files))
    }

    /// The walk's answer from `files` (in walk order, beneath the directory asked for).
    pub fn walk_in(
        &self,
        files: impl Iterator<Item = (String, u64)>,
        glob: Option<&Override>,
        max_files: usize,
    ) -> Walk {
        let mut walk = Walk::default();
        for (rel, size) in files {
            if let Some(glob) = &glob
                && !glob_matches(glob, &rel)
            {
                continue;
            }
            if walk.files.len() == max_files {
                walk.truncated = true;
                break;
            }
            if let Ok(path) = RepoPath::parse_nonempty(&rel) {
                walk.files.push(WalkedFile { path, size });
            }
        }
        walk
    }

    /// Refuses a directory that is not there (or not a directory) before walking it.
    pub fn existing_dir(&self, dir: &RepoPath) -> Result<(), WorkspaceError> {
        if dir.is_root() {
            return Ok(());
        }
        let shown = dir.to_string();
        let meta = self
            .root
            .symlink_metadata(dir.as_str())
            .map_err(|e| crate::errors::from_io(&shown, e))?;
        if meta.is_dir() {
            Ok(())
        } else {
            Err(WorkspaceError::NotADirectory { path: shown })
        }
    }

    pub fn search(&self, query: &SearchQuery) -> Result<SearchResults, SearchError> {
        let started = Instant::now();
        let Prepared { matcher, glob, .. } = self.prepare(query)?;
        let files = self
            .files(&query.dir)
            .filter(|(rel, _)| glob.as_ref().is_none_or(|g| glob_matches(g, rel)))
            .map(|(rel, size)| Candidate::File { rel, size });
        Ok(self.search_in(query, matcher, files, started))
    }

    /// The search's matcher and glob, checked, and its directory found.
    pub fn prepare(&self, query: &SearchQuery) -> Result<Prepared, SearchError> {
        let pattern = (query.pattern.clone(), query.regex, query.ignore_case);
        let Compiled { matcher, need } =
            kept(&PATTERNS, query.keep_compiled, pattern, || compile(query))?;
        let glob = query
            .glob
            .as_deref()
            .map(|g| {
                let key = (self.root_path.clone(), g.to_owned());
                kept(&GLOBS, query.keep_compiled, key, || self.glob(g))
            })
            .transpose()?;
        self.existing_dir(&query.dir)?;
        Ok(Prepared {
            matcher,
            glob,
            need,
        })
    }

    /// Searches `files` (in walk order, within the directory and glob asked for), each read
    /// unless the index has ruled it out.
    pub fn search_in(
        &self,
        query: &SearchQuery,
        matcher: grep_regex::RegexMatcher,
        files: impl Iterator<Item = Candidate>,
        started: Instant,
    ) -> SearchResults {
        // Built at the first file read: it allocates a zeroed 64 KiB buffer, and with the index
        // a search often rules every file out.
        let mut searcher: Option<Searcher> = None;

        let mut results = SearchResults {
            matches: Vec::new(),
            files_searched: 0,
            files_matched: 0,
            files_skipped: 0,
            stopped: None,
            elapsed_ms: 0,
            files: Vec::new(),
        };
        for candidate in files {
            if started.elapsed() >= query.time_limit {
                results.stopped = Some(SearchStop::TimeLimit);
                break;
            }
            if results.files_searched == query.max_files {
                results.stopped = Some(SearchStop::MaxFiles);
                break;
            }
            let (rel, size) = match candidate {
                Candidate::RuledOut(n) => {
                    // As many files counted one by one: the bound stops the search at the
                    // file past it.
                    let room = query.max_files - results.files_searched;
                    results.files_searched += n.min(room);
                    if n > room {
                        results.stopped = Some(SearchStop::MaxFiles);
                        break;
                    }
                    continue;
                }
                Candidate::File { rel, size } => (rel, size),
            };
            if size > query.max_file_bytes {
                results.files_skipped += 1;
                continue;
            }
            let Some(bytes) = self.read(&rel, query.max_file_bytes) else {
                continue; // gone, or turned into something else, since the walk saw it
            };
            results.files_searched += 1;
            let mut sink = Collect {
                path: &rel,
                left: query.max_matches - results.matches.len(),
                found: Vec::new(),
                before: Vec::new(),
                binary: false,
            };
            let searcher = searcher.get_or_insert_with(|| {
                SearcherBuilder::new()
                    .line_number(true)
                    .before_context(query.context_lines)
                    .after_context(query.context_lines)
                    .binary_detection(BinaryDetection::quit(0))
                    .build()
            });
            if searcher.search_slice(&matcher, &bytes, &mut sink).is_err() {
                continue;
            }
            if sink.binary {
                results.files_skipped += 1;
                continue;
            }
            if !sink.found.is_empty() {
                results.files_matched += 1;
                results.matches.append(&mut sink.found);
            }
            if results.matches.len() >= query.max_matches {
                results.stopped = Some(SearchStop::MaxMatches);
                break;
            }
        }
        results.rank_files();
        results.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        results
    }

    /// `glob` as a matcher of paths from the root, gitignore-style (`*.py` anywhere, `src/*.py`
    /// anchored).
    pub fn glob(&self, glob: &str) -> Result<Override, SearchError> {
        let mut builder = OverrideBuilder::new(&self.root_path);
        builder
            .add(glob)
            .map_err(|e| SearchError::Glob(e.to_string()))?;
        builder
            .build()
            .map_err(|e| SearchError::Glob(e.to_string()))
    }

    /// The file's bytes through the root's capability, if it is still a regular file no larger
    /// than `max_bytes`.
    pub fn read(&self, rel: &str, max_bytes: u64) -> Option<Vec<u8>> {
        let mut options = cap_std::fs::OpenOptions::new();
        options.read(true);
        let file = self.root.open_with(rel, &options).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() > max_bytes {
            return None;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(max_bytes).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }
}

/// A regular file as the walk finds it.
pub(crate) struct FileStat {
    /// From the root, with `/` separators.
    pub rel: String,
    pub size: u64,
    pub modified: Option<std::time::SystemTime>,
}

/// Compiled patterns and globs kept for searches that ask for it ([`SearchQuery::keep_compiled`]):
/// the repository map searches for the same few patterns (a module's name, a description's
/// words, `*.<ext>`) file after file, and compiling one costs more than an indexed search.
type Kept<K, V> = std::sync::LazyLock<Mutex<HashMap<K, V>>>;
static PATTERNS: Kept<PatternKey, Compiled> = std::sync::LazyLock::new(Mutex::default);
static GLOBS: Kept<(PathBuf, String), Override> = std::sync::LazyLock::new(Mutex::default);
/// How many of each are kept before the set starts over.
const KEPT: usize = 256;

/// A pattern as compiled: its text, whether it is a regex, whether case is ignored.
type PatternKey = (String, bool, bool);

/// A pattern compiled for the searcher, and what the index reads from it.
#[derive(Clone)]
struct Compiled {
    matcher: RegexMatcher,
    need: Arc<Need>,
}

/// `make()`, or what it made before for `key` when `keep` (kept in `cache` then).
fn kept<K: std::hash::Hash + Eq, V: Clone>(
    cache: &Kept<K, V>,
    keep: bool,
    key: K,
    make: impl FnOnce() -> Result<V, SearchError>,
) -> Result<V, SearchError> {
    if !keep {
        return make();
    }
    if let Ok(kept) = cache.lock()
        && let Some(value) = kept.get(&key)
    {
        return Ok(value.clone());
    }
    let value = make()?;
    if let Ok(mut kept) = cache.lock() {
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(key, value.clone());
    }
    Ok(value)
}

/// The query's pattern compiled, with what the index reads from it.
fn compile(query: &SearchQuery) -> Result<Compiled, SearchError> {
    let matcher = RegexMatcherBuilder::new()
        .fixed_strings(!query.regex)
        .case_insensitive(query.ignore_case)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build(&query.pattern)
        .map_err(|e| SearchError::Pattern(e.to_string()))?;
    Ok(Compiled {
        matcher,
        need: Arc::new(Need::of(query)),
    })
}

/// A search's compiled pattern and glob.
pub(crate) struct Prepared {
    pub matcher: grep_regex::RegexMatcher,
    pub glob: Option<Override>,
    /// What any match holds, for the index to rule files out.
    pub need: Arc<Need>,
}

/// A file in a search's scope: to be read, or a run of files known by the index to hold no
/// match.
pub(crate) enum Candidate {
    File { rel: String, size: u64 },
    RuledOut(usize),
}

/// `path` from the root, with `/` separators; `None` outside it or when not UTF-8.
pub(crate) fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

/// Whether `path` is `dir` or lies beneath it (the root holds everything).
pub(crate) fn within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

fn is_dir(entry: &ignore::DirEntry) -> bool {
    entry.file_type().is_some_and(|t| t.is_dir())
}

/// Whether `rel` (from the root) matches `glob`: a relative path is matched as it is, without
/// building the full path of every file a search looks at.
pub(crate) fn glob_matches(glob: &Override, rel: &str) -> bool {
    glob.matched(rel, false).is_whitelist()
}

/// A search's glob as the index tests it: `*.ext` (what the repository map asks, and the usual
/// glob) as a comparison of the name's end, anything else through the glob matcher.
pub(crate) enum PathFilter<'a> {
    Any,
    /// `.ext`, with its dot: the name ends with it (gitignore's `*` matches an empty name too).
    Suffix(String),
    Glob(&'a Override),
}

impl<'a> PathFilter<'a> {
    pub fn of(pattern: Option<&str>, glob: Option<&'a Override>) -> PathFilter<'a> {
        match (pattern, glob) {
            (_, None) => PathFilter::Any,
            (Some(pattern), Some(glob)) => match pattern.strip_prefix("*.") {
                Some(ext)
                    if !ext.is_empty()
                        && ext
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
                {
                    PathFilter::Suffix(format!(".{ext}"))
                }
                _ => PathFilter::Glob(glob),
            },
            (None, Some(glob)) => PathFilter::Glob(glob),
        }
    }

    pub fn matches(&self, rel: &str) -> bool {
        match self {
            PathFilter::Any => true,
            PathFilter::Suffix(suffix) => rel.ends_with(suffix.as_str()),
            PathFilter::Glob(glob) => glob_matches(glob, rel),
        }
    }
}

/// Collects one file's matching lines, each with the context lines that lead to it and follow it.
struct Collect<'a> {
    path: &'a str,
    /// Matches still wanted across the whole search.
    left: usize,
    found: Vec<SearchMatch>,
    /// Context lines seen since the last match, waiting for the next one.
    before: Vec<String>,
    binary: bool,
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = mat.line_number().unwrap_or(0);
        for (offset, line) in mat.lines().enumerate() {
            if self.found.len() == self.left {
                return Ok(false);
            }
            self.found.push(SearchMatch {
                path: self.path.to_owned(),
                line_number: first + offset as u64,
                line: shown_line(line),
                before: std::mem::take(&mut self.before),
                after: Vec::new(),
            });
        }
        Ok(self.found.len() < self.left)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, io::Error> {
        let line = shown_line(context.bytes());
        match (context.kind(), self.found.last_mut()) {
            (SinkContextKind::After, Some(last)) => last.after.push(line),
            (SinkContextKind::Before, _) => self.before.push(line),
            _ => {}
        }
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        self.before.clear();
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A line as text without its ending, cut at [`MAX_LINE_CHARS`].
fn shown_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches(['\n', '\r']);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!(
            "{}… [line cut at {MAX_LINE_CHARS} characters]",
            &text[..cut]
        ),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn within_means_the_directory_or_beneath_it() {
        assert!(within("src/a.rs", "src"));
        assert!(within("src", "src"));
        assert!(!within("srcx/a.rs", "src"));
        assert!(within("anything", ""));
    }

    #[test]
    fn only_searches_that_ask_keep_their_compiled_pattern_and_glob() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree {
            root_path: dir.path().to_owned(),
            root: Arc::new(
                Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority()).unwrap(),
            ),
            protected: Arc::new(ProtectedPaths::default()),
        };
        let query = |pattern: &str, keep_compiled| SearchQuery {
            pattern: pattern.to_owned(),
            regex: true,
            ignore_case: false,
            dir: RepoPath::root(),
            glob: Some(format!("*.{pattern}")),
            context_lines: 0,
            max_matches: 1,
            max_files: 1,
            max_file_bytes: 1,
            time_limit: std::time::Duration::from_secs(1),
            freshness: writ_core::search::Freshness::Current,
            keep_compiled,
        };
        let kept_pattern = |p: &str| {
            PATTERNS
                .lock()
                .unwrap()
                .contains_key(&(p.to_owned(), true, false))
        };
        let kept_glob = |p: &str| {
            let key = (dir.path().to_owned(), format!("*.{p}"));
            GLOBS.lock().unwrap().contains_key(&key)
        };
        // A caller's pattern: compiled for its search alone.
        tree.prepare(&query("callers", false)).unwrap();
        assert!(!kept_pattern("callers") && !kept_glob("callers"));
        // The map's: kept, and the next search takes the same.
        tree.prepare(&query("maps", true)).unwrap();
        assert!(kept_pattern("maps") && kept_glob("maps"));
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        let long = "x".repeat(1000);
        let shown = shown_line(long.as_bytes());
        assert!(shown.starts_with(&"x".repeat(MAX_LINE_CHARS)));
        assert!(shown.contains("line cut"));
        assert_eq!(shown_line(b"ab\r\n"), "ab");
    }
}
