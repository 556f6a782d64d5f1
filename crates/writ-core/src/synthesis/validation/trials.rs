//! Trials: the caller's tests run on some of a file's candidates in the sandbox, with the
//! batch's other files at their best choice, and each outcome recorded on its trial and its
//! candidate record.

use futures::future::join_all;

use super::{FileTrials, OUTPUT_TAIL_BYTES};
use crate::audit::ValidationRecord;
use crate::execution::{CommandRunner, RunOutcome, tail};
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

/// The checks' outcome as recorded: the deciding command is the first that failed, else the last.
pub(super) fn to_record(
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
