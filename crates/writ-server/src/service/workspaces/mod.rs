//! Named workspaces. `default` is `REPO_DIR`, opened at start-up and never stored. Every other
//! workspace is a row of the store (so every replica serves it) and a directory beneath
//! `WRIT_WORKSPACES_DIR`.
//!
//! - [`opened`]: [`Workspaces`], which opens each workspace once per process and hands the
//!   opened [`writ_core::Workspace`] to every request after that;
//! - [`built`]: what else is built once per workspace ([`BuiltPer`]: the router of the routes
//!   inside it), emptied of a workspace when it is deleted;
//! - [`synthesizers`]: the synthesizer of each workspace, for its batches and resumed jobs;
//! - [`api`]: the bodies and answers of the `/workspaces` routes;
//! - [`lifecycle`]: making, listing, finding, deleting a workspace and setting its budget;
//! - [`merge`]: merging a git-worktree workspace's branch into another, and its audit record;
//! - [`overlaps`]: which paths a workspace wrote that another workspace of its repository (or
//!   its target branch) changed too, and each workspace's repository, branch and target;
//! - [`rebase`]: replaying a task's branch on its target's tip, and re-running the checks of
//!   the files it touched;
//! - [`repository`]: which repository a workspace belongs to (whose claims it sees);
//! - [`claims`]: a workspace's claims on paths of its repository, and the refusal of a write
//!   into a path another workspace claimed.

mod api;
mod built;
mod claims;
mod lifecycle;
mod merge;
mod opened;
mod overlaps;
mod rebase;
mod recheck;
mod repository;
mod synthesizers;

pub use api::{
    CreateWorkspace, DeletedWorkspace, MergeWorkspace, MergedWorkspace, WorkspaceInfo,
    WorkspaceSource,
};
pub use built::{BuiltPer, PerWorkspaceCache};
pub use claims::{
    ClaimList, ClaimView, ClaimedPathView, MakeClaim, ReleasedClaims, list as list_claims,
    make as make_claim, refuse_claimed, release as release_claim, release_all as release_claims,
    respected,
};
pub use lifecycle::{create, delete, find, list, set_budget};
pub use merge::merge;
pub use opened::Workspaces;
pub use overlaps::{
    GitOverlaps, hide as hide_overlaps, of_write as overlaps_of_write, written as overlaps_written,
};
pub use rebase::{
    BaseStatus, GeneratedRecheck, OverlapList, RebaseWorkspace, RebasedWorkspace, Recheck,
    base_status, is_rebase_route, list_overlaps, rebase, undo_rebase,
};
pub use repository::{default_repository, repository_named, repository_of};
pub use synthesizers::{CommitterFor, Synthesizers, runner_in};

use writ_core::workspace_registry::WorkspaceName;

use crate::error::{ApiError, ErrorCode};

/// The variable that says where workspaces are made; named in every refusal that needs it.
pub const WORKSPACES_DIR_VAR: &str = "WRIT_WORKSPACES_DIR";

fn unknown(name: &str) -> ApiError {
    ApiError::not_found(format!("no workspace named '{name}'")).with_field("name")
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
}

/// 409 for a merge or a rebase that does not apply cleanly: `doing` says which ("does not
/// replay onto 'main'"), `details.files` each conflicting file with its hunks.
fn conflicts(
    branch: &str,
    doing: &str,
    field: &str,
    conflicts: &[writ_git::merge::MergeConflict],
) -> ApiError {
    let files: Vec<serde_json::Value> = conflicts
        .iter()
        .map(|c| serde_json::json!({"path": c.path, "hunks": c.hunks}))
        .collect();
    ApiError::new(
        ErrorCode::Conflict,
        format!(
            "'{branch}' {doing} cleanly: {} conflict; nothing was changed",
            conflicts
                .iter()
                .map(|c| c.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .with_field(field)
    .with_details(serde_json::json!({ "files": files }))
}

fn taken(name: &WorkspaceName) -> ApiError {
    ApiError::new(
        ErrorCode::AlreadyExists,
        format!("a workspace named '{name}' exists"),
    )
    .with_field("name")
}
