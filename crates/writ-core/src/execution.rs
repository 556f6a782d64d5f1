//! Running the caller's tests: the [`CommandRunner`] trait the core uses to execute a named command on
//! a scratch copy of `REPO_DIR` with some files staged into it (candidates under validation), and
//! the records of a run. The sandbox that implements it lives in `writ-sandbox`; the core only
//! decides what to stage and what a result means.
//!
//! A request never names a program: it names a command configured on the server
//! (`WRIT_COMMANDS`) and passes paths as its arguments, which the runner checks.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::path::RepoPath;

/// One command to run: a configured name and its arguments (paths inside the sandbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandCall {
    pub name: String,
    #[serde(default)]
    pub args: Vec<String>,
}

/// What one command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunOutcome {
    /// `None` when it was killed at its timeout.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// Output past the capture bound was dropped.
    pub truncated: bool,
    /// Set when the command exited 0 but its output lacks what a pass of it must show (a test
    /// runner's report of at least one passing test, or the command's declared pattern): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_evidence: Option<String>,
    /// Set when the run's writes reached its scratch's bound (bytes or files): which bound, and
    /// the variable that sets it. Such a run does not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_reached: Option<String>,
}

impl RunOutcome {
    /// Exited 0 within its time and its scratch's bounds, and showed the evidence of a pass its
    /// command requires.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0)
            && !self.timed_out
            && self.missing_evidence.is_none()
            && self.limit_reached.is_none()
    }
}

/// Why a run could not happen (as opposed to a command that ran and failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The sandbox cannot start on this machine: nothing is ever run unsandboxed.
    #[error("commands cannot run here: {0}")]
    Unavailable(String),
    /// A request that names an unknown command or an argument the sandbox refuses.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("the command could not be run: {0}")]
    Failed(String),
    /// A deployment bound stopped the run before it started (REPO_DIR too large to copy): the
    /// message names the bound and its variable.
    #[error("{0}")]
    Limit(String),
    /// Too many runs wait already, or the caller has too many in flight: try again later.
    #[error("{message}")]
    Busy {
        message: String,
        retry_after_secs: u64,
    },
}

/// The bounds a deployment sets on runs, which requests may not exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Largest `timeout_secs` a request may ask for.
    pub max_timeout: Duration,
    /// Largest `repair_rounds` a batch may ask for.
    pub max_repair_rounds: u32,
}

#[async_trait]
pub trait CommandRunner: Send + Sync + 'static {
    /// Refuses, before anything runs, a call that names an unknown command or passes an
    /// argument that is not a path inside the sandbox. `field` is where the call sits in the
    /// request (`command`, `options.validation.commands[0]`).
    fn check(&self, call: &CommandCall, field: &str) -> Result<(), RunError>;

    fn limits(&self) -> RunLimits;

    /// Copies `REPO_DIR` to a scratch directory, writes `staged` into it, and runs `calls` in
    /// order there, each bounded by `timeout`; stops after the first that does not pass.
    /// `REPO_DIR` itself is never touched.
    async fn run(
        &self,
        staged: &[(RepoPath, Vec<u8>)],
        calls: &[CommandCall],
        timeout: Duration,
    ) -> Result<Vec<RunOutcome>, RunError>;
}

/// The end of a text, at most `max` bytes on a character boundary: what a failing command's
/// output is shown and recorded as.
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_end_on_a_character_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("aéb", 2), "b");
    }
}
