//! Which repository a workspace belongs to: the one rule that says which workspaces see each
//! other's claims (and, for whoever needs it, each other's changes).
//!
//! A `git_worktree` workspace belongs to the repository it was made from (its `source`, an
//! absolute path); every other workspace — `default` (REPO_DIR) among them — is a repository of
//! its own, keyed by its root. So two worktrees made from one repository share it, and so does
//! that repository's own workspace (`default`, when the worktrees were made with `repository:
//! "default"`).

use writ_core::workspace_registry::{WorkspaceKind, WorkspaceName, WorkspaceRecord};

use super::opened::Workspaces;
use crate::error::{ApiError, store_error};

/// The repository of the stored workspace `record`.
pub fn repository_of(record: &WorkspaceRecord) -> String {
    match (record.kind, &record.source) {
        (WorkspaceKind::GitWorktree, Some(repository)) => repository.clone(),
        _ => record.root.clone(),
    }
}

/// The repository of `default`: REPO_DIR, as a worktree made from it records its source.
pub fn default_repository(workspaces: &Workspaces) -> String {
    workspaces.default.root().display().to_string()
}

/// The repository of the workspace `name`; `None` when there is no such workspace.
pub async fn repository_named(
    workspaces: &Workspaces,
    name: &str,
) -> Result<Option<String>, ApiError> {
    if name == WorkspaceName::DEFAULT {
        return Ok(Some(default_repository(workspaces)));
    }
    Ok(workspaces
        .store
        .find_workspace(name)
        .await
        .map_err(store_error)?
        .as_ref()
        .map(repository_of))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn record(name: &str, kind: WorkspaceKind, source: Option<&str>) -> WorkspaceRecord {
        WorkspaceRecord {
            name: WorkspaceName::parse(name).unwrap(),
            kind,
            root: format!("/srv/ws/{name}"),
            source: source.map(str::to_owned),
            branch: None,
            base_ref: None,
            created_at: Utc::now(),
            created_by: None,
            git_commit: None,
        }
    }

    #[test]
    fn worktrees_of_one_repository_share_it_and_other_workspaces_are_their_own() {
        let a = record("a", WorkspaceKind::GitWorktree, Some("/srv/repo"));
        let b = record("b", WorkspaceKind::GitWorktree, Some("/srv/repo"));
        assert_eq!(repository_of(&a), "/srv/repo");
        assert_eq!(repository_of(&a), repository_of(&b));
        let dir = record("d", WorkspaceKind::Directory, Some("d"));
        assert_eq!(
            repository_of(&dir),
            "/srv/ws/d",
            "a directory's source is no repository"
        );
        assert_eq!(
            repository_of(&record("e", WorkspaceKind::Empty, None)),
            "/srv/ws/e"
        );
    }
}
