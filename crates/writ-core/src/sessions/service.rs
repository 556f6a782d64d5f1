//! The operations on a write session: begin, append a chunk, finish, correct, and the view a
//! caller gets back.

use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use super::content::next_tail;
use super::error::{not_finishable, not_taking_content};
use super::{
    BeginSession, ChunkAppend, Correction, DONE_PROMPT, MAX_CORRECTION_ROUNDS, MAX_INVALID_LISTED,
    SessionError, SessionReceipt, SessionState, SessionTransition, SessionView, WriteSession,
    strip_done,
};
use crate::audit::AuditStore;
use crate::content::invalid_utf8_sequences;
use crate::direct::{self, DirectWrite};
use crate::files::{WriteError, WriteMode, WriteSpec};
use crate::path::RepoPath;
use crate::store::StoreError;
use crate::workspace::Workspace;

/// How long a finish waits for another request's finalisation of the same session.
const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// Optimistic retries of an append that raced other appends to the same session: each round
/// one of them wins, so this many racing chunks all get in.
const APPEND_ATTEMPTS: usize = 32;

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

/// Everything a session operation needs.
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    pub store: &'a dyn AuditStore,
    pub workspace: &'a dyn Workspace,
    pub settings: &'a SessionSettings,
    /// Whether a session that did not say is proposed for review (`WRIT_REVIEW`), and for how
    /// long its change set may be applied.
    pub review: &'a crate::changes::ReviewSettings,
}

/// Who asks, and under which request id a finalising write is recorded.
#[derive(Debug, Clone)]
pub struct SessionCaller {
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the call, recorded with a finalising write.
    pub scope: Option<crate::keys::Scope>,
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
        let path = RepoPath::parse_nonempty(&begin.target_file)?;
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
            commit: begin.commit,
            review: begin.review,
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
            workspace: self.workspace.name().to_owned(),
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

    /// The caller's session by id: another caller's, an unknown one or a malformed id is 404.
    async fn load(&self, who: &SessionCaller, raw: &str) -> Result<WriteSession, SessionError> {
        let not_found = || SessionError::NotFound(raw.to_string());
        let id = Uuid::parse_str(raw).map_err(|_| not_found())?;
        let session = self
            .store
            .get_write_session(id)
            .await?
            // Another workspace's session is as absent as another caller's.
            .filter(|s| s.caller == who.caller && s.workspace == self.workspace.name())
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
        let path = RepoPath::parse_nonempty(&session.target_file)?;
        if self.review.wanted(session.review) {
            let proposed = super::review::propose_content(
                self.store,
                self.workspace,
                who,
                &session,
                path,
                content,
                self.review.ttl,
            )
            .await
            .map(|mut receipt| {
                receipt.replaced_invalid = replaced_invalid;
                receipt
            });
            return self.settle_write(id, proposed).await;
        }
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
        .await
        .map(|receipt| SessionReceipt {
            path: path.to_string(),
            operation: receipt.operation,
            sha256: receipt.sha256,
            bytes: receipt.bytes,
            operation_id: receipt.operation_id,
            request_id: who.request_id,
            replaced_invalid,
            change_id: None,
        });
        self.settle_write(id, written).await
    }

    /// The session this request finalised, moved to `done` with the receipt of its write (or
    /// its proposal), or to `failed` with why.
    async fn settle_write(
        &self,
        id: Uuid,
        written: Result<SessionReceipt, WriteError>,
    ) -> Result<SessionView, SessionError> {
        match written {
            Ok(receipt) => {
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
            commit: session.commit,
            review: session.review,
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
            overlaps: Vec::new(),
        })
    }
}
