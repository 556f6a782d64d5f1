//! `WRIT_LOCAL_*`: the embedded llama.cpp model, writ's "works offline" default provider.

use std::path::PathBuf;

use super::ConfigError;
use super::source::{Get, parse_num};

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

impl LocalSettings {
    pub(super) fn load(get: &Get<'_>, env: &Get<'_>) -> Result<Self, ConfigError> {
        Ok(LocalSettings {
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
            workers: parse_num(get, "WRIT_LOCAL_WORKERS", 1)?.max(1),
            threads: parse_num(get, "WRIT_LOCAL_THREADS", 0)?,
            context_tokens: parse_num(get, "WRIT_LOCAL_CONTEXT_TOKENS", 4096)?.clamp(512, 8192)
                as u32,
            max_tokens: parse_num(get, "WRIT_LOCAL_MAX_TOKENS", 512)?.max(1) as u32,
        })
    }
}
