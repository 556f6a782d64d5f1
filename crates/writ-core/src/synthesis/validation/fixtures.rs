//! What the validation stages' tests share: a validation of one command, and files with
//! candidates not yet tried.

use writ_checks::Language;

use super::{FileTrials, Trial, Validation};
use crate::execution::CommandCall;
use crate::synthesis::batch::OnFail;
use crate::synthesis::generation::Generated;
use crate::synthesis::stage::BatchFile;

pub(super) fn validation() -> Validation {
    Validation {
        commands: vec![CommandCall {
            name: "pytest".into(),
            args: Vec::new(),
        }],
        timeout: std::time::Duration::from_secs(5),
        repair_rounds: 0,
        on_fail: OnFail::Refuse,
        generate: false,
        keep_tests: None,
        format: None,
        diagnostics: None,
    }
}

/// `a.py` and `b.py`, each with one untried candidate from `m1` and one from `m2`
/// (`a1`, `a2`, `b1`, `b2`), each staged at its first.
pub(super) fn untried(batch_files: &[BatchFile]) -> Vec<FileTrials<'_>> {
    batch_files
        .iter()
        .map(|batch_file| {
            let name = &batch_file.spec.path.as_str()[..1];
            let trials = (1..=2)
                .map(|m| Trial {
                    model: format!("m{m}"),
                    code: format!("{name}{m}"),
                    round: 0,
                    record: m - 1,
                    outcome: None,
                })
                .collect();
            FileTrials {
                batch_file,
                generated: Generated {
                    language: Language::Python,
                    models: vec!["m1".into(), "m2".into()],
                    messages: Vec::new(),
                    answers: Vec::new(),
                    existing: None,
                    allow_removals: false,
                    rounds: Default::default(),
                },
                early: None,
                records: vec![Default::default(), Default::default()],
                trials,
                best: Some(0),
                rounds: 0,
                checks: validation().commands,
                diagnostics: None,
            }
        })
        .collect()
}
