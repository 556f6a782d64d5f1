//! Submission: what must hold before a batch is accepted and what must survive the process.
//! A repeated `Idempotency-Key` replays its stored answer (or is refused); every target is checked
//! on disk, before any model is called. The request is recorded by [`super::jobs`] (with its job,
//! while the models run); when the batch ends, its answer is stored on the request for replay.

use std::time::Duration;

use uuid::Uuid;
use writ_checks::Language;

use crate::audit::{OperationFilter, RecentOperation};
use crate::content::sha256_hex;
use crate::execution::RunError;
use crate::path::RepoPath;
use crate::store::StoreError;
use crate::synthesis::batch::{Batch, BatchError, TargetKind};
use crate::synthesis::context::resolve_context;
use crate::synthesis::response::BatchResponse;
use crate::synthesis::routing::{self, Outcomes, Routing};
use crate::synthesis::stage::{BatchFile, Present, Synthesizer, command_for};

/// How long a repeated `Idempotency-Key` waits for the batch it repeats to end before being
/// refused as still in progress (a resumed batch ends within its lease and one claim).
pub const REPLAY_WAIT: Duration = Duration::from_secs(120);

/// How often that wait looks at the job.
const REPLAY_POLL: Duration = Duration::from_millis(200);

/// Who is asking and how to recognise a repeat.
#[derive(Debug, Clone)]
pub struct Submission {
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the batch, when auth is on.
    pub scope: Option<crate::keys::Scope>,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body as received.
    pub body_sha256: String,
    /// The request body as received, recorded with the job so that another replica can resume
    /// the batch if this one dies (`None`: the batch cannot be resumed elsewhere).
    pub body: Option<String>,
    pub batch: Batch,
    /// The workspace the batch writes in (its request and job record it).
    pub workspace: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Invalid(#[from] BatchError),
    #[error("Idempotency-Key was already used with a different request body")]
    IdempotencyConflict,
    #[error("a request with this Idempotency-Key is still running")]
    InProgress,
    #[error("the audit log cannot record this batch, so it was not started: {0}")]
    Audit(#[source] StoreError),
    /// Something the batch needs cannot be had on this server (e.g. the sandbox for
    /// `options.validation`); the message names what to configure.
    #[error("{0}")]
    Unavailable(String),
    /// The batch's task ended without an answer (it panicked, or the runtime is shutting down).
    #[error("the batch ended without an answer: {0}")]
    Lost(String),
    /// A file no longer holds the caller's `expected_sha256`: the whole batch is refused before
    /// any model is called, as `POST /edits` refuses a stale edit, since what the caller asked
    /// for was planned against content that is gone.
    #[error("'{path}' changed: expected sha256 {expected}, found {actual}; no model was called")]
    Stale {
        field: String,
        path: String,
        expected: String,
        actual: String,
    },
}

/// How a batch is taken on, at each step from its admission to its start: the stored answer of
/// a repeated `Idempotency-Key`, or the batch going ahead with `T` — what its prompts show of the
/// present (`Begun<Present>`, from [`Synthesizer::prepare`]), then its running job
/// (`Begun<BatchHandle>`, from `Jobs::start`).
pub enum Begun<T> {
    /// A repeated `Idempotency-Key`: the stored answer.
    Replayed(Box<BatchAnswer>),
    /// The batch goes ahead.
    Fresh(T),
}

/// A submitted batch's answer.
#[derive(Debug)]
pub struct BatchAnswer {
    pub response: BatchResponse,
    /// The answer is a stored one replayed for a repeated `Idempotency-Key`.
    pub replayed: bool,
    /// The batch's critical path of upstream calls (zero for a replay).
    pub upstream: Duration,
}

impl Synthesizer {
    /// Checked without calling any model or writing anything: a repeated `Idempotency-Key`
    /// (its stored answer is returned), the models, the targets on disk, the validation
    /// commands. What the prompts show of the present is read meanwhile: each code file's
    /// current content in the same hand-off as its check, the caller's recent operations beside
    /// it.
    #[cfg(test)]
    pub(crate) async fn prepare(&self, sub: &Submission) -> Result<Begun<Present>, SubmitError> {
        if let Some(found) = self.replay(sub).await? {
            return Ok(Begun::Replayed(Box::new(found)));
        }
        Ok(Begun::Fresh(self.check_fresh(sub).await?))
    }

    /// A batch that is not a replay, checked: its models, its targets on disk (each
    /// `expected_sha256`), its validation commands; with what its prompts show of the present.
    pub(crate) async fn check_fresh(&self, sub: &Submission) -> Result<Present, SubmitError> {
        self.check_models(&sub.batch)?;
        let (files, recent) = futures::future::join(
            self.batch_files(&sub.batch),
            self.recent_operations(sub.caller.as_deref()),
        )
        .await;
        let files = files?;
        self.check_validation(&sub.batch)?;
        self.present(sub, files, recent).await
    }

    /// What a resumed batch's prompts show of the present, its remaining files checked as a
    /// fresh batch's are — the models (this replica's configuration may differ from the one
    /// that accepted it), the targets and their `expected_sha256`, the validation commands —
    /// but for the replay: the idempotency key was the accepting replica's to check.
    pub(crate) async fn check_resumed(&self, sub: &Submission) -> Result<Present, SubmitError> {
        self.check_models(&sub.batch)?;
        self.check_validation(&sub.batch)?;
        let (files, recent) = futures::future::join(
            self.batch_files(&sub.batch),
            self.recent_operations(sub.caller.as_deref()),
        )
        .await;
        // The named context is resolved again: the files it names may have changed, or gone.
        self.present(sub, files?, recent).await
    }

    /// Each file's record ([`BatchFile`]), built once from what the target checks read, each
    /// code file's content checked against its `expected_sha256`.
    async fn batch_files(&self, batch: &Batch) -> Result<Vec<BatchFile>, SubmitError> {
        let current = self.check_targets(batch).await?;
        let files: Vec<BatchFile> = batch
            .files()
            .iter()
            .zip(current)
            .map(|(spec, current)| BatchFile::new(spec.clone()).with_current(current))
            .collect();
        check_expected(&files)?;
        Ok(files)
    }

    /// What the batch's prompts show of the present: each file's record with its named context
    /// found on disk, and the batch's own.
    async fn present(
        &self,
        sub: &Submission,
        files: Vec<BatchFile>,
        recent: Vec<RecentOperation>,
    ) -> Result<Present, SubmitError> {
        let named = resolve_context(self.workspace.as_ref(), &sub.batch).await?;
        let files: Vec<BatchFile> = files
            .into_iter()
            .zip(named.files)
            .map(|(file, named)| file.with_named(named))
            .collect();
        Ok(Present {
            recent,
            files,
            named: named.batch,
            map: Default::default(),
            earlier: None,
            routing: self.routing_outcomes(sub).await,
            degraded: None,
        })
    }

    /// The outcomes adaptive routing decides from, when the batch is routed: its own
    /// `options.fanout.routing`, else the server's default for batches that leave the choice
    /// of models (and of a first round) to it. Read from the store, newest first, so every
    /// replica routes alike; a store that cannot be read leaves every model asked.
    async fn routing_outcomes(&self, sub: &Submission) -> Option<Outcomes> {
        let batch = &sub.batch;
        let options = batch.options();
        let routed = match options.fanout.routing {
            Some(routing) => routing == Routing::Adaptive,
            None => {
                self.config.routing.mode == Routing::Adaptive
                    && options.models.is_none()
                    && options.fanout.first_round.is_none()
            }
        };
        if !routed || !batch.files().iter().any(|f| f.kind == TargetKind::Code) {
            return None;
        }
        Some(self.recorded_outcomes(&sub.workspace).await)
    }

    /// Every model's recorded outcomes in `workspace` (newest first, within routing's
    /// look-back). A workspace learns from its own files only: what another workspace wrote,
    /// and how often, is not its keys' to see, and a project's outcomes are its own.
    pub(crate) async fn recorded_outcomes(&self, workspace: &str) -> Outcomes {
        let filter = OperationFilter {
            since: Some(chrono::Utc::now() - chrono::Duration::days(routing::LOOKBACK_DAYS)),
            workspaces: Some(vec![workspace.to_string()]),
            ..OperationFilter::default()
        };
        let mut operations = Vec::new();
        let mut cursor = None;
        loop {
            match self
                .store
                .list_operations(&filter, cursor.as_ref(), 500)
                .await
            {
                Ok(page) => {
                    operations.extend(page.operations);
                    match page.next_cursor {
                        Some(next) if operations.len() < routing::MAX_OPERATIONS as usize => {
                            cursor = Some(next);
                        }
                        _ => break,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "adaptive routing could not read the recorded outcomes; every model is asked");
                    break;
                }
            }
        }
        Outcomes::from_operations(&operations, self.config.routing.window)
    }

    /// The batch's degradation with, at `cheapest_model`, the candidate model whose recorded
    /// candidates cost least (the first configured when none has a recorded cost).
    pub(crate) async fn degrade(
        &self,
        sub: &Submission,
        mut degraded: crate::budgets::Degraded,
    ) -> crate::budgets::Degraded {
        let batch = &sub.batch;
        if degraded.level == crate::budgets::DegradeLevel::CheapestModel {
            let models = batch
                .options()
                .models
                .clone()
                .unwrap_or_else(|| self.config.candidates.clone());
            let outcomes = self.recorded_outcomes(&sub.workspace).await;
            let cost = |m: &String| outcomes.mean_cost(m).unwrap_or(f64::MAX);
            degraded.model = models
                .iter()
                .enumerate()
                .min_by(|(i, a), (j, b)| cost(a).total_cmp(&cost(b)).then(i.cmp(j)))
                .map(|(_, m)| m.clone());
        }
        degraded
    }

    /// What a failed commit of the request record means: another request with the same key
    /// got in first (its answer is replayed, or it is still running), or the store is down.
    pub(crate) async fn not_recorded(
        &self,
        sub: &Submission,
        err: StoreError,
    ) -> Result<BatchAnswer, SubmitError> {
        match err {
            StoreError::Conflict(_) if sub.idempotency_key.is_some() => {
                match self.replay(sub).await? {
                    Some(found) => Ok(found),
                    None => Err(SubmitError::InProgress),
                }
            }
            e => Err(SubmitError::Audit(e)),
        }
    }

    pub(crate) async fn replay(
        &self,
        sub: &Submission,
    ) -> Result<Option<BatchAnswer>, SubmitError> {
        let Some(key) = &sub.idempotency_key else {
            return Ok(None);
        };
        let found = self
            .store
            .find_request_by_idempotency_key(sub.caller.as_deref(), key)
            .await
            .map_err(SubmitError::Audit)?;
        match found {
            None => Ok(None),
            Some(r) if r.body_sha256.as_deref() != Some(sub.body_sha256.as_str()) => {
                Err(SubmitError::IdempotencyConflict)
            }
            Some(r) => {
                let body = match r.response {
                    Some(body) => body,
                    None => self.await_answer(r.id).await?,
                };
                let response = serde_json::from_value(body).map_err(|e| {
                    SubmitError::Audit(StoreError::Other(format!(
                        "the stored answer of request {} cannot be read: {e}",
                        r.id
                    )))
                })?;
                Ok(Some(BatchAnswer {
                    response,
                    replayed: true,
                    upstream: Duration::ZERO,
                }))
            }
        }
    }

    /// The answer of a batch still running under the same `Idempotency-Key`, once its job ends:
    /// the repeat follows the job instead of being refused, whichever replica runs it (a
    /// replica that died has its jobs resumed by another). Refused as still in progress when the
    /// job does not end within [`REPLAY_WAIT`].
    async fn await_answer(&self, id: Uuid) -> Result<serde_json::Value, SubmitError> {
        let until = tokio::time::Instant::now() + REPLAY_WAIT;
        loop {
            let job = self.store.get_job(id).await.map_err(SubmitError::Audit)?;
            let Some(job) = job else {
                // Not a job (yet): its records commit beside its first model calls.
                if tokio::time::Instant::now() >= until {
                    return Err(SubmitError::InProgress);
                }
                tokio::time::sleep(REPLAY_POLL).await;
                continue;
            };
            if job.status.is_final() {
                return match job.response {
                    Some(body) => Ok(body),
                    // A failed job whose row holds no answer: its error is all there is to say.
                    None => Err(SubmitError::Unavailable(format!(
                        "the batch with this Idempotency-Key ended without an answer: {}",
                        job.error.as_deref().unwrap_or("no reason recorded")
                    ))),
                };
            }
            if tokio::time::Instant::now() >= until {
                return Err(SubmitError::InProgress);
            }
            tokio::time::sleep(REPLAY_POLL).await;
        }
    }

    /// Every model the batch names is one this deployment allows.
    fn check_models(&self, batch: &Batch) -> Result<(), BatchError> {
        for (field, model) in batch.options().named_models() {
            if !self.config.allows(model) {
                let allowed = if self.config.allowed_models.is_empty() {
                    "only the configured models (CODE_LIST, CODE_MODEL, CODE_GEN_MODEL, IMAGE_MODEL) may be named; set WRIT_ALLOWED_MODELS to allow others"
                } else {
                    "it is not in WRIT_ALLOWED_MODELS"
                };
                return Err(BatchError {
                    field,
                    message: format!("'{model}' is not an allowed model: {allowed}"),
                });
            }
        }
        Ok(())
    }

    /// `options.validation` against what this server can run: the sandbox is there, every command
    /// is configured, every argument stays inside the sandbox, the timeout and the repair rounds
    /// are within the deployment's bounds. Checked before any model is called.
    fn check_validation(&self, batch: &Batch) -> Result<(), SubmitError> {
        let Some(v) = batch.options().validation() else {
            return Ok(());
        };
        let Some(runner) = &self.commands else {
            return Err(SubmitError::Unavailable(
                "options.validation needs commands to run, and none are configured: set WRIT_COMMANDS".into(),
            ));
        };
        let limits = runner.limits();
        if v.timeout() > limits.max_timeout {
            return Err(SubmitError::Invalid(BatchError {
                field: "options.validation.timeout_secs".into(),
                message: format!(
                    "at most {} (WRIT_RUN_MAX_TIMEOUT_SECS), got {}",
                    limits.max_timeout.as_secs(),
                    v.timeout().as_secs()
                ),
            }));
        }
        if v.repair_rounds() > limits.max_repair_rounds {
            return Err(SubmitError::Invalid(BatchError {
                field: "options.validation.repair_rounds".into(),
                message: format!(
                    "at most {} (WRIT_MAX_REPAIR_ROUNDS), got {}",
                    limits.max_repair_rounds,
                    v.repair_rounds()
                ),
            }));
        }
        // Asking for the project's own checks where none applies would silently check nothing.
        let covered = |setting: &[(String, String)]| {
            batch.files().iter().any(|f| {
                matches!(f.kind, TargetKind::Code)
                    && command_for(setting, Language::from_path(f.path.as_str())).is_some()
            })
        };
        for (field, asked, setting, variable) in [
            (
                "diagnostics",
                v.diagnostics,
                &self.config.diagnostics,
                "WRIT_DIAGNOSTICS",
            ),
            (
                "format",
                v.format,
                &self.config.formatters,
                "WRIT_FORMATTERS",
            ),
        ] {
            if asked == Some(true) && !covered(setting) {
                return Err(SubmitError::Invalid(BatchError {
                    field: format!("options.validation.{field}"),
                    message: format!(
                        "none is configured for the languages of this batch's code files ({variable})"
                    ),
                }));
            }
        }
        for (i, call) in v.commands().iter().enumerate() {
            runner
                .check(call, &format!("options.validation.commands[{i}]"))
                .map_err(|e| match e {
                    RunError::Invalid { field, message } => {
                        SubmitError::Invalid(BatchError { field, message })
                    }
                    RunError::Unavailable(why)
                    | RunError::Failed(why)
                    | RunError::Limit(why)
                    | RunError::Busy { message: why, .. } => SubmitError::Unavailable(format!(
                        "options.validation cannot run here: {why}"
                    )),
                })?;
        }
        Ok(())
    }

    /// What the filesystem says about each target (symlinks out, directories, protected paths),
    /// before any model is called, and each code file's content (its prompts show it). One
    /// hand-off for all the code files: each check and read is a trip to the blocking pool
    /// otherwise. Image files are only checked; their prompts do not show the old image.
    async fn check_targets(&self, batch: &Batch) -> Result<Vec<Option<Vec<u8>>>, BatchError> {
        let code: Vec<(RepoPath, bool)> = batch
            .files()
            .iter()
            .filter(|f| f.kind == TargetKind::Code)
            .map(|f| (f.path.clone(), true))
            .collect();
        let images = batch
            .files()
            .iter()
            .filter(|f| f.kind == TargetKind::Image)
            .map(|f| self.workspace.check_target(&f.path, true));
        let (reads, image_checks) = futures::future::join(
            self.workspace.read_targets(&code),
            futures::future::join_all(images),
        )
        .await;
        let (mut reads, mut image_checks) = (reads.into_iter(), image_checks.into_iter());
        // In the batch's order, so that a refusal names the first refused file.
        let mut current = Vec::with_capacity(batch.files().len());
        for f in batch.files() {
            let outcome = match f.kind {
                TargetKind::Code => reads.next(),
                TargetKind::Image => image_checks.next().map(|f| f.map(|()| None)),
            };
            match outcome {
                Some(Ok(Some(content))) => {
                    self.check_changeable(f.index, f.path.as_str(), &content)?;
                    current.push(Some(content));
                }
                Some(Ok(None)) => current.push(None),
                Some(Err(e)) => {
                    return Err(BatchError {
                        field: format!("files[{}].filename", f.index),
                        message: e.to_string(),
                    });
                }
                None => {
                    return Err(BatchError {
                        field: format!("files[{}].filename", f.index),
                        message: "the workspace gave no answer for this file".into(),
                    });
                }
            }
        }
        Ok(current)
    }

    /// An existing code file is changed by edits against its whole content: it must be text
    /// writ can show whole. Refused before any model is called, naming the limit and what the
    /// caller can do instead.
    fn check_changeable(&self, index: usize, path: &str, content: &[u8]) -> Result<(), BatchError> {
        let field = format!("files[{index}].filename");
        let existing = crate::synthesis::update::Existing::read(content).map_err(|why| BatchError {
            field: field.clone(),
            message: format!(
                "'{path}' exists and {why}; write it whole with PUT /files/{{path}} or a write session instead"
            ),
        })?;
        let limit = self.config.max_shown_file_chars;
        let chars = existing.view.chars().count();
        if chars > limit {
            return Err(BatchError {
                field,
                message: format!(
                    "'{path}' exists and has {chars} characters, more than the {limit} a model is shown whole (WRIT_MAX_SHOWN_FILE_CHARS); writ never cuts a file and has it rewritten. Change it with POST /edits (the edit_files tool), or write it whole with a write session"
                ),
            });
        }
        Ok(())
    }

    /// The caller's own latest operations, shown to the models as context. Another caller's
    /// filenames never reach this caller's prompts.
    async fn recent_operations(&self, caller: Option<&str>) -> Vec<RecentOperation> {
        match self
            .store
            .recent_operations(caller, self.config.recent_operations)
            .await
        {
            Ok(recent) => recent,
            Err(e) => {
                tracing::warn!(error = %e, "no recent operations for the prompts: audit store unavailable");
                Vec::new()
            }
        }
    }
}

/// Every code file that names an `expected_sha256` still holds it (a file that does not exist
/// holds `absent`).
fn check_expected(files: &[BatchFile]) -> Result<(), SubmitError> {
    for batch_file in files.iter().filter(|f| f.spec.kind == TargetKind::Code) {
        let Some(expected) = &batch_file.spec.expected_sha256 else {
            continue;
        };
        let actual = batch_file
            .current
            .as_deref()
            .map(sha256_hex)
            .unwrap_or_else(|| "absent".into());
        if !actual.eq_ignore_ascii_case(expected) {
            return Err(SubmitError::Stale {
                field: format!("files[{}].expected_sha256", batch_file.spec.index),
                path: batch_file.spec.path.to_string(),
                expected: expected.clone(),
                actual,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::synthesis::doubles::{
        MemoryStore, MemoryWorkspace, ScriptedModels, parse as batch, submission,
    };
    use crate::synthesis::stage::SynthesisConfig;

    fn synthesizer(workspace: MemoryWorkspace, config: SynthesisConfig) -> Synthesizer {
        Synthesizer::new(
            Arc::new(ScriptedModels::default()),
            Arc::new(MemoryStore::default()),
            Arc::new(workspace),
            SynthesisConfig {
                candidates: vec!["alpha".into(), "beta".into()],
                ..config
            },
        )
    }

    async fn prepared(s: &Synthesizer, batch: Batch) -> Result<Present, SubmitError> {
        match s.prepare(&submission(batch)).await? {
            Begun::Fresh(present) => Ok(present),
            Begun::Replayed(_) => panic!("no key was given, so nothing is replayed"),
        }
    }

    #[tokio::test]
    async fn a_file_that_no_longer_holds_its_expected_sha256_refuses_the_whole_batch() {
        let s = synthesizer(
            MemoryWorkspace::default().with_file("a.py", "x = 1\n"),
            SynthesisConfig::default(),
        );
        let stale = batch(serde_json::json!({"command": "write_codebase", "files": [
            {"filename": "new.py", "code_description": "d"},
            {"filename": "a.py", "code_description": "d", "expected_sha256": "0".repeat(64)}]}));
        match prepared(&s, stale).await {
            Err(SubmitError::Stale {
                field,
                path,
                actual,
                ..
            }) => {
                assert_eq!(field, "files[1].expected_sha256");
                assert_eq!(path, "a.py");
                assert_eq!(actual, sha256_hex(b"x = 1\n"));
            }
            other => panic!("refused as stale: {:?}", other.err()),
        }

        let current = batch(serde_json::json!({"command": "write_codebase", "files": [
            {"filename": "a.py", "code_description": "d", "expected_sha256": sha256_hex(b"x = 1\n")}]}));
        let present = match prepared(&s, current).await {
            Ok(present) => present,
            Err(e) => panic!("a current hash is admitted: {e}"),
        };
        assert_eq!(
            present.files[0].current.as_deref(),
            Some(&b"x = 1\n"[..]),
            "the prompts will show what the check read"
        );
    }

    #[tokio::test]
    async fn a_stale_file_is_refused_before_validation_that_cannot_run_here() {
        let s = synthesizer(
            MemoryWorkspace::default().with_file("a.py", "x = 1\n"),
            SynthesisConfig::default(),
        );
        let b = batch(serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "a.py", "code_description": "d",
                       "expected_sha256": "0".repeat(64)}],
            "options": {"validation": {"commands": [{"name": "pytest"}]}}}));
        match prepared(&s, b).await {
            Err(SubmitError::Stale { field, .. }) => {
                assert_eq!(field, "files[0].expected_sha256");
            }
            other => panic!("refused as stale first: {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn an_expected_sha256_on_a_file_that_does_not_exist_is_stale() {
        let s = synthesizer(MemoryWorkspace::default(), SynthesisConfig::default());
        let b = batch(serde_json::json!({"command": "write_codebase", "files": [
            {"filename": "gone.py", "code_description": "d", "expected_sha256": "a".repeat(64)}]}));
        match prepared(&s, b).await {
            Err(SubmitError::Stale { actual, .. }) => assert_eq!(actual, "absent"),
            other => panic!("refused as stale: {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn a_model_the_deployment_does_not_allow_is_refused_naming_its_field() {
        let s = synthesizer(MemoryWorkspace::default(), SynthesisConfig::default());
        let b = batch(serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "a.py", "code_description": "d"}],
            "options": {"models": ["alpha", "mallory/expensive"]}}));
        match prepared(&s, b).await {
            Err(SubmitError::Invalid(e)) => {
                assert_eq!(e.field, "options.models[1]");
                assert!(e.message.contains("WRIT_ALLOWED_MODELS"), "{e}");
            }
            other => panic!("refused: {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn validation_on_a_server_without_commands_is_unavailable_naming_the_setting() {
        let s = synthesizer(MemoryWorkspace::default(), SynthesisConfig::default());
        let b = batch(serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "a.py", "code_description": "d"}],
            "options": {"validation": {"commands": [{"name": "pytest"}]}}}));
        match prepared(&s, b).await {
            Err(SubmitError::Unavailable(why)) => assert!(why.contains("WRIT_COMMANDS"), "{why}"),
            other => panic!("refused: {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn asking_for_diagnostics_or_a_formatter_none_is_configured_for_is_refused_naming_the_field()
     {
        let ask = |own: &str| {
            batch(serde_json::json!({"command": "write_codebase",
                "files": [{"filename": "a.py", "code_description": "d"}],
                "options": {"validation": {own: true}}}))
        };
        let runner = || {
            Some(
                std::sync::Arc::new(crate::synthesis::doubles::ScriptedChecks::default())
                    as std::sync::Arc<dyn crate::execution::CommandRunner>,
            )
        };
        // Configured for Rust only: nothing checks or formats this batch's Python file.
        let rust_only = SynthesisConfig {
            diagnostics: vec![("rust".into(), "cargo-check".into())],
            formatters: vec![("rust".into(), "rustfmt".into())],
            ..SynthesisConfig::default()
        };
        let s = synthesizer(MemoryWorkspace::default(), rust_only).with_commands(runner());
        for (own, variable) in [
            ("diagnostics", "WRIT_DIAGNOSTICS"),
            ("format", "WRIT_FORMATTERS"),
        ] {
            match prepared(&s, ask(own)).await {
                Err(SubmitError::Invalid(e)) => {
                    assert_eq!(e.field, format!("options.validation.{own}"));
                    assert!(e.message.contains(variable), "{e}");
                }
                other => panic!("refused: {:?}", other.err()),
            }
        }

        let python = SynthesisConfig {
            diagnostics: vec![("python".into(), "py_compile".into())],
            ..SynthesisConfig::default()
        };
        let s = synthesizer(MemoryWorkspace::default(), python).with_commands(runner());
        assert!(prepared(&s, ask("diagnostics")).await.is_ok());
    }

    #[tokio::test]
    async fn an_existing_file_larger_than_a_model_is_shown_is_refused_naming_the_limit() {
        let s = synthesizer(
            MemoryWorkspace::default().with_file("big.py", &"x = 1\n".repeat(50)),
            SynthesisConfig {
                max_shown_file_chars: 100,
                ..SynthesisConfig::default()
            },
        );
        let b = batch(serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "small.py", "code_description": "d"},
                      {"filename": "big.py", "code_description": "d"}]}));
        match prepared(&s, b).await {
            Err(SubmitError::Invalid(e)) => {
                assert_eq!(e.field, "files[1].filename");
                assert!(e.message.contains("WRIT_MAX_SHOWN_FILE_CHARS"), "{e}");
                assert!(e.message.contains("300 characters"), "{e}");
            }
            other => panic!("refused: {:?}", other.err()),
        }
    }
}
