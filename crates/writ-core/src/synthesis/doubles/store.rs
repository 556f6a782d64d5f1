//! An audit store in memory that keeps only what the writing stage records (operations), and
//! refuses everything else: the stages under test never read jobs, keys or sessions.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::audit::{
    AuditLog, AuditWrite, Cursor, NewRequest, Operation, OperationFilter, OperationOutcome,
    OperationPage, RecentOperation, RequestRecord, RequestStatus,
};
use crate::budgets::{BudgetStore, Spend, SpendEntry, SpendHolder, SpendLedger};
use crate::changes::{ChangeFilter, ChangeSet, ChangeStore, FileContents};
use crate::claims::{Claim, ClaimStore};
use crate::jobs::{ClaimedJob, Job, JobEvent, JobStatus, JobStore, NewJob};
use crate::keys::{ApiKeyRecord, KeyStore};
use crate::sessions::{ChunkAppend, SessionStore, SessionTransition, WriteSession};
use crate::store::StoreError;
use crate::workspace_registry::{WorkspaceRecord, WorkspaceStore};

#[derive(Default)]
pub struct MemoryStore {
    /// Every operation recorded, in its latest state.
    pub operations: Mutex<Vec<Operation>>,
    /// Who holds the one job's lease, for tests of a lease's hold (`None`: renewals are refused
    /// as if the store kept no jobs).
    pub lease_owner: Mutex<Option<String>>,
    /// Renewals asked of the store.
    pub renewals: std::sync::atomic::AtomicUsize,
    /// While set, the store cannot be reached.
    pub unreachable: std::sync::atomic::AtomicBool,
    /// Change sets with their contents, in the order proposed.
    pub changes: Mutex<Vec<(ChangeSet, Vec<FileContents>)>>,
    /// Every addition to the spend ledger, in order.
    pub spend: Mutex<Vec<SpendEntry>>,
}

impl MemoryStore {
    fn insert(&self, op: &Operation) {
        if let Ok(mut ops) = self.operations.lock() {
            ops.push(op.clone());
        }
    }

    fn complete(&self, id: Uuid, outcome: &OperationOutcome) -> Result<(), StoreError> {
        let mut ops = self
            .operations
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        let op = ops
            .iter_mut()
            .find(|op| op.id == id)
            .ok_or_else(|| StoreError::Other(format!("no operation {id}")))?;
        op.status = outcome.status;
        op.operation = outcome.operation;
        op.error = outcome.error.clone();
        op.finished_at = Some(outcome.finished_at);
        Ok(())
    }
}

impl MemoryStore {
    fn reachable(&self) -> Result<(), StoreError> {
        if self.unreachable.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the store is away".into()));
        }
        Ok(())
    }
}

fn not_kept() -> StoreError {
    StoreError::Other("the in-memory store keeps only operations".into())
}

#[async_trait]
impl AuditLog for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }
    fn single_process(&self) -> bool {
        true
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn is_migrated(&self) -> Result<bool, StoreError> {
        Ok(true)
    }
    async fn commit(&self, writes: Vec<AuditWrite>) -> Result<(), StoreError> {
        let mut changes = self
            .changes
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        // All or nothing, as a transaction: a decision whose number is taken refuses the lot.
        for write in &writes {
            if let AuditWrite::DecideChange {
                change_id,
                decision,
                ..
            } = write
            {
                let taken = changes
                    .iter()
                    .find(|(c, _)| c.id == *change_id)
                    .is_none_or(|(c, _)| c.decisions.iter().any(|d| d.seq == decision.seq));
                if taken {
                    return Err(StoreError::Conflict(format!(
                        "decision {} of change set {change_id} is taken",
                        decision.seq
                    )));
                }
            }
        }
        for write in writes {
            match write {
                AuditWrite::InsertOperation { operation, .. } => self.insert(&operation),
                AuditWrite::CompleteOperation { id, outcome } => self.complete(id, &outcome)?,
                AuditWrite::ProposeChange { change, contents } => {
                    changes.push((*change, contents));
                }
                AuditWrite::DecideChange {
                    change_id,
                    decision,
                    ..
                } => {
                    if let Some((c, _)) = changes.iter_mut().find(|(c, _)| c.id == change_id) {
                        c.decisions.push(decision);
                    }
                }
                AuditWrite::WithdrawDecision { change_id, seq, .. } => {
                    if let Some((c, _)) = changes.iter_mut().find(|(c, _)| c.id == change_id) {
                        c.decisions.retain(|d| d.seq != seq);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
    async fn insert_request(&self, _req: &NewRequest) -> Result<(), StoreError> {
        Ok(())
    }
    async fn finish_request(
        &self,
        _id: Uuid,
        _status: RequestStatus,
        _duration_ms: i64,
        _response: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    async fn get_request(&self, _id: Uuid) -> Result<Option<RequestRecord>, StoreError> {
        Ok(None)
    }
    async fn find_request_by_idempotency_key(
        &self,
        _caller: Option<&str>,
        _key: &str,
    ) -> Result<Option<RequestRecord>, StoreError> {
        Ok(None)
    }
    async fn insert_operation(
        &self,
        op: &Operation,
        _content: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.insert(op);
        Ok(())
    }
    async fn complete_operation(
        &self,
        id: Uuid,
        outcome: &OperationOutcome,
    ) -> Result<(), StoreError> {
        self.complete(id, outcome)
    }
    async fn get_operation(
        &self,
        id: Uuid,
    ) -> Result<Option<(Operation, Option<Vec<u8>>)>, StoreError> {
        let ops = self
            .operations
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        Ok(ops
            .iter()
            .find(|op| op.id == id)
            .map(|op| (op.clone(), None)))
    }
    async fn list_operations(
        &self,
        _filter: &OperationFilter,
        _cursor: Option<&Cursor>,
        _limit: u32,
    ) -> Result<OperationPage, StoreError> {
        Err(not_kept())
    }
    async fn recent_operations(
        &self,
        _caller: Option<&str>,
        _limit: u32,
    ) -> Result<Vec<RecentOperation>, StoreError> {
        Ok(Vec::new())
    }
    async fn pending_operations(&self) -> Result<Vec<Operation>, StoreError> {
        let ops = self
            .operations
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        Ok(ops
            .iter()
            .filter(|op| op.status == crate::audit::OperationStatus::Pending)
            .cloned()
            .collect())
    }
    async fn kept_content(&self, _sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }
    async fn prune_contents(&self, _before: DateTime<Utc>) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn record_commit(&self, _request: Uuid, _commit: &str) -> Result<(), StoreError> {
        Ok(())
    }
    async fn request_commit(&self, _request: Uuid) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
}

#[async_trait]
impl JobStore for MemoryStore {
    async fn insert_job(&self, _job: &NewJob) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn heartbeat_job(&self, _id: Uuid, _status: JobStatus) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn finish_job(
        &self,
        _id: Uuid,
        _status: JobStatus,
        _batch_status: Option<&str>,
        _response: Option<&serde_json::Value>,
        _error: Option<&str>,
    ) -> Result<bool, StoreError> {
        Err(not_kept())
    }
    async fn get_job(&self, _id: Uuid) -> Result<Option<Job>, StoreError> {
        Err(not_kept())
    }
    async fn job_request(&self, _id: Uuid) -> Result<Option<String>, StoreError> {
        Err(not_kept())
    }
    async fn list_jobs(
        &self,
        _filter: &crate::jobs::JobFilter,
        _limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        Err(not_kept())
    }
    async fn stale_jobs(&self, _before: DateTime<Utc>) -> Result<Vec<Job>, StoreError> {
        Err(not_kept())
    }
    async fn renew_lease(
        &self,
        _id: Uuid,
        owner: &str,
        _until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        use std::sync::atomic::Ordering;
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.unreachable.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the store is away".into()));
        }
        let held = self
            .lease_owner
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        match held.as_deref() {
            Some(holder) => Ok(holder == owner),
            None => Err(not_kept()),
        }
    }
    async fn release_lease(
        &self,
        _id: Uuid,
        _owner: &str,
        _reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        Err(not_kept())
    }
    async fn take_over_jobs(
        &self,
        _owner: &str,
        _now: DateTime<Utc>,
        _until: DateTime<Utc>,
        _limit: u32,
    ) -> Result<Vec<ClaimedJob>, StoreError> {
        Err(not_kept())
    }
    async fn append_job_event(&self, _event: &JobEvent) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn append_job_events(&self, _events: &[JobEvent]) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn job_events(
        &self,
        _id: Uuid,
        _after: i64,
        _limit: u32,
    ) -> Result<Vec<JobEvent>, StoreError> {
        Err(not_kept())
    }
}

#[async_trait]
impl KeyStore for MemoryStore {
    async fn create_key(&self, _key: &ApiKeyRecord) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        Err(not_kept())
    }
    async fn find_key(&self, _id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Err(not_kept())
    }
    async fn revoke_key(&self, _id: &str, _at: DateTime<Utc>) -> Result<bool, StoreError> {
        Err(not_kept())
    }
    async fn any_keys(&self) -> Result<bool, StoreError> {
        Err(not_kept())
    }
    async fn set_key_budget(
        &self,
        _id: &str,
        _budget: &crate::budgets::Budget,
    ) -> Result<bool, StoreError> {
        Err(not_kept())
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn insert_write_session(&self, _session: &WriteSession) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn get_write_session(&self, _id: Uuid) -> Result<Option<WriteSession>, StoreError> {
        Err(not_kept())
    }
    async fn append_write_session_chunk(
        &self,
        _append: &ChunkAppend<'_>,
    ) -> Result<bool, StoreError> {
        Err(not_kept())
    }
    async fn write_session_content(&self, _id: Uuid) -> Result<Vec<u8>, StoreError> {
        Err(not_kept())
    }
    async fn transition_write_session(
        &self,
        _id: Uuid,
        _change: &SessionTransition<'_>,
    ) -> Result<bool, StoreError> {
        Err(not_kept())
    }
    async fn count_open_write_sessions(
        &self,
        _caller: Option<&str>,
        _since: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Err(not_kept())
    }
    async fn abandoned_write_sessions(
        &self,
        _before: DateTime<Utc>,
        _limit: u32,
    ) -> Result<Vec<WriteSession>, StoreError> {
        Err(not_kept())
    }
}

#[async_trait]
impl WorkspaceStore for MemoryStore {
    async fn create_workspace(&self, _workspace: &WorkspaceRecord) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn list_workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError> {
        Err(not_kept())
    }
    async fn find_workspace(&self, _name: &str) -> Result<Option<WorkspaceRecord>, StoreError> {
        Err(not_kept())
    }
    async fn delete_workspace(
        &self,
        _name: &str,
    ) -> Result<crate::workspace_registry::WorkspaceDeletion, StoreError> {
        Err(not_kept())
    }
    async fn set_workspace_budget(
        &self,
        _name: &str,
        _budget: &crate::budgets::Budget,
    ) -> Result<bool, StoreError> {
        Err(not_kept())
    }
}

/// No budgets are set.
#[async_trait]
impl BudgetStore for MemoryStore {
    async fn key_budget(&self, _id: &str) -> Result<crate::budgets::Budget, StoreError> {
        Ok(crate::budgets::Budget::default())
    }
    async fn workspace_budget(&self, _name: &str) -> Result<crate::budgets::Budget, StoreError> {
        Ok(crate::budgets::Budget::default())
    }
}

/// No claims are kept: every path is free, and making one is refused.
#[async_trait]
impl ClaimStore for MemoryStore {
    async fn insert_claim(&self, _claim: &Claim) -> Result<(), StoreError> {
        Err(not_kept())
    }
    async fn live_claims(
        &self,
        _repository: &str,
        _now: DateTime<Utc>,
    ) -> Result<Vec<Claim>, StoreError> {
        Ok(Vec::new())
    }
    async fn release_claim(
        &self,
        _workspace: &str,
        _id: Uuid,
        _now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(false)
    }
    async fn release_claims(
        &self,
        _workspace: &str,
        _now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[async_trait]
impl SpendLedger for MemoryStore {
    async fn record_spend(&self, entry: &SpendEntry) -> Result<(), StoreError> {
        self.reachable()?;
        self.spend
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?
            .push(entry.clone());
        Ok(())
    }
    async fn spent(
        &self,
        holder: SpendHolder<'_>,
        since: DateTime<Utc>,
    ) -> Result<Spend, StoreError> {
        self.reachable()?;
        let day = since.date_naive();
        let entries = self
            .spend
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        let mut spend = Spend::default();
        for e in entries.iter().filter(|e| e.at.date_naive() >= day) {
            let theirs = match holder {
                SpendHolder::Key(id) => e.caller.as_deref() == Some(id),
                SpendHolder::Workspace(name) => e.workspace == name,
            };
            if theirs {
                spend.calls += e.calls;
                spend.tokens = spend.tokens.saturating_add_signed(e.tokens);
                spend.cost += e.cost;
            }
        }
        Ok(spend)
    }
}

#[async_trait]
impl ChangeStore for MemoryStore {
    async fn get_change(&self, id: Uuid) -> Result<Option<ChangeSet>, StoreError> {
        let changes = self
            .changes
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        Ok(changes
            .iter()
            .find(|(c, _)| c.id == id)
            .map(|(c, _)| c.clone()))
    }
    async fn list_changes(
        &self,
        filter: &ChangeFilter,
        limit: u32,
    ) -> Result<Vec<ChangeSet>, StoreError> {
        let changes = self
            .changes
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        Ok(changes
            .iter()
            .rev()
            .map(|(c, _)| c)
            .filter(|c| c.workspace == filter.workspace)
            .filter(|c| filter.caller.is_none() || c.caller == filter.caller)
            .filter(|c| {
                filter
                    .open_at
                    .is_none_or(|at| c.undecided() > 0 && c.expires_at > at)
            })
            .take(limit as usize)
            .cloned()
            .collect())
    }
    async fn change_contents(&self, id: Uuid) -> Result<Vec<FileContents>, StoreError> {
        let changes = self
            .changes
            .lock()
            .map_err(|_| StoreError::Other("poisoned".into()))?;
        Ok(changes
            .iter()
            .find(|(c, _)| c.id == id)
            .map(|(_, contents)| contents.clone())
            .unwrap_or_default())
    }
}
