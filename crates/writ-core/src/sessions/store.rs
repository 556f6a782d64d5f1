//! The store port of write sessions: every state change is conditional on the state it leaves.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{ChunkAppend, SessionTransition, WriteSession};
use crate::store::StoreError;

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
