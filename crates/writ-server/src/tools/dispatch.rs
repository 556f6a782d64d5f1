//! The adapter between the tools and [`crate::service`]: each function takes a tool's parsed
//! arguments, runs the same service function as the HTTP route, and renders the typed answer as
//! text for the model plus the HTTP API's JSON. The `write_codebase` tool is in `batch`.

use serde::Serialize;
use serde_json::{Value, json};
use writ_core::edits::Fallback;
use writ_core::sessions::{BeginSession, SessionCaller, SessionView};

use super::{AppendArgs, CallContext, ReadFileArgs, SessionArgs, ToolOutput, WriteFileArgs};
use crate::error::ApiError;
use crate::service::{edits, files, operations, run, search, write_sessions};
use crate::state::AppState;

/// An enum's name in the API (its serde name), for the text a model reads.
fn wire_name(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => String::new(),
    }
}

/// `search_files`: the matches as `path:line: text` lines, context lines marked with `-`, as
/// grep prints them.
pub async fn search_files(
    state: &AppState,
    params: search::SearchParams,
) -> Result<ToolOutput, ApiError> {
    let found = search::search(state.workspace.as_ref(), params).await?;
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
                wire_name(stop)
            ),
            None => String::new(),
        }
    )];
    if found.files.len() > 1 {
        let ranked: Vec<String> = found
            .files
            .iter()
            .map(|f| {
                format!(
                    "{} ({}{})",
                    f.path,
                    f.matches,
                    if f.defines { ", defines" } else { "" }
                )
            })
            .collect();
        lines.push(format!(
            "files, those defining it first: {}",
            ranked.join(", ")
        ));
    }
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
    let listing = files::list_dir(state.workspace.as_ref(), params).await?;
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

/// `read_file`'s answer: the file's text (or why it is not shown), its size and hash.
#[derive(Debug, Serialize)]
struct ReadFileResult {
    path: String,
    sha256: Option<String>,
    size_bytes: u64,
    /// Text only: `Some(None)` when only the file's head was read (then there is no count).
    #[serde(skip_serializing_if = "Option::is_none")]
    size_chars: Option<Option<usize>>,
    truncated: bool,
    binary: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
}

pub async fn read_file(state: &AppState, args: ReadFileArgs) -> Result<ToolOutput, ApiError> {
    let read = files::read(
        state.workspace.as_ref(),
        &state.settings,
        &args.path,
        args.max_chars,
    )
    .await?;
    let mut result = ReadFileResult {
        path: read.path,
        sha256: read.sha256,
        size_bytes: read.size_bytes,
        size_chars: None,
        truncated: false,
        binary: false,
        content: None,
    };
    let content = match read.content {
        files::FileContent::Text {
            shown,
            total_chars,
            truncated,
        } => {
            result.size_chars = Some(total_chars);
            result.truncated = truncated;
            result.content = Some(shown.clone());
            shown
        }
        files::FileContent::Binary(_) => {
            result.binary = true;
            format!(
                "'{}' is not UTF-8 text ({} bytes{}); read_file shows text only",
                result.path,
                result.size_bytes,
                result
                    .sha256
                    .as_deref()
                    .map(|h| format!(", sha256 {h}"))
                    .unwrap_or_default()
            )
        }
    };
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(&result).map_err(ApiError::internal)?,
    })
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
        state,
        files::FileWrite {
            route: "tool write_file",
            request_id: ctx.request_id,
            caller: ctx.caller,
            scope: ctx.scope,
            path: args.path,
            params: files::WriteParams {
                mode: args.mode,
                on_invalid_utf8: files::InvalidUtf8Policy::Reject,
                create_dirs: args.create_dirs,
                commit: args.commit,
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
    for line in super::batch::overlap_lines(&a.overlaps) {
        content.push('\n');
        content.push_str(&line);
    }
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
    viewer: &crate::access::Viewer,
    params: operations::ListParams,
) -> Result<ToolOutput, ApiError> {
    let page = operations::list(state.store.as_ref(), viewer, params).await?;
    let mut lines = vec![format!(
        "{} operations, newest first:",
        page.operations.len()
    )];
    for op in &page.operations {
        lines.push(format!(
            "- {} {} {} {} ({} bytes) by {}; id {}",
            timestamp(&op.created_at),
            op.operation.as_str(),
            op.filename,
            op.status.as_str(),
            shown_or_null(op.bytes),
            op.chosen_model.as_deref().unwrap_or("direct write"),
            op.id,
        ));
    }
    if let Some(cursor) = &page.next_cursor {
        lines.push(format!("more: call again with cursor \"{cursor}\""));
    }
    Ok(ToolOutput {
        content: lines.join("\n"),
        result: serde_json::to_value(&page).map_err(ApiError::internal)?,
    })
}

pub async fn get_operation(
    state: &AppState,
    viewer: &crate::access::Viewer,
    id: operations::OperationId,
) -> Result<ToolOutput, ApiError> {
    let recorded = operations::get(state.store.as_ref(), viewer, id).await?;
    let op = &recorded.operation;
    let mut content = format!(
        "{} {} {} at {} ({} bytes, sha256 {})",
        op.operation.as_str(),
        op.filename,
        op.status.as_str(),
        timestamp(&op.created_at),
        shown_or_null(op.bytes),
        op.sha256.as_deref().unwrap_or_default(),
    );
    match (&recorded.content, &recorded.content_base64) {
        (Some(text), _) => {
            content.push_str("\nContent written:\n");
            content.push_str(text);
        }
        (None, Some(_)) => content.push_str("\nThe content is binary (in result.content_base64)."),
        (None, None) => content.push_str("\nNo content was recorded."),
    }
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(&recorded).map_err(ApiError::internal)?,
    })
}

/// A time as the API writes it (RFC 3339, UTC).
fn timestamp(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A number the record may lack, as the API's JSON shows it.
fn shown_or_null(n: Option<i64>) -> String {
    n.map_or_else(|| "null".to_string(), |n| n.to_string())
}

/// A session as the model reads it: where it stands and what to do next.
fn session_output(view: &SessionView) -> Result<ToolOutput, ApiError> {
    let mut content = format!(
        "write session {} for '{}' ({}): {}; {} bytes in {} chunks received",
        view.id,
        view.target_file,
        wire_name(view.operation),
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
    for line in super::batch::overlap_lines(&view.overlaps) {
        content.push('\n');
        content.push_str(&line);
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
    let answer = edits::apply(state, editor, body_sha256, request).await?;
    let mut content = String::new();
    for f in &answer.files {
        let moved = match (&f.moved_from, &f.moved_to) {
            (Some(from), _) => format!(" (moved from '{from}')"),
            (_, Some(to)) => format!(" (moved to '{to}')"),
            _ => String::new(),
        };
        let fallback = match f.edit_fallback {
            Some(Fallback::Whitespace) => " (matched ignoring whitespace)",
            Some(Fallback::Punctuation) => {
                " (matched ignoring whitespace and typographic punctuation)"
            }
            None => "",
        };
        match &f.sha256 {
            Some(sha256) => content.push_str(&format!(
                "{} '{}'{moved}: +{} -{} lines, {} bytes, sha256 {sha256}{fallback}\n",
                f.operation, f.path, f.change.lines_added, f.change.lines_removed, f.bytes,
            )),
            None => content.push_str(&format!("{} '{}'{moved}\n", f.operation, f.path)),
        }
    }
    if answer.dry_run {
        content.push_str("dry run: nothing was written\n");
    }
    for line in super::batch::overlap_lines(&answer.overlaps) {
        content.push_str(&line);
        content.push('\n');
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
        state,
        run::RunCall {
            route: "tool run",
            request_id: ctx.request_id,
            caller: ctx.caller,
            scope: ctx.scope,
            body_sha256,
            request: args,
            hung_up: ctx.hung_up,
        },
    )
    .await?;
    let mut content = format!(
        "exit code {}{}{} in {} ms",
        outcome
            .exit_code
            .map_or_else(|| "null".to_string(), |c| c.to_string()),
        if outcome.timed_out { ", timed out" } else { "" },
        if outcome.truncated {
            ", output truncated"
        } else {
            ""
        },
        outcome.duration_ms,
    );
    for (stream, text) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
        if !text.is_empty() {
            content.push_str(&format!("\n{stream}:\n{text}"));
        }
    }
    let result = serde_json::to_value(&outcome).map_err(ApiError::internal)?;
    Ok(ToolOutput { content, result })
}

/// `undo`: the same undo as `POST /requests/{id}/undo`.
pub async fn undo(
    state: &AppState,
    viewer: &crate::access::Viewer,
    ctx: CallContext,
    args: crate::service::history::UndoArgs,
) -> Result<ToolOutput, ApiError> {
    use crate::service::history;
    let who = history::history_caller(ctx.request_id, ctx.caller, ctx.scope, "tool undo");
    let options = writ_core::history::UndoOptions {
        force: args.force,
        dry_run: args.dry_run,
        commit: args.commit,
    };
    let answer = history::undo(state, viewer, who, &args.request_id, "request_id", options).await?;
    let verb = if answer.dry_run {
        "would undo"
    } else {
        "undid"
    };
    let mut content = if answer.files.is_empty() {
        format!(
            "Request {} has nothing to undo: it wrote no file, or every file is already as it was before it.",
            answer.undone_request_id
        )
    } else {
        format!(
            "{verb} request {} ({} files; recorded as request {}):",
            answer.undone_request_id,
            answer.files.len(),
            answer.request_id
        )
    };
    for f in &answer.files {
        let action = match f.action {
            writ_core::history::UndoAction::Restore => "restored",
            writ_core::history::UndoAction::Remove => "removed",
            writ_core::history::UndoAction::Recreate => "recreated",
        };
        let replaced = if f.replaced_later_change {
            " (replacing a later change)"
        } else {
            ""
        };
        content.push_str(&format!("\n- {} {action}{replaced}", f.path));
    }
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(&answer).map_err(ApiError::internal)?,
    })
}

/// `restore`: the same restore as `POST /operations/{id}/restore`.
pub async fn restore(
    state: &AppState,
    viewer: &crate::access::Viewer,
    ctx: CallContext,
    args: crate::service::history::RestoreArgs,
) -> Result<ToolOutput, ApiError> {
    use crate::service::history;
    let who = history::history_caller(ctx.request_id, ctx.caller, ctx.scope, "tool restore");
    let answer = history::restore(
        state,
        viewer,
        who,
        &args.operation_id,
        "operation_id",
        writ_core::history::RestoreOptions {
            expected_sha256: args.expected_sha256,
            commit: args.commit,
        },
    )
    .await?;
    Ok(ToolOutput {
        content: format!(
            "{} {} from operation {} ({} bytes, sha256 {}; recorded as request {}).",
            answer.path,
            answer.operation.as_str(),
            answer.restored_operation_id,
            answer.bytes,
            answer.sha256,
            answer.request_id
        ),
        result: serde_json::to_value(&answer).map_err(ApiError::internal)?,
    })
}
