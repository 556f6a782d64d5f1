//! Errors: the sandbox cannot start at all ([`SandboxUnavailable`]), or one scratch or run failed
//! ([`SandboxError`]). A command exiting non-zero, timing out or being killed is no error: it is a
//! [`crate::RunOutput`].

use std::path::{Path, PathBuf};

/// The sandbox cannot run anything on this machine; writ must not run commands at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the command sandbox is unavailable: {reason}")]
pub struct SandboxUnavailable {
    /// Plain words saying what is missing and how to fix it.
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("REPO_DIR {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("REPO_DIR is too large to copy: more than {limit} {what} ({field}, {variable})")]
    RepoTooLarge {
        what: &'static str,
        limit: u64,
        field: &'static str,
        /// The environment variable that sets the bound.
        variable: &'static str,
    },
    #[error("path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("path {path:?}: {source}")]
    Put {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("path {path:?}: files are staged before the first run on a copy-on-write scratch")]
    Staged { path: String },
    #[error("{0}")]
    Overlay(String),
    #[error(
        "the run queue is full: {waiting} runs are waiting for {slots} slots (WRIT_RUN_QUEUE); try again later"
    )]
    Busy { waiting: usize, slots: usize },
    #[error("argv: {0}")]
    InvalidArgv(&'static str),
    #[error("the sandbox could not be started: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("the sandbox process failed: {0}")]
    Wait(#[source] std::io::Error),
    #[error("the sandbox is shutting down")]
    Closed,
    #[error("the scratch copy task failed: {0}")]
    Task(String),
}

impl SandboxError {
    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}
