//! Generated checks: when the caller's tests leave several candidates (or there are none),
//! test-writing models write tests for the file and the candidates' behaviour decides.
//!
//! 1. [`writers`]: each test-writing model (`WRIT_TEST_MODELS`, default the arbiter and the
//!    first other candidate model) is asked for a test file from the description, the file's
//!    imports and the public names every candidate defines — never from one candidate's code,
//!    whose bugs a test written from it would encode. What a real answer holds is made a test
//!    of the file under test ([`test_file`]): the whole tests of a cut file, imports of the
//!    module under other names, stubs of the names under test removed; a file with nothing
//!    left is dropped.
//! 2. [`harness`]: every candidate runs every test file in the sandbox (one run per candidate:
//!    `harness/run.py` runs pytest in-process, `harness/run.cjs` the `node:test` tests, and each
//!    test case is reported, so one wrong assertion sinks one test, not the file). The probe
//!    inputs — the calls of the names under test the tests make, and the description's `>>>`
//!    examples — are evaluated on each candidate in the same run.
//! 3. [`decision`]: [`super::agreement`] drops the tests that fail everywhere for a name error,
//!    groups the candidates by the tests they pass, and scores the groups; the best group
//!    decides. Tied candidates are clustered by their outputs on the probes; the largest cluster
//!    decides. Tied clusters: the arbiter is shown a few inputs on which two of them disagree,
//!    with each one's output, in both orders; only the same verdict both times counts.
//!    Otherwise the arbiter judges among the tied candidates only.
//!
//! Where they cannot decide, the answer's `generated_checks.status` says why, and the job's
//! stream has a `checks_unavailable` event ([`Checked::undecided`]). [`early`] runs the same
//! steps while the candidates arrive, to stop a fan-out; [`kept`] keeps a test file beside the
//! written file.

mod decision;
mod early;
mod flavour;
mod harness;
mod kept;
mod rerun;
mod test_file;
mod writers;

#[cfg(test)]
mod tests;

pub(crate) use early::{Early, EarlyAgreement};
pub(crate) use kept::kept_tests;
pub use rerun::{FailedTest, GeneratedRerun, rerun_generated};

use futures::future::join_all;
use writ_checks::analysis::shared_public_names;

use super::FileTrials;
use crate::audit::{GeneratedCheckRecord, GeneratedChecks, GeneratedChecksStatus, Selection};
use crate::execution::CommandRunner;
use crate::path::RepoPath;
use crate::synthesis::batch::Validation;
use crate::synthesis::progress::Event;
use crate::synthesis::selection::Selector;
use crate::synthesis::stage::FileCx;
use decision::{Evidence, decide};
use flavour::{check_command, flavour};
use harness::{Report, Suite, tabulate};
use writers::{test_writers, write_tests};

/// Where the checks live in the sandbox's scratch (never in `REPO_DIR`).
pub(crate) const CHECKS_DIR: &str = ".writ-checks";
/// Inputs shown to the arbiter per comparison of two clusters.
pub(crate) const MAX_DISTINGUISHING_INPUTS: usize = 3;

/// What the generated checks decided for a file.
pub(super) struct Decision {
    /// The trial chosen.
    pub trial: usize,
    pub selection: Selection,
    pub reason: Option<String>,
}

/// The generated checks' outcome for a file: the decision (none when the checks could not
/// decide anything, e.g. no usable test), the evidence, and each trial's results.
pub(super) struct Checked {
    pub decision: Option<Decision>,
    pub summary: GeneratedChecks,
    pub records: Vec<(usize, GeneratedCheckRecord)>,
}

impl Checked {
    /// The checks could not choose: `status` and `note` say why, in the answer.
    fn undecided(summary: GeneratedChecks, status: GeneratedChecksStatus, note: String) -> Self {
        Checked {
            decision: None,
            summary: GeneratedChecks {
                status,
                note: Some(note),
                ..summary
            },
            records: Vec::new(),
        }
    }

    fn decided(
        summary: GeneratedChecks,
        decision: Decision,
        records: Vec<(usize, GeneratedCheckRecord)>,
    ) -> Self {
        let status = match decision.selection {
            Selection::AgreementArbiter => GeneratedChecksStatus::Tied,
            _ => GeneratedChecksStatus::Decided,
        };
        Checked {
            decision: Some(decision),
            summary: GeneratedChecks { status, ..summary },
            records,
        }
    }

    fn with_records(self, records: Vec<(usize, GeneratedCheckRecord)>) -> Self {
        Checked { records, ..self }
    }
}

/// The candidates of a file's generated checks, by trial index.
pub(super) struct Candidates<'a> {
    /// Those that may be chosen: every candidate, or those that passed the caller's tests.
    pub eligible: &'a [usize],
    /// Candidates that failed the caller's own tests: they run the checks too and count in the
    /// agreement and behaviour scores, but are never chosen.
    pub voters: &'a [usize],
}

/// Runs the generated checks on `candidates` and decides among the eligible; see the module
/// docs. Where they cannot decide, the job's stream says so too.
pub(super) async fn check_and_decide(
    selector: &Selector<'_>,
    runner: &dyn CommandRunner,
    validation: &Validation,
    cx: FileCx<'_>,
    f: &FileTrials<'_>,
    candidates: Candidates<'_>,
    others: &[(RepoPath, Vec<u8>)],
) -> Checked {
    let checked = run_and_decide(selector, runner, validation, cx, f, candidates, others).await;
    let status = checked.summary.status;
    if status.unavailable() {
        cx.sink.emit(Event::ChecksUnavailable {
            file: cx.file().path.to_string(),
            status,
            reason: checked.summary.note.clone().unwrap_or_default(),
        });
    }
    checked
}

async fn run_and_decide(
    selector: &Selector<'_>,
    runner: &dyn CommandRunner,
    validation: &Validation,
    cx: FileCx<'_>,
    f: &FileTrials<'_>,
    candidates: Candidates<'_>,
    others: &[(RepoPath, Vec<u8>)],
) -> Checked {
    let Candidates {
        eligible: among,
        voters,
    } = candidates;
    let mut summary = GeneratedChecks::default();
    let Some(flavour) = flavour(f.generated.language) else {
        return Checked::undecided(
            summary,
            GeneratedChecksStatus::UnsupportedLanguage,
            format!(
                "no generated checks for {} files (Python and JavaScript only)",
                f.generated.language.name()
            ),
        );
    };
    let command = match check_command(selector, runner, &flavour) {
        Ok(command) => command,
        Err(note) => return Checked::undecided(summary, GeneratedChecksStatus::CannotRun, note),
    };

    // 1. The tests, from what every candidate shares (or as written while the candidates
    //    arrived, under `options.fanout.stop_when_passing`).
    let written = match f.early.as_ref().and_then(|e| e.written.clone()) {
        Some(written) => written,
        None => {
            let codes: Vec<&str> = among.iter().map(|&t| f.trials[t].code.as_str()).collect();
            let names = shared_public_names(&codes, flavour.language);
            let writers = test_writers(selector, &f.generated.models);
            write_tests(selector, cx, &flavour, &names, &writers).await
        }
    };
    summary.writers = written.writers;
    summary.files = written.shown;
    summary.discarded = written.discarded;
    summary.adjusted = written.adjusted;
    if written.files.is_empty() {
        cx.sink.emit(Event::ChecksGenerated {
            file: cx.file().path.to_string(),
            models: summary.writers.len(),
            tests: 0,
            discarded: summary.discarded.len(),
        });
        let why = match summary.discarded.as_slice() {
            [] => "no test file could be used".to_string(),
            reasons => format!("no test file could be used: {}", reasons.join("; ")),
        };
        return Checked::undecided(summary, GeneratedChecksStatus::NoTests, why);
    }

    // 2. Every candidate against every test file, with the probes.
    let suite = match Suite::new(&flavour, cx, command, written.files, written.names, others) {
        Ok(suite) => suite,
        Err(note) => return Checked::undecided(summary, GeneratedChecksStatus::CannotRun, note),
    };
    // The candidates that may be chosen come first: result `c < among.len()` is `among[c]`.
    let pool: Vec<usize> = among.iter().chain(voters).copied().collect();
    let runs = join_all(
        pool.iter()
            .map(|&t| suite.run(runner, validation, f.staged(&f.trials[t].code))),
    )
    .await;
    let mut reports: Vec<Report> = Vec::new();
    let mut durations: Vec<u64> = Vec::new();
    for (report, duration, error) in runs {
        durations.push(duration);
        summary.discarded.extend(error);
        reports.push(report);
    }
    let results = tabulate(
        &reports,
        &suite.probes,
        &suite.files,
        &mut summary.discarded,
    );

    // 3. The decision.
    let evidence = Evidence {
        selector,
        cx,
        f,
        among,
        results,
        durations,
    };
    decide(evidence, summary).await
}
