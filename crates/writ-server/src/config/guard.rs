//! Who may call and how much: API keys, rate and concurrency limits, file size, the batch
//! deadline and the shutdown grace (`WRIT_API_KEYS`, `WRIT_RATE_LIMIT_*`, `WRIT_MAX_*`, …).

use std::time::Duration;

use writ_core::keys::Scopes;

use super::ConfigError;
use super::source::{parse_num, parse_positive};

/// One `WRIT_API_KEYS` entry: a key admitted by configuration rather than by the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredKey {
    pub id: String,
    /// Lower-case hex SHA-256 of the key's secret.
    pub secret_sha256: String,
    /// From `id:sha256hex:read+write`; an entry without scopes keeps what every key could do
    /// before scopes existed ([`Scopes::LEGACY`]), so a configuration that worked still works.
    pub scopes: Scopes,
}

/// Access and limits, read with the rest of [`crate::Settings`].
#[derive(Debug, Clone)]
pub struct GuardSettings {
    /// `WRIT_API_KEYS`: `id:sha256hex[:scopes]` entries (see `writ keys hash`); the hashes,
    /// never keys.
    pub api_keys: Vec<ConfiguredKey>,
    /// `writ serve --insecure`: serve on a non-loopback address without keys.
    pub insecure: bool,
    /// `WRIT_ADMIN_KEY_FILE`: where a writ that starts with no key at all writes the one it makes.
    pub admin_key_file: Option<std::path::PathBuf>,
    /// `WRIT_RATE_LIMIT_PER_MIN`: requests per minute per key (0: no limit).
    pub rate_per_min: u32,
    /// `WRIT_RATE_LIMIT_BURST`: requests a key may make at once before the rate applies.
    pub rate_burst: u32,
    /// `WRIT_MAX_BATCHES_PER_KEY`: batches one key may have running.
    pub max_batches_per_key: usize,
    /// `WRIT_MAX_BATCHES_IN_FLIGHT`: batches the whole process runs at once.
    pub max_batches_in_flight: usize,
    /// `WRIT_WORKSPACE_RATE_LIMIT_PER_MIN`: requests per minute into one workspace, whatever the
    /// key (0, the default: no limit beyond the keys').
    pub workspace_rate_per_min: u32,
    /// `WRIT_WORKSPACE_RATE_LIMIT_BURST`: requests into one workspace at once before its rate
    /// applies.
    pub workspace_rate_burst: u32,
    /// `WRIT_MAX_BATCHES_PER_WORKSPACE`: batches one workspace may have running, whatever the
    /// keys (0, the default: no limit beyond the keys').
    pub max_batches_per_workspace: usize,
    /// `WRIT_MAX_FILE_BYTES`: the largest generated file writ will write.
    pub max_file_bytes: usize,
    /// `WRIT_MAX_SHOWN_FILE_CHARS`: the largest existing file a batch may change (shown whole to
    /// the models; never cut).
    pub max_shown_file_chars: usize,
    /// `WRIT_BATCH_DEADLINE_SECS`: a batch stops waiting on models after this.
    pub batch_deadline: Duration,
    /// `WRIT_SHUTDOWN_GRACE_SECS`: how long in-flight batches may run after SIGTERM.
    pub shutdown_grace: Duration,
    /// `WRIT_STORE_OUTAGE_WAIT` (seconds): how long a batch whose results are ready waits out an
    /// audit store it cannot reach before it answers 503 (0: not at all).
    pub store_outage_wait: Duration,
}

impl GuardSettings {
    pub fn load(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let num = |name, default| parse_num(get, name, default);
        let at_least_one = |name, default| parse_positive(get, name, default);
        Ok(Self {
            api_keys: parse_api_keys(get("WRIT_API_KEYS").as_deref().unwrap_or(""))?,
            insecure: false,
            admin_key_file: get("WRIT_ADMIN_KEY_FILE").map(std::path::PathBuf::from),
            rate_per_min: num("WRIT_RATE_LIMIT_PER_MIN", 600)?.min(u32::MAX as usize) as u32,
            rate_burst: at_least_one("WRIT_RATE_LIMIT_BURST", 60)?.min(u32::MAX as usize) as u32,
            max_batches_per_key: at_least_one("WRIT_MAX_BATCHES_PER_KEY", 4)?,
            max_batches_in_flight: at_least_one("WRIT_MAX_BATCHES_IN_FLIGHT", 32)?,
            workspace_rate_per_min: num("WRIT_WORKSPACE_RATE_LIMIT_PER_MIN", 0)?
                .min(u32::MAX as usize) as u32,
            workspace_rate_burst: at_least_one("WRIT_WORKSPACE_RATE_LIMIT_BURST", 60)?
                .min(u32::MAX as usize) as u32,
            max_batches_per_workspace: num("WRIT_MAX_BATCHES_PER_WORKSPACE", 0)?,
            max_file_bytes: at_least_one("WRIT_MAX_FILE_BYTES", 1024 * 1024)?,
            max_shown_file_chars: at_least_one(
                "WRIT_MAX_SHOWN_FILE_CHARS",
                writ_core::synthesis::DEFAULT_MAX_SHOWN_FILE_CHARS,
            )?,
            batch_deadline: Duration::from_secs(
                at_least_one("WRIT_BATCH_DEADLINE_SECS", 600)? as u64
            ),
            shutdown_grace: Duration::from_secs(num("WRIT_SHUTDOWN_GRACE_SECS", 30)? as u64),
            store_outage_wait: Duration::from_secs(num(
                "WRIT_STORE_OUTAGE_WAIT",
                writ_core::synthesis::outage::DEFAULT_STORE_OUTAGE_WAIT.as_secs() as usize,
            )? as u64),
        })
    }
}

/// `id:sha256hex[:scopes],…`, the scopes joined by `+` (`read+write`). A malformed entry is
/// refused naming the variable and the entry's position, never its text (it might be a key
/// pasted by mistake).
pub fn parse_api_keys(raw: &str) -> Result<Vec<ConfiguredKey>, ConfigError> {
    let mut keys = Vec::new();
    for (i, entry) in raw
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .enumerate()
    {
        let mut parts = entry.splitn(3, ':');
        let (id, hash) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let well_formed = !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_hexdigit())
            && hash.len() == 64
            && hash.bytes().all(|b| b.is_ascii_hexdigit());
        if !well_formed {
            return Err(ConfigError::Invalid {
                name: "WRIT_API_KEYS",
                message: format!(
                    "entry {} is not `id:sha256hex` or `id:sha256hex:scopes` (make one with `writ keys hash`, which reads a key on stdin)",
                    i + 1
                ),
            });
        }
        let scopes = match parts.next() {
            None => Scopes::LEGACY,
            Some(list) => Scopes::parse_list(list, '+').map_err(|e| ConfigError::Invalid {
                name: "WRIT_API_KEYS",
                message: format!(
                    "entry {}: {e}; write scopes as `id:sha256hex:read+write`",
                    i + 1
                ),
            })?,
        };
        keys.push(ConfiguredKey {
            id: id.to_ascii_lowercase(),
            secret_sha256: hash.to_ascii_lowercase(),
            scopes,
        });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use writ_core::keys::Scope;

    #[test]
    fn a_malformed_api_keys_entry_names_the_variable_but_not_the_entry() {
        let e = parse_api_keys("abc:00, writ_deadbeef_secret").unwrap_err();
        assert!(e.to_string().starts_with("WRIT_API_KEYS:"), "{e}");
        assert!(!e.to_string().contains("secret"));
        let hash = "a".repeat(64);
        let ok = parse_api_keys(&format!(" 0A1b:{hash} ,")).unwrap();
        assert_eq!(
            ok,
            vec![ConfiguredKey {
                id: "0a1b".into(),
                secret_sha256: hash,
                scopes: Scopes::LEGACY,
            }]
        );
    }

    #[test]
    fn an_entry_may_carry_scopes_and_an_unknown_scope_is_named() {
        let hash = "b".repeat(64);
        let keys = parse_api_keys(&format!("aa:{hash}:read, bb:{hash}:Run+read")).unwrap();
        assert_eq!(keys[0].scopes, Scopes::of(&[Scope::Read]));
        assert_eq!(keys[1].scopes, Scopes::of(&[Scope::Read, Scope::Run]));
        let e = parse_api_keys(&format!("aa:{hash}, bb:{hash}:read+sudo")).unwrap_err();
        assert!(e.to_string().contains("entry 2"), "{e}");
        assert!(e.to_string().contains("'sudo'"), "{e}");
        assert!(
            parse_api_keys(&format!("aa:{hash}:")).is_err(),
            "empty scopes"
        );
    }
}
