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
//! - [`merge`]: merging a git-worktree workspace's branch into another, and its audit record.

mod api;
mod built;
mod lifecycle;
mod merge;
mod opened;
mod synthesizers;

pub use api::{
    CreateWorkspace, DeletedWorkspace, MergeWorkspace, MergedWorkspace, WorkspaceInfo,
    WorkspaceSource,
};
pub use built::{BuiltPer, PerWorkspaceCache};
pub use lifecycle::{create, delete, find, list, set_budget};
pub use merge::merge;
pub use opened::Workspaces;
pub use synthesizers::{CommitterFor, Synthesizers, runner_in};

use writ_core::workspaces::WorkspaceName;

use crate::error::{ApiError, ErrorCode};

/// The variable that says where workspaces are made; named in every refusal that needs it.
pub const WORKSPACES_DIR_VAR: &str = "WRIT_WORKSPACES_DIR";

fn unknown(name: &str) -> ApiError {
    ApiError::not_found(format!("no workspace named '{name}'")).with_field("name")
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
}

fn taken(name: &WorkspaceName) -> ApiError {
    ApiError::new(
        ErrorCode::AlreadyExists,
        format!("a workspace named '{name}' exists"),
    )
    .with_field("name")
}
