//! Undo and restore, as `POST /requests/{id}/undo`, `POST /operations/{id}/restore` and the
//! `undo` and `restore` tools ask for them, over [`writ_core::history`]. A caller may take back
//! only what it may see: its own requests (an admin key, or no keys, sees all).

use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;
use writ_core::commits::RequestCommit;
use writ_core::history::{
    self, HistoryCaller, HistoryError, RestoreOptions, RestoreResponse, UndoOptions, UndoResponse,
};

use super::operations::parse_uuid;
use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error, write_error};
use crate::state::AppState;

/// The input of the `undo` tool: the request to undo and the route's body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoArgs {
    /// The request to undo (its `request_id`, as a write's answer or `list_operations` gives it).
    pub request_id: String,
    /// Undo even files changed since the request; the answer lists the later changes replaced.
    #[serde(default)]
    pub force: bool,
    /// Answer what the undo would change; write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Commit what the undo wrote (a revert commit), where the workspace is a git repository;
    /// absent: as the workspace is set.
    #[serde(default)]
    pub commit: Option<bool>,
}

/// The input of the `restore` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreArgs {
    /// The operation whose content to write back (an `id` from `list_operations`).
    pub operation_id: String,
    /// Refuse unless the file's current content has this SHA-256 (`absent`: it must not exist).
    #[serde(default)]
    pub expected_sha256: Option<String>,
    /// Commit the restored file, where the workspace is a git repository; absent: as the
    /// workspace is set.
    #[serde(default)]
    pub commit: Option<bool>,
}

pub async fn undo(
    state: &AppState,
    viewer: &Viewer,
    who: HistoryCaller,
    request_id: &str,
    field: &str,
    options: UndoOptions,
) -> Result<UndoResponse, ApiError> {
    let undone = parse_uuid(request_id, field)?;
    if !super::jobs::sees_request(state.store.as_ref(), viewer, undone)
        .await
        .map_err(store_error)?
    {
        return Err(ApiError::not_found(format!("no request {undone}")).with_field(field));
    }
    if let Some(record) = state.store.get_request(undone).await.map_err(store_error)?
        && crate::service::workspaces::is_rebase_route(&record.route)
    {
        return undo_rebase(state, who, record, options.dry_run).await;
    }
    let caller = who.caller.clone();
    if state.settings.respect_claims {
        // The files the undo would write, as a dry run plans them (a refusal of its own, such
        // as a file changed since, is left for the undo itself to answer).
        let planned = history::undo(
            state.store.as_ref(),
            state.workspace.as_ref(),
            who.clone(),
            undone,
            UndoOptions {
                force: true,
                dry_run: true,
                commit: None,
            },
        )
        .await;
        if let Ok(planned) = planned {
            let named: Vec<(&str, &str)> = planned
                .files
                .iter()
                .map(|f| (f.path.as_str(), field))
                .collect();
            crate::service::workspaces::refuse_claimed(
                &state.workspaces,
                state.workspace.name(),
                &named,
                caller.as_deref(),
            )
            .await?;
        }
    }
    // The undo of a committed request is a revert commit, however that request came to be
    // committed; otherwise the undo commits as it asks, else as the workspace is set.
    let asked = match options.commit {
        Some(asked) => Some(asked),
        None => state
            .store
            .request_commit(undone)
            .await
            .map_err(store_error)?
            .map(|_| true),
    };
    let answer = history::undo(
        state.store.as_ref(),
        state.workspace.as_ref(),
        who,
        undone,
        options,
    )
    .await
    .map_err(|e| history_error(e, field))?;
    if !answer.dry_run {
        // The undo of a committed request is a commit putting its paths back: a revert.
        let files = answer
            .files
            .iter()
            .filter_map(|f| super::git::file(&f.path, f.sha256.clone(), "undo"))
            .collect();
        super::git::commit_request(
            state,
            asked,
            RequestCommit {
                request_id: answer.request_id,
                caller,
                subject: format!("Revert request {undone}"),
                body: String::new(),
                trailers: vec![("Writ-Undoes".into(), undone.to_string())],
                files,
            },
        )
        .await;
    }
    Ok(answer)
}

/// The undo of a rebase: its branch back at the tip it had, while nothing was committed on it
/// since; recorded as a request like every undo. It writes no file of its own: the worktree
/// follows the branch.
async fn undo_rebase(
    state: &AppState,
    who: HistoryCaller,
    record: writ_core::audit::RequestRecord,
    dry_run: bool,
) -> Result<UndoResponse, ApiError> {
    let rebased = record
        .response
        .and_then(|r| {
            serde_json::from_value::<crate::service::workspaces::RebasedWorkspace>(r).ok()
        })
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Conflict,
                format!("the rebase {} kept no answer to undo from", record.id),
            )
        })?;
    let answer = UndoResponse {
        request_id: who.request_id,
        undone_request_id: record.id,
        dry_run,
        files: Vec::new(),
    };
    if dry_run {
        return Ok(answer);
    }
    crate::service::workspaces::undo_rebase(state, &rebased).await?;
    let recorded = async {
        state
            .store
            .insert_request(&writ_core::audit::NewRequest::opened(
                who.request_id,
                who.route.clone(),
                who.caller.clone(),
                who.scope,
                rebased.workspace.clone(),
            ))
            .await?;
        state
            .store
            .finish_request(
                who.request_id,
                writ_core::audit::RequestStatus::Success,
                0,
                serde_json::to_value(&answer).ok().as_ref(),
            )
            .await
    }
    .await;
    if let Err(e) = recorded {
        tracing::warn!(error = %e, "a rebase was undone but the undo could not be recorded");
    }
    Ok(answer)
}

pub async fn restore(
    state: &AppState,
    viewer: &Viewer,
    who: HistoryCaller,
    operation_id: &str,
    field: &str,
    options: RestoreOptions,
) -> Result<RestoreResponse, ApiError> {
    let id = parse_uuid(operation_id, field)?;
    let not_found = || ApiError::not_found(format!("no operation {id}")).with_field(field);
    let (op, _) = state
        .store
        .get_operation(id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    if !super::jobs::sees_request(state.store.as_ref(), viewer, op.request_id)
        .await
        .map_err(store_error)?
    {
        return Err(not_found());
    }
    let caller = who.caller.clone();
    if state.settings.respect_claims {
        crate::service::workspaces::refuse_claimed(
            &state.workspaces,
            state.workspace.name(),
            &[(op.filename.as_str(), field)],
            caller.as_deref(),
        )
        .await?;
    }
    let asked = options.commit;
    let answer = history::restore(
        state.store.as_ref(),
        state.workspace.as_ref(),
        who,
        id,
        options,
    )
    .await
    .map_err(|e| history_error(e, field))?;
    super::git::commit_request(
        state,
        asked,
        RequestCommit {
            request_id: answer.request_id,
            caller,
            subject: format!("Restore {} from operation {id}", answer.path),
            body: String::new(),
            trailers: vec![("Writ-Restores".into(), id.to_string())],
            files: super::git::file(&answer.path, Some(answer.sha256.clone()), "restore")
                .into_iter()
                .collect(),
        },
    )
    .await;
    Ok(answer)
}

/// The caller of a tool or route, as the new request records it.
pub fn history_caller(
    request_id: Uuid,
    caller: Option<String>,
    scope: Option<writ_core::keys::Scope>,
    route: &str,
) -> HistoryCaller {
    HistoryCaller {
        request_id,
        caller,
        scope,
        route: route.to_string(),
    }
}

fn history_error(err: HistoryError, field: &str) -> ApiError {
    let message = err.to_string();
    match err {
        HistoryError::RequestNotFound(_) | HistoryError::OperationNotFound(_) => {
            ApiError::not_found(message).with_field(field)
        }
        HistoryError::StillRunning(_) => ApiError::new(ErrorCode::Conflict, message),
        HistoryError::Changed(files) => ApiError::new(ErrorCode::ChangedSince, message)
            .with_field("force")
            .with_details(json!({ "files": files })),
        HistoryError::Expired(paths) => ApiError::new(ErrorCode::HistoryExpired, message)
            .with_details(json!({ "files": paths })),
        HistoryError::NothingToRestore { .. } => {
            ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
        }
        HistoryError::Audit(e) => store_error(e),
        HistoryError::Write { path, source } => {
            let mut e = write_error(source, "path");
            if e.code == ErrorCode::PreconditionFailed {
                e.field = Some("expected_sha256".into());
            }
            e.details.get_or_insert_with(|| json!({ "path": path }));
            e
        }
    }
}
