//! `WRIT_LOCAL_*`: the embedded llama.cpp models, writ's "works offline" default provider.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use writ_local::LocalModel;

use super::ConfigError;
use super::source::{Get, parse_list, parse_num};

#[derive(Debug, Clone)]
pub struct LocalSettings {
    /// `WRIT_LOCAL_MODEL=auto` (default): the embedded default model serves when neither
    /// `OPENROUTER_API_KEY` nor `CODE_LIST` is set; `off`: no `local/…` model ever serves.
    pub enabled: bool,
    /// `WRIT_LOCAL_MODEL_DIR`: where `writ models fetch` puts models and writ looks for them.
    pub model_dir: PathBuf,
    /// Files given by path, by model name: `WRIT_LOCAL_MODEL_FILES`
    /// (`qwen2.5-coder-1.5b=/models/q.gguf,…`), and `WRIT_LOCAL_MODEL_PATH` for the default one.
    pub files: BTreeMap<String, PathBuf>,
    /// `WRIT_LOCAL_WORKERS`: generations at once.
    pub workers: usize,
    /// `WRIT_LOCAL_THREADS`: ggml threads per worker (0 = half the cores).
    pub threads: usize,
    /// `WRIT_LOCAL_CONTEXT_TOKENS`: prompt + completion window (at most the model's own).
    pub context_tokens: u32,
    /// `WRIT_LOCAL_MAX_TOKENS`: a cap on every call's completion; unset, each call's purpose sets
    /// it (2,048 for files and tests, 512 for verdicts).
    pub max_tokens: Option<u32>,
    /// `WRIT_LOCAL_DEADLINE_SECS`: bound on one generation, and apart on its wait in the queue.
    pub deadline: Duration,
    /// `WRIT_LOCAL_MEMORY_MB`: what the loaded models may take; the least recently used are
    /// unloaded to make room.
    pub memory_mb: u64,
    /// `WRIT_LOCAL_ANSWER_CACHE`: a directory where answers are kept and replayed, for evals
    /// that compare ways of choosing among the same samples (`scripts/eval-real`); unset, off.
    pub answer_cache: Option<PathBuf>,
}

impl LocalSettings {
    pub(super) fn load(get: &Get<'_>, env: &Get<'_>) -> Result<Self, ConfigError> {
        let model_dir = get("WRIT_LOCAL_MODEL_DIR")
            .filter(|d| !d.trim().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| writ_local::fetch::default_model_dir(env));
        let mut files = BTreeMap::new();
        for entry in parse_list(get, "WRIT_LOCAL_MODEL_FILES") {
            let invalid = |message: String| ConfigError::Invalid {
                name: "WRIT_LOCAL_MODEL_FILES",
                message,
            };
            let (name, path) = entry.split_once('=').ok_or_else(|| {
                invalid(format!(
                    "'{entry}' must be NAME=PATH, e.g. qwen2.5-coder-1.5b=/models/q.gguf"
                ))
            })?;
            let model = writ_local::catalogue::find(name.trim()).ok_or_else(|| {
                invalid(format!(
                    "'{}' is not a model writ embeds ({})",
                    name.trim(),
                    writ_local::catalogue::names()
                ))
            })?;
            files.insert(model.name.to_string(), PathBuf::from(path.trim()));
        }
        if let Some(path) = get("WRIT_LOCAL_MODEL_PATH").filter(|p| !p.trim().is_empty()) {
            files.insert(
                writ_local::catalogue::SMOLLM2_135M.name.to_string(),
                PathBuf::from(path),
            );
        }
        let max_tokens = match get("WRIT_LOCAL_MAX_TOKENS") {
            None => None,
            Some(_) => Some(parse_num(get, "WRIT_LOCAL_MAX_TOKENS", 0)?.max(1) as u32),
        };
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
            model_dir,
            files,
            workers: parse_num(get, "WRIT_LOCAL_WORKERS", 1)?.max(1),
            threads: parse_num(get, "WRIT_LOCAL_THREADS", 0)?,
            context_tokens: parse_num(get, "WRIT_LOCAL_CONTEXT_TOKENS", 4096)?.clamp(512, 32768)
                as u32,
            max_tokens,
            deadline: Duration::from_secs(
                parse_num(get, "WRIT_LOCAL_DEADLINE_SECS", 600)?.max(1) as u64
            ),
            memory_mb: parse_num(get, "WRIT_LOCAL_MEMORY_MB", 4096)?.max(1) as u64,
            answer_cache: get("WRIT_LOCAL_ANSWER_CACHE")
                .filter(|d| !d.trim().is_empty())
                .map(PathBuf::from),
        })
    }

    /// The file `model` is served from: given by path, or in the model directory.
    pub fn path_of(&self, model: &LocalModel) -> PathBuf {
        self.files
            .get(model.name)
            .cloned()
            .unwrap_or_else(|| self.model_dir.join(model.file_name))
    }
}
