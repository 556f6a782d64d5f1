//! Named workspaces: creating, listing and deleting them ([`create`], [`list`], [`find`],
//! [`delete`]), and [`Workspaces`], which opens each one once per process and hands the opened
//! [`Workspace`] to every request after that.
//!
//! `default` is `REPO_DIR`, opened at start-up and never stored. Every other workspace is a row
//! of the store (so every replica serves it) and a directory beneath `WRIT_WORKSPACES_DIR`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use writ_core::budgets::{Budget, WindowSpend};
use writ_core::workspaces::{WorkspaceDeletion, WorkspaceKind, WorkspaceName, WorkspaceRecord};
use writ_core::{AuditStore, RepoPath, StoreError, Workspace};

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode, store_error};

/// The variable that says where workspaces are made; named in every refusal that needs it.
pub const WORKSPACES_DIR_VAR: &str = "WRIT_WORKSPACES_DIR";

/// Every workspace this process has opened, by name. A lookup is one short lock and a hash
/// probe, whatever the number of workspaces; a workspace's first use opens it (a canonical path,
/// a directory handle, its index) while the lock is not held, so it stalls no other workspace,
/// and concurrent first uses of one workspace open it once.
pub struct Workspaces {
    default: Arc<dyn Workspace>,
    store: Arc<dyn AuditStore>,
    settings: Arc<Settings>,
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
    fn forget(&self, name: &str) {
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
impl writ_core::workspaces::WorkspaceOpener for Workspaces {
    async fn open_workspace(&self, name: &str) -> Result<Option<Arc<dyn Workspace>>, StoreError> {
        self.open(name)
            .await
            .map_err(|e| StoreError::Unavailable(e.message))
    }
}

/// Builds the committer of a workspace (made where the git support is wired: `startup`).
pub type CommitterFor =
    Arc<dyn Fn(&dyn Workspace) -> Arc<dyn writ_core::commits::Committer> + Send + Sync>;

/// The synthesizer of each named workspace: `default`'s, writing in that workspace, its
/// caller's tests run by a sandbox runner over its root (sharing the one run queue). Built once
/// per workspace, at its first batch (or the first job resumed in it).
pub struct Synthesizers {
    pub workspaces: Arc<Workspaces>,
    pub base: Arc<writ_core::synthesis::Synthesizer>,
    pub commands: Option<Arc<writ_sandbox::SandboxRunner>>,
    /// What commits a batch's files in a workspace's own repository (never in `REPO_DIR`'s),
    /// as its `git_commit` says, else the server.
    pub committer_for: CommitterFor,
    /// Registered with [`Workspaces::forget_along`].
    pub built: Arc<BuiltPer<Arc<writ_core::synthesis::Synthesizer>>>,
}

#[async_trait::async_trait]
impl writ_core::synthesis::jobs::WorkspaceSynthesizers for Synthesizers {
    async fn synthesizer_for(
        &self,
        name: &str,
    ) -> Result<Option<Arc<writ_core::synthesis::Synthesizer>>, StoreError> {
        let Some(workspace) = self
            .workspaces
            .open(name)
            .await
            .map_err(|e| StoreError::Unavailable(e.message))?
        else {
            return Ok(None);
        };
        if let Some(built) = self.built.get(name, &workspace) {
            return Ok(Some(built));
        }
        let commands = runner_in(self.commands.as_ref(), workspace.as_ref())
            .map(|c| c as Arc<dyn writ_core::execution::CommandRunner>);
        let committer = (self.committer_for)(workspace.as_ref());
        let built = Arc::new(
            self.base
                .in_workspace(workspace.clone(), commands, Some(committer)),
        );
        self.built.insert(name, workspace, built.clone());
        Ok(Some(built))
    }
}

/// `default`'s command runner over `workspace`'s root: a run there sees that workspace only.
pub fn runner_in(
    commands: Option<&Arc<writ_sandbox::SandboxRunner>>,
    workspace: &dyn Workspace,
) -> Option<Arc<writ_sandbox::SandboxRunner>> {
    commands.map(|c| Arc::new(c.in_dir(workspace.root().to_path_buf())))
}

/// What is built once per workspace (the router of the routes inside it), by name, with the
/// opened workspace it was built over: a workspace deleted and made again is built afresh. A
/// lookup is one short lock and a hash probe, whatever the number of workspaces.
pub struct BuiltPer<T>(Mutex<HashMap<String, Built<T>>>);

/// A value, and the opened workspace it was built over.
type Built<T> = (Arc<dyn Workspace>, T);

impl<T> Default for BuiltPer<T> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> BuiltPer<T> {
    pub fn get(&self, name: &str, workspace: &Arc<dyn Workspace>) -> Option<T> {
        let built = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        built
            .get(name)
            .filter(|(over, _)| Arc::ptr_eq(over, workspace))
            .map(|(_, value)| value.clone())
    }

    pub fn insert(&self, name: &str, workspace: Arc<dyn Workspace>, value: T) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), (workspace, value));
    }

    pub fn forget(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// A cache by workspace name that [`Workspaces`] empties of a workspace it deletes.
pub trait PerWorkspaceCache: Send + Sync {
    fn forget(&self, name: &str);
}

impl<T: Clone + Send> PerWorkspaceCache for BuiltPer<T> {
    fn forget(&self, name: &str) {
        BuiltPer::forget(self, name);
    }
}

/// The characters [`WorkspaceName::parse`] allows, as a regular expression; its length bounds
/// are [`writ_core::workspaces::NAME_MAX`].
const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9-]*$";

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
        length(min = 1, max = writ_core::workspaces::NAME_MAX),
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

fn default_info(workspaces: &Workspaces) -> WorkspaceInfo {
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
    }
}

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

fn unknown(name: &str) -> ApiError {
    ApiError::not_found(format!("no workspace named '{name}'")).with_field("name")
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
        Some(record) => Ok(record.into()),
        None => Err(unknown(name)),
    }
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
fn refuse_protected_root(workspaces: &Workspaces, root: &Path, field: &str) -> Result<(), ApiError> {
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

/// The body of `POST /workspaces/{name}/merge`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeWorkspace {
    /// The branch of the same repository to merge the workspace's branch into (e.g. `main`).
    pub into: String,
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

/// Merges the branch of the git-worktree workspace `name` into `into`: a fast-forward when
/// possible, else one merge commit; conflicts answer 409 with each file and its hunks, and
/// neither branch moves. A merge that moved `into` is recorded as a request (route `POST
/// /workspaces/{name}/merge`, its answer stored with it).
pub async fn merge(
    workspaces: &Workspaces,
    name: &str,
    request: MergeWorkspace,
    caller: Option<&str>,
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
        Ok(MergeOutcome::Conflicts(conflicts)) => {
            let files: Vec<serde_json::Value> = conflicts
                .iter()
                .map(|c| serde_json::json!({"path": c.path, "hunks": c.hunks}))
                .collect();
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "'{branch}' does not merge into '{into}' cleanly: {} conflict; nothing was changed",
                    conflicts
                        .iter()
                        .map(|c| c.path.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .with_field("into")
            .with_details(serde_json::json!({ "files": files })));
        }
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

/// The merge in the audit log: a request with its answer, so `GET /requests`-style readers and
/// operators see which branch moved where and when. A record that cannot be written is logged:
/// the branch has moved already, and git has the commit.
async fn record_merge(store: &dyn AuditStore, merged: &MergedWorkspace, caller: Option<&str>) {
    let route = format!("POST /workspaces/{}/merge", merged.workspace);
    let answer = serde_json::to_value(merged).ok();
    let recorded = async {
        store
            .insert_request(&writ_core::audit::NewRequest {
                id: merged.request_id,
                received_at: Utc::now(),
                route,
                caller: caller.map(str::to_owned),
                scope: Some(writ_core::keys::Scope::Admin),
                idempotency_key: None,
                body_sha256: None,
                workspace: merged.workspace.clone(),
            })
            .await?;
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
            (1..=writ_core::workspaces::NAME_MAX).contains(&name.len()) && pattern.is_match(name)
        };
        let longest = "a".repeat(writ_core::workspaces::NAME_MAX);
        let too_long = "a".repeat(writ_core::workspaces::NAME_MAX + 1);
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
