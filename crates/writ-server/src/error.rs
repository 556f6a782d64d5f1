//! The one error type of the HTTP API and its stable JSON body:
//! `{"error": {"code": "...", "message": "...", "field": "..."?, "details": ...?}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use writ_core::files::WriteError;
use writ_core::{PathError, StoreError, WorkspaceError};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    pub details: Option<serde_json::Value>,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            details: None,
            retry_after_secs: None,
        }
    }
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    /// The audit store cannot record: nothing was changed, the caller may retry.
    pub fn audit_unavailable(err: &StoreError) -> Self {
        tracing::error!(error = %err, "audit store unavailable");
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "audit_unavailable",
            "the audit log cannot be written right now, so nothing was changed; retry later",
        );
        e.retry_after_secs = Some(5);
        e
    }
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the server log",
        )
    }
}

impl ApiError {
    /// The JSON body: `{"error": {"code", "message", "field"?, "details"?}}`.
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(field) = &self.field {
            body["field"] = json!(field);
        }
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        json!({ "error": body })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// A path refused by the sandbox, blamed on `field`.
pub fn path_error(err: &PathError, field: &str) -> ApiError {
    let status = match err {
        // Well-formed, but not a name writ will create.
        PathError::ForbiddenCharacter { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, "invalid_path", err.to_string()).with_field(field)
}

pub fn workspace_error(err: WorkspaceError, field: &str) -> ApiError {
    let msg = err.to_string();
    match err {
        WorkspaceError::Path(p) => path_error(&p, field),
        WorkspaceError::Escapes { .. } => {
            ApiError::bad_request("invalid_path", msg).with_field(field)
        }
        WorkspaceError::NotFound { .. } => ApiError::not_found(msg),
        WorkspaceError::ParentMissing { .. } => {
            ApiError::new(StatusCode::CONFLICT, "parent_missing", msg).with_field("create_dirs")
        }
        WorkspaceError::IsDirectory { .. } | WorkspaceError::SpecialFile { .. } => {
            ApiError::new(StatusCode::CONFLICT, "not_a_file", msg).with_field(field)
        }
        WorkspaceError::NotADirectory { .. } => {
            ApiError::new(StatusCode::CONFLICT, "not_a_directory", msg).with_field(field)
        }
        WorkspaceError::Protected { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "protected_path", msg).with_field(field)
        }
        WorkspaceError::NoSpace { .. } => {
            let mut e = ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "no_space", msg);
            e.retry_after_secs = Some(60);
            e
        }
        WorkspaceError::Io { .. } => ApiError::internal(msg),
    }
}

pub fn write_error(err: WriteError, field: &str) -> ApiError {
    match err {
        WriteError::Workspace(w) => workspace_error(w, field),
        WriteError::AlreadyExists { .. } => {
            ApiError::new(StatusCode::CONFLICT, "already_exists", err.to_string())
                .with_field("mode")
        }
        WriteError::PreconditionFailed { .. } => ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            err.to_string(),
        )
        .with_field("If-Match"),
        WriteError::TooLarge { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "file_too_large",
            format!("{err} (WRIT_MAX_FILE_BYTES)"),
        )
        .with_field("body"),
        WriteError::AuditUnavailable(store) => ApiError::audit_unavailable(&store),
    }
}

pub fn store_error(err: StoreError) -> ApiError {
    match err {
        StoreError::Unavailable(_) => ApiError::audit_unavailable(&err),
        StoreError::InvalidCursor => {
            ApiError::bad_request("invalid_cursor", "cursor was not issued by this server")
                .with_field("cursor")
        }
        StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
        StoreError::Other(m) => ApiError::internal(m),
    }
}
