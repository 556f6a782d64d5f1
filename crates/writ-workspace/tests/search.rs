//! Searching and walking a real tree: `.gitignore`, protected paths, symlinks leading out, globs,
//! context lines and the bounds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use writ_core::search::{Freshness, SearchError, SearchQuery, SearchStop};
use writ_core::{RepoPath, Workspace};
use writ_workspace::{ProtectedPaths, RepoWorkspace};

fn put(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn query(pattern: &str) -> SearchQuery {
    SearchQuery {
        pattern: pattern.to_owned(),
        regex: false,
        ignore_case: false,
        dir: RepoPath::root(),
        glob: None,
        context_lines: 1,
        max_matches: 100,
        max_files: 10_000,
        max_file_bytes: 1 << 20,
        time_limit: Duration::from_secs(10),
        freshness: Freshness::Current,
        keep_compiled: false,
    }
}

/// A tree with an ignored folder, a protected file, writ's data and a symlink leading outside.
async fn tree() -> (tempfile::TempDir, RepoWorkspace) {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    put(&root, ".gitignore", "build/\n*.log\n");
    put(
        &root,
        "src/app.py",
        "import os\n\ndef needle():\n    return 1\n",
    );
    put(
        &root,
        "src/util/helpers.py",
        "# needle in a helper\nX = 2\n",
    );
    put(&root, "build/out.py", "needle in build output\n");
    put(&root, "debug.log", "needle in a log\n");
    put(&root, "secrets/key.txt", "needle in a secret\n");
    put(&root, ".git/config", "needle in git\n");
    put(base.path(), "outside/leak.txt", "needle outside the root\n");
    symlink(base.path().join("outside"), root.join("link")).unwrap();
    std::fs::write(root.join("bin.dat"), b"needle\0\x01\x02").unwrap();
    let mut protected = ProtectedPaths::default();
    protected.add("secrets/key.txt", "listed in WRIT_PROTECTED_PATHS");
    let ws = RepoWorkspace::open(&root)
        .await
        .unwrap()
        .with_protected(protected);
    (base, ws)
}

#[tokio::test]
async fn a_search_shows_only_what_is_neither_ignored_protected_binary_nor_outside() {
    let (_base, ws) = tree().await;
    let found = ws.search(query("needle")).await.unwrap();
    let paths: Vec<&str> = found.matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, ["src/app.py", "src/util/helpers.py"], "{found:?}");
    assert_eq!(found.files_matched, 2);
    assert_eq!(found.files_skipped, 1, "the binary file");
    assert_eq!(found.stopped, None);
}

#[tokio::test]
async fn a_match_carries_its_line_number_and_context() {
    let (_base, ws) = tree().await;
    let found = ws.search(query("def needle")).await.unwrap();
    let m = &found.matches[0];
    assert_eq!((m.path.as_str(), m.line_number), ("src/app.py", 3));
    assert_eq!(m.line, "def needle():");
    assert_eq!(m.before, [""]);
    assert_eq!(m.after, ["    return 1"]);
}

#[tokio::test]
async fn regex_case_glob_and_directory_narrow_the_search() {
    let (_base, ws) = tree().await;
    let mut q = query(r"^X\s*=\s*\d+$");
    q.regex = true;
    let found = ws.search(q).await.unwrap();
    assert_eq!(found.matches.len(), 1);
    assert_eq!(found.matches[0].path, "src/util/helpers.py");

    let mut q = query("NEEDLE");
    q.ignore_case = true;
    q.glob = Some("util/*.py".into());
    let found = ws.search(q).await.unwrap();
    assert!(
        found.matches.is_empty(),
        "a glob with a slash is anchored at the root"
    );

    let mut q = query("NEEDLE");
    q.ignore_case = true;
    q.glob = Some("helpers.py".into());
    assert_eq!(ws.search(q).await.unwrap().matches.len(), 1);

    let mut q = query("needle");
    q.dir = RepoPath::parse_dir("src/util").unwrap();
    let found = ws.search(q).await.unwrap();
    assert_eq!(found.matches.len(), 1);
    assert_eq!(found.matches[0].path, "src/util/helpers.py");
}

#[tokio::test]
async fn a_literal_pattern_is_not_a_regex_and_a_bad_regex_is_refused() {
    let (_base, ws) = tree().await;
    let literal = ws.search(query("needle(")).await.unwrap();
    assert_eq!(literal.matches.len(), 1);
    assert_eq!(literal.matches[0].line, "def needle():");
    let mut q = query("needle(");
    q.regex = true;
    assert!(matches!(ws.search(q).await, Err(SearchError::Pattern(_))));
    let mut q = query("needle");
    q.glob = Some("src/[".into());
    assert!(matches!(ws.search(q).await, Err(SearchError::Glob(_))));
}

#[tokio::test]
async fn the_bounds_stop_the_search_and_say_which() {
    let (_base, ws) = tree().await;
    let mut q = query("needle");
    q.max_matches = 1;
    let found = ws.search(q).await.unwrap();
    assert_eq!(found.matches.len(), 1);
    assert_eq!(found.stopped, Some(SearchStop::MaxMatches));

    let mut q = query("needle");
    q.max_files = 1;
    let found = ws.search(q).await.unwrap();
    assert_eq!(found.stopped, Some(SearchStop::MaxFiles));

    let mut q = query("needle");
    q.max_file_bytes = 10;
    let found = ws.search(q).await.unwrap();
    assert!(found.matches.is_empty());
    assert!(found.files_skipped >= 2);
}

#[tokio::test]
async fn a_walk_lists_the_files_a_search_would_see() {
    let (_base, ws) = tree().await;
    let walk = ws.walk(&RepoPath::root(), None, 100).await.unwrap();
    let paths: Vec<&str> = walk.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [".gitignore", "bin.dat", "src/app.py", "src/util/helpers.py"]
    );
    let walk = ws.walk(&RepoPath::root(), None, 2).await.unwrap();
    assert!(walk.truncated);
    let walk = ws
        .walk(&RepoPath::root(), Some("src/**/*.py"), 100)
        .await
        .unwrap();
    assert_eq!(walk.files.len(), 2);
    let walk = ws
        .walk(&RepoPath::root(), Some("helpers.py"), 100)
        .await
        .unwrap();
    assert_eq!(walk.files[0].path.as_str(), "src/util/helpers.py");
    assert!(
        ws.walk(&RepoPath::parse_dir("nope").unwrap(), None, 5)
            .await
            .is_err()
    );
}
