//! A key's budget and spend: `GET /keys/{id}/spend` (its own key, or any with `admin`) and
//! `PUT /keys/{id}/budget` (`admin`), over [`crate::service::spend`].

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use writ_core::AuditStore;
use writ_core::budgets::Budget;

use crate::access::Viewer;
use crate::error::{ApiError, ErrorCode, store_error};
use crate::service::spend::{KeySpend, key_spend};

/// The path of `/keys/{id}/…`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct KeyId {
    /// The key's id: the part of `writ_<id>_<secret>` before its secret.
    pub id: String,
}

/// What the key spent this UTC day and month, beside its budget. Another key's spend is
/// answered as absent (404) unless the caller holds `admin`.
pub async fn get_spend(
    State(store): State<Arc<dyn AuditStore>>,
    viewer: Viewer,
    Path(KeyId { id }): Path<KeyId>,
) -> Result<Json<KeySpend>, ApiError> {
    if !viewer.sees(Some(id.as_str())) {
        return Err(ApiError::not_found(format!("no API key with id {id}")));
    }
    Ok(Json(key_spend(store.as_ref(), &id).await?))
}

/// Sets the key's budget (an empty object removes it) and answers its spend.
pub async fn put_budget(
    State(store): State<Arc<dyn AuditStore>>,
    Path(KeyId { id }): Path<KeyId>,
    body: axum::body::Bytes,
) -> Result<Json<KeySpend>, ApiError> {
    let Json(budget) =
        Json::<Budget>::from_bytes(&body).map_err(|e| crate::extract::json_error(&e))?;
    budget
        .validate()
        .map_err(|why| ApiError::new(ErrorCode::InvalidRequest, why))?;
    if !store
        .set_key_budget(&id, &budget)
        .await
        .map_err(store_error)?
    {
        return Err(ApiError::not_found(format!("no API key with id {id}")));
    }
    Ok(Json(key_spend(store.as_ref(), &id).await?))
}
