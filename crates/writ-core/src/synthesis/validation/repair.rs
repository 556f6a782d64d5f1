//! Repair rounds: each model that answered gets its latest failing candidate back with the
//! failing command's output and the other files it was checked with, and is asked for the
//! corrected whole file; what comes back becomes new trials.

use std::time::Instant;

use futures::future::join_all;

use super::{FileTrials, Trial};
use crate::model::{CallPurpose, ChatRequest};
use crate::synthesis::fanout;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::prompt;
use crate::synthesis::selection::Selector;
use crate::synthesis::update::judge_response;

/// Sends each model's latest failing candidate back with its failure; returns the indexes of
/// the new trials.
pub(super) async fn repair_round(
    selector: &Selector<'_>,
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
                .map(|code| (o.file().path.to_string(), code.to_string()))
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
        file: f.file().path.to_string(),
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
        let expect = f.generated.expect(f.file()).on_base(&t.code);
        let call = selector.config.call_settings(selector.batch);
        let file = f.file().path.to_string();
        async move {
            let req = ChatRequest {
                model: model.clone(),
                messages,
                temperature: Some(call.temperature),
                max_tokens: Some(call.max_tokens),
                urgent: call.urgent,
                purpose: CallPurpose::Repair,
                ..ChatRequest::default()
            };
            sink.emit(Event::CandidateStarted {
                file: file.clone(),
                model: model.clone(),
            });
            let started = Instant::now();
            let candidate = match selector.models.chat(req).await {
                Ok(resp) => {
                    let mut record = fanout::answered(&model, &resp);
                    let code = judge_response(&resp, &expect, &mut record);
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::untried;
    use super::*;
    use crate::audit::ValidationRecord;
    use crate::synthesis::doubles::{self, Answer, ScriptedModels};
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::stage::SynthesisConfig;

    fn failed(output: &str) -> Option<ValidationRecord> {
        Some(ValidationRecord {
            passed: false,
            command: "pytest".into(),
            exit_code: Some(1),
            timed_out: false,
            duration_ms: 5,
            output_tail: output.into(),
            diagnostics: None,
        })
    }

    #[tokio::test]
    async fn each_model_gets_its_latest_failing_candidate_back_and_only_new_answers_become_trials()
    {
        let batch = doubles::batch(&["a.py", "b.py"]);
        let present = doubles::present(&batch);
        let mut files = untried(&present.files);
        for t in &mut files[0].trials {
            t.code.push('\n');
            t.outcome = failed(&format!("AssertionError in {}", t.code.trim_end()));
        }
        // m1 already had a repair round: that later candidate is the one it gets back.
        files[0].records.push(Default::default());
        files[0].trials.push(Trial {
            model: "m1".into(),
            code: "a1_fixed_once".into(),
            round: 1,
            record: 2,
            outcome: failed("AssertionError in a1_fixed_once"),
        });
        let models = ScriptedModels::default()
            .with(
                "m1",
                vec![Answer::after(0, "```python\na1_fixed_twice = 1\n```")],
            )
            // m2 answers what it had: nothing new to try.
            .with("m2", vec![Answer::after(0, "```python\na2\n```")]);
        let config = SynthesisConfig::default();
        let selector = Selector {
            models: &models,
            config: &config,
            batch: &batch,
        };

        let added = repair_round(&selector, &mut files, 0, 2, &NoProgress).await;

        let asked = models.requests_to("m1");
        assert_eq!(asked.len(), 1);
        let shown: Vec<&str> = asked[0]
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        let shown = shown.join("\n");
        assert!(
            shown.contains("a1_fixed_once"),
            "its latest candidate: {shown}"
        );
        assert!(
            shown.contains("AssertionError in a1_fixed_once"),
            "its failure: {shown}"
        );
        assert!(
            shown.contains("b.py") && shown.contains("b1"),
            "what it was tested with: {shown}"
        );
        assert_eq!(models.requests_to("m2").len(), 1);

        let f = &files[0];
        assert_eq!(added, [3]);
        assert_eq!(f.trials[3].code.trim_end(), "a1_fixed_twice = 1");
        assert_eq!((f.trials[3].model.as_str(), f.trials[3].round), ("m1", 2));
        // Both answers are recorded, in this round, whether or not they were new.
        assert_eq!(f.records.len(), 5);
        assert!(f.records[3..].iter().all(|r| r.round == Some(2)));
    }
}
