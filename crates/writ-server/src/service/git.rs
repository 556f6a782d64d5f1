//! A commit per request (`WRIT_GIT_COMMIT`), when the workspace is a git repository: exactly the
//! paths the request wrote, by [`writ_git::commit`], after the request's writes. A commit that
//! fails leaves the files written and recorded; it is logged, never a failed request.

use uuid::Uuid;

use crate::state::AppState;

/// What a request's commit says beyond its paths.
pub struct RequestCommit {
    pub request_id: Uuid,
    /// The key id of the caller (the commit's author), when keys are on.
    pub caller: Option<String>,
    pub subject: String,
    pub body: String,
    /// Further trailers, after `Writ-Request`.
    pub trailers: Vec<(String, String)>,
    pub paths: Vec<String>,
}

/// Commits `commit.paths` when commits are on and the workspace is a repository; the commit's
/// id, if one was made.
pub async fn commit_request(state: &AppState, commit: RequestCommit) -> Option<String> {
    if !state.settings.git_commit || commit.paths.is_empty() {
        return None;
    }
    let root = state.workspace.root().to_path_buf();
    let made = tokio::task::spawn_blocking(move || {
        if !writ_git::commit::is_repository(&root) {
            return Ok(None);
        }
        let mut trailers = vec![("Writ-Request".to_string(), commit.request_id.to_string())];
        trailers.extend(commit.trailers);
        let message = writ_git::commit::message(&commit.subject, &commit.body, &trailers);
        let author = commit.caller.as_deref().unwrap_or("writ");
        let email = format!("{author}@writ");
        writ_git::commit::commit_paths(
            &root,
            &writ_git::commit::CommitSpec {
                paths: &commit.paths,
                message: &message,
                author_name: author,
                author_email: &email,
            },
        )
    })
    .await;
    match made {
        Ok(Ok(id)) => id.map(|id| id.to_string()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the request's files are written but could not be committed");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "the commit of a request stopped");
            None
        }
    }
}
