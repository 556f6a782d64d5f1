//! The `write_codebase` tool: a batch started as for `POST /write_codebase`, its progress events
//! forwarded as they are stored, its answer summarised per file.

use futures::StreamExt;
use serde_json::Value;
use writ_core::synthesis::jobs::Jobs;
use writ_core::synthesis::{BatchResponse, Begun, Event};

use super::{CallContext, ToolOutput};
use crate::error::{ApiError, ErrorCode};
use crate::service::{jobs, synthesis};
use crate::state::AppState;

/// `write_codebase`: the batch runs in its own task as for `POST /write_codebase`; its progress
/// events are forwarded while the caller waits. A caller that cancels stops waiting; the batch
/// completes and is recorded all the same.
pub async fn write_codebase(
    state: &AppState,
    ctx: CallContext,
    args: Value,
) -> Result<ToolOutput, ApiError> {
    let body = serde_json::to_vec(&args).map_err(ApiError::internal)?;
    let begun = synthesis::begin(
        state,
        synthesis::BatchCall {
            request_id: ctx.request_id,
            caller: ctx.caller.clone(),
            scopes: ctx.scopes,
            scope: ctx.scope,
            idempotency_key: None,
            prefer_async: ctx.prefer_async,
            body: &body,
        },
    )
    .await?;
    let handle = match begun {
        Begun::Replayed(done) => return Ok(batch_output(&done.response)),
        Begun::Fresh(synthesis::Running {
            handle,
            is_async: true,
        }) => {
            let job_id = handle.job_id();
            let accepted = synthesis::accepted_body(job_id, state.workspace.name());
            return Ok(ToolOutput {
                content: format!(
                    "The batch runs in the background as job {job_id}; its answer will be at {} \
                     and its files in list_operations with request_id {job_id}.",
                    accepted.location
                ),
                result: serde_json::to_value(&accepted).map_err(ApiError::internal)?,
            });
        }
        Begun::Fresh(synthesis::Running { handle, .. }) => handle,
    };
    let job_id = handle.job_id();

    // Progress goes out from a task of its own, in order: the answer never waits on a
    // notification's delivery (a transport slow to take them, or stuck, cannot hold it).
    let (lines, mut queued) = tokio::sync::mpsc::unbounded_channel::<(f64, String)>();
    let reporter = ctx.progress.clone().map(|progress| {
        tokio::spawn(async move {
            while let Some((seq, line)) = queued.recv().await {
                progress.report(seq, None, line).await;
            }
        })
    });
    // Fused: the stream ends at `done`, and an ended `follow` must not be polled again (it
    // panics, which took the tool call's answer with it) — both loops below may ask once more.
    let hub = state.jobs.as_deref().map(Jobs::hub);
    let mut events = std::pin::pin!(jobs::follow(state.store.clone(), hub, job_id, 0).fuse());
    let mut answer = std::pin::pin!(handle.answer());
    let mut reported = 0_i64;
    let done = loop {
        tokio::select! {
            // Events first: every event stored before the answer is reported before it.
            biased;
            Some(event) = events.next(), if reporter.is_some() => {
                reported = event.seq;
                let _ = lines.send((event.seq as f64, progress_line(&event.name, &event.data)));
            }
            done = &mut answer => break done,
            _ = ctx.cancelled.cancelled() => {
                return Err(ApiError::new(
                    ErrorCode::Cancelled,
                    format!("the caller cancelled; the batch runs on as job {job_id} (see /jobs/{job_id})"),
                ));
            }
        }
    };
    let done = done.map_err(synthesis::submit_error)?;
    // Events are stored in the background and may trail the answer by a commit: report the
    // ones not seen yet, up to `done`, and let them go out before the answer (bounded, so a
    // store that lost them or a transport that does not take them cannot hold the answer).
    if let Some(reporter) = reporter {
        let rest = async {
            while let Some(event) = events.next().await {
                if event.seq <= reported {
                    continue;
                }
                let _ = lines.send((event.seq as f64, progress_line(&event.name, &event.data)));
                if event.name == "done" {
                    break;
                }
            }
            drop(lines);
            let _ = reporter.await;
        };
        let _ = tokio::time::timeout(TRAILING_EVENTS, rest).await;
    }
    Ok(batch_output(&done.response))
}

/// How long a tool call's answer waits for the batch's last progress events to be stored.
const TRAILING_EVENTS: std::time::Duration = std::time::Duration::from_secs(2);

/// One line per progress event, for a person watching (and a model reading the log).
fn progress_line(name: &str, data: &Value) -> String {
    let Ok(event) = serde_json::from_value::<Event>(data.clone()) else {
        return name.to_string();
    };
    match event {
        Event::Queued { files } => format!("queued: {}", files.join(", ")),
        Event::FileStarted { file } => format!("{file}: started"),
        Event::CandidateStarted { file, model } => format!("{file}: asking {model}"),
        Event::CandidateFinished {
            file,
            model,
            latency_ms,
            ok,
            error_class,
            parsed,
        } => {
            let verdict = match (ok, parsed) {
                (true, Some(false)) => "answered, does not parse".to_string(),
                (true, _) => "answered".to_string(),
                (false, _) => format!("failed ({})", error_class.map_or("unknown", |c| c.as_str())),
            };
            format!("{file}: {model} {verdict} in {latency_ms} ms")
        }
        Event::ArbiterStarted {
            file,
            model,
            candidates,
        } => format!("{file}: {model} judges {candidates} candidates"),
        Event::ArbiterChose {
            file,
            candidate,
            model,
            reason,
        } => format!("{file}: chose candidate {candidate} ({model}): {reason}"),
        Event::FileWritten {
            file,
            operation,
            bytes,
            ..
        } => format!("{file}: {operation} ({bytes} bytes)"),
        Event::FileFailed { file, error } => format!("{file}: failed: {error}"),
        Event::Overlap(o) => format!("{}: {}", o.path, overlap_words(&o)),
        Event::ChangeProposed {
            change_id, files, ..
        } => format!(
            "proposed for review, nothing written: change set {change_id} ({})",
            files
                .iter()
                .map(|f| format!("{}: {} hunk(s)", f.path, f.hunks.len()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::ChangeApplied {
            change_id,
            state,
            files,
            ..
        } => format!(
            "change set {change_id}: applied {} ({state})",
            files
                .iter()
                .map(|f| format!("{} hunk(s) of {}", f.hunks.len(), f.path))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::ChangeRejected {
            change_id,
            state,
            files,
            ..
        } => format!(
            "change set {change_id}: rejected {} ({state})",
            files
                .iter()
                .map(|f| format!("{} hunk(s) of {}", f.hunks.len(), f.path))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::ChecksGenerated {
            file,
            models,
            tests,
            discarded,
        } => format!(
            "{file}: {models} test writer(s) gave {tests} usable tests ({discarded} dropped)"
        ),
        Event::ChecksUnavailable {
            file,
            status,
            reason,
        } => format!(
            "{file}: generated checks could not choose ({}): {reason}; the arbiter chooses",
            status.as_str()
        ),
        Event::AgreementComputed {
            file,
            groups,
            tied,
            clusters,
        } => format!(
            "{file}: candidates in {groups} group(s) by the tests they pass, {tied} tied at the best score{}",
            clusters.map_or(String::new(), |c| format!(", {c} behaviour cluster(s)"))
        ),
        Event::ArbiterAskedInputs { file, inputs } => {
            format!(
                "{file}: the arbiter is shown {inputs} input(s) the tied candidates disagree on"
            )
        }
        Event::StoppedEarly {
            file,
            passed,
            cancelled,
        } => format!(
            "{file}: {passed}'s candidate passed the checks; {cancelled} call(s) still running were stopped"
        ),
        Event::RoundStarted {
            file,
            round,
            models,
        } => format!(
            "{file}: no candidate of the first round passed; round {round} asks {models} more model(s)"
        ),
        Event::ValidationStarted { file, candidates } => {
            format!("{file}: running the checks on {candidates} candidates")
        }
        Event::Formatted {
            file,
            command,
            changed,
            error,
        } => match error {
            Some(why) => format!("{file}: left unformatted: {why}"),
            None if changed => format!("{file}: formatted by {command}"),
            None => format!("{file}: already formatted as {command} would"),
        },
        Event::ValidationFinished {
            file,
            model,
            round,
            passed,
            ..
        } => format!(
            "{file}: {model}{} {} the checks",
            if round > 0 {
                format!(" (repair {round})")
            } else {
                String::new()
            },
            if passed { "passed" } else { "failed" }
        ),
        Event::RepairStarted {
            file,
            round,
            models,
        } => {
            format!("{file}: repair round {round}: {models} models get their failure back")
        }
        Event::Done { status } => format!("done: {status}"),
    }
}

/// A batch's answer: a summary per file for the model, the full answer as `result`.
pub(crate) fn batch_output(answer: &BatchResponse) -> ToolOutput {
    let mut lines = vec![format!(
        "status: {} ({} of {} files succeeded); request_id {}",
        answer.status, answer.succeeded, answer.total_files, answer.request_id,
    )];
    for r in &answer.results {
        let file = &r.filename;
        if r.success {
            let checks = match &r.validation {
                Some(v) if v.passed => {
                    format!(", passed the checks after {} repair round(s)", v.rounds)
                }
                Some(_) => ", did NOT pass the checks".to_string(),
                None => String::new(),
            };
            lines.push(format!(
                "- {file}: {} ({} bytes, sha256 {}), chosen from {} by {}{checks}; operation_id {}",
                r.operation.map_or("written", |o| o.as_str()),
                r.bytes.unwrap_or(0),
                r.sha256.as_deref().unwrap_or_default(),
                r.chosen_model.as_deref().unwrap_or("?"),
                r.selection.map_or("?", |s| s.as_str()),
                r.operation_id
                    .map(|id| id.to_string())
                    .unwrap_or_else(|| "-".into()),
            ));
        } else {
            lines.push(format!(
                "- {file}: failed: {}",
                r.error.as_deref().unwrap_or("unknown error")
            ));
        }
    }
    lines.extend(overlap_lines(&answer.overlaps));
    ToolOutput {
        content: lines.join("\n"),
        result: serde_json::to_value(answer).unwrap_or(Value::Null),
    }
}

/// A line per overlap of a write's answer: a parallel agent must hear of another's change to
/// its files while it can still act.
pub(super) fn overlap_lines(overlaps: &[writ_core::overlaps::Overlap]) -> Vec<String> {
    overlaps
        .iter()
        .map(|o| {
            format!(
                "! overlap: {} {}; see list_overlaps, or rebase_workspace",
                o.path,
                overlap_words(o)
            )
        })
        .collect()
}

/// Who else changed an overlapping path, and how, in words.
pub(super) fn overlap_words(o: &writ_core::overlaps::Overlap) -> String {
    format!(
        "was also changed in {} since you share a base ({})",
        o.workspace
            .as_deref()
            .or(o.branch.as_deref())
            .unwrap_or("another workspace"),
        o.their_commit
            .as_deref()
            .map(|c| format!("commit {c}"))
            .or(o.their_request.map(|r| format!("request {r}")))
            .unwrap_or_else(|| "not committed yet".to_owned())
    )
}
