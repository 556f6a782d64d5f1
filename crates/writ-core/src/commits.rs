//! A commit of what one request wrote, where the workspace keeps a history of its own (a git
//! repository): the [`Committer`] port (implemented over `writ-git` by the server) and
//! [`commit_request`], the one way every kind of request — a batch, edits, a direct write, a
//! write session, an undo — makes its commit.
//!
//! The commit is made under the path locks of every file the request wrote, taken together in
//! path order (as a write group takes them), and only of the files that still hold what the
//! request left there: a writer that got a path between the request's write and its commit has
//! its content committed by its own request, never under this one's name, and the commits of
//! one path follow the order of its writes. A request's writes can come in several groups (a
//! batch writes each file as soon as it is chosen); holding the first group's locks until the
//! last one is written would let two batches each hold a path the other waits for, so the locks
//! are taken again, all at once, for the commit.

use async_trait::async_trait;
use uuid::Uuid;

use crate::content::sha256_hex;
use crate::path::RepoPath;
use crate::workspace::Workspace;

/// One file of a request's commit: its path and what the request left there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitFile {
    pub path: RepoPath,
    /// The SHA-256 of the content the request wrote; `None`: the request removed the file.
    pub sha256: Option<String>,
    /// The model whose content was chosen, for a batch's file.
    pub model: Option<String>,
    /// How the content was chosen (`arbiter`, `validated`, …; `direct` for content the caller
    /// sent, `undo` for an undo's).
    pub selection: Option<String>,
}

/// What a request's commit says beyond its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCommit {
    pub request_id: Uuid,
    /// The key id of the caller, when keys are on; the committer names the key as the author.
    pub caller: Option<String>,
    pub subject: String,
    pub body: String,
    /// Trailers after `Writ-Request` and each file's `Writ-Model` and `Writ-Selection`.
    pub trailers: Vec<(String, String)>,
    pub files: Vec<CommitFile>,
}

/// Whoever keeps the workspace's history. Its commits are made under the path locks
/// [`commit_request`] holds.
#[async_trait]
pub trait Committer: Send + Sync {
    /// Whether a request that does not say (`options.commit`, `commit`) is committed: the
    /// workspace's setting, else the server's (`WRIT_GIT_COMMIT`).
    fn commits_by_default(&self) -> bool;

    /// Commits `commit.files` as they are on disk now (removed ones removed); `Ok(None)` when
    /// nothing was committed (the workspace is not a repository, or nothing changed against
    /// its head). The error says why the commit could not be made.
    async fn commit(&self, commit: &RequestCommit) -> Result<Option<String>, String>;
}

/// Whether a request is committed: what it asked (`Some`), else the committer's default; never
/// without a committer.
pub fn wanted(committer: Option<&dyn Committer>, asked: Option<bool>) -> bool {
    committer.is_some_and(|c| asked.unwrap_or_else(|| c.commits_by_default()))
}

/// What [`commit_request`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// The commit's id, when one was made.
    pub commit: Option<String>,
    /// Files left out: another writer changed them after this request wrote them.
    pub changed_since: Vec<String>,
}

/// Makes `commit`'s commit under its files' path locks (see the module docs). A commit that
/// fails leaves the files written and recorded: it is logged, never a failed request.
pub async fn commit_request(
    workspace: &dyn Workspace,
    committer: &dyn Committer,
    mut commit: RequestCommit,
) -> Committed {
    commit
        .files
        .sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
    commit.files.dedup_by(|a, b| a.path == b.path);
    if commit.files.is_empty() {
        return Committed::default();
    }
    let mut locks = Vec::with_capacity(commit.files.len());
    for file in &commit.files {
        locks.push(workspace.lock(&file.path).await);
    }
    let mut changed_since = Vec::new();
    let mut kept = Vec::with_capacity(commit.files.len());
    for file in std::mem::take(&mut commit.files) {
        let now = match workspace.read(&file.path).await {
            Ok(now) => now.as_deref().map(sha256_hex),
            Err(e) => {
                tracing::warn!(path = %file.path, error = %e, "a written file could not be read for its commit");
                changed_since.push(file.path.to_string());
                continue;
            }
        };
        let same = match (&now, &file.sha256) {
            (Some(now), Some(left)) => now.eq_ignore_ascii_case(left),
            (None, None) => true,
            _ => false,
        };
        if same {
            kept.push(file);
        } else {
            changed_since.push(file.path.to_string());
        }
    }
    if !changed_since.is_empty() {
        let note = format!(
            "Not in this commit, changed by a later writer since this request wrote them: {}",
            changed_since.join(", ")
        );
        commit.body = if commit.body.trim().is_empty() {
            note
        } else {
            format!("{}\n\n{note}", commit.body.trim_end())
        };
    }
    commit.files = kept;
    let made = if commit.files.is_empty() {
        Ok(None)
    } else {
        committer.commit(&commit).await
    };
    drop(locks);
    match made {
        Ok(id) => Committed {
            commit: id,
            changed_since,
        },
        Err(e) => {
            tracing::warn!(request_id = %commit.request_id, error = %e, "the request's files are written but could not be committed");
            Committed {
                commit: None,
                changed_since,
            }
        }
    }
}

/// The trailers of a request's commit, after `Writ-Request`: each file's model and selection
/// (`Writ-Model: <path>=<model>`, `Writ-Selection: <path>=<selection>`), then `extra`.
pub fn trailers(commit: &RequestCommit) -> Vec<(String, String)> {
    let mut trailers = vec![("Writ-Request".to_string(), commit.request_id.to_string())];
    for f in &commit.files {
        if let Some(model) = &f.model {
            trailers.push(("Writ-Model".into(), format!("{}={model}", f.path)));
        }
    }
    for f in &commit.files {
        if let Some(selection) = &f.selection {
            trailers.push(("Writ-Selection".into(), format!("{}={selection}", f.path)));
        }
    }
    trailers.extend(commit.trailers.iter().cloned());
    trailers
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::synthesis::doubles::MemoryWorkspace;

    #[derive(Default)]
    struct Recording {
        commits: Mutex<Vec<RequestCommit>>,
    }

    #[async_trait]
    impl Committer for Recording {
        fn commits_by_default(&self) -> bool {
            false
        }
        async fn commit(&self, commit: &RequestCommit) -> Result<Option<String>, String> {
            self.commits
                .lock()
                .map_err(|e| e.to_string())?
                .push(commit.clone());
            Ok(Some("c0ffee".into()))
        }
    }

    fn file(path: &str, content: Option<&str>) -> CommitFile {
        CommitFile {
            path: RepoPath::parse(path).unwrap(),
            sha256: content.map(|c| sha256_hex(c.as_bytes())),
            model: Some("alpha".into()),
            selection: Some("single_candidate".into()),
        }
    }

    #[tokio::test]
    async fn a_file_another_writer_changed_since_is_left_out_and_named() {
        let workspace = MemoryWorkspace::default()
            .with_file("a.py", "a = 1\n")
            .with_file("b.py", "b = someone else's\n");
        let committer = Recording::default();
        let request_id = Uuid::now_v7();

        let done = commit_request(
            &workspace,
            &committer,
            RequestCommit {
                request_id,
                caller: None,
                subject: "Write a.py, b.py, gone.py".into(),
                body: String::new(),
                trailers: Vec::new(),
                files: vec![
                    file("b.py", Some("b = 1\n")),
                    file("a.py", Some("a = 1\n")),
                    file("gone.py", None),
                ],
            },
        )
        .await;

        assert_eq!(done.commit.as_deref(), Some("c0ffee"));
        assert_eq!(done.changed_since, ["b.py"]);
        let commits = committer.commits.lock().unwrap();
        let paths: Vec<&str> = commits[0].files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.py", "gone.py"], "in path order, b.py left out");
        assert!(commits[0].body.contains("b.py"), "{}", commits[0].body);
    }

    #[test]
    fn each_file_names_its_model_and_selection_in_a_trailer() {
        let request_id = Uuid::now_v7();
        let commit = RequestCommit {
            request_id,
            caller: None,
            subject: "s".into(),
            body: String::new(),
            trailers: vec![("Writ-Undoes".into(), "x".into())],
            files: vec![file("src/a.py", Some("a"))],
        };
        assert_eq!(
            trailers(&commit),
            [
                ("Writ-Request".to_string(), request_id.to_string()),
                ("Writ-Model".to_string(), "src/a.py=alpha".to_string()),
                (
                    "Writ-Selection".to_string(),
                    "src/a.py=single_candidate".to_string()
                ),
                ("Writ-Undoes".to_string(), "x".to_string()),
            ]
        );
    }
}
