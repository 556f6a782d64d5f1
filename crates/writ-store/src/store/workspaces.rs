//! [`WorkspaceStore`] for both backends: the `workspaces` table of postgres 0016, sqlite 0012
//! (each workspace's `git_commit`: postgres 0019, sqlite 0015).

use async_trait::async_trait;
use writ_core::StoreError;
use writ_core::workspaces::{WorkspaceName, WorkspaceRecord, WorkspaceStore};

use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

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

    async fn delete_workspace(&self, name: &str) -> Result<bool, StoreError> {
        let mut sql = Sql::new("DELETE FROM workspaces WHERE name = ");
        sql.bind(name);
        Ok(sql.execute(self, "delete workspace").await? > 0)
    }
}
