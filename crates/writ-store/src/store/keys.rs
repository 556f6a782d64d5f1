//! [`KeyStore`] for both backends: the `api_keys` table of `migrations/<backend>/0002_api_keys.sql`
//! and its `scopes` column (0006), `workspaces` (postgres 0016, sqlite 0012); budgets in `key_budgets` (postgres 0015, sqlite 0011).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use writ_core::StoreError;
use writ_core::budgets::Budget;
use writ_core::keys::{ApiKeyRecord, KeyStore, Scopes};

use super::sql::Tuple;
use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! key_columns {
    () => {
        "id, name, secret_sha256, created_at, revoked_at, scopes, workspaces"
    };
}

fn key_from_row<D: Dialect>(row: &D::Row) -> Result<ApiKeyRecord, StoreError> {
    let row = Record::<D>(row);
    Ok(ApiKeyRecord {
        id: row.get("id")?,
        name: row.get("name")?,
        secret_sha256: row.get("secret_sha256")?,
        created_at: row.time("created_at")?,
        revoked_at: row.optional_time("revoked_at")?,
        // NULL: issued before scopes existed, and keeps what keys could do then.
        scopes: match row.get::<Option<String>>("scopes")? {
            None => Scopes::LEGACY,
            Some(list) => Scopes::parse_list(&list, ',')
                .map_err(|e| StoreError::Other(format!("column scopes: {e}")))?,
        },
        // NULL: every workspace, as for keys issued before workspaces existed.
        workspaces: row
            .get::<Option<String>>("workspaces")?
            .map(|list| list.split(',').map(str::to_owned).collect()),
    })
}

#[async_trait]
impl<D: Dialect> KeyStore for SqlStore<D> {
    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let scopes = key.scopes.to_string();
        // Workspace names are slugs, so a comma never occurs in one.
        let workspaces = key.workspaces.as_ref().map(|names| names.join(","));
        let mut sql = Sql::new(concat!(
            "INSERT INTO api_keys (",
            key_columns!(),
            ") VALUES "
        ));
        sql.tuple(|row| {
            row.bind(key.id.as_str())
                .bind(key.name.as_str())
                .bind(key.secret_sha256.as_str())
                .bind_time(key.created_at)
                .bind_time(key.revoked_at)
                .bind(scopes.as_str())
                .bind(workspaces.as_deref());
        });
        sql.execute(self, "insert api key").await?;
        Ok(())
    }

    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = Sql::<D>::new(concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys ORDER BY created_at, id"
        ))
        .fetch_all(self, "list api keys")
        .await?;
        rows.iter().map(key_from_row::<D>).collect()
    }

    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let mut sql = Sql::new(concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys WHERE id = "
        ));
        sql.bind(id);
        let row = sql.fetch_optional(self, "find api key").await?;
        row.as_ref().map(key_from_row::<D>).transpose()
    }

    async fn revoke_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        // COALESCE keeps the first revocation time when a key is revoked again.
        let mut sql = Sql::new("UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ");
        sql.bind_time(at).push(") WHERE id = ").bind(id);
        Ok(sql.execute(self, "revoke api key").await? > 0)
    }

    async fn any_keys(&self) -> Result<bool, StoreError> {
        let row = Sql::<D>::new("SELECT EXISTS (SELECT 1 FROM api_keys) AS any_key")
            .fetch_optional(self, "count api keys")
            .await?;
        match row {
            Some(row) => Record::<D>(&row).get("any_key"),
            None => Ok(false),
        }
    }

    async fn set_key_budget(&self, id: &str, budget: &Budget) -> Result<bool, StoreError> {
        if self.find_key(id).await?.is_none() {
            return Ok(false);
        }
        if budget.is_empty() {
            let mut sql = Sql::new("DELETE FROM key_budgets WHERE key_id = ");
            sql.bind(id);
            sql.execute(self, "remove key budget").await?;
            return Ok(true);
        }
        let mut sql = Sql::new(
            "INSERT INTO key_budgets (key_id, daily_cost_micros, daily_tokens, \
             monthly_cost_micros, monthly_tokens, on_limit, degrade_at_permille, updated_at) VALUES ",
        );
        sql.tuple(|row| bind_budget(row.bind(id), budget));
        sql.push(
            " ON CONFLICT (key_id) DO UPDATE SET daily_cost_micros = excluded.daily_cost_micros, \
             daily_tokens = excluded.daily_tokens, \
             monthly_cost_micros = excluded.monthly_cost_micros, \
             monthly_tokens = excluded.monthly_tokens, on_limit = excluded.on_limit, \
             degrade_at_permille = excluded.degrade_at_permille, updated_at = excluded.updated_at",
        );
        sql.execute(self, "set key budget").await?;
        Ok(true)
    }
}

/// A budget's limits as a row's values after its owner's (`key_budgets`, `workspace_budgets`),
/// stamped now.
pub(super) fn bind_budget<D: Dialect>(row: &mut Tuple<'_, D>, budget: &Budget) {
    row.bind(budget.daily_cost.map(to_micros))
        .bind(budget.daily_tokens.map(to_i64))
        .bind(budget.monthly_cost.map(to_micros))
        .bind(budget.monthly_tokens.map(to_i64))
        .bind(budget.on_limit.map(|o| o.as_str()))
        // Thousandths, so that a share reads back exactly as it was set.
        .bind(budget.degrade_at.map(|d| (d * 1000.0).round() as i64))
        .bind_time(Utc::now());
}

/// A budget read back from a row of `key_budgets` or `workspace_budgets`.
pub(super) fn budget_from_row<D: Dialect>(row: &D::Row) -> Result<Budget, StoreError> {
    let row = Record::<D>(row);
    let cost = |c: Option<i64>| c.map(|m| m as f64 / MICROS);
    let tokens = |t: Option<i64>| t.map(|t| u64::try_from(t).unwrap_or(0));
    Ok(Budget {
        daily_cost: cost(row.get("daily_cost_micros")?),
        daily_tokens: tokens(row.get("daily_tokens")?),
        monthly_cost: cost(row.get("monthly_cost_micros")?),
        monthly_tokens: tokens(row.get("monthly_tokens")?),
        on_limit: row
            .get::<Option<String>>("on_limit")?
            .as_deref()
            .and_then(writ_core::budgets::OnLimit::parse),
        degrade_at: row
            .get::<Option<i64>>("degrade_at_permille")?
            .map(|p| p as f64 / 1000.0),
    })
}

/// Cost limits are kept in millionths, so that a limit reads back exactly as it was set.
pub(super) const MICROS: f64 = 1_000_000.0;

pub(super) fn to_micros(cost: f64) -> i64 {
    (cost * MICROS).round() as i64
}

pub(super) fn to_i64(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}
