//! The search behind `GET /search` and the `search_files` tool: lines of the workspace that match a literal string
//! or a regular expression, with their line numbers and a little context.
//!
//! A `GET` with a query string, like `GET /files`: a search changes nothing, can be repeated and
//! linked, and its parameters are short. The walk honours `.gitignore`, never shows protected
//! paths (writ's own files, `WRIT_PROTECTED_PATHS`) or anything a symlink leads to, and runs on
//! the blocking pool (`Workspace::search`). Every bound reached is reported in `stopped`, never
//! as an error.

use std::time::Duration;

use serde::Deserialize;
use writ_core::search::{Freshness, SearchError, SearchQuery, SearchResults};
use writ_core::{RepoPath, Workspace, WorkspaceError};

use crate::error::{ApiError, ErrorCode, path_error, workspace_error};

/// Matching lines answered when the caller does not say.
pub const DEFAULT_MATCHES: usize = 50;
/// The most matching lines one search answers.
pub const MAX_MATCHES: usize = 500;
/// Context lines before and after each match when the caller does not say.
pub const DEFAULT_CONTEXT_LINES: usize = 2;
pub const MAX_CONTEXT_LINES: usize = 10;
/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1_000;
/// Files one search looks at at most: a search of a huge tree stops and says so.
pub const MAX_FILES: usize = 100_000;
/// Files larger than this are skipped (generated bundles, data dumps).
pub const MAX_FILE_BYTES: u64 = 2 << 20;
/// How long one search may take before it stops and answers what it found.
pub const TIME_LIMIT: Duration = Duration::from_secs(5);

/// The query of `GET /search`, and the input of the `search_files` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to find on a line: a literal string, or a regular expression (Rust `regex` syntax)
    /// when `regex` is true.
    pub pattern: String,
    /// Treat `pattern` as a regular expression (default false: a literal string).
    #[serde(default)]
    pub regex: bool,
    /// Match regardless of case (default false).
    #[serde(default)]
    pub ignore_case: bool,
    /// Only files whose path matches this glob, as in .gitignore: `*.py` anywhere,
    /// `src/**/*.rs` from the workspace root.
    #[serde(default)]
    pub glob: Option<String>,
    /// The directory to search, relative to the workspace root; absent for the whole workspace.
    #[serde(default)]
    pub dir: Option<String>,
    /// Lines of context before and after each match (default 2, at most 10).
    #[serde(default)]
    #[schemars(range(max = 10))]
    pub context_lines: Option<usize>,
    /// Matching lines to answer at most (default 50, at most 500).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    pub max_matches: Option<usize>,
}

/// The search behind `GET /search` and the `search_files` tool.
pub async fn search(
    workspace: &dyn Workspace,
    params: SearchParams,
) -> Result<SearchResults, ApiError> {
    let query = parse(params)?;
    // The walk would answer a protected folder with nothing; say why instead.
    if !query.dir.is_root()
        && let Err(e @ WorkspaceError::Protected { .. }) =
            workspace.check_target(&query.dir, false).await
    {
        return Err(workspace_error(e, "dir"));
    }
    workspace.search(query).await.map_err(|e| match e {
        SearchError::Pattern(message) => invalid(
            "pattern",
            format!("the pattern does not compile: {message}"),
        ),
        SearchError::Glob(message) => invalid("glob", format!("the glob is not valid: {message}")),
        SearchError::Workspace(e) => workspace_error(e, "dir"),
    })
}

/// The parameters as a bounded query; a value out of bounds is refused naming its field.
fn parse(params: SearchParams) -> Result<SearchQuery, ApiError> {
    if params.pattern.is_empty() {
        return Err(invalid("pattern", "the pattern is empty".to_owned()));
    }
    if params.pattern.len() > MAX_PATTERN_BYTES {
        return Err(invalid(
            "pattern",
            format!(
                "the pattern is {} bytes; the limit is {MAX_PATTERN_BYTES}",
                params.pattern.len()
            ),
        ));
    }
    let context_lines = params.context_lines.unwrap_or(DEFAULT_CONTEXT_LINES);
    if context_lines > MAX_CONTEXT_LINES {
        return Err(invalid(
            "context_lines",
            format!("context_lines must be at most {MAX_CONTEXT_LINES}, got {context_lines}"),
        ));
    }
    let max_matches = params.max_matches.unwrap_or(DEFAULT_MATCHES);
    if max_matches == 0 || max_matches > MAX_MATCHES {
        return Err(invalid(
            "max_matches",
            format!("max_matches must be between 1 and {MAX_MATCHES}, got {max_matches}"),
        ));
    }
    let glob = params.glob.filter(|g| !g.is_empty());
    if let Some(glob) = &glob
        && (glob.starts_with('!') || glob.len() > MAX_PATTERN_BYTES)
    {
        return Err(invalid(
            "glob",
            format!(
                "the glob must name the files to search (no leading '!') in at most \
                 {MAX_PATTERN_BYTES} bytes"
            ),
        ));
    }
    let dir = RepoPath::parse_dir(params.dir.as_deref().unwrap_or_default())
        .map_err(|e| path_error(&e, "dir"))?;
    Ok(SearchQuery {
        pattern: params.pattern,
        regex: params.regex,
        ignore_case: params.ignore_case,
        dir,
        glob,
        context_lines,
        max_matches,
        max_files: MAX_FILES,
        max_file_bytes: MAX_FILE_BYTES,
        time_limit: TIME_LIMIT,
        freshness: Freshness::Current,
        keep_compiled: false,
    })
}

/// A well-formed query whose value cannot be searched with (a pattern that does not compile, a
/// bound out of range): 422, where a malformed query string is the extractor's 400.
fn invalid(field: &str, message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidParameter, message)
        .unprocessable()
        .with_field(field)
}
