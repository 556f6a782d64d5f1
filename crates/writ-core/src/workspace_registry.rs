//! Named workspaces: the directories one writ serves besides `REPO_DIR`, and the
//! [`WorkspaceStore`] that records them beside the audit log so that every replica serves the
//! same set.
//!
//! `REPO_DIR` is always the workspace named [`WorkspaceName::DEFAULT`]; it is never stored, so a
//! deployment that names no other workspace behaves exactly as one that predates them. Every
//! other workspace has a root of its own beneath the configured workspaces directory, made empty,
//! taken from a directory already there, or made as a git worktree of a repository on a new
//! branch ([`WorkspaceKind`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::store::StoreError;

/// The longest workspace name: short enough for a path segment, a branch suffix and a log line.
pub const NAME_MAX: usize = 63;

/// A workspace's name: a slug of lower-case ASCII letters, digits and `-` (1 to [`NAME_MAX`]
/// characters, starting with a letter or a digit), so it is safe as a URL segment and as a
/// directory name and can never spell a path (`..`, `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspaceName(String);

impl WorkspaceName {
    /// The name of `REPO_DIR`.
    pub const DEFAULT: &'static str = "default";

    /// The workspace `REPO_DIR` is.
    pub fn default_workspace() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    /// Checks `name`; the error says which rule it breaks.
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("must not be empty".into());
        }
        if name.len() > NAME_MAX {
            return Err(format!(
                "is {} characters long; the limit is {NAME_MAX}",
                name.len()
            ));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(format!("may hold only a-z, 0-9 and '-' (found {bad:?})"));
        }
        if name.starts_with('-') {
            return Err("must start with a letter or a digit".into());
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is `REPO_DIR`.
    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }
}

impl std::fmt::Display for WorkspaceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for WorkspaceName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// How a workspace's root came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceKind {
    /// `REPO_DIR`, configured rather than created.
    Configured,
    /// A new, empty directory.
    Empty,
    /// A directory that already existed beneath the workspaces directory.
    Directory,
    /// A git worktree of a repository, on a branch made for it.
    GitWorktree,
}

impl WorkspaceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Empty => "empty",
            Self::Directory => "directory",
            Self::GitWorktree => "git_worktree",
        }
    }
}

impl std::fmt::Display for WorkspaceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for WorkspaceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "configured" => Self::Configured,
            "empty" => Self::Empty,
            "directory" => Self::Directory,
            "git_worktree" => Self::GitWorktree,
            other => {
                return Err(format!(
                    "unknown workspace kind '{other}' (empty, directory, git_worktree)"
                ));
            }
        })
    }
}

/// One workspace as it is recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkspaceRecord {
    pub name: WorkspaceName,
    pub kind: WorkspaceKind,
    /// The absolute path of its root directory.
    pub root: String,
    /// Where it came from: the directory (`directory`) or the repository (`git_worktree`).
    pub source: Option<String>,
    /// The branch made for it (`git_worktree`).
    pub branch: Option<String>,
    /// The ref its branch started from (`git_worktree`).
    pub base_ref: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The id of the key that created it; `None` when auth is off.
    pub created_by: Option<String>,
    /// Whether a request that does not say is committed, where the workspace is a git
    /// repository; `None`: as the server is set (`WRIT_GIT_COMMIT`).
    pub git_commit: Option<bool>,
}

/// Named workspaces, kept by the audit store (PostgreSQL or SQLite) so every replica serves the
/// same set. `default` is never stored.
#[async_trait]
pub trait WorkspaceStore: Send + Sync {
    /// Fails with [`StoreError::Conflict`] when the name is taken.
    async fn create_workspace(&self, workspace: &WorkspaceRecord) -> Result<(), StoreError>;
    /// Every stored workspace, by name.
    async fn list_workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError>;
    async fn find_workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>, StoreError>;
    /// Forgets the workspace (and its budget and claims), unless a job in it is queued or running: the check
    /// and the deletion are one transaction, and a job is recorded only in a workspace that is
    /// stored at that moment (or `default`), so a batch admitted while the workspace is deleted
    /// either counts here or is refused when its job is recorded, before it writes anything.
    async fn delete_workspace(&self, name: &str) -> Result<WorkspaceDeletion, StoreError>;
    /// Sets (or, with an empty budget, removes) the budget of `name` (a stored workspace or
    /// `default`); `false` when there is no such workspace.
    async fn set_workspace_budget(
        &self,
        name: &str,
        budget: &crate::budgets::Budget,
    ) -> Result<bool, StoreError>;
}

/// What [`WorkspaceStore::delete_workspace`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceDeletion {
    Deleted,
    /// No workspace of that name is stored.
    NotFound,
    /// Jobs in it are queued or running (their ids, oldest first, at most
    /// [`RUNNING_JOBS_NAMED`]); nothing was deleted.
    Busy(Vec<uuid::Uuid>),
}

/// How many running jobs a refused deletion names at most.
pub const RUNNING_JOBS_NAMED: usize = 20;

/// Every workspace by name, opened: what must reach a workspace it was not handed — a pending
/// write settled after a crash, a job resumed on another replica — finds it here by the name its
/// record carries.
#[async_trait]
pub trait WorkspaceOpener: Send + Sync {
    /// The workspace named `name`, opened; `None` when there is none of that name (it was
    /// deleted).
    async fn open_workspace(
        &self,
        name: &str,
    ) -> Result<Option<std::sync::Arc<dyn crate::Workspace>>, StoreError>;
}

/// One workspace alone (unit tests, and a process that serves only `REPO_DIR`): it answers for
/// its own name and no other.
pub struct OnlyWorkspace(pub std::sync::Arc<dyn crate::Workspace>);

#[async_trait]
impl WorkspaceOpener for OnlyWorkspace {
    async fn open_workspace(
        &self,
        name: &str,
    ) -> Result<Option<std::sync::Arc<dyn crate::Workspace>>, StoreError> {
        Ok((self.0.name() == name).then(|| self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_a_lower_case_slug_that_cannot_spell_a_path() {
        for good in ["default", "a", "feature-42", "0day", &"x".repeat(NAME_MAX)] {
            assert_eq!(WorkspaceName::parse(good).unwrap().as_str(), good);
        }
        for (bad, says) in [
            ("", "empty"),
            ("..", "found '.'"),
            ("a/b", "found '/'"),
            ("Upper", "found 'U'"),
            ("-x", "start with"),
            ("a%2fb", "found '%'"),
            (&"x".repeat(NAME_MAX + 1), "limit is 63"),
        ] {
            let err = WorkspaceName::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert!(WorkspaceName::default_workspace().is_default());
    }

    #[test]
    fn kinds_read_back_as_they_are_written() {
        for kind in [
            WorkspaceKind::Configured,
            WorkspaceKind::Empty,
            WorkspaceKind::Directory,
            WorkspaceKind::GitWorktree,
        ] {
            assert_eq!(kind.as_str().parse::<WorkspaceKind>().unwrap(), kind);
        }
        assert!(
            "svn"
                .parse::<WorkspaceKind>()
                .unwrap_err()
                .contains("'svn'")
        );
    }
}
