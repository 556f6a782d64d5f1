//! Undo, as `POST /requests/{id}/undo` and the `undo_request` tool ask for it, over
//! [`writ_core::history`]: only a request the caller may see (its own, or any for an admin key).

use serde_json::json;
use uuid::Uuid;
use writ_core::edits::Editor;
use writ_core::history::{self, UndoError, UndoOptions, UndoResponse};

use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error};
use crate::service::edits::edits_error;
use crate::state::AppState;

/// The request `id` (a UUID, as given), undone as `options` say.
pub async fn undo(
    state: &AppState,
    viewer: &Viewer,
    editor: Editor,
    body_sha256: &str,
    id: &str,
    options: UndoOptions,
) -> Result<UndoResponse, ApiError> {
    let not_found =
        || ApiError::new(ErrorCode::NotFound, format!("no request {id}")).with_field("id");
    let target = Uuid::parse_str(id).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!("id must be a request id (a UUID), got {id:?}"),
        )
        .with_field("id")
    })?;
    // Another key's request is not there, as far as this caller can tell.
    match state.store.get_request(target).await.map_err(store_error)? {
        Some(r) if viewer.sees(r.caller.as_deref()) => {}
        _ => return Err(not_found()),
    }
    history::undo(
        state.store.as_ref(),
        state.workspace.as_ref(),
        editor,
        body_sha256,
        target,
        options,
    )
    .await
    .map_err(|e| match e {
        UndoError::NotFound(_) => not_found(),
        UndoError::ChangedSince(ref files) => {
            let details = json!({ "files": files });
            ApiError::new(ErrorCode::ChangedSince, e.to_string()).with_details(details)
        }
        UndoError::NotKept(ref files) => {
            let details = json!({ "files": files });
            ApiError::new(ErrorCode::HistoryExpired, e.to_string()).with_details(details)
        }
        UndoError::Edits(e) => edits_error(e),
        UndoError::Store(e) => store_error(e),
    })
}
