//! Selection: which candidate a file gets. Viable candidates are de-duplicated and those that
//! parse beat those that do not; then one distinct candidate is taken as it is, several go to the
//! arbiter (shown shuffled under `Candidate N` headings, without model names), and none sends the
//! file to the fallback models one after another. A failed or nonsensical arbiter falls back to
//! the first viable candidate in model-list order.

use std::time::{Duration, Instant};
use tracing::Instrument;

use rand::seq::SliceRandom;

use crate::audit::{CallRecord, CallRole, CandidateRecord, Selection};
use crate::model::{ChatRequest, ErrorClass, ModelClient};
use crate::synthesis::batch::{Batch, StragglerPolicy};
use crate::synthesis::fanout::{self, Candidate};
use crate::synthesis::generation::Generated;
use crate::synthesis::progress::Event;
use crate::synthesis::prompt;
use crate::synthesis::stage::{Chosen, Content, FileCx, Produced, SynthesisConfig};

/// A viable, distinct candidate: its model and code.
pub(crate) struct Viable<'a> {
    pub model: &'a str,
    pub code: &'a str,
}

/// The selection stage: the models it may ask (the arbiter, the fallback models) and how.
#[derive(Clone, Copy)]
pub(crate) struct Selector<'a> {
    pub models: &'a dyn ModelClient,
    pub config: &'a SynthesisConfig,
    /// The batch whose files it selects (its calls' settings follow it).
    pub batch: &'a Batch,
}

impl Selector<'_> {
    /// Chooses one file's content among its candidates; see the module docs.
    pub(crate) async fn select(&self, cx: FileCx<'_>, generated: Generated) -> Produced {
        let mut records: Vec<CandidateRecord> =
            generated.answers.iter().map(|c| c.record.clone()).collect();
        let viable = distinct_viable(&generated.answers);
        let chosen = match viable.as_slice() {
            [] => {
                let fallback_started = Instant::now();
                let (fallback, extra) = self.fallback(cx, &generated).await;
                cx.upstream().add(fallback_started.elapsed());
                records.extend(extra);
                fallback
            }
            [only] => Ok(Chosen {
                content: Content::Code(only.code.to_string()),
                model: only.model.to_string(),
                selection: Selection::SingleCandidate,
                reason: None,
                formatted: None,
            }),
            several => Ok(self.arbitrate(cx, &generated, several).await),
        };
        Produced {
            chosen,
            candidates: records,
            validation: None,
            existing: generated.existing,
        }
    }

    /// The arbiter of this batch: its `options.arbiter_model`, `CODE_MODEL`, or the first
    /// candidate model.
    pub(crate) fn arbiter_model(&self, generated: &Generated) -> String {
        self.arbiter_of(&generated.models)
    }

    /// [`Self::arbiter_model`] for a file whose candidate models are `models`.
    pub(crate) fn arbiter_of(&self, models: &[String]) -> String {
        self.batch
            .options()
            .arbiter_model
            .clone()
            .or_else(|| self.config.arbiter.clone())
            .or_else(|| models.first().cloned())
            .unwrap_or_default()
    }

    /// Several distinct viable candidates: ask the arbiter, shuffled and anonymous.
    pub(crate) async fn arbitrate(
        &self,
        cx: FileCx<'_>,
        generated: &Generated,
        viable: &[Viable<'_>],
    ) -> Chosen {
        let FileCx { batch, sink, .. } = cx;
        let file = cx.file();
        let mut order: Vec<usize> = (0..viable.len()).collect();
        order.shuffle(&mut rand::rng());
        let shown: Vec<&str> = order.iter().map(|&i| viable[i].code).collect();
        let arbiter = self.arbiter_model(generated);
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
            urgent: batch.resumed(),
            purpose: CallRole::Arbiter.into(),
            ..ChatRequest::default()
        };
        sink.emit(Event::ArbiterStarted {
            file: file.path.to_string(),
            model: arbiter.clone(),
            candidates: shown.len(),
        });
        let asked = Instant::now();
        let verdict = self
            .models
            .chat(req)
            .instrument(
                tracing::info_span!("arbiter", file = %file.path, candidates = viable.len()),
            )
            .await;
        cx.upstream().add(asked.elapsed());
        cx.upstream().called(CallRecord::of(
            CallRole::Arbiter,
            &arbiter,
            asked.elapsed(),
            &verdict,
        ));
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
                        formatted: None,
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
            formatted: None,
        }
    }

    /// Every candidate failed: `CODE_GEN_MODEL`, then the list's models, one after another with
    /// backoff, skipping models whose failure was permanent. A rejected key or exhausted credit
    /// ends it at once: no other model can succeed with the same key.
    async fn fallback(
        &self,
        cx: FileCx<'_>,
        generated: &Generated,
    ) -> (Result<Chosen, String>, Vec<CandidateRecord>) {
        let FileCx { sink, .. } = cx;
        let file = cx.file();
        let first_round = &generated.answers;
        let provider_refused = |c: Option<ErrorClass>| {
            matches!(
                c,
                Some(ErrorClass::Unauthorized | ErrorClass::PaymentRequired)
            )
        };
        // A spent budget refuses every model alike.
        let budget_spent = |c: Option<ErrorClass>| c == Some(ErrorClass::BudgetExceeded);
        let mut extra = Vec::new();
        let mut last_error = first_round
            .iter()
            .find_map(|c| c.record.error.clone())
            .unwrap_or_else(|| "no candidate produced usable code".to_string());
        if let Some(spent) = first_round
            .iter()
            .find(|c| budget_spent(c.record.error_class))
        {
            let why = spent.record.error.clone().unwrap_or_default();
            return (
                Err(format!(
                    "every candidate failed and no other model may be called: {why}"
                )),
                extra,
            );
        }
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
                self.models,
                std::slice::from_ref(model),
                &generated.messages,
                &generated.expect(file),
                self.config.call_settings(self.batch),
                file.path.as_str(),
                sink,
                StragglerPolicy::WaitAll,
            )
            .await
            .0
            .pop();
            let Some(c) = c else { break };
            let refused =
                provider_refused(c.record.error_class) || budget_spent(c.record.error_class);
            extra.push(c.record.clone());
            if let Some(code) = c.code {
                return (
                    Ok(Chosen {
                        content: Content::Code(code),
                        model: model.clone(),
                        selection: Selection::Fallback,
                        reason: None,
                        formatted: None,
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use writ_checks::Language;

    use super::*;
    use crate::model::ChatMessage;
    use crate::synthesis::doubles::{self, Answer, ScriptedModels, failed, viable};
    use crate::synthesis::progress::NoProgress;

    fn generated(models: &[&str], answers: Vec<Candidate>) -> Generated {
        Generated {
            language: Language::Python,
            models: models.iter().map(|m| m.to_string()).collect(),
            messages: vec![ChatMessage::user("write app.py")],
            answers,
            existing: None,
            allow_removals: false,
            rounds: Default::default(),
        }
    }

    /// Selects among `answers` for `app.py`, the arbiter being `judge`.
    async fn select(
        client: &ScriptedModels,
        config: SynthesisConfig,
        models: &[&str],
        answers: Vec<Candidate>,
    ) -> Produced {
        let batch = doubles::batch(&["app.py"]);
        let present = doubles::present(&batch);
        let cx = FileCx {
            batch: &batch,
            batch_file: &present.files[0],
            present: &present,
            sink: &NoProgress,
        };
        let selector = Selector {
            models: client,
            config: &config,
            batch: &batch,
        };
        selector.select(cx, generated(models, answers)).await
    }

    fn judged() -> SynthesisConfig {
        SynthesisConfig {
            arbiter: Some("judge".into()),
            ..SynthesisConfig::default()
        }
    }

    fn two_viable() -> Vec<Candidate> {
        vec![viable("alpha", "x = 1\n"), viable("beta", "x = 2\n")]
    }

    #[tokio::test(start_paused = true)]
    async fn an_arbiter_that_fails_or_answers_garbage_leaves_the_first_viable_candidate() {
        let down = Answer {
            delay: Duration::from_millis(5),
            outcome: Err(ErrorClass::ServerError),
        };
        // The candidates reach the arbiter shuffled: whatever order it saw, the fallback is the
        // first in model-list order.
        for _ in 0..8 {
            for verdict in [Answer::after(5, "They all look fine to me."), down.clone()] {
                let client = ScriptedModels::default().with("judge", vec![verdict]);
                let produced = select(&client, judged(), &["alpha", "beta"], two_viable()).await;
                let chosen = produced.chosen.expect("a candidate is chosen");
                assert_eq!(chosen.model, "alpha");
                assert_eq!(chosen.content, Content::Code("x = 1\n".into()));
                assert_eq!(chosen.selection, Selection::ArbiterFailedFirstViable);
                assert!(chosen.reason.is_some_and(|r| r.contains("arbiter")));
                assert_eq!(client.requests_to("judge").len(), 1);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_arbiter_sees_candidates_shuffled_and_unnamed_and_its_choice_maps_back() {
        let mut shown_first = HashSet::new();
        for _ in 0..32 {
            let client = ScriptedModels::default().with(
                "judge",
                vec![Answer::after(5, r#"{"choice": 1, "reason": "cleaner"}"#)],
            );
            let produced = select(&client, judged(), &["alpha", "beta"], two_viable()).await;
            let chosen = produced.chosen.expect("a candidate is chosen");
            let asked = &client.requests_to("judge")[0];
            let prompt: String = asked.messages.iter().map(|m| m.content.as_str()).collect();
            assert!(
                !prompt.contains("alpha") && !prompt.contains("beta"),
                "no model name reaches the arbiter: {prompt}"
            );
            let (one, two) = (prompt.find("x = 1"), prompt.find("x = 2"));
            let first = if one < two {
                ("alpha", "x = 1\n")
            } else {
                ("beta", "x = 2\n")
            };
            assert_eq!(chosen.selection, Selection::Arbiter);
            assert_eq!(chosen.model, first.0, "candidate 1 is the one shown first");
            assert_eq!(chosen.content, Content::Code(first.1.into()));
            shown_first.insert(first.0);
        }
        assert_eq!(shown_first.len(), 2, "either candidate is shown first");
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_viable_candidate_the_fallback_model_then_the_list_is_tried_with_backoff() {
        let client = ScriptedModels::default()
            .with(
                "spare",
                vec![Answer {
                    delay: Duration::from_millis(10),
                    outcome: Err(ErrorClass::ServerError),
                }],
            )
            .with("alpha", vec![Answer::after(10, "```python\nx = 3\n```")])
            .with("beta", vec![Answer::after(10, "```python\nx = 4\n```")]);
        let config = SynthesisConfig {
            fallback: Some("spare".into()),
            fallback_backoff: Duration::from_millis(500),
            ..judged()
        };
        let answers = vec![
            failed("alpha", ErrorClass::ServerError),
            // A permanent failure: the same model is not asked again.
            failed("beta", ErrorClass::NotFound),
        ];
        let started = tokio::time::Instant::now();
        let produced = select(&client, config, &["alpha", "beta"], answers).await;
        let chosen = produced.chosen.expect("the fallback found a candidate");
        assert_eq!(chosen.model, "alpha");
        assert_eq!(chosen.selection, Selection::Fallback);
        assert_eq!(chosen.content, Content::Code("x = 3\n".into()));
        assert_eq!(client.requests_to("spare").len(), 1);
        assert!(client.requests_to("beta").is_empty());
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(10 + 500 + 10),
            "the second attempt waits out the backoff"
        );
        let models: Vec<&str> = produced
            .candidates
            .iter()
            .map(|c| c.model.as_str())
            .collect();
        assert_eq!(models, ["alpha", "beta", "spare", "alpha"]);
    }
}
