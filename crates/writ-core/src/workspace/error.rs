//! What the filesystem says about a path beneath the workspace's root: the error of every
//! [`super::Workspace`] operation, and of a search that could not look where it was asked.

use crate::path::PathError;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{0}")]
    Path(#[from] PathError),
    #[error("'{path}' resolves outside REPO_DIR (through a symlink)")]
    Escapes { path: String },
    #[error("'{path}' does not exist")]
    NotFound { path: String },
    #[error(
        "parent directory '{parent}' of '{path}' does not exist (set create_dirs=true to create it)"
    )]
    ParentMissing { path: String, parent: String },
    #[error("'{path}' is a directory, not a file")]
    IsDirectory { path: String },
    #[error("'{path}' is not a directory")]
    NotADirectory { path: String },
    #[error("'{path}' is not a regular file")]
    SpecialFile { path: String },
    #[error("'{path}' is protected ({protected}: {reason}); writ never writes there")]
    Protected {
        path: String,
        protected: String,
        reason: String,
    },
    #[error("no space left on the device while writing '{path}'")]
    NoSpace { path: String },
    #[error("I/O error on '{path}': {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}
