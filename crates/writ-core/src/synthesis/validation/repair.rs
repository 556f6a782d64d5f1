//! Repair rounds: each model that answered gets its latest failing candidate back with the
//! failing command's output and the other files it was checked with, and is asked for the
//! corrected whole file; what comes back becomes new trials.

use std::time::Instant;

use futures::future::join_all;

use super::{FileTrials, Trial};
use crate::model::ChatRequest;
use crate::synthesis::fanout;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::prompt;
use crate::synthesis::selection::Selector;
use crate::synthesis::update::judge;

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
                .map(|code| (o.file.path.to_string(), code.to_string()))
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
        file: f.file.path.to_string(),
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
        let expect = f.generated.expect(f.file).on_base(&t.code);
        let call = selector.config.call_settings(selector.batch);
        let file = f.file.path.to_string();
        async move {
            let req = ChatRequest {
                model: model.clone(),
                messages,
                temperature: Some(call.temperature),
                max_tokens: Some(call.max_tokens),
                urgent: call.urgent,
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
                    let code = judge(&resp.content, &expect, &mut record);
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
