//! Git for workspaces that are repositories, over libgit2 (`git2`): what writ does with git is
//! here, so the core and the server name operations (make a worktree, commit these paths, revert,
//! merge) and never a git object.
//!
//! Several agents may work on one repository at once, each in a worktree on a branch of its own:
//! how their branches have moved apart, and which paths each changed, is `divergence.rs`; a
//! branch replayed onto another, or put back, with the worktrees that have it checked out
//! following, is `rebase.rs` (over `checkouts.rs`, which merges share).
//!
//! Nothing here fetches, pushes or runs the `git` program.

use std::path::Path;

use git2::Repository;

pub mod branches;
mod checkouts;
pub mod commit;
pub mod divergence;
pub mod merge;
mod packs;
pub mod rebase;
#[cfg(test)]
mod testing;
pub mod worktree;

pub use divergence::{Divergence, TheirChange, changes_since_base, dirty_paths, divergence};
pub use rebase::{RebaseOutcome, rebase_branch, reset_branch};
pub use worktree::{NewWorktree, WorktreeError, add_worktree, prune_worktree};

/// The repository at `path`: its own folder, or any of its worktrees' (which share its branches
/// and objects).
pub(crate) fn open(path: &Path) -> Result<Repository, commit::GitError> {
    Repository::open(path).map_err(|_| commit::GitError::NotARepository(path.to_path_buf()))
}
