//! The synthesis core's [`Runner`] over this sandbox: named commands (`WRIT_COMMANDS`), a
//! scratch copy of `REPO_DIR` per run with the staged files written into it, the deployment's
//! bounds. When the sandbox could not start, every check says why, so a request that needs it is
//! refused (503) with the reason, and nothing ever runs unsandboxed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use writ_core::SandboxPath;
use writ_core::execution::{CommandCall, RunError, RunLimits, RunOutcome, Runner};

use crate::{CommandError, CommandSet, Sandbox, SandboxUnavailable};

pub struct SandboxRunner {
    sandbox: Result<Sandbox, SandboxUnavailable>,
    commands: CommandSet,
    repo_dir: PathBuf,
    limits: RunLimits,
}

impl SandboxRunner {
    pub fn new(
        sandbox: Result<Sandbox, SandboxUnavailable>,
        commands: CommandSet,
        repo_dir: PathBuf,
        limits: RunLimits,
    ) -> Self {
        SandboxRunner {
            sandbox,
            commands,
            repo_dir,
            limits,
        }
    }

    /// Why commands cannot run here, if they cannot: for `/readyz` and `writ check`.
    pub fn problem(&self) -> Option<String> {
        match (&self.sandbox, self.commands.is_empty()) {
            (Err(e), _) => Some(format!("the sandbox cannot start: {}", e.reason)),
            (Ok(_), true) => Some(format!(
                "no commands are configured: set {}",
                crate::COMMANDS_ENV
            )),
            (Ok(_), false) => None,
        }
    }

    /// The configured command names.
    pub fn command_names(&self) -> Vec<String> {
        self.commands.names().map(str::to_string).collect()
    }

    fn sandbox(&self) -> Result<&Sandbox, RunError> {
        self.sandbox.as_ref().map_err(|e| {
            RunError::Unavailable(format!(
                "the sandbox cannot start on this machine: {}",
                e.reason
            ))
        })
    }

    fn expand(&self, call: &CommandCall, field: &str) -> Result<Vec<String>, RunError> {
        self.commands
            .expand(&call.name, &call.args)
            .map_err(|e| match e {
                CommandError::NoneConfigured => RunError::Unavailable(e.to_string()),
                CommandError::Unknown { .. } => RunError::Invalid {
                    // `POST /run` names the command in `command`; a validation call in `name`.
                    field: if field.is_empty() {
                        "command".to_string()
                    } else {
                        join(field, "name")
                    },
                    message: e.to_string().trim_start_matches("command: ").to_string(),
                },
                CommandError::InvalidArg { index, reason } => RunError::Invalid {
                    field: join(field, &format!("args[{index}]")),
                    message: reason,
                },
                other => RunError::Invalid {
                    field: join(field, "args"),
                    message: other.to_string().trim_start_matches("args: ").to_string(),
                },
            })
    }
}

/// `commands[0]` + `name` → `commands[0].name`; an empty base gives the bare name.
fn join(base: &str, leaf: &str) -> String {
    if base.is_empty() {
        leaf.to_string()
    } else {
        format!("{base}.{leaf}")
    }
}

#[async_trait]
impl Runner for SandboxRunner {
    fn check(&self, call: &CommandCall, field: &str) -> Result<(), RunError> {
        self.sandbox()?;
        self.expand(call, field).map(|_| ())
    }

    fn limits(&self) -> RunLimits {
        self.limits
    }

    async fn run(
        &self,
        staged: &[(SandboxPath, Vec<u8>)],
        calls: &[CommandCall],
        timeout: Duration,
    ) -> Result<Vec<RunOutcome>, RunError> {
        let sandbox = self.sandbox()?;
        let argvs = calls
            .iter()
            .map(|c| self.expand(c, "command"))
            .collect::<Result<Vec<_>, _>>()?;
        let scratch = sandbox
            .scratch(&self.repo_dir)
            .await
            .map_err(|e| RunError::Failed(e.to_string()))?;
        for (path, bytes) in staged {
            scratch
                .put(path.as_str(), bytes)
                .map_err(|e| RunError::Failed(e.to_string()))?;
        }
        let mut outcomes = Vec::with_capacity(argvs.len());
        for (call, argv) in calls.iter().zip(argvs) {
            let started = Instant::now();
            let out = sandbox
                .run(&scratch, &argv, timeout.min(self.limits.max_timeout))
                .await
                .map_err(|e| RunError::Failed(e.to_string()))?;
            // Exit 0 is checked against what the command's pass must show: a candidate that
            // ends the process early at import exits 0 with no test run.
            let missing_evidence = match self.commands.evidence(&call.name) {
                Some(evidence) if out.exit_code == Some(0) && !out.timed_out => evidence
                    .check(&format!("{}\n{}", out.stdout, out.stderr))
                    .err(),
                _ => None,
            };
            let outcome = RunOutcome {
                exit_code: out.exit_code,
                stdout: out.stdout,
                stderr: out.stderr,
                duration_ms: out.duration_ms.max(started.elapsed().as_millis() as u64),
                timed_out: out.timed_out,
                truncated: out.truncated,
                missing_evidence,
            };
            let passed = outcome.passed();
            outcomes.push(outcome);
            if !passed {
                break;
            }
        }
        Ok(outcomes)
    }
}
