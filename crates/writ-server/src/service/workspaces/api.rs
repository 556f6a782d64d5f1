//! The bodies and answers of the `/workspaces` routes, as the API and the OpenAPI document show
//! them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use writ_core::budgets::{Budget, WindowSpend};
use writ_core::workspace_registry::{WorkspaceKind, WorkspaceName, WorkspaceRecord};

use super::opened::Workspaces;

/// The characters [`WorkspaceName::parse`] allows, as a regular expression; its length bounds
/// are [`writ_core::workspace_registry::NAME_MAX`].
pub(super) const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9-]*$";

/// `POST /workspaces`: the new workspace's name and where it comes from.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "WorkspaceCreate")]
pub struct CreateWorkspace {
    /// A slug: a-z, 0-9 and `-`, starting with a letter or a digit (422 otherwise); `default`
    /// and the names of other workspaces are taken (409).
    // `WorkspaceName::parse` checks the name in `create`; the bounds restate its rules for the
    // document, and a test holds the two to the same names.
    #[schemars(
        length(min = 1, max = writ_core::workspace_registry::NAME_MAX),
        regex(pattern = NAME_PATTERN)
    )]
    pub name: String,
    /// Absent: an empty workspace.
    #[serde(default)]
    pub source: Option<WorkspaceSource>,
    /// Commit what each request in it writes, unless the request says otherwise; absent: as
    /// the server is set (`WRIT_GIT_COMMIT`).
    #[serde(default)]
    pub git_commit: Option<bool>,
    /// What the batches in it may spend per UTC day and month, whoever's key runs them; absent:
    /// no limit beyond the keys' own.
    #[serde(default)]
    pub budget: Option<Budget>,
}

/// Where a new workspace's root comes from.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkspaceSource {
    /// A new, empty directory `<WRIT_WORKSPACES_DIR>/<name>`.
    // serde's `deny_unknown_fields` does not reach a unit variant of an internally tagged enum:
    // fields beside `kind` are ignored here, so the document must not say they are refused.
    #[schemars(transform = fields_beside_the_tag_are_ignored)]
    Empty,
    /// A directory already beneath `WRIT_WORKSPACES_DIR`.
    Directory {
        /// Relative to `WRIT_WORKSPACES_DIR`; must stay beneath it.
        path: String,
    },
    /// A git worktree `<WRIT_WORKSPACES_DIR>/<name>` of `repository` on the new branch
    /// `branch`, made at `from`.
    GitWorktree {
        /// A workspace's name, or a path relative to `WRIT_WORKSPACES_DIR`.
        repository: String,
        /// The new branch; refused 409 when it exists.
        branch: String,
        /// The ref the branch is made at.
        #[serde(default)]
        #[schemars(extend("default" = "HEAD"))]
        from: Option<String>,
    },
}

fn fields_beside_the_tag_are_ignored(schema: &mut schemars::Schema) {
    schema.remove("additionalProperties");
}

/// A workspace as the API answers it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct WorkspaceInfo {
    /// A slug: a-z, 0-9 and `-`, 1 to 63 characters, starting with a letter or a digit.
    pub name: String,
    /// `configured`: `default`, REPO_DIR.
    #[schemars(extend("enum" = ["configured", "empty", "directory", "git_worktree"]))]
    pub kind: String,
    /// The absolute path of its root.
    pub root: String,
    /// The directory (`directory`, as given) or the repository (`git_worktree`, absolute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The branch made for it (`git_worktree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The ref its branch was made at (`git_worktree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
    /// The id of the key that made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Whether its requests commit by default; absent: as the server is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<bool>,
    /// What the batches in it may spend (`GET /workspaces/{name}`, and the answers that make or
    /// change a workspace); absent in the listing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// What the batches in it spent this UTC day and month (the day's window first), whoever's
    /// key ran them, beside the budget's limits; absent in the listing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spend: Option<Vec<WindowSpend>>,
    /// A `git_worktree` workspace's branch against its target (`GET /workspaces/{name}`): how
    /// many commits it is behind and ahead, and the paths changed on both sides since they
    /// parted; absent in the listing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<super::rebase::BaseStatus>,
}

impl From<WorkspaceRecord> for WorkspaceInfo {
    fn from(r: WorkspaceRecord) -> Self {
        Self {
            name: r.name.to_string(),
            kind: r.kind.to_string(),
            root: r.root,
            source: r.source,
            branch: r.branch,
            base_ref: r.base_ref,
            created_at: Some(r.created_at),
            created_by: r.created_by,
            git_commit: r.git_commit,
            budget: None,
            spend: None,
            base: None,
        }
    }
}

/// What `DELETE /workspaces/{name}` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DeletedWorkspace {
    pub name: String,
    /// Always `false`: the files are kept (a git worktree's branch too); removing them is left
    /// to whoever owns them.
    pub files_removed: bool,
    /// Whether git's record of the worktree was pruned (`git_worktree` workspaces).
    pub worktree_pruned: bool,
    pub root: String,
}

pub(super) fn default_info(workspaces: &Workspaces) -> WorkspaceInfo {
    WorkspaceInfo {
        name: WorkspaceName::DEFAULT.to_owned(),
        kind: WorkspaceKind::Configured.to_string(),
        root: workspaces.default.root().display().to_string(),
        source: None,
        branch: None,
        base_ref: None,
        created_at: None,
        created_by: None,
        git_commit: None,
        budget: None,
        spend: None,
        base: None,
    }
}

/// The body of `POST /workspaces/{name}/merge`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeWorkspace {
    /// The branch of the same repository to merge the workspace's branch into (e.g. `main`).
    pub into: String,
    /// Merge even when the workspace's newest rebase left its branch failing the checks it
    /// re-ran (409 `checks_failed` otherwise).
    #[serde(default)]
    pub force: bool,
}

/// What a merge did.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct MergedWorkspace {
    /// The merge's own record in the audit log.
    pub request_id: uuid::Uuid,
    pub workspace: String,
    /// The workspace's branch.
    pub branch: String,
    pub into: String,
    /// `up_to_date`, `fast_forward` or `merged` (one merge commit).
    #[schemars(extend("enum" = ["up_to_date", "fast_forward", "merged"]))]
    pub outcome: &'static str,
    /// The commit `into` now points at (absent when it was already up to date).
    pub commit: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `fields_beside_the_tag_are_ignored` tells the document; should serde start refusing
    /// them, this fails and the transform goes.
    #[test]
    fn an_empty_source_ignores_fields_beside_its_kind_and_the_others_refuse_them() {
        let with_extra = |source: &str| {
            serde_json::from_str::<CreateWorkspace>(&format!(
                r#"{{"name": "a", "source": {source}}}"#
            ))
        };

        assert!(with_extra(r#"{"kind": "empty", "x": 1}"#).is_ok());
        assert!(with_extra(r#"{"kind": "directory", "path": "p", "x": 1}"#).is_err());
        assert!(
            with_extra(r#"{"kind": "git_worktree", "repository": "r", "branch": "b", "x": 1}"#)
                .is_err()
        );
    }

    #[test]
    fn the_documented_name_bounds_accept_exactly_the_names_the_code_accepts() {
        let pattern = regex::Regex::new(NAME_PATTERN).unwrap();
        let documented = |name: &str| {
            (1..=writ_core::workspace_registry::NAME_MAX).contains(&name.len())
                && pattern.is_match(name)
        };
        let longest = "a".repeat(writ_core::workspace_registry::NAME_MAX);
        let too_long = "a".repeat(writ_core::workspace_registry::NAME_MAX + 1);
        for name in [
            "a", "0", "web-2", "a-", "default", &longest, "", "-a", "A", "a_b", "a.b", "a/b", "é",
            "a\n", &too_long,
        ] {
            assert_eq!(
                documented(name),
                WorkspaceName::parse(name).is_ok(),
                "{name:?}"
            );
        }
    }
}
