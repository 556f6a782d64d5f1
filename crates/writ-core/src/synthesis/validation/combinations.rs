//! The combination search: when a test needs several of the batch's new files right at once,
//! no single candidate can pass against wrong neighbours, so the candidates of the files that
//! have no passer are tried together, each model's own files first, within [`MAX_COMBINATIONS`].

use super::trials::to_record;
use super::{FileTrials, MAX_COMBINATIONS};
use crate::audit::{DiagnosticsRecord, ValidationRecord};
use crate::execution::{CommandCall, CommandRunner};
use crate::path::RepoPath;
use crate::synthesis::batch::Validation;
use crate::synthesis::progress::{Event, ProgressSink};

/// Tries the candidates of the files that have no passer together, with every other file at
/// its best choice: the first combination (each model's own files first, then in order) whose
/// checks pass becomes those files' choice. Only candidates of `round` take part (all of a
/// file's, for round 0), and at most [`MAX_COMBINATIONS`] combinations run.
pub(super) async fn search_combinations(
    runner: &dyn CommandRunner,
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
    let fixed: Vec<(RepoPath, Vec<u8>)> = files
        .iter()
        .enumerate()
        .filter(|(j, _)| !failing.contains(j))
        .filter_map(|(_, f)| f.best_code().map(|code| f.staged(code)))
        .collect();
    for &i in &failing {
        sink.emit(Event::ValidationStarted {
            file: files[i].file().path.to_string(),
            candidates: combos.len(),
        });
    }
    // Each file's diagnostics, then the caller's commands: a combination passes only when
    // every file in it is clean too.
    let calls: Vec<CommandCall> = failing
        .iter()
        .filter_map(|&i| files[i].diagnostics_call().cloned())
        .chain(validation.commands.iter().cloned())
        .collect();
    let calls = &calls;
    let runs = combos.iter().map(|combo| {
        let mut staged = fixed.clone();
        for (k, &t) in combo.iter().enumerate() {
            let f = &files[failing[k]];
            staged.push(f.staged(&f.trials[t].code));
        }
        async move { runner.run(&staged, calls, validation.timeout).await }
    });
    // In order of preference: once the first passing combination is known, the rest are
    // dropped — those still running are killed, those still queued never start.
    let mut ordered: futures::stream::FuturesOrdered<_> = runs.collect();
    let mut found = None;
    let mut k = 0;
    while let Some(outcome) = futures::StreamExt::next(&mut ordered).await {
        let record = to_record(calls, None, outcome);
        if record.passed {
            found = Some((&combos[k], record));
            break;
        }
        k += 1;
    }
    drop(ordered);
    let Some((combo, outcome)) = found else {
        return;
    };
    for (k, &t) in combo.iter().enumerate() {
        let f = &mut files[failing[k]];
        sink.emit(Event::ValidationFinished {
            file: f.file().path.to_string(),
            model: f.trials[t].model.clone(),
            round: f.trials[t].round,
            passed: true,
            exit_code: outcome.exit_code,
            duration_ms: outcome.duration_ms,
            diagnostics: f.diagnostics.as_ref().map(|_| true),
        });
        let outcome = ValidationRecord {
            diagnostics: f.diagnostics.as_ref().map(|command| DiagnosticsRecord {
                command: command.clone(),
                passed: true,
            }),
            ..outcome.clone()
        };
        let r = f.trials[t].record;
        if let Some(rec) = f.records.get_mut(r) {
            rec.validation = Some(outcome.clone());
        }
        f.trials[t].outcome = Some(outcome);
        f.best = Some(t);
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

#[cfg(test)]
mod tests {

    use super::super::FileTrials;
    use super::super::fixtures::{untried, validation};
    use super::*;
    use crate::synthesis::doubles::{self, ScriptedChecks};
    use crate::synthesis::progress::NoProgress;

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

    fn chosen(files: &[FileTrials<'_>]) -> Vec<String> {
        files
            .iter()
            .map(|f| f.best_code().unwrap_or_default().to_string())
            .collect()
    }

    #[tokio::test]
    async fn files_that_pass_only_together_get_the_first_passing_combination() {
        let batch = doubles::batch(&["a.py", "b.py"]);
        // Only a mix of the two models passes.
        let checks = ScriptedChecks::default().passing_with(&[("a.py", "a2"), ("b.py", "b1")]);
        let present = doubles::present(&batch);
        let mut files = untried(&present.files);
        search_combinations(&checks, &validation(), &mut files, 0, &NoProgress).await;
        assert_eq!(chosen(&files), ["a2", "b1"]);
        for (f, t) in files.iter().zip([1, 0]) {
            assert!(f.trials[t].passed());
            let record = f.records[t].validation.as_ref().expect("recorded");
            assert!(record.passed);
        }
        assert!(!files[0].trials[0].passed());

        // When one model's files pass together, they win over an earlier mix that passes too.
        let checks = ScriptedChecks::default()
            .passing_with(&[("a.py", "a1"), ("b.py", "b2")])
            .passing_with(&[("a.py", "a2"), ("b.py", "b2")]);
        let present = doubles::present(&batch);
        let mut files = untried(&present.files);
        search_combinations(&checks, &validation(), &mut files, 0, &NoProgress).await;
        assert_eq!(chosen(&files), ["a2", "b2"]);
    }

    #[tokio::test]
    async fn when_no_combination_passes_nothing_changes() {
        let batch = doubles::batch(&["a.py", "b.py"]);
        let checks = ScriptedChecks::default();
        let present = doubles::present(&batch);
        let mut files = untried(&present.files);
        search_combinations(&checks, &validation(), &mut files, 0, &NoProgress).await;
        assert_eq!(chosen(&files), ["a1", "b1"]);
        assert!(files.iter().all(|f| f.passers().is_empty()));
        let runs = checks.runs.lock().map(|r| r.len()).unwrap_or_default();
        assert_eq!(runs, 4, "every combination of two files of two candidates");
    }
}
