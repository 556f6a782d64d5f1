//! Running the caller's checks: which commands exist (`WRIT_COMMANDS`, or a `[commands]` table in
//! `writ.toml`) and the bounds of every run (`WRIT_RUN_*`).

use std::time::Duration;

use super::ConfigError;
use super::source::{Get, parse_num, parse_positive};

#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Command templates by name, as JSON (`{"pytest": ["python3", "-m", "pytest", "{args}"]}`);
    /// `None`: no commands, so `POST /run` and `options.validation` are refused.
    pub commands: Option<writ_sandbox::CommandSet>,
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
        Ok(RunSettings {
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
        })
    }
}
