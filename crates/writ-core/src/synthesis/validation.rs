//! Validation: the caller's checks (`options.validation`) decide among a batch's candidates, in
//! the selection stage.
//!
//! Every file's candidates are generated first. Then each distinct viable candidate of a file is
//! staged in a scratch copy of `REPO_DIR` with the batch's other files at their current best
//! choice (so tests that import several new files work) and the commands run in the sandbox
//! ([`crate::execution::Runner`]); a candidate passes when every command exits 0 in time. Files
//! validated before another file's best choice changed are tried once more, and files that still
//! have no passer are tried together — combinations of their candidates, each model's own files
//! first — since a test that imports several new files passes only when all of them are right.
//!
//! Then, per file: several distinct passers → the arbiter judges only among them
//! (`validated_arbiter`); one → taken without an arbiter call (`validated`); none → repair
//! rounds: each model that answered gets its own candidate back with the failing command's
//! output (a bounded tail) and the other files it was checked with, and is asked for the
//! corrected whole file; every failing file is repaired in a round, then the new candidates are
//! checked and validated, alone and together (`repaired`). Still none: the file fails with `validation_failed`
//! (`on_fail: "refuse"`) or the usual selection writes the best unvalidated candidate, marked as
//! not passing (`"write_best"`).

use std::time::Instant;

use futures::future::join_all;

use crate::audit::{CandidateRecord, Selection, ValidationRecord};
use crate::execution::{RunOutcome, Runner, tail};
use crate::model::ChatRequest;
use crate::path::SandboxPath;
use crate::synthesis::batch::{Batch, FileSpec, OnFail, Validation};
use crate::synthesis::fanout::{self, UpstreamClock};
use crate::synthesis::generation::Generated;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::prompt;
use crate::synthesis::response::FileValidation;
use crate::synthesis::run::{Produced, Synthesizer};
use crate::synthesis::selection::{Chosen, Content, Viable, distinct_viable};
use crate::synthesis::update::judge;

/// Bytes of a failing command's output kept in the record and shown to a model for repair.
pub const OUTPUT_TAIL_BYTES: usize = 4_000;
/// Most combinations of several files' candidates tried together in one round (three files of
/// four candidates each is 64).
pub const MAX_COMBINATIONS: usize = 64;

/// One candidate under validation.
struct Trial {
    model: String,
    code: String,
    round: u32,
    /// Where its record is in the file's candidate list.
    record: usize,
    outcome: Option<ValidationRecord>,
}

impl Trial {
    fn passed(&self) -> bool {
        self.outcome.as_ref().is_some_and(|o| o.passed)
    }
}

/// A code file going through validation.
struct FileTrials<'a> {
    file: &'a FileSpec,
    generated: Generated,
    records: Vec<CandidateRecord>,
    trials: Vec<Trial>,
    /// The trial other files are staged with.
    best: Option<usize>,
    rounds: u32,
}

impl FileTrials<'_> {
    /// A candidate as the checks see it: in the file's own shape (line endings, BOM) when it is
    /// a change of an existing file, exactly as it would be written.
    fn staged(&self, code: &str) -> (SandboxPath, Vec<u8>) {
        let bytes = match &self.generated.existing {
            Some(e) => e.render(code).into_bytes(),
            None => code.as_bytes().to_vec(),
        };
        (self.file.path.clone(), bytes)
    }
    fn best_code(&self) -> Option<&str> {
        self.best.map(|i| self.trials[i].code.as_str())
    }
    fn passers(&self) -> Vec<usize> {
        (0..self.trials.len())
            .filter(|&i| self.trials[i].passed())
            .collect()
    }
}

/// What a code file brings to validation: its candidates, or its outcome already.
pub(crate) enum Stage {
    Generated(Box<Generated>),
    Done(Produced),
}

impl Synthesizer {
    /// Validation and selection for every file of the batch at once; see the module docs.
    pub(crate) async fn select_validated(
        &self,
        batch: &Batch,
        validation: &Validation,
        stages: Vec<Stage>,
        sink: &dyn ProgressSink,
        clocks: &[UpstreamClock],
    ) -> Vec<Produced> {
        let Some(runner) = self.runner.clone() else {
            let why =
                "validation was asked for but no command runner is configured (WRIT_COMMANDS)";
            return stages
                .into_iter()
                .map(|s| match s {
                    Stage::Done(p) => p,
                    Stage::Generated(g) => Produced::failed(why, records_of(&g)),
                })
                .collect();
        };
        let mut done: Vec<Option<Produced>> = Vec::new();
        let mut files: Vec<FileTrials<'_>> = Vec::new();
        let mut slot_of: Vec<Option<usize>> = Vec::new();
        for (stage, file) in stages.into_iter().zip(&batch.files) {
            match stage {
                Stage::Done(p) => {
                    done.push(Some(p));
                    slot_of.push(None);
                }
                Stage::Generated(g) => {
                    let records = records_of(&g);
                    let trials: Vec<Trial> = distinct_viable(&g.answers)
                        .iter()
                        .map(|v| Trial {
                            model: v.model.to_string(),
                            code: v.code.to_string(),
                            round: 0,
                            record: record_index(&records, v.model, 0),
                            outcome: None,
                        })
                        .collect();
                    let best = (!trials.is_empty()).then_some(0);
                    done.push(None);
                    slot_of.push(Some(files.len()));
                    files.push(FileTrials {
                        file,
                        generated: *g,
                        records,
                        trials,
                        best,
                        rounds: 0,
                    });
                }
            }
        }

        // First answers: each file in turn against the others' best, then once more for files
        // tried before another file's best choice changed.
        let mut changed_at: Vec<usize> = vec![0; files.len()];
        let mut tried_at: Vec<usize> = vec![0; files.len()];
        let mut clock = 0usize;
        for pass in 0..2 {
            for i in 0..files.len() {
                let needs = if pass == 0 {
                    true
                } else {
                    files[i].passers().is_empty()
                        && (0..files.len()).any(|j| j != i && changed_at[j] > tried_at[i])
                };
                if !needs || files[i].trials.is_empty() {
                    continue;
                }
                let pending: Vec<usize> = (0..files[i].trials.len()).collect();
                self.validate_trials(runner.as_ref(), validation, &mut files, i, &pending, sink)
                    .await;
                clock += 1;
                tried_at[i] = clock;
                if let Some(&first) = files[i].passers().first()
                    && files[i].best != Some(first)
                {
                    files[i].best = Some(first);
                    changed_at[i] = clock;
                }
            }
        }

        // Files whose test needs several of the batch's new files right at once: no single
        // candidate can pass against wrong neighbours, so try the failing files' candidates
        // together.
        self.search_combinations(runner.as_ref(), validation, &mut files, 0, sink)
            .await;

        // Repair rounds: every file still without a passer gets its models' candidates back with
        // the failure, then the new candidates are tried alone and together.
        for round in 1..=validation.repair_rounds {
            let failing: Vec<usize> = (0..files.len())
                .filter(|&i| files[i].passers().is_empty() && !files[i].trials.is_empty())
                .collect();
            if failing.is_empty() {
                break;
            }
            let mut any_added = false;
            for &i in &failing {
                let started = Instant::now();
                let added = self.repair_round(&mut files, i, round, sink).await;
                clocks[files[i].file.index].add(started.elapsed());
                files[i].rounds = round;
                if added.is_empty() {
                    continue;
                }
                any_added = true;
                self.validate_trials(runner.as_ref(), validation, &mut files, i, &added, sink)
                    .await;
                if let Some(&first) = files[i].passers().first() {
                    files[i].best = Some(first);
                }
            }
            if !any_added {
                break;
            }
            self.search_combinations(runner.as_ref(), validation, &mut files, round, sink)
                .await;
        }

        let mut chosen: Vec<Option<Produced>> = Vec::with_capacity(files.len());
        for f in files {
            let index = f.file.index;
            chosen.push(Some(
                self.choose(batch, validation, f, sink, &clocks[index])
                    .await,
            ));
        }
        done.into_iter()
            .zip(slot_of)
            .map(|(d, slot)| match (d, slot) {
                (Some(p), _) => p,
                (None, Some(s)) => chosen[s].take().unwrap_or_else(|| {
                    Produced::failed("validation produced no outcome", Vec::new())
                }),
                (None, None) => Produced::failed("validation produced no outcome", Vec::new()),
            })
            .collect()
    }

    /// Runs the checks on some of file `i`'s trials, concurrently, with every other file staged at
    /// its best choice; records each outcome on its trial and candidate record.
    async fn validate_trials(
        &self,
        runner: &dyn Runner,
        validation: &Validation,
        files: &mut [FileTrials<'_>],
        i: usize,
        which: &[usize],
        sink: &dyn ProgressSink,
    ) {
        let others: Vec<(SandboxPath, Vec<u8>)> = files
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter_map(|(_, f)| f.best_code().map(|code| f.staged(code)))
            .collect();
        let target = &files[i];
        sink.emit(Event::ValidationStarted {
            file: target.file.path.to_string(),
            candidates: which.len(),
        });
        let runs = which.iter().map(|&t| {
            let mut staged = others.clone();
            staged.push(target.staged(&target.trials[t].code));
            async move {
                let outcome = runner
                    .run(&staged, &validation.commands, validation.timeout)
                    .await;
                (t, outcome)
            }
        });
        let results = join_all(runs).await;
        let target = &mut files[i];
        for (t, outcome) in results {
            let record = to_record(validation, outcome);
            sink.emit(Event::ValidationFinished {
                file: target.file.path.to_string(),
                model: target.trials[t].model.clone(),
                round: target.trials[t].round,
                passed: record.passed,
                exit_code: record.exit_code,
                duration_ms: record.duration_ms,
            });
            let r = target.trials[t].record;
            if let Some(rec) = target.records.get_mut(r) {
                rec.validation = Some(record.clone());
            }
            target.trials[t].outcome = Some(record);
        }
    }

    /// Tries the candidates of the files that have no passer together, with every other file at
    /// its best choice: the first combination (each model's own files first, then in order) whose
    /// checks pass becomes those files' choice. Only candidates of `round` take part (all of a
    /// file's, for round 0), and at most [`MAX_COMBINATIONS`] combinations run.
    async fn search_combinations(
        &self,
        runner: &dyn Runner,
        validation: &Validation,
        files: &mut [FileTrials<'_>],
        round: u32,
        sink: &dyn ProgressSink,
    ) {
        let failing: Vec<usize> = (0..files.len())
            .filter(|&i| files[i].passers().is_empty() && !files[i].trials.is_empty())
            .collect();
        // One file alone was already tried against every neighbour choice it can get.
        if failing.len() < 2 {
            return;
        }
        let options: Vec<Vec<usize>> = failing
            .iter()
            .map(|&i| {
                (0..files[i].trials.len())
                    .filter(|&t| files[i].trials[t].round == round)
                    .collect::<Vec<_>>()
            })
            .collect();
        if options.iter().any(Vec::is_empty) {
            return;
        }
        let combos = combinations(&options, MAX_COMBINATIONS, |k, t| {
            files[failing[k]].trials[t].model.clone()
        });
        let fixed: Vec<(SandboxPath, Vec<u8>)> = files
            .iter()
            .enumerate()
            .filter(|(j, _)| !failing.contains(j))
            .filter_map(|(_, f)| f.best_code().map(|code| f.staged(code)))
            .collect();
        for &i in &failing {
            sink.emit(Event::ValidationStarted {
                file: files[i].file.path.to_string(),
                candidates: combos.len(),
            });
        }
        let runs = combos.iter().map(|combo| {
            let mut staged = fixed.clone();
            for (k, &t) in combo.iter().enumerate() {
                let f = &files[failing[k]];
                staged.push(f.staged(&f.trials[t].code));
            }
            async move {
                runner
                    .run(&staged, &validation.commands, validation.timeout)
                    .await
            }
        });
        let outcomes = join_all(runs).await;
        let Some((combo, outcome)) = combos
            .iter()
            .zip(outcomes)
            .map(|(c, o)| (c, to_record(validation, o)))
            .find(|(_, o)| o.passed)
        else {
            return;
        };
        for (k, &t) in combo.iter().enumerate() {
            let f = &mut files[failing[k]];
            sink.emit(Event::ValidationFinished {
                file: f.file.path.to_string(),
                model: f.trials[t].model.clone(),
                round: f.trials[t].round,
                passed: true,
                exit_code: outcome.exit_code,
                duration_ms: outcome.duration_ms,
            });
            let r = f.trials[t].record;
            if let Some(rec) = f.records.get_mut(r) {
                rec.validation = Some(outcome.clone());
            }
            f.trials[t].outcome = Some(outcome.clone());
            f.best = Some(t);
        }
    }

    /// Sends each model's latest failing candidate back with its failure; returns the indexes of
    /// the new trials.
    async fn repair_round(
        &self,
        files: &mut [FileTrials<'_>],
        i: usize,
        round: u32,
        sink: &dyn ProgressSink,
    ) -> Vec<usize> {
        // The other files of the batch as they stood in this file's checks: the failure may be
        // theirs, and the model must know what it was tested with.
        let neighbours: Vec<(String, String)> = files
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter_map(|(_, o)| {
                o.best_code()
                    .map(|code| (o.file.path.to_string(), code.to_string()))
            })
            .collect();
        let f = &mut files[i];
        // The latest trial of each model that answered.
        let mut latest: Vec<usize> = Vec::new();
        for (i, t) in f.trials.iter().enumerate() {
            match latest.iter().position(|&j| f.trials[j].model == t.model) {
                Some(k) => latest[k] = i,
                None => latest.push(i),
            }
        }
        sink.emit(Event::RepairStarted {
            file: f.file.path.to_string(),
            round,
            models: latest.len(),
        });
        let asks = latest.iter().map(|&i| {
            let t = &f.trials[i];
            let outcome = t.outcome.clone();
            let messages = prompt::repair_messages(
                &f.generated.messages,
                &t.code,
                f.generated.language,
                outcome.as_ref(),
                &neighbours,
                f.generated.existing.is_some(),
            );
            let model = t.model.clone();
            let expect = f.generated.expect(f.file).on_base(&t.code);
            let call = self.call_settings();
            let file = f.file.path.to_string();
            async move {
                let req = ChatRequest {
                    model: model.clone(),
                    messages,
                    temperature: Some(call.temperature),
                    max_tokens: Some(call.max_tokens),
                    ..ChatRequest::default()
                };
                sink.emit(Event::CandidateStarted {
                    file: file.clone(),
                    model: model.clone(),
                });
                let started = Instant::now();
                let candidate = match self.models.chat(req).await {
                    Ok(resp) => {
                        let mut record = fanout::answered(&model, &resp);
                        let code = judge(&resp.content, &expect, &mut record);
                        (record, code)
                    }
                    Err(e) => (fanout::failed(&model, started, &e), None),
                };
                sink.emit(Event::CandidateFinished {
                    file,
                    model: model.clone(),
                    latency_ms: candidate.0.latency_ms,
                    ok: candidate.0.ok,
                    error_class: candidate.0.error_class,
                    parsed: candidate.0.parsed,
                });
                (model, candidate)
            }
        });
        let answers = join_all(asks).await;
        let mut added = Vec::new();
        for (model, (mut record, code)) in answers {
            record.round = Some(round);
            f.records.push(record);
            let index = f.records.len() - 1;
            if let Some(code) = code
                && !f.trials.iter().any(|t| t.code == code)
            {
                f.trials.push(Trial {
                    model,
                    code,
                    round,
                    record: index,
                    outcome: None,
                });
                added.push(f.trials.len() - 1);
            }
        }
        added
    }

    /// The file's choice once validation and repair are over.
    async fn choose(
        &self,
        batch: &Batch,
        validation: &Validation,
        f: FileTrials<'_>,
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> Produced {
        let passers = f.passers();
        let summary = |passed: bool| {
            Some(FileValidation {
                passed,
                rounds: f.rounds,
            })
        };
        let repaired = |i: usize| f.trials[i].round > 0;
        match passers.as_slice() {
            [] => {
                if f.trials.is_empty() {
                    // No viable candidate at all: the fallback models, unvalidated.
                    let mut produced = self
                        .select(batch, f.file, f.generated, sink, upstream)
                        .await;
                    produced.validation = summary(false);
                    if validation.on_fail == OnFail::Refuse {
                        produced.chosen = Err(format!(
                            "validation_failed: no candidate could be checked ({}); nothing was written",
                            produced
                                .chosen
                                .err()
                                .unwrap_or_else(|| "no viable candidate".into())
                        ));
                    }
                    return produced;
                }
                match validation.on_fail {
                    OnFail::Refuse => Produced {
                        chosen: Err(failure_message(&f, validation)),
                        candidates: f.records,
                        validation: summary(false),
                        existing: None,
                    },
                    OnFail::WriteBest => {
                        let records = f.records;
                        let mut produced = self
                            .select(batch, f.file, f.generated, sink, upstream)
                            .await;
                        // Keep the validation results the selection's fresh records lack.
                        produced.candidates = records;
                        produced.validation = summary(false);
                        produced
                    }
                }
            }
            [only] => {
                let t = &f.trials[*only];
                Produced {
                    chosen: Ok(Chosen {
                        content: Content::Code(t.code.clone()),
                        model: t.model.clone(),
                        selection: if repaired(*only) {
                            Selection::Repaired
                        } else {
                            Selection::Validated
                        },
                        reason: None,
                    }),
                    candidates: f.records,
                    validation: summary(true),
                    existing: f.generated.existing,
                }
            }
            several => {
                let viable: Vec<Viable<'_>> = several
                    .iter()
                    .map(|&i| Viable {
                        model: f.trials[i].model.as_str(),
                        code: f.trials[i].code.as_str(),
                    })
                    .collect();
                let mut chosen = self
                    .arbitrate(batch, f.file, &f.generated, &viable, sink, upstream)
                    .await;
                let from_repair = several
                    .iter()
                    .find(|&&i| f.trials[i].code.as_bytes() == chosen.content.bytes())
                    .is_some_and(|&i| repaired(i));
                chosen.selection = match (from_repair, chosen.selection) {
                    (true, _) => Selection::Repaired,
                    (false, Selection::Arbiter) => Selection::ValidatedArbiter,
                    (false, _) => Selection::Validated,
                };
                Produced {
                    chosen: Ok(chosen),
                    candidates: f.records,
                    validation: summary(true),
                    existing: f.generated.existing,
                }
            }
        }
    }
}

/// The cartesian product of `options` (one list of trial indexes per file), at most `max`
/// combinations: those where every file's candidate comes from one model first (a model's files
/// are written to fit each other), then the rest in order.
fn combinations(
    options: &[Vec<usize>],
    max: usize,
    model_of: impl Fn(usize, usize) -> String,
) -> Vec<Vec<usize>> {
    let mut all: Vec<Vec<usize>> = vec![Vec::new()];
    for opts in options {
        let mut next = Vec::new();
        for prefix in &all {
            for &t in opts {
                let mut c = prefix.clone();
                c.push(t);
                next.push(c);
            }
        }
        all = next;
        // The product grows fast; past a few times the bound, ordering cannot save it.
        if all.len() > max.saturating_mul(64) {
            all.truncate(max.saturating_mul(64));
        }
    }
    let same_model = |c: &Vec<usize>| {
        let first = model_of(0, c[0]);
        c.iter().enumerate().all(|(k, &t)| model_of(k, t) == first)
    };
    let (mut together, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(same_model);
    together.extend(rest);
    together.truncate(max);
    together
}

fn records_of(g: &Generated) -> Vec<CandidateRecord> {
    g.answers.iter().map(|c| c.record.clone()).collect()
}

fn record_index(records: &[CandidateRecord], model: &str, round: u32) -> usize {
    records
        .iter()
        .position(|r| r.model == model && r.round.unwrap_or(0) == round)
        .unwrap_or(usize::MAX)
}

/// The checks' outcome as recorded: the deciding command is the first that failed, else the last.
fn to_record(
    validation: &Validation,
    outcome: Result<Vec<RunOutcome>, crate::execution::RunError>,
) -> ValidationRecord {
    match outcome {
        Ok(runs) => {
            let duration_ms = runs.iter().map(|r| r.duration_ms).sum();
            let deciding = runs
                .iter()
                .position(|r| !r.passed())
                .unwrap_or(runs.len().saturating_sub(1));
            let passed =
                runs.len() == validation.commands.len() && runs.iter().all(RunOutcome::passed);
            match runs.get(deciding) {
                Some(run) => {
                    // The missing evidence goes last, where the tail keeps it for a repair.
                    let output = match (&run.missing_evidence, &run.limit_reached) {
                        (_, Some(why)) | (Some(why), None) => {
                            format!("{}{}\n{why}\n", run.stdout, run.stderr)
                        }
                        (None, None) => format!("{}{}", run.stdout, run.stderr),
                    };
                    ValidationRecord {
                        passed,
                        command: validation.commands[deciding.min(validation.commands.len() - 1)]
                            .name
                            .clone(),
                        exit_code: run.exit_code,
                        timed_out: run.timed_out,
                        duration_ms,
                        output_tail: tail(&output, OUTPUT_TAIL_BYTES).to_string(),
                    }
                }
                None => ValidationRecord {
                    passed: false,
                    command: String::new(),
                    exit_code: None,
                    timed_out: false,
                    duration_ms,
                    output_tail: "no command ran".into(),
                },
            }
        }
        Err(e) => ValidationRecord {
            passed: false,
            command: validation
                .commands
                .first()
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            exit_code: None,
            timed_out: false,
            duration_ms: 0,
            output_tail: e.to_string(),
        },
    }
}

fn failure_message(f: &FileTrials<'_>, validation: &Validation) -> String {
    let last = f
        .trials
        .iter()
        .rev()
        .find_map(|t| t.outcome.as_ref())
        .map(|o| {
            format!(
                "; last failure: `{}` {}",
                o.command,
                match (o.timed_out, o.exit_code) {
                    (true, _) => format!("timed out after {} s", validation.timeout.as_secs()),
                    (false, Some(0)) if o.output_tail.contains("scratch bound") => {
                        "reached its scratch's bound".to_string()
                    }
                    (false, Some(0)) => "exited 0 without showing a pass".to_string(),
                    (false, Some(code)) => format!("exited {code}"),
                    (false, None) => "was killed".to_string(),
                }
            )
        })
        .unwrap_or_default();
    format!(
        "validation_failed: none of {} candidate(s) passed the checks after {} repair round(s){last}; nothing was written",
        f.trials.len(),
        f.rounds
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_try_each_models_own_files_together_first_and_stay_bounded() {
        // Two files, three candidates each; candidate t of every file came from model t.
        let options = vec![vec![0, 1, 2], vec![0, 1, 2]];
        let combos = combinations(&options, 64, |_, t| format!("model-{t}"));
        assert_eq!(combos.len(), 9);
        assert_eq!(&combos[..3], &[vec![0, 0], vec![1, 1], vec![2, 2]]);
        let bounded = combinations(&vec![vec![0, 1, 2, 3]; 4], 64, |_, t| t.to_string());
        assert_eq!(bounded.len(), 64);
        assert_eq!(bounded[0], vec![0, 0, 0, 0]);
        assert_eq!(bounded[3], vec![3, 3, 3, 3]);
    }
}
