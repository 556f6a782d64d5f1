//! The synthesizer of each named workspace, built over `default`'s once per workspace.

use std::sync::Arc;

use writ_core::{StoreError, Workspace};

use super::built::BuiltPer;
use super::opened::Workspaces;

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
