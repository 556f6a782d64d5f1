//! [`KeyStore`] for both backends: the `api_keys` table of `migrations/<backend>/0002_api_keys.sql`
//! and its `scopes` column (0006).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use writ_core::StoreError;
use writ_core::keys::{ApiKeyRecord, KeyStore, Scopes};

use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

// A macro, not a const, so the statements stay static strings (never format! into SQL).
macro_rules! key_columns {
    () => {
        "id, name, secret_sha256, created_at, revoked_at, scopes"
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
    })
}

#[async_trait]
impl<D: Dialect> KeyStore for SqlStore<D> {
    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let scopes = key.scopes.to_string();
        let mut sql = Sql::new(
            "INSERT INTO api_keys (id, name, secret_sha256, created_at, revoked_at, scopes) VALUES ",
        );
        sql.tuple(|row| {
            row.bind(key.id.as_str())
                .bind(key.name.as_str())
                .bind(key.secret_sha256.as_str())
                .bind_time(key.created_at)
                .bind_time(key.revoked_at)
                .bind(scopes.as_str());
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
}
