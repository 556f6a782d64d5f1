//! A batch's options, parsed: [`Options`] and [`Validation`] in the types the pipeline uses,
//! with the limits and defaults of `options.validation` and the parsing of `options.validation`
//! and `options.straggler` from their wire shape.

use super::StragglerPolicy;
use super::request::{FanoutOptions, OnFail, StragglerOptions, ValidationOptions};
use super::{BatchError, refuse};
use crate::execution::CommandCall;

/// `options.validation`, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub(crate) commands: Vec<CommandCall>,
    pub(crate) timeout: std::time::Duration,
    pub(crate) repair_rounds: u32,
    pub(crate) on_fail: OnFail,
    /// Generated checks decide among the candidates (`options.validation.generate`).
    pub(crate) generate: bool,
    /// Where the generated tests are written (`options.validation.keep_tests`).
    pub(crate) keep_tests: Option<crate::path::RepoPath>,
    /// The project's formatter runs on the chosen candidate (`options.validation.format`;
    /// `None`: wherever `WRIT_FORMATTERS` names one for the file's language).
    pub(crate) format: Option<bool>,
    /// The project's diagnostics check every candidate (`options.validation.diagnostics`;
    /// `None`: wherever `WRIT_DIAGNOSTICS` names one for the file's language).
    pub(crate) diagnostics: Option<bool>,
}

/// Defaults of `options.validation`.
pub const DEFAULT_VALIDATION_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_REPAIR_ROUNDS: u32 = 2;
/// Most commands one validation may run per candidate.
pub const MAX_VALIDATION_COMMANDS: usize = 8;
/// Most arguments one command may take.
pub const MAX_COMMAND_ARGS: usize = 32;

impl ValidationOptions {
    pub(super) fn parse(&self) -> Result<Validation, BatchError> {
        let field = "options.validation";
        let generate = self.generate.unwrap_or(false);
        // Asking only about the project's own checks needs no command of the caller's.
        let own_checks = self.diagnostics.is_some() || self.format.is_some();
        if (self.commands.is_empty() && !generate && !own_checks)
            || self.commands.len() > MAX_VALIDATION_COMMANDS
        {
            return Err(refuse(
                format!("{field}.commands"),
                format!(
                    "between 1 and {MAX_VALIDATION_COMMANDS} commands (0 with generate, diagnostics or format), got {}",
                    self.commands.len()
                ),
            ));
        }
        for (i, c) in self.commands.iter().enumerate() {
            if c.name.trim().is_empty() {
                return Err(refuse(
                    format!("{field}.commands[{i}].name"),
                    "must name a configured command (WRIT_COMMANDS)",
                ));
            }
            if c.args.len() > MAX_COMMAND_ARGS {
                return Err(refuse(
                    format!("{field}.commands[{i}].args"),
                    format!("at most {MAX_COMMAND_ARGS} arguments, got {}", c.args.len()),
                ));
            }
        }
        let timeout_secs = self.timeout_secs.unwrap_or(DEFAULT_VALIDATION_TIMEOUT_SECS);
        if timeout_secs == 0 {
            return Err(refuse(
                format!("{field}.timeout_secs"),
                "must be at least 1",
            ));
        }
        let keep_tests = match &self.keep_tests {
            None => None,
            Some(_) if !generate => {
                return Err(refuse(
                    format!("{field}.keep_tests"),
                    "needs generate: true (the tests kept are the generated ones)",
                ));
            }
            Some(raw) => Some(
                crate::path::RepoPath::parse(raw)
                    .map_err(|e| refuse(format!("{field}.keep_tests"), e.to_string()))?,
            ),
        };
        Ok(Validation {
            commands: self.commands.clone(),
            timeout: std::time::Duration::from_secs(timeout_secs),
            repair_rounds: self.repair_rounds.unwrap_or(DEFAULT_REPAIR_ROUNDS),
            on_fail: self.on_fail.unwrap_or_default(),
            generate,
            keep_tests,
            format: self.format,
            diagnostics: self.diagnostics,
        })
    }
}

impl Validation {
    /// What a batch without `options.validation` gets when the server generates checks by
    /// default (`WRIT_GENERATE_CHECKS`): no commands, generated checks, never a refusal.
    pub fn generated_only() -> Self {
        Validation {
            commands: Vec::new(),
            timeout: std::time::Duration::from_secs(DEFAULT_VALIDATION_TIMEOUT_SECS),
            repair_rounds: 0,
            on_fail: OnFail::WriteBest,
            generate: true,
            keep_tests: None,
            format: None,
            diagnostics: None,
        }
    }

    /// What a batch without `options.validation` gets where the project's diagnostics
    /// (`WRIT_DIAGNOSTICS`) apply to one of its files: they rank its candidates, and a batch
    /// that asked for nothing is never refused for them nor sent to repair.
    pub fn diagnostics_only() -> Self {
        Validation {
            generate: false,
            ..Self::generated_only()
        }
    }

    /// Whether the project's formatter may run (`options.validation.format`, default on).
    pub fn format(&self) -> bool {
        self.format.unwrap_or(true)
    }
    pub fn generate(&self) -> bool {
        self.generate
    }
    /// Where the generated tests are written (`options.validation.keep_tests`).
    pub fn keep_tests(&self) -> Option<&crate::path::RepoPath> {
        self.keep_tests.as_ref()
    }
    pub fn commands(&self) -> &[CommandCall] {
        &self.commands
    }
    pub fn timeout(&self) -> std::time::Duration {
        self.timeout
    }
    pub fn repair_rounds(&self) -> u32 {
        self.repair_rounds
    }
}

/// `options.fanout`, parsed: how a file's models are asked when the caller's tests can tell a
/// passing candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fanout {
    /// Cancel a file's running calls once one of its candidates passes the caller's tests.
    pub(crate) stop_when_passing: bool,
    /// Ask this many models first, the rest only when none of theirs passes.
    pub(crate) first_round: Option<usize>,
    /// The batch's own routing; `None`: the server's default.
    pub(crate) routing: Option<crate::synthesis::routing::Routing>,
}

impl FanoutOptions {
    /// The parsed settings, or a refusal naming the sub-field; both settings need the caller's
    /// tests or generated checks, since only they say that a candidate passes.
    pub(super) fn parse(&self, validation: Option<&Validation>) -> Result<Fanout, BatchError> {
        let fanout = Fanout {
            stop_when_passing: self.stop_when_passing.unwrap_or(false),
            first_round: self.first_round,
            routing: self.routing,
        };
        if fanout.first_round.is_some()
            && fanout.routing == Some(crate::synthesis::routing::Routing::Adaptive)
        {
            return Err(refuse(
                "options.fanout.routing",
                "adaptive routing decides which models are asked first; give it or first_round, not both",
            ));
        }
        if let Some(n) = fanout.first_round
            && !(1..=super::MAX_MODELS).contains(&n)
        {
            return Err(refuse(
                "options.fanout.first_round",
                format!("between 1 and {}, got {n}", super::MAX_MODELS),
            ));
        }
        // Generated checks pass a candidate too: once it and another agree on them.
        let has_tests = validation.is_some_and(|v| !v.commands.is_empty() || v.generate);
        let asked = if fanout.stop_when_passing {
            Some("stop_when_passing")
        } else {
            fanout.first_round.map(|_| "first_round")
        };
        if let Some(field) = asked
            && !has_tests
        {
            return Err(refuse(
                format!("options.fanout.{field}"),
                "needs options.validation.commands or options.validation.generate: a candidate passes when it passes the caller's tests, or agrees with another candidate on the generated tests",
            ));
        }
        Ok(fanout)
    }
}

impl StragglerOptions {
    /// The validated policy, or a refusal naming the sub-field under `options.straggler`.
    pub(super) fn policy(&self) -> Result<StragglerPolicy, BatchError> {
        let enough = match &self.enough {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            Some(other) => Some(other.to_string()),
        };
        StragglerPolicy::from_parts(enough.as_deref(), self.extra_ms, self.extra_factor)
            .map_err(|e| refuse(format!("options.straggler.{}", e.field), e.message))
    }
}

/// A batch's options, parsed: what `options` asked for, in the types the pipeline uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// Overrides `CODE_LIST` for this batch.
    pub(crate) models: Option<Vec<String>>,
    /// Overrides `CODE_MODEL` for this batch.
    pub(crate) arbiter_model: Option<String>,
    /// Overrides `IMAGE_MODEL` for this batch.
    pub(crate) image_model: Option<String>,
    pub(crate) dry_run: bool,
    pub(crate) atomic: bool,
    pub(crate) run_async: bool,
    /// Overrides the deployment's straggler policy for this batch.
    pub(crate) straggler: Option<StragglerPolicy>,
    /// Checks every candidate must pass (`options.validation`).
    pub(crate) validation: Option<Validation>,
    /// Stop early and rounds (`options.fanout`).
    pub(crate) fanout: Fanout,
    /// A change may remove definitions and shrink the file (`options.allow_removals`).
    pub(crate) allow_removals: bool,
    /// `options.repo_map_tokens`: the map's budget for this batch (`Some(0)`: no map).
    pub(crate) repo_map_tokens: Option<usize>,
    /// `options.commit`: commit what the batch wrote (`None`: as the workspace is set).
    pub(crate) commit: Option<bool>,
    /// `options.review`: propose instead of writing (`None`: as the server is set).
    pub(crate) review: Option<bool>,
    /// `options.respect_claims`: refused when another workspace claimed a path (`None`: as the
    /// server is set).
    pub(crate) respect_claims: Option<bool>,
}

impl Options {
    /// The candidate models the batch asked for, if it overrides the configured list.
    pub fn models(&self) -> Option<&[String]> {
        self.models.as_deref()
    }
    /// Every model the batch names (candidates, arbiter, image model), for allow-list checks,
    /// with the field that named it.
    pub fn named_models(&self) -> Vec<(String, &str)> {
        let mut named: Vec<(String, &str)> = Vec::new();
        for (i, m) in self.models.iter().flatten().enumerate() {
            named.push((format!("options.models[{i}]"), m));
        }
        if let Some(m) = &self.arbiter_model {
            named.push(("options.arbiter_model".into(), m));
        }
        if let Some(m) = &self.image_model {
            named.push(("options.image_model".into(), m));
        }
        named
    }
    pub fn run_async(&self) -> bool {
        self.run_async
    }
    pub fn validation(&self) -> Option<&Validation> {
        self.validation.as_ref()
    }
    pub fn commit(&self) -> Option<bool> {
        self.commit
    }
    /// `options.review` as sent (`None`: as the server is set).
    pub fn review(&self) -> Option<bool> {
        self.review
    }
    /// `options.respect_claims` as sent (`None`: as the server is set).
    pub fn respect_claims(&self) -> Option<bool> {
        self.respect_claims
    }
    /// Whether the batch writes anything (a dry run only answers).
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }
}
