//! Each file's choice once validation and repair are over: the one passer, the generated
//! checks among several, the arbiter, or the failure — with what `options.fanout` saved and
//! the generated tests kept.

use super::{FileTrials, generated};
use crate::audit::{GeneratedChecks, GeneratedChecksStatus, Selection};
use crate::execution::CommandRunner;
use crate::path::RepoPath;
use crate::synthesis::batch::{OnFail, Validation};
use crate::synthesis::response::{FanoutSaved, FileValidation, KeptTests};
use crate::synthesis::selection::{Selector, Viable};
use crate::synthesis::stage::{Chosen, Content, FileCx, Produced};

/// What the generated checks of a file run with: the sandbox, and the batch's other files.
pub(super) struct Checks<'a> {
    pub runner: &'a dyn CommandRunner,
    pub others: &'a [(RepoPath, Vec<u8>)],
}

/// The file's choice once validation and repair are over, with what `options.fanout` saved.
pub(super) async fn choose(
    selector: &Selector<'_>,
    cx: FileCx<'_>,
    validation: &Validation,
    checks: Checks<'_>,
    f: FileTrials<'_>,
) -> Produced {
    let fanout = cx.batch.options().fanout;
    let saved = (fanout.stop_when_passing || fanout.first_round.is_some()).then(|| FanoutSaved {
        not_asked: f.generated.rounds.later.clone(),
        stopped: f.generated.rounds.stopped.clone(),
    });
    let mut produced = choose_among(selector, cx, validation, checks, f).await;
    if let Some(v) = produced.validation.as_mut() {
        v.saved = saved;
        if let Some(path) = &validation.keep_tests
            && v.kept_tests.is_none()
        {
            v.kept_tests = Some(KeptTests {
                path: path.to_string(),
                error: Some(
                    "no generated tests ran for this file (it had one distinct candidate, or none passed the caller's tests); nothing was kept".into(),
                ),
                ..KeptTests::default()
            });
        }
    }
    produced
}

async fn choose_among(
    selector: &Selector<'_>,
    cx: FileCx<'_>,
    validation: &Validation,
    checks: Checks<'_>,
    mut f: FileTrials<'_>,
) -> Produced {
    let caller_checks = !f.checks.is_empty();
    let passers = if caller_checks {
        f.passers()
    } else {
        (0..f.trials.len()).collect()
    };
    let summary = |passed: bool| {
        Some(FileValidation {
            passed,
            rounds: f.rounds,
            generated_checks: None,
            saved: None,
            kept_tests: None,
        })
    };
    let repaired = |i: usize| f.trials[i].round > 0;
    match passers.as_slice() {
        [] => {
            if f.trials.is_empty() {
                // No viable candidate at all: the fallback models, unvalidated.
                let mut produced = selector.select(cx, f.generated).await;
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
                    let mut produced = selector.select(cx, f.generated).await;
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
                    } else if caller_checks {
                        Selection::Validated
                    } else {
                        Selection::SingleCandidate
                    },
                    reason: None,
                    formatted: None,
                }),
                candidates: f.records,
                validation: summary(true).map(|v| FileValidation {
                    // Asked for, they had nothing to choose between: said, not left out.
                    generated_checks: validation.generate.then(|| {
                        Box::new(GeneratedChecks {
                            status: GeneratedChecksStatus::NotNeeded,
                            ..GeneratedChecks::default()
                        })
                    }),
                    ..v
                }),
                existing: f.generated.existing,
            }
        }
        several if validation.generate => {
            // The first-round candidates the caller's tests ruled out are never chosen, but
            // their behaviour still says which of the passers' behaviours is the common one
            // (repairs are left out: a model's second try is not a second opinion).
            let voters: Vec<usize> = (0..f.trials.len())
                .filter(|t| !several.contains(t) && f.trials[*t].round == 0)
                .collect();
            let checked = generated::check_and_decide(
                selector,
                checks.runner,
                validation,
                cx,
                &f,
                generated::Candidates {
                    eligible: several,
                    voters: &voters,
                },
                checks.others,
            )
            .await;
            for (t, record) in checked.records {
                let r = f.trials[t].record;
                if let Some(rec) = f.records.get_mut(r) {
                    rec.generated_checks = Some(record);
                }
            }
            let kept = validation.keep_tests.as_ref().map(|path| {
                let failed: Vec<String> = checked
                    .decision
                    .as_ref()
                    .and_then(|d| f.records.get(f.trials[d.trial].record))
                    .and_then(|r| r.generated_checks.as_ref())
                    .map(|g| g.failed.clone())
                    .unwrap_or_default();
                generated::kept_tests(&checked.summary, &failed, f.generated.language, path)
            });
            let chosen = match checked.decision {
                Some(d) => {
                    let t = &f.trials[d.trial];
                    Chosen {
                        content: Content::Code(t.code.clone()),
                        model: t.model.clone(),
                        selection: if t.round > 0 {
                            Selection::Repaired
                        } else {
                            d.selection
                        },
                        reason: d.reason,
                        formatted: None,
                    }
                }
                None => {
                    let viable = viable_of(&f, several);
                    let mut chosen = selector.arbitrate(cx, &f.generated, &viable).await;
                    if caller_checks && chosen.selection == Selection::Arbiter {
                        chosen.selection = Selection::ValidatedArbiter;
                    }
                    chosen
                }
            };
            Produced {
                chosen: Ok(chosen),
                candidates: f.records,
                validation: Some(FileValidation {
                    passed: true,
                    rounds: f.rounds,
                    generated_checks: Some(Box::new(checked.summary)),
                    saved: None,
                    kept_tests: kept,
                }),
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
            let mut chosen = selector.arbitrate(cx, &f.generated, &viable).await;
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

fn viable_of<'a>(f: &'a FileTrials<'_>, among: &[usize]) -> Vec<Viable<'a>> {
    among
        .iter()
        .map(|&i| Viable {
            model: f.trials[i].model.as_str(),
            code: f.trials[i].code.as_str(),
        })
        .collect()
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
