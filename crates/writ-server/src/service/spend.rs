//! What a key or a workspace spent in its budget's windows (`GET /keys/{id}/spend`,
//! `GET /workspaces/{name}`, the budget checks of a batch, and the `writ_key_spend_*` and
//! `writ_workspace_spend_*` gauges of `/metrics`).

use chrono::Utc;
use serde::Serialize;
use writ_core::AuditStore;
use writ_core::budgets::{Budget, SpendHolder, WindowSpend};

use crate::error::{ApiError, store_error};

/// `GET /keys/{id}/spend`: the key's budget and what it spent this UTC day and month.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KeySpend {
    pub key_id: String,
    pub budget: Budget,
    /// The day's window first, then the month's.
    pub windows: Vec<WindowSpend>,
}

/// The current day's and month's spend of `caller` beside `budget`'s limits.
pub async fn windows(
    store: &dyn AuditStore,
    caller: &str,
    budget: &Budget,
) -> Result<Vec<WindowSpend>, ApiError> {
    let windows = writ_core::budgets::windows(store, SpendHolder::Key(caller), budget, Utc::now())
        .await
        .map_err(store_error)?;
    for w in &windows {
        publish(caller, w);
    }
    Ok(windows.to_vec())
}

/// `id`'s spend; 404 when writ issued no such key.
pub async fn key_spend(store: &dyn AuditStore, id: &str) -> Result<KeySpend, ApiError> {
    if store.find_key(id).await.map_err(store_error)?.is_none() {
        return Err(ApiError::not_found(format!("no API key with id {id}")));
    }
    let budget = store.key_budget(id).await.map_err(store_error)?;
    let windows = windows(store, id, &budget).await?;
    Ok(KeySpend {
        key_id: id.to_owned(),
        budget,
        windows,
    })
}

/// The current day's and month's spend of the workspace `name` (every key's batches in it)
/// beside `budget`'s limits.
pub async fn workspace_windows(
    store: &dyn AuditStore,
    name: &str,
    budget: &Budget,
) -> Result<Vec<WindowSpend>, ApiError> {
    let windows =
        writ_core::budgets::windows(store, SpendHolder::Workspace(name), budget, Utc::now())
            .await
            .map_err(store_error)?;
    for w in &windows {
        publish_workspace(name, w);
    }
    Ok(windows.to_vec())
}

/// Sets every issued, unrevoked key's spend gauges, and every workspace's, for `/metrics`.
pub async fn publish_all(store: &dyn AuditStore) -> Result<(), ApiError> {
    for key in store.list_keys().await.map_err(store_error)? {
        if key.revoked_at.is_none() {
            let budget = store.key_budget(&key.id).await.map_err(store_error)?;
            windows(store, &key.id, &budget).await?;
        }
    }
    let stored = store.list_workspaces().await.map_err(store_error)?;
    let names = std::iter::once(writ_core::workspace_registry::WorkspaceName::DEFAULT.to_owned())
        .chain(stored.into_iter().map(|w| w.name.to_string()));
    for name in names {
        let budget = store.workspace_budget(&name).await.map_err(store_error)?;
        workspace_windows(store, &name, &budget).await?;
    }
    Ok(())
}

fn publish_workspace(workspace: &str, window: &WindowSpend) {
    let (workspace, period) = (workspace.to_owned(), window.period.as_str());
    metrics::gauge!("writ_workspace_spend_cost", "workspace" => workspace.clone(), "period" => period)
        .set(window.cost);
    metrics::gauge!("writ_workspace_spend_tokens", "workspace" => workspace, "period" => period)
        .set(window.tokens as f64);
}

fn publish(key: &str, window: &WindowSpend) {
    let (key, period) = (key.to_owned(), window.period.as_str());
    metrics::gauge!("writ_key_spend_cost", "key" => key.clone(), "period" => period)
        .set(window.cost);
    metrics::gauge!("writ_key_spend_tokens", "key" => key, "period" => period)
        .set(window.tokens as f64);
}
