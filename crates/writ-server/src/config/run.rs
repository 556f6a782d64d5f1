//! Running the caller's tests: which commands exist (`WRIT_COMMANDS`, or a `[commands]` table in
//! `writ.toml`) and the bounds of every run (`WRIT_RUN_*`).

use std::time::Duration;

use super::ConfigError;
use super::source::{Get, parse_num, parse_positive, parse_switch};

#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Command templates by name, as JSON (`{"pytest": ["python3", "-m", "pytest", "{args}"]}`);
    /// `None`: no commands, so `POST /run` and `options.validation` are refused.
    pub commands: Option<writ_sandbox::CommandSet>,
    /// `WRIT_GENERATE_CHECKS`: batches without `options.validation` get generated checks
    /// (default off).
    pub generate_checks: bool,
    /// `WRIT_CHECK_COMMANDS`: the configured command that runs generated checks, per language
    /// (JSON, default `{"python": "python", "javascript": "node"}`).
    pub check_commands: Vec<(String, String)>,
    /// `WRIT_FORMATTERS`: the project's formatter per language (JSON, language to a command of
    /// `WRIT_COMMANDS` that prints the formatted file given as its argument; default none).
    pub formatters: Vec<(String, String)>,
    /// `WRIT_DIAGNOSTICS`: the project's diagnostics per language (JSON, language to a command
    /// of `WRIT_COMMANDS` given the file; nonzero exit fails the candidate; default none).
    pub diagnostics: Vec<(String, String)>,
    /// `WRIT_RUN_CONCURRENCY`: runs at once; more wait in a fair queue (default: the cores).
    pub concurrency: usize,
    /// `WRIT_RUN_MAX_TIMEOUT_SECS`: the longest timeout a request may ask for (default 120).
    pub max_timeout: Duration,
    /// `WRIT_RUN_DEFAULT_TIMEOUT_SECS`: a run's timeout when the request gives none (default 30).
    pub default_timeout: Duration,
    /// `WRIT_MAX_REPAIR_ROUNDS`: the most repair rounds a batch may ask for (default 3).
    pub max_repair_rounds: u32,
    /// `WRIT_RUN_MEMORY_MB`: address space of each process of a run (default 1024).
    pub memory_mb: u64,
    /// `WRIT_RUN_MAX_PROCESSES`: processes one run may have (default 64).
    pub max_processes: u64,
    /// `WRIT_RUN_MAX_OUTPUT_BYTES`: bytes kept of stdout and of stderr (default 1 MiB).
    pub max_output_bytes: usize,
    /// `WRIT_SANDBOX_RO_PATHS`: more host directories the sandbox sees read-only, beside `/usr`
    /// (a toolchain under `/opt`, a virtualenv); comma-separated absolute paths.
    pub extra_ro_paths: Vec<std::path::PathBuf>,
    /// `WRIT_RUN_QUEUE`: runs that may wait for a slot before `POST /run` answers 503 with
    /// `Retry-After` (default 32).
    pub max_queue: usize,
    /// `WRIT_RUN_MAX_PER_KEY`: one key's `POST /run` calls in flight at once (default 4).
    pub max_per_key: usize,
    /// `WRIT_RUN_SCRATCH_MB`: what one run may write into its scratch (default 256).
    pub scratch_mb: u64,
    /// `WRIT_RUN_SCRATCH_FILES`: files and directories one run may create or change (default
    /// 20,000).
    pub scratch_files: u64,
    /// `WRIT_RUN_OVERLAY`: `0` makes every run copy REPO_DIR instead of the copy-on-write overlay
    /// (default `1`: the overlay wherever the machine allows it).
    pub overlay: bool,
    /// `WRIT_RUN_COPY_MAX_MB` / `WRIT_RUN_COPY_MAX_FILES`: the largest REPO_DIR the copy fallback
    /// copies (default 512 MiB, 50,000 entries); a larger one is refused naming the variable.
    pub copy_max_mb: u64,
    pub copy_max_files: u64,
}

/// A per-language setting of the project's own checks (`WRIT_FORMATTERS`, `WRIT_DIAGNOSTICS`):
/// a JSON object of language name to a command of `WRIT_COMMANDS` that takes the file's path as
/// its argument. Unset or blank: none. They only ever run in the sandbox, so each must name a
/// configured command; anything else stops start-up naming the variable.
fn per_language(
    get: &Get<'_>,
    name: &'static str,
    commands: Option<&writ_sandbox::CommandSet>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid { name, message };
    let Some(raw) = get(name).filter(|raw| !raw.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&raw).map_err(|e| {
            invalid(format!(
                "must be a JSON object of language to command name (WRIT_COMMANDS), e.g. {{\"python\": \"py_compile\"}}: {e}"
            ))
        })?;
    let Some(commands) = commands else {
        return Err(invalid(
            "needs WRIT_COMMANDS: these commands run only in the sandbox, as configured commands"
                .into(),
        ));
    };
    let known = writ_core::synthesis::stage::language_keys();
    for (language, command) in &map {
        if !known.contains(language) {
            return Err(invalid(format!(
                "unknown language {language:?}; known: {}",
                known.join(", ")
            )));
        }
        // The file's path is its one argument: a command without `{args}` cannot take it.
        if let Err(e) = commands.expand(command, &["file.txt".to_string()]) {
            return Err(invalid(format!(
                "{language}: {command:?} is not a configured command that takes the file's path ({e})"
            )));
        }
    }
    Ok(map.into_iter().collect())
}

impl RunSettings {
    pub(super) fn load(get: &Get<'_>) -> Result<Self, ConfigError> {
        let commands =
            match get("WRIT_COMMANDS") {
                None => None,
                Some(json) => Some(writ_sandbox::CommandSet::parse(&json).map_err(|e| {
                    ConfigError::Invalid {
                        name: "WRIT_COMMANDS",
                        message: e.to_string(),
                    }
                })?),
            };
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let at_least_one = |name, default| parse_positive(get, name, default);
        let max_timeout =
            Duration::from_secs(at_least_one("WRIT_RUN_MAX_TIMEOUT_SECS", 120)? as u64);
        let default_timeout =
            Duration::from_secs(at_least_one("WRIT_RUN_DEFAULT_TIMEOUT_SECS", 30)? as u64)
                .min(max_timeout);
        let formatters = per_language(get, "WRIT_FORMATTERS", commands.as_ref())?;
        let diagnostics = per_language(get, "WRIT_DIAGNOSTICS", commands.as_ref())?;
        Ok(RunSettings {
            formatters,
            diagnostics,
            commands,
            concurrency: at_least_one("WRIT_RUN_CONCURRENCY", cores)?.min(1024),
            max_timeout,
            default_timeout,
            max_repair_rounds: parse_num(get, "WRIT_MAX_REPAIR_ROUNDS", 3)? as u32,
            memory_mb: at_least_one("WRIT_RUN_MEMORY_MB", 1024)? as u64,
            max_processes: at_least_one("WRIT_RUN_MAX_PROCESSES", 64)? as u64,
            max_output_bytes: at_least_one("WRIT_RUN_MAX_OUTPUT_BYTES", 1 << 20)?,
            extra_ro_paths: super::source::parse_list(get, "WRIT_SANDBOX_RO_PATHS")
                .into_iter()
                .map(std::path::PathBuf::from)
                .collect(),
            max_queue: parse_num(get, "WRIT_RUN_QUEUE", 32)?,
            max_per_key: at_least_one("WRIT_RUN_MAX_PER_KEY", 4)?,
            scratch_mb: at_least_one("WRIT_RUN_SCRATCH_MB", 256)? as u64,
            scratch_files: at_least_one("WRIT_RUN_SCRATCH_FILES", 20_000)? as u64,
            generate_checks: parse_switch(get, "WRIT_GENERATE_CHECKS", false)?,
            check_commands: match get("WRIT_CHECK_COMMANDS") {
                // By language, as a configured object is read.
                None => {
                    let mut default = writ_core::synthesis::stage::default_check_commands();
                    default.sort();
                    default
                }
                Some(raw) => serde_json::from_str::<std::collections::BTreeMap<String, String>>(&raw)
                    .map_err(|e| ConfigError::Invalid {
                        name: "WRIT_CHECK_COMMANDS",
                        message: format!(
                            "must be a JSON object of language to command name, e.g. {{\"python\": \"python\"}}: {e}"
                        ),
                    })?
                    .into_iter()
                    .collect(),
            },
            overlay: parse_switch(get, "WRIT_RUN_OVERLAY", true)?,
            copy_max_mb: at_least_one("WRIT_RUN_COPY_MAX_MB", 512)? as u64,
            copy_max_files: at_least_one("WRIT_RUN_COPY_MAX_FILES", 50_000)? as u64,
        })
    }

    /// The sandbox these settings describe.
    pub fn sandbox_config(&self) -> writ_sandbox::SandboxConfig {
        writ_sandbox::SandboxConfig {
            max_concurrent: self.concurrency,
            limits: writ_sandbox::Limits {
                wall: self.max_timeout,
                cpu_secs: self.max_timeout.as_secs().max(1),
                memory_bytes: self.memory_mb << 20,
                max_processes: self.max_processes,
                max_output_bytes: self.max_output_bytes,
                ..writ_sandbox::Limits::default()
            },
            extra_ro_paths: self.extra_ro_paths.clone(),
            overlay: self.overlay,
            max_scratch_bytes: self.scratch_mb << 20,
            max_scratch_files: self.scratch_files,
            max_queue: self.max_queue,
            max_copy_bytes: self.copy_max_mb << 20,
            max_copy_files: self.copy_max_files,
            ..writ_sandbox::SandboxConfig::default()
        }
    }
}
