//! The MCP tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) over writ's jobs.
//!
//! A `write_codebase` call from a client that declares the extension answers at once with a task
//! whose id is the batch's job id, instead of holding the request open for minutes; the client
//! polls `tasks/get`, which reads the job from the store — so any replica answers it, whichever
//! one runs the batch, and a batch resumed after its replica died is still the same task.
//! Clients that do not declare the extension get the tool's answer in the call, as before.

use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use serde::Deserialize;
use uuid::Uuid;
use writ_core::jobs::{Job, JobStatus};
use writ_core::synthesis::BatchResponse;

use crate::access::Viewer;
use crate::state::AppState;

/// How often a client should poll `tasks/get`: a batch takes seconds to minutes.
const POLL_INTERVAL_MS: u64 = 1_000;

/// The tool whose calls become tasks: the only one that waits on models.
pub const TASK_TOOL: &str = "write_codebase";

/// What `write_codebase` answers when its batch was taken as a job (`accepted_body`).
#[derive(Deserialize)]
struct Accepted {
    job_id: Uuid,
    /// Required so a full answer (which has no `location`) is never taken for a job.
    #[serde(rename = "location")]
    _location: String,
}

/// The job a call was taken as, when it was (a replayed batch answers in full instead).
pub fn accepted(result: &serde_json::Value) -> Option<Uuid> {
    Accepted::deserialize(result).ok().map(|a| a.job_id)
}

/// The task a `write_codebase` call taken as a job starts as.
pub fn created(job_id: Uuid) -> CreateTaskResult {
    let now = chrono::Utc::now().to_rfc3339();
    CreateTaskResult::new(
        Task::new(job_id.to_string(), TaskStatus::Working, now.clone(), now)
            .with_status_message("queued")
            .with_poll_interval_ms(POLL_INTERVAL_MS),
    )
}

/// `tasks/get`: the job's state; once it ended, the tool's answer as the call would have given
/// it. A job the viewer may not see is reported as unknown, as `GET /jobs/{id}` does.
pub async fn get(
    state: &AppState,
    viewer: &Viewer,
    task_id: &str,
) -> Result<GetTaskResult, ErrorData> {
    let job = find(state, viewer, task_id).await?;
    Ok(GetTaskResult::new(detailed(&job)))
}

/// `tasks/cancel`: refused — an accepted batch is not cancelled (its files may already be
/// written and recorded); the task runs to its end and `tasks/get` reports it.
pub async fn cancel(state: &AppState, viewer: &Viewer, task_id: &str) -> Result<(), ErrorData> {
    find(state, viewer, task_id).await?;
    Err(ErrorData::invalid_request(
        format!(
            "task {task_id} cannot be cancelled: writ does not stop a batch once accepted (files \
             it already wrote are recorded); follow it with tasks/get"
        ),
        None,
    ))
}

async fn find(state: &AppState, viewer: &Viewer, task_id: &str) -> Result<Job, ErrorData> {
    let unknown = || ErrorData::invalid_params(format!("no task {task_id}"), None);
    let id = Uuid::parse_str(task_id).map_err(|_| unknown())?;
    crate::service::jobs::find(state.store.as_ref(), viewer, id)
        .await
        .map_err(|e| ErrorData::internal_error(format!("reading task {task_id}: {e}"), None))?
        .ok_or_else(unknown)
}

fn detailed(job: &Job) -> DetailedTask {
    let updated = job.finished_at.unwrap_or(job.heartbeat_at).to_rfc3339();
    let mut task = Task::new(
        job.id.to_string(),
        TaskStatus::Working,
        job.created_at.to_rfc3339(),
        updated,
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    let payload = match job.status {
        JobStatus::Queued | JobStatus::Running => {
            task = task.with_status_message(running_message(job));
            TaskPayload::Working
        }
        JobStatus::Done => {
            let answer = job
                .response
                .clone()
                .and_then(|r| serde_json::from_value::<BatchResponse>(r).ok());
            match answer {
                Some(answer) => {
                    task = task.with_status_message(format!("done: {}", answer.status));
                    let out = super::batch::batch_output(&answer);
                    let mut result = CallToolResult::success(vec![ContentBlock::text(out.content)]);
                    result.structured_content = Some(out.result);
                    TaskPayload::Completed {
                        result: as_object(&result),
                    }
                }
                None => failed(
                    &mut task,
                    "the batch ended but its answer could not be read",
                ),
            }
        }
        JobStatus::Failed => failed(
            &mut task,
            job.error.as_deref().unwrap_or("the batch was interrupted"),
        ),
    };
    DetailedTask::new(task, payload)
}

fn running_message(job: &Job) -> String {
    let status = job.status.as_str();
    if job.attempts > 0 {
        // Resumed by another replica after the one running it died or stopped.
        format!("{status} (resumed {} time(s))", job.attempts)
    } else {
        status.to_string()
    }
}

/// A batch that did not end: a tool result with `isError`, as every refusal of a tool is, so
/// the model reads why.
fn failed(task: &mut Task, why: &str) -> TaskPayload {
    task.status_message = Some(format!("failed: {why}"));
    let result = CallToolResult::error(vec![ContentBlock::text(format!(
        "the batch did not finish: {why}"
    ))]);
    TaskPayload::Completed {
        result: as_object(&result),
    }
}

fn as_object(result: &CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}
