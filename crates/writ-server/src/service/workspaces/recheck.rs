//! What a rebase re-runs: for each file the rebase touched, the checks recorded by the request
//! that last wrote it there — the caller's commands from its batch's request
//! (`options.validation.commands`) and the generated tests its batch kept
//! (`detail.generated_checks`) — in the sandbox, over the rebased workspace.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_core::audit::{GeneratedChecks, OperationFilter, OperationStatus};
use writ_core::execution::{CommandCall, CommandRunner};
use writ_core::path::RepoPath;
use writ_core::synthesis::WriteCodebaseRequest;
use writ_core::synthesis::validation::{GeneratedRerun, rerun_generated};
use writ_core::workspace_registry::WorkspaceRecord;

use super::unknown;
use crate::error::{ApiError, store_error};
use crate::state::AppState;

/// One request's commands, re-run on the rebased branch.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Recheck {
    /// The request that wrote the files and recorded the checks.
    pub request_id: Uuid,
    /// The touched files it wrote.
    pub paths: Vec<String>,
    /// The commands, as the request named them (`options.validation.commands`), each its name
    /// and arguments joined by spaces.
    pub commands: Vec<String>,
    pub passed: bool,
    /// The exit code of the first command that did not pass (absent: killed at its timeout, or
    /// it could not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The end of its output, or why it could not run.
    pub output_tail: String,
}

/// One touched file's kept generated tests, re-run on the rebased branch.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GeneratedRecheck {
    /// The request that wrote the file and kept the tests.
    pub request_id: Uuid,
    pub path: String,
    pub passed: bool,
    #[serde(flatten)]
    pub rerun: GeneratedRerun,
}

/// The longest output kept of a failed re-check.
const RECHECK_OUTPUT: usize = 2_000;

/// How long the generated tests of a file may run when its batch recorded no timeout.
const GENERATED_TIMEOUT: Duration = Duration::from_secs(60);

/// The request that last wrote a touched path, and what it kept for it.
struct Writer {
    request_id: Uuid,
    paths: Vec<String>,
    /// Per path, the generated tests kept for it, and those the written file failed then.
    generated: Vec<(String, GeneratedChecks, Vec<String>)>,
}

/// What a rebase re-ran, and whether it all passed.
#[derive(Debug, Default)]
pub(super) struct Rechecked {
    pub checks: Vec<Recheck>,
    pub generated: Vec<GeneratedRecheck>,
    /// Absent when nothing was recorded to re-run.
    pub passed: Option<bool>,
}

/// Re-runs, in the sandbox over the rebased workspace, the caller's commands of each request
/// that last wrote one of `touched` there, and the generated tests it kept for that file.
pub(super) async fn recheck(
    state: &AppState,
    name: &str,
    record: &WorkspaceRecord,
    touched: &[String],
) -> Result<Rechecked, ApiError> {
    let mut answer = Rechecked::default();
    let writers = last_writers(state, name, record, touched).await?;
    let workspace = state
        .workspaces
        .open(name)
        .await?
        .ok_or_else(|| unknown(name))?;
    let runner = super::runner_in(state.commands.as_ref(), workspace.as_ref());
    let cannot_run =
        "no sandbox or no commands are configured (WRIT_COMMANDS): the checks could not run";
    for writer in writers {
        let recorded = recorded_commands(state, writer.request_id).await?;
        let timeout = recorded.as_ref().map_or(GENERATED_TIMEOUT, |(_, t)| *t);
        for (path, kept, failed_then) in &writer.generated {
            let Ok(subject) = RepoPath::parse(path) else {
                continue;
            };
            let rerun = match &runner {
                Some(runner) => {
                    rerun_generated(
                        runner.as_ref(),
                        &state.settings.run.check_commands,
                        &subject,
                        kept,
                        failed_then,
                        timeout.min(runner.limits().max_timeout),
                    )
                    .await
                }
                None => Some(GeneratedRerun::not_run(
                    kept.tests.len(),
                    cannot_run.to_owned(),
                )),
            };
            if let Some(rerun) = rerun {
                answer.generated.push(GeneratedRecheck {
                    request_id: writer.request_id,
                    path: path.clone(),
                    passed: rerun.all_passed(),
                    rerun,
                });
            }
        }
        let Some((calls, timeout)) = recorded else {
            continue;
        };
        let commands: Vec<String> = calls
            .iter()
            .map(|c| {
                std::iter::once(c.name.as_str())
                    .chain(c.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let (passed, exit_code, output_tail) = match &runner {
            Some(runner) => run_commands(runner.as_ref(), &calls, timeout).await,
            None => (false, None, cannot_run.to_owned()),
        };
        answer.checks.push(Recheck {
            request_id: writer.request_id,
            paths: writer.paths,
            commands,
            passed,
            exit_code,
            output_tail,
        });
    }
    if !answer.checks.is_empty() || !answer.generated.is_empty() {
        answer.passed = Some(
            answer.checks.iter().all(|c| c.passed) && answer.generated.iter().all(|g| g.passed),
        );
    }
    Ok(answer)
}

/// The requests that last wrote each of `touched` in the workspace since it was made, each with
/// the paths it wrote and the generated tests it kept for them.
async fn last_writers(
    state: &AppState,
    name: &str,
    record: &WorkspaceRecord,
    touched: &[String],
) -> Result<Vec<Writer>, ApiError> {
    let mut writers: Vec<Writer> = Vec::new();
    for path in touched {
        let filter = OperationFilter {
            filename: Some(path.clone()),
            status: Some(OperationStatus::Succeeded),
            workspaces: Some(vec![name.to_owned()]),
            since: Some(record.created_at),
            ..OperationFilter::default()
        };
        let page = state
            .store
            .list_operations(&filter, None, 1)
            .await
            .map_err(store_error)?;
        let Some(op) = page.operations.into_iter().next() else {
            continue;
        };
        let kept = op
            .detail
            .as_ref()
            .and_then(|d| d.get("generated_checks"))
            .and_then(|g| serde_json::from_value::<GeneratedChecks>(g.clone()).ok())
            .filter(|g| !g.tests.is_empty());
        let at = match writers.iter().position(|w| w.request_id == op.request_id) {
            Some(at) => at,
            None => {
                writers.push(Writer {
                    request_id: op.request_id,
                    paths: Vec::new(),
                    generated: Vec::new(),
                });
                writers.len() - 1
            }
        };
        writers[at].paths.push(path.clone());
        if let Some(kept) = kept {
            // The tests the chosen candidate failed were doubted when it was written (the
            // fewest, where its model has several records): they do not count now.
            let failed_then = op
                .candidates
                .iter()
                .filter(|c| Some(&c.model) == op.chosen_model.as_ref())
                .filter_map(|c| c.generated_checks.as_ref())
                .map(|g| g.failed.clone())
                .min_by_key(Vec::len)
                .unwrap_or_default();
            writers[at]
                .generated
                .push((path.clone(), kept, failed_then));
        }
    }
    Ok(writers)
}

/// Runs `calls` in order; whether all passed, and the exit code and output tail of the first
/// that did not (or of the last).
async fn run_commands(
    runner: &dyn CommandRunner,
    calls: &[CommandCall],
    timeout: Duration,
) -> (bool, Option<i32>, String) {
    match runner.run(&[], calls, timeout).await {
        Ok(outcomes) => {
            let failed = outcomes.iter().find(|o| !o.passed());
            let passed = failed.is_none() && outcomes.len() == calls.len();
            let shown = failed.or(outcomes.last());
            (
                passed,
                shown.and_then(|o| o.exit_code),
                shown
                    .map(|o| {
                        writ_core::execution::tail(
                            &format!("{}{}", o.stdout, o.stderr),
                            RECHECK_OUTPUT,
                        )
                        .to_owned()
                    })
                    .unwrap_or_default(),
            )
        }
        Err(e) => (false, None, e.to_string()),
    }
}

/// The caller's commands a batch ran on its candidates (`options.validation.commands`), read
/// from the request body its job kept, with the batch's timeout.
async fn recorded_commands(
    state: &AppState,
    request_id: Uuid,
) -> Result<Option<(Vec<CommandCall>, Duration)>, ApiError> {
    let Some(body) = state
        .store
        .job_request(request_id)
        .await
        .map_err(store_error)?
    else {
        return Ok(None);
    };
    let Ok(req) = serde_json::from_str::<WriteCodebaseRequest>(&body) else {
        return Ok(None);
    };
    let Ok(batch) = writ_core::synthesis::Batch::parse(req) else {
        return Ok(None);
    };
    let Some(validation) = batch.options().validation() else {
        return Ok(None);
    };
    if validation.commands().is_empty() {
        return Ok(None);
    }
    Ok(Some((validation.commands().to_vec(), validation.timeout())))
}
