//! Fan-out: one file's prompt to every candidate model at once, each answer checked as it
//! arrives. A failing model never aborts the others.

use std::time::{Duration, Instant};

use futures::future::join_all;
use writ_checks::Language;

use crate::audit::CandidateRecord;
use crate::model::{ChatMessage, ChatRequest, ErrorClass, ModelClient};
use crate::synthesis::progress::{Event, ProgressSink};

/// One candidate model's answer after the checks.
pub struct Candidate {
    pub record: CandidateRecord,
    /// The normalised code when the candidate is viable.
    pub code: Option<String>,
    /// The model layer's error class when the call failed.
    pub class: Option<ErrorClass>,
}

/// How a candidate call is made.
#[derive(Debug, Clone, Copy)]
pub struct CallSettings {
    pub temperature: f32,
    pub max_tokens: u32,
}

/// Asks every model in `models` at once; returns their candidates in model-list order and the
/// wall time the fan-out took (what the batch waited for upstream).
pub async fn fan_out(
    client: &dyn ModelClient,
    models: &[String],
    messages: &[ChatMessage],
    language: Language,
    call: CallSettings,
    file: &str,
    sink: &dyn ProgressSink,
) -> (Vec<Candidate>, Duration) {
    let started = Instant::now();
    let answers = join_all(models.iter().map(|m| async move {
        sink.emit(Event::CandidateStarted {
            file: file.to_string(),
            model: m.clone(),
        });
        let c = ask(client, m, messages.to_vec(), language, call).await;
        sink.emit(Event::CandidateFinished {
            file: file.to_string(),
            model: m.clone(),
            latency_ms: c.record.latency_ms,
            ok: c.record.ok,
            error_class: c.record.error_class.clone(),
            parsed: c.record.parsed,
        });
        c
    }))
    .await;
    (answers, started.elapsed())
}

/// One candidate model: the call, then the checks.
pub async fn ask(
    client: &dyn ModelClient,
    model: &str,
    messages: Vec<ChatMessage>,
    language: Language,
    call: CallSettings,
) -> Candidate {
    let started = Instant::now();
    let req = ChatRequest {
        model: model.to_string(),
        messages,
        temperature: Some(call.temperature),
        max_tokens: Some(call.max_tokens),
        ..ChatRequest::default()
    };
    match client.chat(req).await {
        Ok(resp) => {
            let mut record = CandidateRecord {
                model: model.to_string(),
                ok: false,
                latency_ms: resp.latency.as_millis() as u64,
                parsed: None,
                prompt_tokens: resp.usage.prompt_tokens,
                completion_tokens: resp.usage.completion_tokens,
                cost: resp.usage.cost,
                error_class: None,
                error: None,
            };
            match writ_checks::check_candidate(&resp.content, language) {
                Ok(checked) => {
                    record.ok = true;
                    record.parsed = checked.parsed;
                    Candidate {
                        record,
                        code: Some(checked.code),
                        class: None,
                    }
                }
                Err(rejection) => {
                    record.error_class = Some("no_code".into());
                    record.error = Some(rejection.to_string());
                    Candidate {
                        record,
                        code: None,
                        class: None,
                    }
                }
            }
        }
        Err(err) => Candidate {
            record: CandidateRecord {
                model: model.to_string(),
                ok: false,
                latency_ms: started.elapsed().as_millis() as u64,
                error_class: Some(err.class.as_str().to_string()),
                error: Some(err.to_string()),
                ..CandidateRecord::default()
            },
            code: None,
            class: Some(err.class),
        },
    }
}
