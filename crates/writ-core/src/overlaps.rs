//! Overlaps: another workspace of the same repository, or the branch a workspace's work goes back
//! to, changed a path this workspace has just written, since the two share a base. Parallel
//! agents learn of it when they write, not when they merge (after both spent their tokens).
//!
//! Which workspaces share a repository, and what git says they changed, is known where the
//! workspaces and git are (the server's [`OverlapFinder`]); the core asks it after a batch has
//! written and puts what it found in the answer and the job's stream.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One path this workspace wrote that another side changed too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Overlap {
    /// The workspace-relative path.
    pub path: String,
    /// Whose change it is: another task's workspace, or the target branch this workspace's
    /// branch merges back into.
    pub with: OverlapWith,
    /// The other workspace; absent when the caller's key may not see it (then `branch` is
    /// absent too), or when no workspace serves the target branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The other side's branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Their newest commit that changed the path since the shared base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub their_commit: Option<String>,
    /// The request that wrote their change, when it is not committed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub their_request: Option<Uuid>,
    /// When their change was made (the commit's time, or the write's).
    pub since: DateTime<Utc>,
}

/// Whose change an [`Overlap`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverlapWith {
    /// Another workspace of the repository (another task's branch).
    Workspace,
    /// The branch this workspace's branch merges back into, moved since the workspace was made.
    Target,
}

/// Finds overlaps for paths a workspace wrote (the server's, over git and the store).
#[async_trait]
pub trait OverlapFinder: Send + Sync {
    /// The overlaps of `paths` (workspace-relative) that `workspace` has just written; `caller`
    /// is the key that wrote them (`None`: auth is off), so workspaces it may not see are
    /// reported without their names. Empty for a workspace that is not in a git repository
    /// shared with another.
    async fn overlaps(
        &self,
        workspace: &str,
        paths: &[String],
        caller: Option<&str>,
    ) -> Result<Vec<Overlap>, String>;
}
