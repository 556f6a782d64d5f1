//! Direct writes: content the caller already has (a raw body, an MCP or function-calling tool
//! call, a finished write session), written the one way every surface shares — the request is
//! recorded, then the file through [`crate::files::recorded_write`], then the request is closed.
//! The HTTP routes, MCP tools and the CLI only translate to and from this.

use std::time::Instant;

use uuid::Uuid;

use crate::audit::{AuditStore, FileKind, NewRequest, RequestStatus, Selection};
use crate::content::sha256_hex;
use crate::files::{Provenance, WriteError, WriteReceipt, WriteSpec, recorded_write};
use crate::workspace::Workspace;

/// Who asks for a direct write, and through which surface.
#[derive(Debug, Clone)]
pub struct DirectWrite {
    pub request_id: Uuid,
    /// The API key id of the caller (never the key), when auth is on.
    pub caller: Option<String>,
    /// The key's scope that allowed the write, when auth is on.
    pub scope: Option<crate::keys::Scope>,
    /// The surface, as recorded on the request (`PUT /files/{path}`, `mcp write_file`, …).
    pub route: String,
    pub spec: WriteSpec,
}

/// Writes the caller's content, recorded as a request with one operation. Nothing is written if
/// the target is refused or the audit log cannot record it.
pub async fn write(
    store: &dyn AuditStore,
    workspace: &dyn Workspace,
    write: DirectWrite,
) -> Result<WriteReceipt, WriteError> {
    let started = Instant::now();
    let DirectWrite {
        request_id,
        caller,
        scope,
        route,
        spec,
    } = write;
    workspace.check_target(&spec.path, spec.create_dirs).await?;
    let request = NewRequest::opened(request_id, route, caller, scope, workspace.name())
        .with_body(sha256_hex(&spec.content));
    store
        .insert_request(&request)
        .await
        .map_err(WriteError::AuditUnavailable)?;
    let result = recorded_write(
        store,
        workspace,
        request_id,
        FileKind::Direct,
        spec,
        Provenance {
            selection: Some(Selection::Direct),
            ..Provenance::default()
        },
    )
    .await;
    let outcome = match &result {
        Ok(receipt) => receipt.operation.as_str(),
        Err(_) => "failed",
    };
    metrics::counter!("writ_writes_total", "kind" => FileKind::Direct.as_str(), "operation" => outcome)
        .increment(1);
    let status = if result.is_ok() {
        RequestStatus::Success
    } else {
        RequestStatus::Error
    };
    let elapsed = started.elapsed().as_millis() as i64;
    if let Err(e) = store
        .finish_request(request_id, status, elapsed, None)
        .await
    {
        tracing::warn!(error = %e, "could not close the request record of a direct write");
    }
    result
}
