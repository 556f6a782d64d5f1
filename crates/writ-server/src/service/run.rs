//! A run, as `POST /run` and the `run` tool ask for it: one configured command in the sandbox, on a scratch of `REPO_DIR`, recorded in the
//! audit log like a write (a request and an operation of kind `run`).
//!
//! Admitted only while the run queue has room and the key has fewer than its bound of runs in
//! flight (503 / 429 with `Retry-After` otherwise); a run whose caller hangs up is stopped (its
//! sandbox killed) and recorded as cancelled.

use chrono::Utc;
use serde::Deserialize;
use uuid::Uuid;
use writ_core::audit::{
    FileKind, NewRequest, Operation, OperationKind, OperationStatus, RequestStatus,
};
use writ_core::execution::{CommandCall, CommandRunner, RunError, RunOutcome, tail};

use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Output kept in the audit record of a run (the answer has the whole capture).
const RECORDED_OUTPUT_BYTES: usize = 4_000;

/// The body of `POST /run`, and the `run` tool's arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// A configured command's name (`WRIT_COMMANDS`).
    pub command: String,
    /// Workspace paths, in place of the command's `{args}`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Seconds before the command is killed: at most `WRIT_RUN_MAX_TIMEOUT_SECS`,
    /// `WRIT_RUN_DEFAULT_TIMEOUT_SECS` when absent.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// One run, as `POST /run` and the `run` tool ask for it.
pub struct RunCall {
    /// Recorded on the request row: which surface asked.
    pub route: &'static str,
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the run, when auth is on.
    pub scope: Option<writ_core::keys::Scope>,
    /// SHA-256 of the request as the caller sent it.
    pub body_sha256: String,
    pub request: RunRequest,
    /// Cancelled when the caller is gone: nobody waits for the answer any more, so the run is
    /// stopped (its sandbox killed) and recorded as cancelled.
    pub hung_up: CancellationToken,
}

/// Checks, records and runs one configured command; the logic behind `POST /run` and the tool.
pub async fn execute(state: &AppState, call: RunCall) -> Result<RunOutcome, ApiError> {
    let RunCall {
        route,
        request_id,
        caller,
        scope,
        body_sha256,
        request: req,
        hung_up,
    } = call;
    let Some(runner) = state.commands.clone() else {
        return Err(ApiError::new(
            ErrorCode::CommandsUnavailable,
            "no commands are configured: set WRIT_COMMANDS",
        ));
    };
    let settings = &state.settings.run;
    let timeout = match req.timeout_secs {
        None => settings.default_timeout,
        Some(0) => {
            return Err(
                ApiError::new(ErrorCode::InvalidRequest, "must be at least 1")
                    .with_field("timeout_secs"),
            );
        }
        Some(s) if s > settings.max_timeout.as_secs() => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "at most {} (WRIT_RUN_MAX_TIMEOUT_SECS), got {s}",
                    settings.max_timeout.as_secs()
                ),
            )
            .with_field("timeout_secs"));
        }
        Some(s) => std::time::Duration::from_secs(s),
    };
    let call = CommandCall {
        name: req.command,
        args: req.args,
    };
    runner.check(&call, "").map_err(run_error)?;
    let admission = runner.admit(caller.as_deref()).map_err(run_error)?;

    let started = std::time::Instant::now();
    state
        .store
        .insert_request(
            &NewRequest::opened(request_id, route, caller, scope, state.workspace.name())
                .with_body(body_sha256),
        )
        .await
        .map_err(|e| ApiError::audit_unavailable(&e))?;
    let outcome = {
        let _admission = admission;
        let calls = std::slice::from_ref(&call);
        tokio::select! {
            outcome = runner.run(&[], calls, timeout) => outcome,
            () = hung_up.cancelled() => Err(RunError::Failed(
                "cancelled: the caller hung up before the run finished".into(),
            )),
        }
    };
    record(state, request_id, &call, &outcome, started).await?;
    let mut runs = outcome.map_err(run_error)?;
    runs.pop()
        .ok_or_else(|| ApiError::internal("the command produced no outcome"))
}

/// The run's operation record, then the request's closing.
async fn record(
    state: &AppState,
    request_id: Uuid,
    call: &CommandCall,
    outcome: &Result<Vec<writ_core::execution::RunOutcome>, RunError>,
    started: std::time::Instant,
) -> Result<(), ApiError> {
    let now = Utc::now();
    let duration_ms = started.elapsed().as_millis() as i64;
    let (status, error, detail) = match outcome {
        Ok(runs) => {
            let run = runs.last();
            (
                OperationStatus::Succeeded,
                None,
                run.map(|r| {
                    serde_json::json!({"run": {
                        "command": call.name,
                        "args": call.args,
                        "exit_code": r.exit_code,
                        "timed_out": r.timed_out,
                        "truncated": r.truncated,
                        "duration_ms": r.duration_ms,
                        "stdout_tail": tail(&r.stdout, RECORDED_OUTPUT_BYTES),
                        "stderr_tail": tail(&r.stderr, RECORDED_OUTPUT_BYTES),
                    }})
                }),
            )
        }
        Err(e) => (
            OperationStatus::Failed,
            Some(e.to_string()),
            Some(serde_json::json!({"run": {"command": call.name, "args": call.args}})),
        ),
    };
    let op = Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: now,
        finished_at: Some(now),
        filename: call.name.clone(),
        kind: FileKind::Run,
        operation: if status == OperationStatus::Succeeded {
            OperationKind::Unchanged
        } else {
            OperationKind::Failed
        },
        status,
        chosen_model: None,
        selection: None,
        arbiter_reason: None,
        candidates: Vec::new(),
        previous_sha256: None,
        sha256: None,
        bytes: None,
        error,
        duration_ms: Some(duration_ms),
        detail,
        workspace: state.workspace.name().to_owned(),
    };
    let inserted = state.store.insert_operation(&op, None).await;
    let request_status = if inserted.is_ok() && status == OperationStatus::Succeeded {
        RequestStatus::Success
    } else {
        RequestStatus::Error
    };
    if let Err(e) = state
        .store
        .finish_request(request_id, request_status, duration_ms, None)
        .await
    {
        tracing::warn!(error = %e, "could not close the request record of a run");
    }
    inserted.map_err(|e| ApiError::audit_unavailable(&e))
}

fn run_error(e: RunError) -> ApiError {
    match e {
        RunError::Invalid { field, message } => {
            ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
        }
        RunError::Unavailable(why) => ApiError::new(ErrorCode::CommandsUnavailable, why),
        RunError::Failed(why) => ApiError::internal(why),
        RunError::Limit(why) => ApiError::new(ErrorCode::RepositoryTooLarge, why),
        RunError::Busy {
            message,
            retry_after_secs,
        } => {
            // A full queue is the server's state; a key at its own bound is the caller's.
            let code = if message.contains("WRIT_RUN_MAX_PER_KEY") {
                ErrorCode::TooManyRuns
            } else {
                ErrorCode::RunQueueFull
            };
            let mut e = ApiError::new(code, message);
            e.retry_after_secs = Some(retry_after_secs);
            e
        }
    }
}
