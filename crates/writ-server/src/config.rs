//! Configuration: environment variables (the names users of the original tool know), optionally
//! a `writ.toml` with the same names in lower case; the environment wins.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

pub const DEFAULT_BASE_URL: &str = "https://openrouter.ai/api/v1";
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_DATABASE_URL: &str = "sqlite://./writ.db";
pub const DEFAULT_REPO_DIR: &str = "./workspace";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
    #[error("cannot read config file {path}: {message}")]
    File { path: String, message: String },
}

/// Everything writ reads at start-up. `Debug` never shows the API key (`SecretString` redacts it).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The only write target; every path is relative to it.
    pub repo_dir: PathBuf,
    /// `postgres://…` or `sqlite://…`.
    pub database_url: String,
    pub openrouter_api_key: Option<SecretString>,
    pub openrouter_base_url: String,
    /// Candidate models asked for every file.
    pub code_list: Vec<String>,
    /// The arbiter.
    pub code_model: Option<String>,
    /// Tried first when every candidate failed.
    pub code_gen_model: Option<String>,
    pub image_model: Option<String>,
    pub addr: SocketAddr,
    /// Largest request body accepted (`WRIT_MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// Characters `GET /files/{path}` returns unless asked for more (the seeds' 10,000).
    pub read_default_chars: usize,
    /// Most characters a caller may ask `GET /files/{path}` for.
    pub read_max_chars: usize,
    /// A pending operation older than this is settled against the disk by the reconciler.
    pub reconcile_after: Duration,
    /// Attempts per model call, the first included (`WRIT_MODEL_MAX_ATTEMPTS`).
    pub model_max_attempts: u32,
    /// Bound on one model call, retries included (`WRIT_MODEL_DEADLINE_SECS`).
    pub model_deadline: Duration,
    /// First retry wait cap (`WRIT_MODEL_BACKOFF_MS`); doubles per attempt.
    pub model_backoff: Duration,
    /// Completion token cap per candidate (`WRIT_MAX_TOKENS`).
    pub max_tokens: u32,
    /// Wait before the second fallback model (`WRIT_FALLBACK_BACKOFF_MS`); doubles after each.
    pub fallback_backoff: Duration,
    /// Which config file was read, if any (for `writ check`).
    pub config_file: Option<PathBuf>,
}

impl Settings {
    /// Reads the process environment and `config_file` (or `./writ.toml` when present).
    pub fn from_env(config_file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load(config_file, &|name| std::env::var(name).ok())
    }

    /// Reads `env` and the config file; separated from the process environment for tests.
    pub fn load(
        config_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let (file_values, file_used) =
            read_file(config_file.map(Path::to_path_buf).or_else(|| {
                env("WRIT_CONFIG").map(PathBuf::from).or_else(|| {
                    let default = PathBuf::from("writ.toml");
                    default.exists().then_some(default)
                })
            }))?;
        let get = |name: &str| -> Option<String> {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| file_values.get(&name.to_ascii_lowercase()).cloned())
        };

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

        Ok(Settings {
            repo_dir: PathBuf::from(
                get("REPO_DIR").unwrap_or_else(|| DEFAULT_REPO_DIR.to_string()),
            ),
            database_url,
            openrouter_api_key: get("OPENROUTER_API_KEY").map(SecretString::from),
            openrouter_base_url: get("OPENROUTER_BASE_URL")
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_string())
                .trim_end_matches('/')
                .to_string(),
            code_list: get("CODE_LIST")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            code_model: get("CODE_MODEL"),
            code_gen_model: get("CODE_GEN_MODEL"),
            image_model: get("IMAGE_MODEL"),
            addr,
            max_body_bytes: parse_num(&get, "WRIT_MAX_BODY_BYTES", 10 * 1024 * 1024)?,
            read_default_chars: parse_num(&get, "WRIT_READ_DEFAULT_CHARS", 10_000)?,
            read_max_chars: parse_num(&get, "WRIT_READ_MAX_CHARS", 1_000_000)?,
            reconcile_after: Duration::from_secs(
                parse_num(&get, "WRIT_RECONCILE_AFTER_SECS", 30)? as u64
            ),
            model_max_attempts: parse_num(&get, "WRIT_MODEL_MAX_ATTEMPTS", 3)?.max(1) as u32,
            model_deadline: Duration::from_secs(
                parse_num(&get, "WRIT_MODEL_DEADLINE_SECS", 120)? as u64
            ),
            model_backoff: Duration::from_millis(
                parse_num(&get, "WRIT_MODEL_BACKOFF_MS", 500)? as u64
            ),
            max_tokens: parse_num(&get, "WRIT_MAX_TOKENS", 8_000)? as u32,
            fallback_backoff: Duration::from_millis(parse_num(
                &get,
                "WRIT_FALLBACK_BACKOFF_MS",
                500,
            )? as u64),
            config_file: file_used,
        })
    }

    /// Whether calls go to OpenRouter itself (which needs a key), not a local or proxy endpoint.
    pub fn provider_is_openrouter(&self) -> bool {
        self.openrouter_base_url.contains("openrouter.ai")
    }

    /// Every model named in the configuration, in order, without repeats.
    pub fn configured_models(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for m in self
            .code_list
            .iter()
            .chain(&self.code_model)
            .chain(&self.code_gen_model)
        {
            if !all.contains(m) {
                all.push(m.clone());
            }
        }
        all
    }

    /// Whether calls would go to OpenRouter without a key.
    pub fn provider_key_missing(&self) -> bool {
        let missing = self
            .openrouter_api_key
            .as_ref()
            .is_none_or(|k| k.expose_secret().trim().is_empty());
        missing && self.provider_is_openrouter()
    }

    /// What stops a model-backed write (`POST /write_codebase`), naming the variable to set.
    pub fn model_problem(&self) -> Option<String> {
        if self.code_list.is_empty() {
            return Some(
                "no candidate models are configured: set CODE_LIST (comma-separated model ids)"
                    .into(),
            );
        }
        let key_missing = self
            .openrouter_api_key
            .as_ref()
            .is_none_or(|k| k.expose_secret().trim().is_empty());
        if key_missing && self.provider_is_openrouter() {
            return Some(
                "OPENROUTER_API_KEY is not set, and CODE_LIST names OpenRouter models".into(),
            );
        }
        None
    }
}

fn parse_num(
    get: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: usize,
) -> Result<usize, ConfigError> {
    match get(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
            name,
            message: format!("'{v}' is not a whole number"),
        }),
    }
}

fn read_file(
    path: Option<PathBuf>,
) -> Result<(HashMap<String, String>, Option<PathBuf>), ConfigError> {
    let Some(path) = path else {
        return Ok((HashMap::new(), None));
    };
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let mut values = HashMap::new();
    for (k, v) in table {
        let s = match v {
            toml::Value::String(s) => s,
            toml::Value::Array(items) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| i.to_string())
                })
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        values.insert(k.to_ascii_lowercase(), s);
    }
    Ok((values, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_are_the_embedded_ones() {
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(s.repo_dir, PathBuf::from("./workspace"));
        assert_eq!(s.addr.to_string(), DEFAULT_ADDR);
        assert!(s.model_problem().unwrap().contains("CODE_LIST"));
    }

    #[test]
    fn the_environment_wins_over_the_file_and_lists_split_on_commas() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("writ.toml");
        std::fs::write(&file, "repo_dir = \"/from/file\"\ncode_list = [\"a/x\", \"b/y\"]\ncode_model = \"file/arb\"\n").unwrap();
        let s = Settings::load(Some(&file), &env_of(&[("CODE_MODEL", "env/arb")])).unwrap();
        assert_eq!(s.repo_dir, PathBuf::from("/from/file"));
        assert_eq!(s.code_list, vec!["a/x", "b/y"]);
        assert_eq!(s.code_model.as_deref(), Some("env/arb"));
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
        assert_eq!(s.model_problem(), None);
        let s = Settings::load(None, &env_of(&[("CODE_LIST", "a/b")])).unwrap();
        assert!(s.model_problem().unwrap().contains("OPENROUTER_API_KEY"));
        let s = Settings::load(
            None,
            &env_of(&[
                ("CODE_LIST", "a/b"),
                ("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1"),
            ]),
        )
        .unwrap();
        assert_eq!(s.model_problem(), None, "a local endpoint needs no key");
    }
}
