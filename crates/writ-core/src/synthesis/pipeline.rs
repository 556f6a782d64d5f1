//! The pipeline of one batch.
//!
//! Per code file, concurrently: prompt → every candidate model at once (a failing model never
//! aborts the others) → candidate checks (extract, normalise, parse; duplicates count once;
//! candidates that do not parse lose to those that do) → selection (one viable: taken; several:
//! the arbiter, shown shuffled and anonymous; none: the fallback models one after another,
//! skipping those whose failure was permanent) → a recorded write.
//!
//! [`Synthesizer::prepare`] and [`Synthesizer::execute`] wrap a run with what must survive the process: the request record,
//! the idempotency key, and the stored response.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures::future::join_all;

use crate::synthesis::fanout::{self, CallSettings, Candidate, StragglerPolicy, UpstreamClock};
use crate::synthesis::progress::{Event, ProgressSink};
use rand::seq::SliceRandom;
use uuid::Uuid;
use writ_checks::Language;

use crate::audit::{
    AuditStore, CandidateRecord, FileKind, NewRequest, Operation, OperationFilter, StoreError,
};
use crate::content::sha256_hex;
use crate::files::{Provenance, WriteMode, WriteSpec, record_failure, recorded_write};
use crate::model::{ChatMessage, ChatRequest, ErrorClass, ModelClient};
use crate::synthesis::batch::{Batch, BatchError, FileSpec, TargetKind};
use crate::synthesis::image::{
    self, ImageError, ImageFormat, ImageTarget, ShapedImage, decode_data_url,
};
use crate::synthesis::prompt;
use crate::synthesis::response::{BatchResponse, FileResult, ImageInfo, Selection};
use crate::workspace::Workspace;

/// Which models to ask and how; from `CODE_LIST`, `CODE_MODEL`, `CODE_GEN_MODEL`.
#[derive(Debug, Clone)]
pub struct SynthesisConfig {
    pub candidates: Vec<String>,
    /// The arbiter; the first candidate model when unset.
    pub arbiter: Option<String>,
    /// Tried first when every candidate failed.
    pub fallback: Option<String>,
    pub max_tokens: u32,
    pub temperature: f32,
    /// Wait before the second fallback attempt; doubles after each.
    pub fallback_backoff: Duration,
    /// How many recent audit operations the prompt shows.
    pub recent_operations: u32,
    /// A chosen candidate larger than this fails its file instead of being written (`WRIT_MAX_FILE_BYTES`).
    pub max_file_bytes: usize,
    /// Files run at once, so each file's generation is bounded by this (`WRIT_BATCH_DEADLINE_SECS`).
    pub batch_deadline: Duration,
    /// When a fan-out stops waiting for slow candidates (`WRIT_STRAGGLER_*`; `options.straggler`).
    pub straggler: StragglerPolicy,
    /// The image model (`IMAGE_MODEL`).
    pub image_model: Option<String>,
}

impl Default for SynthesisConfig {
    fn default() -> Self {
        SynthesisConfig {
            candidates: Vec::new(),
            arbiter: None,
            fallback: None,
            max_tokens: 8_000,
            temperature: 0.2,
            fallback_backoff: Duration::from_millis(500),
            recent_operations: 10,
            image_model: None,
            max_file_bytes: 1024 * 1024,
            batch_deadline: Duration::from_secs(600),
            straggler: StragglerPolicy::WaitAll,
        }
    }
}

pub struct Synthesizer {
    pub models: Arc<dyn ModelClient>,
    pub store: Arc<dyn AuditStore>,
    pub workspace: Arc<dyn Workspace>,
    pub config: SynthesisConfig,
}

/// Who is asking and how to recognise a repeat.
#[derive(Debug, Clone)]
pub struct Submission {
    pub request_id: Uuid,
    pub caller: Option<String>,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body as received.
    pub body_sha256: String,
    pub batch: Batch,
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
}

/// A submitted batch's answer.
#[derive(Debug)]
pub struct Submitted {
    pub body: serde_json::Value,
    /// The body is a stored answer replayed for a repeated `Idempotency-Key`.
    pub replayed: bool,
    /// The batch's critical path of upstream calls (zero for a replay).
    pub upstream: Duration,
}

/// What the selection step produced for one file.
struct Chosen {
    code: String,
    model: String,
    selection: Selection,
    reason: Option<String>,
    /// For an image file: the checked, shaped image (its bytes are what is written).
    image: Option<ShapedImage>,
}

impl Chosen {
    fn bytes(&self) -> Vec<u8> {
        match &self.image {
            Some(img) => img.bytes.clone(),
            None => self.code.clone().into_bytes(),
        }
    }
}

impl Synthesizer {
    /// What must hold before a batch is accepted, checked without calling any model: a repeated
    /// `Idempotency-Key` (its stored answer is returned as `Some`), the targets on disk, and the
    /// request record. An async caller gets its 202 only after this.
    pub async fn prepare(&self, sub: &Submission) -> Result<Option<Submitted>, SubmitError> {
        let replayed = |body| Submitted {
            body,
            replayed: true,
            upstream: Duration::ZERO,
        };
        if let Some(found) = self.replay(sub).await? {
            return Ok(Some(replayed(found)));
        }
        self.check_targets(&sub.batch).await?;
        let record = NewRequest {
            id: sub.request_id,
            received_at: chrono::Utc::now(),
            route: "POST /write_codebase".to_string(),
            caller: sub.caller.clone(),
            idempotency_key: sub.idempotency_key.clone(),
            body_sha256: Some(sub.body_sha256.clone()),
        };
        match self.store.insert_request(&record).await {
            Ok(()) => Ok(None),
            // Another request with the same key got in first.
            Err(StoreError::Conflict(_)) if sub.idempotency_key.is_some() => {
                match self.replay(sub).await? {
                    Some(found) => Ok(Some(replayed(found))),
                    None => Err(SubmitError::InProgress),
                }
            }
            Err(e) => Err(SubmitError::Audit(e)),
        }
    }

    /// Runs a prepared batch to its end and stores its answer on the request record.
    pub async fn execute(&self, sub: &Submission, sink: &dyn ProgressSink) -> Submitted {
        let response = self.run(sub.request_id, &sub.batch, sink).await;
        let body = serde_json::to_value(&response).unwrap_or(serde_json::Value::Null);
        if let Err(e) = self
            .store
            .finish_request(
                sub.request_id,
                response.status,
                response.duration_ms as i64,
                Some(&body),
            )
            .await
        {
            tracing::warn!(error = %e, "batch done but its request record could not be closed");
        }
        Submitted {
            body,
            replayed: false,
            upstream: response.upstream,
        }
    }

    async fn replay(&self, sub: &Submission) -> Result<Option<serde_json::Value>, SubmitError> {
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
            Some(r) => match r.response {
                Some(body) => Ok(Some(body)),
                None => Err(SubmitError::InProgress),
            },
        }
    }

    /// What the filesystem says about each target (symlinks out, directories), before any model is called.
    async fn check_targets(&self, batch: &Batch) -> Result<(), BatchError> {
        for f in &batch.files {
            if let Err(e) = self.workspace.check_target(&f.path, true).await {
                return Err(BatchError {
                    field: format!("files[{}].filename", f.index),
                    message: e.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Runs every file of the batch and writes the results (unless `dry_run`).
    pub async fn run(
        &self,
        request_id: Uuid,
        batch: &Batch,
        sink: &dyn ProgressSink,
    ) -> BatchResponse {
        let started = Instant::now();
        sink.emit(Event::Queued {
            files: batch.files.iter().map(|f| f.path.to_string()).collect(),
        });
        let recent = match self
            .store
            .list_operations(
                &OperationFilter::default(),
                None,
                self.config.recent_operations,
            )
            .await
        {
            Ok(page) => page.operations,
            Err(e) => {
                tracing::warn!(error = %e, "no recent operations for the prompts: audit store unavailable");
                Vec::new()
            }
        };
        let atomic = batch.options.atomic && !batch.options.dry_run;
        let clocks: Vec<UpstreamClock> = batch
            .files
            .iter()
            .map(|_| UpstreamClock::default())
            .collect();

        let generated: Vec<(Result<Chosen, String>, Vec<CandidateRecord>)> = if atomic {
            join_all(
                batch
                    .files
                    .iter()
                    .zip(&clocks)
                    .map(|(f, clock)| self.generate(batch, f, &recent, sink, clock)),
            )
            .await
        } else {
            Vec::new()
        };

        let results: Vec<FileResult> = if atomic {
            self.write_atomically(request_id, batch, generated, sink)
                .await
        } else {
            let recent = &recent;
            join_all(
                batch
                    .files
                    .iter()
                    .zip(&clocks)
                    .map(|(f, clock)| async move {
                        let (chosen, candidates) =
                            self.generate(batch, f, recent, sink, clock).await;
                        self.finish_file(request_id, batch, f, chosen, candidates, sink)
                            .await
                    }),
            )
            .await
        };
        let write_path = self.workspace.root().display().to_string();
        let mut response = BatchResponse::assemble(
            request_id,
            write_path,
            results,
            started.elapsed().as_millis() as u64,
        );
        // Files run concurrently: the batch's critical upstream path is its slowest file's.
        response.upstream = clocks
            .iter()
            .map(UpstreamClock::total)
            .max()
            .unwrap_or_default();
        response
    }

    /// Writes one file's chosen content (or records its failure) and builds its result.
    async fn finish_file(
        &self,
        request_id: Uuid,
        batch: &Batch,
        file: &FileSpec,
        chosen: Result<Chosen, String>,
        candidates: Vec<CandidateRecord>,
        sink: &dyn ProgressSink,
    ) -> FileResult {
        let result = self
            .write_file(request_id, batch, file, chosen, candidates)
            .await;
        sink.emit(match (&result.error, result.success) {
            (None, true) => Event::FileWritten {
                file: result.filename.clone(),
                operation: result
                    .operation
                    .map(|o| o.as_str().to_string())
                    .unwrap_or_else(|| "dry_run".into()),
                bytes: result.bytes.unwrap_or(0),
                sha256: result.sha256.clone().unwrap_or_default(),
            },
            (error, _) => Event::FileFailed {
                file: result.filename.clone(),
                error: error.clone().unwrap_or_default(),
            },
        });
        result
    }

    async fn write_file(
        &self,
        request_id: Uuid,
        batch: &Batch,
        file: &FileSpec,
        chosen: Result<Chosen, String>,
        candidates: Vec<CandidateRecord>,
    ) -> FileResult {
        let kind = kind_name(file);
        let chosen = match chosen {
            Ok(c) => c,
            Err(error) => {
                let mut result =
                    FileResult::failed(file.path.as_str(), kind, error.clone(), candidates.clone());
                if !batch.options.dry_run {
                    let prov = Provenance {
                        candidates,
                        ..Provenance::default()
                    };
                    match record_failure(
                        self.store.as_ref(),
                        request_id,
                        file_kind(file),
                        file.path.as_str(),
                        &error,
                        prov,
                    )
                    .await
                    {
                        Ok(id) => result.operation_id = Some(id),
                        Err(e) => tracing::warn!(error = %e, "could not record a failed file"),
                    }
                }
                return result;
            }
        };
        if batch.options.dry_run {
            return FileResult {
                filename: file.path.to_string(),
                kind: kind.to_string(),
                success: true,
                operation: None,
                bytes: Some(chosen.bytes().len()),
                sha256: Some(sha256_hex(&chosen.bytes())),
                chosen_model: Some(chosen.model),
                selection: Some(chosen.selection),
                arbiter_reason: chosen.reason,
                candidates,
                operation_id: None,
                error: None,
                image: chosen.image.as_ref().map(ImageInfo::from),
                content: Some(match &chosen.image {
                    Some(img) => format!(
                        "data:image/{};base64,{}",
                        img.format.as_str(),
                        base64::engine::general_purpose::STANDARD.encode(&img.bytes)
                    ),
                    None => chosen.code,
                }),
            };
        }
        let spec = WriteSpec {
            path: file.path.clone(),
            content: chosen.bytes(),
            mode: WriteMode::Overwrite,
            expected_sha256: file.expected_sha256.clone(),
            create_dirs: true,
        };
        let provenance = Provenance {
            detail: chosen
                .image
                .as_ref()
                .and_then(|img| serde_json::to_value(ImageInfo::from(img)).ok())
                .map(|info| serde_json::json!({ "image": info })),
            chosen_model: Some(chosen.model.clone()),
            selection: Some(chosen.selection.as_str().to_string()),
            arbiter_reason: chosen.reason.clone(),
            candidates: candidates.clone(),
        };
        match recorded_write(
            self.store.as_ref(),
            self.workspace.as_ref(),
            request_id,
            file_kind(file),
            spec,
            provenance.clone(),
        )
        .await
        {
            Ok(receipt) => {
                metrics::counter!("writ_writes_total", "kind" => kind, "operation" => receipt.operation.as_str()).increment(1);
                FileResult {
                    filename: file.path.to_string(),
                    kind: kind.to_string(),
                    success: true,
                    operation: Some(receipt.operation),
                    bytes: Some(receipt.bytes),
                    sha256: Some(receipt.sha256),
                    chosen_model: Some(chosen.model),
                    selection: Some(chosen.selection),
                    arbiter_reason: chosen.reason,
                    candidates,
                    operation_id: Some(receipt.operation_id),
                    error: None,
                    image: chosen.image.as_ref().map(ImageInfo::from),
                    content: None,
                }
            }
            Err(err) => {
                metrics::counter!("writ_writes_total", "kind" => kind, "operation" => "failed")
                    .increment(1);
                let message = err.to_string();
                let mut result =
                    FileResult::failed(file.path.as_str(), kind, message.clone(), candidates);
                result.chosen_model = Some(chosen.model);
                result.selection = Some(chosen.selection);
                result.arbiter_reason = chosen.reason;
                // A refused write (If-Match, audit down) made no operation record of its own.
                if let Ok(id) = record_failure(
                    self.store.as_ref(),
                    request_id,
                    file_kind(file),
                    file.path.as_str(),
                    &message,
                    provenance,
                )
                .await
                {
                    result.operation_id = Some(id);
                }
                result
            }
        }
    }

    /// `atomic`: every file is generated first; if one failed nothing is written; if a write
    /// fails, the files already written are put back as they were.
    async fn write_atomically(
        &self,
        request_id: Uuid,
        batch: &Batch,
        generated: Vec<(Result<Chosen, String>, Vec<CandidateRecord>)>,
        sink: &dyn ProgressSink,
    ) -> Vec<FileResult> {
        let first_failure = generated
            .iter()
            .zip(&batch.files)
            .find_map(|((c, _), f)| c.as_ref().err().map(|e| (f, e.clone())));
        if let Some((failed, why)) = first_failure {
            let mut results = Vec::new();
            for ((chosen, candidates), f) in generated.into_iter().zip(&batch.files) {
                let error = match chosen {
                    Err(e) => e,
                    Ok(_) => format!(
                        "not written: the batch is atomic and files[{}] ('{}') failed: {why}",
                        failed.index, failed.path
                    ),
                };
                results.push(
                    self.finish_file(request_id, batch, f, Err(error), candidates, sink)
                        .await,
                );
            }
            return results;
        }

        let mut results: Vec<FileResult> = Vec::new();
        let mut written: Vec<(&FileSpec, Option<Vec<u8>>)> = Vec::new();
        let mut broke: Option<String> = None;
        for ((chosen, candidates), f) in generated.into_iter().zip(&batch.files) {
            if let Some(why) = &broke {
                let error =
                    format!("not written: the batch is atomic and an earlier write failed: {why}");
                results.push(
                    self.finish_file(request_id, batch, f, Err(error), candidates, sink)
                        .await,
                );
                continue;
            }
            let before = self.workspace.read(&f.path).await.ok().flatten();
            let result = self
                .finish_file(request_id, batch, f, chosen, candidates, sink)
                .await;
            if result.success {
                written.push((f, before));
            } else {
                broke = Some(result.error.clone().unwrap_or_default());
            }
            results.push(result);
        }
        if let Some(why) = broke {
            for (f, before) in written.into_iter().rev() {
                self.roll_back(request_id, f, before, &why).await;
                if let Some(r) = results.iter_mut().find(|r| r.filename == f.path.as_str()) {
                    r.success = false;
                    r.error = Some(format!(
                        "rolled back: the batch is atomic and a later write failed: {why}"
                    ));
                }
            }
        }
        results
    }

    async fn roll_back(
        &self,
        request_id: Uuid,
        file: &FileSpec,
        before: Option<Vec<u8>>,
        why: &str,
    ) {
        let outcome = match before {
            Some(previous) => {
                let spec = WriteSpec {
                    path: file.path.clone(),
                    content: previous,
                    mode: WriteMode::Overwrite,
                    expected_sha256: None,
                    create_dirs: false,
                };
                let prov = Provenance {
                    selection: Some("rollback".into()),
                    ..Provenance::default()
                };
                recorded_write(
                    self.store.as_ref(),
                    self.workspace.as_ref(),
                    request_id,
                    file_kind(file),
                    spec,
                    prov,
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
            None => {
                let removed = self
                    .workspace
                    .remove(&file.path)
                    .await
                    .map_err(|e| e.to_string());
                let note = format!(
                    "rolled back (atomic batch; a later write failed: {why}): the file was removed"
                );
                let prov = Provenance {
                    selection: Some("rollback".into()),
                    ..Provenance::default()
                };
                if let Err(e) = record_failure(
                    self.store.as_ref(),
                    request_id,
                    file_kind(file),
                    file.path.as_str(),
                    &note,
                    prov,
                )
                .await
                {
                    tracing::warn!(error = %e, "could not record a rollback");
                }
                removed
            }
        };
        if let Err(e) = outcome {
            tracing::error!(file = %file.path, error = %e, "rollback of an atomic batch failed");
        }
    }

    /// Produces one file's content: candidates, checks, selection, fallback.
    /// [`Self::generate_unbounded`] within the batch deadline and the file size limit: past the
    /// deadline the file stops waiting on models and fails; an oversized winner fails its file.
    async fn generate(
        &self,
        batch: &Batch,
        file: &FileSpec,
        recent: &[Operation],
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> (Result<Chosen, String>, Vec<CandidateRecord>) {
        let deadline = self.config.batch_deadline;
        let limit = self.config.max_file_bytes;
        match tokio::time::timeout(
            deadline,
            self.generate_unbounded(batch, file, recent, sink, upstream),
        )
        .await
        {
            Err(_) => (
                Err(format!(
                    "the batch deadline of {} s (WRIT_BATCH_DEADLINE_SECS) passed before a candidate was chosen; nothing was written",
                    deadline.as_secs()
                )),
                Vec::new(),
            ),
            Ok((Ok(chosen), candidates)) if chosen.code.len() > limit => (
                Err(format!(
                    "the chosen candidate from '{}' is {} bytes, above the limit of {limit} (WRIT_MAX_FILE_BYTES); nothing was written",
                    chosen.model,
                    chosen.code.len()
                )),
                candidates,
            ),
            Ok(generated) => generated,
        }
    }

    async fn generate_unbounded(
        &self,
        batch: &Batch,
        file: &FileSpec,
        recent: &[Operation],
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> (Result<Chosen, String>, Vec<CandidateRecord>) {
        sink.emit(Event::FileStarted {
            file: file.path.to_string(),
        });
        if file.kind == TargetKind::Image {
            return self.generate_image(batch, file, sink).await;
        }
        let language = Language::from_path(file.path.as_str());
        let current = match self.workspace.read(&file.path).await {
            Ok(bytes) => bytes,
            Err(e) => return (Err(e.to_string()), Vec::new()),
        };
        if let Some(expected) = &file.expected_sha256 {
            let actual = current
                .as_deref()
                .map(sha256_hex)
                .unwrap_or_else(|| "absent".into());
            if &actual != expected {
                return (
                    Err(format!(
                        "'{}' changed: expected sha256 {expected}, found {actual}; no model was called",
                        file.path
                    )),
                    Vec::new(),
                );
            }
        }
        let current_text = current.as_deref().map(String::from_utf8_lossy);
        let messages =
            prompt::candidate_messages(batch, file, language, current_text.as_deref(), recent);

        let models = batch
            .options
            .models
            .clone()
            .unwrap_or_else(|| self.config.candidates.clone());
        // Validated at the edge; a stored policy that no longer parses falls back to the deployment's.
        let policy = batch
            .options
            .straggler
            .as_ref()
            .and_then(|s| s.policy().ok())
            .unwrap_or(self.config.straggler);
        let (answers, waited) = fanout::fan_out(
            self.models.as_ref(),
            &models,
            &messages,
            language,
            self.call_settings(),
            file.path.as_str(),
            sink,
            policy,
        )
        .await;
        upstream.add(waited);
        let mut records: Vec<CandidateRecord> = answers.iter().map(|c| c.record.clone()).collect();

        // Viable, distinct, in model-list order; those that parse beat those that do not.
        let mut viable: Vec<(&str, &str, Option<bool>)> = Vec::new();
        for c in &answers {
            if let Some(code) = &c.code
                && !viable.iter().any(|(_, seen, _)| *seen == code.as_str())
            {
                viable.push((c.record.model.as_str(), code.as_str(), c.record.parsed));
            }
        }
        if viable.iter().any(|(_, _, parsed)| *parsed != Some(false)) {
            viable.retain(|(_, _, parsed)| *parsed != Some(false));
        }

        let chosen = match viable.len() {
            0 => {
                let fallback_started = Instant::now();
                let (fallback, extra) = self
                    .fallback(&models, &answers, messages, language, file, sink)
                    .await;
                upstream.add(fallback_started.elapsed());
                records.extend(extra);
                fallback
            }
            1 => Ok(Chosen {
                code: viable[0].1.to_string(),
                model: viable[0].0.to_string(),
                selection: Selection::SingleCandidate,
                reason: None,
                image: None,
            }),
            _ => Ok(self
                .arbitrate(batch, file, language, &models, &viable, sink, upstream)
                .await),
        };
        (chosen, records)
    }

    /// An image file: one call to the image model, its answer checked and shaped.
    async fn generate_image(
        &self,
        batch: &Batch,
        file: &FileSpec,
        sink: &dyn ProgressSink,
    ) -> (Result<Chosen, String>, Vec<CandidateRecord>) {
        let Some(model) = batch
            .options
            .image_model
            .clone()
            .or_else(|| self.config.image_model.clone())
        else {
            return (
                Err(
                    "no image model is configured: set IMAGE_MODEL (or send options.image_model)"
                        .to_string(),
                ),
                Vec::new(),
            );
        };
        let target = file.image.unwrap_or(ImageTarget {
            size: None,
            format: file
                .path
                .extension()
                .and_then(|e| ImageFormat::from_extension(&e))
                .unwrap_or(ImageFormat::Png),
        });
        let mut ask = format!(
            "Create the image `{}`: {}",
            file.path,
            file.description.trim()
        );
        if let Some((w, h)) = target.size {
            ask.push_str(&format!("\nSize: {w}×{h} pixels."));
        }
        ask.push_str(&format!("\nFormat: {}.", target.format.as_str()));
        if let Some(task) = &batch.task_description {
            ask.push_str(&format!("\nIt is part of this task: {}", task.trim()));
        }
        let req = ChatRequest {
            model: model.clone(),
            messages: vec![ChatMessage::user(ask)],
            modalities: Some(vec!["image".into(), "text".into()]),
            ..ChatRequest::default()
        };
        sink.emit(Event::CandidateStarted {
            file: file.path.to_string(),
            model: model.clone(),
        });
        let started = Instant::now();
        let (record, chosen) = match self.models.chat(req).await {
            Ok(resp) => {
                let mut record = fanout::answered(&model, &resp);
                let shaped = resp
                    .images
                    .first()
                    .ok_or(ImageError::Missing)
                    .and_then(|url| decode_data_url(url))
                    .and_then(|bytes| image::shape(&bytes, target));
                match shaped {
                    Ok(img) => {
                        record.ok = true;
                        record.parsed = Some(true);
                        let chosen = Chosen {
                            code: String::new(),
                            model: model.clone(),
                            selection: Selection::SingleCandidate,
                            reason: None,
                            image: Some(img),
                        };
                        (record, Ok(chosen))
                    }
                    Err(e) => {
                        record.parsed = Some(false);
                        record.error_class = Some("bad_image".into());
                        record.error = Some(e.to_string());
                        (record, Err(format!("'{}': {e}", file.path)))
                    }
                }
            }
            Err(e) => {
                let record = fanout::failed(&model, started, &e);
                (record, Err(format!("the image model failed: {e}")))
            }
        };
        sink.emit(Event::CandidateFinished {
            file: file.path.to_string(),
            model,
            latency_ms: record.latency_ms,
            ok: record.ok,
            error_class: record.error_class.clone(),
            parsed: record.parsed,
        });
        (chosen, vec![record])
    }

    fn call_settings(&self) -> CallSettings {
        CallSettings {
            temperature: self.config.temperature,
            max_tokens: self.config.max_tokens,
        }
    }

    /// Several distinct viable candidates: ask the arbiter, shuffled and anonymous.
    #[expect(
        clippy::too_many_arguments,
        reason = "the arbiter's inputs plus the clock its call is timed on"
    )]
    async fn arbitrate(
        &self,
        batch: &Batch,
        file: &FileSpec,
        language: Language,
        models: &[String],
        viable: &[(&str, &str, Option<bool>)],
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> Chosen {
        let mut order: Vec<usize> = (0..viable.len()).collect();
        order.shuffle(&mut rand::rng());
        let shown: Vec<&str> = order.iter().map(|&i| viable[i].1).collect();
        let arbiter = batch
            .options
            .arbiter_model
            .clone()
            .or_else(|| self.config.arbiter.clone())
            .or_else(|| models.first().cloned())
            .unwrap_or_default();
        let req = ChatRequest {
            model: arbiter.clone(),
            messages: prompt::arbiter_messages(batch, file, language, &shown),
            temperature: Some(0.0),
            max_tokens: Some(1_000),
            response_format: Some(prompt::verdict_schema(shown.len())),
            ..ChatRequest::default()
        };
        sink.emit(Event::ArbiterStarted {
            file: file.path.to_string(),
            model: arbiter.clone(),
            candidates: shown.len(),
        });
        let asked = Instant::now();
        let verdict = self.models.chat(req).await;
        upstream.add(asked.elapsed());
        let failure = match verdict {
            Ok(resp) => match writ_checks::parse_verdict(&resp.content, shown.len()) {
                Some(v) => {
                    let (model, code, _) = viable[order[v.choice - 1]];
                    sink.emit(Event::ArbiterChose {
                        file: file.path.to_string(),
                        candidate: v.choice,
                        model: model.to_string(),
                        reason: v.reason.clone(),
                    });
                    return Chosen {
                        code: code.to_string(),
                        model: model.to_string(),
                        selection: Selection::Arbiter,
                        reason: Some(v.reason),
                        image: None,
                    };
                }
                None => format!("the arbiter {arbiter} gave no usable verdict"),
            },
            Err(e) => format!("the arbiter failed: {e}"),
        };
        tracing::warn!(file = %file.path, reason = %failure, "arbiter failed; taking the first viable candidate");
        let (model, code, _) = viable[0];
        sink.emit(Event::ArbiterChose {
            file: file.path.to_string(),
            candidate: 0,
            model: model.to_string(),
            reason: failure.clone(),
        });
        Chosen {
            code: code.to_string(),
            model: model.to_string(),
            selection: Selection::ArbiterFailedFirstViable,
            reason: Some(failure),
            image: None,
        }
    }

    /// Every candidate failed: `CODE_GEN_MODEL`, then the list's models, one after another with
    /// backoff, skipping models whose failure was permanent. A rejected key or exhausted credit
    /// ends it at once: no other model can succeed with the same key.
    async fn fallback(
        &self,
        models: &[String],
        first_round: &[Candidate],
        messages: Vec<ChatMessage>,
        language: Language,
        file: &FileSpec,
        sink: &dyn ProgressSink,
    ) -> (Result<Chosen, String>, Vec<CandidateRecord>) {
        let provider_refused = |c: &Option<ErrorClass>| {
            matches!(
                c,
                Some(ErrorClass::Unauthorized | ErrorClass::PaymentRequired)
            )
        };
        let mut extra = Vec::new();
        let mut last_error = first_round
            .iter()
            .find_map(|c| c.record.error.clone())
            .unwrap_or_else(|| "no candidate produced usable code".to_string());
        if first_round.iter().any(|c| provider_refused(&c.class)) {
            return (
                Err(format!(
                    "every candidate failed and the provider refused the key: {last_error}"
                )),
                extra,
            );
        }
        let mut order: Vec<&String> = Vec::new();
        for m in self.config.fallback.iter().chain(models) {
            let permanent = first_round
                .iter()
                .any(|c| &c.record.model == m && c.class.is_some_and(ErrorClass::is_permanent));
            if !permanent && !order.contains(&m) {
                order.push(m);
            }
        }
        let mut wait = self.config.fallback_backoff;
        for (i, model) in order.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
            let c = fanout::fan_out(
                self.models.as_ref(),
                std::slice::from_ref(model),
                &messages,
                language,
                self.call_settings(),
                file.path.as_str(),
                sink,
                StragglerPolicy::WaitAll,
            )
            .await
            .0
            .pop();
            let Some(c) = c else { break };
            let refused = provider_refused(&c.class);
            extra.push(c.record.clone());
            if let Some(code) = c.code {
                return (
                    Ok(Chosen {
                        code,
                        model: model.clone(),
                        selection: Selection::Fallback,
                        reason: None,
                        image: None,
                    }),
                    extra,
                );
            }
            last_error = c.record.error.unwrap_or(last_error);
            if refused {
                break;
            }
        }
        (
            Err(format!(
                "every candidate and fallback model failed; last error: {last_error}"
            )),
            extra,
        )
    }
}

fn kind_name(file: &FileSpec) -> &'static str {
    match file.kind {
        TargetKind::Code => "code",
        TargetKind::Image => "image",
    }
}

fn file_kind(file: &FileSpec) -> FileKind {
    match file.kind {
        TargetKind::Code => FileKind::Code,
        TargetKind::Image => FileKind::Image,
    }
}
