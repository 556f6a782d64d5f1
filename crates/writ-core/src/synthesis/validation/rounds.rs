//! The second round (`options.fanout.first_round`): the models a file left for later, asked
//! when none of its first candidates passed.

use super::{CallerTests, FileTrials, Trial, generated};
use crate::execution::CommandRunner;
use crate::synthesis::batch::Validation;
use crate::synthesis::fanout::PassCheck;
use crate::synthesis::selection::Selector;
use crate::synthesis::stage::BatchCx;

/// The models a file left for later, asked now (still stopping early when asked to); their
/// candidates join the file's records and, when new and viable, its trials. The trials added.
pub(super) async fn second_round(
    selector: &Selector<'_>,
    runner: &dyn CommandRunner,
    validation: &Validation,
    f: &mut FileTrials<'_>,
    cx: BatchCx<'_>,
) -> Vec<usize> {
    let later = std::mem::take(&mut f.generated.rounds.later);
    cx.sink
        .emit(crate::synthesis::progress::Event::RoundStarted {
            file: f.file().path.to_string(),
            round: 2,
            models: later.len(),
        });
    let stop_when_passing = cx.batch.options().fanout.stop_when_passing;
    let callers = CallerTests {
        runner,
        validation,
        path: f.file().path.clone(),
        checks: f.checks.clone(),
    };
    // Without the caller's tests, the generated checks go on from the first round's tests and
    // runs, so the second round's candidates agree with the first round's too.
    let early = f
        .early
        .take()
        .filter(|_| validation.commands.is_empty())
        .and_then(|early| {
            generated::EarlyAgreement::new(
                *selector,
                runner,
                validation,
                cx.file(f.batch_file),
                &f.generated.models,
                early,
            )
        });
    let stop: Option<&dyn PassCheck> = match &early {
        _ if !stop_when_passing => None,
        Some(e) => Some(e),
        // No caller's tests and no generated checks for the file's language: nothing can
        // pass, so every model of the round is waited for.
        None if validation.commands.is_empty() => None,
        None => Some(&callers),
    };
    let out = crate::synthesis::fanout::fan_out_until(
        selector.models,
        &later,
        &f.generated.messages,
        &f.generated.expect(f.file()),
        selector.config.call_settings(cx.batch),
        f.file().path.as_str(),
        cx.sink,
        cx.batch
            .options()
            .straggler
            .unwrap_or(selector.config.straggler),
        stop,
    )
    .await;
    let mut added = Vec::new();
    for c in out.answers {
        let record = f.records.len();
        f.records.push(c.record.clone());
        f.generated.models.push(c.record.model.clone());
        if let Some(code) = &c.code
            && c.record.parsed != Some(false)
            && !f.trials.iter().any(|t| &t.code == code)
        {
            added.push(f.trials.len());
            f.trials.push(Trial {
                model: c.record.model.clone(),
                code: code.clone(),
                round: 0,
                record,
                outcome: None,
            });
        }
        f.generated.answers.push(c);
    }
    f.generated.rounds.stopped.extend(out.stopped);
    if let Some(early) = early {
        f.early = Some(early.into_early());
    }
    if f.best.is_none() && !f.trials.is_empty() {
        f.best = Some(0);
    }
    added
}
