//! Write sessions: content the caller streams in raw chunks (never inside JSON), written once it
//! is complete through the same recorded write as every direct write ([`crate::direct::write`]).
//!
//! A session is begun for one target and operation (the target is checked at once), takes chunks
//! as bytes — a chunk may end anywhere, even inside a UTF-8 sequence —, and is finalised by a
//! chunk whose text ends with a line that is exactly `DONE` (that line is not written) or by an
//! explicit finish. Only at finalisation is the content checked as UTF-8: invalid sequences put
//! the session in `needs_corrections` with their offsets, and after [`MAX_CORRECTION_ROUNDS`]
//! rounds whatever is still invalid becomes U+FFFD and the file is written.
//!
//! Sessions live in the store ([`SessionStore`]), so they survive a restart and every replica
//! sees them. Every state change is conditional on the state it leaves, so a session is finalised
//! at most once (a second finish answers with the same receipt) and expired at most once.
//! Abandoned sessions expire after the TTL, lazily on access and in the periodic sweep
//! ([`expire_abandoned`]); each expiry is recorded in the audit log.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::audit::{AuditStore, FileKind, NewRequest, OperationKind, RequestStatus, StoreError};
use crate::content::{InvalidUtf8, invalid_utf8_sequences};
use crate::direct::{self, DirectWrite};
use crate::files::{WriteError, WriteMode, WriteSpec};
use crate::path::{PathError, SandboxPath};
use crate::workspace::{Workspace, WorkspaceError};

/// Rounds of corrections a caller gets before invalid sequences are replaced with U+FFFD.
pub const MAX_CORRECTION_ROUNDS: u32 = 3;
/// Invalid sequences listed per round.
pub const MAX_INVALID_LISTED: usize = 50;
/// What an orchestrator relays to its model once the stream has paused.
pub const DONE_PROMPT: &str =
    "If you're finished, reply with DONE on its own line; otherwise continue.";
/// Bytes of the content's end kept on the session row: enough to see a `DONE` line that a chunk
/// boundary split (`\r\nDONE\r\n` is eight).
const TAIL_BYTES: usize = 16;
/// How long a finish waits for another request's finalisation of the same session.
const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// Optimistic retries of an append that raced other appends to the same session: each round
/// one of them wins, so this many racing chunks all get in.
const APPEND_ATTEMPTS: usize = 32;

/// Where a session stands. `AwaitingDoneOrMoreContent` is never stored: it is
/// `AwaitingContent` seen after the idle time with no new chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    AwaitingContent,
    AwaitingDoneOrMoreContent,
    NeedsCorrections,
    Finalizing,
    Done,
    Failed,
    Expired,
}

impl SessionState {
    pub const ALL: [Self; 7] = [
        Self::AwaitingContent,
        Self::AwaitingDoneOrMoreContent,
        Self::NeedsCorrections,
        Self::Finalizing,
        Self::Done,
        Self::Failed,
        Self::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingContent => "awaiting_content",
            Self::AwaitingDoneOrMoreContent => "awaiting_done_or_more_content",
            Self::NeedsCorrections => "needs_corrections",
            Self::Finalizing => "finalizing",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Expired => "expired",
        }
    }

    /// Still waiting on the caller (and so subject to expiry and the open-session bound).
    pub fn is_open(self) -> bool {
        matches!(
            self,
            Self::AwaitingContent | Self::AwaitingDoneOrMoreContent | Self::NeedsCorrections
        )
    }

    /// The states a session is stored in while it is open.
    pub const OPEN_STORED: [Self; 2] = [Self::AwaitingContent, Self::NeedsCorrections];
}

impl std::str::FromStr for SessionState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown write session state: {s}"))
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
#[derive(Debug, Clone, PartialEq)]
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
        }
    }
}

#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn insert_write_session(&self, session: &WriteSession) -> Result<(), StoreError>;
    async fn get_write_session(&self, id: Uuid) -> Result<Option<WriteSession>, StoreError>;
    /// Appends a chunk if the session is still `awaiting_content` with `append.seq - 1` chunks
    /// (so two racing appends cannot both take the same place); returns whether it did.
    async fn append_write_session_chunk(
        &self,
        append: &ChunkAppend<'_>,
    ) -> Result<bool, StoreError>;
    /// The content received so far, in order.
    async fn write_session_content(&self, id: Uuid) -> Result<Vec<u8>, StoreError>;
    /// Applies `change` if the session is in one of `change.from`; returns whether it did.
    async fn transition_write_session(
        &self,
        id: Uuid,
        change: &SessionTransition<'_>,
    ) -> Result<bool, StoreError>;
    /// Open sessions of `caller` (`None`: made without a key) touched at or after `since`.
    async fn count_open_write_sessions(
        &self,
        caller: Option<&str>,
        since: DateTime<Utc>,
    ) -> Result<u64, StoreError>;
    /// Open sessions last touched before `before`, oldest first, at most `limit`.
    async fn abandoned_write_sessions(
        &self,
        before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<WriteSession>, StoreError>;
}

/// The bounds and times of write sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSettings {
    /// `WRITE_SESSION_IDLE_MS`: no chunk for this long and the session awaits DONE or more.
    pub idle: Duration,
    /// `WRITE_SESSION_TTL_SECS`: no activity for this long and the session expires.
    pub ttl: Duration,
    /// `WRITE_SESSION_MAX_BYTES`: content per session.
    pub max_bytes: usize,
    /// `WRITE_SESSION_MAX_CHUNK_BYTES`: one chunk.
    pub max_chunk_bytes: usize,
    /// `WRITE_SESSION_MAX_OPEN`: open sessions per caller.
    pub max_open: u32,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            idle: Duration::from_millis(2000),
            ttl: Duration::from_secs(3600),
            max_bytes: 1024 * 1024,
            max_chunk_bytes: 1024 * 1024,
            max_open: 16,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionReceipt {
    pub path: String,
    pub operation: OperationKind,
    pub sha256: String,
    pub bytes: usize,
    pub operation_id: Uuid,
    pub request_id: Uuid,
    /// How many invalid sequences were replaced with U+FFFD after the last correction round.
    pub replaced_invalid: usize,
}

/// A session as a caller sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    pub id: Uuid,
    pub state: SessionState,
    pub target_file: String,
    pub operation: WriteMode,
    pub intent: Option<String>,
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
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no write session '{0}'")]
    NotFound(String),
    #[error("{0}")]
    Path(#[from] PathError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("'{path}' already exists (operation=create)")]
    AlreadyExists { path: String },
    /// The session is not in a state that takes this request.
    #[error("{message}")]
    Conflict {
        state: SessionState,
        message: String,
    },
    #[error("{message}")]
    TooLarge {
        field: &'static str,
        limit_name: &'static str,
        limit: usize,
        message: String,
    },
    #[error(
        "{open} write sessions are open for this caller, the limit is {limit} (WRITE_SESSION_MAX_OPEN); finish or abandon one first"
    )]
    TooManyOpen { open: u64, limit: u32 },
    #[error("{message}")]
    Invalid { field: String, message: String },
    /// The finalising write was refused; the session is `failed`.
    #[error(transparent)]
    Write(WriteError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Everything a session operation needs.
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    pub store: &'a dyn AuditStore,
    pub workspace: &'a dyn Workspace,
    pub settings: &'a SessionSettings,
}

/// Who asks, and under which request id a finalising write is recorded.
#[derive(Debug, Clone)]
pub struct SessionCaller {
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the call, recorded with a finalising write.
    pub scope: Option<crate::keys::Scope>,
}

/// Where a `DONE` line ends the content: the content without it, or `None`.
pub fn strip_done(content: &[u8]) -> Option<&[u8]> {
    let body = content
        .strip_suffix(b"\r\n")
        .or_else(|| content.strip_suffix(b"\n"))
        .unwrap_or(content);
    let before = body.strip_suffix(b"DONE")?;
    (before.is_empty() || before.ends_with(b"\n")).then_some(before)
}

/// The last [`TAIL_BYTES`] of `tail` followed by `chunk`.
fn next_tail(tail: &[u8], chunk: &[u8]) -> Vec<u8> {
    let joined = [tail, chunk].concat();
    joined[joined.len().saturating_sub(TAIL_BYTES)..].to_vec()
}

/// The route a session's finalising write is recorded under.
pub fn finalising_route(id: Uuid) -> String {
    format!("POST /write_sessions/{id}")
}

impl Sessions<'_> {
    /// Begins a session; the target is checked now, so a refusal comes before any content.
    pub async fn begin(
        &self,
        who: &SessionCaller,
        begin: BeginSession,
    ) -> Result<SessionView, SessionError> {
        let path = SandboxPath::parse_nonempty(&begin.target_file)?;
        if let Some(intent) = &begin.intent
            && intent.len() > 4096
        {
            return Err(SessionError::Invalid {
                field: "intent".into(),
                message: format!("at most 4096 bytes, got {}", intent.len()),
            });
        }
        self.workspace
            .check_target(&path, begin.create_dirs)
            .await?;
        if begin.operation == WriteMode::Create
            && self.workspace.read_head(&path, 0).await?.is_some()
        {
            return Err(SessionError::AlreadyExists {
                path: path.to_string(),
            });
        }
        let now = Utc::now();
        let open = self
            .store
            .count_open_write_sessions(who.caller.as_deref(), self.expiry_cutoff(now))
            .await?;
        if open >= u64::from(self.settings.max_open) {
            return Err(SessionError::TooManyOpen {
                open,
                limit: self.settings.max_open,
            });
        }
        let session = WriteSession {
            id: Uuid::now_v7(),
            caller: who.caller.clone(),
            target_file: path.to_string(),
            operation: begin.operation,
            intent: begin.intent,
            create_dirs: begin.create_dirs,
            state: SessionState::AwaitingContent,
            bytes_received: 0,
            chunks: 0,
            tail: Vec::new(),
            correction_rounds: 0,
            created_at: now,
            updated_at: now,
            finished_at: None,
            receipt: None,
            error: None,
        };
        self.store.insert_write_session(&session).await?;
        self.view(session, None).await
    }

    /// The session as it stands (expiring it first if it was abandoned).
    pub async fn get(&self, who: &SessionCaller, id: &str) -> Result<SessionView, SessionError> {
        let session = self.load(who, id).await?;
        self.view(session, None).await
    }

    /// Appends a raw chunk; a chunk that ends the content with a `DONE` line finalises.
    pub async fn append(
        &self,
        who: &SessionCaller,
        id: &str,
        chunk: &[u8],
    ) -> Result<SessionView, SessionError> {
        // An empty chunk changes nothing but the count; a caller sending one has a bug to hear of.
        if chunk.is_empty() {
            return Err(SessionError::Invalid {
                field: "body".into(),
                message: "the chunk is empty: send the text to append (raw, not JSON), or finish the session".into(),
            });
        }
        if chunk.len() > self.settings.max_chunk_bytes {
            return Err(SessionError::TooLarge {
                field: "body",
                limit_name: "WRITE_SESSION_MAX_CHUNK_BYTES",
                limit: self.settings.max_chunk_bytes,
                message: format!(
                    "the chunk is {} bytes, above the limit of {} bytes (WRITE_SESSION_MAX_CHUNK_BYTES); send it in smaller chunks; nothing was appended",
                    chunk.len(),
                    self.settings.max_chunk_bytes
                ),
            });
        }
        for _ in 0..APPEND_ATTEMPTS {
            let session = self.load(who, id).await?;
            if session.state != SessionState::AwaitingContent {
                return Err(not_taking_content(&session));
            }
            let total = session.bytes_received as usize + chunk.len();
            if total > self.settings.max_bytes {
                return Err(SessionError::TooLarge {
                    field: "body",
                    limit_name: "WRITE_SESSION_MAX_BYTES",
                    limit: self.settings.max_bytes,
                    message: format!(
                        "the session would hold {total} bytes, above the limit of {} bytes (WRITE_SESSION_MAX_BYTES); nothing was appended",
                        self.settings.max_bytes
                    ),
                });
            }
            let tail = next_tail(&session.tail, chunk);
            let appended = self
                .store
                .append_write_session_chunk(&ChunkAppend {
                    session_id: session.id,
                    seq: session.chunks + 1,
                    content: chunk,
                    bytes_received: total as i64,
                    tail: &tail,
                    at: Utc::now(),
                })
                .await?;
            if !appended {
                // Another chunk took this place (or the session moved on): look again, after a
                // short random pause so the racers do not collide in step.
                let pause = rand::random_range(1..10);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                continue;
            }
            // A tail with nothing before `DONE` holds the whole content (it is shorter than
            // TAIL_BYTES), so `DONE` alone is seen as the whole content too.
            let ends_with_done = strip_done(&tail).is_some();
            if ends_with_done {
                return self.finalise(who, session.id, true).await;
            }
            let session = self.reload(session.id).await?;
            return self.view(session, None).await;
        }
        Err(SessionError::Conflict {
            state: SessionState::AwaitingContent,
            message: "other chunks kept arriving for this session at the same time; send chunks one after another".into(),
        })
    }

    /// Finalises explicitly (the content need not end with `DONE`). A finished session answers
    /// with its receipt again.
    pub async fn finish(&self, who: &SessionCaller, id: &str) -> Result<SessionView, SessionError> {
        let session = self.load(who, id).await?;
        let session = self.settled(session).await?;
        match session.state {
            SessionState::Done => self.view(session, None).await,
            SessionState::AwaitingContent => self.finalise(who, session.id, false).await,
            _ => Err(not_finishable(&session)),
        }
    }

    /// One round of corrections for a session in `needs_corrections`, then finalisation again.
    pub async fn correct(
        &self,
        who: &SessionCaller,
        id: &str,
        corrections: &[Correction],
    ) -> Result<SessionView, SessionError> {
        let session = self.load(who, id).await?;
        if session.state != SessionState::NeedsCorrections {
            return Err(SessionError::Conflict {
                state: self.effective_state(&session, Utc::now()),
                message: format!(
                    "the session is {}, not needs_corrections; corrections are taken only after finalisation found invalid UTF-8",
                    self.effective_state(&session, Utc::now())
                ),
            });
        }
        let content = self.store.write_session_content(session.id).await?;
        let invalid = invalid_utf8_sequences(&content, usize::MAX);
        let mut edits: Vec<(usize, usize, &str)> = Vec::with_capacity(corrections.len());
        for (i, c) in corrections.iter().enumerate() {
            let Some(found) = invalid.iter().find(|s| s.offset == c.offset) else {
                return Err(SessionError::Invalid {
                    field: format!("corrections[{i}].offset"),
                    message: format!(
                        "no invalid sequence starts at byte offset {}; the session lists the offsets to correct; nothing was changed",
                        c.offset
                    ),
                });
            };
            if edits.iter().any(|(offset, _, _)| *offset == c.offset) {
                return Err(SessionError::Invalid {
                    field: format!("corrections[{i}].offset"),
                    message: format!(
                        "byte offset {} is corrected twice; nothing was changed",
                        c.offset
                    ),
                });
            }
            edits.push((c.offset, found.bytes_hex.len() / 2, c.replacement.as_str()));
        }
        edits.sort_by_key(|(offset, _, _)| std::cmp::Reverse(*offset));
        let mut corrected = content;
        for (offset, len, replacement) in edits {
            corrected.splice(offset..offset + len, replacement.bytes());
        }
        if corrected.len() > self.settings.max_bytes {
            return Err(SessionError::TooLarge {
                field: "corrections",
                limit_name: "WRITE_SESSION_MAX_BYTES",
                limit: self.settings.max_bytes,
                message: format!(
                    "the corrected content would be {} bytes, above the limit of {} bytes (WRITE_SESSION_MAX_BYTES); nothing was changed",
                    corrected.len(),
                    self.settings.max_bytes
                ),
            });
        }
        // Straight to `finalizing`: no chunk may slip in between the correction and the write.
        let claimed = self
            .store
            .transition_write_session(
                session.id,
                &SessionTransition {
                    count_correction: true,
                    content: Some(&corrected),
                    ..SessionTransition::new(
                        &[SessionState::NeedsCorrections],
                        SessionState::Finalizing,
                    )
                },
            )
            .await?;
        let session = self.reload(session.id).await?;
        if !claimed {
            return Err(not_finishable(&session));
        }
        self.write_claimed(who, session, corrected).await
    }

    /// A session another request is finalising, once that request is through (or after
    /// [`SETTLE_WAIT`]): a finish that raced another answers with the same receipt.
    async fn settled(&self, mut session: WriteSession) -> Result<WriteSession, SessionError> {
        let until = tokio::time::Instant::now() + SETTLE_WAIT;
        while session.state == SessionState::Finalizing && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(25)).await;
            session = self.reload(session.id).await?;
        }
        Ok(session)
    }

    /// Expires `session` if it was abandoned, or fails it if its finalisation was interrupted
    /// (the process stopped between claiming it and recording the write); returns it as it now is.
    async fn expire_if_abandoned(&self, session: WriteSession) -> Result<WriteSession, StoreError> {
        let now = Utc::now();
        if session.updated_at >= self.expiry_cutoff(now) {
            return Ok(session);
        }
        if session.state.is_open() {
            expire(self.store, &session, self.settings.ttl).await?;
        } else if session.state == SessionState::Finalizing {
            let message = format!(
                "the finalisation of this session was interrupted (the server stopped); whether the file was written is in the audit log, under route {}",
                finalising_route(session.id)
            );
            self.store
                .transition_write_session(
                    session.id,
                    &SessionTransition {
                        at: now,
                        error: Some(&message),
                        ..SessionTransition::new(&[SessionState::Finalizing], SessionState::Failed)
                    },
                )
                .await?;
        } else {
            return Ok(session);
        }
        Ok(self
            .store
            .get_write_session(session.id)
            .await?
            .unwrap_or(session))
    }

    fn expiry_cutoff(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now - chrono::Duration::from_std(self.settings.ttl).unwrap_or(chrono::Duration::MAX)
    }

    fn effective_state(&self, session: &WriteSession, now: DateTime<Utc>) -> SessionState {
        let idle = chrono::Duration::from_std(self.settings.idle).unwrap_or(chrono::Duration::MAX);
        if session.state == SessionState::AwaitingContent && now - session.updated_at >= idle {
            SessionState::AwaitingDoneOrMoreContent
        } else {
            session.state
        }
    }

    /// The caller's session by id: another caller's, an unknown one or a malformed id is 404.
    async fn load(&self, who: &SessionCaller, raw: &str) -> Result<WriteSession, SessionError> {
        let not_found = || SessionError::NotFound(raw.to_string());
        let id = Uuid::parse_str(raw).map_err(|_| not_found())?;
        let session = self
            .store
            .get_write_session(id)
            .await?
            .filter(|s| s.caller == who.caller)
            .ok_or_else(not_found)?;
        Ok(self.expire_if_abandoned(session).await?)
    }

    async fn reload(&self, id: Uuid) -> Result<WriteSession, SessionError> {
        self.store
            .get_write_session(id)
            .await?
            .ok_or_else(|| SessionError::NotFound(id.to_string()))
    }

    /// Claims the session (`awaiting_content` → `finalizing`, so only one request finalises),
    /// checks the content and writes it, or asks for corrections.
    async fn finalise(
        &self,
        who: &SessionCaller,
        id: Uuid,
        strip_done_line: bool,
    ) -> Result<SessionView, SessionError> {
        let claimed = self
            .store
            .transition_write_session(
                id,
                &SessionTransition::new(&[SessionState::AwaitingContent], SessionState::Finalizing),
            )
            .await?;
        let session = self.reload(id).await?;
        if !claimed {
            let session = self.settled(session).await?;
            return match session.state {
                SessionState::Done => self.view(session, None).await,
                _ => Err(not_finishable(&session)),
            };
        }
        let mut content = self.store.write_session_content(id).await?;
        if strip_done_line && let Some(before) = strip_done(&content) {
            content.truncate(before.len());
            if std::str::from_utf8(&content).is_err() {
                // Corrections' offsets are offsets into what will be written: without the line.
                self.store
                    .transition_write_session(
                        id,
                        &SessionTransition {
                            content: Some(&content),
                            ..SessionTransition::new(
                                &[SessionState::Finalizing],
                                SessionState::Finalizing,
                            )
                        },
                    )
                    .await?;
            }
        }
        self.write_claimed(who, session, content).await
    }

    /// Writes a session this request moved to `finalizing`, or asks for corrections.
    async fn write_claimed(
        &self,
        who: &SessionCaller,
        session: WriteSession,
        mut content: Vec<u8>,
    ) -> Result<SessionView, SessionError> {
        let id = session.id;
        let mut replaced_invalid = 0;
        if std::str::from_utf8(&content).is_err() {
            if session.correction_rounds < i64::from(MAX_CORRECTION_ROUNDS) {
                self.store
                    .transition_write_session(
                        id,
                        &SessionTransition::new(
                            &[SessionState::Finalizing],
                            SessionState::NeedsCorrections,
                        ),
                    )
                    .await?;
                let session = self.reload(id).await?;
                return self.view(session, Some(&content)).await;
            }
            replaced_invalid = invalid_utf8_sequences(&content, usize::MAX).len();
            content = String::from_utf8_lossy(&content).into_owned().into_bytes();
        }
        let path = SandboxPath::parse_nonempty(&session.target_file)?;
        let written = direct::write(
            self.store,
            self.workspace,
            DirectWrite {
                request_id: who.request_id,
                caller: who.caller.clone(),
                scope: who.scope,
                route: finalising_route(id),
                spec: WriteSpec {
                    path: path.clone(),
                    content,
                    mode: session.operation,
                    expected_sha256: None,
                    create_dirs: session.create_dirs,
                },
            },
        )
        .await;
        match written {
            Ok(receipt) => {
                let receipt = SessionReceipt {
                    path: path.to_string(),
                    operation: receipt.operation,
                    sha256: receipt.sha256,
                    bytes: receipt.bytes,
                    operation_id: receipt.operation_id,
                    request_id: who.request_id,
                    replaced_invalid,
                };
                let json = serde_json::to_value(&receipt)
                    .map_err(|e| StoreError::Other(format!("receipt: {e}")))?;
                self.store
                    .transition_write_session(
                        id,
                        &SessionTransition {
                            receipt: Some(&json),
                            drop_content: true,
                            ..SessionTransition::new(
                                &[SessionState::Finalizing],
                                SessionState::Done,
                            )
                        },
                    )
                    .await?;
                let session = self.reload(id).await?;
                self.view(session, None).await
            }
            Err(e) => {
                let message = e.to_string();
                if let Err(store) = self
                    .store
                    .transition_write_session(
                        id,
                        &SessionTransition {
                            error: Some(&message),
                            ..SessionTransition::new(
                                &[SessionState::Finalizing],
                                SessionState::Failed,
                            )
                        },
                    )
                    .await
                {
                    tracing::warn!(error = %store, session = %id, "could not mark a write session failed");
                }
                Err(match e {
                    WriteError::AlreadyExists { path } => SessionError::AlreadyExists { path },
                    other => SessionError::Write(other),
                })
            }
        }
    }

    /// What the caller sees; `content` is the session's content when the caller just sent it
    /// (else it is read back when the state lists invalid sequences).
    async fn view(
        &self,
        session: WriteSession,
        content: Option<&[u8]>,
    ) -> Result<SessionView, SessionError> {
        let now = Utc::now();
        let state = self.effective_state(&session, now);
        let invalid_utf8 = if state == SessionState::NeedsCorrections {
            match content {
                Some(content) => invalid_utf8_sequences(content, MAX_INVALID_LISTED),
                None => invalid_utf8_sequences(
                    &self.store.write_session_content(session.id).await?,
                    MAX_INVALID_LISTED,
                ),
            }
        } else {
            Vec::new()
        };
        let message = match state {
            SessionState::AwaitingDoneOrMoreContent => Some(DONE_PROMPT.to_string()),
            SessionState::NeedsCorrections => Some(format!(
                "The content is not valid UTF-8 at {} place(s). Send corrections (byte offset and replacement text) — round {} of {}; after that, what is still invalid becomes U+FFFD and the file is written.",
                invalid_utf8.len(),
                session.correction_rounds + 1,
                MAX_CORRECTION_ROUNDS
            )),
            _ => None,
        };
        let receipt = session
            .receipt
            .as_ref()
            .and_then(|r| serde_json::from_value(r.clone()).ok());
        Ok(SessionView {
            id: session.id,
            state,
            target_file: session.target_file,
            operation: session.operation,
            intent: session.intent,
            bytes_received: session.bytes_received,
            chunks: session.chunks,
            created_at: session.created_at,
            updated_at: session.updated_at,
            expires_at: state.is_open().then(|| {
                session.updated_at
                    + chrono::Duration::from_std(self.settings.ttl).unwrap_or(chrono::Duration::MAX)
            }),
            message,
            invalid_utf8,
            correction_rounds: session.correction_rounds,
            max_correction_rounds: MAX_CORRECTION_ROUNDS,
            receipt,
            error: session.error,
        })
    }
}

fn not_taking_content(session: &WriteSession) -> SessionError {
    let message = match session.state {
        SessionState::Done => "the session is done; its file is written; begin a new session for more content".to_string(),
        SessionState::NeedsCorrections => "the session needs corrections, not content: send them to /write_sessions/{id}/corrections".to_string(),
        state => format!("the session is {state} and takes no more content"),
    };
    SessionError::Conflict {
        state: session.state,
        message,
    }
}

fn not_finishable(session: &WriteSession) -> SessionError {
    let message = match session.state {
        SessionState::NeedsCorrections => {
            "the session needs corrections before it can be written".to_string()
        }
        SessionState::Finalizing => "the session is being finalised by another request".to_string(),
        SessionState::Failed => format!(
            "the session failed: {}",
            session.error.as_deref().unwrap_or("unknown error")
        ),
        state => format!("the session is {state} and cannot be finalised"),
    };
    SessionError::Conflict {
        state: session.state,
        message,
    }
}

/// Expires one abandoned session and records it in the audit log: a request and a failed
/// operation on the target, so the log shows content that was begun and never written. Only
/// the caller that moves the session records it (replicas may sweep at once).
async fn expire(
    store: &dyn AuditStore,
    session: &WriteSession,
    ttl: Duration,
) -> Result<bool, StoreError> {
    let now = Utc::now();
    let message = format!(
        "write session {} expired after {} s without activity ({} bytes in {} chunks received); nothing was written",
        session.id,
        ttl.as_secs(),
        session.bytes_received,
        session.chunks
    );
    let moved = store
        .transition_write_session(
            session.id,
            &SessionTransition {
                at: now,
                error: Some(&message),
                drop_content: true,
                ..SessionTransition::new(&SessionState::OPEN_STORED, SessionState::Expired)
            },
        )
        .await?;
    if !moved {
        return Ok(false);
    }
    let request_id = Uuid::now_v7();
    store
        .insert_request(&NewRequest {
            id: request_id,
            received_at: now,
            route: "write session expiry".to_string(),
            caller: session.caller.clone(),
            // Nobody's key did this: writ expired the session.
            scope: None,
            idempotency_key: None,
            body_sha256: None,
        })
        .await?;
    crate::files::record_failure(
        store,
        request_id,
        FileKind::Direct,
        &session.target_file,
        &message,
        crate::files::Provenance {
            detail: Some(serde_json::json!({"write_session": {
                "id": session.id,
                "state": SessionState::Expired,
                "operation": session.operation,
                "bytes_received": session.bytes_received,
                "chunks": session.chunks,
                "created_at": session.created_at,
                "updated_at": session.updated_at,
            }})),
            ..crate::files::Provenance::default()
        },
    )
    .await?;
    store
        .finish_request(request_id, RequestStatus::Error, 0, None)
        .await?;
    Ok(true)
}

/// Expires every session abandoned for longer than the TTL (the periodic sweep); returns how
/// many this call expired.
pub async fn expire_abandoned(
    store: &dyn AuditStore,
    settings: &SessionSettings,
) -> Result<usize, StoreError> {
    let before =
        Utc::now() - chrono::Duration::from_std(settings.ttl).unwrap_or(chrono::Duration::MAX);
    let mut expired = 0;
    for session in store.abandoned_write_sessions(before, 500).await? {
        if expire(store, &session, settings.ttl).await? {
            expired += 1;
        }
    }
    Ok(expired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_line_is_found_with_or_without_its_newline() {
        assert_eq!(strip_done(b"a\nb\nDONE"), Some(&b"a\nb\n"[..]));
        assert_eq!(strip_done(b"a\nDONE\n"), Some(&b"a\n"[..]));
        assert_eq!(strip_done(b"a\r\nDONE\r\n"), Some(&b"a\r\n"[..]));
        assert_eq!(strip_done(b"DONE"), Some(&b""[..]));
        assert_eq!(strip_done(b"NOT DONE"), None);
        assert_eq!(strip_done(b"a\nDONE\n\n"), None);
        assert_eq!(strip_done(b"a\nDONE!"), None);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_across_chunks() {
        let tail = next_tail(b"0123456789abcdef", b"\nDO");
        assert_eq!(tail.len(), TAIL_BYTES);
        let tail = next_tail(&tail, b"NE\n");
        assert_eq!(strip_done(&tail).map(<[u8]>::len), Some(TAIL_BYTES - 5));
    }

    #[test]
    fn every_state_reads_back_from_its_name() {
        for state in SessionState::ALL {
            assert_eq!(state.as_str().parse::<SessionState>(), Ok(state));
        }
    }
}
