//! Edits, as `POST /edits` and the `edit_files` tool ask for them: `str_replace` edits or an
//! `apply_patch` patch over up to five files, applied all-or-nothing by [`writ_core::edits`].

use serde_json::json;
use uuid::Uuid;
use writ_core::commits::RequestCommit;
use writ_core::edits::{self, Editor, EditsError, EditsRequest, EditsResponse};
use writ_core::execution::CommandRunner;

use crate::error::{ApiError, ErrorCode, workspace_error, write_error};
use crate::state::AppState;

/// Parses and applies one edit request; the logic behind `POST /edits` and `edit_files`.
pub async fn apply(
    state: &AppState,
    editor: Editor,
    body_sha256: String,
    req: EditsRequest,
) -> Result<EditsResponse, ApiError> {
    let runner = state.commands.clone();
    let asked = req.commit;
    let edits = req
        .parse(
            body_sha256,
            runner.as_deref().map(|r| r as &dyn CommandRunner),
        )
        .map_err(edits_error)?
        .reviewed(&state.settings.review)
        .map_err(edits_error)?;
    if state.settings.respect_claims {
        crate::service::workspaces::refuse_claimed(
            &state.workspaces,
            state.workspace.name(),
            &edits.changed_paths(),
            editor.caller.as_deref(),
        )
        .await?;
    }
    let caller = editor.caller.clone();
    let caller_key = caller.clone();
    let mut answer = edits::apply(
        state.store.as_ref(),
        state.workspace.as_ref(),
        runner.as_deref().map(|r| r as &dyn CommandRunner),
        editor,
        edits,
    )
    .await
    .map_err(edits_error)?;
    if !answer.dry_run && answer.change_id.is_none() {
        let mut files = Vec::new();
        for f in &answer.files {
            // A file the edits removed (deleted, or moved away) leaves the commit's tree.
            let gone = f.operation == writ_core::audit::OperationKind::Deleted;
            files.extend(super::git::file(
                &f.path,
                if gone { None } else { f.sha256.clone() },
                "direct",
            ));
            if let Some(from) = &f.moved_from {
                files.extend(super::git::file(from, None, "direct"));
            }
        }
        let paths: Vec<&str> = answer.files.iter().map(|f| f.path.as_str()).collect();
        super::git::commit_request(
            state,
            asked,
            RequestCommit {
                request_id: answer.request_id,
                caller,
                subject: format!("Edit {}", paths.join(", ")),
                body: String::new(),
                trailers: Vec::new(),
                files,
            },
        )
        .await;
        let written: Vec<String> = answer
            .files
            .iter()
            .filter(|f| f.operation != writ_core::audit::OperationKind::Unchanged)
            .map(|f| f.path.clone())
            .collect();
        answer.overlaps =
            crate::service::workspaces::overlaps_written(state, &written, caller_key.as_deref())
                .await;
    }
    Ok(answer)
}

/// A request id for the tool surfaces, which have no request-id layer of their own.
pub fn tool_editor(
    request_id: Uuid,
    caller: Option<String>,
    scope: Option<writ_core::keys::Scope>,
    route: &str,
) -> Editor {
    Editor {
        request_id,
        caller,
        scope,
        route: route.to_string(),
    }
}

fn edits_error(err: EditsError) -> ApiError {
    let message = err.to_string();
    match err {
        EditsError::Invalid { field, message } => {
            ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
        }
        EditsError::EditFailed { path, edit, .. } => ApiError::new(ErrorCode::EditFailed, message)
            .with_field("path")
            .with_details(json!({ "path": path, "edit": edit })),
        EditsError::Precondition(e) => {
            write_error(e, "expected_sha256").with_field("expected_sha256")
        }
        EditsError::ValidationFailed {
            command,
            exit_code,
            timed_out,
            output_tail,
        } => ApiError::new(ErrorCode::ValidationFailed, message)
            .with_field("validation")
            .with_details(json!({
                "command": command,
                "exit_code": exit_code,
                "timed_out": timed_out,
                "output_tail": output_tail,
            })),
        EditsError::Unavailable(_) => ApiError::new(ErrorCode::CommandsUnavailable, message),
        EditsError::Target { field, source } => workspace_error(source, &field),
        EditsError::Write(e) => write_error(e, "path"),
    }
}
