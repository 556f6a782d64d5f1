//! The generated checks as a file's candidates arrive (`options.fanout.stop_when_passing`, or
//! `first_round` with `validation.generate` and no caller's tests): the tests are written once
//! the first candidates are in, each new candidate runs them as it arrives, and the fan-out
//! stops once the candidates so far agree ([`agree_early`]). What was found is kept with the
//! file, so its choice afterwards reuses the tests instead of asking the writers again.

use futures::future::join_all;
use writ_checks::Language;
use writ_checks::analysis::shared_public_names;

use super::flavour::{Flavour, check_command, flavour};
use super::harness::{Report, Suite, tabulate};
use super::writers::{WrittenTests, test_writers, write_tests};
use crate::execution::{CommandCall, CommandRunner};
use crate::synthesis::batch::Validation;
use crate::synthesis::selection::Selector;
use crate::synthesis::stage::FileCx;
use crate::synthesis::validation::agreement::{CheckResults, rank, usable_tests};

/// Candidates needed in agreement before the generated checks stop a fan-out: one candidate
/// passing every generated test may only share a wrong assertion's mistake, while two
/// candidates from different models with identical behaviour rarely share a subtle bug.
pub(crate) const EARLY_AGREEING: usize = 2;
/// Usable generated tests needed before the generated checks stop a fan-out: passing one test
/// says too little.
pub(crate) const EARLY_MIN_TESTS: usize = 2;

/// The generated checks as a file's candidates arrive (`options.fanout.stop_when_passing`,
/// `first_round` with `validation.generate` and no caller's tests): kept with the file so the
/// choice afterwards reuses the tests instead of asking the writers again.
#[derive(Debug, Clone, Default)]
pub(crate) struct Early {
    /// The tests, written once the first [`EARLY_AGREEING`] distinct viable candidates are in
    /// (from the names they share, never their code).
    pub written: Option<WrittenTests>,
    /// The distinct candidates seen, in arrival order, and their reports (same order; a
    /// candidate arrived before the tests were written has none yet).
    codes: Vec<String>,
    reports: Vec<Report>,
    /// Whether the candidates so far agreed ([`agree_early`]).
    pub agreed: bool,
}

/// [`Early`] as a [`crate::synthesis::fanout::PassCheck`]: a candidate "passes" once the
/// candidates so far agree ([`agree_early`]).
pub(crate) struct EarlyAgreement<'a> {
    selector: Selector<'a>,
    runner: &'a dyn CommandRunner,
    validation: &'a Validation,
    cx: FileCx<'a>,
    flavour: Flavour,
    command: CommandCall,
    writers: Vec<String>,
    state: tokio::sync::Mutex<Early>,
}

impl<'a> EarlyAgreement<'a> {
    /// `None` where generated checks cannot run for the file (language, command).
    pub(crate) fn new(
        selector: Selector<'a>,
        runner: &'a dyn CommandRunner,
        validation: &'a Validation,
        cx: FileCx<'a>,
        models: &[String],
        early: Early,
    ) -> Option<Self> {
        let flavour = flavour(Language::from_path(cx.file().path.as_str()))?;
        let command = check_command(&selector, runner, &flavour).ok()?;
        let writers = test_writers(&selector, models);
        Some(EarlyAgreement {
            selector,
            runner,
            validation,
            cx,
            flavour,
            command,
            writers,
            state: tokio::sync::Mutex::new(early),
        })
    }

    /// What it found, for the file's choice afterwards.
    pub(crate) fn into_early(self) -> Early {
        self.state.into_inner()
    }

    /// Every candidate of `codes` not seen yet, checked; whether the agreement holds.
    pub(crate) async fn settle(&self, codes: &[&str]) -> bool {
        let mut state = self.state.lock().await;
        for code in codes {
            if !state.codes.iter().any(|c| c == code) {
                state.codes.push(code.to_string());
            }
        }
        self.advance(&mut state).await
    }

    /// Writes the tests once enough candidates are in, runs those not run yet, and decides.
    async fn advance(&self, state: &mut Early) -> bool {
        if state.agreed {
            return true;
        }
        if state.written.is_none() {
            if state.codes.len() < EARLY_AGREEING {
                return false;
            }
            let codes: Vec<&str> = state.codes.iter().map(String::as_str).collect();
            let names = shared_public_names(&codes, self.flavour.language);
            state.written = Some(
                write_tests(
                    &self.selector,
                    self.cx,
                    &self.flavour,
                    &names,
                    &self.writers,
                )
                .await,
            );
        }
        let Some(written) = &state.written else {
            return false;
        };
        if written.files.is_empty() {
            return false;
        }
        // The batch's other files as they are in `REPO_DIR`, as for the caller's tests.
        let Ok(suite) = Suite::new(
            &self.flavour,
            self.cx,
            self.command.clone(),
            written.files.clone(),
            written.names.clone(),
            &[],
        ) else {
            return false;
        };
        let pending: Vec<String> = state.codes[state.reports.len()..].to_vec();
        let runs = join_all(pending.iter().map(|code| {
            suite.run(
                self.runner,
                self.validation,
                (self.cx.file().path.clone(), code.as_bytes().to_vec()),
            )
        }))
        .await;
        state.reports.extend(runs.into_iter().map(|(r, _, _)| r));
        state.agreed = agree_early(&tabulate(
            &state.reports,
            &suite.probes,
            &suite.files,
            &mut Vec::new(),
        ));
        state.agreed
    }
}

/// The early-stop rule on the results so far: at least [`EARLY_MIN_TESTS`] usable tests, and
/// the best agreement group ([`rank`]: the same tests passed, the same outputs on every probe
/// input) is the only best one, holds at least [`EARLY_AGREEING`] candidates and passes at
/// least half of the tests. Not "every test": generated tests are wrong in places, and a
/// correct candidate fails the wrong ones.
fn agree_early(results: &CheckResults) -> bool {
    let usable = usable_tests(results);
    if usable.len() < EARLY_MIN_TESTS {
        return false;
    }
    let (groups, tied) = rank(results, results.outcomes.len(), &usable);
    groups.first().is_some_and(|best| {
        best.members.len() >= EARLY_AGREEING
            && tied.len() == best.members.len()
            && best.tests_passed >= EARLY_MIN_TESTS
            && 2 * best.tests_passed >= usable.len()
    })
}

#[async_trait::async_trait]
impl crate::synthesis::fanout::PassCheck for EarlyAgreement<'_> {
    async fn passes(&self, code: &str) -> bool {
        let mut state = self.state.lock().await;
        // The same code from another model is no second opinion.
        if state.codes.iter().any(|c| c == code) {
            return state.agreed;
        }
        state.codes.push(code.to_string());
        self.advance(&mut state).await
    }

    fn passed(&self) -> &'static str {
        "agreed with another candidate on the generated tests (the same tests passed, the same outputs)"
    }
}
