//! Selection: which candidate a file gets. Viable candidates are de-duplicated and those that
//! parse beat those that do not; then one distinct candidate is taken as it is, several go to the
//! arbiter (shown shuffled under `Candidate N` headings, without model names), and none sends the
//! file to the fallback models one after another. A failed or nonsensical arbiter falls back to
//! the first viable candidate in model-list order.

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;

use crate::audit::{CandidateRecord, Selection};
use crate::model::{ChatRequest, ErrorClass};
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::fanout::{self, Candidate, StragglerPolicy, UpstreamClock};
use crate::synthesis::generation::Generated;
use crate::synthesis::image::ShapedImage;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::prompt;
use crate::synthesis::run::{Produced, Synthesizer};

/// A candidate's content: code as text, or an image already checked and shaped.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Code(String),
    Image(ShapedImage),
}

impl Content {
    /// The bytes that are written.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Content::Code(code) => code.as_bytes(),
            Content::Image(img) => &img.bytes,
        }
    }

    /// Size in bytes, which the file-size limit applies to.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn image(&self) -> Option<&ShapedImage> {
        match self {
            Content::Image(img) => Some(img),
            Content::Code(_) => None,
        }
    }
}

/// The content a file gets, and how it was chosen.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    pub content: Content,
    pub model: String,
    pub selection: Selection,
    /// The arbiter's reason (or why the arbiter could not decide).
    pub reason: Option<String>,
}

/// A viable, distinct candidate: its model and code.
pub(crate) struct Viable<'a> {
    pub model: &'a str,
    pub code: &'a str,
}

impl Synthesizer {
    /// Chooses one file's content among its candidates; see the module docs.
    pub(crate) async fn select(
        &self,
        batch: &Batch,
        file: &FileSpec,
        generated: Generated,
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> Produced {
        let mut records: Vec<CandidateRecord> =
            generated.answers.iter().map(|c| c.record.clone()).collect();
        let viable = distinct_viable(&generated.answers);
        let chosen = match viable.as_slice() {
            [] => {
                let fallback_started = Instant::now();
                let (fallback, extra) = self.fallback(file, &generated, sink).await;
                upstream.add(fallback_started.elapsed());
                records.extend(extra);
                fallback
            }
            [only] => Ok(Chosen {
                content: Content::Code(only.code.to_string()),
                model: only.model.to_string(),
                selection: Selection::SingleCandidate,
                reason: None,
            }),
            several => Ok(self
                .arbitrate(batch, file, &generated, several, sink, upstream)
                .await),
        };
        Produced {
            chosen,
            candidates: records,
            validation: None,
            existing: generated.existing,
        }
    }

    /// Several distinct viable candidates: ask the arbiter, shuffled and anonymous.
    pub(crate) async fn arbitrate(
        &self,
        batch: &Batch,
        file: &FileSpec,
        generated: &Generated,
        viable: &[Viable<'_>],
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> Chosen {
        let mut order: Vec<usize> = (0..viable.len()).collect();
        order.shuffle(&mut rand::rng());
        let shown: Vec<&str> = order.iter().map(|&i| viable[i].code).collect();
        let arbiter = batch
            .options
            .arbiter_model
            .clone()
            .or_else(|| self.config.arbiter.clone())
            .or_else(|| generated.models.first().cloned())
            .unwrap_or_default();
        let req = ChatRequest {
            model: arbiter.clone(),
            messages: prompt::arbiter_messages(
                batch,
                file,
                generated.language,
                &shown,
                generated.existing.as_ref().map(|e| e.view.as_str()),
            ),
            temperature: Some(0.0),
            max_tokens: Some(1_000),
            response_format: Some(prompt::verdict_schema(shown.len())),
            ..ChatRequest::default()
        };
        sink.emit(Event::ArbiterStarted {
            file: file.path.to_string(),
            model: arbiter.clone(),
            candidates: shown.len(),
        });
        let asked = Instant::now();
        let verdict = self.models.chat(req).await;
        upstream.add(asked.elapsed());
        let failure = match verdict {
            Ok(resp) => match writ_checks::parse_verdict(&resp.content, shown.len()) {
                Some(v) => {
                    let picked = &viable[order[v.choice - 1]];
                    sink.emit(Event::ArbiterChose {
                        file: file.path.to_string(),
                        candidate: v.choice,
                        model: picked.model.to_string(),
                        reason: v.reason.clone(),
                    });
                    return Chosen {
                        content: Content::Code(picked.code.to_string()),
                        model: picked.model.to_string(),
                        selection: Selection::Arbiter,
                        reason: Some(v.reason),
                    };
                }
                None => format!("the arbiter {arbiter} gave no usable verdict"),
            },
            Err(e) => format!("the arbiter failed: {e}"),
        };
        tracing::warn!(file = %file.path, reason = %failure, "arbiter failed; taking the first viable candidate");
        let first = &viable[0];
        sink.emit(Event::ArbiterChose {
            file: file.path.to_string(),
            candidate: 0,
            model: first.model.to_string(),
            reason: failure.clone(),
        });
        Chosen {
            content: Content::Code(first.code.to_string()),
            model: first.model.to_string(),
            selection: Selection::ArbiterFailedFirstViable,
            reason: Some(failure),
        }
    }

    /// Every candidate failed: `CODE_GEN_MODEL`, then the list's models, one after another with
    /// backoff, skipping models whose failure was permanent. A rejected key or exhausted credit
    /// ends it at once: no other model can succeed with the same key.
    async fn fallback(
        &self,
        file: &FileSpec,
        generated: &Generated,
        sink: &dyn ProgressSink,
    ) -> (Result<Chosen, String>, Vec<CandidateRecord>) {
        let first_round = &generated.answers;
        let provider_refused = |c: Option<ErrorClass>| {
            matches!(
                c,
                Some(ErrorClass::Unauthorized | ErrorClass::PaymentRequired)
            )
        };
        let mut extra = Vec::new();
        let mut last_error = first_round
            .iter()
            .find_map(|c| c.record.error.clone())
            .unwrap_or_else(|| "no candidate produced usable code".to_string());
        if first_round
            .iter()
            .any(|c| provider_refused(c.record.error_class))
        {
            return (
                Err(format!(
                    "every candidate failed and the provider refused the key: {last_error}"
                )),
                extra,
            );
        }
        let mut order: Vec<&String> = Vec::new();
        for m in self.config.fallback.iter().chain(&generated.models) {
            let permanent = first_round.iter().any(|c| {
                &c.record.model == m && c.record.error_class.is_some_and(ErrorClass::is_permanent)
            });
            if !permanent && !order.contains(&m) {
                order.push(m);
            }
        }
        let mut wait = self.config.fallback_backoff;
        for (i, model) in order.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
            let c = fanout::fan_out(
                self.models.as_ref(),
                std::slice::from_ref(model),
                &generated.messages,
                &generated.expect(file),
                self.call_settings(),
                file.path.as_str(),
                sink,
                StragglerPolicy::WaitAll,
            )
            .await
            .0
            .pop();
            let Some(c) = c else { break };
            let refused = provider_refused(c.record.error_class);
            extra.push(c.record.clone());
            if let Some(code) = c.code {
                return (
                    Ok(Chosen {
                        content: Content::Code(code),
                        model: model.clone(),
                        selection: Selection::Fallback,
                        reason: None,
                    }),
                    extra,
                );
            }
            last_error = c.record.error.unwrap_or(last_error);
            if refused {
                break;
            }
        }
        (
            Err(format!(
                "every candidate and fallback model failed; last error: {last_error}"
            )),
            extra,
        )
    }
}

/// Viable, distinct, in model-list order; those that parse beat those that do not.
pub(crate) fn distinct_viable(answers: &[Candidate]) -> Vec<Viable<'_>> {
    let mut viable: Vec<(Viable<'_>, Option<bool>)> = Vec::new();
    for c in answers {
        if let Some(code) = &c.code
            && !viable.iter().any(|(seen, _)| seen.code == code.as_str())
        {
            viable.push((
                Viable {
                    model: c.record.model.as_str(),
                    code: code.as_str(),
                },
                c.record.parsed,
            ));
        }
    }
    if viable.iter().any(|(_, parsed)| *parsed != Some(false)) {
        viable.retain(|(_, parsed)| *parsed != Some(false));
    }
    viable.into_iter().map(|(v, _)| v).collect()
}
