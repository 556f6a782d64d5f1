//! Worktrees: a workspace that is a checkout of a repository on a branch of its own, made from a
//! given ref (the one-task-one-branch pattern), and its removal.

use std::path::{Path, PathBuf};

use git2::{BranchType, Repository, WorktreeAddOptions, WorktreePruneOptions};

/// What went wrong making or removing a worktree; each names what it was given.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("{path} is not a git repository")]
    NotARepository { path: PathBuf },
    #[error("ref '{from}' does not name a commit in the repository")]
    UnknownRef { from: String },
    #[error("branch '{branch}' already exists in the repository")]
    BranchExists { branch: String },
    #[error("'{branch}' is not a valid branch name")]
    BadBranch { branch: String },
    #[error("git: {0}")]
    Git(String),
}

impl From<git2::Error> for WorktreeError {
    fn from(err: git2::Error) -> Self {
        Self::Git(err.message().to_owned())
    }
}

/// A worktree made by [`add_worktree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorktree {
    /// Its directory.
    pub path: PathBuf,
    pub branch: String,
    /// The commit the branch starts at, in hex.
    pub commit: String,
}

/// Makes `branch` at `from` (any revision git understands: `HEAD`, a branch, a tag, a commit)
/// in the repository at `repository`, and checks it out in a new worktree at `path`, known to
/// the repository as `name`. `path` must not exist yet. Nothing is made when any step is
/// refused: a branch made for a worktree that could not be added is deleted again.
pub fn add_worktree(
    repository: &Path,
    name: &str,
    path: &Path,
    branch: &str,
    from: &str,
) -> Result<NewWorktree, WorktreeError> {
    let repo = Repository::open(repository).map_err(|_| WorktreeError::NotARepository {
        path: repository.to_path_buf(),
    })?;
    if !git2::Branch::name_is_valid(branch)? {
        return Err(WorktreeError::BadBranch {
            branch: branch.to_owned(),
        });
    }
    if repo.find_branch(branch, BranchType::Local).is_ok() {
        return Err(WorktreeError::BranchExists {
            branch: branch.to_owned(),
        });
    }
    let commit = repo
        .revparse_single(from)
        .and_then(|object| object.peel_to_commit())
        .map_err(|_| WorktreeError::UnknownRef {
            from: from.to_owned(),
        })?;
    let mut made = repo.branch(branch, &commit, false)?;
    let added = {
        let reference = made.get();
        let mut options = WorktreeAddOptions::new();
        options.reference(Some(reference));
        repo.worktree(name, path, Some(&options))
    };
    match added {
        Ok(_) => Ok(NewWorktree {
            path: path.to_path_buf(),
            branch: branch.to_owned(),
            commit: commit.id().to_string(),
        }),
        Err(err) => {
            // The branch was made only for this worktree; leaving it would make a retry fail
            // with "branch exists". Best effort: the error reported is the worktree's.
            drop(made.delete());
            Err(err.into())
        }
    }
}

/// Forgets the worktree `name` of the repository at `repository` (git's record of it, as `git
/// worktree prune` would). Its files and its branch are kept: the work on them is the caller's
/// to remove. `false` when the repository has no worktree of that name.
pub fn prune_worktree(repository: &Path, name: &str) -> Result<bool, WorktreeError> {
    let repo = Repository::open(repository).map_err(|_| WorktreeError::NotARepository {
        path: repository.to_path_buf(),
    })?;
    let Ok(worktree) = repo.find_worktree(name) else {
        return Ok(false);
    };
    let mut options = WorktreePruneOptions::new();
    options.valid(true).locked(false).working_tree(false);
    worktree.prune(Some(&mut options))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A repository with one commit holding `README`.
    fn repository(dir: &Path) -> PathBuf {
        let path = dir.join("repo");
        let repo = Repository::init(&path).unwrap();
        std::fs::write(path.join("README"), "hello\n").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("README")).unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let who = git2::Signature::now("writ", "writ@localhost").unwrap();
        repo.commit(Some("HEAD"), &who, &who, "first", &tree, &[])
            .unwrap();
        path
    }

    #[test]
    fn a_worktree_is_checked_out_on_a_new_branch_from_the_ref() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path());
        let at = dir.path().join("task-1");
        let made = add_worktree(&repo, "task-1", &at, "task/1", "HEAD").unwrap();
        assert_eq!(
            std::fs::read_to_string(at.join("README")).unwrap(),
            "hello\n"
        );
        let opened = Repository::open(&at).unwrap();
        assert_eq!(opened.head().unwrap().shorthand().unwrap(), "task/1");
        let original = Repository::open(&repo).unwrap();
        assert_eq!(
            original.head().unwrap().target().unwrap().to_string(),
            made.commit
        );
        // A file written in the worktree is not in the repository's own checkout.
        std::fs::write(at.join("new.txt"), "x").unwrap();
        assert!(!repo.join("new.txt").exists());
    }

    #[test]
    fn an_existing_branch_an_unknown_ref_or_a_non_repository_is_refused_and_makes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path());
        add_worktree(&repo, "a", &dir.path().join("a"), "same", "HEAD").unwrap();
        let again = add_worktree(&repo, "b", &dir.path().join("b"), "same", "HEAD");
        assert!(
            matches!(again, Err(WorktreeError::BranchExists { .. })),
            "{again:?}"
        );
        assert!(!dir.path().join("b").exists());
        let unknown = add_worktree(&repo, "c", &dir.path().join("c"), "c", "no-such-ref");
        assert!(
            matches!(unknown, Err(WorktreeError::UnknownRef { .. })),
            "{unknown:?}"
        );
        let repo2 = Repository::open(&repo).unwrap();
        assert!(repo2.find_branch("c", BranchType::Local).is_err());
        let bad = add_worktree(&repo, "d", &dir.path().join("d"), "a..b", "HEAD");
        assert!(
            matches!(bad, Err(WorktreeError::BadBranch { .. })),
            "{bad:?}"
        );
        let plain = dir.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        let not_repo = add_worktree(&plain, "e", &dir.path().join("e"), "e", "HEAD");
        assert!(matches!(
            not_repo,
            Err(WorktreeError::NotARepository { .. })
        ));
    }

    #[test]
    fn pruning_forgets_the_worktree_and_keeps_its_files_and_branch() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path());
        let at = dir.path().join("w");
        add_worktree(&repo, "w", &at, "w", "HEAD").unwrap();
        assert!(prune_worktree(&repo, "w").unwrap());
        let opened = Repository::open(&repo).unwrap();
        assert!(opened.find_worktree("w").is_err());
        assert!(opened.find_branch("w", BranchType::Local).is_ok());
        assert!(at.join("README").exists());
        assert!(!prune_worktree(&repo, "w").unwrap());
    }
}
