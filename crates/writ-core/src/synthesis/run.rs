//! One batch, top-down: every file runs its stages concurrently — generation (fan-out and
//! candidate checks, [`super::generation`]), selection ([`super::selection`]), writing
//! ([`super::writing`]) — within the batch deadline and the file-size limit. An `atomic` batch
//! generates every file first and writes all or none.
//!
//! The [`Synthesizer`] holds what every stage needs (models, store, workspace, settings). Its
//! methods are crate-internal: the job runner ([`super::runner::JobRunner`]) is the one entry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use uuid::Uuid;

use crate::audit::{AuditStore, AuditWrite, CandidateRecord, FileKind, RecentOperation};
use crate::execution::CommandRunner;
use crate::model::ModelClient;
use crate::synthesis::batch::{Batch, FileSpec, Validation};
use crate::synthesis::fanout::{StragglerPolicy, UpstreamClock};
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::response::{BatchResponse, FileResult, FileValidation};
use crate::synthesis::runner::Recorded;
use crate::synthesis::selection::Chosen;
use crate::synthesis::validation::Stage;
use crate::synthesis::writing::Written;
use crate::workspace::Workspace;

/// How long a file ready to be written waits for the rest of its batch to join it
/// ([`Synthesizer::produce_and_write`]).
const WRITE_GROUP_WINDOW: Duration = Duration::from_millis(5);

/// `WRIT_MAX_SHOWN_FILE_CHARS` unset: about 50,000 tokens of code, which every current
/// long-context model takes with room for the rest of the prompt and the answer.
pub const DEFAULT_MAX_SHOWN_FILE_CHARS: usize = 200_000;

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
    /// A chosen candidate (code or image) larger than this fails its file instead of being
    /// written (`WRIT_MAX_FILE_BYTES`).
    pub max_file_bytes: usize,
    /// The largest existing file (in characters) shown whole to the models for a change
    /// (`WRIT_MAX_SHOWN_FILE_CHARS`); a larger one is refused, never cut.
    pub max_shown_file_chars: usize,
    /// Files run at once, so each file's generation is bounded by this (`WRIT_BATCH_DEADLINE_SECS`).
    pub batch_deadline: Duration,
    /// When a fan-out stops waiting for slow candidates (`WRIT_STRAGGLER_*`; `options.straggler`).
    pub straggler: StragglerPolicy,
    /// The image model (`IMAGE_MODEL`).
    pub image_model: Option<String>,
    /// Models a batch may name in `options.models`, `arbiter_model` or `image_model`
    /// (`WRIT_ALLOWED_MODELS`); empty: only the configured ones.
    pub allowed_models: Vec<String>,
    /// Prompt tokens of the repository map in each candidate prompt (`WRIT_REPO_MAP_TOKENS`;
    /// `options.repo_map_tokens` overrides it; 0: no map).
    pub repo_map_tokens: usize,
}

impl SynthesisConfig {
    /// Whether a batch may ask for `model`: it is on the allow-list, or (with no list) it is one
    /// of the configured models, so a key holder cannot pick a costlier model than the operator.
    pub fn allows(&self, model: &str) -> bool {
        if !self.allowed_models.is_empty() {
            return self.allowed_models.iter().any(|m| m == model);
        }
        self.candidates
            .iter()
            .chain(&self.arbiter)
            .chain(&self.fallback)
            .chain(&self.image_model)
            .any(|m| m == model)
    }
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
            max_shown_file_chars: DEFAULT_MAX_SHOWN_FILE_CHARS,
            batch_deadline: Duration::from_secs(600),
            straggler: StragglerPolicy::WaitAll,
            allowed_models: Vec::new(),
            repo_map_tokens: crate::synthesis::context::DEFAULT_REPO_MAP_TOKENS,
        }
    }
}

/// What every stage of a batch works with.
pub struct Synthesizer {
    pub(crate) models: Arc<dyn ModelClient>,
    pub(crate) store: Arc<dyn AuditStore>,
    pub(crate) workspace: Arc<dyn Workspace>,
    pub(crate) config: SynthesisConfig,
    /// Runs the caller's checks for `options.validation`; `None` when no sandbox or no
    /// commands are configured (such batches are refused before any model is called).
    pub(crate) commands: Option<Arc<dyn CommandRunner>>,
}

/// What a batch's prompts show of what exists before it, read while the batch is checked
/// (`Synthesizer::prepare`, which refuses the batch when a code file cannot be read).
pub(crate) struct Prior {
    pub recent: Vec<RecentOperation>,
    /// Each code file's content when the batch began (`None`: no such file yet).
    pub current: Vec<(crate::path::RepoPath, Option<Vec<u8>>)>,
    /// What the caller named in `context`, found on disk.
    pub named: crate::synthesis::context::NamedContext,
    /// The prompt tokens each code file's parts used, by file index, filled as prompts are
    /// built, for the answer.
    pub prompt_tokens:
        std::sync::Mutex<Vec<Option<crate::synthesis::response::PromptTokensByPart>>>,
}

impl Prior {
    /// Keeps what file `index`'s prompt spent on each part, for the answer.
    pub fn record_prompt_tokens(
        &self,
        index: usize,
        tokens: crate::synthesis::response::PromptTokensByPart,
    ) {
        if let Ok(mut all) = self.prompt_tokens.lock()
            && let Some(slot) = all.get_mut(index)
        {
            *slot = Some(tokens);
        }
    }

    /// The content `path` held when the batch began.
    pub fn current(&self, path: &crate::path::RepoPath) -> Option<&[u8]> {
        self.current
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, content)| content.as_deref())
    }
}

/// One file's outcome before it is written: the chosen content (or why there is none) and every
/// candidate that was asked, for the answer and the audit record.
pub(crate) struct Produced {
    pub chosen: Result<Chosen, String>,
    pub candidates: Vec<CandidateRecord>,
    /// How the file did against the caller's checks, when the batch asked for them.
    pub validation: Option<FileValidation>,
    /// The file as the batch found it, when it existed: the chosen code is a change of it.
    pub existing: Option<crate::synthesis::update::Existing>,
}

impl Produced {
    pub fn failed(error: impl Into<String>, candidates: Vec<CandidateRecord>) -> Self {
        Produced {
            chosen: Err(error.into()),
            candidates,
            validation: None,
            existing: None,
        }
    }
}

impl Synthesizer {
    pub fn new(
        models: Arc<dyn ModelClient>,
        store: Arc<dyn AuditStore>,
        workspace: Arc<dyn Workspace>,
        config: SynthesisConfig,
    ) -> Self {
        Synthesizer {
            models,
            store,
            workspace,
            config,
            commands: None,
        }
    }

    /// Lets batches validate their candidates with `runner`.
    pub fn with_commands(mut self, runner: Option<Arc<dyn CommandRunner>>) -> Self {
        self.commands = runner;
        self
    }

    /// Runs every file of the batch and writes the results (unless `dry_run`).
    pub(crate) async fn run(
        &self,
        request_id: Uuid,
        batch: &Batch,
        prior: Prior,
        sink: &dyn ProgressSink,
        recorded: &Recorded,
    ) -> (BatchResponse, Vec<AuditWrite>) {
        let started = Instant::now();
        sink.emit(Event::Queued {
            files: batch.files.iter().map(|f| f.path.to_string()).collect(),
        });
        let clocks: Vec<UpstreamClock> = batch
            .files
            .iter()
            .map(|_| UpstreamClock::default())
            .collect();

        let written: Vec<Written> = if let Some(validation) = &batch.options.validation {
            // Validation needs every file's candidates before any file can be chosen.
            let produced = self
                .produce_validated(batch, validation, &prior, sink, &clocks)
                .await;
            recorded.wait().await;
            if batch.options.atomic && !batch.options.dry_run {
                self.write_atomically(request_id, batch, produced, sink)
                    .await
            } else {
                let files = batch.files.iter().zip(produced).collect();
                self.finish_files(request_id, batch, files, sink).await
            }
        } else if batch.options.atomic && !batch.options.dry_run {
            let produced = join_all(
                batch
                    .files
                    .iter()
                    .zip(&clocks)
                    .map(|(f, clock)| self.produce(batch, f, &prior, sink, clock)),
            )
            .await;
            recorded.wait().await;
            self.write_atomically(request_id, batch, produced, sink)
                .await
        } else {
            self.produce_and_write(request_id, batch, &prior, sink, recorded, &clocks)
                .await
        };
        let (results, completions): (Vec<FileResult>, Vec<Option<AuditWrite>>) = written
            .into_iter()
            .map(|w| (w.result, w.completion))
            .unzip();
        let results = with_prompt_tokens(results, &prior);
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
        (response, completions.into_iter().flatten().collect())
    }

    /// Every file produced and written as soon as it is ready, except that files ready close
    /// together are written together: a ready file waits (at most [`WRITE_GROUP_WINDOW`]) for the
    /// batch's other files, so that their pending records are one commit and their temp files
    /// and renames share the filesystem's journal commits, instead of queueing one behind the
    /// other. The wait costs the batch nothing unless it outlasts the last file's generation:
    /// the batch answers when its last file is written, and a group closes as soon as every
    /// file still running has joined it.
    async fn produce_and_write(
        &self,
        request_id: Uuid,
        batch: &Batch,
        prior: &Prior,
        sink: &dyn ProgressSink,
        recorded: &Recorded,
        clocks: &[UpstreamClock],
    ) -> Vec<Written> {
        let (ready_tx, mut ready) = tokio::sync::mpsc::unbounded_channel();
        let producing = join_all(batch.files.iter().zip(clocks).enumerate().map(
            |(i, (file, clock))| {
                let ready_tx = ready_tx.clone();
                async move {
                    let produced = self.produce(batch, file, prior, sink, clock).await;
                    let _ = ready_tx.send((i, produced));
                }
            },
        ));
        drop(ready_tx);
        let writing = async {
            let mut written: Vec<Option<Written>> = batch.files.iter().map(|_| None).collect();
            let mut remaining = batch.files.len();
            while let Some(first) = ready.recv().await {
                let mut group = vec![first];
                let window = tokio::time::sleep(WRITE_GROUP_WINDOW);
                tokio::pin!(window);
                while group.len() < remaining {
                    tokio::select! {
                        more = ready.recv() => match more {
                            Some(more) => group.push(more),
                            None => break,
                        },
                        () = &mut window => break,
                    }
                }
                remaining -= group.len();
                recorded.wait().await;
                let indices: Vec<usize> = group.iter().map(|(i, _)| *i).collect();
                let files = group
                    .into_iter()
                    .map(|(i, produced)| (&batch.files[i], produced))
                    .collect();
                let done = self.finish_files(request_id, batch, files, sink).await;
                for (i, w) in indices.into_iter().zip(done) {
                    written[i] = Some(w);
                }
            }
            written
        };
        let (_, written) = futures::future::join(producing, writing).await;
        written.into_iter().flatten().collect()
    }

    /// Every file's candidates, then validation and selection across the batch
    /// ([`super::validation`]), within the batch deadline and the file-size limit.
    async fn produce_validated(
        &self,
        batch: &Batch,
        validation: &Validation,
        prior: &Prior,
        sink: &dyn ProgressSink,
        clocks: &[UpstreamClock],
    ) -> Vec<Produced> {
        let deadline = self.config.batch_deadline;
        let stages =
            async {
                let stages = join_all(batch.files.iter().zip(clocks).map(
                    |(file, clock)| async move {
                        sink.emit(Event::FileStarted {
                            file: file.path.to_string(),
                        });
                        match file.kind {
                            FileKind::Image => {
                                Stage::Done(self.generate_image(batch, file, sink).await)
                            }
                            FileKind::Code | FileKind::Direct | FileKind::Run => {
                                match self.generate(batch, file, prior, sink, clock).await {
                                    Ok(generated) => Stage::Generated(Box::new(generated)),
                                    Err(error) => Stage::Done(Produced::failed(error, Vec::new())),
                                }
                            }
                        }
                    },
                ))
                .await;
                self.select_validated(batch, validation, stages, sink, clocks)
                    .await
            };
        match tokio::time::timeout(deadline, stages).await {
            Ok(produced) => produced.into_iter().map(|p| self.bounded(p)).collect(),
            Err(_) => batch
                .files
                .iter()
                .map(|_| Produced::failed(deadline_message(deadline), Vec::new()))
                .collect(),
        }
    }

    /// One file's content: generation then selection (or the image branch), within the batch
    /// deadline and the file-size limit. Past the deadline the file stops waiting on models and
    /// fails; an oversized winner fails its file.
    async fn produce(
        &self,
        batch: &Batch,
        file: &FileSpec,
        prior: &Prior,
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> Produced {
        let deadline = self.config.batch_deadline;
        let stages = async {
            sink.emit(Event::FileStarted {
                file: file.path.to_string(),
            });
            match file.kind {
                FileKind::Image => self.generate_image(batch, file, sink).await,
                FileKind::Code | FileKind::Direct | FileKind::Run => {
                    match self.generate(batch, file, prior, sink, upstream).await {
                        Ok(generated) => self.select(batch, file, generated, sink, upstream).await,
                        Err(error) => Produced::failed(error, Vec::new()),
                    }
                }
            }
        };
        match tokio::time::timeout(deadline, stages).await {
            Err(_) => Produced::failed(deadline_message(deadline), Vec::new()),
            Ok(produced) => self.bounded(produced),
        }
    }

    /// An oversized winner (code or image) fails its file.
    fn bounded(&self, produced: Produced) -> Produced {
        let limit = self.config.max_file_bytes;
        match produced {
            Produced {
                chosen: Ok(chosen),
                candidates,
                validation,
                existing,
            } if chosen.content.len() > limit => Produced {
                chosen: Err(format!(
                    "the chosen candidate from '{}' is {} bytes, above the limit of {limit} (WRIT_MAX_FILE_BYTES); nothing was written",
                    chosen.model,
                    chosen.content.len()
                )),
                candidates,
                validation,
                existing,
            },
            produced => produced,
        }
    }
}

/// Each file's answer with the prompt tokens its candidates' prompt used (files in batch order).
fn with_prompt_tokens(mut results: Vec<FileResult>, prior: &Prior) -> Vec<FileResult> {
    if let Ok(tokens) = prior.prompt_tokens.lock() {
        for (result, tokens) in results.iter_mut().zip(tokens.iter()) {
            result.prompt_tokens_by_part = tokens.clone();
        }
    }
    results
}

fn deadline_message(deadline: Duration) -> String {
    format!(
        "the batch deadline of {} s (WRIT_BATCH_DEADLINE_SECS) passed before a candidate was chosen; nothing was written",
        deadline.as_secs()
    )
}
