//! Making, listing, finding and deleting workspaces, and setting a workspace's budget.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use writ_core::budgets::Budget;
use writ_core::workspace_registry::{
    WorkspaceDeletion, WorkspaceKind, WorkspaceName, WorkspaceRecord,
};
use writ_core::{RepoPath, StoreError};

use super::api::{CreateWorkspace, DeletedWorkspace, WorkspaceInfo, WorkspaceSource, default_info};
use super::opened::Workspaces;
use super::{WORKSPACES_DIR_VAR, invalid, taken, unknown};
use crate::config::Settings;
use crate::error::{ApiError, ErrorCode, store_error};

/// Every workspace: `default` first, then the stored ones by name.
pub async fn list(workspaces: &Workspaces) -> Result<Vec<WorkspaceInfo>, ApiError> {
    let stored = workspaces
        .store
        .list_workspaces()
        .await
        .map_err(store_error)?;
    Ok(std::iter::once(default_info(workspaces))
        .chain(stored.into_iter().map(WorkspaceInfo::from))
        .collect())
}

pub async fn find(workspaces: &Workspaces, name: &str) -> Result<WorkspaceInfo, ApiError> {
    if name == WorkspaceName::DEFAULT {
        return Ok(default_info(workspaces));
    }
    match workspaces
        .store
        .find_workspace(name)
        .await
        .map_err(store_error)?
    {
        Some(record) => {
            let base = super::rebase::base_status(&record).await;
            Ok(WorkspaceInfo {
                base,
                ..record.into()
            })
        }
        None => Err(unknown(name)),
    }
}

/// The canonical workspaces directory, or the refusal that names its variable.
async fn workspaces_dir(settings: &Settings) -> Result<PathBuf, ApiError> {
    let Some(dir) = &settings.workspaces_dir else {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "creating workspaces needs {WORKSPACES_DIR_VAR}: set it to the directory new workspaces are made in"
            ),
        ));
    };
    tokio::fs::create_dir_all(dir).await.map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("{WORKSPACES_DIR_VAR} {}: {e}", dir.display()),
        )
    })?;
    tokio::fs::canonicalize(dir).await.map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("{WORKSPACES_DIR_VAR} {}: {e}", dir.display()),
        )
    })
}

/// Refuses `root` as a workspace's root when it is, or lies inside, a protected name or a git
/// directory: every write there would be git's own files (its config and hooks run code).
fn refuse_protected_root(
    workspaces: &Workspaces,
    root: &Path,
    field: &str,
) -> Result<(), ApiError> {
    crate::config::edge::protected_paths(&workspaces.settings, root)
        .check_root(root)
        .map_err(|e| {
            ApiError::new(ErrorCode::ProtectedPath, format!("{field}: {e}")).with_field(field)
        })
}

/// `relative` beneath `base`, checked lexically (no `..`, not absolute) and then on the disk
/// (its canonical path, symlinks followed, must still be beneath `base`).
async fn beneath(base: &Path, relative: &str, field: &str) -> Result<PathBuf, ApiError> {
    let path =
        RepoPath::parse_nonempty(relative).map_err(|e| invalid(field, format!("{field}: {e}")))?;
    let joined = base.join(path.as_str());
    let canonical = tokio::fs::canonicalize(&joined).await.map_err(|_| {
        invalid(
            field,
            format!("{field}: no directory '{relative}' under {WORKSPACES_DIR_VAR}"),
        )
    })?;
    if !canonical.starts_with(base) || canonical == base {
        return Err(invalid(
            field,
            format!("{field}: '{relative}' leads outside {WORKSPACES_DIR_VAR}"),
        ));
    }
    if !tokio::fs::metadata(&canonical)
        .await
        .map(|m| m.is_dir())
        .unwrap_or(false)
    {
        return Err(invalid(
            field,
            format!("{field}: '{relative}' is not a directory"),
        ));
    }
    Ok(canonical)
}

/// Makes the workspace `request` describes, records it, and answers it. Nothing is left behind
/// when a step is refused.
pub async fn create(
    workspaces: &Workspaces,
    request: CreateWorkspace,
    caller: Option<&str>,
) -> Result<WorkspaceInfo, ApiError> {
    let name = WorkspaceName::parse(&request.name)
        .map_err(|why| invalid("name", format!("name {why}")))?;
    if let Some(budget) = &request.budget {
        budget
            .validate()
            .map_err(|why| invalid("budget", format!("budget: {why}")))?;
    }
    if name.is_default()
        || workspaces
            .store
            .find_workspace(name.as_str())
            .await
            .map_err(store_error)?
            .is_some()
    {
        return Err(taken(&name));
    }
    let base = workspaces_dir(&workspaces.settings).await?;
    let target = base.join(name.as_str());
    refuse_protected_root(workspaces, &target, "name")?;
    let mut record = WorkspaceRecord {
        name: name.clone(),
        kind: WorkspaceKind::Empty,
        root: target.display().to_string(),
        source: None,
        branch: None,
        base_ref: None,
        created_at: DateTime::from_timestamp_micros(Utc::now().timestamp_micros())
            .unwrap_or_else(Utc::now),
        created_by: caller.map(str::to_owned),
        git_commit: request.git_commit,
    };
    // What to undo if the record cannot be stored.
    let mut made_dir = None;
    let mut made_worktree = None;
    match request.source.unwrap_or(WorkspaceSource::Empty) {
        WorkspaceSource::Empty => {
            tokio::fs::create_dir(&target).await.map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    ApiError::new(
                        ErrorCode::AlreadyExists,
                        format!("name: '{name}' already exists under {WORKSPACES_DIR_VAR}; use source.kind \"directory\" to serve it"),
                    )
                    .with_field("name")
                } else {
                    ApiError::new(ErrorCode::Internal, format!("creating {}: {e}", target.display()))
                }
            })?;
            made_dir = Some(target.clone());
        }
        WorkspaceSource::Directory { path } => {
            let dir = beneath(&base, &path, "source.path").await?;
            refuse_protected_root(workspaces, &dir, "source.path")?;
            record.kind = WorkspaceKind::Directory;
            record.root = dir.display().to_string();
            record.source = Some(path);
        }
        WorkspaceSource::GitWorktree {
            repository,
            branch,
            from,
        } => {
            let repo_root = match WorkspaceName::parse(&repository) {
                Ok(named) => match workspaces.open(named.as_str()).await? {
                    Some(ws) => ws.root().to_path_buf(),
                    None => beneath(&base, &repository, "source.repository").await?,
                },
                Err(_) => beneath(&base, &repository, "source.repository").await?,
            };
            let from = from.unwrap_or_else(|| "HEAD".to_owned());
            let (worktree_name, at, b, f, repo) = (
                name.to_string(),
                target.clone(),
                branch.clone(),
                from.clone(),
                repo_root.clone(),
            );
            tokio::task::spawn_blocking(move || {
                writ_git::add_worktree(&repo, &worktree_name, &at, &b, &f)
            })
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
            .map_err(worktree_error)?;
            record.kind = WorkspaceKind::GitWorktree;
            record.source = Some(repo_root.display().to_string());
            record.branch = Some(branch);
            record.base_ref = Some(from);
            made_worktree = Some(repo_root);
        }
    }
    if let Err(err) = workspaces.store.create_workspace(&record).await {
        // Another replica took the name in between, or the store is down: undo what was made.
        if let Some(dir) = made_dir {
            drop(tokio::fs::remove_dir(dir).await);
        }
        if let Some(repo) = made_worktree {
            let worktree = name.to_string();
            drop(
                tokio::task::spawn_blocking(move || writ_git::prune_worktree(&repo, &worktree))
                    .await,
            );
        }
        return Err(match err {
            StoreError::Conflict(_) => taken(&name),
            other => store_error(other),
        });
    }
    let mut made = WorkspaceInfo::from(record);
    if let Some(budget) = request.budget.filter(|b| !b.is_empty()) {
        // The workspace is recorded and its directory made: a budget that cannot be stored is
        // reported, and can be set again with PUT /workspaces/{name}/budget.
        workspaces
            .store
            .set_workspace_budget(name.as_str(), &budget)
            .await
            .map_err(store_error)?;
        made.budget = Some(budget);
    }
    Ok(made)
}

/// Sets (or, with an empty budget, removes) what the batches in the workspace `name` may spend;
/// 404 when there is no such workspace.
pub async fn set_budget(
    workspaces: &Workspaces,
    name: &str,
    budget: &Budget,
) -> Result<(), ApiError> {
    budget
        .validate()
        .map_err(|why| ApiError::new(ErrorCode::InvalidRequest, why))?;
    if workspaces
        .store
        .set_workspace_budget(name, budget)
        .await
        .map_err(store_error)?
    {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

fn worktree_error(err: writ_git::WorktreeError) -> ApiError {
    use writ_git::WorktreeError as E;
    match &err {
        E::NotARepository { .. } => {
            invalid("source.repository", format!("source.repository: {err}"))
        }
        E::UnknownRef { .. } => invalid("source.from", format!("source.from: {err}")),
        E::BranchExists { .. } => {
            ApiError::new(ErrorCode::AlreadyExists, format!("source.branch: {err}"))
                .with_field("source.branch")
        }
        E::BadBranch { .. } => invalid("source.branch", format!("source.branch: {err}")),
        E::Git(_) => ApiError::new(ErrorCode::Conflict, err.to_string()),
    }
}

/// Forgets the workspace and, for a git worktree, git's record of it. Files are kept. Refused
/// (409, naming them) while jobs run in it: their writes would land in a directory writ no
/// longer serves.
pub async fn delete(workspaces: &Workspaces, name: &str) -> Result<DeletedWorkspace, ApiError> {
    if name == WorkspaceName::DEFAULT {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "name: 'default' is REPO_DIR and cannot be deleted",
        )
        .with_field("name"));
    }
    let Some(record) = workspaces
        .store
        .find_workspace(name)
        .await
        .map_err(store_error)?
    else {
        return Err(unknown(name));
    };
    // The store checks for jobs any replica runs there and deletes in one transaction; a batch
    // admitted at the same moment either counts as running or has its job refused.
    match workspaces
        .store
        .delete_workspace(name)
        .await
        .map_err(store_error)?
    {
        WorkspaceDeletion::Deleted => {}
        WorkspaceDeletion::NotFound => return Err(unknown(name)),
        WorkspaceDeletion::Busy(running) => {
            let ids: Vec<String> = running.iter().map(ToString::to_string).collect();
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "name: '{name}' has jobs running ({}); delete it once they have ended",
                    ids.join(", ")
                ),
            )
            .with_field("name")
            .with_details(serde_json::json!({ "running_jobs": ids })));
        }
    }
    workspaces.forget(name);
    let mut worktree_pruned = false;
    if record.kind == WorkspaceKind::GitWorktree
        && let Some(repo) = record.source.clone()
    {
        let worktree = name.to_owned();
        worktree_pruned = tokio::task::spawn_blocking(move || {
            writ_git::prune_worktree(Path::new(&repo), &worktree)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(false);
    }
    Ok(DeletedWorkspace {
        name: name.to_owned(),
        files_removed: false,
        worktree_pruned,
        root: record.root,
    })
}
