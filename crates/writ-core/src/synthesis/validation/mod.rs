//! Validation: the caller's tests (`options.validation`) decide among a batch's candidates, in
//! the selection stage.
//!
//! Every file's candidates are generated first. Then each distinct viable candidate of a file is
//! staged in a scratch copy of `REPO_DIR` with the batch's other files at their current best
//! choice (so tests that import several new files work) and the commands run in the sandbox
//! ([`crate::execution::CommandRunner`]); a candidate passes when every command exits 0 in time. Files
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
//!
//! The project's diagnostics for a file's language (`WRIT_DIAGNOSTICS`, a compiler or linter)
//! are a check like a test: they run first in each of its candidates' checks ([`file_checks`]),
//! so a candidate they reject ranks below a clean one and goes to repair with their output. A
//! file with no checks at all (no caller's commands, no diagnostics for its language) has every
//! candidate standing.
//!
//! This module holds the types the stages share (`Trial`, `FileTrials`) and their order
//! (`select_validated`). The stages themselves: `trials` runs the checks on candidates,
//! `rounds` asks the models a file left for later, `combinations` searches combinations of
//! several files' candidates, `repair` sends failing candidates back to their models, and
//! `choice` makes each file's choice once they are over (with `generated`, the generated
//! checks, where several candidates remain).

mod agreement;
mod choice;
mod combinations;
pub(crate) mod generated;

pub use generated::{FailedTest, GeneratedRerun, rerun_generated};
mod repair;
mod rounds;
mod trials;

#[cfg(test)]
mod fixtures;

use choice::{Checks, choose};
use combinations::search_combinations;
use generated::Early;
use repair::repair_round;
use rounds::second_round;
use trials::validate_trials;

use std::time::Instant;

use crate::audit::{CandidateRecord, ValidationRecord};
use crate::execution::CommandCall;
use crate::execution::CommandRunner;
use crate::path::RepoPath;
use crate::synthesis::batch::{FileSpec, Validation};
use crate::synthesis::fanout::PassCheck;
use crate::synthesis::generation::Generated;
use crate::synthesis::selection::{Selector, distinct_viable};
use crate::synthesis::stage::{BatchCx, BatchFile, Produced, SynthesisConfig, command_for};
use writ_checks::Language;

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
    batch_file: &'a BatchFile,
    generated: Generated,
    /// The generated checks run as its candidates arrived, when they were.
    early: Option<Early>,
    records: Vec<CandidateRecord>,
    trials: Vec<Trial>,
    /// The trial other files are staged with.
    best: Option<usize>,
    rounds: u32,
    /// What each of its candidates runs: the project's diagnostics first, when they apply,
    /// then the caller's commands. Empty: nothing checks it, every candidate stands.
    checks: Vec<CommandCall>,
    /// The diagnostics command's name, when `checks` starts with it.
    diagnostics: Option<String>,
}

impl<'a> FileTrials<'a> {
    fn file(&self) -> &'a FileSpec {
        &self.batch_file.spec
    }
    /// A candidate as the checks see it: in the file's own shape (line endings, BOM) when it is
    /// a change of an existing file, exactly as it would be written.
    fn staged(&self, code: &str) -> (RepoPath, Vec<u8>) {
        let bytes = match &self.generated.existing {
            Some(e) => e.render(code).into_bytes(),
            None => code.as_bytes().to_vec(),
        };
        (self.batch_file.spec.path.clone(), bytes)
    }
    fn best_code(&self) -> Option<&str> {
        self.best.map(|i| self.trials[i].code.as_str())
    }
    fn diagnostics_call(&self) -> Option<&CommandCall> {
        self.diagnostics.as_ref().and(self.checks.first())
    }
    fn passers(&self) -> Vec<usize> {
        (0..self.trials.len())
            .filter(|&i| self.trials[i].passed())
            .collect()
    }
}

/// The caller's tests on one candidate as it arrives from its model, staged alone (the batch's
/// other files as they are in `REPO_DIR`), for `options.fanout.stop_when_passing`. Validation
/// runs them again afterwards with the other files at their best choice.
pub(crate) struct CallerTests<'a> {
    pub runner: &'a dyn CommandRunner,
    pub validation: &'a Validation,
    pub path: RepoPath,
    /// The file's checks ([`file_checks`]): its diagnostics, then the caller's commands.
    pub checks: Vec<CommandCall>,
}

#[async_trait::async_trait]
impl PassCheck for CallerTests<'_> {
    async fn passes(&self, code: &str) -> bool {
        let staged = [(self.path.clone(), code.as_bytes().to_vec())];
        let outcome = self
            .runner
            .run(&staged, &self.checks, self.validation.timeout)
            .await;
        trials::to_record(&self.checks, None, outcome).passed
    }
}

/// What each candidate of the file at `path` runs, and the diagnostics command's name when
/// there is one: the project's diagnostics for `language` (`WRIT_DIAGNOSTICS`, unless the
/// batch turned them off) first — a compile error is the cheapest failure to find and the
/// clearest to repair from — then the caller's commands.
pub(crate) fn file_checks(
    config: &SynthesisConfig,
    validation: &Validation,
    path: &RepoPath,
    language: Language,
) -> (Vec<CommandCall>, Option<String>) {
    let diagnostics = validation
        .diagnostics
        .unwrap_or(true)
        .then(|| command_for(&config.diagnostics, language))
        .flatten();
    let mut checks: Vec<CommandCall> = diagnostics
        .map(|name| CommandCall {
            name: name.to_string(),
            args: vec![path.to_string()],
        })
        .into_iter()
        .collect();
    checks.extend(validation.commands.iter().cloned());
    (checks, diagnostics.map(str::to_string))
}

/// What a code file brings to validation: its candidates, or its outcome already.
pub(crate) enum Stage {
    /// Its candidates, and the generated checks already run on them as they arrived
    /// (`options.fanout` with `validation.generate` and no caller's tests), which the choice
    /// reuses.
    Generated(Box<Generated>, Option<Early>),
    Done(Box<Produced>),
}

/// Validation and selection for every file of the batch at once; see the module docs.
pub(crate) async fn select_validated(
    selector: &Selector<'_>,
    runner: Option<&dyn CommandRunner>,
    validation: &Validation,
    stages: Vec<Stage>,
    cx: BatchCx<'_>,
) -> Vec<Produced> {
    let sink = cx.sink;
    let Some(runner) = runner else {
        let why = "validation was asked for but no command runner is configured (WRIT_COMMANDS)";
        return stages
            .into_iter()
            .map(|s| match s {
                Stage::Done(p) => *p,
                Stage::Generated(g, _) => Produced::failed(why, records_of(&g)),
            })
            .collect();
    };
    let mut done: Vec<Option<Produced>> = Vec::new();
    let mut files: Vec<FileTrials<'_>> = Vec::new();
    let mut slot_of: Vec<Option<usize>> = Vec::new();
    for (stage, batch_file) in stages.into_iter().zip(&cx.present.files) {
        match stage {
            Stage::Done(p) => {
                done.push(Some(*p));
                slot_of.push(None);
            }
            Stage::Generated(g, early) => {
                let records = records_of(&g);
                let (checks, diagnostics) = file_checks(
                    selector.config,
                    validation,
                    &batch_file.spec.path,
                    g.language,
                );
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
                    batch_file,
                    generated: *g,
                    early,
                    records,
                    trials,
                    best,
                    rounds: 0,
                    checks,
                    diagnostics,
                });
            }
        }
    }

    // First answers: each file in turn against the others' best, then once more for files
    // tried before another file's best choice changed.
    // A file without checks (no caller's commands, no diagnostics for its language): every
    // candidate stands until the generated checks (in `choose`) decide.
    let caller_checks = !validation.commands.is_empty();
    let any_checks = files.iter().any(|f| !f.checks.is_empty());
    let mut changed_at: Vec<usize> = vec![0; files.len()];
    let mut tried_at: Vec<usize> = vec![0; files.len()];
    let mut clock = 0usize;
    for pass in 0..2 {
        if !any_checks {
            break;
        }
        for i in 0..files.len() {
            let needs = if pass == 0 {
                true
            } else {
                files[i].passers().is_empty()
                    && (0..files.len()).any(|j| j != i && changed_at[j] > tried_at[i])
            };
            if !needs || files[i].trials.is_empty() || files[i].checks.is_empty() {
                continue;
            }
            let pending: Vec<usize> = (0..files[i].trials.len()).collect();
            validate_trials(runner, validation, &mut files, i, &pending, sink).await;
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

    // Rounds (`options.fanout.first_round`): a file none of whose first candidates passes asks
    // the models it has not asked yet, and their candidates are tried the same way. Without
    // the caller's tests, "passes" is the generated checks' early agreement.
    if caller_checks || validation.generate {
        for i in 0..files.len() {
            let passed = if caller_checks {
                !files[i].passers().is_empty()
            } else {
                files[i].early.as_ref().is_some_and(|e| e.agreed)
            };
            if passed || files[i].generated.rounds.later.is_empty() {
                continue;
            }
            let started = Instant::now();
            let added = second_round(selector, runner, validation, &mut files[i], cx).await;
            files[i].batch_file.upstream.add(started.elapsed());
            if added.is_empty() || files[i].checks.is_empty() {
                continue;
            }
            validate_trials(runner, validation, &mut files, i, &added, sink).await;
            if let Some(&first) = files[i].passers().first() {
                files[i].best = Some(first);
            }
        }
    }

    // Files whose test needs several of the batch's new files right at once: no single
    // candidate can pass against wrong neighbours, so try the failing files' candidates
    // together.
    if caller_checks {
        search_combinations(runner, validation, &mut files, 0, sink).await;
    }

    // Repair rounds: every file still without a passer gets its models' candidates back with
    // the failure, then the new candidates are tried alone and together.
    let rounds = if any_checks {
        validation.repair_rounds
    } else {
        0
    };
    for round in 1..=rounds {
        let failing: Vec<usize> = (0..files.len())
            .filter(|&i| {
                files[i].passers().is_empty()
                    && !files[i].trials.is_empty()
                    && !files[i].checks.is_empty()
            })
            .collect();
        if failing.is_empty() {
            break;
        }
        let mut any_added = false;
        for &i in &failing {
            let started = Instant::now();
            let added = repair_round(selector, &mut files, i, round, sink).await;
            files[i].batch_file.upstream.add(started.elapsed());
            files[i].rounds = round;
            if added.is_empty() {
                continue;
            }
            any_added = true;
            validate_trials(runner, validation, &mut files, i, &added, sink).await;
            if let Some(&first) = files[i].passers().first() {
                files[i].best = Some(first);
            }
        }
        if !any_added {
            break;
        }
        if caller_checks {
            search_combinations(runner, validation, &mut files, round, sink).await;
        }
    }

    // Each file's generated checks run with the batch's other files at their best choice.
    let others: Vec<Vec<(RepoPath, Vec<u8>)>> = (0..files.len())
        .map(|i| {
            files
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, f)| f.best_code().map(|code| f.staged(code)))
                .collect()
        })
        .collect();
    let mut chosen: Vec<Option<Produced>> = Vec::with_capacity(files.len());
    for (f, others) in files.into_iter().zip(others) {
        let fcx = cx.file(f.batch_file);
        let checks = Checks {
            runner,
            others: &others,
        };
        chosen.push(Some(choose(selector, fcx, validation, checks, f).await));
    }
    done.into_iter()
        .zip(slot_of)
        .map(|(d, slot)| match (d, slot) {
            (Some(p), _) => p,
            (None, Some(s)) => chosen[s]
                .take()
                .unwrap_or_else(|| Produced::failed("validation produced no outcome", Vec::new())),
            (None, None) => Produced::failed("validation produced no outcome", Vec::new()),
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use writ_checks::Language;

    use super::fixtures::validation;
    use super::*;
    use crate::audit::Selection;
    use crate::synthesis::doubles::{self, Answer, ScriptedChecks, ScriptedModels};
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::stage::Content;
    use crate::synthesis::stage::SynthesisConfig;

    /// One file's three distinct candidates, from `m1`, `m2` and `m3`.
    fn generated(codes: [&str; 3]) -> Stage {
        Stage::Generated(
            Box::new(Generated {
                language: Language::Python,
                models: vec!["m1".into(), "m2".into(), "m3".into()],
                messages: Vec::new(),
                answers: codes
                    .iter()
                    .enumerate()
                    .map(|(i, code)| doubles::viable(&format!("m{}", i + 1), code))
                    .collect(),
                existing: None,
                allow_removals: false,
                rounds: Default::default(),
            }),
            None,
        )
    }

    async fn select(
        checks: Option<&ScriptedChecks>,
        validation: &Validation,
        stage: Stage,
        models: &ScriptedModels,
    ) -> Produced {
        select_with(checks, validation, stage, models, Vec::new()).await
    }

    /// One file's selection with the arbiter `judge` and `diagnostics` per language.
    async fn select_with(
        checks: Option<&ScriptedChecks>,
        validation: &Validation,
        stage: Stage,
        models: &ScriptedModels,
        diagnostics: Vec<(String, String)>,
    ) -> Produced {
        let batch = doubles::batch(&["a.py"]);
        let present = doubles::present(&batch);
        let config = SynthesisConfig {
            arbiter: Some("judge".into()),
            diagnostics,
            ..SynthesisConfig::default()
        };
        let selector = Selector {
            models,
            config: &config,
            batch: &batch,
        };
        let cx = BatchCx {
            batch: &batch,
            present: &present,
            sink: &NoProgress,
        };
        let runner = checks.map(|c| c as &dyn CommandRunner);
        let mut produced = select_validated(&selector, runner, validation, vec![stage], cx).await;
        produced.remove(0)
    }

    #[tokio::test]
    async fn the_one_candidate_that_passes_is_written_without_asking_the_arbiter() {
        let checks = ScriptedChecks::default().passing_with(&[("a.py", "x = 2\n")]);
        let models = ScriptedModels::default();

        let produced = select(
            Some(&checks),
            &validation(),
            generated(["x = 1\n", "x = 2\n", "x = 3\n"]),
            &models,
        )
        .await;

        let chosen = produced.chosen.expect("a passer is chosen");
        assert_eq!(chosen.content, Content::Code("x = 2\n".into()));
        assert_eq!(
            (chosen.model.as_str(), chosen.selection),
            ("m2", Selection::Validated)
        );
        assert!(models.requests_to("judge").is_empty(), "no arbiter call");
        assert_eq!(produced.validation.map(|v| v.passed), Some(true));
        // Every candidate's record carries its own outcome.
        let passed: Vec<Option<bool>> = produced
            .candidates
            .iter()
            .map(|r| r.validation.as_ref().map(|v| v.passed))
            .collect();
        assert_eq!(passed, [Some(false), Some(true), Some(false)]);
    }

    /// The batch's own diagnostics only: no caller's commands, `py_compile` for Python.
    async fn select_diagnosed(
        checks: &ScriptedChecks,
        validation: &Validation,
        stage: Stage,
        models: &ScriptedModels,
    ) -> Produced {
        let diagnostics = vec![("python".into(), "py_compile".into())];
        select_with(Some(checks), validation, stage, models, diagnostics).await
    }

    #[tokio::test]
    async fn a_candidate_failing_the_diagnostics_ranks_below_the_clean_one_without_an_arbiter_call()
    {
        let checks = ScriptedChecks::default().passing_with(&[("a.py", "x = 2\n")]);
        let models = ScriptedModels::default();

        let produced = select_diagnosed(
            &checks,
            &Validation::diagnostics_only(),
            generated(["x = (\n", "x = 2\n", "x = [\n"]),
            &models,
        )
        .await;

        let chosen = produced.chosen.expect("the clean candidate is chosen");
        assert_eq!(chosen.content, Content::Code("x = 2\n".into()));
        assert_eq!(chosen.selection, Selection::Validated);
        assert!(models.requests_to("judge").is_empty(), "no arbiter call");
        let diagnostics: Vec<Option<(String, bool)>> = produced
            .candidates
            .iter()
            .map(|r| {
                r.validation
                    .as_ref()
                    .and_then(|v| v.diagnostics.as_ref())
                    .map(|d| (d.command.clone(), d.passed))
            })
            .collect();
        let clean = |passed| Some(("py_compile".to_string(), passed));
        assert_eq!(diagnostics, [clean(false), clean(true), clean(false)]);
    }

    #[tokio::test]
    async fn diagnostics_turned_off_by_the_batch_leave_every_candidate_standing() {
        let checks = ScriptedChecks::default();
        let models = ScriptedModels::default();
        let mut validation = Validation::diagnostics_only();
        validation.diagnostics = Some(false);

        let produced = select_diagnosed(
            &checks,
            &validation,
            generated(["x = 1\n", "x = 2\n", "x = 3\n"]),
            &models,
        )
        .await;

        assert!(produced.chosen.is_ok(), "the arbiter chooses among all");
        assert!(checks.runs.lock().map(|f| f.is_empty()).unwrap_or(false));
        assert_eq!(models.requests_to("judge").len(), 1);
    }

    #[tokio::test]
    async fn a_candidate_failing_the_diagnostics_goes_to_repair_with_their_output() {
        let checks = ScriptedChecks::default().passing_with(&[("a.py", "x = 4\n")]);
        let models = ScriptedModels::default()
            .with("m1", vec![Answer::after(1, "```python\nx = 4\n```")])
            .with("m2", vec![Answer::after(1, "```python\nx = (\n```")])
            .with("m3", vec![Answer::after(1, "```python\nx = [\n```")]);
        let mut validation = Validation::diagnostics_only();
        validation.repair_rounds = 1;

        let produced = select_diagnosed(
            &checks,
            &validation,
            generated(["x = 1\n", "x = 2\n", "x = 3\n"]),
            &models,
        )
        .await;

        let chosen = produced.chosen.expect("the repaired candidate is chosen");
        assert_eq!(chosen.content, Content::Code("x = 4\n".into()));
        assert_eq!(chosen.selection, Selection::Repaired);
        let repair = models.requests_to("m1");
        let asked = repair[0]
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        assert!(
            asked.contains("failed the project's diagnostics") && asked.contains("`py_compile`"),
            "{asked}"
        );
    }

    #[tokio::test]
    async fn with_no_passer_and_no_repair_a_refusing_batch_writes_nothing_and_says_what_failed() {
        let checks = ScriptedChecks::default();
        let produced = select(
            Some(&checks),
            &validation(),
            generated(["x = 1\n", "x = 2\n", "x = 3\n"]),
            &ScriptedModels::default(),
        )
        .await;

        let why = produced.chosen.expect_err("nothing is written");
        assert!(
            why.starts_with("validation_failed: none of 3 candidate(s)"),
            "{why}"
        );
        assert!(why.contains("`pytest` exited 1"), "{why}");
        assert_eq!(produced.validation.map(|v| v.passed), Some(false));
    }

    #[tokio::test]
    async fn validation_without_a_command_runner_fails_the_file_naming_the_setting() {
        let produced = select(
            None,
            &validation(),
            generated(["x = 1\n", "x = 2\n", "x = 3\n"]),
            &ScriptedModels::default(),
        )
        .await;

        let why = produced.chosen.expect_err("nothing can be checked");
        assert!(why.contains("WRIT_COMMANDS"), "{why}");
        assert_eq!(
            produced.candidates.len(),
            3,
            "the candidates are still recorded"
        );
    }
}
