//! The change-set tools — `list_changes`, `show_change`, `apply_change`, `reject_change` — over
//! the same service as `/changes`: an agent that proposed files for review (or reviews
//! another's) reads and decides them as a person does in the dashboard.

use writ_core::changes::{ChangeView, HunkState};

use super::{CallContext, ToolOutput};
use crate::access::Viewer;
use crate::error::ApiError;
use crate::service::changes::{
    self, ApplyChangeArgs, ListChanges, RejectChangeArgs, ShowChangeArgs, reviewer,
};
use crate::state::AppState;

/// A change set as a model reads it: each file's state and its hunks, diff and all.
pub fn describe(change: &ChangeView) -> String {
    let mut text = format!(
        "change set {} ({}, expires {}){}\n",
        change.change_id,
        change.state,
        change.expires_at.to_rfc3339(),
        change
            .summary
            .as_deref()
            .map(|s| format!(": {s}"))
            .unwrap_or_default()
    );
    for f in &change.files {
        text.push_str(&format!(
            "- {} ({}; +{} -{} lines; chosen from {} by {})\n",
            f.path,
            f.state,
            f.lines_added,
            f.lines_removed,
            f.chosen_model.as_deref().unwrap_or("the caller"),
            f.selection.map_or("the caller", |s| s.as_str()),
        ));
        for h in &f.hunks {
            let state = match h.state {
                HunkState::Open => "open",
                HunkState::Applied => "applied",
                HunkState::Rejected => "rejected",
            };
            text.push_str(&format!("  hunk {} ({state}):\n{}", h.id, h.diff));
        }
    }
    text
}

/// `list_changes`: the open change sets of the workspace (or all of them).
pub async fn list_changes(
    state: &AppState,
    viewer: &Viewer,
    ctx: &CallContext,
    args: ListChanges,
) -> Result<ToolOutput, ApiError> {
    let who = reviewer(
        ctx.request_id,
        ctx.caller.clone(),
        ctx.scope,
        "tool list_changes",
        viewer,
    );
    let listed = changes::list(state, &who, args).await?;
    let content = if listed.changes.is_empty() {
        "No change set is awaiting review.".to_string()
    } else {
        listed
            .changes
            .iter()
            .map(|c| {
                format!(
                    "{} ({}): {} file(s), {} open hunk(s){}",
                    c.change_id,
                    c.state,
                    c.files.len(),
                    c.files
                        .iter()
                        .flat_map(|f| &f.hunks)
                        .filter(|h| h.state == HunkState::Open)
                        .count(),
                    c.summary
                        .as_deref()
                        .map(|s| format!(" — {s}"))
                        .unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(&listed).map_err(ApiError::internal)?,
    })
}

/// `show_change`: one change set with its hunks.
pub async fn show_change(
    state: &AppState,
    viewer: &Viewer,
    ctx: &CallContext,
    args: ShowChangeArgs,
) -> Result<ToolOutput, ApiError> {
    let who = reviewer(
        ctx.request_id,
        ctx.caller.clone(),
        ctx.scope,
        "tool show_change",
        viewer,
    );
    let change = changes::show(state, &who, &args.change_id)
        .await
        .map_err(|e| e.with_field("change_id"))?;
    Ok(ToolOutput {
        content: describe(&change),
        result: serde_json::to_value(&change).map_err(ApiError::internal)?,
    })
}

/// `apply_change`: the same apply as `POST /changes/{id}/apply`.
pub async fn apply_change(
    state: &AppState,
    viewer: &Viewer,
    ctx: &CallContext,
    args: ApplyChangeArgs,
) -> Result<ToolOutput, ApiError> {
    let who = reviewer(
        ctx.request_id,
        ctx.caller.clone(),
        ctx.scope,
        "tool apply_change",
        viewer,
    );
    let (id, apply) = args.into_parts();
    let answer = changes::apply(state, &who, &id, apply).await?;
    if let Some(jobs) = &state.jobs {
        jobs.hub().notify(answer.change_id);
    }
    let mut content = format!(
        "applied to change set {} ({}; {} hunk(s) still open; undo request {} to take it back):",
        answer.change_id, answer.state, answer.open_hunks, answer.request_id
    );
    for f in &answer.files {
        content.push_str(&format!(
            "\n- {} {} ({} hunk(s){}; {} bytes, sha256 {})",
            f.path,
            f.operation,
            f.hunks.len(),
            if f.rebased { ", rebased" } else { "" },
            f.bytes,
            f.sha256
        ));
    }
    for line in super::batch::overlap_lines(&answer.overlaps) {
        content.push('\n');
        content.push_str(&line);
    }
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(&answer).map_err(ApiError::internal)?,
    })
}

/// `reject_change`: the same rejection as `POST /changes/{id}/reject`.
pub async fn reject_change(
    state: &AppState,
    viewer: &Viewer,
    ctx: &CallContext,
    args: RejectChangeArgs,
) -> Result<ToolOutput, ApiError> {
    let who = reviewer(
        ctx.request_id,
        ctx.caller.clone(),
        ctx.scope,
        "tool reject_change",
        viewer,
    );
    let (id, reject) = args.into_parts();
    let answer = changes::reject(state, &who, &id, reject).await?;
    if let Some(jobs) = &state.jobs {
        jobs.hub().notify(answer.change_id);
    }
    let content = format!(
        "rejected in change set {} ({}; {} hunk(s) still open): {}",
        answer.change_id,
        answer.state,
        answer.open_hunks,
        answer
            .files
            .iter()
            .map(|f| format!("{} ({} hunk(s))", f.path, f.hunks.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ToolOutput {
        content,
        result: serde_json::to_value(&answer).map_err(ApiError::internal)?,
    })
}
