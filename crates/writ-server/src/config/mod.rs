//! Configuration, one module per concern, all read at start-up into [`Settings`]:
//! - [`declared`]: every setting writ reads — name, type, default, meaning, where it may be given;
//!   nothing else is read, and the settings docs are generated from it;
//! - [`source`]: the environment over an optional `writ.toml` (the declared keys; the
//!   environment wins);
//! - [`models`]: candidate, arbiter, fallback and image models, the provider and its key, call
//!   limits, the straggler policy, and the provider policy (the embedded default, what is missing);
//! - [`providers`]: each model's provider and price (`[[models]]`, `WRIT_MODEL_PROVIDERS`), and
//!   what becomes of a model without a price (`WRIT_UNPRICED_MODELS`);
//! - [`local`]: the embedded model (`WRIT_LOCAL_*`);
//! - [`guard`]: API keys and limits;
//! - [`run`]: the commands a request may run in the sandbox, and the bounds of a run.
//!
//! The server's own settings (address, database, `REPO_DIR`, body and read bounds, logs) stay
//! here.

pub mod declared;
pub mod edge;
pub mod guard;
pub mod local;
pub mod models;
pub mod providers;
mod routing;
pub mod run;
pub mod source;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use guard::{ConfiguredKey, GuardSettings, parse_api_keys};
pub use local::LocalSettings;
pub use models::ModelSettings;
pub use run::RunSettings;
use source::{parse_num, parse_switch};

pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_DATABASE_URL: &str = "sqlite://./writ.db";
pub const DEFAULT_REPO_DIR: &str = "./workspace";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
    #[error("config file {path}: {message}")]
    File { path: String, message: String },
    /// A mistake in writ itself, caught by every test that loads settings.
    #[error("{name} is read by writ but not declared in crates/writ-server/src/config/declared.rs")]
    Undeclared { name: String },
}

/// What is logged and how (read before the rest, to set logging up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// `RUST_LOG`: `EnvFilter` directives.
    pub filter: String,
    /// `WRIT_LOG_FORMAT=json`: one JSON object a line.
    pub json: bool,
}

impl LogSettings {
    fn load(get: &source::Get<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            filter: get("RUST_LOG").unwrap_or_else(|| "info,sqlx=warn".to_string()),
            json: match get("WRIT_LOG_FORMAT").as_deref().map(str::trim) {
                None | Some("text") => false,
                Some("json") => true,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "WRIT_LOG_FORMAT",
                        message: format!("'{other}' is not text or json"),
                    });
                }
            },
        })
    }
}

/// Everything writ reads at start-up. `Debug` shows neither the provider key nor a password in
/// the database URL.
#[derive(Clone)]
pub struct Settings {
    /// The only write target; every path is relative to it.
    pub repo_dir: PathBuf,
    /// Where new workspaces are made and found (`WRIT_WORKSPACES_DIR`); `None`: only `REPO_DIR`
    /// (the workspace `default`) is served, and creating one is refused.
    pub workspaces_dir: Option<PathBuf>,
    /// `postgres://…` or `sqlite://…`.
    pub database_url: String,
    pub addr: SocketAddr,
    /// Largest request body accepted (`WRIT_MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// Characters `GET /files/{path}` returns unless asked for more (10,000 by default).
    pub read_default_chars: usize,
    /// Most characters a caller may ask `GET /files/{path}` for.
    pub read_max_chars: usize,
    /// A pending operation older than this is settled against the disk by the reconciler.
    pub reconcile_after: Duration,
    /// Which config file was read, if any (for `writ check`).
    pub config_file: Option<PathBuf>,
    /// The models, their provider, and how they are called.
    pub models: ModelSettings,
    /// API keys and limits: who may call, how often, how much at once.
    pub guard: GuardSettings,
    /// Commands a request may run in the sandbox, and the bounds of a run.
    pub run: RunSettings,
    /// Hosts, protected paths and connection limits (see [`crate::edge`]).
    pub edge: edge::EdgeSettings,
    /// Write sessions: idle time, TTL and bounds (`WRITE_SESSION_*`).
    pub sessions: writ_core::sessions::SessionSettings,
    /// How long the contents that undo and restore need are kept (`WRIT_HISTORY_RETENTION`);
    /// `None`: for ever.
    pub history_retention: Option<Duration>,
    /// Commit what each request wrote when the workspace is a git repository (`WRIT_GIT_COMMIT`).
    pub git_commit: bool,
    /// Whether requests are proposed for review by default, and for how long a change set may be
    /// applied (`WRIT_REVIEW`, `WRIT_REVIEW_TTL`).
    pub review: writ_core::changes::ReviewSettings,
    /// Refuse a write into a path another workspace of its repository has claimed, unless a
    /// batch says otherwise (`WRIT_RESPECT_CLAIMS`).
    pub respect_claims: bool,
    /// Adaptive routing: the default for batches and how it decides (`WRIT_ROUTING*`).
    pub routing: writ_core::synthesis::routing::RoutingPolicy,
    /// What is logged and how.
    pub log: LogSettings,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("repo_dir", &self.repo_dir)
            .field("workspaces_dir", &self.workspaces_dir)
            .field("database_url", &writ_store::redact_url(&self.database_url))
            .field("addr", &self.addr)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("read_default_chars", &self.read_default_chars)
            .field("read_max_chars", &self.read_max_chars)
            .field("reconcile_after", &self.reconcile_after)
            .field("config_file", &self.config_file)
            .field("models", &self.models)
            .field("guard", &self.guard)
            .field("run", &self.run)
            .field("edge", &self.edge)
            .field("sessions", &self.sessions)
            .field("history_retention", &self.history_retention)
            .field("git_commit", &self.git_commit)
            .field("review", &self.review)
            .field("respect_claims", &self.respect_claims)
            .field("log", &self.log)
            .finish()
    }
}

impl Settings {
    /// Reads the process environment and `config_file` (or `./writ.toml` when present).
    pub fn from_env(config_file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load(config_file, &|name| std::env::var(name).ok())
    }

    /// Reads `env` and the config file; separated from the process environment for tests.
    /// Every name asked for must be declared ([`declared`]); the first that is not fails the load.
    /// The one exception is the variables `[[models]]` names as holding its providers' keys.
    pub fn load(
        config_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let secrets = |name: &str| env(name);
        let undeclared = std::cell::RefCell::new(None::<String>);
        let declared_only = |name: &str| {
            if declared::find(name).is_none() {
                undeclared
                    .borrow_mut()
                    .get_or_insert_with(|| name.to_string());
            }
        };
        let env = |name: &str| {
            declared_only(name);
            env(name)
        };
        let file = source::FileLayer::read(config_file, &env)?;
        let get = |name: &str| -> Option<String> {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| file.get(name).map(str::to_string))
        };
        let settings = Self::from_layers(&get, &env, &secrets, file.path.clone());
        match undeclared.into_inner() {
            Some(name) => Err(ConfigError::Undeclared { name }),
            None => settings,
        }
    }

    fn from_layers(
        get: &source::Get<'_>,
        env: &source::Get<'_>,
        secrets: &source::Get<'_>,
        config_file: Option<PathBuf>,
    ) -> Result<Self, ConfigError> {
        let addr_raw = get("WRIT_ADDR").unwrap_or_else(|| DEFAULT_ADDR.to_string());
        let addr = addr_raw.parse().map_err(|_| ConfigError::Invalid {
            name: "WRIT_ADDR",
            message: format!("'{addr_raw}' is not a socket address like 127.0.0.1:8080"),
        })?;
        let database_url = get("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_string());
        if !(database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://")
            || database_url.starts_with("sqlite:"))
        {
            return Err(ConfigError::Invalid {
                name: "DATABASE_URL",
                message: "must start with postgres://, postgresql:// or sqlite://".to_string(),
            });
        }

        let max_body_bytes = parse_num(get, "WRIT_MAX_BODY_BYTES", 10 * 1024 * 1024)?;
        let guard = GuardSettings::load(get)?;
        let sessions = session_settings(get, guard.max_file_bytes, max_body_bytes)?;
        Ok(Settings {
            repo_dir: PathBuf::from(
                get("REPO_DIR").unwrap_or_else(|| DEFAULT_REPO_DIR.to_string()),
            ),
            workspaces_dir: get("WRIT_WORKSPACES_DIR")
                .filter(|dir| !dir.trim().is_empty())
                .map(PathBuf::from),
            database_url,
            addr,
            max_body_bytes,
            read_default_chars: parse_num(get, "WRIT_READ_DEFAULT_CHARS", 10_000)?,
            read_max_chars: parse_num(get, "WRIT_READ_MAX_CHARS", 1_000_000)?,
            reconcile_after: Duration::from_secs(
                parse_num(get, "WRIT_RECONCILE_AFTER_SECS", 30)? as u64
            ),
            config_file,
            models: ModelSettings::load(get, env, secrets)?,
            guard,
            run: RunSettings::load(get)?,
            edge: edge::EdgeSettings::load(get)?,
            sessions,
            history_retention: history_retention(get("WRIT_HISTORY_RETENTION").as_deref())?,
            git_commit: parse_switch(get, "WRIT_GIT_COMMIT", false)?,
            review: writ_core::changes::ReviewSettings {
                by_default: parse_switch(get, "WRIT_REVIEW", false)?,
                ttl: review_ttl(get("WRIT_REVIEW_TTL").as_deref())?,
            },
            respect_claims: parse_switch(get, "WRIT_RESPECT_CLAIMS", false)?,
            routing: routing::load(get)?,
            log: LogSettings::load(get)?,
        })
    }
}

const DAY: u64 = 24 * 3600;

/// `WRIT_HISTORY_RETENTION`: a number with a unit (`s`, `m`, `h`, `d`), or `0`/`off` for ever;
/// 30 days when unset.
fn history_retention(raw: Option<&str>) -> Result<Option<Duration>, ConfigError> {
    let Some(raw) = raw.map(str::trim) else {
        return Ok(Some(Duration::from_secs(30 * DAY)));
    };
    if raw == "0" || raw.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let secs = duration_secs(raw).ok_or_else(|| ConfigError::Invalid {
        name: "WRIT_HISTORY_RETENTION",
        message: format!(
            "'{raw}' is not a duration like 30d, 12h, 90m or 3600s (or 0/off to keep contents for ever)"
        ),
    })?;
    Ok((secs > 0).then(|| Duration::from_secs(secs)))
}

/// `WRIT_REVIEW_TTL`: a number with a unit (`s`, `m`, `h`, `d`), at least a second; 7 days when
/// unset.
fn review_ttl(raw: Option<&str>) -> Result<Duration, ConfigError> {
    let Some(raw) = raw.map(str::trim) else {
        return Ok(writ_core::changes::DEFAULT_REVIEW_TTL);
    };
    match duration_secs(raw) {
        Some(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(ConfigError::Invalid {
            name: "WRIT_REVIEW_TTL",
            message: format!(
                "'{raw}' is not a duration of at least a second like 7d, 12h, 90m or 3600s"
            ),
        }),
    }
}

/// Seconds in a number with a unit (`s`, `m`, `h`, `d`); `None` when it is not one.
fn duration_secs(raw: &str) -> Option<u64> {
    let split = raw.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = raw.split_at(split);
    let number: u64 = number.parse().ok()?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => DAY,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// `WRITE_SESSION_*`. A session holds at most what a file may be (`WRIT_MAX_FILE_BYTES`) unless
/// told otherwise; a chunk is at most 1 MiB and never more than a request body may be.
fn session_settings(
    get: &source::Get<'_>,
    max_file_bytes: usize,
    max_body_bytes: usize,
) -> Result<writ_core::sessions::SessionSettings, ConfigError> {
    let at_least_one = |name, default| source::parse_positive(get, name, default);
    Ok(writ_core::sessions::SessionSettings {
        idle: Duration::from_millis(at_least_one("WRITE_SESSION_IDLE_MS", 2000)? as u64),
        ttl: Duration::from_secs(at_least_one("WRITE_SESSION_TTL_SECS", 3600)? as u64),
        max_bytes: at_least_one("WRITE_SESSION_MAX_BYTES", max_file_bytes)?,
        max_chunk_bytes: at_least_one(
            "WRITE_SESSION_MAX_CHUNK_BYTES",
            (1024 * 1024).min(max_body_bytes),
        )?,
        max_open: at_least_one("WRITE_SESSION_MAX_OPEN", 16)?.min(u32::MAX as usize) as u32,
    })
}

#[cfg(test)]
mod tests;
