//! Change sets, as `GET /changes`, `GET /changes/{id}`, `POST /changes/{id}/apply`,
//! `POST /changes/{id}/reject`, `GET /changes/{id}/events` and the `list_changes`,
//! `show_change`, `apply_change` and `reject_change` tools ask for them, over
//! [`writ_core::changes`]. A caller sees and decides only the change sets its key proposed (an
//! admin key, or no keys, every one) in the workspace it is in; any other is answered as absent.

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;
use writ_core::changes::{
    AppliedChange, ApplyChange, ChangeError, ChangeView, Changes, RejectChange, RejectedChange,
    Reviewer,
};
use writ_core::commits::{CommitFile, RequestCommit};

use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error, write_error};
use crate::state::AppState;

/// Change sets listed when the caller does not say.
pub const DEFAULT_LIMIT: u32 = 20;

/// The query of `GET /changes` (and the `list_changes` tool's arguments).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListChanges {
    /// `open` (default): those with hunks still open and time left; `all`: every one, newest
    /// first.
    #[schemars(extend("enum" = ["open", "all"]))]
    #[serde(default)]
    pub state: Option<String>,
    /// At most this many (1–100, default 20).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// The answer of `GET /changes`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ChangeList {
    /// Newest first.
    pub changes: Vec<ChangeView>,
}

/// The input of the `show_change` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowChangeArgs {
    /// The change set (`change_id` of the answer that proposed it).
    pub change_id: String,
}

/// The input of the `apply_change` tool: the change set and the route's body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyChangeArgs {
    /// The change set (`change_id` of the answer that proposed it).
    pub change_id: String,
    /// Apply every open hunk of these files. With neither `files` nor `hunks`, every open hunk.
    #[serde(default)]
    pub files: Vec<String>,
    /// Apply these hunks, by path: `{"src/app.py": ["3fa2b1c9d0"]}`.
    #[serde(default)]
    pub hunks: std::collections::BTreeMap<String, Vec<String>>,
    /// Kept with the decision.
    #[serde(default)]
    pub comment: Option<String>,
    /// Merge the hunks into files changed since the change was made, instead of refusing them.
    #[serde(default)]
    pub rebase: bool,
    /// Commit what the apply writes, where the workspace is a git repository.
    #[serde(default)]
    pub commit: Option<bool>,
}

impl ApplyChangeArgs {
    pub fn into_parts(self) -> (String, ApplyChange) {
        (
            self.change_id,
            ApplyChange {
                files: self.files,
                hunks: self.hunks,
                comment: self.comment,
                rebase: self.rebase,
                commit: self.commit,
            },
        )
    }
}

/// The input of the `reject_change` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectChangeArgs {
    /// The change set (`change_id` of the answer that proposed it).
    pub change_id: String,
    /// Reject every open hunk of these files. With neither `files` nor `hunks`, every open hunk.
    #[serde(default)]
    pub files: Vec<String>,
    /// Reject these hunks, by path.
    #[serde(default)]
    pub hunks: std::collections::BTreeMap<String, Vec<String>>,
    /// Why: kept with the decision and the files' records.
    #[serde(default)]
    pub comment: Option<String>,
}

impl RejectChangeArgs {
    pub fn into_parts(self) -> (String, RejectChange) {
        (
            self.change_id,
            RejectChange {
                files: self.files,
                hunks: self.hunks,
                comment: self.comment,
            },
        )
    }
}

/// Who reads or decides: the request it is recorded as, the key, and what the key may see.
pub fn reviewer(
    request_id: Uuid,
    caller: Option<String>,
    scope: Option<writ_core::keys::Scope>,
    route: &str,
    viewer: &Viewer,
) -> Reviewer {
    Reviewer {
        request_id,
        caller,
        scope,
        route: route.to_string(),
        only: viewer.only().map(str::to_owned),
        workspaces: viewer.workspaces().map(<[String]>::to_vec),
    }
}

fn changes(state: &AppState) -> Changes<'_> {
    Changes {
        store: state.store.as_ref(),
        workspace: state.workspace.as_ref(),
        settings: &state.settings.review,
    }
}

pub async fn list(
    state: &AppState,
    who: &Reviewer,
    params: ListChanges,
) -> Result<ChangeList, ApiError> {
    let open = match params.state.as_deref() {
        None | Some("open") => true,
        Some("all") => false,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidParameter,
                format!("state must be open or all, got '{other}'"),
            )
            .with_field("state"));
        }
    };
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > writ_core::changes::MAX_LISTED {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!(
                "limit must be between 1 and {}, got {limit}",
                writ_core::changes::MAX_LISTED
            ),
        )
        .with_field("limit"));
    }
    let changes = changes(state)
        .list(who, open, limit)
        .await
        .map_err(|e| change_error(e, "id"))?;
    Ok(ChangeList { changes })
}

pub async fn show(state: &AppState, who: &Reviewer, id: &str) -> Result<ChangeView, ApiError> {
    changes(state)
        .get(who, id)
        .await
        .map_err(|e| change_error(e, "id"))
}

/// Applies (part of) a change set, then commits what it wrote when the workspace is a git
/// repository and the apply, else the proposal, else the workspace asks for it.
pub async fn apply(
    state: &AppState,
    who: &Reviewer,
    id: &str,
    req: ApplyChange,
) -> Result<AppliedChange, ApiError> {
    let asked = req.commit;
    if state.settings.respect_claims {
        // The files the apply may write: those named, else every file of the set.
        let mut paths: Vec<String> = req
            .files
            .iter()
            .cloned()
            .chain(req.hunks.keys().cloned())
            .collect();
        if paths.is_empty() {
            paths = show(state, who, id)
                .await?
                .files
                .into_iter()
                .map(|f| f.path)
                .collect();
        }
        let named: Vec<(&str, &str)> = paths.iter().map(|p| (p.as_str(), "files")).collect();
        crate::service::workspaces::refuse_claimed(
            &state.workspaces,
            state.workspace.name(),
            &named,
            who.caller.as_deref(),
        )
        .await?;
    }
    let mut answer = changes(state)
        .apply(who, id, req)
        .await
        .map_err(|e| change_error(e, "id"))?;
    let files: Vec<CommitFile> = answer
        .files
        .iter()
        .filter_map(|f| {
            Some(CommitFile {
                path: writ_core::RepoPath::parse_nonempty(&f.path).ok()?,
                sha256: Some(f.sha256.clone()),
                model: f.chosen_model.clone(),
                selection: f.selection.map(|s| s.as_str().to_string()),
            })
        })
        .collect();
    answer.commit = super::git::commit_request(
        state,
        asked.or(answer.commit_asked),
        RequestCommit {
            request_id: answer.request_id,
            caller: who.caller.clone(),
            subject: format!(
                "Apply {}",
                answer
                    .files
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            body: String::new(),
            trailers: vec![("Writ-Change".into(), answer.change_id.to_string())],
            files,
        },
    )
    .await;
    let written: Vec<String> = answer.files.iter().map(|f| f.path.clone()).collect();
    answer.overlaps =
        crate::service::workspaces::overlaps_written(state, &written, who.caller.as_deref()).await;
    Ok(answer)
}

pub async fn reject(
    state: &AppState,
    who: &Reviewer,
    id: &str,
    req: RejectChange,
) -> Result<RejectedChange, ApiError> {
    changes(state)
        .reject(who, id, req)
        .await
        .map_err(|e| change_error(e, "id"))
}

/// The API's answer to a refusal; `id_field` names where the change set's id was given.
pub fn change_error(err: ChangeError, id_field: &str) -> ApiError {
    let message = err.to_string();
    match err {
        ChangeError::NotFound(_) => ApiError::not_found(message).with_field(id_field),
        ChangeError::Expired { .. } => ApiError::new(ErrorCode::ChangeExpired, message),
        ChangeError::Decided { state, .. } => {
            let code = match state {
                writ_core::changes::ChangeState::Rejected => ErrorCode::AlreadyRejected,
                _ => ErrorCode::AlreadyApplied,
            };
            ApiError::new(code, message).with_details(json!({ "state": state }))
        }
        ChangeError::Invalid { field, .. } => {
            ApiError::new(ErrorCode::InvalidRequest, message).with_field(field)
        }
        ChangeError::UnknownHunk {
            field, path, hunk, ..
        } => ApiError::new(ErrorCode::UnknownHunk, message)
            .with_field(field)
            .with_details(json!({ "path": path, "hunk": hunk })),
        ChangeError::ChangedSince(files) => ApiError::new(ErrorCode::ChangedSince, message)
            .with_field("rebase")
            .with_details(json!({ "files": files })),
        ChangeError::Conflict(files) => ApiError::new(ErrorCode::MergeConflict, message)
            .with_field("hunks")
            .with_details(json!({ "files": files })),
        ChangeError::Write { path, source } => {
            write_error(source, "path").with_details(json!({ "path": path }))
        }
        ChangeError::Audit(e) => store_error(e),
        ChangeError::Busy(_) => ApiError::new(ErrorCode::Conflict, message),
    }
}
