//! The orchestrator: one batch, top-down. Every file runs its stages concurrently — generation
//! (fan-out and candidate checks, [`super::generation`]) or the image branch
//! ([`super::image_generation`]), selection ([`super::selection`]) or, with `options.validation`,
//! validation across the batch ([`super::validation`]), then writing ([`super::writing`]) once
//! the batch's request is recorded — within the batch deadline and the file-size limit. An
//! `atomic` batch generates every file first and writes all or none.
//!
//! Only this module knows the order; each stage is a function (or a small type) over the
//! shared types of [`super::stage`]. [`super::jobs::Jobs`] is the one
//! caller, through [`Synthesizer::execute`].

use std::time::{Duration, Instant};

use futures::future::join_all;
use tracing::Instrument;

use crate::audit::{AuditWrite, RequestStatus};
use crate::changes::Proposer;
use crate::commits::{self, CommitFile, RequestCommit};
use writ_checks::Language;

use crate::synthesis::batch::{Batch, DEFAULT_VALIDATION_TIMEOUT_SECS, TargetKind, Validation};
use crate::synthesis::fanout::PassCheck;
use crate::synthesis::formatting::{Formatter, format_chosen};
use crate::synthesis::generation::generate;
use crate::synthesis::image_generation::generate_image;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::record::Recorded;
use crate::synthesis::response::{BatchResponse, FileResult};
use crate::synthesis::routing::FileChecks;
use crate::synthesis::selection::{Selector, distinct_viable};
use crate::synthesis::stage::{BatchCx, FileCx, Present, Produced, Synthesizer, command_for};
use crate::synthesis::submission::{BatchAnswer, Submission};
use crate::synthesis::validation::generated::{Early, EarlyAgreement};
use crate::synthesis::validation::{CallerTests, Stage, file_checks, select_validated};
use crate::synthesis::writing::{Writer, Written};

/// How long a file ready to be written waits for the rest of its batch to join it
/// ([`Synthesizer::produce_and_write`]).
const WRITE_GROUP_WINDOW: Duration = Duration::from_millis(5);

impl Synthesizer {
    /// Runs a prepared batch to its end. The caller commits the completions of its writes with
    /// its answer and the closing of its request and job, in one commit.
    pub(crate) async fn execute(
        &self,
        sub: &Submission,
        present: Present,
        sink: &dyn ProgressSink,
        recorded: &Recorded,
    ) -> (BatchAnswer, Vec<AuditWrite>) {
        let (response, completions) = self.run(sub, &present, sink, recorded).await;
        let upstream = response.upstream;
        let submitted = BatchAnswer {
            response,
            replayed: false,
            upstream,
        };
        (submitted, completions)
    }

    /// Runs every file of the batch and writes the results (unless `dry_run`). Nothing is
    /// written before the batch's request is recorded, and nothing at all if it is not.
    async fn run(
        &self,
        sub: &Submission,
        present: &Present,
        sink: &dyn ProgressSink,
        recorded: &Recorded,
    ) -> (BatchResponse, Vec<AuditWrite>) {
        let batch = &sub.batch;
        let started = Instant::now();
        sink.emit(Event::Queued {
            files: batch.files().iter().map(|f| f.path.to_string()).collect(),
        });
        let cx = BatchCx {
            batch,
            present,
            sink,
        };
        let review =
            !batch.options().dry_run && self.config.review.wanted(batch.options().review());
        let writer = Writer {
            store: self.store.as_ref(),
            workspace: self.workspace.as_ref(),
            request_id: sub.request_id,
            batch,
            sink,
            recorded,
            outage_wait: self.config.store_outage_wait,
            review,
        };
        // A change set is applied all or nothing already.
        let atomic = batch.options().atomic && !batch.options().dry_run && !review;

        // The server's default of generated checks, or of the project's diagnostics, for
        // batches that ask for no validation and where a sandbox can run them.
        let diagnosed = batch.files().iter().any(|f| {
            matches!(f.kind, TargetKind::Code)
                && command_for(
                    &self.config.diagnostics,
                    Language::from_path(f.path.as_str()),
                )
                .is_some()
        });
        let default_checks = match (self.commands.is_some(), self.config.generate_checks) {
            (false, _) => None,
            (true, true) => Some(Validation::generated_only()),
            (true, false) => diagnosed.then(Validation::diagnostics_only),
        };
        let validation = batch
            .options()
            .validation
            .as_ref()
            .or(default_checks.as_ref());
        let mut kept_tests: Vec<AuditWrite> = Vec::new();
        let mut written: Vec<Written> = if let Some(validation) = validation {
            // Validation needs every file's candidates before any file can be chosen.
            let produced = self.produce_validated(validation, cx).await;
            let files = present.files.iter().zip(produced).collect();
            let mut written = match recorded.wait().await {
                Err(not) => writer.not_written(files, not),
                Ok(()) if atomic => writer.write_atomically(files).await,
                Ok(()) => writer.finish_files(files).await,
            };
            kept_tests = writer.write_kept_tests(&mut written).await;
            written
        } else if atomic {
            let produced = join_all(cx.files().map(|f| self.produce(f))).await;
            let files = present.files.iter().zip(produced).collect();
            match recorded.wait().await {
                Err(not) => writer.not_written(files, not),
                Ok(()) => writer.write_atomically(files).await,
            }
        } else {
            self.produce_and_write(cx, &writer, recorded).await
        };
        let (change_id, proposal) = match review {
            true => writer.propose(&mut written, self.proposer(sub)).await,
            false => (None, Vec::new()),
        };
        let (results, completions): (Vec<FileResult>, Vec<Option<AuditWrite>>) = written
            .into_iter()
            .map(|w| (w.result, w.completion))
            .unzip();
        let commit = match review {
            true => None,
            false => self.commit_batch(sub, present, &results).await,
        };
        let results = with_prompt_tokens(results, present);
        let write_path = self.workspace.root().display().to_string();
        let mut response = BatchResponse::assemble(
            sub.request_id,
            write_path,
            results,
            started.elapsed().as_millis() as u64,
        );
        response.commit = commit;
        response.degraded = present.degraded.clone();
        if change_id.is_some() {
            response.status = RequestStatus::AwaitingReview;
            response.change_id = change_id;
        }
        // Files run concurrently: the batch's critical upstream path is its slowest file's.
        response.upstream = present
            .files
            .iter()
            .map(|batch_file| batch_file.upstream.total())
            .max()
            .unwrap_or_default();
        let mut completions: Vec<AuditWrite> = completions.into_iter().flatten().collect();
        completions.extend(kept_tests);
        completions.extend(proposal);
        (response, completions)
    }

    /// One commit of the files the batch wrote, when it is to be committed
    /// ([`crate::commits`]): its message from the descriptions, each file's model and selection
    /// as trailers. Made before the batch answers, so the answer names it. A resumed batch's
    /// commit holds the files its earlier attempts wrote as well: one request, one commit.
    pub(crate) async fn commit_batch(
        &self,
        sub: &Submission,
        present: &Present,
        results: &[FileResult],
    ) -> Option<String> {
        let batch = &sub.batch;
        let committer = self.committer.as_deref()?;
        if batch.options().dry_run || !commits::wanted(Some(committer), batch.options().commit()) {
            return None;
        }
        let mut files: Vec<CommitFile> = present
            .earlier
            .as_ref()
            .map(|e| e.files.clone())
            .unwrap_or_default();
        files.extend(
            results
                .iter()
                .zip(batch.files())
                .filter(|(r, _)| r.success && r.operation.is_some())
                .map(|(r, f)| CommitFile {
                    path: f.path.clone(),
                    sha256: r.sha256.clone(),
                    model: r.chosen_model.clone(),
                    selection: r.selection.map(|s| s.as_str().to_string()),
                }),
        );
        if files.is_empty() {
            return None;
        }
        let whole = present.earlier.as_ref().map_or(batch, |e| &e.batch);
        let (subject, body) = batch_message(whole, &files);
        let commit = RequestCommit {
            request_id: sub.request_id,
            caller: sub.caller.clone(),
            subject,
            body,
            trailers: Vec::new(),
            files,
        };
        commits::commit_request(self.workspace.as_ref(), committer, commit)
            .await
            .commit
    }

    /// Who proposes the batch's change set, when it is held for review.
    fn proposer(&self, sub: &Submission) -> Proposer {
        let batch = &sub.batch;
        let summary = match batch.task_description() {
            Some(task) => task.lines().next().unwrap_or_default().trim().to_string(),
            None => format!(
                "Write {}",
                batch
                    .files()
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Proposer {
            change_id: uuid::Uuid::now_v7(),
            request_id: sub.request_id,
            route: crate::synthesis::record::ROUTE.to_string(),
            caller: sub.caller.clone(),
            workspace: sub.workspace.clone(),
            summary: Some(summary.chars().take(200).collect()),
            commit: batch.options().commit(),
            ttl: self.config.review.ttl,
        }
    }

    fn selector<'a>(&'a self, batch: &'a Batch) -> Selector<'a> {
        Selector {
            models: self.models.as_ref(),
            config: &self.config,
            batch,
        }
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
        cx: BatchCx<'_>,
        writer: &Writer<'_>,
        recorded: &Recorded,
    ) -> Vec<Written> {
        let batch_files = &cx.present.files;
        let (ready_tx, mut ready) = tokio::sync::mpsc::unbounded_channel();
        // Each file's place in the answer, which lists them in the request's order.
        let producing = join_all(cx.files().enumerate().map(|(i, fcx)| {
            let ready_tx = ready_tx.clone();
            async move {
                let produced = self.produce(fcx).await;
                let _ = ready_tx.send((i, fcx.batch_file, produced));
            }
        }));
        drop(ready_tx);
        let writing = async {
            let mut written: Vec<Option<Written>> = batch_files.iter().map(|_| None).collect();
            let mut remaining = batch_files.len();
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
                let indices: Vec<usize> = group.iter().map(|(i, _, _)| *i).collect();
                let files = group
                    .into_iter()
                    .map(|(_, batch_file, produced)| (batch_file, produced))
                    .collect();
                let done = match recorded.wait().await {
                    Ok(()) => writer.finish_files(files).await,
                    Err(not) => writer.not_written(files, not),
                };
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
    async fn produce_validated(&self, validation: &Validation, cx: BatchCx<'_>) -> Vec<Produced> {
        let deadline = self.config.batch_deadline;
        let stages = async {
            let stages = join_all(cx.files().map(|fcx| {
                let span = tracing::info_span!("file", path = %fcx.file().path);
                self.generate_for_validation(fcx, validation)
                    .instrument(span)
            }))
            .await;
            let produced = select_validated(
                &self.selector(cx.batch),
                self.commands.as_deref(),
                validation,
                stages,
                cx,
            )
            .instrument(tracing::info_span!("validation"))
            .await;
            join_all(
                produced
                    .into_iter()
                    .zip(cx.files())
                    .map(|(p, fcx)| self.formatted(fcx, Some(validation), p)),
            )
            .await
        };
        match tokio::time::timeout(deadline, stages).await {
            Ok(produced) => produced.into_iter().map(|p| self.bounded(p)).collect(),
            Err(_) => cx
                .files()
                .map(|_| Produced::failed(deadline_message(deadline), Vec::new()))
                .collect(),
        }
    }

    /// One file's candidates, for validation to choose among; under
    /// `options.fanout.stop_when_passing`, each checked as it arrives: against the caller's
    /// tests when there are some, else by the generated checks' agreement.
    async fn generate_for_validation(&self, fcx: FileCx<'_>, validation: &Validation) -> Stage {
        let fanout = fcx.batch.options().fanout;
        let stop = self
            .commands
            .as_deref()
            .filter(|_| fanout.stop_when_passing && !validation.commands.is_empty())
            .map(|runner| CallerTests {
                runner,
                validation,
                path: fcx.file().path.clone(),
                checks: file_checks(
                    &self.config,
                    validation,
                    &fcx.file().path,
                    Language::from_path(fcx.file().path.as_str()),
                )
                .0,
            });
        let models = fcx
            .batch
            .options()
            .models
            .clone()
            .unwrap_or_else(|| self.config.candidates.clone());
        let early = self
            .commands
            .as_deref()
            .filter(|_| {
                validation.generate
                    && validation.commands.is_empty()
                    && (fanout.stop_when_passing
                        || fanout.first_round.is_some()
                        || fcx.present.routing.is_some())
            })
            .and_then(|runner| {
                EarlyAgreement::new(
                    self.selector(fcx.batch),
                    runner,
                    validation,
                    fcx,
                    &models,
                    Early::default(),
                )
            });
        let check: Option<&dyn PassCheck> = match (&stop, &early) {
            (Some(s), _) => Some(s),
            (None, Some(e)) if fanout.stop_when_passing => Some(e),
            _ => None,
        };
        fcx.sink.emit(Event::FileStarted {
            file: fcx.file().path.to_string(),
        });
        match fcx.file().kind {
            TargetKind::Image => Stage::Done(Box::new(
                generate_image(self.models.as_ref(), &self.config, fcx).await,
            )),
            TargetKind::Code => {
                match generate(
                    self.models.as_ref(),
                    self.workspace.as_ref(),
                    &self.config,
                    fcx,
                    check,
                    if !validation.commands.is_empty() {
                        FileChecks::Callers
                    } else if validation.generate {
                        FileChecks::Generated
                    } else {
                        FileChecks::None
                    },
                )
                .await
                {
                    Ok(generated) => {
                        let early = match early {
                            None => None,
                            Some(early) => {
                                // Rounds need the verdict on the first round's candidates even when
                                // nothing stopped the fan-out.
                                if !generated.rounds.later.is_empty() {
                                    let codes: Vec<&str> = distinct_viable(&generated.answers)
                                        .iter()
                                        .map(|v| v.code)
                                        .collect();
                                    early.settle(&codes).await;
                                }
                                Some(early.into_early())
                            }
                        };
                        Stage::Generated(Box::new(generated), early)
                    }
                    Err(error) => Stage::Done(Box::new(Produced::failed(error, Vec::new()))),
                }
            }
        }
    }

    /// One file's content: generation then selection (or the image branch), within the batch
    /// deadline and the file-size limit. Past the deadline the file stops waiting on models and
    /// fails; an oversized winner fails its file.
    async fn produce(&self, cx: FileCx<'_>) -> Produced {
        let deadline = self.config.batch_deadline;
        let span = tracing::info_span!("file", path = %cx.file().path);
        let stages = async {
            cx.sink.emit(Event::FileStarted {
                file: cx.file().path.to_string(),
            });
            match cx.file().kind {
                TargetKind::Image => generate_image(self.models.as_ref(), &self.config, cx).await,
                TargetKind::Code => {
                    match generate(
                        self.models.as_ref(),
                        self.workspace.as_ref(),
                        &self.config,
                        cx,
                        None,
                        FileChecks::None,
                    )
                    .await
                    {
                        Ok(generated) => {
                            let produced = self.selector(cx.batch).select(cx, generated).await;
                            let validation = cx.batch.options().validation.as_ref();
                            self.formatted(cx, validation, produced).await
                        }
                        Err(error) => Produced::failed(error, Vec::new()),
                    }
                }
            }
        };
        match tokio::time::timeout(deadline, stages.instrument(span)).await {
            Err(_) => Produced::failed(deadline_message(deadline), Vec::new()),
            Ok(produced) => self.bounded(produced),
        }
    }

    /// The chosen code formatted by the project's formatter for its language, in the sandbox,
    /// where one is configured (`WRIT_FORMATTERS`) and the batch did not turn it off
    /// (`options.validation.format`).
    async fn formatted(
        &self,
        cx: FileCx<'_>,
        validation: Option<&Validation>,
        produced: Produced,
    ) -> Produced {
        let language = Language::from_path(cx.file().path.as_str());
        let wanted =
            matches!(cx.file().kind, TargetKind::Code) && validation.is_none_or(Validation::format);
        let (Some(runner), Some(command), true) = (
            self.commands.as_deref(),
            command_for(&self.config.formatters, language),
            wanted,
        ) else {
            return produced;
        };
        let timeout = validation
            .map_or(
                Duration::from_secs(DEFAULT_VALIDATION_TIMEOUT_SECS),
                Validation::timeout,
            )
            .min(runner.limits().max_timeout);
        let formatter = Formatter {
            runner,
            command,
            timeout,
        };
        format_chosen(formatter, &cx.file().path, language, cx.sink, produced)
            .instrument(tracing::info_span!("format", file = %cx.file().path))
            .await
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

/// A batch commit's subject and body, from the descriptions: the task's first line (or the one
/// file's), and each written file's description.
fn batch_message(batch: &Batch, files: &[CommitFile]) -> (String, String) {
    let first_line = |text: &str| text.lines().next().unwrap_or_default().trim().to_string();
    let described: Vec<&crate::synthesis::batch::FileSpec> = batch
        .files()
        .iter()
        .filter(|f| files.iter().any(|c| c.path == f.path))
        .collect();
    let subject = match (batch.task_description(), described.as_slice()) {
        (Some(task), _) if !task.trim().is_empty() => first_line(task),
        (_, [one]) => first_line(one.description()),
        (_, many) => format!(
            "Write {}",
            many.iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let body = described
        .iter()
        .map(|f| {
            let line: String = first_line(f.description()).chars().take(200).collect();
            format!("- {}: {line}", f.path)
        })
        .collect::<Vec<_>>()
        .join("\n");
    (subject, body)
}

/// Each file's answer with the prompt tokens its candidates' prompt used (files in batch order).
fn with_prompt_tokens(mut results: Vec<FileResult>, present: &Present) -> Vec<FileResult> {
    for (result, batch_file) in results.iter_mut().zip(&present.files) {
        result.prompt_tokens_by_part = batch_file.prompt_tokens();
    }
    results
}

fn deadline_message(deadline: Duration) -> String {
    format!(
        "the batch deadline of {} s (WRIT_BATCH_DEADLINE_SECS) passed before a candidate was chosen; nothing was written",
        deadline.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::watch;

    use super::*;
    use crate::synthesis::doubles::{self, Answer, MemoryStore, MemoryWorkspace, ScriptedModels};
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::record::NotRecorded;
    use crate::synthesis::stage::SynthesisConfig;

    /// Runs a one-file batch whose only model answers at once, behind `recorded`; returns the
    /// answer and what the workspace holds afterwards.
    async fn run_behind(recorded: Recorded) -> (BatchResponse, Option<String>) {
        let models = ScriptedModels::default()
            .with("alpha", vec![Answer::after(10, "```python\nx = 1\n```")]);
        let workspace = Arc::new(MemoryWorkspace::default());
        let config = SynthesisConfig {
            candidates: vec!["alpha".into()],
            ..SynthesisConfig::default()
        };
        let synthesizer = Synthesizer::new(
            Arc::new(models),
            Arc::new(MemoryStore::default()),
            workspace.clone(),
            config,
        );
        let batch = doubles::batch(&["app.py"]);
        let present = doubles::present(&batch);
        let sub = doubles::submission(batch);
        let (submitted, _) = synthesizer
            .execute(&sub, present, &NoProgress, &recorded)
            .await;
        (submitted.response, workspace.content("app.py"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_under_review_writes_nothing_and_proposes_its_change_set() {
        let models = ScriptedModels::default()
            .with("alpha", vec![Answer::after(10, "```python\nx = 2\n```")]);
        let workspace = Arc::new(MemoryWorkspace::default().with_file("old.py", "x = 1\n"));
        let store = Arc::new(MemoryStore::default());
        let config = SynthesisConfig {
            candidates: vec!["alpha".into()],
            ..SynthesisConfig::default()
        };
        let synthesizer =
            Synthesizer::new(Arc::new(models), store.clone(), workspace.clone(), config);
        let batch = doubles::parse(serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "new.py", "code_description": "d"}],
            "options": {"review": true}}));
        let present = doubles::present(&batch);
        let sub = doubles::submission(batch);

        let (submitted, completions) = synthesizer
            .execute(&sub, present, &NoProgress, &Recorded::already())
            .await;

        let response = submitted.response;
        assert_eq!(response.status, RequestStatus::AwaitingReview);
        let change_id = response.change_id.expect("a change set");
        let result = &response.results[0];
        assert_eq!(
            result.operation,
            Some(crate::audit::OperationKind::Proposed)
        );
        let proposal = result.proposal.as_ref().expect("the file's hunks");
        assert_eq!(proposal.base_sha256, None);
        assert_eq!(proposal.hunks.len(), 1);
        assert_eq!(workspace.content("new.py"), None, "nothing is written");
        let proposed = completions.iter().any(
            |w| matches!(w, AuditWrite::ProposeChange { change, .. } if change.id == change_id),
        );
        assert!(proposed, "the change set commits with the batch's closing");
        assert!(response.commit.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_whose_request_was_not_recorded_writes_nothing() {
        let (committed_tx, committed) = watch::channel(None);
        let _ = committed_tx.send(Some(false));
        let (response, on_disk) = run_behind(Recorded::pending(committed)).await;
        assert_eq!(on_disk, None);
        let result = &response.results[0];
        assert!(!result.success);
        assert_eq!(
            result.error.as_deref(),
            Some(NotRecorded.to_string().as_str())
        );

        let (response, on_disk) = run_behind(Recorded::already()).await;
        assert_eq!(on_disk.as_deref(), Some("x = 1\n"));
        assert!(response.results[0].success);
    }
}
