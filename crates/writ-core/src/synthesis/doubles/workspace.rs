//! A workspace in memory: files by path, written when published, and paths whose publication
//! fails as a full disk would.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::path::RepoPath;
use crate::workspace::{
    DirEntry, PathLock, StagedGroup, StagedWrite, ToStage, Workspace, WorkspaceError,
};

type Files = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

#[derive(Default)]
pub struct MemoryWorkspace {
    files: Files,
    /// Paths whose writes fail when published.
    failing: Vec<String>,
}

impl MemoryWorkspace {
    pub fn with_file(self, path: &str, content: &str) -> Self {
        if let Ok(mut files) = self.files.lock() {
            files.insert(path.to_string(), content.as_bytes().to_vec());
        }
        self
    }

    pub fn failing_on(mut self, path: &str) -> Self {
        self.failing.push(path.to_string());
        self
    }

    /// What `path` holds now, as text.
    pub fn content(&self, path: &str) -> Option<String> {
        self.files
            .lock()
            .ok()
            .and_then(|files| files.get(path).cloned())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    }

    fn get(&self, path: &RepoPath) -> Option<Vec<u8>> {
        self.files
            .lock()
            .ok()
            .and_then(|files| files.get(path.as_str()).cloned())
    }

    fn staged(&self, path: &RepoPath, content: &[u8]) -> Staged {
        Staged {
            files: self.files.clone(),
            path: path.to_string(),
            content: content.to_vec(),
            fails: self.failing.iter().any(|p| p == path.as_str()),
        }
    }
}

struct Staged {
    files: Files,
    path: String,
    content: Vec<u8>,
    fails: bool,
}

impl Staged {
    fn publish_now(self) -> Result<(), WorkspaceError> {
        if self.fails {
            return Err(WorkspaceError::NoSpace { path: self.path });
        }
        if let Ok(mut files) = self.files.lock() {
            files.insert(self.path, self.content);
        }
        Ok(())
    }
}

#[async_trait]
impl StagedWrite for Staged {
    async fn publish(self: Box<Self>) -> Result<(), WorkspaceError> {
        self.publish_now()
    }
}

struct StagedAll(Vec<Staged>);

#[async_trait]
impl StagedGroup for StagedAll {
    async fn publish(self: Box<Self>) -> Vec<Result<(), WorkspaceError>> {
        self.0.into_iter().map(Staged::publish_now).collect()
    }
}

#[async_trait]
impl Workspace for MemoryWorkspace {
    fn root(&self) -> &Path {
        Path::new("/memory")
    }
    async fn lock(&self, _path: &RepoPath) -> PathLock {
        // Each test drives one writer per path.
        let local = Arc::new(tokio::sync::Mutex::new(())).lock_owned().await;
        PathLock::local(local)
    }
    async fn list(&self, _dir: &RepoPath) -> Result<Vec<DirEntry>, WorkspaceError> {
        Ok(Vec::new())
    }
    async fn read(&self, path: &RepoPath) -> Result<Option<Vec<u8>>, WorkspaceError> {
        Ok(self.get(path))
    }
    async fn check_target(
        &self,
        _path: &RepoPath,
        _create_dirs: bool,
    ) -> Result<(), WorkspaceError> {
        Ok(())
    }
    async fn read_targets(
        &self,
        targets: &[(RepoPath, bool)],
    ) -> Vec<Result<Option<Vec<u8>>, WorkspaceError>> {
        targets.iter().map(|(path, _)| Ok(self.get(path))).collect()
    }
    async fn stage(
        &self,
        path: &RepoPath,
        content: &[u8],
        _create_dirs: bool,
    ) -> Result<Box<dyn StagedWrite>, WorkspaceError> {
        Ok(Box::new(self.staged(path, content)))
    }
    async fn stage_all(&self, writes: &[ToStage<'_>]) -> Box<dyn StagedGroup> {
        Box::new(StagedAll(
            writes
                .iter()
                .map(|w| self.staged(w.path, w.content))
                .collect(),
        ))
    }
    async fn remove(&self, path: &RepoPath) -> Result<(), WorkspaceError> {
        let removed = self
            .files
            .lock()
            .ok()
            .and_then(|mut files| files.remove(path.as_str()));
        match removed {
            Some(_) => Ok(()),
            None => Err(WorkspaceError::NotFound {
                path: path.to_string(),
            }),
        }
    }
    async fn probe_writable(&self) -> Result<(), WorkspaceError> {
        Ok(())
    }
}
