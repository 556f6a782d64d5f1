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

/// Everything writ reads at start-up. `Debug` never shows the API key (`SecretString` redacts it)
/// or the database password (`DatabaseUrl` redacts it).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The only write target; every path is relative to it.
    pub repo_dir: PathBuf,
    /// `postgres://…` or `sqlite://…`; its password never shows in `Debug`.
    pub database_url: crate::redacted::DatabaseUrl,
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
    /// Upstream calls in flight at once per model and in total (`WRIT_MODEL_MAX_CONCURRENT_PER_MODEL`,
    /// `WRIT_MODEL_MAX_CONCURRENT`); calls beyond wait for a slot.
    pub model_max_concurrent_per_model: usize,
    pub model_max_concurrent: usize,
    /// When a fan-out stops waiting for slow candidates (`WRIT_STRAGGLER_ENOUGH`,
    /// `WRIT_STRAGGLER_EXTRA_MS` or `WRIT_STRAGGLER_EXTRA_FACTOR`); waits for all by default.
    pub straggler: writ_core::synthesis::StragglerPolicy,
    /// Which config file was read, if any (for `writ check`).
    pub config_file: Option<PathBuf>,
    /// API keys and limits (issue 6): who may call, how often, how much at once.
    pub guard: crate::limits::GuardSettings,
    /// Hosts, protected paths and connection limits (see [`crate::edge`]).
    pub edge: crate::edge::EdgeSettings,
    /// The embedded model (issue 8): whether it may be the default, where it lives, how it runs.
    pub local: LocalSettings,
    /// Which provider serves the models and why, in words, for `/readyz` and `writ check`.
    pub models_reason: String,
}

/// `WRIT_LOCAL_*`: the embedded llama.cpp model, writ's "works offline" default provider.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    /// `WRIT_LOCAL_MODEL=auto` (default): the embedded model serves when neither
    /// `OPENROUTER_API_KEY` nor `CODE_LIST` is set; `off`: never.
    pub enabled: bool,
    /// `WRIT_LOCAL_MODEL_PATH`; fetched there on first use when missing.
    pub model_path: PathBuf,
    /// `WRIT_LOCAL_WORKERS`: generations at once.
    pub workers: usize,
    /// `WRIT_LOCAL_THREADS`: ggml threads per worker (0 = half the cores).
    pub threads: usize,
    /// `WRIT_LOCAL_CONTEXT_TOKENS`: prompt + completion window.
    pub context_tokens: u32,
    /// `WRIT_LOCAL_MAX_TOKENS`: completion cap per call, whatever `WRIT_MAX_TOKENS` says.
    pub max_tokens: u32,
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

        let local = LocalSettings {
            enabled: match get("WRIT_LOCAL_MODEL").as_deref().map(str::trim) {
                None | Some("auto") => true,
                Some("off") => false,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "WRIT_LOCAL_MODEL",
                        message: format!("'{other}' must be auto or off"),
                    });
                }
            },
            model_path: get("WRIT_LOCAL_MODEL_PATH")
                .map(PathBuf::from)
                .unwrap_or_else(|| writ_local::fetch::default_model_path(env)),
            workers: parse_num(&get, "WRIT_LOCAL_WORKERS", 1)?.max(1),
            threads: parse_num(&get, "WRIT_LOCAL_THREADS", 0)?,
            context_tokens: parse_num(&get, "WRIT_LOCAL_CONTEXT_TOKENS", 4096)?.clamp(512, 8192)
                as u32,
            max_tokens: parse_num(&get, "WRIT_LOCAL_MAX_TOKENS", 512)?.max(1) as u32,
        };
        let key_set = get("OPENROUTER_API_KEY").is_some_and(|k| !k.trim().is_empty());
        let mut code_list: Vec<String> = get("CODE_LIST")
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let mut code_model = get("CODE_MODEL");
        let mut code_gen_model = get("CODE_GEN_MODEL");
        let models_reason = if !code_list.is_empty() {
            "CODE_LIST names the candidate models".to_string()
        } else if !local.enabled {
            "CODE_LIST is not set and WRIT_LOCAL_MODEL=off".to_string()
        } else if key_set {
            "OPENROUTER_API_KEY is set but CODE_LIST is not; the embedded model is used only when neither is set".to_string()
        } else {
            // The "works offline" default, the way SQLite is the default audit store.
            code_list = writ_local::default_candidates();
            code_model.get_or_insert_with(|| writ_local::SMOLLM2_135M.to_string());
            // A fourth seed: when no candidate parses, the fallback samples once more.
            code_gen_model.get_or_insert_with(|| format!("{}@t0.4,s4", writ_local::SMOLLM2_135M));
            "embedded model (the offline default): neither OPENROUTER_API_KEY nor CODE_LIST is set; set them to use OpenRouter, or WRIT_LOCAL_MODEL=off".to_string()
        };

        Ok(Settings {
            repo_dir: PathBuf::from(
                get("REPO_DIR").unwrap_or_else(|| DEFAULT_REPO_DIR.to_string()),
            ),
            database_url: crate::redacted::DatabaseUrl::new(database_url),
            openrouter_api_key: get("OPENROUTER_API_KEY").map(SecretString::from),
            openrouter_base_url: get("OPENROUTER_BASE_URL")
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_string())
                .trim_end_matches('/')
                .to_string(),
            code_list,
            code_model,
            code_gen_model,
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
            model_max_concurrent_per_model: parse_num(
                &get,
                "WRIT_MODEL_MAX_CONCURRENT_PER_MODEL",
                writ_models::ClientConfig::default().max_concurrent_per_model,
            )?
            .max(1),
            model_max_concurrent: parse_num(
                &get,
                "WRIT_MODEL_MAX_CONCURRENT",
                writ_models::ClientConfig::default().max_concurrent_total,
            )?
            .max(1),
            straggler: straggler_policy(&get)?,
            config_file: file_used,
            guard: crate::limits::GuardSettings::load(&get)?,
            edge: crate::edge::EdgeSettings::load(&get)?,
            local,
            models_reason,
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
        self.provider_key_missing_for(None)
    }

    /// Whether calls for `requested` models (else the configured ones) would go to OpenRouter
    /// without a key; `local/…` models never need one.
    pub fn provider_key_missing_for(&self, requested: Option<&[String]>) -> bool {
        let missing = self
            .openrouter_api_key
            .as_ref()
            .is_none_or(|k| k.expose_secret().trim().is_empty());
        let any_remote = match requested {
            Some(models) => models.iter().any(|m| !writ_local::is_local(m)),
            None => self
                .configured_models()
                .iter()
                .any(|m| !writ_local::is_local(m)),
        };
        missing && self.provider_is_openrouter() && any_remote
    }

    /// Whether any configured model is served by the embedded model.
    pub fn uses_local_model(&self) -> bool {
        self.configured_models()
            .iter()
            .any(|m| writ_local::is_local(m))
    }

    /// What stops a model-backed write (`POST /write_codebase`), naming the variable to set.
    pub fn model_problem(&self) -> Option<String> {
        if self.code_list.is_empty() {
            return Some(
                "no candidate models are configured: set CODE_LIST (comma-separated model ids)"
                    .into(),
            );
        }
        if self.provider_key_missing() {
            return Some(
                "OPENROUTER_API_KEY is not set, and the configured models include OpenRouter ones"
                    .into(),
            );
        }
        None
    }
}

/// The deployment's straggler policy; each refusal names the variable at fault.
fn straggler_policy(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<writ_core::synthesis::StragglerPolicy, ConfigError> {
    let extra_ms = get("WRIT_STRAGGLER_EXTRA_MS")
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| ConfigError::Invalid {
                name: "WRIT_STRAGGLER_EXTRA_MS",
                message: format!("'{v}' is not a whole number of milliseconds"),
            })
        })
        .transpose()?;
    let extra_factor = get("WRIT_STRAGGLER_EXTRA_FACTOR")
        .map(|v| {
            v.trim().parse::<f64>().map_err(|_| ConfigError::Invalid {
                name: "WRIT_STRAGGLER_EXTRA_FACTOR",
                message: format!("'{v}' is not a number"),
            })
        })
        .transpose()?;
    writ_core::synthesis::StragglerPolicy::from_parts(
        get("WRIT_STRAGGLER_ENOUGH").as_deref(),
        extra_ms,
        extra_factor,
    )
    .map_err(|e| ConfigError::Invalid {
        name: match e.field {
            "enough" => "WRIT_STRAGGLER_ENOUGH",
            "extra_factor" => "WRIT_STRAGGLER_EXTRA_FACTOR",
            _ => "WRIT_STRAGGLER_EXTRA_MS",
        },
        message: e.message,
    })
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
    fn the_straggler_policy_waits_for_all_unless_configured_and_names_a_bad_variable() {
        use writ_core::synthesis::fanout::{Enough, Extra};
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert_eq!(s.straggler, writ_core::synthesis::StragglerPolicy::WaitAll);
        let s = Settings::load(
            None,
            &env_of(&[
                ("WRIT_STRAGGLER_ENOUGH", "all_but_slowest"),
                ("WRIT_STRAGGLER_EXTRA_FACTOR", "0.5"),
            ]),
        )
        .unwrap();
        assert_eq!(
            s.straggler,
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
        assert_eq!(s.code_list, writ_local::default_candidates());
        assert_eq!(s.code_model.as_deref(), Some(writ_local::SMOLLM2_135M));
        assert_eq!(s.model_problem(), None, "the embedded model needs no key");
        assert!(
            s.models_reason.contains("embedded model"),
            "{}",
            s.models_reason
        );
    }

    #[test]
    fn the_embedded_default_gives_way_to_a_key_a_code_list_or_the_off_switch() {
        let s = Settings::load(None, &env_of(&[("OPENROUTER_API_KEY", "sk-or-x")])).unwrap();
        assert!(s.code_list.is_empty());
        assert!(s.model_problem().unwrap().contains("CODE_LIST"));
        let s = Settings::load(None, &env_of(&[("CODE_LIST", "openai/gpt-x")])).unwrap();
        assert_eq!(s.code_list, vec!["openai/gpt-x"]);
        assert!(s.model_problem().unwrap().contains("OPENROUTER_API_KEY"));
        let s = Settings::load(None, &env_of(&[("WRIT_LOCAL_MODEL", "off")])).unwrap();
        assert!(s.code_list.is_empty());
        assert!(s.models_reason.contains("WRIT_LOCAL_MODEL=off"));
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
        assert_eq!(s.model_problem(), None);
        assert!(s.uses_local_model());
        let s = Settings::load(
            None,
            &env_of(&[
                ("CODE_LIST", "local/smollm2-135m"),
                ("CODE_MODEL", "openai/gpt-x"),
            ]),
        )
        .unwrap();
        assert!(s.model_problem().unwrap().contains("OPENROUTER_API_KEY"));
        let s = Settings::load(None, &env_of(&[])).unwrap();
        assert!(s.provider_key_missing_for(Some(&["openai/gpt-x".to_string()])));
        assert!(!s.provider_key_missing_for(Some(&["local/smollm2-135m".to_string()])));
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
