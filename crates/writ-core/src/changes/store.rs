//! The store port of change sets. They are written through [`crate::audit::AuditLog::commit`]
//! (`ProposeChange`, `DecideChange`, `WithdrawDecision`), so a proposal commits with its
//! request's records and a decision with the writes it makes; this port reads them.

use async_trait::async_trait;
use uuid::Uuid;

use super::{ChangeFilter, ChangeSet, FileContents};
use crate::store::StoreError;

#[async_trait]
pub trait ChangeStore: Send + Sync {
    /// The change set with its files and decisions (without the files' contents).
    async fn get_change(&self, id: Uuid) -> Result<Option<ChangeSet>, StoreError>;
    /// Change sets as `filter` asks, newest first, at most `limit`.
    async fn list_changes(
        &self,
        filter: &ChangeFilter,
        limit: u32,
    ) -> Result<Vec<ChangeSet>, StoreError>;
    /// What each file of change set `id` held and what is proposed for it, in the set's order.
    async fn change_contents(&self, id: Uuid) -> Result<Vec<FileContents>, StoreError>;
}
