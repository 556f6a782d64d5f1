//! [`ClaimStore`] for both backends: the `workspace_claims` table of postgres 0027, sqlite 0022.
//! A claim is one row; what its globs cover is read in Rust (`writ_core::claims`), from the
//! live claims of one repository.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::claims::{Claim, ClaimStore};

use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! claim_columns {
    () => {
        "id, repository, workspace, paths, created_at, expires_at, created_by"
    };
}

fn claim_from_row<D: Dialect>(row: &D::Row) -> Result<Claim, StoreError> {
    let row = Record::<D>(row);
    let paths: Json<Vec<String>> = row.get("paths")?;
    Ok(Claim {
        id: row.get("id")?,
        repository: row.get("repository")?,
        workspace: row.get("workspace")?,
        paths: paths.0,
        created_at: row.time("created_at")?,
        expires_at: row.time("expires_at")?,
        created_by: row.get("created_by")?,
    })
}

#[async_trait]
impl<D: Dialect> ClaimStore for SqlStore<D> {
    async fn insert_claim(&self, claim: &Claim) -> Result<(), StoreError> {
        let mut expired = Sql::<D>::new("DELETE FROM workspace_claims WHERE repository = ");
        expired
            .bind(claim.repository.as_str())
            .push(" AND expires_at <= ")
            .bind_time(claim.created_at);
        expired.execute(self, "forget expired claims").await?;
        let mut sql = Sql::new(concat!(
            "INSERT INTO workspace_claims (",
            claim_columns!(),
            ") VALUES "
        ));
        sql.tuple(|row| {
            row.bind(claim.id)
                .bind(claim.repository.as_str())
                .bind(claim.workspace.as_str())
                .bind(Json(claim.paths.as_slice()))
                .bind_time(claim.created_at)
                .bind_time(claim.expires_at)
                .bind(claim.created_by.as_deref());
        });
        sql.execute(self, "insert claim").await?;
        Ok(())
    }

    async fn live_claims(
        &self,
        repository: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Claim>, StoreError> {
        let mut sql = Sql::<D>::new(concat!(
            "SELECT ",
            claim_columns!(),
            " FROM workspace_claims WHERE repository = "
        ));
        sql.bind(repository)
            .push(" AND expires_at > ")
            .bind_time(now)
            .push(" ORDER BY created_at, id");
        let rows = sql.fetch_all(self, "list live claims").await?;
        rows.iter().map(claim_from_row::<D>).collect()
    }

    async fn release_claim(
        &self,
        workspace: &str,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut sql = Sql::<D>::new("DELETE FROM workspace_claims WHERE id = ");
        sql.bind(id)
            .push(" AND workspace = ")
            .bind(workspace)
            .push(" AND expires_at > ")
            .bind_time(now);
        Ok(sql.execute(self, "release claim").await? > 0)
    }

    async fn release_claims(&self, workspace: &str, now: DateTime<Utc>) -> Result<u64, StoreError> {
        // The expired ones first, so that the count is of the claims that still held.
        let mut expired = Sql::<D>::new("DELETE FROM workspace_claims WHERE workspace = ");
        expired
            .bind(workspace)
            .push(" AND expires_at <= ")
            .bind_time(now);
        expired.execute(self, "forget expired claims").await?;
        let mut sql = Sql::<D>::new("DELETE FROM workspace_claims WHERE workspace = ");
        sql.bind(workspace);
        sql.execute(self, "release claims").await
    }
}
