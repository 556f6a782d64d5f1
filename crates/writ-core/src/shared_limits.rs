//! Per-key limits shared by replicas: the request rate's token bucket and the batches a key runs
//! at once, held in the database every replica uses (PostgreSQL), so that a key limited to N
//! batches cannot run N on each replica. A single process keeps them in memory instead.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::store::StoreError;

#[async_trait]
pub trait LimitStore: Send + Sync {
    /// Takes one request from `caller`'s bucket (refilled at `per_sec`, holding at most
    /// `burst`): `None` when taken, else how many seconds until a token is there.
    async fn take_token(
        &self,
        caller: &str,
        per_sec: f64,
        burst: f64,
    ) -> Result<Option<f64>, StoreError>;

    /// Takes one of `caller`'s `max` batch slots as `slot`, for the batch whose job is `job`
    /// (a key's slot is the job's id itself; a workspace's has its own), held by `holder` until
    /// `until` unless renewed; false when all are taken. Where jobs are leased, the slot of an
    /// unfinished job does not lapse: it passes to the replica that claims the job, and is given
    /// back when the job ends. A `slot` already held (the same batch again) is counted once.
    async fn take_batch_slot(
        &self,
        caller: &str,
        slot: Uuid,
        job: Uuid,
        holder: &str,
        max: i64,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Gives a slot back, unless its job is unfinished (handed back, or its lease lost): the
    /// replica that resumes the job holds it until the job ends.
    async fn release_batch_slot(&self, slot: Uuid) -> Result<(), StoreError>;

    /// Extends every slot `holder` holds to `until`.
    async fn renew_batch_slots(&self, holder: &str, until: DateTime<Utc>)
    -> Result<(), StoreError>;
}
