//! The working trees that have a branch checked out — the repository's own and its linked
//! worktrees' (other tasks' workspaces) — and moving a branch so that they follow it.
//!
//! A branch moved under a working tree that does not follow leaves that tree's index on the old
//! commit, so its next `commit -a` would undo the move; git refuses that case. Here every such
//! tree follows through a safe checkout (which refuses to overwrite local changes to the files
//! it would touch), or nothing moves: the branch itself moves last, and only from the tip its
//! caller read.

use std::path::PathBuf;

use git2::build::CheckoutBuilder;
use git2::{Oid, Repository, StatusOptions, Tree};

use crate::commit::GitError;

/// What a working tree's own uncommitted changes do to a move of its branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalChanges {
    /// They stay, and stop the move only where the new commit would overwrite one (a merge into
    /// a branch someone works on: their edits elsewhere are theirs).
    KeptWhereUntouched,
    /// Any change to a tracked file (staged or not), or an untracked file where the new commit
    /// has one, refuses the move: a rebase or reset rewrites the branch under the tree, and work
    /// in progress on top of the old commits is not carried over silently.
    Refused,
}

/// Moves `branch_ref` from `from` to `to`, first bringing along every working tree that has it
/// checked out (see the module docs). `BranchMoved` when the branch is no longer at `from`;
/// `DirtyWorktree` when `local` is `Refused` and a tree holds changes; git's own error when a
/// tree's safe checkout would overwrite a change. Any of these leaves the branch and every
/// working tree as they were.
pub(crate) fn move_branch(
    repo: &Repository,
    branch_ref: &str,
    from: Oid,
    to: Oid,
    local: LocalChanges,
    log: &str,
) -> Result<(), GitError> {
    // git's lock on the branch, held from the check of its tip to its move: another writer (a
    // commit into the worktree, a person's git) cannot move it in between, under a working tree
    // already brought to `to`.
    let mut lock = repo.transaction()?;
    lock.lock_ref(branch_ref)?;
    if repo.refname_to_id(branch_ref).ok() != Some(from) {
        return Err(GitError::BranchMoved {
            branch: branch_ref
                .strip_prefix("refs/heads/")
                .unwrap_or(branch_ref)
                .to_owned(),
        });
    }
    let trees = checkouts(repo, branch_ref)?;
    if local == LocalChanges::Refused {
        let target = repo.find_commit(to)?.tree()?;
        for tree in &trees {
            let files = uncommitted(tree, &target)?;
            if !files.is_empty() {
                return Err(GitError::DirtyWorktree {
                    path: tree.workdir().map(PathBuf::from).unwrap_or_default(),
                    files,
                });
            }
        }
    }
    // Every tree is asked first: a second tree refusing must not find the first one moved.
    for tree in &trees {
        check_out(tree, to, CheckoutBuilder::new().safe().dry_run())?;
    }
    let mut followed = Vec::with_capacity(trees.len());
    for tree in &trees {
        if let Err(e) = check_out(tree, to, CheckoutBuilder::new().safe()) {
            put_back(&followed, branch_ref, from, to);
            return Err(e.into());
        }
        followed.push(tree);
    }
    let moved = lock
        .set_target(branch_ref, to, None, log)
        .and_then(|()| lock.commit());
    if let Err(e) = moved {
        put_back(&followed, branch_ref, from, to);
        return Err(e.into());
    }
    Ok(())
}

/// Checks `to` out in `tree`, looked up through the tree's own handle: libgit2 checks out only
/// objects of the repository it is asked through.
fn check_out(
    tree: &Repository,
    to: Oid,
    options: &mut CheckoutBuilder<'_>,
) -> Result<(), git2::Error> {
    let object = tree.find_object(to, None)?;
    tree.checkout_tree(&object, Some(options))
}

/// Every working tree whose HEAD is `branch_ref`: the repository's own (found through the common
/// directory, so a `repo` opened at a linked worktree finds it too) and its linked worktrees'.
/// One whose folder is gone while its HEAD file names the branch is an error, not skipped: its
/// checkout could not follow.
fn checkouts(repo: &Repository, branch_ref: &str) -> Result<Vec<Repository>, GitError> {
    let mut found = Vec::new();
    let common = repo.commondir().to_path_buf();
    let main = Repository::open(&common)?;
    if !main.is_bare() && has_head(&main, branch_ref) {
        found.push(main);
    }
    let names = repo.worktrees()?;
    for i in 0..names.len() {
        // A name that is not UTF-8 is not one writ made, nor can the checks below read it.
        let Ok(Some(name)) = names.get(i) else {
            continue;
        };
        let worktree = repo.find_worktree(name)?;
        if worktree.validate().is_err() {
            // Its folder is gone (git would prune it): a HEAD that still names the branch is
            // refused, since nothing could follow.
            let head = std::fs::read_to_string(common.join("worktrees").join(name).join("HEAD"))
                .unwrap_or_default();
            if head.trim() == format!("ref: {branch_ref}") {
                return Err(GitError::Git(git2::Error::from_str(&format!(
                    "'{branch_ref}' is checked out in worktree '{name}', whose folder is missing; run `git worktree prune` first"
                ))));
            }
            continue;
        }
        let linked = Repository::open_from_worktree(&worktree)?;
        if has_head(&linked, branch_ref) {
            found.push(linked);
        }
    }
    Ok(found)
}

fn has_head(repo: &Repository, branch_ref: &str) -> bool {
    repo.head()
        .ok()
        .and_then(|h| h.name().ok().map(str::to_string))
        .is_some_and(|name| name == branch_ref)
}

/// The files of `tree`'s working tree that a rewrite of its branch could lose: every tracked
/// file changed in the index or on disk, and every untracked one where `target` has a file.
/// Ignored files are git's to overwrite, as a checkout does.
fn uncommitted(tree: &Repository, target: &Tree<'_>) -> Result<Vec<String>, GitError> {
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let mut files = Vec::new();
    for entry in tree.statuses(Some(&mut options))?.iter() {
        let path = String::from_utf8_lossy(entry.path_bytes()).into_owned();
        let status = entry.status();
        let in_the_way = status == git2::Status::WT_NEW;
        if !in_the_way || target.get_path(std::path::Path::new(&path)).is_ok() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Takes `followed` back from `to`'s files to `from`'s after a move failed part way (a write
/// that failed after every tree's dry run passed). Best effort: the move's own error is the one
/// reported.
fn put_back(followed: &[&Repository], branch_ref: &str, from: Oid, to: Oid) {
    for tree in followed {
        let _ = put_back_one(tree, branch_ref, from, to);
    }
}

/// A checkout compares the target with HEAD's tree to know what to write, and HEAD names the
/// branch, still at `from`: a checkout of `from` would find nothing to do. So HEAD is pointed at
/// `to` — what the tree now holds — for the checkout, and then at the branch again.
fn put_back_one(
    tree: &Repository,
    branch_ref: &str,
    from: Oid,
    to: Oid,
) -> Result<(), git2::Error> {
    let log = "writ: putting back a move that failed";
    tree.reference("HEAD", to, true, log)?;
    let back = check_out(tree, from, CheckoutBuilder::new().safe());
    tree.reference_symbolic("HEAD", branch_ref, true, log)?;
    back
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use super::*;
    use crate::testing::{commit_file, git, read, repository, rev, worktree};

    /// `task`'s worktree at `dir/task`, at the first commit; main a commit on, which changes
    /// a.txt, deletes gone.txt and adds new.txt. Answers the repository, the worktree and both
    /// commits.
    fn behind(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Oid, Oid) {
        let repo = repository(dir, &[("a.txt", "a\n"), ("gone.txt", "g\n")]);
        let task = worktree(&repo, "task", "task", "main");
        std::fs::write(repo.join("a.txt"), "a, later\n").unwrap();
        git(&repo, &["rm", "-q", "gone.txt"]);
        git(&repo, &["add", "a.txt"]);
        let later = commit_file(&repo, "new.txt", "n\n", "later");
        let start = rev(&repo, "task");
        (
            repo,
            task,
            Oid::from_str(&start).unwrap(),
            Oid::from_str(&later).unwrap(),
        )
    }

    fn as_it_was(repo: &Path, task: &Path, start: Oid) {
        assert_eq!(rev(repo, "task"), start.to_string());
        assert_eq!(read(&task.join("a.txt")), "a\n");
        assert_eq!(read(&task.join("gone.txt")), "g\n");
        assert!(!task.join("new.txt").exists());
        assert_eq!(git(task, &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_branch_no_longer_where_it_was_read_is_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task, start, later) = behind(dir.path());
        let opened = Repository::open(&repo).unwrap();

        // As if `later` had been read as the tip before another writer moved it.
        let err = move_branch(
            &opened,
            "refs/heads/task",
            later,
            start,
            LocalChanges::Refused,
            "t",
        )
        .unwrap_err();

        assert!(
            matches!(&err, GitError::BranchMoved { branch } if branch == "task"),
            "{err:?}"
        );
        as_it_was(&repo, &task, start);
    }

    #[test]
    fn a_branch_another_writer_holds_locked_is_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task, start, later) = behind(dir.path());
        let opened = Repository::open(&repo).unwrap();
        let held = repo.join(".git/refs/heads/task.lock");
        std::fs::write(&held, format!("{start}\n")).unwrap();

        let moved = move_branch(
            &opened,
            "refs/heads/task",
            start,
            later,
            LocalChanges::Refused,
            "t",
        );

        assert!(moved.is_err());
        assert!(held.exists(), "another's lock is theirs to remove");
        std::fs::remove_file(&held).unwrap();
        as_it_was(&repo, &task, start);
    }

    #[test]
    fn a_second_checkout_that_refuses_stops_the_move_before_the_first_follows() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task, start, later) = behind(dir.path());
        // `task` checked out twice: in the repository's own tree (brought along first), and in
        // the worktree, whose local change to a.txt the move would overwrite.
        git(
            &repo,
            &["checkout", "-q", "-f", "--ignore-other-worktrees", "task"],
        );
        std::fs::write(task.join("a.txt"), "a, being edited\n").unwrap();
        let opened = Repository::open(&repo).unwrap();

        let moved = move_branch(
            &opened,
            "refs/heads/task",
            start,
            later,
            LocalChanges::KeptWhereUntouched,
            "t",
        );

        assert!(moved.is_err());
        assert_eq!(rev(&repo, "task"), start.to_string());
        assert_eq!(read(&repo.join("a.txt")), "a\n");
        assert!(!repo.join("new.txt").exists());
        assert_eq!(git(&repo, &["status", "--porcelain"]), "");
        assert_eq!(read(&task.join("a.txt")), "a, being edited\n");
    }

    #[test]
    fn a_tree_brought_along_is_put_back_when_the_move_fails_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task, start, later) = behind(dir.path());
        let tree = Repository::open(&task).unwrap();
        check_out(&tree, later, CheckoutBuilder::new().safe()).unwrap();
        assert_eq!(read(&task.join("a.txt")), "a, later\n");

        put_back_one(&tree, "refs/heads/task", start, later).unwrap();

        as_it_was(&repo, &task, start);
        assert_eq!(git(&task, &["symbolic-ref", "HEAD"]), "refs/heads/task\n");
    }
}
