//! A task's branch brought up to date with its target, and what that means for its files:
//! `GET /workspaces/{name}`'s `base` (how far behind), `GET /workspaces/{name}/overlaps`, and
//! `POST /workspaces/{name}/rebase`, which replays the branch on the target's tip and re-runs,
//! in the sandbox, the checks recorded for the requests that wrote the files it touched.

use std::path::Path;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_core::audit::{
    FileKind, NewRequest, Operation, OperationFilter, OperationKind, OperationStatus, RequestStatus,
};
use writ_core::overlaps::Overlap;
use writ_core::workspace_registry::{WorkspaceKind, WorkspaceName, WorkspaceRecord};

use super::opened::Workspaces;
use super::overlaps::{GitOverlaps, hide};
pub use super::recheck::{GeneratedRecheck, Recheck};
use super::{invalid, unknown};
use crate::error::{ApiError, ErrorCode, store_error};
use crate::state::AppState;

/// How far a task's branch is from its target (`GET /workspaces/{name}`'s `base`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BaseStatus {
    /// The branch the workspace's work goes back to.
    pub target: String,
    /// Commits on the target that the workspace's branch does not have yet.
    pub behind: usize,
    /// Commits on the workspace's branch that the target does not have.
    pub ahead: usize,
    /// Paths changed on both sides since they parted: where a rebase or a merge may conflict.
    pub changed_on_both: Vec<String>,
    /// The commit the two last shared.
    pub merge_base: String,
}

/// A git-worktree workspace's repository, branch and target; `None` for other workspaces, or
/// one whose repository cannot be read.
async fn task_branch(record: &WorkspaceRecord) -> Option<(String, String, String)> {
    if record.kind != WorkspaceKind::GitWorktree {
        return None;
    }
    let (repository, branch) = (record.source.clone()?, record.branch.clone()?);
    let base_ref = record.base_ref.clone();
    let target = tokio::task::spawn_blocking({
        let repository = repository.clone();
        move || writ_git::branches::target_branch(Path::new(&repository), base_ref.as_deref())
    })
    .await
    .ok()??;
    Some((repository, branch, target))
}

/// How far the git-worktree workspace `record` is behind its target; `None` for other
/// workspaces (or when git cannot tell: the answer leaves it out rather than fail).
pub async fn base_status(record: &WorkspaceRecord) -> Option<BaseStatus> {
    let (repository, branch, target) = task_branch(record).await?;
    tokio::task::spawn_blocking(move || {
        let d = writ_git::divergence::divergence(Path::new(&repository), &branch, &target).ok()?;
        Some(BaseStatus {
            target,
            behind: d.behind,
            ahead: d.ahead,
            changed_on_both: d.both,
            merge_base: d.merge_base,
        })
    })
    .await
    .ok()?
}

/// `GET /workspaces/{name}/overlaps`'s answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct OverlapList {
    pub workspace: String,
    /// Each path this workspace changed that another workspace of its repository, or its
    /// target branch, changed too since they share a base.
    pub overlaps: Vec<Overlap>,
}

/// How many of a workspace's newest writes [`list_overlaps`] looks at besides its commits.
const WRITES_LOOKED_AT: u32 = 500;

/// The current overlaps of the workspace `name`: every path it changed (committed on its branch
/// since its target, or written by a request and not committed), against the other sides.
pub async fn list_overlaps(
    workspaces: &Workspaces,
    name: &str,
    bound: Option<&[String]>,
) -> Result<OverlapList, ApiError> {
    let record = find_record(workspaces, name).await?;
    let mut paths: Vec<String> = Vec::new();
    if let Some(r) = &record
        && let Some((repository, branch, target)) = task_branch(r).await
    {
        let changed = tokio::task::spawn_blocking(move || {
            writ_git::divergence::divergence(Path::new(&repository), &branch, &target)
                .map(|d| d.changed_here)
                .unwrap_or_default()
        })
        .await
        .map_err(ApiError::internal)?;
        paths.extend(changed);
    }
    let filter = OperationFilter {
        status: Some(OperationStatus::Succeeded),
        workspaces: Some(vec![name.to_owned()]),
        since: record.as_ref().map(|r| r.created_at),
        ..OperationFilter::default()
    };
    let written = workspaces
        .store
        .list_operations(&filter, None, WRITES_LOOKED_AT)
        .await
        .map_err(store_error)?;
    paths.extend(
        written
            .operations
            .into_iter()
            .filter(|op| op.kind != FileKind::Run)
            .map(|op| op.filename),
    );
    paths.sort();
    paths.dedup();
    let finder = GitOverlaps {
        store: workspaces.store.clone(),
        default_root: workspaces.default.root().to_path_buf(),
    };
    let mut overlaps = finder
        .find(name, &paths)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e))?;
    hide(bound, &mut overlaps);
    Ok(OverlapList {
        workspace: name.to_owned(),
        overlaps,
    })
}

/// The stored record of `name`; `None` for `default`; 404 for no such workspace.
async fn find_record(
    workspaces: &Workspaces,
    name: &str,
) -> Result<Option<WorkspaceRecord>, ApiError> {
    if name == WorkspaceName::DEFAULT {
        return Ok(None);
    }
    match workspaces
        .store
        .find_workspace(name)
        .await
        .map_err(store_error)?
    {
        Some(r) => Ok(Some(r)),
        None => Err(unknown(name)),
    }
}

/// The body of `POST /workspaces/{name}/rebase`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RebaseWorkspace {
    /// The branch to replay the workspace's branch on; absent: its target (the branch it was
    /// made from).
    #[serde(default)]
    pub onto: Option<String>,
}

/// What a rebase did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RebasedWorkspace {
    /// The rebase's own record in the audit log (undo it at `POST /requests/{id}/undo`).
    pub request_id: Uuid,
    pub workspace: String,
    pub branch: String,
    pub onto: String,
    /// `up_to_date` (the branch already holds the tip of `onto`; nothing moved) or `rebased`.
    #[schemars(extend("enum" = ["up_to_date", "rebased"]))]
    pub outcome: String,
    /// The branch's tip before.
    pub old_tip: Option<String>,
    /// The branch's tip now.
    pub new_tip: Option<String>,
    /// The commits replayed.
    pub replayed: usize,
    /// Paths whose content the rebase may have changed.
    pub touched: Vec<String>,
    /// The caller's commands re-run: those recorded for the requests that wrote the touched
    /// files.
    pub checks: Vec<Recheck>,
    /// Whether every re-run check (`checks` and `generated`) passed; absent when none was
    /// recorded for the touched files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checks_passed: Option<bool>,
    /// The generated tests kept by the batches that wrote the touched files, re-run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generated: Vec<GeneratedRecheck>,
}

/// Rebases the branch of the git-worktree workspace `name` onto `onto` (see the module docs).
/// A conflict answers 409 with each file and its hunks, and nothing moves; so does a workspace
/// with uncommitted changes. A rebase that moved the branch is recorded as a request, its
/// answer stored with it, so it can be undone.
pub async fn rebase(
    state: &AppState,
    name: &str,
    request: RebaseWorkspace,
    caller: Option<&str>,
    bound: Option<&[String]>,
    request_id: Uuid,
) -> Result<RebasedWorkspace, ApiError> {
    let workspaces = &state.workspaces;
    let Some(record) = find_record(workspaces, name).await? else {
        return Err(invalid(
            "name",
            "the default workspace has no branch of its own to rebase; rebase a git_worktree workspace",
        ));
    };
    let Some((repository, branch, target)) = task_branch(&record).await else {
        return Err(invalid(
            "name",
            format!(
                "'{name}' is a {} workspace; only a git_worktree workspace has a branch to rebase",
                record.kind
            ),
        ));
    };
    let onto = request.onto.map(|o| o.trim().to_owned()).unwrap_or(target);
    if onto.is_empty() || onto == branch {
        return Err(invalid(
            "onto",
            format!("onto must name another branch of the repository than '{branch}'"),
        ));
    }
    if let Some(bound) = bound {
        let stored = workspaces
            .store
            .list_workspaces()
            .await
            .map_err(store_error)?;
        let theirs = stored.iter().any(|w| {
            w.source.as_deref() == Some(repository.as_str())
                && w.branch.as_deref() == Some(onto.as_str())
                && !bound.iter().any(|b| b == w.name.as_str())
        });
        if theirs {
            return Err(no_branch(&onto));
        }
    }
    let author = caller.unwrap_or("writ").to_owned();
    let outcome = {
        let (repository, branch, onto) = (repository.clone(), branch.clone(), onto.clone());
        tokio::task::spawn_blocking(move || {
            writ_git::rebase::rebase_branch(
                Path::new(&repository),
                &branch,
                &onto,
                &author,
                "writ@localhost",
            )
        })
        .await
        .map_err(ApiError::internal)?
    };
    use writ_git::rebase::RebaseOutcome;
    let mut answer = RebasedWorkspace {
        request_id,
        workspace: name.to_owned(),
        branch: branch.clone(),
        onto: onto.clone(),
        outcome: "up_to_date".into(),
        old_tip: None,
        new_tip: None,
        replayed: 0,
        touched: Vec::new(),
        checks: Vec::new(),
        checks_passed: None,
        generated: Vec::new(),
    };
    match outcome {
        Ok(RebaseOutcome::UpToDate) => return Ok(answer),
        Ok(RebaseOutcome::Rebased {
            old_tip,
            new_tip,
            replayed,
            touched,
        }) => {
            answer.outcome = "rebased".into();
            answer.old_tip = Some(old_tip);
            answer.new_tip = Some(new_tip);
            answer.replayed = replayed;
            answer.touched = touched;
        }
        Ok(RebaseOutcome::Conflicts(found)) => {
            return Err(super::conflicts(
                &branch,
                &format!("does not replay onto '{onto}'"),
                "onto",
                &found,
            ));
        }
        Err(writ_git::commit::GitError::NoSuchBranch(_)) => return Err(no_branch(&onto)),
        Err(e @ writ_git::commit::GitError::DirtyWorktree { .. }) => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("{e}; commit or undo those changes first; nothing was changed"),
            )
            .with_field("name"));
        }
        Err(e) => {
            return Err(invalid(
                "onto",
                format!("the rebase could not be made: {e}"),
            ));
        }
    }
    let rechecked = super::recheck::recheck(state, name, &record, &answer.touched).await?;
    answer.checks = rechecked.checks;
    answer.generated = rechecked.generated;
    answer.checks_passed = rechecked.passed;
    record_rebase(state, &answer, caller).await;
    Ok(answer)
}

/// The rebase in the audit log: a request with its answer (the tips it moved between, for an
/// undo). A record that cannot be written is logged: the branch has moved already.
async fn record_rebase(state: &AppState, answer: &RebasedWorkspace, caller: Option<&str>) {
    let body = serde_json::to_value(answer).ok();
    let recorded = async {
        state
            .store
            .insert_request(&NewRequest::opened(
                answer.request_id,
                format!("POST /workspaces/{}/rebase", answer.workspace),
                caller.map(str::to_owned),
                Some(writ_core::keys::Scope::Write),
                answer.workspace.clone(),
            ))
            .await?;
        state
            .store
            .insert_operation(&rebase_operation(answer, body.clone()), None)
            .await?;
        state
            .store
            .finish_request(answer.request_id, RequestStatus::Success, 0, body.as_ref())
            .await
    }
    .await;
    if let Err(e) = recorded {
        tracing::warn!(error = %e, workspace = %answer.workspace, "a rebase moved its branch but could not be recorded");
    }
}

/// The file name of a rebase's operation: the merge finds the newest rebase of a workspace by
/// it. Not a path (paths never hold a space or start with `:`).
const REBASE_OPERATION: &str = ":rebase";

/// The rebase as an operation of kind `run` (what it re-ran, and whether that passed), its
/// answer in `detail`: the merge reads whether the branch's rebased tip passed its checks.
fn rebase_operation(answer: &RebasedWorkspace, detail: Option<serde_json::Value>) -> Operation {
    let now = Utc::now();
    let failed = answer.checks_passed == Some(false);
    Operation {
        id: Uuid::now_v7(),
        request_id: answer.request_id,
        created_at: now,
        finished_at: Some(now),
        filename: REBASE_OPERATION.to_owned(),
        kind: FileKind::Run,
        operation: if failed {
            OperationKind::Failed
        } else {
            OperationKind::Unchanged
        },
        status: if failed {
            OperationStatus::Failed
        } else {
            OperationStatus::Succeeded
        },
        chosen_model: None,
        selection: None,
        arbiter_reason: None,
        candidates: Vec::new(),
        previous_sha256: None,
        sha256: None,
        bytes: None,
        error: failed.then(|| "checks failed after the rebase".to_owned()),
        duration_ms: None,
        detail,
        workspace: answer.workspace.clone(),
    }
}

/// The newest rebase recorded in `workspace`, when it left the branch at `tip` (a later commit
/// or rebase makes it stale) and its checks failed: what a merge refuses unless forced.
pub(super) async fn failed_rebase_at(
    store: &dyn writ_core::AuditStore,
    workspace: &str,
    tip: &str,
) -> Result<Option<RebasedWorkspace>, ApiError> {
    let filter = OperationFilter {
        filename: Some(REBASE_OPERATION.to_owned()),
        workspaces: Some(vec![workspace.to_owned()]),
        ..OperationFilter::default()
    };
    let page = store
        .list_operations(&filter, None, 1)
        .await
        .map_err(store_error)?;
    let Some(newest) = page.operations.into_iter().next() else {
        return Ok(None);
    };
    let Some(rebased) = newest
        .detail
        .and_then(|d| serde_json::from_value::<RebasedWorkspace>(d).ok())
    else {
        return Ok(None);
    };
    Ok(
        (rebased.new_tip.as_deref() == Some(tip) && rebased.checks_passed == Some(false))
            .then_some(rebased),
    )
}

fn no_branch(onto: &str) -> ApiError {
    invalid(
        "onto",
        format!("the repository has no branch '{onto}' to rebase onto"),
    )
}

/// Whether `route` is a rebase's request row.
pub fn is_rebase_route(route: &str) -> bool {
    route.starts_with("POST /workspaces/") && route.ends_with("/rebase")
}

/// Takes back the rebase recorded as `answer`: its branch goes back to the tip it had, only if
/// nothing was committed on it since (later work is never touched: 409 then).
pub async fn undo_rebase(state: &AppState, answer: &RebasedWorkspace) -> Result<(), ApiError> {
    let (Some(old_tip), Some(new_tip)) = (answer.old_tip.clone(), answer.new_tip.clone()) else {
        return Ok(());
    };
    let Some(record) = find_record(&state.workspaces, &answer.workspace).await? else {
        return Err(unknown(&answer.workspace));
    };
    let repository = record.source.clone().unwrap_or_default();
    let branch = answer.branch.clone();
    let moved = tokio::task::spawn_blocking(move || {
        writ_git::rebase::reset_branch(Path::new(&repository), &branch, &old_tip, &new_tip)
    })
    .await
    .map_err(ApiError::internal)?;
    match moved {
        Ok(true) => Ok(()),
        Ok(false) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "'{}' has moved since the rebase: undoing it would drop later commits; nothing was changed",
                answer.branch
            ),
        )),
        Err(e) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!("the rebase could not be undone: {e}; nothing was changed"),
        )),
    }
}
