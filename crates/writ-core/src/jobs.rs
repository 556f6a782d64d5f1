//! Jobs: every `write_codebase` batch, synchronous or not, as a row that outlives the process,
//! with the progress events it emitted.
//!
//! A job's id is its request id. On PostgreSQL a job is owned by the replica running it through a
//! lease it renews ([`JobStore::renew_lease`]); a job whose lease lapsed (its replica was killed,
//! or handed it back when stopping) is claimed by another replica ([`JobStore::take_over_jobs`]) and
//! resumed from its operations. On SQLite (one process) a job carries no lease: one whose
//! heartbeat stopped is found by [`JobStore::stale_jobs`] and failed with a reason, never silently
//! lost. Events are numbered per job from 1, so `Last-Event-ID` can replay what a subscriber
//! missed, from any replica.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::StoreError;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    /// Ran to the end; the batch's own status is in `batch_status`.
    Done,
    /// Interrupted (crash, restart, shutdown) before it ended, or resumed too often; `error`
    /// says why.
    Failed,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed)
    }
}

impl std::str::FromStr for JobStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "queued" => Ok(Self::Queued),
            "running" => Ok(Self::Running),
            "done" => Ok(Self::Done),
            "failed" => Ok(Self::Failed),
            other => Err(format!("unknown job status: {other}")),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    /// Whether the caller asked not to wait (`Prefer: respond-async`).
    pub is_async: bool,
    /// The batch's file paths, for listings.
    pub files: Vec<String>,
    /// The replica running it and until when, where replicas share jobs; `None` on a
    /// single-process store.
    pub lease: Option<Lease>,
    /// The request body as the caller sent it, so another replica can resume the batch.
    pub request: Option<String>,
    /// The workspace the batch writes in, so that a replica resuming it writes in the same one.
    pub workspace: String,
}

impl Default for NewJob {
    fn default() -> Self {
        Self {
            id: Uuid::nil(),
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            is_async: false,
            files: Vec::new(),
            lease: None,
            request: None,
            workspace: default_workspace(),
        }
    }
}

/// Who runs a job, and until when that holds unless renewed.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub owner: String,
    pub until: DateTime<Utc>,
}

/// A job this replica has just claimed because its lease lapsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedJob {
    pub job: Job,
    /// The request body recorded with the job (`None` for jobs recorded without one).
    pub request: Option<String>,
    /// How many times the job has been claimed after its first run, this claim included
    /// (also in `job.attempts`).
    pub attempts: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: Uuid,
    pub status: JobStatus,
    pub is_async: bool,
    pub files: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// `success`, `partial_success` or `error` once done.
    pub batch_status: Option<String>,
    /// The same body the synchronous call returns, once done.
    pub response: Option<serde_json::Value>,
    pub error: Option<String>,
    /// How many times another run took the job over after its first (its replica died or
    /// stopped): 0 for a job that ran once.
    #[serde(default)]
    pub attempts: i64,
    /// The workspace the batch writes in (`default`: `REPO_DIR`).
    #[serde(default = "default_workspace")]
    pub workspace: String,
}

fn default_workspace() -> String {
    crate::workspace_registry::WorkspaceName::DEFAULT.to_owned()
}

/// Which jobs [`JobStore::list_jobs`] answers; the fields combine with AND.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    /// Only the jobs of the requests this key made.
    pub caller: Option<String>,
    /// Only jobs in these workspaces (none at all when empty); `None` does not filter.
    pub workspaces: Option<Vec<String>>,
    /// Only jobs still queued or running.
    pub unfinished: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    pub job_id: Uuid,
    /// 1, 2, 3, … per job; the SSE `id:`.
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    /// The SSE `event:` name.
    pub name: String,
    pub data: serde_json::Value,
}

#[async_trait]
pub trait JobStore: Send + Sync {
    async fn insert_job(&self, job: &NewJob) -> Result<(), StoreError>;
    /// Moves a queued job to running, or refreshes a running job's heartbeat.
    async fn heartbeat_job(&self, id: Uuid, status: JobStatus) -> Result<(), StoreError>;
    /// Ends a job. Only a job not already final is changed (a stale-job sweep and the job's own
    /// end must not overwrite each other); returns whether this call ended it.
    async fn finish_job(
        &self,
        id: Uuid,
        status: JobStatus,
        batch_status: Option<&str>,
        response: Option<&serde_json::Value>,
        error: Option<&str>,
    ) -> Result<bool, StoreError>;
    /// The job and its answer: its own, or else that of the request with its id (a batch stores
    /// its answer once, on its request).
    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError>;
    /// The request body recorded with the job (`None`: no such job, or none was recorded): what
    /// a batch asked for, e.g. the commands its candidates were checked with.
    async fn job_request(&self, id: Uuid) -> Result<Option<String>, StoreError>;
    /// The jobs `filter` lets through, newest first, without response bodies.
    async fn list_jobs(&self, filter: &JobFilter, limit: u32) -> Result<Vec<Job>, StoreError>;
    /// Jobs still queued or running, without a lease, whose heartbeat is older than `before`
    /// (leased jobs are claimed and resumed instead).
    async fn stale_jobs(&self, before: DateTime<Utc>) -> Result<Vec<Job>, StoreError>;
    /// Extends `owner`'s lease on an unfinished job to `until` (and refreshes its heartbeat);
    /// false when the job is no longer `owner`'s or has ended, so its batch must stop.
    async fn renew_lease(
        &self,
        id: Uuid,
        owner: &str,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Ends `owner`'s lease at once, so another replica may claim the job now; `reason` is kept
    /// in the job's `error` while it waits. False when the job was not `owner`'s.
    async fn release_lease(
        &self,
        id: Uuid,
        owner: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError>;
    /// Takes over at most `limit` unfinished jobs whose lease lapsed before `now`: `owner` holds
    /// them until `until`, each claim counted in `attempts`. Replicas claiming together never
    /// take the same job (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    async fn take_over_jobs(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ClaimedJob>, StoreError>;
    async fn append_job_event(&self, event: &JobEvent) -> Result<(), StoreError>;
    /// Several events in one statement (one commit): events come in bursts, and a commit each
    /// was most of a batch's database time.
    async fn append_job_events(&self, events: &[JobEvent]) -> Result<(), StoreError>;
    /// Events with `seq > after`, in order, at most `limit`.
    async fn job_events(
        &self,
        id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<JobEvent>, StoreError>;
}
