//! Searching the workspace and walking its files: what `GET /search`, the `search_files` tool and
//! the prompts' repository context ask of a [`crate::Workspace`].
//!
//! Both honour `.gitignore` (and `.ignore`) files, skip what is protected (writ's own files,
//! `WRIT_PROTECTED_PATHS`) and never follow a symlink, so they show what a write could reach and
//! nothing else. Every answer is bounded; a bound reached says so instead of failing.

use std::time::Duration;

use serde::Serialize;

use crate::path::RepoPath;
use crate::workspace::WorkspaceError;

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
