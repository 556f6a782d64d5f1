//! Git for workspaces that are repositories, over libgit2 (`git2`): what writ does with git is
//! here, so the core and the server name operations (make a worktree, commit these paths, revert,
//! merge) and never a git object.
//!
//! Nothing here fetches, pushes or runs the `git` program.

pub mod commit;
pub mod merge;
mod packs;
pub mod worktree;

pub use worktree::{NewWorktree, WorktreeError, add_worktree, prune_worktree};
