//! A commit per request, when the workspace is a git repository: the core's
//! [`Committer`](writ_core::commits::Committer) over [`writ_git::commit`]. Whether a request is
//! committed is its own option (`options.commit`, `commit`), else the workspace's setting
//! (`git_commit` in the workspaces registry), else `WRIT_GIT_COMMIT`. The author is the caller's
//! key, by its name; the committer is writ. The core makes the commit under the request's path
//! locks ([`writ_core::commits::commit_request`]); a commit that fails leaves the files written
//! and recorded, and is logged, never a failed request.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use writ_core::AuditStore;
use writ_core::commits::{self, CommitFile, Committer, RequestCommit};

use crate::state::AppState;

/// The committer's name and e-mail: what made each commit, whoever asked for it.
const COMMITTER_NAME: &str = "writ";
const COMMITTER_EMAIL: &str = "writ@localhost";

/// Commits into the repository `root` is in.
pub struct GitCommitter {
    root: PathBuf,
    /// The workspace's setting, else the server's.
    by_default: bool,
    /// Where keys are looked up by id, for the author's name.
    store: Arc<dyn AuditStore>,
}

impl GitCommitter {
    pub fn new(root: PathBuf, by_default: bool, store: Arc<dyn AuditStore>) -> Self {
        GitCommitter {
            root,
            by_default,
            store,
        }
    }

    /// The author of a request's commit: its key's name (its id when the key has none or is
    /// gone), `writ` without keys; the e-mail names the key id, which is stable.
    async fn author(&self, caller: Option<&str>) -> (String, String) {
        let Some(id) = caller else {
            return (COMMITTER_NAME.to_string(), COMMITTER_EMAIL.to_string());
        };
        let name = match self.store.find_key(id).await {
            Ok(Some(key)) if !key.name.trim().is_empty() => key.name,
            _ => id.to_string(),
        };
        (name, format!("{id}@writ"))
    }
}

#[async_trait]
impl Committer for GitCommitter {
    fn commits_by_default(&self) -> bool {
        self.by_default
    }

    async fn commit(&self, commit: &RequestCommit) -> Result<Option<String>, String> {
        let (author_name, author_email) = self.author(commit.caller.as_deref()).await;
        let root = self.root.clone();
        let message =
            writ_git::commit::message(&commit.subject, &commit.body, &commits::trailers(commit));
        let paths: Vec<String> = commit.files.iter().map(|f| f.path.to_string()).collect();
        let made = tokio::task::spawn_blocking(move || {
            // A workspace that is not a repository has nothing to commit into. Asked of the
            // commit itself, which keeps the repositories it committed into open, rather than
            // found again before every commit.
            match writ_git::commit::commit_paths(
                &root,
                &writ_git::commit::CommitSpec {
                    paths: &paths,
                    message: &message,
                    author_name: &author_name,
                    author_email: &author_email,
                    committer_name: COMMITTER_NAME,
                    committer_email: COMMITTER_EMAIL,
                },
            ) {
                Err(writ_git::commit::GitError::NotARepository(_)) => Ok(None),
                made => made,
            }
        })
        .await
        .map_err(|e| format!("the commit stopped: {e}"))?;
        let made = made
            .map(|id| id.map(|id| id.to_string()))
            .map_err(|e| e.to_string())?;
        if let Some(id) = &made
            && let Err(e) = self.store.record_commit(commit.request_id, id).await
        {
            // The commit stands; only an undo that does not say `commit` misses it, and then
            // commits as the workspace is set.
            tracing::warn!(request_id = %commit.request_id, commit = %id, error = %e, "the request's commit could not be recorded");
        }
        Ok(made)
    }
}

/// The committer of the workspace this request is served in: `state.workspace`, committed by
/// default as the registry says for it (a named workspace's `git_commit`), else as
/// `WRIT_GIT_COMMIT` says.
pub fn committer(state: &AppState) -> Arc<dyn Committer> {
    let by_default = state
        .workspaces
        .git_commit_of(state.workspace.root())
        .unwrap_or(state.settings.git_commit);
    Arc::new(GitCommitter::new(
        state.workspace.root().to_path_buf(),
        by_default,
        state.store.clone(),
    ))
}

/// Commits `commit` when the request asked for it (`asked`), else as the workspace is set; the
/// commit's id, if one was made.
pub async fn commit_request(
    state: &AppState,
    asked: Option<bool>,
    commit: RequestCommit,
) -> Option<String> {
    if commit.files.is_empty() {
        return None;
    }
    let committer = committer(state);
    if !commits::wanted(Some(committer.as_ref()), asked) {
        return None;
    }
    commits::commit_request(state.workspace.as_ref(), committer.as_ref(), commit)
        .await
        .commit
}

/// A file written with the caller's own content (`direct`) or an undo's, for a commit.
pub fn file(path: &str, sha256: Option<String>, selection: &str) -> Option<CommitFile> {
    Some(CommitFile {
        path: writ_core::RepoPath::parse_nonempty(path).ok()?,
        sha256,
        model: None,
        selection: Some(selection.to_string()),
    })
}
