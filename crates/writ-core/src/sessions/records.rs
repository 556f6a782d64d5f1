//! What a write session is as stored, what changes it, and what a caller sends and sees.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::SessionState;
use crate::audit::{AuditWrite, OperationKind};
use crate::content::InvalidUtf8;
use crate::files::WriteMode;

/// A session as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteSession {
    pub id: Uuid,
    /// The API key id of the caller who began it; only that caller sees it.
    pub caller: Option<String>,
    pub target_file: String,
    pub operation: WriteMode,
    pub intent: Option<String>,
    pub create_dirs: bool,
    /// `commit` as the session began with it: whether its write is committed.
    pub commit: Option<bool>,
    /// `review` as the session began with it: whether its content is proposed for review
    /// instead of written (`None`: as the server is set).
    pub review: Option<bool>,
    /// The stored state (never `AwaitingDoneOrMoreContent`).
    pub state: SessionState,
    pub bytes_received: i64,
    pub chunks: i64,
    /// The content's last bytes, so a `DONE` line split across chunks is seen without reading
    /// the content back.
    pub tail: Vec<u8>,
    pub correction_rounds: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The write's receipt once done ([`SessionReceipt`] as JSON).
    pub receipt: Option<serde_json::Value>,
    pub error: Option<String>,
    /// The workspace its file is written in: a session is found only in it.
    pub workspace: String,
}

/// A chunk appended: the session's counters after it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkAppend<'a> {
    pub session_id: Uuid,
    /// The chunk's number: the session's `chunks` after it (1, 2, …).
    pub seq: i64,
    pub content: &'a [u8],
    pub bytes_received: i64,
    pub tail: &'a [u8],
    pub at: DateTime<Utc>,
}

/// A state change: from one of `from` to `to`, with what the new state needs to say.
#[derive(Debug, Clone)]
pub struct SessionTransition<'a> {
    pub from: &'a [SessionState],
    pub to: SessionState,
    pub at: DateTime<Utc>,
    pub receipt: Option<&'a serde_json::Value>,
    pub error: Option<&'a str>,
    /// Counts a round of corrections.
    pub count_correction: bool,
    /// Replaces the content with this (the `DONE` line removed, corrections applied).
    pub content: Option<&'a [u8]>,
    /// Drops the stored content (it is in the audit log, or it was abandoned).
    pub drop_content: bool,
    /// Audit records written in the change's transaction, only if the change applies: the
    /// change and its record land together or not at all.
    pub records: &'a [AuditWrite],
}

impl<'a> SessionTransition<'a> {
    /// A move from one of `from` to `to` now, changing nothing else.
    pub fn new(from: &'a [SessionState], to: SessionState) -> Self {
        SessionTransition {
            from,
            to,
            at: Utc::now(),
            receipt: None,
            error: None,
            count_correction: false,
            content: None,
            drop_content: false,
            records: &[],
        }
    }
}

/// What begins a session.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BeginSession {
    /// Path of the file to write, relative to the workspace root, e.g. "src/app.py".
    pub target_file: String,
    /// `create` fails if the file exists; `overwrite` creates or replaces; `append` adds to the end.
    pub operation: WriteMode,
    /// What the content is for, in a sentence (kept with the session, for people reading it).
    #[serde(default)]
    pub intent: Option<String>,
    /// Create missing parent directories.
    #[serde(default)]
    pub create_dirs: bool,
    /// Commit the file once the session writes it, where the workspace is a git repository;
    /// absent: as the workspace is set.
    #[serde(default)]
    pub commit: Option<bool>,
    /// Write nothing at the end: propose the content for review, as a change set to apply or
    /// reject per hunk (`GET /changes/{id}`); the receipt names it. Absent: as the server is
    /// set (`WRIT_REVIEW`).
    #[serde(default)]
    pub review: Option<bool>,
}

/// One correction: the bytes of the invalid sequence at `offset` become `replacement`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Correction {
    /// The byte offset of an invalid sequence, as the session listed it.
    pub offset: usize,
    /// The text to put there instead.
    pub replacement: String,
}

/// The write a finished session made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionReceipt {
    pub path: String,
    pub operation: OperationKind,
    pub sha256: String,
    pub bytes: usize,
    pub operation_id: Uuid,
    pub request_id: Uuid,
    /// How many invalid sequences were replaced with U+FFFD after the last correction round.
    pub replaced_invalid: usize,
    /// With `review`: the change set holding the content, proposed (`operation` is `proposed`)
    /// and not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<Uuid>,
}

/// A session as a caller sees it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SessionView {
    pub id: Uuid,
    pub state: SessionState,
    pub target_file: String,
    pub operation: WriteMode,
    pub intent: Option<String>,
    /// Whether the session's write is committed (absent: as the workspace is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<bool>,
    /// Whether the content is proposed for review instead of written (absent: as the server is
    /// set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<bool>,
    pub bytes_received: i64,
    pub chunks: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When the session expires unless it is used again (open sessions only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// What to tell the model, while the session awaits DONE or more content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The invalid sequences to correct, in `needs_corrections`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalid_utf8: Vec<InvalidUtf8>,
    pub correction_rounds: i64,
    pub max_correction_rounds: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<SessionReceipt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the workspace is a git checkout: each path written that another workspace of its
    /// repository, or the branch it goes back to, changed too since they share a base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<crate::overlaps::Overlap>,
}
