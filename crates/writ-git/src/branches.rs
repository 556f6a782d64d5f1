//! Which repository a checkout belongs to, which branch it is on, and which branch a task's
//! work goes back to: what tells the workspaces of one repository apart from the others.

use std::path::{Path, PathBuf};

use git2::{BranchType, Repository};

/// The repository `path` is a checkout of (itself, or the repository a linked worktree was made
/// from): its main working tree, canonical, so two checkouts of one repository compare equal.
/// `None` when `path` is not in a git repository with a working tree.
pub fn repository_of(path: &Path) -> Option<PathBuf> {
    let repo = Repository::open(path).ok()?;
    // A linked worktree's common directory is the main repository's `.git`.
    let common = repo.commondir();
    let main = if common.file_name().is_some_and(|n| n == ".git") {
        common.parent()?.to_path_buf()
    } else {
        repo.workdir()?.to_path_buf()
    };
    std::fs::canonicalize(main).ok()
}

/// The local branch checked out at `path`; `None` for a detached HEAD, an unborn branch, or no
/// repository.
pub fn checked_out_branch(path: &Path) -> Option<String> {
    let repo = Repository::open(path).ok()?;
    let head = repo.head().ok()?;
    if !head.is_branch() {
        return None;
    }
    head.shorthand().ok().map(str::to_owned)
}

/// The commit (hex) the local branch `branch` of the repository at `repository` points at.
pub fn branch_tip(repository: &Path, branch: &str) -> Option<String> {
    let repo = Repository::open(repository).ok()?;
    let found = repo.find_branch(branch, BranchType::Local).ok()?;
    found.get().target().map(|id| id.to_string())
}

/// The branch a task's branch made at `base_ref` goes back to: `base_ref` itself when it names a
/// local branch of the repository at `repository`, else the branch the repository's own
/// checkout is on (a task made at `HEAD` or at a commit goes back to where HEAD was).
pub fn target_branch(repository: &Path, base_ref: Option<&str>) -> Option<String> {
    if let Some(base) = base_ref
        && base != "HEAD"
    {
        let repo = Repository::open(repository).ok()?;
        let found = repo.find_branch(base, BranchType::Local).is_ok();
        if found {
            return Some(base.to_owned());
        }
    }
    checked_out_branch(repository)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_worktree_belongs_to_the_repository_it_was_made_from_and_is_on_its_branch() {
        let dir = tempfile::tempdir().unwrap();
        let repo = crate::testing::repository(dir.path(), &[("README", "hello\n")]);
        let at = dir.path().join("task");
        crate::add_worktree(&repo, "task", &at, "task/1", "HEAD").unwrap();
        let canonical = std::fs::canonicalize(&repo).unwrap();
        assert_eq!(repository_of(&at).unwrap(), canonical);
        assert_eq!(repository_of(&repo).unwrap(), canonical);
        assert_eq!(checked_out_branch(&at).as_deref(), Some("task/1"));
        let main = checked_out_branch(&repo).unwrap();
        // Made at HEAD: back to the repository's own branch; made at a branch: back to it.
        assert_eq!(target_branch(&repo, Some("HEAD")), Some(main.clone()));
        assert_eq!(
            target_branch(&repo, Some("task/1")).as_deref(),
            Some("task/1")
        );
        assert_eq!(target_branch(&repo, Some("no-such")), Some(main));
        let plain = dir.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert_eq!(repository_of(&plain), None);
        assert_eq!(checked_out_branch(&plain), None);
    }
}
