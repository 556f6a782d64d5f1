//! Merging a git-worktree workspace's branch into another branch of its repository, and the
//! merge's record in the audit log.

use std::path::Path;

use writ_core::AuditStore;
use writ_core::workspace_registry::{WorkspaceKind, WorkspaceName};

use super::api::{MergeWorkspace, MergedWorkspace};
use super::opened::Workspaces;
use super::{invalid, unknown};
use crate::error::{ApiError, ErrorCode, store_error};

/// Merges the branch of the git-worktree workspace `name` into `into`: a fast-forward when
/// possible, else one merge commit; conflicts answer 409 with each file and its hunks, and
/// neither branch moves. A merge that moved `into` is recorded as a request (route `POST
/// /workspaces/{name}/merge`, its answer stored with it).
///
/// `bound`: the workspaces the caller's key may use (`None`: all). A branch that another
/// workspace of the repository was made on is that workspace's: a key that may not use it is
/// answered exactly as for a branch that does not exist.
pub async fn merge(
    workspaces: &Workspaces,
    name: &str,
    request: MergeWorkspace,
    caller: Option<&str>,
    bound: Option<&[String]>,
    request_id: uuid::Uuid,
) -> Result<MergedWorkspace, ApiError> {
    let record = match workspaces
        .store
        .find_workspace(name)
        .await
        .map_err(store_error)?
    {
        Some(record) => record,
        None if name == WorkspaceName::DEFAULT => {
            return Err(invalid(
                "name",
                "the default workspace has no branch of its own to merge; merge a git_worktree workspace",
            ));
        }
        None => return Err(unknown(name)),
    };
    let (Some(repository), Some(branch), WorkspaceKind::GitWorktree) =
        (record.source.clone(), record.branch.clone(), record.kind)
    else {
        return Err(invalid(
            "name",
            format!(
                "'{name}' is a {} workspace; only a git_worktree workspace has a branch to merge",
                record.kind
            ),
        ));
    };
    let into = request.into.trim().to_owned();
    if into.is_empty() || into == branch {
        return Err(invalid(
            "into",
            format!("into must name another branch of the repository than '{branch}'"),
        ));
    }
    if let Some(bound) = bound {
        let others = workspaces
            .store
            .list_workspaces()
            .await
            .map_err(store_error)?;
        let theirs = others.iter().any(|w| {
            w.source.as_deref() == Some(repository.as_str())
                && w.branch.as_deref() == Some(into.as_str())
                && !bound.iter().any(|b| b.as_str() == w.name.as_str())
        });
        if theirs {
            return Err(no_branch(&into));
        }
    }
    if !request.force {
        refuse_failed_rebase(workspaces, name, &repository, &branch).await?;
    }
    let author = caller.unwrap_or("writ").to_owned();
    let outcome = {
        let (repository, branch, into) = (repository.clone(), branch.clone(), into.clone());
        tokio::task::spawn_blocking(move || {
            writ_git::merge::merge_branches(
                Path::new(&repository),
                &branch,
                &into,
                &author,
                "writ@localhost",
            )
        })
        .await
        .map_err(ApiError::internal)?
    };
    use writ_git::merge::MergeOutcome;
    let (outcome, commit) = match outcome {
        Ok(MergeOutcome::UpToDate) => ("up_to_date", None),
        Ok(MergeOutcome::FastForward { commit }) => ("fast_forward", Some(commit)),
        Ok(MergeOutcome::Merged { commit }) => ("merged", Some(commit)),
        Ok(MergeOutcome::Conflicts(found)) => {
            return Err(super::conflicts(
                &branch,
                &format!("does not merge into '{into}'"),
                "into",
                &found,
            ));
        }
        Err(writ_git::commit::GitError::NoSuchBranch(_)) => return Err(no_branch(&into)),
        Err(e) => return Err(invalid("into", format!("the merge could not be made: {e}"))),
    };
    let merged = MergedWorkspace {
        request_id,
        workspace: name.to_owned(),
        branch,
        into,
        outcome,
        commit,
    };
    if merged.commit.is_some() {
        record_merge(&*workspaces.store, &merged, caller).await;
    }
    Ok(merged)
}

/// 409 `checks_failed` when the workspace's newest rebase left its branch where it is now and
/// the checks it re-ran there failed: merging would land work known to fail on the moved target.
async fn refuse_failed_rebase(
    workspaces: &Workspaces,
    name: &str,
    repository: &str,
    branch: &str,
) -> Result<(), ApiError> {
    let tip = {
        let (repository, branch) = (repository.to_owned(), branch.to_owned());
        tokio::task::spawn_blocking(move || {
            writ_git::branches::branch_tip(Path::new(&repository), &branch)
        })
        .await
        .map_err(ApiError::internal)?
    };
    let Some(tip) = tip else {
        return Ok(());
    };
    let Some(rebased) =
        super::rebase::failed_rebase_at(workspaces.store.as_ref(), name, &tip).await?
    else {
        return Ok(());
    };
    let failing: Vec<&super::rebase::Recheck> =
        rebased.checks.iter().filter(|c| !c.passed).collect();
    let failing_generated: Vec<&super::rebase::GeneratedRecheck> =
        rebased.generated.iter().filter(|g| !g.passed).collect();
    Err(ApiError::new(
        ErrorCode::ChecksFailed,
        format!(
            "the rebase onto '{}' (request {}) left '{branch}' failing its checks ({}); fix the branch, rebase again, or merge with force: true",
            rebased.onto,
            rebased.request_id,
            failing
                .iter()
                .flat_map(|c| c.paths.iter().map(String::as_str))
                .chain(failing_generated.iter().map(|g| g.path.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .with_field("force")
    .with_details(serde_json::json!({
        "rebase_request_id": rebased.request_id,
        "checks": failing,
        "generated": failing_generated,
    })))
}

/// The one answer for a branch the caller may not merge into: none of that name, or another
/// workspace's that its key may not use.
fn no_branch(into: &str) -> ApiError {
    invalid(
        "into",
        format!("the repository has no branch '{into}' to merge into"),
    )
}

/// The merge in the audit log: a request with its answer, so readers of the log see which branch
/// moved where and when. A record that cannot be written is logged: the branch has moved
/// already, and git has the commit.
async fn record_merge(store: &dyn AuditStore, merged: &MergedWorkspace, caller: Option<&str>) {
    let answer = serde_json::to_value(merged).ok();
    let recorded = async {
        store.insert_request(&merge_request(merged, caller)).await?;
        store
            .finish_request(
                merged.request_id,
                writ_core::audit::RequestStatus::Success,
                0,
                answer.as_ref(),
            )
            .await
    }
    .await;
    if let Err(e) = recorded {
        tracing::warn!(error = %e, workspace = %merged.workspace, "a merge moved its branch but could not be recorded");
    }
}

/// The merge's request row: made with the `admin` scope that every merge needs, in the workspace
/// merged, with no idempotency key (a merge is not replayed).
fn merge_request(merged: &MergedWorkspace, caller: Option<&str>) -> writ_core::audit::NewRequest {
    writ_core::audit::NewRequest::opened(
        merged.request_id,
        format!("POST /workspaces/{}/merge", merged.workspace),
        caller.map(str::to_owned),
        Some(writ_core::keys::Scope::Admin),
        merged.workspace.clone(),
    )
}
