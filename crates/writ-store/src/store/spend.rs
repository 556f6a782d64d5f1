//! [`BudgetStore`] (the key's and the workspace's budgets, set through their own stores) and
//! [`SpendLedger`] for both backends: the `model_spend` table (postgres 0023, sqlite 0018), a row
//! per key, workspace and UTC day that each model call adds itself to.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use writ_core::StoreError;
use writ_core::budgets::{
    Budget, BudgetStore, Period, Spend, SpendEntry, SpendHolder, SpendLedger,
};

use super::keys::budget_from_row;
use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

#[async_trait]
impl<D: Dialect> BudgetStore for SqlStore<D> {
    async fn key_budget(&self, id: &str) -> Result<Budget, StoreError> {
        let mut sql = Sql::new(
            "SELECT daily_cost_micros, daily_tokens, monthly_cost_micros, monthly_tokens, \
             on_limit, degrade_at_permille FROM key_budgets WHERE key_id = ",
        );
        sql.bind(id);
        let row = sql.fetch_optional(self, "read key budget").await?;
        row.as_ref()
            .map_or(Ok(Budget::default()), budget_from_row::<D>)
    }

    async fn workspace_budget(&self, name: &str) -> Result<Budget, StoreError> {
        let mut sql = Sql::new(
            "SELECT daily_cost_micros, daily_tokens, monthly_cost_micros, monthly_tokens, \
             on_limit, degrade_at_permille FROM workspace_budgets WHERE workspace = ",
        );
        sql.bind(name);
        let row = sql.fetch_optional(self, "read workspace budget").await?;
        row.as_ref()
            .map_or(Ok(Budget::default()), budget_from_row::<D>)
    }
}

#[async_trait]
impl<D: Dialect> SpendLedger for SqlStore<D> {
    async fn record_spend(&self, entry: &SpendEntry) -> Result<(), StoreError> {
        let (day, _) = Period::Day.window(entry.at);
        let mut sql = Sql::new(
            "INSERT INTO model_spend (caller, workspace, day, calls, tokens, cost) VALUES ",
        );
        sql.tuple(|row| {
            row.bind(entry.caller.as_deref().unwrap_or_default())
                .bind(entry.workspace.as_str())
                .bind_time(day)
                .bind(i64::try_from(entry.calls).unwrap_or(i64::MAX))
                .bind(entry.tokens)
                .bind(entry.cost);
        });
        // The row's lock (or SQLite's one writer) makes each addition whole under concurrency.
        sql.push(
            " ON CONFLICT (caller, workspace, day) DO UPDATE SET \
             calls = model_spend.calls + excluded.calls, \
             tokens = model_spend.tokens + excluded.tokens, \
             cost = model_spend.cost + excluded.cost",
        );
        sql.execute(self, "record model spend").await?;
        Ok(())
    }

    async fn spent(
        &self,
        holder: SpendHolder<'_>,
        since: DateTime<Utc>,
    ) -> Result<Spend, StoreError> {
        let (from_day, _) = Period::Day.window(since);
        let mut sql = Sql::new(
            "SELECT CAST(COALESCE(SUM(calls), 0) AS BIGINT) AS calls, \
             CAST(COALESCE(SUM(tokens), 0) AS BIGINT) AS tokens, \
             CAST(COALESCE(SUM(cost), 0) AS DOUBLE PRECISION) AS cost FROM model_spend WHERE ",
        );
        match holder {
            SpendHolder::Key(id) => sql.push("caller = ").bind(id),
            SpendHolder::Workspace(name) => sql.push("workspace = ").bind(name),
        };
        // A day's row is counted whole: a window reads the day it began in and those after.
        sql.push(" AND day >= ").bind_time(from_day);
        let Some(row) = sql.fetch_optional(self, "read model spend").await? else {
            return Ok(Spend::default());
        };
        let row = Record::<D>(&row);
        let whole = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(Spend {
            calls: whole(row.get("calls")?),
            tokens: whole(row.get("tokens")?),
            cost: row.get::<f64>("cost")?.max(0.0),
        })
    }
}
