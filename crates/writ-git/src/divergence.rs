//! How two lines of work have moved apart since the commit they share: the commits and paths on
//! each side ([`divergence`]), which of some paths the other side changed and in which commit
//! ([`changes_since_base`]), and which of some paths a working tree holds uncommitted
//! ([`dirty_paths`]). With these the server can tell an agent
//! writing a path in its workspace that another workspace (another worktree of the same
//! repository, on a branch of its own) or the branch it will merge into changed that path too.
//!
//! Paths are compared tree to tree (the shared commit's against a tip's), so a change made and
//! undone on one side is no change, and what a side changed is known without reading its
//! commits one by one. Nothing here moves a branch or touches a working tree.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use chrono::{DateTime, Utc};
use git2::{BranchType, Commit, DiffOptions, Oid, Repository, Sort, StatusOptions, Tree};

use crate::commit::GitError;

/// How a branch and a target have moved apart since their merge-base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The commit both grew from, in hex.
    pub merge_base: String,
    /// Commits on the branch that the target does not have.
    pub ahead: usize,
    /// Commits on the target that the branch does not have.
    pub behind: usize,
    /// Paths that differ between the merge-base and the branch's tip, sorted.
    pub changed_here: Vec<String>,
    /// Paths that differ between the merge-base and the target's tip, sorted.
    pub changed_there: Vec<String>,
    /// Paths in both lists, sorted: where the two sides may meet when combined.
    pub both: Vec<String>,
}

/// A path the other side changed since the merge-base, and the commit that last did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TheirChange {
    pub path: String,
    /// The newest commit on the other side's first-parent line since the merge-base whose change
    /// (against its first parent) touched the path, in hex; a merge commit stands for what it
    /// brought in.
    pub commit: String,
    /// That commit's committer time: when the change reached the other side.
    pub time: DateTime<Utc>,
}

/// How local branch `branch` and `target` (a local branch, or else any revision git understands)
/// of the repository at `repo_path` (its own folder or any of its worktrees') have moved apart.
/// A rename counts as both its old and its new path; a deleted file counts.
pub fn divergence(repo_path: &Path, branch: &str, target: &str) -> Result<Divergence, GitError> {
    let repo = crate::open(repo_path)?;
    let here = local_branch(&repo, branch)?.get().peel_to_commit()?;
    let there = commit_named(&repo, target)?;
    let base = merge_base(&repo, (branch, &here), (target, &there))?;
    let (ahead, behind) = repo.graph_ahead_behind(here.id(), there.id())?;
    let base_tree = repo.find_commit(base)?.tree()?;
    let changed_here = paths_changed(&repo, Some(&base_tree), &here.tree()?)?;
    let changed_there = paths_changed(&repo, Some(&base_tree), &there.tree()?)?;
    let both = changed_here.intersection(&changed_there).cloned().collect();
    Ok(Divergence {
        merge_base: base.to_string(),
        ahead,
        behind,
        changed_here: changed_here.into_iter().collect(),
        changed_there: changed_there.into_iter().collect(),
        both,
    })
}

/// Those of `paths` that `theirs` changed since its merge-base with `ours` (each a local branch,
/// or else any revision), in the order asked, each with the newest commit of `theirs` that
/// touched it. A path only `ours` changed, or one `theirs` changed and changed back, is not
/// listed. `theirs`' first-parent line is read back to the merge-base, one tree diff a commit,
/// and no further once every listed path has its commit; a change no commit on that line shows
/// (one that came in with history the merge-base also has) is given `theirs`' tip.
pub fn changes_since_base(
    repo_path: &Path,
    ours: &str,
    theirs: &str,
    paths: &[String],
) -> Result<Vec<TheirChange>, GitError> {
    let repo = crate::open(repo_path)?;
    let our_tip = commit_named(&repo, ours)?;
    let their_tip = commit_named(&repo, theirs)?;
    let base = merge_base(&repo, (ours, &our_tip), (theirs, &their_tip))?;
    let asked: BTreeSet<String> = paths.iter().cloned().collect();
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    let base_tree = repo.find_commit(base)?.tree()?;
    let mut unattributed =
        paths_changed_among(&repo, Some(&base_tree), &their_tip.tree()?, &asked)?;
    let mut newest: HashMap<String, Oid> = HashMap::new();
    let mut walk = repo.revwalk()?;
    walk.push(their_tip.id())?;
    walk.hide(base)?;
    walk.simplify_first_parent()?;
    walk.set_sorting(Sort::TOPOLOGICAL)?;
    for id in walk {
        if unattributed.is_empty() {
            break;
        }
        let commit = repo.find_commit(id?)?;
        let parent_tree = match commit.parent_count() {
            0 => None,
            _ => Some(commit.parent(0)?.tree()?),
        };
        let touched =
            paths_changed_among(&repo, parent_tree.as_ref(), &commit.tree()?, &unattributed)?;
        for path in touched {
            unattributed.remove(&path);
            newest.insert(path, commit.id());
        }
    }
    let mut changes = Vec::new();
    let mut seen = HashSet::new();
    for path in paths {
        if !seen.insert(path.as_str()) {
            continue;
        }
        let commit = match newest.get(path) {
            Some(id) => repo.find_commit(*id)?,
            None if unattributed.contains(path) => their_tip.clone(),
            None => continue,
        };
        changes.push(TheirChange {
            path: path.clone(),
            commit: commit.id().to_string(),
            time: DateTime::from_timestamp(commit.time().seconds(), 0).unwrap_or_default(),
        });
    }
    Ok(changes)
}

/// Those of `paths` (relative to the working tree's root) that the working tree at
/// `worktree_path` holds changed from its HEAD, in the order asked: changed on disk, staged,
/// deleted, or new and untracked — what `git status` lists for them. An ignored file is not
/// listed, as `git status` does not list it.
pub fn dirty_paths(worktree_path: &Path, paths: &[String]) -> Result<Vec<String>, GitError> {
    let repo = crate::open(worktree_path)?;
    if repo.is_bare() {
        return Err(GitError::NotARepository(worktree_path.to_path_buf()));
    }
    if paths.is_empty() {
        // No pathspec would mean every path.
        return Ok(Vec::new());
    }
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true)
        .disable_pathspec_match(true);
    for path in paths {
        options.pathspec(path.as_str());
    }
    let statuses = repo.statuses(Some(&mut options))?;
    let changed: HashSet<String> = statuses
        .iter()
        .filter(|entry| !entry.status().is_ignored() && entry.status() != git2::Status::CURRENT)
        .map(|entry| String::from_utf8_lossy(entry.path_bytes()).into_owned())
        .collect();
    let mut seen = HashSet::new();
    Ok(paths
        .iter()
        .filter(|path| changed.contains(path.as_str()) && seen.insert(path.as_str()))
        .cloned()
        .collect())
}

/// The local branch `name`, or `NoSuchBranch` naming it.
pub(crate) fn local_branch<'r>(
    repo: &'r Repository,
    name: &str,
) -> Result<git2::Branch<'r>, GitError> {
    repo.find_branch(name, BranchType::Local)
        .map_err(|e| match e.code() {
            git2::ErrorCode::NotFound | git2::ErrorCode::InvalidSpec => {
                GitError::NoSuchBranch(name.to_owned())
            }
            _ => GitError::Git(e),
        })
}

/// The commit `name` stands for: the local branch of that name first (git's own look-up would
/// take a tag of the same name before it), else any revision; `NoSuchBranch` naming it if neither.
pub(crate) fn commit_named<'r>(repo: &'r Repository, name: &str) -> Result<Commit<'r>, GitError> {
    if let Ok(branch) = repo.find_branch(name, BranchType::Local) {
        return Ok(branch.get().peel_to_commit()?);
    }
    repo.revparse_single(name)
        .and_then(|object| object.peel_to_commit())
        .map_err(|_| GitError::NoSuchBranch(name.to_owned()))
}

/// The best common ancestor of two named commits, or `NoMergeBase` naming both.
pub(crate) fn merge_base(
    repo: &Repository,
    (ours, our_tip): (&str, &Commit<'_>),
    (theirs, their_tip): (&str, &Commit<'_>),
) -> Result<Oid, GitError> {
    repo.merge_base(our_tip.id(), their_tip.id())
        .map_err(|e| match e.code() {
            git2::ErrorCode::NotFound => GitError::NoMergeBase {
                ours: ours.to_owned(),
                theirs: theirs.to_owned(),
            },
            _ => GitError::Git(e),
        })
}

/// Both sides' paths of every change from `old` (none: the empty tree) to `new`. Without rename
/// detection a rename is a deletion and an addition, which names the same two paths.
pub(crate) fn paths_changed(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: &Tree<'_>,
) -> Result<BTreeSet<String>, git2::Error> {
    let diff = repo.diff_tree_to_tree(old, Some(new), None)?;
    Ok(paths_of(&diff))
}

/// [`paths_changed`] among `among` only: the diff is limited to them, so it reads only the trees
/// along them.
fn paths_changed_among(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: &Tree<'_>,
    among: &BTreeSet<String>,
) -> Result<BTreeSet<String>, git2::Error> {
    if among.is_empty() {
        return Ok(BTreeSet::new());
    }
    let mut options = DiffOptions::new();
    // Literal paths: a `*` or `[` in a file's name is that character.
    options.disable_pathspec_match(true);
    for path in among {
        options.pathspec(path.as_str());
    }
    let diff = repo.diff_tree_to_tree(old, Some(new), Some(&mut options))?;
    // A path given that is a folder on one side matches the files beneath it; only what was
    // asked is answered.
    Ok(paths_of(&diff)
        .into_iter()
        .filter(|path| among.contains(path))
        .collect())
}

fn paths_of(diff: &git2::Diff<'_>) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            if let Some(path) = file.path_bytes() {
                paths.insert(String::from_utf8_lossy(path).into_owned());
            }
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::testing::{commit_file, git, read, repository, rev, worktree};

    const FILES: &[(&str, &str)] = &[
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("e.txt", "e\n"),
    ];

    #[test]
    fn divergence_counts_each_sides_commits_and_names_the_paths_each_changed() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path(), FILES);
        let task = worktree(&repo, "task", "task", "main");
        commit_file(&task, "a.txt", "a by the task\n", "task edits a");
        git(&task, &["mv", "b.txt", "b2.txt"]);
        git(&task, &["commit", "-q", "-m", "task renames b"]);
        commit_file(&repo, "a.txt", "a on main\n", "main edits a");
        git(&repo, &["rm", "-q", "c.txt"]);
        git(&repo, &["commit", "-q", "-m", "main deletes c"]);
        commit_file(&repo, "docs/d.txt", "d\n", "main adds d");

        // Asked through the task's worktree: branches are the repository's.
        let found = divergence(&task, "task", "main").unwrap();

        assert_eq!(
            found,
            Divergence {
                merge_base: git(&repo, &["merge-base", "task", "main"])
                    .trim()
                    .to_owned(),
                ahead: 2,
                behind: 3,
                changed_here: vec!["a.txt".into(), "b.txt".into(), "b2.txt".into()],
                changed_there: vec!["a.txt".into(), "c.txt".into(), "docs/d.txt".into()],
                both: vec!["a.txt".into()],
            }
        );
        // Any revision for the target: one commit back on main is one fewer behind.
        let back = divergence(&repo, "task", "main~1").unwrap();
        assert_eq!((back.ahead, back.behind), (2, 2));
        assert_eq!(back.changed_there, vec!["a.txt", "c.txt"]);
    }

    #[test]
    fn an_unknown_branch_or_target_is_named_and_unrelated_lines_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path(), FILES);
        let err = divergence(&repo, "no-such", "main").unwrap_err();
        assert!(
            matches!(&err, GitError::NoSuchBranch(b) if b == "no-such"),
            "{err:?}"
        );
        let err = divergence(&repo, "main", "nor-this").unwrap_err();
        assert!(
            matches!(&err, GitError::NoSuchBranch(b) if b == "nor-this"),
            "{err:?}"
        );
        git(&repo, &["checkout", "-q", "--orphan", "alone"]);
        commit_file(&repo, "z.txt", "z\n", "a root of its own");
        let err = divergence(&repo, "alone", "main").unwrap_err();
        assert!(matches!(err, GitError::NoMergeBase { .. }), "{err:?}");
    }

    #[test]
    fn changes_since_base_names_the_newest_commit_of_theirs_that_touched_each_path() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path(), FILES);
        let task = worktree(&repo, "task", "task", "main");
        // Ours changed e.txt only; theirs (main) a.txt twice, b.txt once, c.txt and back.
        commit_file(&task, "e.txt", "e by the task\n", "task edits e");
        commit_file(&repo, "a.txt", "a once\n", "main edits a");
        let b_commit = commit_file(&repo, "b.txt", "b on main\n", "main edits b");
        commit_file(&repo, "c.txt", "c for a while\n", "main edits c");
        let a_commit = commit_file(&repo, "a.txt", "a twice\n", "main edits a again");
        commit_file(&repo, "c.txt", "c\n", "main puts c back");

        let asked: Vec<String> = ["e.txt", "b.txt", "c.txt", "a.txt", "b.txt", "nowhere.txt"]
            .map(String::from)
            .to_vec();
        let found = changes_since_base(&task, "task", "main", &asked).unwrap();

        let named: Vec<(&str, &str)> = found
            .iter()
            .map(|c| (c.path.as_str(), c.commit.as_str()))
            .collect();
        assert_eq!(
            named,
            vec![("b.txt", b_commit.as_str()), ("a.txt", a_commit.as_str())]
        );
        let when: i64 = git(&repo, &["log", "-1", "--format=%ct", &a_commit])
            .trim()
            .parse()
            .unwrap();
        assert_eq!(found[1].time.timestamp(), when);
        // The other way round: main's side sees the task's e.txt, and nothing of its own.
        let theirs = changes_since_base(&repo, "main", "task", &asked).unwrap();
        assert_eq!(theirs.len(), 1);
        assert_eq!(theirs[0].path, "e.txt");
        assert_eq!(theirs[0].commit, rev(&task, "HEAD"));
    }

    #[test]
    fn a_change_merged_into_theirs_is_named_by_the_merge_commit() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path(), FILES);
        worktree(&repo, "task", "task", "main");
        let side = worktree(&repo, "side", "side", "main");
        commit_file(&side, "a.txt", "a from the side\n", "side edits a");
        commit_file(&repo, "b.txt", "b on main\n", "main edits b");
        git(
            &repo,
            &["merge", "-q", "--no-ff", "-m", "merge side", "side"],
        );
        let merge = rev(&repo, "HEAD");

        let found = changes_since_base(&repo, "task", "main", &["a.txt".to_owned()]).unwrap();

        assert_eq!(found.len(), 1);
        assert_eq!(found[0].commit, merge);
    }

    #[test]
    fn dirty_paths_names_the_asked_paths_git_status_lists() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path(), FILES);
        let task = worktree(&repo, "task", "task", "main");
        std::fs::write(task.join("a.txt"), "a changed\n").unwrap();
        std::fs::remove_file(task.join("c.txt")).unwrap();
        std::fs::write(task.join("staged.txt"), "new\n").unwrap();
        git(&task, &["add", "staged.txt"]);
        std::fs::create_dir(task.join("new")).unwrap();
        std::fs::write(task.join("new/untracked.txt"), "u\n").unwrap();
        std::fs::write(task.join("not-asked.txt"), "x\n").unwrap();
        std::fs::write(task.join(".gitignore"), "ignored.txt\n").unwrap();
        std::fs::write(task.join("ignored.txt"), "i\n").unwrap();
        // Staged and then put back as HEAD has it on disk: still a change, in the index.
        std::fs::write(task.join("e.txt"), "e staged\n").unwrap();
        git(&task, &["add", "e.txt"]);
        std::fs::write(task.join("e.txt"), "e\n").unwrap();

        let asked: Vec<String> = [
            "new/untracked.txt",
            "a.txt",
            "b.txt",
            "c.txt",
            "e.txt",
            "staged.txt",
            "ignored.txt",
            "ghost.txt",
        ]
        .map(String::from)
        .to_vec();
        let dirty = dirty_paths(&task, &asked).unwrap();

        assert_eq!(
            dirty,
            vec!["new/untracked.txt", "a.txt", "c.txt", "e.txt", "staged.txt"]
        );
        let status = git(&task, &["status", "--porcelain", "--untracked-files=all"]);
        for path in &dirty {
            assert!(status.contains(path.as_str()), "{path} not in {status}");
        }
        assert!(!status.contains("b.txt"));
        assert_eq!(read(&task.join("a.txt")), "a changed\n");
        // The repository's own checkout is another working tree: clean.
        assert!(dirty_paths(&repo, &asked).unwrap().is_empty());
        assert!(dirty_paths(&task, &[]).unwrap().is_empty());
    }
}
