//! Progress events of a batch, for the event stream, the dashboard and the CLI.
//!
//! The pipeline emits; a [`ProgressSink`] decides where events go (the store, for replay by
//! `Last-Event-ID`, and live subscribers). Emitting never fails the batch.

use serde::{Deserialize, Serialize};

/// One step of a batch. `file` is the workspace-relative path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Queued {
        files: Vec<String>,
    },
    FileStarted {
        file: String,
    },
    CandidateStarted {
        file: String,
        model: String,
    },
    CandidateFinished {
        file: String,
        model: String,
        latency_ms: u64,
        ok: bool,
        /// Why the candidate is not usable, when not ok.
        error_class: Option<crate::model::ErrorClass>,
        parsed: Option<bool>,
    },
    ArbiterStarted {
        file: String,
        model: String,
        candidates: usize,
    },
    ArbiterChose {
        file: String,
        candidate: usize,
        model: String,
        reason: String,
    },
    /// The caller's tests start on a file's candidates.
    ValidationStarted {
        file: String,
        candidates: usize,
    },
    /// One candidate's checks ended.
    ValidationFinished {
        file: String,
        model: String,
        /// The repair round of the candidate (0 for first answers).
        round: u32,
        passed: bool,
        exit_code: Option<i32>,
        duration_ms: u64,
        /// Whether it passed the project's diagnostics (`WRIT_DIAGNOSTICS`), when they ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diagnostics: Option<bool>,
    },
    /// No candidate passed: the models get their candidates back with the failure.
    RepairStarted {
        file: String,
        round: u32,
        models: usize,
    },
    /// The test-writing models answered: the generated tests kept and dropped for a file.
    ChecksGenerated {
        file: String,
        models: usize,
        tests: usize,
        discarded: usize,
    },
    /// Generated checks were asked for a file and could not choose it (`status`: `no_tests`,
    /// `no_usable_tests`, `unsupported_language` or `cannot_run`; `reason` in words): the arbiter
    /// chose without their evidence.
    ChecksUnavailable {
        file: String,
        status: crate::audit::GeneratedChecksStatus,
        reason: String,
    },
    /// The generated checks ran on a file's candidates: how they grouped, how many stayed tied
    /// at the best score, and (when tests did not separate them) how many behaviour clusters.
    AgreementComputed {
        file: String,
        groups: usize,
        tied: usize,
        clusters: Option<usize>,
    },
    /// The arbiter is shown the inputs on which two clusters of candidates disagree (asked in
    /// both orders).
    ArbiterAskedInputs {
        file: String,
        inputs: usize,
    },
    /// A file's candidate passed the caller's tests while other models were still answering:
    /// their calls were cancelled (`options.fanout.stop_when_passing`).
    StoppedEarly {
        file: String,
        /// The model whose candidate passed.
        passed: String,
        cancelled: usize,
    },
    /// No candidate of a file's first round passed the caller's tests: the models not asked yet
    /// are asked (`options.fanout.first_round`).
    RoundStarted {
        file: String,
        round: u32,
        models: usize,
    },
    /// The project's formatter (`WRIT_FORMATTERS`) ran on a file's chosen candidate; `error`
    /// says why it was left unformatted.
    Formatted {
        file: String,
        command: String,
        changed: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    FileWritten {
        file: String,
        operation: String,
        bytes: usize,
        sha256: String,
    },
    FileFailed {
        file: String,
        error: String,
    },
    /// A path the batch wrote was changed by another workspace of the repository, or by the
    /// branch this workspace merges back into, since they share a base.
    Overlap(crate::overlaps::Overlap),
    Done {
        status: String,
    },
    /// The batch's files were proposed for review, not written (`options.review`): the change
    /// set holding them. Also the first event of the change set's own stream.
    ChangeProposed {
        change_id: uuid::Uuid,
        state: crate::changes::ChangeState,
        /// Each file proposed, with its hunks' ids.
        files: Vec<crate::changes::DecidedFile>,
        expires_at: chrono::DateTime<chrono::Utc>,
    },
    /// Hunks of a change set were applied (its own stream).
    ChangeApplied {
        change_id: uuid::Uuid,
        /// The apply's request: undo it to take the apply back.
        request_id: uuid::Uuid,
        /// The change set's state after it.
        state: crate::changes::ChangeState,
        files: Vec<crate::changes::DecidedFile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
    },
    /// Hunks of a change set were rejected (its own stream).
    ChangeRejected {
        change_id: uuid::Uuid,
        request_id: uuid::Uuid,
        state: crate::changes::ChangeState,
        files: Vec<crate::changes::DecidedFile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
    },
}

/// The name of the event that ends a job's stream.
pub const DONE: &str = "done";

/// The events of a change set's own stream that a batch's never carries: its decisions. (A
/// batch's stream carries its `change_proposed`, which opens the change set's.)
pub const DECISION_EVENTS: [&str; 2] = ["change_applied", "change_rejected"];

impl Event {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Queued { .. } => "queued",
            Event::FileStarted { .. } => "file_started",
            Event::CandidateStarted { .. } => "candidate_started",
            Event::CandidateFinished { .. } => "candidate_finished",
            Event::ArbiterStarted { .. } => "arbiter_started",
            Event::ArbiterChose { .. } => "arbiter_chose",
            Event::ValidationStarted { .. } => "validation_started",
            Event::ValidationFinished { .. } => "validation_finished",
            Event::RepairStarted { .. } => "repair_started",
            Event::ChecksGenerated { .. } => "checks_generated",
            Event::ChecksUnavailable { .. } => "checks_unavailable",
            Event::AgreementComputed { .. } => "agreement_computed",
            Event::ArbiterAskedInputs { .. } => "arbiter_asked_inputs",
            Event::StoppedEarly { .. } => "stopped_early",
            Event::RoundStarted { .. } => "round_started",
            Event::Formatted { .. } => "formatted",
            Event::FileWritten { .. } => "file_written",
            Event::FileFailed { .. } => "file_failed",
            Event::Overlap(_) => "overlap",
            Event::Done { .. } => DONE,
            Event::ChangeProposed { .. } => "change_proposed",
            Event::ChangeApplied { .. } => "change_applied",
            Event::ChangeRejected { .. } => "change_rejected",
        }
    }
}

pub trait ProgressSink: Send + Sync {
    fn emit(&self, event: Event);
}

/// Drops every event (CLI one-shots, tests that do not look).
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn emit(&self, _event: Event) {}
}
