//! `GET /stats/models` and `writ stats`: each model's figures over a window of the audit log
//! ([`writ_core::stats`]), as the caller may see it (its own operations, or all for an admin key).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use writ_core::AuditStore;
use writ_core::audit::OperationFilter;
use writ_core::stats::{ModelStats, model_stats};

use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error};
use crate::service::operations::parse_time;

/// The window when `since` is not given.
pub const DEFAULT_WINDOW_HOURS: i64 = 24;
/// Most operations read for one answer: a window with more is counted from its newest ones and
/// says so (`truncated`).
pub const MAX_OPERATIONS: usize = 20_000;
const PAGE: u32 = 500;

/// The query of `GET /stats/models`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsParams {
    /// From this RFC 3339 time (default: 24 hours before `until`).
    pub since: Option<String>,
    /// Up to this RFC 3339 time (default: now).
    pub until: Option<String>,
    /// `model` (default): one row per model; `language`: one per model and language of the file.
    #[schemars(extend("enum" = ["model", "language"]))]
    pub by: Option<String>,
}

/// Each model's figures over the window.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ModelStatsPage {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Operations counted.
    pub operations: usize,
    /// The window held more than [`MAX_OPERATIONS`]: the newest were counted.
    pub truncated: bool,
    pub models: Vec<ModelStats>,
}

pub async fn models(
    store: &dyn AuditStore,
    viewer: &Viewer,
    p: StatsParams,
) -> Result<ModelStatsPage, ApiError> {
    let until = match p.until.as_deref() {
        Some(v) => parse_time(v, "until")?,
        None => Utc::now(),
    };
    let since = match p.since.as_deref() {
        Some(v) => parse_time(v, "since")?,
        None => until - Duration::hours(DEFAULT_WINDOW_HOURS),
    };
    if since >= until {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!("since ({since}) must be before until ({until})"),
        )
        .with_field("since"));
    }
    let by_language = match p.by.as_deref() {
        None | Some("model") => false,
        Some("language") => true,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidParameter,
                format!("by must be model or language, got '{other}'"),
            )
            .with_field("by"));
        }
    };
    let filter = OperationFilter {
        caller: viewer.only().map(|own| Some(own.to_string())),
        since: Some(since),
        until: Some(until),
        workspaces: viewer.workspaces().map(<[String]>::to_vec),
        ..OperationFilter::default()
    };
    let mut operations = Vec::new();
    let mut cursor = None;
    let mut truncated = false;
    loop {
        let page = store
            .list_operations(&filter, cursor.as_ref(), PAGE)
            .await
            .map_err(store_error)?;
        operations.extend(page.operations);
        if operations.len() >= MAX_OPERATIONS {
            truncated = page.next_cursor.is_some() || operations.len() > MAX_OPERATIONS;
            operations.truncate(MAX_OPERATIONS);
            break;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(ModelStatsPage {
        since,
        until,
        operations: operations.len(),
        truncated,
        models: model_stats(&operations, by_language),
    })
}
