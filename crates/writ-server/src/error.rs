//! The one error type of the HTTP API and its stable JSON body:
//! `{"error": {"code": "...", "message": "...", "field": "..."?, "details": ...?}}`.
//!
//! Every code a client can see is a variant of [`ErrorCode`]; openapi.yaml lists the same set
//! (pinned by the API tests), so a code cannot appear on the wire without being documented.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use writ_core::files::WriteError;
use writ_core::{PathError, StoreError, WorkspaceError};

/// The machine-readable `code` of an error body. The wire strings are the client's contract:
/// a variant may be added, but never renamed (the three "too large" spellings stay apart because
/// clients already match on each).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    AlreadyApplied,
    AlreadyExists,
    AlreadyRejected,
    AuditUnavailable,
    AuthUnavailable,
    BodyTooLarge,
    BudgetExceeded,
    Busy,
    Cancelled,
    ChangeExpired,
    ChangedSince,
    ChecksFailed,
    Claimed,
    CommandsUnavailable,
    Conflict,
    CrossSite,
    EditFailed,
    FileTooLarge,
    HistoryExpired,
    HostNotAllowed,
    IdempotencyConflict,
    IdempotencyInProgress,
    InsufficientScope,
    Internal,
    InvalidArguments,
    InvalidBody,
    InvalidCursor,
    InvalidHeader,
    InvalidParameter,
    InvalidPath,
    InvalidRequest,
    InvalidUtf8,
    McpTransport,
    MergeConflict,
    ModelsUnavailable,
    NoSpace,
    NotADirectory,
    NotAFile,
    NotFound,
    ParentMissing,
    PreconditionFailed,
    ProtectedPath,
    RateLimited,
    RepositoryTooLarge,
    RunQueueFull,
    SessionState,
    TooLarge,
    TooManyBatches,
    TooManyRuns,
    TooManyWriteSessions,
    Unauthorized,
    UnknownHunk,
    UnsupportedMediaType,
    ValidationFailed,
}

impl ErrorCode {
    /// The status this code is answered with. Three call sites answer another one and say why
    /// with [`ApiError::with_status`]: a path with a forbidden character (422), a body that could
    /// not be read at all (400), and the MCP transport's own refusals (its status).
    pub fn status(self) -> StatusCode {
        use ErrorCode::*;
        match self {
            InvalidBody | InvalidRequest | InvalidArguments | InvalidUtf8 | EditFailed
            | UnknownHunk | ValidationFailed => StatusCode::UNPROCESSABLE_ENTITY,
            InvalidCursor | InvalidHeader | InvalidParameter | InvalidPath | McpTransport => {
                StatusCode::BAD_REQUEST
            }
            Unauthorized => StatusCode::UNAUTHORIZED,
            InsufficientScope | CrossSite | ProtectedPath => StatusCode::FORBIDDEN,
            NotFound => StatusCode::NOT_FOUND,
            AlreadyApplied
            | AlreadyExists
            | AlreadyRejected
            | Cancelled
            | ChangedSince
            | ChecksFailed
            | Claimed
            | Conflict
            | MergeConflict
            | IdempotencyConflict
            | IdempotencyInProgress
            | NotADirectory
            | NotAFile
            | ParentMissing
            | SessionState => StatusCode::CONFLICT,
            PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            // The content (or the change set) is known to have existed and to be gone for
            // good: not 404.
            HistoryExpired | ChangeExpired => StatusCode::GONE,
            // 402, not 429: waiting a few seconds and retrying cannot help before the window
            // resets, and clients that retry every 429 on their own would only spin.
            BudgetExceeded => StatusCode::PAYMENT_REQUIRED,
            BodyTooLarge | FileTooLarge | TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            HostNotAllowed => StatusCode::MISDIRECTED_REQUEST,
            RateLimited | TooManyBatches | TooManyRuns | TooManyWriteSessions => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
            AuditUnavailable | AuthUnavailable | Busy | CommandsUnavailable | ModelsUnavailable
            | RepositoryTooLarge | RunQueueFull => StatusCode::SERVICE_UNAVAILABLE,
            NoSpace => StatusCode::INSUFFICIENT_STORAGE,
        }
    }

    /// The wire string, as serde writes it.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            AlreadyApplied => "already_applied",
            AlreadyExists => "already_exists",
            AlreadyRejected => "already_rejected",
            AuditUnavailable => "audit_unavailable",
            AuthUnavailable => "auth_unavailable",
            BodyTooLarge => "body_too_large",
            BudgetExceeded => "budget_exceeded",
            Busy => "busy",
            Cancelled => "cancelled",
            ChangeExpired => "change_expired",
            ChangedSince => "changed_since",
            ChecksFailed => "checks_failed",
            Claimed => "claimed",
            CommandsUnavailable => "commands_unavailable",
            Conflict => "conflict",
            CrossSite => "cross_site",
            EditFailed => "edit_failed",
            FileTooLarge => "file_too_large",
            HistoryExpired => "history_expired",
            HostNotAllowed => "host_not_allowed",
            IdempotencyConflict => "idempotency_conflict",
            IdempotencyInProgress => "idempotency_in_progress",
            InsufficientScope => "insufficient_scope",
            Internal => "internal",
            InvalidArguments => "invalid_arguments",
            InvalidBody => "invalid_body",
            InvalidCursor => "invalid_cursor",
            InvalidHeader => "invalid_header",
            InvalidParameter => "invalid_parameter",
            InvalidPath => "invalid_path",
            InvalidRequest => "invalid_request",
            InvalidUtf8 => "invalid_utf8",
            McpTransport => "mcp_transport",
            MergeConflict => "merge_conflict",
            ModelsUnavailable => "models_unavailable",
            NoSpace => "no_space",
            NotADirectory => "not_a_directory",
            NotAFile => "not_a_file",
            NotFound => "not_found",
            ParentMissing => "parent_missing",
            PreconditionFailed => "precondition_failed",
            ProtectedPath => "protected_path",
            RateLimited => "rate_limited",
            RepositoryTooLarge => "repository_too_large",
            RunQueueFull => "run_queue_full",
            SessionState => "session_state",
            TooLarge => "too_large",
            TooManyBatches => "too_many_batches",
            TooManyRuns => "too_many_runs",
            TooManyWriteSessions => "too_many_write_sessions",
            Unauthorized => "unauthorized",
            UnknownHunk => "unknown_hunk",
            UnsupportedMediaType => "unsupported_media_type",
            ValidationFailed => "validation_failed",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub field: Option<String>,
    pub details: Option<serde_json::Value>,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An error answered with its code's status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: code.status(),
            code,
            message: message.into(),
            field: None,
            details: None,
            retry_after_secs: None,
        }
    }
    /// A body that is not the request's shape or not JSON: 400 naming the field serde names.
    pub fn invalid_body(detail: String) -> Self {
        let field = field_in(&detail);
        let err = ApiError::new(ErrorCode::InvalidBody, detail);
        match field {
            Some(field) => err.with_field(field),
            None => err,
        }
    }
    /// A well-formed value that cannot be used (a pattern that does not compile, a bound out of
    /// range): 422 rather than the code's own status.
    pub fn unprocessable(self) -> Self {
        self.with_status(StatusCode::UNPROCESSABLE_ENTITY)
    }
    /// Answers another status than the code's own; see [`ErrorCode::status`] for who does.
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    /// The audit store cannot record: nothing was changed, the caller may retry.
    pub fn audit_unavailable(err: &StoreError) -> Self {
        tracing::error!(error = %err, "audit store unavailable");
        let mut e = Self::new(
            ErrorCode::AuditUnavailable,
            "the audit log cannot be written right now, so nothing was changed; retry later",
        );
        e.retry_after_secs = Some(5);
        e
    }
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(ErrorCode::Internal, "internal error; see the server log")
    }
}

/// writ's error body, the same on every route: `{"error": {"code", "message", "field"?,
/// "details"?}}`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: the `error` of the error body.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    /// The request field at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// More about the error, shaped by its code (the limit and what was used, the files changed
    /// since, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// The JSON body: `{"error": {"code", "message", "field"?, "details"?}}`.
    pub fn body(&self) -> serde_json::Value {
        json!(ErrorBody {
            error: self.detail(),
        })
    }

    /// The body's `error`, for an answer that carries it beside more (a tool call's `content`).
    pub fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            code: self.code,
            message: self.message.clone(),
            field: self.field.clone(),
            details: self.details.clone(),
        }
    }
}

/// The headers of an error answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorHeaders {
    /// Seconds to wait before trying again, where waiting can help (a store that does not
    /// answer, a full queue or disk, a rate used up).
    #[serde(rename = "retry-after", skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn headers(&self) -> ErrorHeaders {
        ErrorHeaders {
            retry_after: self.retry_after_secs,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let headers = crate::header_map::header_map(&self.headers());
        (self.status, headers, axum::Json(self.body())).into_response()
    }
}

/// A path refused by the sandbox, blamed on `field`.
pub fn path_error(err: &PathError, field: &str) -> ApiError {
    let status = match err {
        // Well-formed, but not a name writ will create.
        PathError::ForbiddenCharacter { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(ErrorCode::InvalidPath, err.to_string())
        .with_status(status)
        .with_field(field)
}

pub fn workspace_error(err: WorkspaceError, field: &str) -> ApiError {
    let msg = err.to_string();
    match err {
        WorkspaceError::Path(p) => path_error(&p, field),
        WorkspaceError::Escapes { .. } => {
            ApiError::new(ErrorCode::InvalidPath, msg).with_field(field)
        }
        WorkspaceError::NotFound { .. } => ApiError::not_found(msg),
        WorkspaceError::ParentMissing { .. } => {
            ApiError::new(ErrorCode::ParentMissing, msg).with_field("create_dirs")
        }
        WorkspaceError::IsDirectory { .. } | WorkspaceError::SpecialFile { .. } => {
            ApiError::new(ErrorCode::NotAFile, msg).with_field(field)
        }
        WorkspaceError::NotADirectory { .. } => {
            ApiError::new(ErrorCode::NotADirectory, msg).with_field(field)
        }
        WorkspaceError::Protected { .. } => {
            ApiError::new(ErrorCode::ProtectedPath, msg).with_field(field)
        }
        WorkspaceError::NoSpace { .. } => {
            let mut e = ApiError::new(ErrorCode::NoSpace, msg);
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
            ApiError::new(ErrorCode::AlreadyExists, err.to_string()).with_field("mode")
        }
        WriteError::PreconditionFailed { .. } => {
            ApiError::new(ErrorCode::PreconditionFailed, err.to_string()).with_field("If-Match")
        }
        WriteError::TooLarge { .. } => ApiError::new(
            ErrorCode::FileTooLarge,
            format!("{err} (WRIT_MAX_FILE_BYTES)"),
        )
        .with_field("body"),
        WriteError::AuditUnavailable(store) => ApiError::audit_unavailable(&store),
        // Nothing was written; the next try takes the lock on a new session.
        WriteError::LockLost { .. } => {
            let mut e = ApiError::new(ErrorCode::AuditUnavailable, err.to_string());
            e.retry_after_secs = Some(1);
            e
        }
        // As a workspace that does not exist answers on its routes.
        WriteError::WorkspaceDeleted { .. } => {
            ApiError::not_found(err.to_string()).with_field("name")
        }
    }
}

pub fn store_error(err: StoreError) -> ApiError {
    match err {
        StoreError::Unavailable(_) => ApiError::audit_unavailable(&err),
        StoreError::InvalidCursor => ApiError::new(
            ErrorCode::InvalidCursor,
            "cursor was not issued by this server",
        )
        .with_field("cursor"),
        StoreError::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
        StoreError::Other(m) => ApiError::internal(m),
    }
}
/// Pulls the field name out of serde's messages: "unknown field `x`", "missing field `y`", or
/// the path prefix "files[0].filename: …" that serde_path_to_error-style messages carry.
pub(crate) fn field_in(message: &str) -> Option<String> {
    for marker in ["unknown field `", "missing field `"] {
        if let Some(start) = message.find(marker) {
            let rest = &message[start + marker.len()..];
            if let Some(end) = rest.find('`') {
                let name = &rest[..end];
                // axum prefixes the JSON path ("files[0]: unknown field `x`"): keep it.
                let prefix = message[..start].trim().trim_end_matches(':').trim();
                return Some(if prefix.is_empty() || prefix.contains(' ') {
                    name.to_string()
                } else if prefix == name || prefix.ends_with(&format!(".{name}")) {
                    // The path already ends with the field itself.
                    prefix.to_string()
                } else {
                    format!("{prefix}.{name}")
                });
            }
        }
    }
    None
}
