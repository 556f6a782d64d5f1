//! API keys: their format, how a presented key is checked, and the [`KeyStore`] trait that keeps
//! issued keys (hashed) beside the audit log.
//!
//! A key reads `writ_<id>_<secret>`: the id (12 hex digits) is public — it is what the audit log
//! records as the caller and what `writ keys list` shows — and the secret (64 hex digits, 256
//! random bits) is known only to its holder. writ keeps the SHA-256 of the secret, never the
//! secret. A slow password hash (argon2, bcrypt) defends guessable human passwords against an
//! offline attacker; a 256-bit random secret cannot be guessed whatever the hash, so the cost
//! of argon2 on every request would buy nothing. The stored hash is found by id and compared in
//! constant time, so neither the lookup nor the comparison leaks how much of a guess was right.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::audit::StoreError;

const PREFIX: &str = "writ_";
const ID_HEX: usize = 12;
const SECRET_HEX: usize = 64;

/// One issued key as it is stored: never the secret, only its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    /// Public id, e.g. `3f9a0c1b2d4e`; the audit log's `caller`.
    pub id: String,
    /// A label for people (`ci-bot`, `alice laptop`).
    pub name: String,
    /// Lower-case hex SHA-256 of the secret part.
    pub secret_sha256: String,
    pub created_at: DateTime<Utc>,
    /// Set once the key is revoked; a revoked key is refused.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A key as presented in `Authorization: Bearer …`, split into its parts.
#[derive(Clone, PartialEq, Eq)]
pub struct PresentedKey {
    pub id: String,
    secret: String,
}

// The secret must never reach a log line through `{:?}`.
impl std::fmt::Debug for PresentedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PresentedKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl PresentedKey {
    /// Splits `writ_<id>_<secret>`; `None` for anything else (the caller answers 401 without
    /// saying which part was wrong).
    pub fn parse(raw: &str) -> Option<Self> {
        let rest = raw.trim().strip_prefix(PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex(id, ID_HEX) || !hex(secret, SECRET_HEX) {
            return None;
        }
        Some(Self {
            id: id.to_ascii_lowercase(),
            secret: secret.to_ascii_lowercase(),
        })
    }

    /// Whether this key's secret hashes to `secret_sha256`, compared in constant time.
    pub fn matches(&self, secret_sha256: &str) -> bool {
        let presented = hash_secret(&self.secret);
        let stored = secret_sha256.trim().to_ascii_lowercase();
        presented.len() == stored.len() && bool::from(presented.as_bytes().ct_eq(stored.as_bytes()))
    }
}

/// A freshly generated key: the full key (shown once) and the record to store.
pub struct NewKey {
    pub key: String,
    pub record: ApiKeyRecord,
}

/// Generates a key named `name` from the thread CSPRNG (ChaCha seeded by the OS).
pub fn generate(name: &str) -> NewKey {
    let id = hex::encode(rand::random::<[u8; ID_HEX / 2]>());
    let secret = hex::encode(rand::random::<[u8; SECRET_HEX / 2]>());
    NewKey {
        key: format!("{PREFIX}{id}_{secret}"),
        record: ApiKeyRecord {
            secret_sha256: hash_secret(&secret),
            id,
            name: name.to_string(),
            created_at: Utc::now(),
            revoked_at: None,
        },
    }
}

/// The `id:sha256hex` entry for `WRIT_API_KEYS` that admits `key`, or `None` if `key` is not a
/// writ key.
pub fn config_entry(key: &str) -> Option<String> {
    let k = PresentedKey::parse(key)?;
    Some(format!("{}:{}", k.id, hash_secret(&k.secret)))
}

fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Issued keys, kept by the audit store (PostgreSQL or SQLite) so every replica sees the same set.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Fails with [`StoreError::Conflict`] when the id exists.
    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError>;
    /// Every key, revoked ones included, oldest first.
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError>;
    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// Marks the key revoked; `false` when no such key exists. Revoking twice keeps the first time.
    async fn revoke_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;
    /// Whether any key was ever issued: once one was, auth stays on even if all are revoked.
    async fn any_keys(&self) -> Result<bool, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_parses_and_matches_only_its_own_hash() {
        let a = generate("a");
        let b = generate("b");
        let pa = PresentedKey::parse(&a.key).unwrap();
        assert_eq!(pa.id, a.record.id);
        assert!(pa.matches(&a.record.secret_sha256));
        assert!(!pa.matches(&b.record.secret_sha256));
        assert!(!pa.matches(""));
        assert_eq!(
            config_entry(&a.key).unwrap(),
            format!("{}:{}", a.record.id, a.record.secret_sha256)
        );
    }

    #[test]
    fn malformed_keys_are_refused_and_debug_hides_the_secret() {
        for bad in [
            "",
            "writ_",
            "writ_abc_def",
            "sk-or-123",
            "writ_zzzzzzzzzzzz_00",
        ] {
            assert!(PresentedKey::parse(bad).is_none(), "{bad}");
        }
        let k = generate("x");
        let secret = k.key.rsplit('_').next().unwrap().to_string();
        let shown = format!("{:?}", PresentedKey::parse(&k.key).unwrap());
        assert!(!shown.contains(&secret));
    }
}
