//! [`WorkspaceStore`] for both backends: the `workspaces` table of postgres 0016, sqlite 0012
//! (each workspace's `git_commit`: postgres 0019, sqlite 0015); budgets in `workspace_budgets`
//! (postgres 0021, sqlite 0017). Deleting a workspace deletes its budget and its claims
//! (`workspace_claims`: postgres 0027, sqlite 0022) with it.

use async_trait::async_trait;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::budgets::Budget;
use writ_core::workspace_registry::{
    RUNNING_JOBS_NAMED, WorkspaceDeletion, WorkspaceName, WorkspaceRecord, WorkspaceStore,
};

use super::keys::bind_budget;
use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;
use crate::error::from_sqlx;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! workspace_columns {
    () => {
        "name, kind, root, source, branch, base_ref, created_at, created_by, git_commit"
    };
}

fn workspace_from_row<D: Dialect>(row: &D::Row) -> Result<WorkspaceRecord, StoreError> {
    let row = Record::<D>(row);
    let name: String = row.get("name")?;
    Ok(WorkspaceRecord {
        name: WorkspaceName::parse(&name)
            .map_err(|e| StoreError::Other(format!("column name: {e}")))?,
        kind: row.parse("kind")?,
        root: row.get("root")?,
        source: row.get("source")?,
        branch: row.get("branch")?,
        base_ref: row.get("base_ref")?,
        created_at: row.time("created_at")?,
        created_by: row.get("created_by")?,
        git_commit: row.get("git_commit")?,
    })
}

#[async_trait]
impl<D: Dialect> WorkspaceStore for SqlStore<D> {
    async fn create_workspace(&self, workspace: &WorkspaceRecord) -> Result<(), StoreError> {
        let mut sql = Sql::new(concat!(
            "INSERT INTO workspaces (",
            workspace_columns!(),
            ") VALUES "
        ));
        sql.tuple(|row| {
            row.bind(workspace.name.as_str())
                .bind(workspace.kind.as_str())
                .bind(workspace.root.as_str())
                .bind(workspace.source.as_deref())
                .bind(workspace.branch.as_deref())
                .bind(workspace.base_ref.as_deref())
                .bind_time(workspace.created_at)
                .bind(workspace.created_by.as_deref())
                .bind(workspace.git_commit);
        });
        sql.execute(self, "insert workspace").await?;
        Ok(())
    }

    async fn list_workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError> {
        let rows = Sql::<D>::new(concat!(
            "SELECT ",
            workspace_columns!(),
            " FROM workspaces ORDER BY name"
        ))
        .fetch_all(self, "list workspaces")
        .await?;
        rows.iter().map(workspace_from_row::<D>).collect()
    }

    async fn find_workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            workspace_columns!(),
            " FROM workspaces WHERE name = "
        ));
        sql.bind(name);
        let row = sql.fetch_optional(self, "find workspace").await?;
        row.as_ref().map(workspace_from_row::<D>).transpose()
    }

    async fn delete_workspace(&self, name: &str) -> Result<WorkspaceDeletion, StoreError> {
        // One transaction: the row is locked first (PostgreSQL; SQLite's write lock is taken at
        // BEGIN), so a commit recording a job here, which reads the row FOR SHARE, has either
        // committed before the jobs are read below or waits and then finds no workspace.
        let mut tx = self
            .pool
            .begin_with(D::BEGIN_WRITE)
            .await
            .map_err(|err| from_sqlx("begin delete workspace", err))?;
        let mut lock = Sql::<D>::new("SELECT name FROM workspaces WHERE name = ");
        lock.bind(name).push(D::FOR_UPDATE);
        if lock
            .run_on(&mut tx, "lock workspace", D::fetch_optional)
            .await?
            .is_none()
        {
            return Ok(WorkspaceDeletion::NotFound);
        }
        let mut running = Sql::<D>::new("SELECT id FROM jobs WHERE workspace = ");
        running
            .bind(name)
            .push(" AND status IN ('queued', 'running') ORDER BY created_at, id LIMIT ")
            .bind(i64::try_from(RUNNING_JOBS_NAMED).unwrap_or(i64::MAX));
        let rows = running
            .run_on(&mut tx, "read running jobs", D::fetch_all)
            .await?;
        if !rows.is_empty() {
            let ids = rows
                .iter()
                .map(|row| Record::<D>(row).get::<Uuid>("id"))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(WorkspaceDeletion::Busy(ids));
        }
        let mut delete = Sql::<D>::new("DELETE FROM workspaces WHERE name = ");
        delete.bind(name);
        delete.execute_on(&mut tx, "delete workspace").await?;
        let mut budget = Sql::<D>::new("DELETE FROM workspace_budgets WHERE workspace = ");
        budget.bind(name);
        budget
            .execute_on(&mut tx, "delete workspace budget")
            .await?;
        let mut claims = Sql::<D>::new("DELETE FROM workspace_claims WHERE workspace = ");
        claims.bind(name);
        claims
            .execute_on(&mut tx, "release workspace claims")
            .await?;
        tx.commit()
            .await
            .map_err(|err| from_sqlx("commit delete workspace", err))?;
        Ok(WorkspaceDeletion::Deleted)
    }

    async fn set_workspace_budget(&self, name: &str, budget: &Budget) -> Result<bool, StoreError> {
        if name != WorkspaceName::DEFAULT && self.find_workspace(name).await?.is_none() {
            return Ok(false);
        }
        if budget.is_empty() {
            let mut sql = Sql::new("DELETE FROM workspace_budgets WHERE workspace = ");
            sql.bind(name);
            sql.execute(self, "remove workspace budget").await?;
            return Ok(true);
        }
        let mut sql = Sql::new(
            "INSERT INTO workspace_budgets (workspace, daily_cost_micros, daily_tokens, \
             monthly_cost_micros, monthly_tokens, on_limit, degrade_at_permille, updated_at) VALUES ",
        );
        sql.tuple(|row| bind_budget(row.bind(name), budget));
        sql.push(
            " ON CONFLICT (workspace) DO UPDATE SET \
             daily_cost_micros = excluded.daily_cost_micros, \
             daily_tokens = excluded.daily_tokens, \
             monthly_cost_micros = excluded.monthly_cost_micros, \
             monthly_tokens = excluded.monthly_tokens, on_limit = excluded.on_limit, \
             degrade_at_permille = excluded.degrade_at_permille, updated_at = excluded.updated_at",
        );
        sql.execute(self, "set workspace budget").await?;
        Ok(true)
    }
}

/// The two orders in which a batch's opening commit and a deletion of its workspace can meet on
/// PostgreSQL, each forced with a transaction held open on a connection of the test's own.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use sqlx::Connection;
    use uuid::Uuid;
    use writ_core::AuditLog;
    use writ_core::audit::AuditWrite;
    use writ_core::jobs::{JobStatus, JobStore, NewJob};
    use writ_core::workspace_registry::{
        WorkspaceDeletion, WorkspaceKind, WorkspaceName, WorkspaceRecord, WorkspaceStore,
    };

    use crate::PgStore;
    use crate::testing::fresh_postgres_url;

    async fn store_with_workspace(name: &str) -> (PgStore, String) {
        let url = fresh_postgres_url().await;
        let store = PgStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        store
            .create_workspace(&WorkspaceRecord {
                name: WorkspaceName::parse(name).unwrap(),
                kind: WorkspaceKind::Empty,
                root: format!("/srv/{name}"),
                source: None,
                branch: None,
                base_ref: None,
                created_at: Utc::now(),
                created_by: None,
                git_commit: None,
            })
            .await
            .unwrap();
        (store, url)
    }

    fn job_in(workspace: &str) -> (Uuid, Vec<AuditWrite>) {
        let id = Uuid::now_v7();
        let job = NewJob {
            id,
            created_at: Utc::now(),
            workspace: workspace.into(),
            ..Default::default()
        };
        (
            id,
            vec![AuditWrite::InsertJob {
                job,
                status: JobStatus::Running,
            }],
        )
    }

    #[tokio::test]
    async fn a_deletion_waits_for_a_job_being_recorded_there_and_then_refuses() {
        let (store, url) = store_with_workspace("w").await;
        // A job being recorded: its transaction holds the workspace's row FOR SHARE.
        let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut tx = other.begin().await.unwrap();
        sqlx::query("SELECT 1 FROM workspaces WHERE name = 'w' FOR SHARE")
            .execute(&mut *tx)
            .await
            .unwrap();
        let deleting = tokio::spawn({
            let store = store.clone();
            async move { store.delete_workspace("w").await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!deleting.is_finished(), "the deletion waits for the row");
        let job = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO jobs (id, status, is_async, files, created_at, heartbeat_at, workspace) \
             VALUES ($1, 'queued', false, '[]', now(), now(), 'w')",
        )
        .bind(job)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            deleting.await.unwrap().unwrap(),
            WorkspaceDeletion::Busy(vec![job])
        );
        assert!(store.find_workspace("w").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_job_recorded_while_its_workspace_is_deleted_waits_and_is_refused() {
        let (store, url) = store_with_workspace("w").await;
        // A deletion under way: its transaction holds the row FOR UPDATE, found no job, deletes.
        let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut tx = other.begin().await.unwrap();
        sqlx::query("SELECT 1 FROM workspaces WHERE name = 'w' FOR UPDATE")
            .execute(&mut *tx)
            .await
            .unwrap();
        let (id, opening) = job_in("w");
        let recording = tokio::spawn({
            let store = store.clone();
            async move { store.commit(opening).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !recording.is_finished(),
            "the job's insert waits for the row"
        );
        sqlx::query("DELETE FROM workspaces WHERE name = 'w'")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let refused = recording.await.unwrap().unwrap_err();
        assert!(
            refused.to_string().contains("no workspace named 'w'"),
            "{refused}"
        );
        assert!(store.get_job(id).await.unwrap().is_none());
        // `default` is never a row, and its jobs are recorded as before.
        let (id, opening) = job_in("default");
        store.commit(opening).await.unwrap();
        assert!(store.get_job(id).await.unwrap().is_some());
    }
}
