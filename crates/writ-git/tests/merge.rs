//! `merge_branches` checked with the real `git` CLI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::git;

use std::path::Path;

use writ_git::merge::{MergeOutcome, merge_branches};

fn commit_file(d: &Path, name: &str, content: &str) {
    std::fs::write(d.join(name), content).unwrap();
    git(d, &["add", name]);
    git(d, &["commit", "-q", "-m", &format!("write {name}")]);
}

/// main with a.txt; branch `task` from it; main checked out.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["config", "user.name", "User"]);
    git(d, &["config", "user.email", "user@example.com"]);
    commit_file(d, "a.txt", "one\ntwo\nthree\n");
    git(d, &["branch", "task"]);
    dir
}

fn on_task(d: &Path, f: impl FnOnce()) {
    git(d, &["checkout", "-q", "task"]);
    f();
    git(d, &["checkout", "-q", "main"]);
}

#[test]
fn a_branch_ahead_of_the_target_fast_forwards_and_the_checked_out_tree_follows() {
    let dir = repository();
    let d = dir.path();
    on_task(d, || commit_file(d, "b.txt", "task work\n"));
    let task = git(d, &["rev-parse", "task"]);
    let outcome = merge_branches(d, "task", "main", "k", "k@writ").unwrap();
    assert_eq!(
        outcome,
        MergeOutcome::FastForward {
            commit: task.trim().to_string()
        }
    );
    assert_eq!(git(d, &["rev-parse", "main"]), task);
    assert_eq!(
        std::fs::read_to_string(d.join("b.txt")).unwrap(),
        "task work\n"
    );
    assert_eq!(git(d, &["status", "--porcelain"]), "");
    assert_eq!(
        merge_branches(d, "task", "main", "k", "k@writ").unwrap(),
        MergeOutcome::UpToDate
    );
}

#[test]
fn diverged_branches_merge_cleanly_as_one_commit_with_both_parents() {
    let dir = repository();
    let d = dir.path();
    on_task(d, || {
        commit_file(d, "a.txt", "one\ntwo\nthree, by the task\n")
    });
    commit_file(d, "a.txt", "one, on main\ntwo\nthree\n");
    let outcome = merge_branches(d, "task", "main", "k", "k@writ").unwrap();
    let MergeOutcome::Merged { commit } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(git(d, &["rev-parse", "main"]).trim(), commit);
    let parents = git(d, &["log", "-1", "--format=%P", "main"]);
    assert_eq!(parents.split_whitespace().count(), 2);
    assert_eq!(
        std::fs::read_to_string(d.join("a.txt")).unwrap(),
        "one, on main\ntwo\nthree, by the task\n"
    );
    assert_eq!(git(d, &["status", "--porcelain"]), "");
}

#[test]
fn a_conflict_answers_the_file_and_hunk_and_moves_neither_branch() {
    let dir = repository();
    let d = dir.path();
    on_task(d, || commit_file(d, "a.txt", "one\nTWO by task\nthree\n"));
    commit_file(d, "a.txt", "one\nTWO by main\nthree\n");
    let (main, task) = (
        git(d, &["rev-parse", "main"]),
        git(d, &["rev-parse", "task"]),
    );
    let outcome = merge_branches(d, "task", "main", "k", "k@writ").unwrap();
    let MergeOutcome::Conflicts(conflicts) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].path, "a.txt");
    assert_eq!(conflicts[0].hunks.len(), 1);
    assert!(
        conflicts[0].hunks[0].contains("TWO by main"),
        "{:?}",
        conflicts[0].hunks
    );
    assert!(conflicts[0].hunks[0].contains("TWO by task"));
    assert_eq!(git(d, &["rev-parse", "main"]), main);
    assert_eq!(git(d, &["rev-parse", "task"]), task);
    assert_eq!(git(d, &["status", "--porcelain"]), "", "nothing touched");
}

/// Branches `c` and `d` from main, each checked out in a linked worktree of its own beside the
/// repository (as two tasks' workspaces are), each with a commit of its own.
fn two_worktrees() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = repository();
    let (wc, wd) = (dir.path().join("wc"), dir.path().join("wd"));
    git(dir.path(), &["worktree", "add", "-q", "wc", "-b", "work/c"]);
    git(dir.path(), &["worktree", "add", "-q", "wd", "-b", "work/d"]);
    commit_file(&wc, "c.txt", "from c\n");
    commit_file(&wd, "d.txt", "from d\n");
    (dir, wc, wd)
}

#[test]
fn a_target_checked_out_in_another_worktree_is_followed_there_so_its_next_commit_keeps_the_merge() {
    let (dir, _wc, wd) = two_worktrees();
    let outcome = merge_branches(dir.path(), "work/c", "work/d", "k", "k@writ").unwrap();
    assert!(
        matches!(outcome, MergeOutcome::Merged { .. }),
        "{outcome:?}"
    );
    // The worktree holding work/d has the merged file, and nothing staged or changed: git
    // itself sees it clean (before, its index kept the old commit: a staged deletion).
    assert_eq!(
        std::fs::read_to_string(wd.join("c.txt")).unwrap(),
        "from c\n"
    );
    assert_eq!(git(&wd, &["status", "--porcelain"]), "");
    // Its next `commit -a` keeps the merge.
    std::fs::write(wd.join("d.txt"), "from d, later\n").unwrap();
    git(&wd, &["commit", "-q", "-a", "-m", "later"]);
    assert_eq!(git(&wd, &["show", "HEAD:c.txt"]), "from c\n");
}

#[test]
fn a_target_worktree_with_local_changes_the_merge_would_overwrite_moves_nothing() {
    let (dir, _wc, wd) = two_worktrees();
    // work/c also changes a.txt, which the work/d worktree has changed without committing.
    let wc = dir.path().join("wc");
    commit_file(&wc, "a.txt", "one\ntwo\nthree, by c\n");
    std::fs::write(wd.join("a.txt"), "uncommitted in d\n").unwrap();
    let before = git(dir.path(), &["rev-parse", "work/d"]);
    assert!(merge_branches(dir.path(), "work/c", "work/d", "k", "k@writ").is_err());
    assert_eq!(git(dir.path(), &["rev-parse", "work/d"]), before);
    assert_eq!(
        std::fs::read_to_string(wd.join("a.txt")).unwrap(),
        "uncommitted in d\n"
    );
    assert!(!wd.join("c.txt").exists());
}
