//! [`KeyStore`] on PostgreSQL: the `api_keys` table of `migrations/postgres/0002_api_keys.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;
use writ_core::StoreError;
use writ_core::keys::{ApiKeyRecord, KeyStore};

use crate::PgStore;
use crate::error::from_sqlx;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! key_columns {
    () => {
        "id, name, secret_sha256, created_at, revoked_at"
    };
}

fn key_from_row(row: &PgRow) -> Result<ApiKeyRecord, StoreError> {
    let read = |e| from_sqlx("read api key row", e);
    Ok(ApiKeyRecord {
        id: row.try_get("id").map_err(read)?,
        name: row.try_get("name").map_err(read)?,
        secret_sha256: row.try_get("secret_sha256").map_err(read)?,
        created_at: row.try_get("created_at").map_err(read)?,
        revoked_at: row.try_get("revoked_at").map_err(read)?,
    })
}

#[async_trait]
impl KeyStore for PgStore {
    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO api_keys (id, name, secret_sha256, created_at, revoked_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&key.id)
        .bind(&key.name)
        .bind(&key.secret_sha256)
        .bind(key.created_at)
        .bind(key.revoked_at)
        .execute(self.pool())
        .await
        .map_err(|e| from_sqlx("insert api key", e))?;
        Ok(())
    }

    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys ORDER BY created_at, id"
        ))
        .fetch_all(self.pool())
        .await
        .map_err(|e| from_sqlx("list api keys", e))?;
        rows.iter().map(key_from_row).collect()
    }

    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .map_err(|e| from_sqlx("find api key", e))?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn revoke_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let done =
            sqlx::query("UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1")
                .bind(id)
                .bind(at)
                .execute(self.pool())
                .await
                .map_err(|e| from_sqlx("revoke api key", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn any_keys(&self) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT EXISTS (SELECT 1 FROM api_keys) AS any_key")
            .fetch_one(self.pool())
            .await
            .map_err(|e| from_sqlx("count api keys", e))?;
        row.try_get("any_key")
            .map_err(|e| from_sqlx("count api keys", e))
    }
}
