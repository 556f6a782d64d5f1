//! Trials: the caller's tests run on some of a file's candidates in the sandbox, with the
//! batch's other files at their best choice, and each outcome recorded on its trial and its
//! candidate record.

use futures::future::join_all;

use super::{FileTrials, OUTPUT_TAIL_BYTES};
use crate::audit::{DiagnosticsRecord, ValidationRecord};
use crate::execution::{CommandCall, CommandRunner, RunOutcome, tail};
use crate::path::RepoPath;
use crate::synthesis::batch::Validation;
use crate::synthesis::progress::{Event, ProgressSink};

/// Runs the checks on some of file `i`'s trials, concurrently, with every other file staged at
/// its best choice; records each outcome on its trial and candidate record.
pub(super) async fn validate_trials(
    runner: &dyn CommandRunner,
    validation: &Validation,
    files: &mut [FileTrials<'_>],
    i: usize,
    which: &[usize],
    sink: &dyn ProgressSink,
) {
    let others: Vec<(RepoPath, Vec<u8>)> = files
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .filter_map(|(_, f)| f.best_code().map(|code| f.staged(code)))
        .collect();
    let target = &files[i];
    sink.emit(Event::ValidationStarted {
        file: target.file().path.to_string(),
        candidates: which.len(),
    });
    let runs = which.iter().map(|&t| {
        let mut staged = others.clone();
        staged.push(target.staged(&target.trials[t].code));
        async move {
            let outcome = runner
                .run(&staged, &target.checks, validation.timeout)
                .await;
            (t, outcome)
        }
    });
    let results = join_all(runs).await;
    let target = &mut files[i];
    for (t, outcome) in results {
        let record = to_record(&target.checks, target.diagnostics.as_deref(), outcome);
        sink.emit(Event::ValidationFinished {
            file: target.file().path.to_string(),
            model: target.trials[t].model.clone(),
            round: target.trials[t].round,
            passed: record.passed,
            exit_code: record.exit_code,
            duration_ms: record.duration_ms,
            diagnostics: record.diagnostics.as_ref().map(|d| d.passed),
        });
        let r = target.trials[t].record;
        if let Some(rec) = target.records.get_mut(r) {
            rec.validation = Some(record.clone());
        }
        // A model whose answer was the same code as the trial's passed or failed alike: its
        // record says so too (what routing and /stats/models count per model).
        let round = target.trials[t].round;
        let code = target.trials[t].code.clone();
        let same: Vec<usize> = target
            .generated
            .answers
            .iter()
            .enumerate()
            .filter(|(k, a)| {
                *k != r
                    && a.code.as_deref() == Some(code.as_str())
                    && a.record.round.unwrap_or(0) == round
            })
            .map(|(k, _)| k)
            .collect();
        for k in same {
            if let Some(rec) = target.records.get_mut(k)
                && rec.validation.is_none()
            {
                rec.validation = Some(record.clone());
            }
        }
        target.trials[t].outcome = Some(record);
    }
}

/// The checks' outcome as recorded: the deciding command is the first that failed, else the
/// last. `diagnostics` names the project's diagnostics when they are the first of `calls`.
pub(super) fn to_record(
    calls: &[CommandCall],
    diagnostics: Option<&str>,
    outcome: Result<Vec<RunOutcome>, crate::execution::RunError>,
) -> ValidationRecord {
    match outcome {
        Ok(runs) => {
            let duration_ms = runs.iter().map(|r| r.duration_ms).sum();
            let deciding = runs
                .iter()
                .position(|r| !r.passed())
                .unwrap_or(runs.len().saturating_sub(1));
            let passed = runs.len() == calls.len() && runs.iter().all(RunOutcome::passed);
            let diagnostics = diagnostics.map(|command| DiagnosticsRecord {
                command: command.to_string(),
                passed: runs.first().is_some_and(RunOutcome::passed),
            });
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
                        command: calls
                            .get(deciding.min(calls.len().saturating_sub(1)))
                            .map(|c| c.name.clone())
                            .unwrap_or_default(),
                        exit_code: run.exit_code,
                        timed_out: run.timed_out,
                        duration_ms,
                        output_tail: tail(&output, OUTPUT_TAIL_BYTES).to_string(),
                        diagnostics,
                    }
                }
                None => ValidationRecord {
                    passed: false,
                    command: String::new(),
                    exit_code: None,
                    timed_out: false,
                    duration_ms,
                    output_tail: "no command ran".into(),
                    diagnostics: None,
                },
            }
        }
        Err(e) => ValidationRecord {
            passed: false,
            command: calls.first().map(|c| c.name.clone()).unwrap_or_default(),
            exit_code: None,
            timed_out: false,
            duration_ms: 0,
            output_tail: e.to_string(),
            diagnostics: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{untried, validation};
    use super::*;
    use crate::execution::RunError;
    use crate::synthesis::doubles::{self, ScriptedChecks};
    use crate::synthesis::progress::NoProgress;

    fn run(exit_code: i32, stdout: &str) -> RunOutcome {
        RunOutcome {
            exit_code: Some(exit_code),
            stdout: stdout.into(),
            stderr: String::new(),
            duration_ms: 10,
            timed_out: false,
            truncated: false,
            missing_evidence: None,
            limit_reached: None,
        }
    }

    fn two_commands() -> Validation {
        let mut v = validation();
        v.commands.insert(
            0,
            CommandCall {
                name: "lint".into(),
                args: Vec::new(),
            },
        );
        v
    }

    #[test]
    fn the_deciding_command_is_the_first_that_failed_and_a_pass_needs_every_command() {
        let v = two_commands();

        let failed = to_record(
            &v.commands,
            None,
            Ok(vec![run(0, "clean"), run(1, "AssertionError")]),
        );
        assert!(!failed.passed);
        assert_eq!(failed.command, "pytest");
        assert_eq!(failed.exit_code, Some(1));
        assert_eq!(failed.output_tail, "AssertionError");
        assert_eq!(failed.duration_ms, 20, "every command's time counts");

        // A runner that stopped after the first command did not show the second passing.
        let cut_short = to_record(&v.commands, None, Ok(vec![run(0, "clean")]));
        assert!(!cut_short.passed);

        let passed = to_record(
            &v.commands,
            None,
            Ok(vec![run(0, "clean"), run(0, "3 passed")]),
        );
        assert!(passed.passed);
        assert_eq!(passed.command, "pytest");
    }

    #[test]
    fn failing_diagnostics_decide_the_record_and_the_record_says_how_they_did() {
        let mut calls = validation().commands;
        calls.insert(
            0,
            CommandCall {
                name: "py_compile".into(),
                args: vec!["a.py".into()],
            },
        );
        let compiled = |passed| {
            Some(DiagnosticsRecord {
                command: "py_compile".into(),
                passed,
            })
        };

        let record = to_record(
            &calls,
            Some("py_compile"),
            Ok(vec![run(1, "SyntaxError: 'break' outside loop")]),
        );
        assert!(!record.passed);
        assert_eq!(record.command, "py_compile");
        assert!(record.output_tail.contains("'break' outside loop"));
        assert_eq!(record.diagnostics, compiled(false));

        let record = to_record(
            &calls,
            Some("py_compile"),
            Ok(vec![run(0, ""), run(1, "AssertionError")]),
        );
        assert!(!record.passed);
        assert_eq!(record.command, "pytest", "the caller's test decided");
        assert_eq!(record.diagnostics, compiled(true));
    }

    #[test]
    fn a_pass_without_its_evidence_fails_and_says_why_last_where_a_repair_sees_it() {
        let v = validation();
        let mut quiet = run(0, "collected 0 items\n");
        quiet.missing_evidence = Some("no test ran".into());

        let record = to_record(&v.commands, None, Ok(vec![quiet]));

        assert!(!record.passed);
        assert!(
            record.output_tail.ends_with("no test ran\n"),
            "{}",
            record.output_tail
        );
    }

    #[test]
    fn a_run_that_could_not_happen_fails_with_the_reason() {
        let record = to_record(
            &validation().commands,
            None,
            Err(RunError::Unavailable("bubblewrap is missing".into())),
        );
        assert!(!record.passed);
        assert_eq!(record.command, "pytest");
        assert!(record.output_tail.contains("bubblewrap is missing"));
    }

    #[tokio::test]
    async fn each_candidate_is_tried_with_the_other_files_at_their_best_choice() {
        let batch = doubles::batch(&["a.py", "b.py"]);
        let checks = ScriptedChecks::default().passing_with(&[("a.py", "a2"), ("b.py", "b1")]);
        let present = doubles::present(&batch);
        let mut files = untried(&present.files);

        validate_trials(&checks, &validation(), &mut files, 0, &[0, 1], &NoProgress).await;

        let mut runs = checks.runs.lock().map(|r| r.clone()).unwrap_or_default();
        runs.sort();
        let staged = |a: &str| {
            vec![
                ("a.py".to_string(), a.to_string()),
                ("b.py".into(), "b1".into()),
            ]
        };
        assert_eq!(runs, [staged("a1"), staged("a2")]);
        assert!(!files[0].trials[0].passed());
        assert!(files[0].trials[1].passed());
        // Each outcome is on its candidate's record too, and the other file was not tried.
        assert_eq!(
            files[0].records[1].validation.as_ref().map(|r| r.passed),
            Some(true)
        );
        assert_eq!(
            files[0].records[0].validation.as_ref().map(|r| r.passed),
            Some(false)
        );
        assert!(files[1].trials.iter().all(|t| t.outcome.is_none()));
    }
}
