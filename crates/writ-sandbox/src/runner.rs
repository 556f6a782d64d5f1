//! The synthesis core's [`CommandRunner`] over this sandbox: named commands (`WRIT_COMMANDS`), a
//! scratch of `REPO_DIR` per run (made once the run holds its slot) with the staged files written
//! into it, the deployment's bounds, and the admission of `POST /run` ([`SandboxRunner::admit`]:
//! a bounded queue, and a bound on each key's runs in flight). When the sandbox could not start,
//! every check says why, so a request that needs it is refused (503) with the reason, and
//! nothing ever runs unsandboxed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tracing::Instrument;

use async_trait::async_trait;
use writ_core::RepoPath;
use writ_core::execution::{CommandCall, CommandRunner, RunError, RunLimits, RunOutcome};

use crate::{CommandError, CommandSet, Mechanism, Sandbox, SandboxError, SandboxUnavailable};

/// The environment variable bounding each key's runs in flight.
pub const PER_KEY_ENV: &str = "WRIT_RUN_MAX_PER_KEY";

/// How long a refused caller is told to wait before trying again.
const RETRY_AFTER_SECS: u64 = 5;

pub struct SandboxRunner {
    sandbox: Result<Sandbox, SandboxUnavailable>,
    commands: CommandSet,
    repo_dir: PathBuf,
    limits: RunLimits,
    /// Most `POST /run` calls of one key in flight at once.
    max_per_key: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// A caller's admitted run: counted among its key's runs in flight until dropped.
#[derive(Debug)]
pub struct Admission {
    key: Option<String>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let Some(key) = &self.key else { return };
        let mut map = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(key);
            }
        }
    }
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
            max_per_key: 4,
            in_flight: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The same runner over another workspace's root: its runs see only `repo_dir`, and share
    /// this runner's queue and each key's count of runs in flight.
    pub fn in_dir(&self, repo_dir: PathBuf) -> Self {
        SandboxRunner {
            sandbox: self.sandbox.clone(),
            commands: self.commands.clone(),
            repo_dir,
            limits: self.limits,
            max_per_key: self.max_per_key,
            in_flight: self.in_flight.clone(),
        }
    }

    /// Bounds each key's `POST /run` calls in flight (default 4).
    pub fn with_max_per_key(mut self, max: usize) -> Self {
        self.max_per_key = max.max(1);
        self
    }

    /// Lets one `POST /run` of `caller` (a key id; `None` while auth is off) in, or refuses it
    /// at once: the run queue is full (`WRIT_RUN_QUEUE`), or the key has `WRIT_RUN_MAX_PER_KEY`
    /// runs in flight already. A validation batch is not admitted this way: it waits for its
    /// slots, its scratches made only once it holds them.
    pub fn admit(&self, caller: Option<&str>) -> Result<Admission, RunError> {
        let sandbox = self.sandbox()?;
        sandbox.admit().map_err(run_error)?;
        if let Some(key) = caller {
            let mut map = self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let n = map.entry(key.to_string()).or_insert(0);
            if *n >= self.max_per_key {
                return Err(RunError::Busy {
                    message: format!(
                        "this key has {} runs in flight, at most {} ({PER_KEY_ENV}); try again when one has finished",
                        *n, self.max_per_key
                    ),
                    retry_after_secs: RETRY_AFTER_SECS,
                });
            }
            *n += 1;
        }
        Ok(Admission {
            key: caller.map(str::to_string),
            in_flight: self.in_flight.clone(),
        })
    }

    /// Which scratch runs get, in words for `/readyz` and `writ check`.
    pub fn scratch_mechanism(&self) -> Option<String> {
        let sandbox = self.sandbox.as_ref().ok()?;
        Some(describe(sandbox.mechanism(&self.repo_dir)))
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

/// A scratch mechanism in words.
pub fn describe((mechanism, why_not): (Mechanism, Option<String>)) -> String {
    match (mechanism, why_not) {
        (Mechanism::Overlay, _) => {
            "copy-on-write overlay over REPO_DIR (a run's writes in a bounded tmpfs)".into()
        }
        (Mechanism::Copy, Some(why)) => {
            format!("a bounded copy of REPO_DIR per run (the overlay is not used: {why})")
        }
        (Mechanism::Copy, None) => "a bounded copy of REPO_DIR per run".into(),
    }
}

/// A sandbox failure as the core sees it: a bound is named, never an internal error.
fn run_error(e: SandboxError) -> RunError {
    match e {
        SandboxError::RepoTooLarge { .. } => RunError::Limit(e.to_string()),
        SandboxError::Busy { .. } => RunError::Busy {
            message: e.to_string(),
            retry_after_secs: RETRY_AFTER_SECS,
        },
        other => RunError::Failed(other.to_string()),
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
impl CommandRunner for SandboxRunner {
    fn check(&self, call: &CommandCall, field: &str) -> Result<(), RunError> {
        self.sandbox()?;
        self.expand(call, field).map(|_| ())
    }

    fn limits(&self) -> RunLimits {
        self.limits
    }

    async fn run(
        &self,
        staged: &[(RepoPath, Vec<u8>)],
        calls: &[CommandCall],
        timeout: Duration,
    ) -> Result<Vec<RunOutcome>, RunError> {
        let sandbox = self.sandbox()?;
        let argvs = calls
            .iter()
            .map(|c| self.expand(c, "command"))
            .collect::<Result<Vec<_>, _>>()?;
        // The slot first: a batch of many runs holds at most `max_concurrent` scratches.
        let slot = sandbox.slot().await.map_err(run_error)?;
        let scratch = sandbox.scratch(&self.repo_dir).await.map_err(run_error)?;
        for (path, bytes) in staged {
            scratch.put(path.as_str(), bytes).map_err(run_error)?;
        }
        let mut outcomes = Vec::with_capacity(argvs.len());
        for (call, argv) in calls.iter().zip(argvs) {
            let started = Instant::now();
            let out = sandbox
                .run_in(&slot, &scratch, &argv, timeout.min(self.limits.max_timeout))
                .instrument(tracing::info_span!("sandbox_run", command = %call.name))
                .await
                .map_err(run_error)?;
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
                limit_reached: out.limit_reached,
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
