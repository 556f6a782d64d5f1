//! Searching the workspace and walking its files: what `GET /search`, the `search_files` tool and
//! the prompts' repository context ask of a [`crate::Workspace`].
//!
//! Both honour `.gitignore` (and `.ignore`) files, skip what is protected (writ's own files,
//! `WRIT_PROTECTED_PATHS`) and never follow a symlink, so they show what a write could reach and
//! nothing else. Every answer is bounded; a bound reached says so instead of failing.

use std::time::Duration;

use serde::Serialize;

use crate::path::RepoPath;
use crate::workspace::error::WorkspaceError;

/// One search, validated: the pattern is non-empty and the bounds are within their limits.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    pub pattern: String,
    /// `false`: the pattern is a literal string.
    pub regex: bool,
    pub ignore_case: bool,
    /// The directory searched (the root when empty).
    pub dir: RepoPath,
    /// Only files whose path (from the workspace root) matches this gitignore-style glob.
    pub glob: Option<String>,
    /// Lines shown before and after each matching line.
    pub context_lines: usize,
    /// Matching lines returned at most; the search stops there.
    pub max_matches: usize,
    /// Files looked at at most (matched or not).
    pub max_files: usize,
    /// Files larger than this are skipped.
    pub max_file_bytes: u64,
    /// The search stops when this much time has passed.
    pub time_limit: Duration,
    /// Whether an indexed answer waits for the changes the index is still applying.
    pub freshness: Freshness,
    /// Whether the compiled pattern and glob are kept for the next search that asks the same:
    /// for writ's own searches that repeat (the repository map's), never for a caller's pattern,
    /// so that no caller can fill memory with compiled patterns.
    pub keep_compiled: bool,
}

/// How current an answer from the workspace's index must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Freshness {
    /// Every change reported before the question is applied first (within a bound; past it the
    /// tree is read instead): a caller's search is never answered from a stale view.
    #[default]
    Current,
    /// The index as it stands, without waiting: the repository map's searches, made right after
    /// its look-ups waited (briefly) for the index; the map says how many changes were still
    /// pending ([`MapFiles::pending`]).
    AsIndexed,
}

/// Why a search could not start.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The regular expression does not compile (or the literal is not searchable).
    #[error("{0}")]
    Pattern(String),
    /// The path glob is not a glob.
    #[error("{0}")]
    Glob(String),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SearchMatch {
    pub path: String,
    /// 1-based.
    pub line_number: u64,
    /// The line, without its ending; a very long line is cut with a marker.
    pub line: String,
    /// The lines just before it (not repeated when they belong to the previous match's context).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    /// The lines just after it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// Why a search stopped before it had looked at every file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchStop {
    MaxMatches,
    MaxFiles,
    TimeLimit,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SearchResults {
    pub matches: Vec<SearchMatch>,
    pub files_searched: usize,
    pub files_matched: usize,
    /// Files skipped for their size (over `max_file_bytes`) or for holding binary data.
    pub files_skipped: usize,
    /// Present when a bound stopped the search: the results are then partial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<SearchStop>,
    pub elapsed_ms: u64,
    /// The files of `matches`, ranked ([`SearchResults::rank_files`]).
    pub files: Vec<FileMatches>,
}

/// One file of a search's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct FileMatches {
    pub path: String,
    /// Its lines among the answer's matches.
    pub matches: usize,
    /// Whether one of them defines something ([`is_definition`]): where the name is made, not
    /// used.
    pub defines: bool,
}

impl SearchResults {
    /// Fills `files` from `matches`: the files where a matching line defines something first,
    /// then by how many lines matched, then in the order the search found them.
    pub fn rank_files(&mut self) {
        let mut files: Vec<FileMatches> = Vec::new();
        for m in &self.matches {
            let defines = is_definition(&m.line);
            match files.last_mut() {
                // A file's matches are contiguous: the search reads one file at a time.
                Some(f) if f.path == m.path => {
                    f.matches += 1;
                    f.defines |= defines;
                }
                _ => files.push(FileMatches {
                    path: m.path.clone(),
                    matches: 1,
                    defines,
                }),
            }
        }
        // A stable sort: equal files keep the search's order.
        files.sort_by(|a, b| b.defines.cmp(&a.defines).then(b.matches.cmp(&a.matches)));
        self.files = files;
    }
}

/// Whether `line` defines something: it opens (after indentation, and `export`, `pub`, `async`
/// or `static`) with a keyword that makes a name — `def`, `class`, `fn`, `function`, `struct`,
/// `enum`, `trait`, `impl`, `interface`, `type`, `const`, `let`, `var`, `func`, `mod` — or is a
/// constant's assignment at the top level (`MAX_RETRIES = 3`).
pub fn is_definition(line: &str) -> bool {
    const MAKERS: &[&str] = &[
        "def",
        "class",
        "fn",
        "function",
        "struct",
        "enum",
        "trait",
        "impl",
        "interface",
        "type",
        "const",
        "let",
        "var",
        "func",
        "mod",
    ];
    const MODIFIERS: &[&str] = &["export", "pub", "async", "static", "default", "unsafe"];
    let mut words = line.split_whitespace();
    let top_level = !line.starts_with(char::is_whitespace);
    let Some(mut word) = words.next() else {
        return false;
    };
    if top_level
        && let Some((name, _)) = line.split_once('=')
        && !line.contains("==")
    {
        let name = name.trim().trim_end_matches(':');
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return true;
        }
    }
    loop {
        let bare = word.split('(').next().unwrap_or(word);
        if MAKERS.contains(&bare) {
            // `type = 3` assigns to a variable named like a keyword.
            return words
                .next()
                .is_some_and(|name| !name.starts_with(['=', ':', '.']));
        }
        if !MODIFIERS.contains(&bare) {
            return false;
        }
        match words.next() {
            Some(next) => word = next,
            None => return false,
        }
    }
}

/// A file of the workspace, as a walk finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkedFile {
    pub path: RepoPath,
    pub size: u64,
}

/// The files beneath a directory, in path order, and whether there were more than asked for.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    pub files: Vec<WalkedFile>,
    pub truncated: bool,
}

/// The module paths a file's own import lines name (`from a.b import c` → `a/b`, `import x`,
/// `from './y'` → `y`, `mod z;` → `z`): the edges of the import graph the repository map ranks by.
pub fn imports_in(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines().map(str::trim) {
        let module = if let Some(rest) = line.strip_prefix("from ") {
            rest.split_whitespace().next()
        } else if line.starts_with("import") && line.contains(" from ") {
            line.rsplit(" from ").next()
        } else if let Some(rest) = line.strip_prefix("import ") {
            rest.split([' ', ',', ';']).next()
        } else if let Some(rest) = line.strip_prefix("mod ") {
            rest.strip_suffix(';')
        } else {
            None
        };
        if let Some(module) = module {
            let m = module
                .trim_matches(['\'', '"', ';', ' '])
                .trim_start_matches("./")
                .trim_start_matches('.');
            if !m.is_empty() && !m.starts_with('{') {
                found.push(if m.contains('/') {
                    m.to_owned()
                } else {
                    m.replace('.', "/")
                });
            }
        }
    }
    found
}

/// Whether `import` (a module as [`imports_in`] gives it) names the file at `path`: the path
/// without its extension is the module, or ends with it after a `/`.
pub fn import_names(import: &str, path: &str) -> bool {
    let (dir, name) = path.rsplit_once('/').map_or(("", path), |(d, n)| (d, n));
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    let module = if dir.is_empty() {
        stem.to_owned()
    } else {
        format!("{dir}/{stem}")
    };
    !import.is_empty()
        && (module == import
            || module
                .strip_suffix(import)
                .is_some_and(|rest| rest.ends_with('/')))
}

/// The last part of a module's path: the file name (without extension) of the files it may
/// name, by which the index files its importers.
pub fn import_stem(import: &str) -> &str {
    import.rsplit('/').next().unwrap_or(import)
}

/// Whether `import` (a module as [`imports_in`] gives it) names the file at `path`, as the
/// repository map reads it: [`import_names`], or the path itself written out (`'./util/money.js'`),
/// at the root or after a `/`. A leading `/` is what is left of `../`: the module is then named
/// from some folder, as a suffix.
pub fn module_names(import: &str, path: &str) -> bool {
    let import = import.trim_start_matches('/');
    !import.is_empty()
        && (import_names(import, path)
            || path == import
            || path
                .strip_suffix(import)
                .is_some_and(|rest| rest.ends_with('/')))
}

/// The names under which an index files `path` for [`module_names`]: its file name without its
/// extension, and the module's last part as written (`money.js` when imported with it).
pub fn module_keys(import: &str) -> [&str; 2] {
    let last = import_stem(import.trim_start_matches('/'));
    [last, last.rsplit_once('.').map_or(last, |(s, _)| s)]
}

/// A file's content as an index keys it (64 bits of SipHash): the repository map keeps each
/// outline under it, so an unchanged file costs no read.
pub fn content_key(bytes: &[u8]) -> u64 {
    use std::hash::Hasher as _;
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// What the repository map asks of an index instead of a walk: the files that may rank for the
/// file being written, found by look-ups whose cost is their answer's size, never the tree's.
#[derive(Debug, Clone)]
pub struct MapQuery {
    /// The file being written.
    pub path: RepoPath,
    /// The modules it (and its batch) imports: the files they name ([`module_names`]).
    pub modules: Vec<String>,
    /// The batch's files: left out of [`MapFiles::extensions`].
    pub exclude: Vec<RepoPath>,
    /// Files of its extension beneath its top folder, in walk order, beyond every other file
    /// found: the ties the ranking orders by path.
    pub fill: usize,
}

/// The index's answer to a [`MapQuery`].
#[derive(Debug, Clone, Default)]
pub struct MapFiles {
    /// Every file that may rank: the modules' files, the file's tests (a name holding `test` and
    /// the file's stem), the files of its folder, and the fill; in no particular order.
    pub files: Vec<WalkedFile>,
    /// The files whose import lines name the file, with how many lines do
    /// ([`crate::Workspace::importers`]).
    pub importers: Vec<(RepoPath, usize)>,
    /// The [`content_key`] of each file of `files` and `importers` the index read, by path.
    pub contents: std::collections::HashMap<String, u64>,
    /// How many files of the workspace (the batch's left out) have each extension (lowercased;
    /// `""` for none): whether there is anything to outline at all.
    pub extensions: Vec<(String, usize)>,
    /// Changes reported to the index but not yet applied when it answered (the map does not
    /// wait for them: [`Freshness::AsIndexed`]).
    pub pending: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_told_from_uses() {
        for line in [
            "def apply_discount(amount):",
            "    async def fetch(self):",
            "class Ledger:",
            "pub(crate) fn parse(x: &str) {",
            "export default function total(items) {",
            "const LIMIT = 3;",
            "MAX_RETRIES = 3",
            "type Order = { id: string }",
        ] {
            assert!(is_definition(line), "{line}");
        }
        for line in [
            "    total = apply_discount(amount)",
            "from shop.pricing import apply_discount",
            "type = 3",
            "if MAX_RETRIES == 3:",
            "",
        ] {
            assert!(!is_definition(line), "{line}");
        }
    }

    #[test]
    fn files_with_a_definition_rank_before_files_that_only_use_it() {
        let m = |path: &str, line: &str| SearchMatch {
            path: path.into(),
            line_number: 1,
            line: line.into(),
            before: Vec::new(),
            after: Vec::new(),
        };
        let mut results = SearchResults {
            matches: vec![
                m("a.py", "x = total(1)"),
                m("a.py", "y = total(2)"),
                m("b.py", "def total(n):"),
                m("c.py", "z = total(3)"),
            ],
            files_searched: 3,
            files_matched: 3,
            files_skipped: 0,
            stopped: None,
            elapsed_ms: 0,
            files: Vec::new(),
        };
        results.rank_files();
        let ranked: Vec<(&str, usize, bool)> = results
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.matches, f.defines))
            .collect();
        assert_eq!(
            ranked,
            [("b.py", 1, true), ("a.py", 2, false), ("c.py", 1, false)]
        );
    }
}
