//! Settings of writ's edge: the host names answered while auth is off, the paths no write may
//! touch, the connection-level limits [`crate::startup`] applies (header-read timeout,
//! connection cap), and how long auth trusts a store that stopped answering.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ConfigError;

/// `WRIT_PROTECTED_PATHS` when unset: the one directory whose files run code on the next git command.
pub const DEFAULT_PROTECTED_PATHS: &str = ".git";

/// Settings of the edge, read with the rest of [`crate::Settings`].
#[derive(Debug, Clone)]
pub struct EdgeSettings {
    /// `WRIT_ALLOWED_HOSTS`: host names answered while auth is off, besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// `WRIT_PROTECTED_PATHS`: names (any component) or paths (from the root) no write may touch.
    pub protected_paths: Vec<String>,
    /// `WRIT_HEADER_READ_TIMEOUT_SECS`: a client must send a request's headers within this, and an
    /// idle keep-alive connection is closed after it.
    pub header_read_timeout: Duration,
    /// `WRIT_MAX_CONNECTIONS`: connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// `WRIT_AUTH_FAIL_CLOSED_AFTER_SECS`: how old the store's last "no keys" answer may be for
    /// auth to stay off while the store cannot be asked again.
    pub auth_fail_closed_after: Duration,
}

impl EdgeSettings {
    pub fn load(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let list = |v: Option<String>| -> Vec<String> {
            v.unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let secs = |name: &'static str, default: u64| -> Result<Duration, ConfigError> {
            let n = match get(name) {
                None => default,
                Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
                    name,
                    message: format!("'{v}' is not a whole number of seconds"),
                })?,
            };
            if n == 0 {
                return Err(ConfigError::Invalid {
                    name,
                    message: "must be at least 1".into(),
                });
            }
            Ok(Duration::from_secs(n))
        };
        let max_connections = match get("WRIT_MAX_CONNECTIONS") {
            None => 1024,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(ConfigError::Invalid {
                        name: "WRIT_MAX_CONNECTIONS",
                        message: format!("'{v}' is not a whole number of at least 1"),
                    });
                }
            },
        };
        // An empty value reads as unset (the default), so turning protection off takes a word.
        let protected = match get("WRIT_PROTECTED_PATHS") {
            Some(v) if v.trim().eq_ignore_ascii_case("none") => Vec::new(),
            v => list(Some(
                v.unwrap_or_else(|| DEFAULT_PROTECTED_PATHS.to_owned()),
            )),
        };
        Ok(Self {
            allowed_hosts: list(get("WRIT_ALLOWED_HOSTS"))
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            protected_paths: protected,
            header_read_timeout: secs("WRIT_HEADER_READ_TIMEOUT_SECS", 10)?,
            max_connections,
            auth_fail_closed_after: secs("WRIT_AUTH_FAIL_CLOSED_AFTER_SECS", 30)?,
        })
    }
}

/// The paths no write may touch: `WRIT_PROTECTED_PATHS`, plus writ's own files (the SQLite
/// database and its journal files, the config file, the embedded model) when they lie inside
/// `root`, the canonical `REPO_DIR`. writ refuses writes there rather than refusing to start, so
/// an existing layout keeps working; moving them out of `REPO_DIR` is still better.
pub fn protected_paths(settings: &super::Settings, root: &Path) -> writ_workspace::ProtectedPaths {
    let mut protected = writ_workspace::ProtectedPaths::default();
    for entry in &settings.edge.protected_paths {
        protected.add(entry, "listed in WRIT_PROTECTED_PATHS");
    }
    let mut own = |file: &Path, what: &str| {
        if let Some(relative) = inside(root, file) {
            protected.add_path(&relative, &format!("{what}, inside REPO_DIR"));
        }
    };
    if let Some(db) = sqlite_file(&settings.database_url) {
        own(&db, "writ's own database (DATABASE_URL)");
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut journal = db.clone().into_os_string();
            journal.push(suffix);
            own(
                Path::new(&journal),
                "writ's own database journal (DATABASE_URL)",
            );
        }
    }
    if let Some(config) = &settings.config_file {
        own(config, "writ's config file");
    }
    if let Some(key) = &settings.guard.admin_key_file {
        own(key, "the first key's file (WRIT_ADMIN_KEY_FILE)");
    }
    if settings.models.local.enabled {
        let local = &settings.models.local;
        // A fetch writes temp files beside the model, so the whole model directory is the
        // cache; unless that directory is REPO_DIR itself, where only the files can be claimed.
        let dir_is_root = std::fs::canonicalize(&local.model_dir).is_ok_and(|dir| dir == root);
        if !dir_is_root {
            own(
                &local.model_dir,
                "the embedded models' directory (WRIT_LOCAL_MODEL_DIR)",
            );
        }
        for model in writ_local::CATALOGUE.iter() {
            let file = local.path_of(model);
            if dir_is_root || local.files.contains_key(model.name) {
                own(&file, "an embedded model's file (WRIT_LOCAL_MODEL_FILES)");
            }
        }
    }
    protected
}

/// The file behind a `sqlite:` URL, if it names one.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let file = rest.split('?').next().unwrap_or_default();
    (!file.is_empty() && !file.starts_with(":memory:")).then(|| PathBuf::from(file))
}

/// `file` relative to `root` (both resolved as far as they exist), if it lies inside.
fn inside(root: &Path, file: &Path) -> Option<String> {
    let name = file.file_name()?;
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = std::fs::canonicalize(&parent).ok()?;
    let relative = parent.join(name);
    let relative = relative.strip_prefix(root).ok()?;
    let shown = relative.to_str()?.to_owned();
    (!shown.is_empty()).then_some(shown)
}
