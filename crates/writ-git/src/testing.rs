//! What the unit tests of several modules share: repositories made and read with the real `git`
//! program, as a user's would be, without the machine's own configuration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `git args` in `dir` and answers its output; fails the test with git's stderr if it fails.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `git rev-parse rev`, trimmed.
pub(crate) fn rev(dir: &Path, rev: &str) -> String {
    git(dir, &["rev-parse", rev]).trim().to_owned()
}

/// Writes `name` (folders made as needed) and commits it alone as `message`; answers the commit.
pub(crate) fn commit_file(dir: &Path, name: &str, content: &str, message: &str) -> String {
    let path = dir.join(name);
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).unwrap();
    }
    std::fs::write(path, content).unwrap();
    git(dir, &["add", name]);
    git(dir, &["commit", "-q", "-m", message]);
    rev(dir, "HEAD")
}

/// A repository at `dir/repo` on `main`, whose first commit holds `files`; the user who commits
/// there is "User <user@example.com>".
pub(crate) fn repository(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "User"]);
    git(&repo, &["config", "user.email", "user@example.com"]);
    for (name, content) in files {
        std::fs::write(repo.join(name), content).unwrap();
        git(&repo, &["add", name]);
    }
    git(&repo, &["commit", "-q", "-m", "first"]);
    repo
}

/// A linked worktree of `repo` at `dir/name` on a new branch `branch` made at `from`, as a
/// task's workspace is.
pub(crate) fn worktree(repo: &Path, name: &str, branch: &str, from: &str) -> PathBuf {
    let at = repo.parent().unwrap().join(name);
    git(
        repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            branch,
            at.to_str().unwrap(),
            from,
        ],
    );
    at
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}
