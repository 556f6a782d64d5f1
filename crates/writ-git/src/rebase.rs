//! A task's branch replayed onto another: once the
//! branch it will land on has moved, the task's own commits are made again, in order, on that
//! branch's tip, so the task's work — and what checks it — stands on what it will land on, and
//! the merge that follows is a fast-forward. [`reset_branch`] puts a branch back where a rebase
//! found it.
//!
//! Every commit is first made in memory (a cherry-pick into an index, never into a working
//! tree). Only once all of them applied cleanly does the branch move, and with it every working
//! tree that has it checked out, through a safe checkout (`checkouts.rs`). A conflict, or such a
//! working tree with uncommitted changes, moves nothing: no branch, no file.

use std::collections::BTreeSet;
use std::path::Path;

use git2::{Oid, Repository, Signature, Sort};

use crate::checkouts::{self, LocalChanges};
use crate::commit::GitError;
use crate::divergence::{commit_named, local_branch, merge_base, paths_changed};
use crate::merge::{MergeConflict, conflicts_in};

/// How a rebase ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebaseOutcome {
    /// The branch already contains the tip it was to be replayed onto; nothing moved.
    UpToDate,
    /// The branch moved from `old_tip` to `new_tip` (hex), `replayed` commits on top of the
    /// other branch's tip (none when the branch had no commits of its own: a fast-forward).
    Rebased {
        old_tip: String,
        new_tip: String,
        replayed: usize,
        /// Sorted: every path whose content differs between the old and the new tip (what the
        /// other branch brought in), and every path a replayed commit changed (the branch's own
        /// work, now on another base) — the files whose checks made before may no longer hold.
        touched: Vec<String>,
    },
    /// A commit did not apply on the new base: the conflicts of the first one that did not,
    /// marked with the two branches' names. Nothing moved.
    Conflicts(Vec<MergeConflict>),
}

/// Replays the commits of local branch `branch` that `onto` (a local branch, or else any
/// revision) does not have on top of `onto`'s tip, in the repository at `repo_path` (its own
/// folder or any of its worktrees'), then moves `branch` there, with every working tree that has
/// it checked out following (see the module docs).
///
/// The commits replayed are `branch`'s first-parent line back to where it meets `onto`, oldest
/// first. A merge commit on that line is replayed as its change against its first parent: one
/// ordinary commit, so the history that results is linear. Each keeps its message and its author
/// (with the author's time); the committer is `author_name` <`author_email`>. A commit whose
/// change `onto` already has is still made, empty, so every commit of the task (and its message's
/// trailers) has one on the new line.
///
/// `DirtyWorktree` when a working tree that has `branch` checked out holds any uncommitted change
/// to a tracked file, or an untracked file where the new tip has one; `BranchMoved` when the
/// branch moved while the commits were being made. Either way nothing moved.
pub fn rebase_branch(
    repo_path: &Path,
    branch: &str,
    onto: &str,
    author_name: &str,
    author_email: &str,
) -> Result<RebaseOutcome, GitError> {
    let repo = crate::open(repo_path)?;
    let found = local_branch(&repo, branch)?;
    let branch_ref = found.get().name()?.to_string();
    let old_tip = found.get().peel_to_commit()?;
    let onto_tip = commit_named(&repo, onto)?;
    if old_tip.id() == onto_tip.id() || repo.graph_descendant_of(old_tip.id(), onto_tip.id())? {
        return Ok(RebaseOutcome::UpToDate);
    }
    // Unrelated lines have nothing to replay onto; said as such rather than as a failed pick.
    merge_base(&repo, (branch, &old_tip), (onto, &onto_tip))?;
    let committer = Signature::now(author_name, author_email)?;
    let mut new_tip = onto_tip.clone();
    let mut touched = BTreeSet::new();
    let own = own_commits(&repo, old_tip.id(), onto_tip.id())?;
    for id in &own {
        let commit = repo.find_commit(*id)?;
        let mainline = if commit.parent_count() > 1 { 1 } else { 0 };
        let mut index = repo.cherrypick_commit(&commit, &new_tip, mainline, None)?;
        if index.has_conflicts() {
            return Ok(RebaseOutcome::Conflicts(conflicts_in(
                &repo, &index, onto, branch,
            )?));
        }
        let tree = repo.find_tree(index.write_tree_to(&repo)?)?;
        let message = match commit.message_raw() {
            Ok(message) => message.to_owned(),
            Err(_) => String::from_utf8_lossy(commit.message_raw_bytes()).into_owned(),
        };
        let made = repo.commit(
            None,
            &commit.author(),
            &committer,
            &message,
            &tree,
            &[&new_tip],
        )?;
        let parent_tree = match commit.parent_count() {
            0 => None,
            _ => Some(commit.parent(0)?.tree()?),
        };
        touched.extend(paths_changed(&repo, parent_tree.as_ref(), &commit.tree()?)?);
        new_tip = repo.find_commit(made)?;
    }
    touched.extend(paths_changed(
        &repo,
        Some(&old_tip.tree()?),
        &new_tip.tree()?,
    )?);
    checkouts::move_branch(
        &repo,
        &branch_ref,
        old_tip.id(),
        new_tip.id(),
        LocalChanges::Refused,
        &format!("rebase onto {onto}"),
    )?;
    Ok(RebaseOutcome::Rebased {
        old_tip: old_tip.id().to_string(),
        new_tip: new_tip.id().to_string(),
        replayed: own.len(),
        touched: touched.into_iter().collect(),
    })
}

/// Moves local branch `branch` of the repository at `repo_path` to commit `to_commit` (full hex)
/// — a rebase undone: its `old_tip` — only while its tip is still `expect_tip` (full hex: the
/// rebase's `new_tip`), with every working tree that has it checked out following as a rebase's
/// do. `false`, and nothing moved, when the branch has moved on since (the task committed after
/// the rebase); `DirtyWorktree` as for a rebase.
pub fn reset_branch(
    repo_path: &Path,
    branch: &str,
    to_commit: &str,
    expect_tip: &str,
) -> Result<bool, GitError> {
    let repo = crate::open(repo_path)?;
    let found = local_branch(&repo, branch)?;
    let branch_ref = found.get().name()?.to_string();
    let tip = found.get().peel_to_commit()?.id();
    let expected = Oid::from_str(expect_tip)?;
    let to = repo.find_commit(Oid::from_str(to_commit)?)?.id();
    if tip != expected {
        return Ok(false);
    }
    if tip == to {
        return Ok(true);
    }
    match checkouts::move_branch(
        &repo,
        &branch_ref,
        tip,
        to,
        LocalChanges::Refused,
        &format!("reset: moving to {to}"),
    ) {
        Ok(()) => Ok(true),
        Err(GitError::BranchMoved { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The commits of `tip`'s first-parent line that `onto` does not have, oldest first.
fn own_commits(repo: &Repository, tip: Oid, onto: Oid) -> Result<Vec<Oid>, GitError> {
    let mut walk = repo.revwalk()?;
    walk.push(tip)?;
    walk.hide(onto)?;
    walk.simplify_first_parent()?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE)?;
    Ok(walk.collect::<Result<Vec<_>, _>>()?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use super::*;
    use crate::testing::{commit_file, git, read, repository, rev, worktree};

    const A: &str = "one\ntwo\nthree\nfour\nfive\n";

    /// main with a.txt and b.txt; a task's worktree at `dir/task` on `task` from main, with two
    /// commits of its own; then main moves on with a change to a.txt far from the task's.
    fn moved_on(dir: &Path) -> (PathBuf, PathBuf) {
        let repo = repository(dir, &[("a.txt", A), ("b.txt", "b\n")]);
        let task = worktree(&repo, "task", "task", "main");
        commit_file(
            &task,
            "a.txt",
            "one\ntwo\nthree\nfour\nfive, by the task\n",
            "task: a",
        );
        commit_file(&task, "t.txt", "task file\n", "task: t\n\nRequest-Id: 7\n");
        commit_file(
            &repo,
            "a.txt",
            "one, on main\ntwo\nthree\nfour\nfive\n",
            "main: a",
        );
        commit_file(&repo, "m.txt", "main file\n", "main: m");
        (repo, task)
    }

    fn rebased(outcome: RebaseOutcome) -> (String, String, usize, Vec<String>) {
        match outcome {
            RebaseOutcome::Rebased {
                old_tip,
                new_tip,
                replayed,
                touched,
            } => (old_tip, new_tip, replayed, touched),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_task_branch_is_replayed_on_main_and_its_worktree_follows() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        let (before, main) = (rev(&repo, "task"), rev(&repo, "main"));

        let outcome = rebase_branch(&repo, "task", "main", "writ", "writ@localhost").unwrap();

        let (old_tip, new_tip, replayed, touched) = rebased(outcome);
        assert_eq!((old_tip, replayed), (before, 2));
        assert_eq!(rev(&repo, "task"), new_tip);
        assert_eq!(rev(&repo, "main"), main, "main stays");
        assert_eq!(touched, vec!["a.txt", "m.txt", "t.txt"]);
        // Linear, on main's tip, messages kept, newest first.
        assert_eq!(rev(&repo, "task~2"), main);
        assert_eq!(
            git(&repo, &["log", "--format=%s", "main..task"]),
            "task: t\ntask: a\n"
        );
        assert_eq!(git(&repo, &["rev-list", "--merges", "main..task"]), "");
        assert_eq!(
            git(&repo, &["log", "-1", "--format=%B", "task"]),
            "task: t\n\nRequest-Id: 7\n\n"
        );
        assert_eq!(
            git(
                &repo,
                &["log", "-1", "--format=%an <%ae> / %cn <%ce>", "task"]
            ),
            "User <user@example.com> / writ <writ@localhost>\n"
        );
        // The worktree is on the new tip, both changes in its files, nothing left over.
        assert_eq!(rev(&task, "HEAD"), new_tip);
        assert_eq!(
            read(&task.join("a.txt")),
            "one, on main\ntwo\nthree\nfour\nfive, by the task\n"
        );
        assert_eq!(read(&task.join("m.txt")), "main file\n");
        assert_eq!(git(&task, &["status", "--porcelain"]), "");
        // Merging it back is now a fast-forward.
        assert_eq!(git(&repo, &["merge-base", "main", "task"]).trim(), main);
    }

    #[test]
    fn a_branch_checked_out_in_the_repositorys_own_tree_follows_when_asked_from_a_worktree() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path(), &[("a.txt", A)]);
        git(&repo, &["branch", "task"]);
        let other = worktree(&repo, "other", "other", "main");
        commit_file(&repo, "m.txt", "main file\n", "main: m");
        git(&repo, &["checkout", "-q", "task"]);
        commit_file(&repo, "t.txt", "task file\n", "task: t");

        let outcome = rebase_branch(&other, "task", "main", "writ", "writ@localhost").unwrap();

        let (_, new_tip, replayed, _) = rebased(outcome);
        assert_eq!(replayed, 1);
        assert_eq!(rev(&repo, "HEAD"), new_tip);
        assert_eq!(read(&repo.join("m.txt")), "main file\n");
        assert_eq!(git(&repo, &["status", "--porcelain"]), "");
        assert_eq!(git(&other, &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_merge_on_the_branch_is_replayed_as_one_ordinary_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        let side = worktree(&repo, "side", "side", "task~1");
        commit_file(&side, "s.txt", "side file\n", "side: s");
        git(
            &task,
            &["merge", "-q", "--no-ff", "-m", "task: merge side", "side"],
        );

        let outcome = rebase_branch(&task, "task", "main", "writ", "writ@localhost").unwrap();

        let (_, _, replayed, _) = rebased(outcome);
        assert_eq!(replayed, 3);
        assert_eq!(
            git(&repo, &["log", "--format=%s", "main..task"]),
            "task: merge side\ntask: t\ntask: a\n"
        );
        assert_eq!(git(&repo, &["rev-list", "--merges", "main..task"]), "");
        assert_eq!(read(&task.join("s.txt")), "side file\n");
        assert_eq!(read(&task.join("m.txt")), "main file\n");
    }

    #[test]
    fn a_conflicting_replay_answers_the_hunks_and_moves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        commit_file(
            &repo,
            "a.txt",
            "one, on main\ntwo\nthree\nfour\nFIVE by main\n",
            "main: a again",
        );
        let before = rev(&repo, "task");
        let on_disk = read(&task.join("a.txt"));

        let outcome = rebase_branch(&task, "task", "main", "writ", "writ@localhost").unwrap();

        let RebaseOutcome::Conflicts(conflicts) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].path, "a.txt");
        assert_eq!(conflicts[0].hunks.len(), 1);
        let hunk = &conflicts[0].hunks[0];
        assert!(hunk.starts_with("<<<<<<< main\n"), "{hunk}");
        assert!(
            hunk.contains("FIVE by main\n=======\nfive, by the task\n"),
            "{hunk}"
        );
        assert!(hunk.ends_with(">>>>>>> task\n"), "{hunk}");
        assert_eq!(rev(&repo, "task"), before);
        assert_eq!(read(&task.join("a.txt")), on_disk);
        assert!(!task.join("m.txt").exists());
        assert_eq!(git(&task, &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_worktree_with_uncommitted_changes_refuses_the_rebase_and_nothing_moves() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        let before = rev(&repo, "task");
        // b.txt is not one the rebase touches: still refused, the work in progress is not
        // carried over silently.
        std::fs::write(task.join("b.txt"), "b in progress\n").unwrap();

        let err = rebase_branch(&repo, "task", "main", "writ", "writ@localhost").unwrap_err();

        let GitError::DirtyWorktree { path, files } = err else {
            panic!("{err:?}")
        };
        assert_eq!(path.canonicalize().unwrap(), task.canonicalize().unwrap());
        assert_eq!(files, vec!["b.txt"]);
        assert_eq!(rev(&repo, "task"), before);
        assert_eq!(read(&task.join("b.txt")), "b in progress\n");
        assert!(!task.join("m.txt").exists());
    }

    #[test]
    fn an_untracked_file_refuses_the_rebase_only_where_the_new_tip_has_one() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        let before = rev(&repo, "task");
        std::fs::write(task.join("m.txt"), "the task's own m\n").unwrap();

        let err = rebase_branch(&repo, "task", "main", "writ", "writ@localhost").unwrap_err();

        assert!(
            matches!(&err, GitError::DirtyWorktree { files, .. } if files == &["m.txt"]),
            "{err:?}"
        );
        assert_eq!(rev(&repo, "task"), before);
        assert_eq!(read(&task.join("m.txt")), "the task's own m\n");
        // Elsewhere an untracked file is left alone, and stays.
        std::fs::remove_file(task.join("m.txt")).unwrap();
        std::fs::write(task.join("notes.txt"), "mine\n").unwrap();
        let outcome = rebase_branch(&repo, "task", "main", "writ", "writ@localhost").unwrap();
        assert!(
            matches!(outcome, RebaseOutcome::Rebased { .. }),
            "{outcome:?}"
        );
        assert_eq!(read(&task.join("notes.txt")), "mine\n");
    }

    #[test]
    fn a_branch_that_has_onto_is_up_to_date_and_one_only_behind_fast_forwards() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        git(&repo, &["branch", "old-main", "main~2"]);
        let before = rev(&repo, "task");

        assert_eq!(
            rebase_branch(&repo, "task", "old-main", "writ", "writ@localhost").unwrap(),
            RebaseOutcome::UpToDate
        );
        assert_eq!(rev(&repo, "task"), before);

        let outcome = rebase_branch(&task, "old-main", "main", "writ", "writ@localhost").unwrap();
        let (_, new_tip, replayed, touched) = rebased(outcome);
        assert_eq!((replayed, new_tip), (0, rev(&repo, "main")));
        assert_eq!(touched, vec!["a.txt", "m.txt"]);
        let err = rebase_branch(&repo, "no-such", "main", "w", "w@x").unwrap_err();
        assert!(
            matches!(&err, GitError::NoSuchBranch(b) if b == "no-such"),
            "{err:?}"
        );
    }

    #[test]
    fn reset_branch_undoes_a_rebase_unless_the_branch_moved_on() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, task) = moved_on(dir.path());
        let (old_tip, new_tip, _, _) =
            rebased(rebase_branch(&repo, "task", "main", "writ", "writ@localhost").unwrap());

        // Stale: the branch is at new_tip, not old_tip.
        assert!(!reset_branch(&repo, "task", &new_tip, &old_tip).unwrap());
        assert_eq!(rev(&repo, "task"), new_tip);
        assert!(reset_branch(&task, "task", &old_tip, &new_tip).unwrap());

        assert_eq!(rev(&repo, "task"), old_tip);
        assert!(!task.join("m.txt").exists());
        assert_eq!(
            read(&task.join("a.txt")),
            "one\ntwo\nthree\nfour\nfive, by the task\n"
        );
        assert_eq!(git(&task, &["status", "--porcelain"]), "");
        // The task committed since: a reset to before the rebase would lose it.
        commit_file(&task, "later.txt", "later\n", "task: later");
        assert!(!reset_branch(&repo, "task", &new_tip, &old_tip).unwrap());
        assert!(task.join("later.txt").exists());
    }
}
