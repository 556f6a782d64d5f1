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
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// Every name `load` asks the environment for, under a few configurations that take
    /// different paths through it.
    fn names_read() -> Vec<String> {
        let asked = std::cell::RefCell::new(Vec::<String>::new());
        for configured in [
            &[][..],
            &[("OPENROUTER_API_KEY", "sk-or-x"), ("CODE_LIST", "a/b")][..],
            &[("WRIT_LOCAL_MODEL", "off")][..],
            &[("WRIT_COMMANDS", r#"{"python": ["python3", "{args}"]}"#)][..],
        ] {
            let env = env_of(configured);
            Settings::load(None, &|name| {
                asked.borrow_mut().push(name.to_string());
                env(name)
            })
            .unwrap();
        }
        let mut names = asked.into_inner();
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn every_setting_load_reads_is_declared() {
        let names = names_read();
        assert!(names.len() > 80, "{names:?}");
        for name in names {
            assert!(declared::find(&name).is_some(), "{name} is not declared");
        }
    }

    #[test]
    fn a_declared_default_is_what_the_code_uses_when_the_setting_is_unset() {
        let unset = format!("{:?}", Settings::load(None, &env_of(&[])).unwrap());
        let mut checked = 0;
        for name in names_read() {
            let Some(setting) = declared::find(&name) else {
                continue;
            };
            let declared::DefaultValue::Literal(value) = setting.default else {
                continue;
            };
            let set = Settings::load(None, &env_of(&[(setting.name, value)]))
                .unwrap_or_else(|e| panic!("{name}={value}: {e}"));
            assert_eq!(
                format!("{set:?}"),
                unset,
                "{name}: its declared default {value:?} is not the code's"
            );
            checked += 1;
        }
        assert!(checked >= 50, "only {checked} defaults checked");
    }

    fn toml_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("writ.toml");
        std::fs::write(&file, text).unwrap();
        (dir, file)
    }

    #[test]
    fn writ_toml_takes_every_setting_that_may_be_given_there_under_its_key() {
        let mut text = String::new();
        let mut expected = Vec::new();
        for setting in declared::SETTINGS {
            let Some(key) = setting.file_key() else {
                continue;
            };
            let (toml_value, as_variable) = match setting.kind {
                declared::Kind::Whole => ("7".to_string(), "7".to_string()),
                declared::Kind::Switch => ("true".to_string(), "true".to_string()),
                declared::Kind::List => (r#"["a", "b"]"#.to_string(), "a,b".to_string()),
                declared::Kind::Json => {
                    (r#"{ x = ["y"] }"#.to_string(), r#"{"x":["y"]}"#.to_string())
                }
                declared::Kind::Tables => (
                    r#"[{ id = "a/*" }]"#.to_string(),
                    r#"[{"id":"a/*"}]"#.to_string(),
                ),
                _ => (r#""v""#.to_string(), "v".to_string()),
            };
            text.push_str(&format!("{key} = {toml_value}\n"));
            expected.push((setting.name, as_variable));
        }
        let (_dir, file) = toml_file(&text);
        let layer = source::FileLayer::read(Some(&file), &|_: &str| None).unwrap();
        for (name, value) in expected {
            assert_eq!(layer.get(name), Some(value.as_str()), "{name}");
        }
    }

    #[test]
    fn an_unknown_key_in_writ_toml_is_refused_by_name_with_what_to_write_instead() {
        for (line, says) in [
            ("colour = \"red\"", "`colour` is not a setting writ knows"),
            (
                "otel_exporter_otlp_endpoint = \"http://c:4318\"",
                "set OTEL_EXPORTER_OTLP_ENDPOINT in the environment",
            ),
            (
                "writ_commands = { pytest = [\"pytest\"] }",
                "`writ_commands` is written `commands`",
            ),
            ("WRIT_ADDR = \"0.0.0.0:1\"", "is written `writ_addr`"),
            (
                "writ_max_body_bytes = true",
                "`writ_max_body_bytes` must be a whole number",
            ),
            (
                "code_list = [1, 2]",
                "`code_list` must be an array of strings",
            ),
        ] {
            let (_dir, file) = toml_file(line);
            let err = Settings::load(Some(&file), &env_of(&[]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{line}: {err}");
        }
    }

    #[test]
    fn the_commands_table_of_writ_toml_configures_the_commands() {
        let (_dir, file) = toml_file(
            "[commands]\npytest = [\"python3\", \"-m\", \"pytest\", \"{args}\"]\n\n[commands.checked]\nargv = [\"python3\", \"{args}\"]\nevidence = \"ok\"\n",
        );
        let s = Settings::load(Some(&file), &env_of(&[])).unwrap();
        let commands = s.run.commands.expect("commands from writ.toml");
        assert_eq!(commands.names().collect::<Vec<_>>(), ["checked", "pytest"]);
        assert!(commands.evidence("checked").is_some());
    }

    #[test]
    fn logging_may_be_set_in_writ_toml_and_the_environment_wins() {
        let (_dir, file) = toml_file("rust_log = \"debug\"\nwrit_log_format = \"json\"\n");
        let s = Settings::load(Some(&file), &env_of(&[("RUST_LOG", "warn")])).unwrap();
        assert_eq!(
            s.log,
            LogSettings {
                filter: "warn".into(),
                json: true
            }
        );
        let err = Settings::load(None, &env_of(&[("WRIT_LOG_FORMAT", "yaml")])).unwrap_err();
        assert!(err.to_string().starts_with("WRIT_LOG_FORMAT:"), "{err}");
    }

    #[test]
    fn formatters_and_diagnostics_must_name_configured_commands_or_start_up_fails_naming_them() {
        let commands = (
            "WRIT_COMMANDS",
            r#"{"fmt": ["python3", "fmt.py", "{args}"], "compile": ["python3", "-m", "py_compile", "{args}"], "bare": ["true"]}"#,
        );
        let s = Settings::load(
            None,
            &env_of(&[
                commands,
                ("WRIT_FORMATTERS", r#"{"python": "fmt"}"#),
                ("WRIT_DIAGNOSTICS", r#"{"python": "compile"}"#),
            ]),
        )
        .unwrap();
        assert_eq!(s.run.formatters, [("python".into(), "fmt".into())]);
        assert_eq!(s.run.diagnostics, [("python".into(), "compile".into())]);
        assert!(
            Settings::load(None, &env_of(&[commands]))
                .unwrap()
                .run
                .formatters
                .is_empty(),
            "none by default"
        );

        for (name, raw, says) in [
            ("WRIT_FORMATTERS", r#"{"python": "black"}"#, "\"black\""),
            (
                "WRIT_DIAGNOSTICS",
                r#"{"python": "bare"}"#,
                "takes the file's path",
            ),
            (
                "WRIT_DIAGNOSTICS",
                r#"{"cobol": "compile"}"#,
                "unknown language",
            ),
            ("WRIT_FORMATTERS", "ruff format", "JSON object"),
        ] {
            let err = Settings::load(None, &env_of(&[commands, (name, raw)])).unwrap_err();
            let err = err.to_string();
            assert!(err.starts_with(name) && err.contains(says), "{err}");
        }
        let err = Settings::load(
            None,
            &env_of(&[("WRIT_FORMATTERS", r#"{"python": "fmt"}"#)]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("WRIT_FORMATTERS") && err.contains("WRIT_COMMANDS"),
            "{err}"
        );
    }

    #[test]
    fn review_is_off_by_default_its_time_is_a_week_and_a_bad_time_is_named() {
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert!(!s.review.by_default);
        assert_eq!(s.review.ttl, Duration::from_secs(7 * 24 * 3600));
        let s = Settings::load(
            None,
            &env_of(&[("WRIT_REVIEW", "1"), ("WRIT_REVIEW_TTL", "90m")]),
        )
        .unwrap();
        assert!(s.review.by_default);
        assert_eq!(s.review.ttl, Duration::from_secs(90 * 60));
        for bad in ["0", "0s", "7 days", "-1d"] {
            let err = Settings::load(None, &env_of(&[("WRIT_REVIEW_TTL", bad)])).unwrap_err();
            assert!(err.to_string().contains("WRIT_REVIEW_TTL"), "{bad}: {err}");
        }
    }

    #[test]
    fn history_retention_defaults_to_thirty_days_reads_units_and_names_a_bad_value() {
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert_eq!(
            s.history_retention,
            Some(Duration::from_secs(30 * 24 * 3600))
        );
        for (raw, want) in [
            ("12h", Some(12 * 3600)),
            ("90m", Some(5400)),
            ("7d", Some(7 * 24 * 3600)),
            ("off", None),
            ("0", None),
        ] {
            let s = Settings::load(None, &env_of(&[("WRIT_HISTORY_RETENTION", raw)])).unwrap();
            assert_eq!(s.history_retention, want.map(Duration::from_secs), "{raw}");
        }
        let err =
            Settings::load(None, &env_of(&[("WRIT_HISTORY_RETENTION", "3 weeks")])).unwrap_err();
        assert!(err.to_string().contains("WRIT_HISTORY_RETENTION"), "{err}");
    }

    #[test]
    fn the_straggler_policy_waits_for_all_unless_configured_and_names_a_bad_variable() {
        use writ_core::synthesis::batch::{Enough, Extra};
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert_eq!(
            s.models.straggler,
            writ_core::synthesis::StragglerPolicy::WaitAll
        );
        let s = Settings::load(
            None,
            &env_of(&[
                ("WRIT_STRAGGLER_ENOUGH", "all_but_slowest"),
                ("WRIT_STRAGGLER_EXTRA_FACTOR", "0.5"),
            ]),
        )
        .unwrap();
        assert_eq!(
            s.models.straggler,
            writ_core::synthesis::StragglerPolicy::CutOff {
                enough: Enough::AllButSlowest,
                extra: Extra::Relative(0.5)
            }
        );
        let err = Settings::load(
            None,
            &env_of(&[
                ("WRIT_STRAGGLER_ENOUGH", "2"),
                ("WRIT_STRAGGLER_EXTRA_MS", "soon"),
            ]),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("WRIT_STRAGGLER_EXTRA_MS:"),
            "{err}"
        );
        let err = Settings::load(None, &env_of(&[("WRIT_STRAGGLER_ENOUGH", "2")])).unwrap_err();
        assert!(
            err.to_string().starts_with("WRIT_STRAGGLER_EXTRA_MS:"),
            "{err}"
        );
    }

    #[test]
    fn defaults_are_the_embedded_ones() {
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(s.repo_dir, PathBuf::from("./workspace"));
        assert_eq!(s.addr.to_string(), DEFAULT_ADDR);
        assert_eq!(s.models.code_list, writ_local::default_candidates());
        assert_eq!(
            s.models.arbiter_model.as_deref(),
            Some(writ_local::DEFAULT_MODEL)
        );
        assert_eq!(s.models.problem(), None, "the embedded model needs no key");
        assert!(
            s.models.reason.contains("embedded model"),
            "{}",
            s.models.reason
        );
    }

    #[test]
    fn the_embedded_default_gives_way_to_a_key_a_code_list_or_the_off_switch() {
        let s = Settings::load(None, &env_of(&[("OPENROUTER_API_KEY", "sk-or-x")])).unwrap();
        assert!(s.models.code_list.is_empty());
        assert!(s.models.problem().unwrap().contains("CODE_LIST"));
        let s = Settings::load(None, &env_of(&[("CODE_LIST", "openai/gpt-x")])).unwrap();
        assert_eq!(s.models.code_list, vec!["openai/gpt-x"]);
        assert!(s.models.problem().unwrap().contains("OPENROUTER_API_KEY"));
        let s = Settings::load(None, &env_of(&[("WRIT_LOCAL_MODEL", "off")])).unwrap();
        assert!(s.models.code_list.is_empty());
        assert!(s.models.reason.contains("WRIT_LOCAL_MODEL=off"));
        let err = Settings::load(None, &env_of(&[("WRIT_LOCAL_MODEL", "maybe")])).unwrap_err();
        assert!(err.to_string().starts_with("WRIT_LOCAL_MODEL:"), "{err}");
    }

    #[test]
    fn local_models_never_need_the_key_but_a_remote_one_in_the_mix_does() {
        let s = Settings::load(
            None,
            &env_of(&[(
                "CODE_LIST",
                "local/smollm2-135m@t0.3,local/smollm2-135m@t0.8",
            )]),
        )
        .unwrap();
        assert_eq!(s.models.problem(), None);
        assert!(s.models.uses_local_model());
        let s = Settings::load(
            None,
            &env_of(&[
                ("CODE_LIST", "local/smollm2-135m"),
                ("CODE_MODEL", "openai/gpt-x"),
            ]),
        )
        .unwrap();
        assert!(s.models.problem().unwrap().contains("OPENROUTER_API_KEY"));
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert!(
            s.models
                .provider_key_missing_for(Some(&["openai/gpt-x".to_string()]))
        );
        assert!(
            !s.models
                .provider_key_missing_for(Some(&["local/smollm2-135m".to_string()]))
        );
    }

    #[test]
    fn named_local_models_keep_their_seeds_in_a_list_and_an_unknown_one_is_refused_by_name() {
        let s = Settings::load(
            None,
            &env_of(&[
                (
                    "CODE_LIST",
                    "local/qwen2.5-coder-1.5b@t0.8,s1,local/qwen2.5-coder-1.5b@t0.8,s2,openai/gpt-x",
                ),
                ("CODE_MODEL", "local/qwen2.5-coder-1.5b"),
                ("WRIT_TEST_MODELS", "local/gemma-3-270m@t0.2,s7"),
            ]),
        )
        .unwrap();
        assert_eq!(
            s.models.code_list,
            vec![
                "local/qwen2.5-coder-1.5b@t0.8,s1",
                "local/qwen2.5-coder-1.5b@t0.8,s2",
                "openai/gpt-x"
            ]
        );
        let names: Vec<_> = s.models.local_models().iter().map(|m| m.name).collect();
        assert_eq!(names, vec!["qwen2.5-coder-1.5b", "gemma-3-270m"]);
        let err = Settings::load(None, &env_of(&[("CODE_LIST", "local/llama-70b")])).unwrap_err();
        assert!(err.to_string().starts_with("CODE_LIST:"), "{err}");
        assert!(
            err.to_string().contains("local/qwen2.5-coder-1.5b"),
            "{err}"
        );
        let err =
            Settings::load(None, &env_of(&[("CODE_MODEL", "local/smollm2-135m@q1")])).unwrap_err();
        assert!(err.to_string().starts_with("CODE_MODEL:"), "{err}");
    }

    #[test]
    fn a_model_file_is_given_by_name_and_path_and_the_rest_live_in_the_model_dir() {
        let s = Settings::load(
            None,
            &env_of(&[
                ("WRIT_LOCAL_MODEL_DIR", "/models"),
                ("WRIT_LOCAL_MODEL_FILES", "qwen2.5-coder-1.5b=/big/q.gguf"),
                ("WRIT_LOCAL_MODEL_PATH", "/small/s.gguf"),
            ]),
        )
        .unwrap();
        let local = &s.models.local;
        assert_eq!(
            local.path_of(&writ_local::catalogue::QWEN25_CODER_1_5B),
            PathBuf::from("/big/q.gguf")
        );
        assert_eq!(
            local.path_of(&writ_local::catalogue::SMOLLM2_135M),
            PathBuf::from("/small/s.gguf")
        );
        assert_eq!(
            local.path_of(&writ_local::catalogue::GEMMA3_270M),
            PathBuf::from("/models/gemma-3-270m-q4_k_m.gguf")
        );
        assert_eq!(
            local.max_tokens, None,
            "unset: each call's purpose sets the cap"
        );
        let err = Settings::load(
            None,
            &env_of(&[("WRIT_LOCAL_MODEL_FILES", "llama=/x.gguf")]),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("WRIT_LOCAL_MODEL_FILES:"),
            "{err}"
        );
    }

    #[test]
    fn the_environment_wins_over_the_file_and_lists_split_on_commas() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("writ.toml");
        std::fs::write(&file, "repo_dir = \"/from/file\"\ncode_list = [\"a/x\", \"b/y\"]\ncode_model = \"file/arb\"\n").unwrap();
        let s = Settings::load(Some(&file), &env_of(&[("CODE_MODEL", "env/arb")])).unwrap();
        assert_eq!(s.repo_dir, PathBuf::from("/from/file"));
        assert_eq!(s.models.code_list, vec!["a/x", "b/y"]);
        assert_eq!(s.models.arbiter_model.as_deref(), Some("env/arb"));
    }

    #[test]
    fn write_sessions_default_to_the_file_bound_and_refuse_a_zero_by_name() {
        let s = Settings::load(
            None,
            &env_of(&[
                ("WRIT_MAX_FILE_BYTES", "5000"),
                ("WRIT_MAX_BODY_BYTES", "4096"),
            ]),
        )
        .unwrap();
        assert_eq!(s.sessions.max_bytes, 5000);
        assert_eq!(
            s.sessions.max_chunk_bytes, 4096,
            "never above a request body"
        );
        assert_eq!(s.sessions.max_open, 16);
        assert_eq!(s.sessions.idle, Duration::from_millis(2000));
        assert_eq!(s.sessions.ttl, Duration::from_secs(3600));
        let err = Settings::load(None, &env_of(&[("WRITE_SESSION_TTL_SECS", "0")])).unwrap_err();
        assert!(err.to_string().contains("WRITE_SESSION_TTL_SECS"), "{err}");
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let err = Settings::load(None, &env_of(&[("WRIT_ADDR", "nope")])).unwrap_err();
        assert!(err.to_string().starts_with("WRIT_ADDR:"), "{err}");
        let err = Settings::load(None, &env_of(&[("DATABASE_URL", "mysql://x")])).unwrap_err();
        assert!(err.to_string().starts_with("DATABASE_URL:"), "{err}");
    }

    #[test]
    fn the_key_is_never_printed_and_its_absence_is_named() {
        let s = Settings::load(
            None,
            &env_of(&[
                ("OPENROUTER_API_KEY", "sk-or-supersecret"),
                ("CODE_LIST", "a/b"),
            ]),
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("supersecret"));
        let s = Settings::load(
            None,
            &env_of(&[("DATABASE_URL", "postgres://writ:hunter2@db.internal/writ")]),
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("hunter2"), "{s:?}");
        assert_eq!(s.models.problem(), None);
        let s = Settings::load(None, &env_of(&[("CODE_LIST", "a/b")])).unwrap();
        assert!(s.models.problem().unwrap().contains("OPENROUTER_API_KEY"));
        let s = Settings::load(
            None,
            &env_of(&[
                ("CODE_LIST", "a/b"),
                ("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1"),
            ]),
        )
        .unwrap();
        assert_eq!(s.models.problem(), None, "a local endpoint needs no key");
    }
}
