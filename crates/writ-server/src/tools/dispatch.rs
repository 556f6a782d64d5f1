//! The adapter between the tools and the rest of writ: every call the tools make into the routes'
//! shared logic or the core is in this file, so when that logic moves, only this file follows.
//!
//! Each function takes parsed arguments, runs the same code as the HTTP route, and turns the
//! answer into text for the model plus the HTTP API's JSON.

use futures::StreamExt;
use serde_json::{Value, json};
use writ_core::synthesis::{BatchResponse, Event};

use writ_core::sessions::{BeginSession, SessionCaller, SessionView};

use super::{AppendArgs, CallContext, ReadFileArgs, SessionArgs, ToolOutput, WriteFileArgs};
use crate::error::{ApiError, ErrorCode};
use crate::routes::{edits, files, jobs, operations, run, search, synthesis, write_sessions};
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
    let (job_id, answer) = match begun {
        synthesis::Begun::Replayed(done) => return Ok(batch_output(&done.response)),
        synthesis::Begun::Accepted { job_id } => {
            let body = synthesis::accepted_body(job_id);
            return Ok(ToolOutput {
                content: format!(
                    "The batch runs in the background as job {job_id}; its answer will be at {} \
                     and its files in list_operations with request_id {job_id}.",
                    body["location"].as_str().unwrap_or_default()
                ),
                result: body,
            });
        }
        synthesis::Begun::Running { job_id, answer } => (job_id, answer),
    };

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
    let mut events = std::pin::pin!(jobs::follow(state.clone(), job_id, 0).fuse());
    let mut answer = std::pin::pin!(answer);
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
    let done = done
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?
        .map_err(synthesis::submit_error)?;
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
        Event::ValidationStarted { file, candidates } => {
            format!("{file}: running the checks on {candidates} candidates")
        }
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
    ToolOutput {
        content: lines.join("\n"),
        result: serde_json::to_value(answer).unwrap_or(Value::Null),
    }
}

/// `search_files`: the matches as `path:line: text` lines, context lines marked with `-`, as
/// grep prints them.
pub async fn search_files(
    state: &AppState,
    params: search::SearchParams,
) -> Result<ToolOutput, ApiError> {
    let found = search::search(state, params).await?;
    let mut lines = vec![format!(
        "{} matching lines in {} files ({} files searched{}){}",
        found.matches.len(),
        found.files_matched,
        found.files_searched,
        if found.files_skipped > 0 {
            format!(", {} skipped: binary or too large", found.files_skipped)
        } else {
            String::new()
        },
        match found.stopped {
            Some(stop) => format!(
                "; stopped early ({}): narrow the search for the rest",
                serde_json::to_value(stop)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
            None => String::new(),
        }
    )];
    for m in &found.matches {
        let first_before = m.line_number.saturating_sub(m.before.len() as u64);
        for (i, line) in m.before.iter().enumerate() {
            lines.push(format!("{}-{}- {line}", m.path, first_before + i as u64));
        }
        lines.push(format!("{}:{}: {}", m.path, m.line_number, m.line));
        for (i, line) in m.after.iter().enumerate() {
            lines.push(format!(
                "{}-{}- {line}",
                m.path,
                m.line_number + 1 + i as u64
            ));
        }
    }
    Ok(ToolOutput {
        content: lines.join("\n"),
        result: serde_json::to_value(&found).map_err(ApiError::internal)?,
    })
}

pub async fn list_files(
    state: &AppState,
    params: files::ListParams,
) -> Result<ToolOutput, ApiError> {
    let listing = files::list_dir(state, params).await?;
    let mut lines = vec![format!(
        "{} ({} entries):",
        if listing.dir.is_empty() {
            "/"
        } else {
            &listing.dir
        },
        listing.entries.len()
    )];
    for e in &listing.entries {
        lines.push(if e.is_dir {
            format!("{}/", e.name)
        } else {
            format!("{} ({} bytes)", e.name, e.size)
        });
    }
    Ok(ToolOutput {
        content: lines.join("\n"),
        result: serde_json::to_value(&listing).map_err(ApiError::internal)?,
    })
}

pub async fn read_file(state: &AppState, args: ReadFileArgs) -> Result<ToolOutput, ApiError> {
    let read = files::read(state, &args.path, args.max_chars).await?;
    let (content, extra) = match read.content {
        files::FileContent::Text {
            shown,
            total_chars,
            truncated,
        } => (
            shown,
            json!({"size_chars": total_chars, "truncated": truncated, "binary": false}),
        ),
        files::FileContent::Binary(_) => (
            format!(
                "'{}' is not UTF-8 text ({} bytes{}); read_file shows text only",
                read.path,
                read.size_bytes,
                read.sha256
                    .as_deref()
                    .map(|h| format!(", sha256 {h}"))
                    .unwrap_or_default()
            ),
            json!({"truncated": false, "binary": true}),
        ),
    };
    let mut result = json!({
        "path": read.path,
        "sha256": read.sha256,
        "size_bytes": read.size_bytes,
    });
    if let (Some(r), Some(e)) = (result.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    if result["binary"] == false {
        result["content"] = json!(content);
    }
    Ok(ToolOutput { content, result })
}

pub async fn write_file(
    state: &AppState,
    ctx: CallContext,
    args: WriteFileArgs,
) -> Result<ToolOutput, ApiError> {
    let expected_sha256 = args
        .expected_sha256
        .as_deref()
        .map(files::parse_expected_sha256)
        .transpose()
        .map_err(as_tool_fields)?;
    let written = files::write(
        state.clone(),
        files::DirectWrite {
            route: "tool write_file",
            request_id: ctx.request_id,
            caller: ctx.caller,
            scope: ctx.scope,
            path: args.path,
            params: files::WriteParams {
                mode: args.mode,
                on_invalid_utf8: files::InvalidUtf8Policy::Reject,
                create_dirs: args.create_dirs,
            },
            expected_sha256,
            body: args.content.into_bytes(),
        },
    )
    .await
    .map_err(as_tool_fields)?;
    let a = &written.answer;
    let mut content = format!(
        "{} '{}': {} bytes, {} characters, sha256 {}; operation_id {}",
        a.operation, a.path, a.bytes, a.characters, a.sha256, a.operation_id
    );
    if let Some(preview) = &a.preview {
        content.push_str("\nStart of the file now:\n");
        content.push_str(preview);
    }
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(a).map_err(ApiError::internal)?,
    })
}

/// The HTTP API names its header and body; the tool's arguments have other names.
fn as_tool_fields(mut e: ApiError) -> ApiError {
    e.field = e.field.map(|f| match f.as_str() {
        "If-Match" => "expected_sha256".to_string(),
        "body" => "content".to_string(),
        _ => f,
    });
    e
}

pub async fn list_operations(
    state: &AppState,
    viewer: &crate::auth::Viewer,
    params: operations::ListParams,
) -> Result<ToolOutput, ApiError> {
    let page = operations::list(state, viewer, params).await?;
    let ops = page["operations"].as_array().cloned().unwrap_or_default();
    let mut lines = vec![format!("{} operations, newest first:", ops.len())];
    for op in &ops {
        lines.push(format!(
            "- {} {} {} {} ({} bytes) by {}; id {}",
            op["created_at"].as_str().unwrap_or_default(),
            op["operation"].as_str().unwrap_or_default(),
            op["filename"].as_str().unwrap_or_default(),
            op["status"].as_str().unwrap_or_default(),
            op["bytes"],
            op["chosen_model"].as_str().unwrap_or("direct write"),
            op["id"].as_str().unwrap_or_default(),
        ));
    }
    if let Some(cursor) = page["next_cursor"].as_str() {
        lines.push(format!("more: call again with cursor \"{cursor}\""));
    }
    Ok(ToolOutput {
        content: lines.join("\n"),
        result: page,
    })
}

pub async fn get_operation(
    state: &AppState,
    viewer: &crate::auth::Viewer,
    id: operations::OperationId,
) -> Result<ToolOutput, ApiError> {
    let op = operations::get(state, viewer, id).await?;
    let mut content = format!(
        "{} {} {} at {} ({} bytes, sha256 {})",
        op["operation"].as_str().unwrap_or_default(),
        op["filename"].as_str().unwrap_or_default(),
        op["status"].as_str().unwrap_or_default(),
        op["created_at"].as_str().unwrap_or_default(),
        op["bytes"],
        op["sha256"].as_str().unwrap_or_default(),
    );
    match op["content"].as_str() {
        Some(text) => {
            content.push_str("\nContent written:\n");
            content.push_str(text);
        }
        None if op.get("content_base64").is_some() => {
            content.push_str("\nThe content is binary (in result.content_base64).")
        }
        None => content.push_str("\nNo content was recorded."),
    }
    Ok(ToolOutput {
        content,
        result: op,
    })
}

/// A session as the model reads it: where it stands and what to do next.
fn session_output(view: &SessionView) -> Result<ToolOutput, ApiError> {
    let mut content = format!(
        "write session {} for '{}' ({}): {}; {} bytes in {} chunks received",
        view.id,
        view.target_file,
        serde_json::to_value(view.operation)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        view.state.as_str(),
        view.bytes_received,
        view.chunks,
    );
    if let Some(receipt) = &view.receipt {
        content.push_str(&format!(
            "\nwritten: {} '{}', {} bytes, sha256 {}; operation_id {}",
            receipt.operation.as_str(),
            receipt.path,
            receipt.bytes,
            receipt.sha256,
            receipt.operation_id
        ));
    } else if view.state.is_open() && view.message.is_none() {
        content.push_str(
            "\nSend the next piece with append_to_write_session; end the last piece with a line that is exactly DONE.",
        );
    }
    if let Some(message) = &view.message {
        content.push('\n');
        content.push_str(message);
    }
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(view).map_err(ApiError::internal)?,
    })
}

fn session_caller(ctx: &CallContext) -> SessionCaller {
    SessionCaller {
        request_id: ctx.request_id,
        caller: ctx.caller.clone(),
        scope: ctx.scope,
    }
}

pub async fn begin_write_session(
    state: &AppState,
    ctx: CallContext,
    args: BeginSession,
) -> Result<ToolOutput, ApiError> {
    let view = write_sessions::run(
        state,
        session_caller(&ctx),
        None,
        write_sessions::SessionCall::Begin(args),
    )
    .await?;
    session_output(&view)
}

pub async fn append_to_write_session(
    state: &AppState,
    ctx: CallContext,
    args: AppendArgs,
) -> Result<ToolOutput, ApiError> {
    let view = write_sessions::run(
        state,
        session_caller(&ctx),
        Some(args.session_id),
        write_sessions::SessionCall::Append(args.chunk.into_bytes()),
    )
    .await
    .map_err(|mut e| {
        e.field = e.field.map(|f| match f.as_str() {
            "body" => "chunk".to_string(),
            "id" => "session_id".to_string(),
            _ => f,
        });
        e
    })?;
    session_output(&view)
}

pub async fn finish_write_session(
    state: &AppState,
    ctx: CallContext,
    args: SessionArgs,
) -> Result<ToolOutput, ApiError> {
    let view = write_sessions::run(
        state,
        session_caller(&ctx),
        Some(args.session_id),
        write_sessions::SessionCall::Finish,
    )
    .await
    .map_err(|mut e| {
        if e.field.as_deref() == Some("id") {
            e.field = Some("session_id".to_string());
        }
        e
    })?;
    session_output(&view)
}

/// `edit_files`: the same all-or-nothing edits as `POST /edits`.
pub async fn edit_files(
    state: &AppState,
    ctx: CallContext,
    args: Value,
) -> Result<ToolOutput, ApiError> {
    let body_sha256 = writ_core::content::sha256_hex(args.to_string().as_bytes());
    let request = super::parse(args)?;
    let editor = edits::tool_editor(ctx.request_id, ctx.caller, ctx.scope, "tool edit_files");
    let answer = edits::apply(state.clone(), editor, body_sha256, request).await?;
    let mut content = String::new();
    for f in &answer.files {
        content.push_str(&format!(
            "{} '{}': +{} -{} lines, {} bytes, sha256 {}{}\n",
            f.operation,
            f.path,
            f.change.lines_added,
            f.change.lines_removed,
            f.bytes,
            f.sha256,
            if f.edit_fallback.is_some() {
                " (matched ignoring whitespace)"
            } else {
                ""
            }
        ));
    }
    if answer.dry_run {
        content.push_str("dry run: nothing was written\n");
    }
    for f in &answer.files {
        content.push_str(&f.change.diff);
    }
    let result = serde_json::to_value(&answer).map_err(ApiError::internal)?;
    Ok(ToolOutput { content, result })
}

/// `run`: the same checks, record and sandbox as `POST /run`.
pub async fn run(
    state: &AppState,
    ctx: CallContext,
    args: run::RunRequest,
) -> Result<ToolOutput, ApiError> {
    let body_sha256 = writ_core::content::sha256_hex(
        json!({"command": args.command, "args": args.args, "timeout_secs": args.timeout_secs})
            .to_string()
            .as_bytes(),
    );
    let outcome = run::execute(
        state.clone(),
        run::RunCall {
            route: "tool run",
            request_id: ctx.request_id,
            caller: ctx.caller,
            scope: ctx.scope,
            body_sha256,
            request: args,
        },
    )
    .await?;
    let result = serde_json::to_value(&outcome).map_err(ApiError::internal)?;
    let mut content = format!(
        "exit code {}{}{} in {} ms",
        result["exit_code"],
        if result["timed_out"] == true {
            ", timed out"
        } else {
            ""
        },
        if result["truncated"] == true {
            ", output truncated"
        } else {
            ""
        },
        result["duration_ms"],
    );
    for stream in ["stdout", "stderr"] {
        if let Some(text) = result[stream].as_str()
            && !text.is_empty()
        {
            content.push_str(&format!("\n{stream}:\n{text}"));
        }
    }
    Ok(ToolOutput { content, result })
}
