//! Overlaps between the workspaces of one repository ([`writ_core::overlaps`]): after a
//! workspace writes paths, which of them another workspace of the same repository, or the
//! branch its work goes back to, changed too since they share a base. Committed changes are
//! git's (the newest commit on their branch touching the path since the merge base); changes not
//! committed yet are their checkout's, named by the request that wrote them.
//!
//! Also where a workspace's repository, branch and target are worked out, for its overlaps and
//! for how far its branch is behind its target ([`base_status`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use writ_core::AuditStore;
use writ_core::audit::{OperationFilter, OperationStatus};
use writ_core::overlaps::{Overlap, OverlapFinder, OverlapWith};
use writ_core::workspace_registry::{WorkspaceKind, WorkspaceName, WorkspaceRecord};

/// A workspace as git sees it: the repository it is a checkout of, and its branch.
#[derive(Debug, Clone)]
pub struct Checkout {
    pub workspace: String,
    pub root: PathBuf,
    /// The repository's main working tree, canonical.
    pub repository: PathBuf,
    pub branch: String,
    /// The branch its work goes back to (a task's: the branch it was made from).
    pub target: Option<String>,
}

/// Every workspace's checkout (`default` first), for the workspaces whose roots are git
/// checkouts on a branch. Blocking: git is read.
pub fn checkouts(default_root: &Path, stored: &[WorkspaceRecord]) -> Vec<Checkout> {
    let default = WorkspaceRecord {
        name: WorkspaceName::default_workspace(),
        kind: WorkspaceKind::Configured,
        root: default_root.display().to_string(),
        source: None,
        branch: None,
        base_ref: None,
        created_at: Utc::now(),
        created_by: None,
        git_commit: None,
    };
    std::iter::once(&default)
        .chain(stored)
        .filter_map(checkout_of)
        .collect()
}

fn checkout_of(record: &WorkspaceRecord) -> Option<Checkout> {
    let root = PathBuf::from(&record.root);
    let repository = writ_git::branches::repository_of(&root)?;
    let branch = writ_git::branches::checked_out_branch(&root)?;
    let target = match record.kind {
        WorkspaceKind::GitWorktree => {
            writ_git::branches::target_branch(&repository, record.base_ref.as_deref())
        }
        // A repository's own checkout is where tasks' work goes back to.
        _ => None,
    };
    let target = target.filter(|t| *t != branch);
    Some(Checkout {
        workspace: record.name.to_string(),
        root,
        repository,
        branch,
        target,
    })
}

/// One other side a workspace's writes are compared with.
struct Side {
    workspace: Option<String>,
    branch: String,
    root: Option<PathBuf>,
    with: OverlapWith,
}

/// The other sides of `ours`: every other checkout of its repository, and its target branch
/// when no workspace has it checked out.
fn sides(ours: &Checkout, all: &[Checkout]) -> Vec<Side> {
    let mut sides: Vec<Side> = all
        .iter()
        .filter(|c| c.repository == ours.repository && c.workspace != ours.workspace)
        .map(|c| Side {
            workspace: Some(c.workspace.clone()),
            branch: c.branch.clone(),
            root: Some(c.root.clone()),
            with: if ours.target.as_deref() == Some(c.branch.as_str()) {
                OverlapWith::Target
            } else {
                OverlapWith::Workspace
            },
        })
        .collect();
    if let Some(target) = &ours.target
        && !sides.iter().any(|s| &s.branch == target)
    {
        sides.push(Side {
            workspace: None,
            branch: target.clone(),
            root: None,
            with: OverlapWith::Target,
        });
    }
    sides
}

/// Finds overlaps over git and the audit store.
pub struct GitOverlaps {
    pub store: Arc<dyn AuditStore>,
    /// `REPO_DIR`, the `default` workspace's root.
    pub default_root: PathBuf,
}

impl GitOverlaps {
    /// The overlaps of `paths` written in `workspace`, every name shown (callers hide what a
    /// key may not see).
    pub async fn find(&self, workspace: &str, paths: &[String]) -> Result<Vec<Overlap>, String> {
        let stored = self
            .store
            .list_workspaces()
            .await
            .map_err(|e| e.to_string())?;
        let (default_root, name, paths_owned) = (
            self.default_root.clone(),
            workspace.to_owned(),
            paths.to_vec(),
        );
        let found = tokio::task::spawn_blocking(move || {
            // Most writes are in a workspace that is no git checkout: nothing else is read then.
            let ours_record = stored.iter().find(|r| r.name.as_str() == name);
            let ours_is_git = match ours_record {
                Some(r) => writ_git::branches::repository_of(Path::new(&r.root)).is_some(),
                None => writ_git::branches::repository_of(&default_root).is_some(),
            };
            if !ours_is_git {
                return Ok((Vec::new(), Vec::new()));
            }
            let all = checkouts(&default_root, &stored);
            let Some(ours) = all.iter().find(|c| c.workspace == name) else {
                return Ok((Vec::new(), Vec::new()));
            };
            let mut committed: Vec<Overlap> = Vec::new();
            let mut uncommitted: Vec<(Option<String>, String, OverlapWith, String)> = Vec::new();
            for side in sides(ours, &all) {
                let changes = writ_git::divergence::changes_since_base(
                    &ours.repository,
                    &ours.branch,
                    &side.branch,
                    &paths_owned,
                )
                .map_err(|e| e.to_string())?;
                for change in changes {
                    committed.push(Overlap {
                        path: change.path,
                        with: side.with,
                        workspace: side.workspace.clone(),
                        branch: Some(side.branch.clone()),
                        their_commit: Some(change.commit),
                        their_request: None,
                        since: change.time,
                    });
                }
                if let Some(root) = &side.root {
                    let dirty = writ_git::divergence::dirty_paths(root, &paths_owned)
                        .map_err(|e| e.to_string())?;
                    for path in dirty {
                        if !committed
                            .iter()
                            .any(|o: &Overlap| o.path == path && o.workspace == side.workspace)
                        {
                            uncommitted.push((
                                side.workspace.clone(),
                                side.branch.clone(),
                                side.with,
                                path,
                            ));
                        }
                    }
                }
            }
            Ok::<_, String>((committed, uncommitted))
        })
        .await
        .map_err(|e| e.to_string())??;
        let (mut overlaps, uncommitted) = found;
        // Their uncommitted change is named by the newest write writ made there.
        for (their_workspace, branch, with, path) in uncommitted {
            let newest = match &their_workspace {
                Some(w) => self.newest_write(w, &path).await?,
                None => None,
            };
            overlaps.push(Overlap {
                path,
                with,
                workspace: their_workspace,
                branch: Some(branch),
                their_commit: None,
                their_request: newest.as_ref().map(|(id, _)| *id),
                since: newest.map(|(_, at)| at).unwrap_or_else(Utc::now),
            });
        }
        overlaps.sort_by(|a, b| a.path.cmp(&b.path).then(a.since.cmp(&b.since)));
        Ok(overlaps)
    }

    async fn newest_write(
        &self,
        workspace: &str,
        path: &str,
    ) -> Result<Option<(uuid::Uuid, chrono::DateTime<Utc>)>, String> {
        let filter = OperationFilter {
            filename: Some(path.to_owned()),
            status: Some(OperationStatus::Succeeded),
            workspaces: Some(vec![workspace.to_owned()]),
            ..OperationFilter::default()
        };
        let page = self
            .store
            .list_operations(&filter, None, 1)
            .await
            .map_err(|e| e.to_string())?;
        Ok(page
            .operations
            .first()
            .map(|op| (op.request_id, op.created_at)))
    }

    /// What `caller`'s key may see of `overlaps`: the name and branch of a workspace it may
    /// not use are left out.
    pub async fn hide_for(
        &self,
        caller: Option<&str>,
        overlaps: &mut [Overlap],
    ) -> Result<(), String> {
        let Some(caller) = caller else {
            return Ok(());
        };
        let key = self
            .store
            .find_key(caller)
            .await
            .map_err(|e| e.to_string())?;
        let Some(bound) = key.and_then(|k| k.workspaces) else {
            return Ok(());
        };
        hide(Some(&bound), overlaps);
        Ok(())
    }
}

/// Leaves out the name and branch of every workspace not in `bound` (`None`: all may be seen).
pub fn hide(bound: Option<&[String]>, overlaps: &mut [Overlap]) {
    let Some(bound) = bound else {
        return;
    };
    for o in overlaps {
        if let Some(w) = &o.workspace
            && !bound.iter().any(|b| b == w)
        {
            o.workspace = None;
            o.branch = None;
        }
    }
}

#[async_trait::async_trait]
impl OverlapFinder for GitOverlaps {
    async fn overlaps(
        &self,
        workspace: &str,
        paths: &[String],
        caller: Option<&str>,
    ) -> Result<Vec<Overlap>, String> {
        let mut found = self.find(workspace, paths).await?;
        self.hide_for(caller, &mut found).await?;
        Ok(found)
    }
}

/// The overlaps of a direct write's paths, for its answer: never fails the write (it is done),
/// only logs why none could be looked for.
pub async fn of_write(
    store: &Arc<dyn AuditStore>,
    default_root: &Path,
    workspace: &str,
    paths: &[String],
    caller: Option<&str>,
) -> Vec<Overlap> {
    let finder = GitOverlaps {
        store: store.clone(),
        default_root: default_root.to_path_buf(),
    };
    match finder.overlaps(workspace, paths, caller).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(workspace, error = %e, "could not look for overlaps with other workspaces");
            Vec::new()
        }
    }
}

/// The overlaps of the paths a request just wrote in the state's workspace, for its answer.
pub async fn written(
    state: &crate::state::AppState,
    paths: &[String],
    caller: Option<&str>,
) -> Vec<Overlap> {
    of_write(
        &state.store,
        state.workspaces.default_workspace().root(),
        state.workspace.name(),
        paths,
        caller,
    )
    .await
}
