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
//!
//! Each key carries [`Scopes`]: what it may do ([`Scope`]). A key issued before scopes existed
//! has none recorded and keeps what it could always do, [`Scopes::LEGACY`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::store::StoreError;

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
    /// What the key may do; fixed when it is issued.
    pub scopes: Scopes,
    /// The names of the workspaces the key may use; `None`: every workspace (what keys issued
    /// before workspaces could do). A workspace it may not use answers as one that does not
    /// exist.
    pub workspaces: Option<Vec<String>>,
}

impl ApiKeyRecord {
    /// Whether the key may use the workspace named `name`.
    pub fn may_use(&self, name: &str) -> bool {
        self.workspaces
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }
}

/// One thing a key may do. Every route and every tool requires exactly one.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Look: list and read files, the audit log, jobs, metrics, the tool list.
    Read,
    /// Change the workspace: write files, run batches.
    Write,
    /// Run commands in the sandbox (`POST /run`).
    Run,
    /// Manage workspaces and budgets, and see every key's jobs, job events and operations
    /// (without it, a key sees its own). Keys themselves are managed by `writ keys` on the
    /// database.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Write, Scope::Run, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Run => "run",
            Scope::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| format!("'{s}' is not a scope (the scopes are read, write, run, admin)"))
    }
}

/// A set of [`Scope`]s, written `read,write` (in the order of [`Scope::ALL`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scopes(u8);

impl Scopes {
    /// What a key issued before scopes existed could do, and keeps: every route there was.
    pub const LEGACY: Scopes = Scopes(0b0111);
    /// What `writ keys create` gives without `--scopes`: look and write, but not run commands
    /// or manage keys, which an operator grants on purpose.
    pub const DEFAULT: Scopes = Scopes(0b0011);
    pub const EMPTY: Scopes = Scopes(0);

    pub fn of(scopes: &[Scope]) -> Self {
        Scopes(scopes.iter().fold(0, |bits, s| bits | s.bit()))
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::ALL.into_iter().filter(move |s| self.contains(*s))
    }

    /// Parses a list separated by `sep` (`,` on the command line and in the database, `+` in
    /// `WRIT_API_KEYS`, whose entries are separated by commas). Refuses an empty list and
    /// names an unknown word.
    pub fn parse_list(raw: &str, sep: char) -> Result<Self, String> {
        let mut bits = 0;
        for word in raw.split(sep).map(str::trim).filter(|w| !w.is_empty()) {
            bits |= word.to_ascii_lowercase().parse::<Scope>()?.bit();
        }
        if bits == 0 {
            return Err("no scope given (the scopes are read, write, run, admin)".into());
        }
        Ok(Scopes(bits))
    }

    /// The list joined by `sep`.
    pub fn join(self, sep: &str) -> String {
        self.iter().map(Scope::as_str).collect::<Vec<_>>().join(sep)
    }
}

impl std::fmt::Display for Scopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.join(","))
    }
}

impl std::fmt::Debug for Scopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scopes({self})")
    }
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

/// Generates a key named `name` with [`Scopes::DEFAULT`].
pub fn generate(name: &str) -> NewKey {
    generate_with_scopes(name, Scopes::DEFAULT)
}

/// Generates a key named `name` with `scopes` from the thread CSPRNG (ChaCha seeded by the OS).
pub fn generate_with_scopes(name: &str, scopes: Scopes) -> NewKey {
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
            scopes,
            workspaces: None,
        },
    }
}

/// The `id:sha256hex` entry for `WRIT_API_KEYS` that admits `key`, or `None` if `key` is not a
/// writ key. Such an entry gives the key [`Scopes::LEGACY`].
pub fn config_entry(key: &str) -> Option<String> {
    config_entry_with_scopes(key, None)
}

/// As [`config_entry`]; with `scopes` the entry carries them (`id:sha256hex:read+write`).
pub fn config_entry_with_scopes(key: &str, scopes: Option<Scopes>) -> Option<String> {
    let k = PresentedKey::parse(key)?;
    let entry = format!("{}:{}", k.id, hash_secret(&k.secret));
    Some(match scopes {
        Some(scopes) => format!("{entry}:{}", scopes.join("+")),
        None => entry,
    })
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
    /// Sets (or, with an empty budget, removes) the key's budget; `false` when no such key exists.
    async fn set_key_budget(
        &self,
        id: &str,
        budget: &crate::budgets::Budget,
    ) -> Result<bool, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON name (an error's `details`, the OpenAPI `Scope` schema) and the name in key
    /// entries and messages are one name.
    #[test]
    fn each_scope_is_written_in_json_as_it_is_named_everywhere_else() {
        for scope in Scope::ALL {
            assert_eq!(serde_json::to_value(scope).unwrap(), scope.as_str());
            let back: Scope = serde_json::from_value(scope.as_str().into()).unwrap();
            assert_eq!(back, scope);
        }
    }

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
        assert_eq!(
            config_entry_with_scopes(&a.key, Some(Scopes::of(&[Scope::Run, Scope::Read]))).unwrap(),
            format!("{}:{}:read+run", a.record.id, a.record.secret_sha256)
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

    #[test]
    fn scopes_parse_in_any_order_and_print_in_one() {
        let s = Scopes::parse_list(" Run, read ,", ',').unwrap();
        assert_eq!(s, Scopes::of(&[Scope::Read, Scope::Run]));
        assert_eq!(s.to_string(), "read,run");
        assert_eq!(
            Scopes::parse_list("read+write", '+').unwrap(),
            Scopes::DEFAULT
        );
        assert_eq!(Scopes::LEGACY.to_string(), "read,write,run");
        assert!(!Scopes::LEGACY.contains(Scope::Admin));
        let e = Scopes::parse_list("read,delete", ',').unwrap_err();
        assert!(e.contains("'delete'"), "{e}");
        assert!(Scopes::parse_list(" , ", ',').is_err());
    }
}
