//! [`Workspaces`]: every workspace this process has opened, by name, and what else is built over
//! each, forgotten together when the workspace is deleted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;
use writ_core::workspace_registry::WorkspaceName;
use writ_core::{AuditStore, StoreError, Workspace};

use super::built::PerWorkspaceCache;
use crate::config::Settings;
use crate::error::{ApiError, ErrorCode, store_error};

/// Every workspace this process has opened, by name. A lookup is one short lock and a hash
/// probe, whatever the number of workspaces; a workspace's first use opens it (a canonical path,
/// a directory handle, its index) while the lock is not held, so it stalls no other workspace,
/// and concurrent first uses of one workspace open it once.
pub struct Workspaces {
    pub(super) default: Arc<dyn Workspace>,
    pub(super) store: Arc<dyn AuditStore>,
    pub(super) settings: Arc<Settings>,
    shared_locks: Option<Arc<dyn writ_core::workspace::SharedLocks>>,
    opened: Mutex<HashMap<String, Opening>>,
    /// Each opened workspace's `git_commit` setting, by its root: a request finds its
    /// workspace's setting without a query (the setting is fixed when the workspace is made).
    git_commit: Mutex<HashMap<PathBuf, Option<bool>>>,
    /// What else is built over each opened workspace (its routes, its synthesizer): emptied of a
    /// workspace together with `opened` when it is deleted, so no cache goes on handing out a
    /// handle of it (a write through one is refused anyway, by the store, as on other replicas).
    caches: Mutex<Vec<Arc<dyn PerWorkspaceCache>>>,
}

/// A workspace being opened or opened: every first use of it waits on the same cell.
type Opening = Arc<OnceCell<Arc<dyn Workspace>>>;

impl Workspaces {
    pub fn new(
        default: Arc<dyn Workspace>,
        store: Arc<dyn AuditStore>,
        settings: Arc<Settings>,
        shared_locks: Option<Arc<dyn writ_core::workspace::SharedLocks>>,
    ) -> Self {
        Self {
            default,
            store,
            settings,
            shared_locks,
            opened: Mutex::new(HashMap::new()),
            git_commit: Mutex::new(HashMap::new()),
            caches: Mutex::new(Vec::new()),
        }
    }

    /// Has `cache` forget a workspace whenever this process deletes it.
    pub fn forget_along(&self, cache: Arc<dyn PerWorkspaceCache>) {
        self.caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(cache);
    }

    /// `REPO_DIR`.
    pub fn default_workspace(&self) -> &Arc<dyn Workspace> {
        &self.default
    }

    /// The workspace named `name`, opened; `None` when there is none of that name.
    pub async fn open(&self, name: &str) -> Result<Option<Arc<dyn Workspace>>, ApiError> {
        if name == WorkspaceName::DEFAULT {
            return Ok(Some(self.default.clone()));
        }
        let cell = self
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned();
        if let Some(cell) = cell
            && let Some(opened) = cell.get()
        {
            return Ok(Some(opened.clone()));
        }
        let Some(record) = self.store.find_workspace(name).await.map_err(store_error)? else {
            return Ok(None);
        };
        let cell = self
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone();
        let opened = cell
            .get_or_try_init(|| self.open_root(name, Path::new(&record.root)))
            .await?;
        self.git_commit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(opened.root().to_path_buf(), record.git_commit);
        Ok(Some(opened.clone()))
    }

    /// The `git_commit` setting of the opened workspace whose root is `root`; `None` for
    /// `default` and for a workspace without one (the server's setting applies).
    pub fn git_commit_of(&self, root: &Path) -> Option<bool> {
        self.git_commit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(root)
            .copied()
            .flatten()
    }

    async fn open_root(&self, name: &str, root: &Path) -> Result<Arc<dyn Workspace>, ApiError> {
        let workspace = writ_workspace::RepoWorkspace::open(root)
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
            .with_name(name);
        let protected = crate::config::edge::protected_paths(&self.settings, workspace.root());
        // Made before its root was judged at creation, or its root changed on disk since.
        protected
            .check_root(workspace.root())
            .map_err(|e| crate::error::workspace_error(e, "name"))?;
        let mut workspace = workspace
            .with_protected(protected)
            .with_max_file_bytes(self.settings.guard.max_file_bytes)
            .with_index();
        if let Some(shared) = &self.shared_locks {
            workspace = workspace.with_shared_locks(shared.clone());
        }
        Ok(Arc::new(workspace))
    }

    /// The names of the workspaces this process has opened (`default` not among them).
    pub fn opened_names(&self) -> Vec<String> {
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// Forgets the opened workspace, and everything built over it, so that a later one of the
    /// same name is opened afresh.
    pub(super) fn forget(&self, name: &str) {
        let opened = self
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        if let Some(workspace) = opened.as_ref().and_then(|cell| cell.get()) {
            self.git_commit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(workspace.root());
        }
        let caches = self
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for cache in caches {
            cache.forget(name);
        }
    }
}

#[async_trait::async_trait]
impl writ_core::workspace_registry::WorkspaceOpener for Workspaces {
    async fn open_workspace(&self, name: &str) -> Result<Option<Arc<dyn Workspace>>, StoreError> {
        self.open(name)
            .await
            .map_err(|e| StoreError::Unavailable(e.message))
    }
}
