//! Which models writ asks, through which provider, and how: `CODE_LIST`, `CODE_MODEL`,
//! `CODE_GEN_MODEL`, `IMAGE_MODEL`, the OpenRouter endpoint and key, each model's provider and
//! price (`[[models]]`, [`super::providers`]), call limits and retries, the straggler policy —
//! and the provider policy: the embedded model serves when nothing else is configured, and what
//! stops a model-backed write is said naming the variable to set.

use std::time::Duration;

use secrecy::SecretString;
use writ_core::synthesis::StragglerPolicy;

use super::ConfigError;
use super::local::LocalSettings;
use super::providers::{Provider, Providers, Unpriced, is_openrouter};
use super::source::{Get, parse_list, parse_num};

/// `Debug` never shows the key (`SecretString` redacts it).
#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub openrouter_api_key: Option<SecretString>,
    pub openrouter_base_url: String,
    /// Candidate models asked for every file.
    pub code_list: Vec<String>,
    /// The arbiter.
    pub arbiter_model: Option<String>,
    /// Tried first when every candidate failed.
    pub fallback_model: Option<String>,
    /// `WRIT_TEST_MODELS`: the models that write generated checks; empty: the arbiter.
    pub test_models: Vec<String>,
    pub image_model: Option<String>,
    /// Attempts per model call, the first included (`WRIT_MODEL_MAX_ATTEMPTS`).
    pub max_attempts: u32,
    /// Bound on one model call, retries included (`WRIT_MODEL_DEADLINE_SECS`).
    pub deadline: Duration,
    /// First retry wait cap (`WRIT_MODEL_BACKOFF_MS`); doubles per attempt.
    pub backoff: Duration,
    /// Completion token cap per candidate (`WRIT_MAX_TOKENS`).
    pub max_tokens: u32,
    /// Prompt tokens of the repository map in each candidate prompt (`WRIT_REPO_MAP_TOKENS`;
    /// 0 turns it off; a batch may set its own with `options.repo_map_tokens`).
    pub repo_map_tokens: usize,
    /// How many of the caller's recent operations each candidate prompt lists
    /// (`WRIT_RECENT_OPERATIONS`; 0: none).
    pub recent_operations: u32,
    /// Wait before the second fallback model (`WRIT_FALLBACK_BACKOFF_MS`); doubles after each.
    pub fallback_backoff: Duration,
    /// Upstream calls in flight at once per model and in total (`WRIT_MODEL_MAX_CONCURRENT_PER_MODEL`,
    /// `WRIT_MODEL_MAX_CONCURRENT`); calls beyond wait for a slot.
    pub max_concurrent_per_model: usize,
    pub max_concurrent: usize,
    /// When a fan-out stops waiting for slow candidates (`WRIT_STRAGGLER_ENOUGH`,
    /// `WRIT_STRAGGLER_EXTRA_MS` or `WRIT_STRAGGLER_EXTRA_FACTOR`); waits for all by default.
    pub straggler: StragglerPolicy,
    /// `WRIT_ALLOWED_MODELS`: the models a batch may name in its options; empty: only the
    /// configured ones, so no key holder can pick a costlier model than the operator did.
    pub allowed: Vec<String>,
    /// The embedded model: whether it may be the default, where it lives, how it runs.
    pub local: LocalSettings,
    /// Each model's provider and price (`[[models]]`); the first provider is the default one.
    pub providers: Providers,
    /// What becomes of a model whose provider reports no cost and that has no price
    /// (`WRIT_UNPRICED_MODELS`).
    pub unpriced: Unpriced,
    /// Which provider serves the models and why, in words, for `/readyz` and `writ check`.
    pub reason: String,
}

/// `WRIT_REPO_MAP_TOKENS`, within the bound a batch may ask for.
fn repo_map_tokens(get: &Get<'_>) -> Result<usize, ConfigError> {
    let name = "WRIT_REPO_MAP_TOKENS";
    let n = parse_num(
        get,
        name,
        writ_core::synthesis::stage::DEFAULT_REPO_MAP_TOKENS,
    )?;
    let max = writ_core::synthesis::batch::MAX_REPO_MAP_TOKENS;
    if n > max {
        return Err(ConfigError::Invalid {
            name,
            message: format!("at most {max}, got {n}"),
        });
    }
    Ok(n)
}

impl ModelSettings {
    /// `secrets` is the environment alone: the keys `[[models]]` names by variable are read
    /// from it, never from writ.toml.
    pub(super) fn load(
        get: &Get<'_>,
        env: &Get<'_>,
        secrets: &Get<'_>,
    ) -> Result<Self, ConfigError> {
        let local = LocalSettings::load(get, env)?;
        let key_set = get("OPENROUTER_API_KEY").is_some_and(|k| !k.trim().is_empty());
        let mut code_list = parse_model_list(get, "CODE_LIST");
        let mut arbiter_model = get("CODE_MODEL");
        let mut fallback_model = get("CODE_GEN_MODEL");
        let reason = if !code_list.is_empty() {
            "CODE_LIST names the candidate models".to_string()
        } else if !local.enabled {
            "CODE_LIST is not set and WRIT_LOCAL_MODEL=off".to_string()
        } else if key_set {
            "OPENROUTER_API_KEY is set but CODE_LIST is not; the embedded model is used only when neither is set".to_string()
        } else {
            // The "works offline" default, the way SQLite is the default audit store.
            code_list = writ_local::default_candidates();
            arbiter_model.get_or_insert_with(|| writ_local::DEFAULT_MODEL.to_string());
            // A fourth seed: when no candidate parses, the fallback samples once more.
            fallback_model.get_or_insert_with(|| format!("{}@t0.4,s4", writ_local::DEFAULT_MODEL));
            "embedded model (the offline default): neither OPENROUTER_API_KEY nor CODE_LIST is set; set them to use OpenRouter, or WRIT_LOCAL_MODEL=off".to_string()
        };
        for (name, id) in [
            ("CODE_LIST", &code_list),
            (
                "WRIT_TEST_MODELS",
                &parse_model_list(get, "WRIT_TEST_MODELS"),
            ),
        ]
        .into_iter()
        .flat_map(|(n, ids)| ids.iter().map(move |id| (n, id.clone())))
        .chain(arbiter_model.iter().map(|m| ("CODE_MODEL", m.clone())))
        .chain(fallback_model.iter().map(|m| ("CODE_GEN_MODEL", m.clone())))
        {
            check_local_id(name, &id)?;
        }
        let client_defaults = writ_models::ClientConfig::default();
        let openrouter_api_key = get("OPENROUTER_API_KEY").map(SecretString::from);
        let openrouter_base_url = get("OPENROUTER_BASE_URL")
            .unwrap_or_else(|| writ_models::OPENROUTER_BASE_URL.to_string())
            .trim_end_matches('/')
            .to_string();
        let providers = Providers::load(
            get,
            secrets,
            Provider {
                base_url: openrouter_base_url.clone(),
                key_var: Some("OPENROUTER_API_KEY".into()),
                key: openrouter_api_key.clone(),
                headers: writ_models::ExtraHeaders::default(),
                key_required: is_openrouter(&openrouter_base_url),
            },
        )?;
        let settings = ModelSettings {
            openrouter_api_key,
            openrouter_base_url,
            code_list,
            arbiter_model,
            fallback_model,
            test_models: parse_model_list(get, "WRIT_TEST_MODELS"),
            image_model: get("IMAGE_MODEL"),
            max_attempts: parse_num(get, "WRIT_MODEL_MAX_ATTEMPTS", 3)?.max(1) as u32,
            deadline: Duration::from_secs(parse_num(get, "WRIT_MODEL_DEADLINE_SECS", 120)? as u64),
            backoff: Duration::from_millis(parse_num(get, "WRIT_MODEL_BACKOFF_MS", 500)? as u64),
            max_tokens: parse_num(get, "WRIT_MAX_TOKENS", 8_000)? as u32,
            repo_map_tokens: repo_map_tokens(get)?,
            recent_operations: parse_num(get, "WRIT_RECENT_OPERATIONS", 10)?.min(100) as u32,
            fallback_backoff: Duration::from_millis(
                parse_num(get, "WRIT_FALLBACK_BACKOFF_MS", 500)? as u64,
            ),
            max_concurrent_per_model: parse_num(
                get,
                "WRIT_MODEL_MAX_CONCURRENT_PER_MODEL",
                client_defaults.max_concurrent_per_model,
            )?
            .max(1),
            max_concurrent: parse_num(
                get,
                "WRIT_MODEL_MAX_CONCURRENT",
                client_defaults.max_concurrent_total,
            )?
            .max(1),
            straggler: straggler_policy(get)?,
            allowed: parse_model_list(get, "WRIT_ALLOWED_MODELS"),
            local,
            providers,
            unpriced: Unpriced::load(get)?,
            reason,
        };
        settings.refuse_unpriced()?;
        Ok(settings)
    }

    /// With `WRIT_UNPRICED_MODELS=refuse`: fails naming each configured model that would carry
    /// no cost — its provider reports none and `[[models]]` gives it no price.
    fn refuse_unpriced(&self) -> Result<(), ConfigError> {
        if self.unpriced != Unpriced::Refuse {
            return Ok(());
        }
        let unpriced: Vec<String> = self
            .named()
            .into_iter()
            .filter(|(_, id)| !self.providers.costed(id))
            .map(|(variable, id)| format!("{variable} {id} ({})", self.providers.describe(&id)))
            .collect();
        if unpriced.is_empty() {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            name: "WRIT_UNPRICED_MODELS",
            message: format!(
                "refuse: no cost is reported for these models and [[models]] gives them no price: {}; give each an entry with input_price and output_price (its id, or a prefix such as \"local/*\"), or set WRIT_UNPRICED_MODELS=tokens to count them by tokens only",
                unpriced.join(", ")
            ),
        })
    }

    /// Every model a setting names, with the setting, each pair once.
    fn named(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        let lists: [(&'static str, &[String]); 3] = [
            ("CODE_LIST", &self.code_list),
            ("WRIT_TEST_MODELS", &self.test_models),
            ("WRIT_ALLOWED_MODELS", &self.allowed),
        ];
        let single = [
            ("CODE_MODEL", &self.arbiter_model),
            ("CODE_GEN_MODEL", &self.fallback_model),
            ("IMAGE_MODEL", &self.image_model),
        ];
        let named = lists
            .into_iter()
            .flat_map(|(n, ids)| ids.iter().map(move |id| (n, id)))
            .chain(
                single
                    .into_iter()
                    .filter_map(|(n, id)| id.as_ref().map(|id| (n, id))),
            );
        for (variable, id) in named {
            if !out.iter().any(|(v, i)| *v == variable && i == id) {
                out.push((variable, id.clone()));
            }
        }
        out
    }

    /// Every model a call may go to: the configured ones, the test writers and the image model.
    pub fn in_use(&self) -> Vec<String> {
        let mut all = self.configured();
        for m in self.test_models.iter().chain(&self.image_model) {
            if !all.contains(m) {
                all.push(m.clone());
            }
        }
        all
    }

    /// Whether any model in use goes to the remote provider `index`.
    pub fn remote_in_use(&self, index: usize) -> bool {
        self.in_use()
            .iter()
            .any(|m| self.providers.remote_of(m) == Some(index))
    }

    /// Every model named in the configuration, in order, without repeats.
    pub fn configured(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for m in self
            .code_list
            .iter()
            .chain(&self.arbiter_model)
            .chain(&self.fallback_model)
        {
            if !all.contains(m) {
                all.push(m.clone());
            }
        }
        all
    }

    /// The first provider that calls for `requested` models (else the configured ones) would
    /// reach without the key it needs, and those models; `local/…` models never need one.
    fn missing_key_for(
        &self,
        requested: Option<&[String]>,
    ) -> Option<(usize, &Provider, Vec<String>)> {
        let models = match requested {
            Some(models) => models.to_vec(),
            None => self.configured(),
        };
        self.providers
            .remotes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.key_missing())
            .find_map(|(i, provider)| {
                let served: Vec<String> = models
                    .iter()
                    .filter(|m| self.providers.remote_of(m) == Some(i))
                    .cloned()
                    .collect();
                (!served.is_empty()).then_some((i, provider, served))
            })
    }

    /// Whether calls for `requested` models (else the configured ones) would go to a provider
    /// that needs a key without one.
    pub fn provider_key_missing_for(&self, requested: Option<&[String]>) -> bool {
        self.missing_key_for(requested).is_some()
    }

    /// Whether calls would go to a provider that needs a key without one.
    pub fn provider_key_missing(&self) -> bool {
        self.provider_key_missing_for(None)
    }

    /// Whether any configured model is served by the embedded model.
    pub fn uses_local_model(&self) -> bool {
        !self.local_models().is_empty()
    }

    /// The embedded models the configuration calls (candidates, arbiter, fallback, test
    /// writers), each once.
    pub fn local_models(&self) -> Vec<&'static writ_local::LocalModel> {
        let mut out: Vec<&'static writ_local::LocalModel> = Vec::new();
        for id in self.configured().iter().chain(&self.test_models) {
            if let Some(m) = writ_local::is_local(id)
                .then(|| writ_local::catalogue::find(id))
                .flatten()
                && !out.iter().any(|o| o.name == m.name)
            {
                out.push(m);
            }
        }
        out
    }

    /// What stops a model-backed write for a batch that asked for `requested` candidate models
    /// (else the configured ones), naming the variable to set — the one check `writ check`,
    /// `/readyz` and `POST /write_codebase` share.
    pub fn problem_for(&self, requested: Option<&[String]>) -> Option<String> {
        if requested.is_none() && self.code_list.is_empty() {
            return Some(
                "no candidate models are configured: set CODE_LIST (comma-separated model ids, or send options.models)"
                    .into(),
            );
        }
        let (index, provider, models) = self.missing_key_for(requested)?;
        let var = provider.key_var.as_deref().unwrap_or("its key variable");
        Some(if index == 0 {
            "OPENROUTER_API_KEY is not set, and the models are served by OpenRouter".into()
        } else {
            format!(
                "{var} is not set, and {} serves {} ([[models]] names it as the key's variable)",
                provider.base_url,
                models.join(", ")
            )
        })
    }

    /// [`Self::problem_for`] the configured models.
    pub fn problem(&self) -> Option<String> {
        self.problem_for(None)
    }
}

/// A comma-separated list of model ids, where a local id's sampling settings may hold commas of
/// their own (`local/qwen2.5-coder-1.5b@t0.8,s1,local/qwen2.5-coder-1.5b@t0.8,s2`): a piece
/// that is a setting (`s1`, `t0.8`) after an id with settings belongs to that id.
fn parse_model_list(get: &Get<'_>, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for piece in parse_list(get, name) {
        let is_setting = !piece.contains('/')
            && piece.len() > 1
            && piece.starts_with(['s', 't'])
            && piece[1..].chars().all(|c| c.is_ascii_digit() || c == '.');
        match out.last_mut() {
            Some(last) if is_setting && last.contains('@') => {
                last.push(',');
                last.push_str(&piece);
            }
            _ => out.push(piece),
        }
    }
    out
}

/// A `local/…` id must name a model writ embeds, with settings that parse.
fn check_local_id(name: &'static str, id: &str) -> Result<(), ConfigError> {
    if !writ_local::is_local(id) {
        return Ok(());
    }
    let invalid = |message: String| ConfigError::Invalid { name, message };
    writ_local::model_id::LocalModelId::parse(id).map_err(invalid)?;
    writ_local::catalogue::find(id).map(|_| ()).ok_or_else(|| {
        invalid(format!(
            "'{id}' is not a model writ embeds ({})",
            writ_local::catalogue::names()
        ))
    })
}

/// The deployment's straggler policy; each refusal names the variable at fault.
fn straggler_policy(get: &Get<'_>) -> Result<StragglerPolicy, ConfigError> {
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
    StragglerPolicy::from_parts(
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
