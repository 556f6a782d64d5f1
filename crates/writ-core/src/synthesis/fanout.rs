//! Fan-out: one file's prompt to every candidate model at once, each answer checked as it
//! arrives. A failing model never aborts the others.
//!
//! Also owns the straggler policy: once enough viable candidates are in, the rest get a bounded
//! extra wait, then their calls are dropped (which cancels the HTTP requests) and recorded as
//! `cancelled` candidates. The default waits for every model.

use std::time::{Duration, Instant};

use crate::audit::CandidateRecord;
use crate::model::{ChatMessage, ChatRequest, ChatResponse, ErrorClass, ModelClient, ModelError};
use crate::synthesis::batch::{Enough, Extra, StragglerPolicy};
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::stage::CallSettings;
use crate::synthesis::update::{Expect, judge_response};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

impl StragglerPolicy {
    /// Viable candidates needed before the extra wait starts, for a fan-out over `models`
    /// models; `None` waits for all.
    fn threshold(&self, models: usize) -> Option<usize> {
        match self {
            StragglerPolicy::WaitAll => None,
            StragglerPolicy::CutOff { enough, .. } => Some(match enough {
                Enough::Count(n) => (*n).min(models),
                Enough::AllButSlowest => models.saturating_sub(1).max(1),
            }),
        }
    }
}

/// One candidate model's answer after the checks.
pub struct Candidate {
    /// What is recorded and answered, including why the candidate is not viable.
    pub record: CandidateRecord,
    /// The normalised code when the candidate is viable.
    pub code: Option<String>,
}

/// Asks every model in `models` at once; returns their candidates in model-list order and the
/// wall time the fan-out took (what the batch waited for upstream). Under a cut-off `policy`,
/// calls still running at the deadline are dropped and come back as `cancelled` candidates.
#[expect(
    clippy::too_many_arguments,
    reason = "one fan-out needs each of these; a struct would only rename them"
)]
pub async fn fan_out(
    client: &dyn ModelClient,
    models: &[String],
    messages: &[ChatMessage],
    expect: &Expect<'_>,
    call: CallSettings,
    file: &str,
    sink: &dyn ProgressSink,
    policy: StragglerPolicy,
) -> (Vec<Candidate>, Duration) {
    let out = fan_out_until(
        client, models, messages, expect, call, file, sink, policy, None,
    )
    .await;
    (out.answers, out.waited)
}

/// Whether a viable candidate passes (the caller's tests, or the generated checks in agreement
/// with another candidate), asked while the fan-out still runs
/// (`options.fanout.stop_when_passing`).
#[async_trait::async_trait]
pub trait PassCheck: Send + Sync {
    async fn passes(&self, code: &str) -> bool;

    /// What a passing candidate passed, for the stopped calls' records.
    fn passed(&self) -> &'static str {
        "passed the caller's tests"
    }
}

/// What a fan-out gave.
pub struct FanOut {
    /// One per model, in model-list order.
    pub answers: Vec<Candidate>,
    /// The wall time the fan-out took.
    pub waited: Duration,
    /// The models whose calls were cancelled because another's candidate passed.
    pub stopped: Vec<String>,
}

/// [`fan_out`], and with `stop`, each viable candidate checked as it arrives: once one passes,
/// the calls still running are dropped (which cancels their HTTP requests) and come back as
/// `cancelled` candidates. The fan-out never waits for a check once every answer is in.
#[expect(
    clippy::too_many_arguments,
    reason = "one fan-out needs each of these; a struct would only rename them"
)]
pub async fn fan_out_until(
    client: &dyn ModelClient,
    models: &[String],
    messages: &[ChatMessage],
    expect: &Expect<'_>,
    call: CallSettings,
    file: &str,
    sink: &dyn ProgressSink,
    policy: StragglerPolicy,
    stop: Option<&dyn PassCheck>,
) -> FanOut {
    let started = Instant::now();
    let mut pending: FuturesUnordered<_> = models
        .iter()
        .enumerate()
        .map(|(i, m)| async move {
            sink.emit(Event::CandidateStarted {
                file: file.to_string(),
                model: m.clone(),
            });
            let c = ask(client, m, messages.to_vec(), expect, call).await;
            sink.emit(Event::CandidateFinished {
                file: file.to_string(),
                model: m.clone(),
                latency_ms: c.record.latency_ms,
                ok: c.record.ok,
                error_class: c.record.error_class,
                parsed: c.record.parsed,
            });
            (i, c)
        })
        .collect();
    let mut checks = FuturesUnordered::new();
    let mut answers: Vec<Option<Candidate>> = models.iter().map(|_| None).collect();
    let threshold = policy.threshold(models.len());
    let mut viable = 0usize;
    let mut first_viable: Option<Duration> = None;
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut passed_by: Option<usize> = None;
    loop {
        let next_answer = async {
            match deadline {
                None => Some(pending.next().await),
                Some(at) => tokio::time::timeout_at(at, pending.next()).await.ok(),
            }
        };
        let next = tokio::select! {
            biased;
            Some((i, true)) = checks.next(), if !checks.is_empty() => {
                passed_by = Some(i);
                break;
            }
            next = next_answer => next,
        };
        // `None`: the straggler deadline passed; `Some(None)`: every answer is in.
        let Some(Some((i, c))) = next else { break };
        if let Some(code) = &c.code {
            viable += 1;
            first_viable.get_or_insert_with(|| started.elapsed());
            if let Some(check) = stop {
                let code = code.clone();
                checks.push(async move { (i, check.passes(&code).await) });
            }
        }
        answers[i] = Some(c);
        if deadline.is_none()
            && let (Some(needed), StragglerPolicy::CutOff { extra, .. }) = (threshold, policy)
            && viable >= needed
        {
            let wait = match extra {
                Extra::Fixed(d) => d,
                Extra::Relative(f) => first_viable.unwrap_or_default().mul_f64(f),
            };
            deadline = Some(tokio::time::Instant::now() + wait);
        }
    }
    // Dropping the unfinished futures cancels their HTTP requests.
    drop(pending);
    drop(checks);
    let waited = started.elapsed();
    let mut stopped = Vec::new();
    let answers = answers
        .into_iter()
        .zip(models)
        .map(|(answer, model)| {
            answer.unwrap_or_else(|| {
                let c = match passed_by {
                    Some(p) => {
                        stopped.push(model.clone());
                        let what = stop.map_or("passed", |s| s.passed());
                        stopped_early(model, &models[p], waited, what)
                    }
                    None => cut_off(model, waited, viable),
                };
                sink.emit(Event::CandidateFinished {
                    file: file.to_string(),
                    model: model.clone(),
                    latency_ms: c.record.latency_ms,
                    ok: false,
                    error_class: c.record.error_class,
                    parsed: None,
                });
                c
            })
        })
        .collect();
    if let Some(p) = passed_by {
        sink.emit(Event::StoppedEarly {
            file: file.to_string(),
            passed: models[p].clone(),
            cancelled: stopped.len(),
        });
    }
    FanOut {
        answers,
        waited,
        stopped,
    }
}

/// The record of a call cancelled because another model's candidate passed (`what`).
fn stopped_early(model: &str, passed: &str, waited: Duration, what: &str) -> Candidate {
    Candidate {
        record: CandidateRecord {
            model: model.to_string(),
            ok: false,
            latency_ms: waited.as_millis() as u64,
            error_class: Some(ErrorClass::Cancelled),
            error: Some(format!(
                "model '{model}' was stopped after {} ms: the candidate of '{passed}' already {what} (options.fanout.stop_when_passing)",
                waited.as_millis()
            )),
            ..CandidateRecord::default()
        },
        code: None,
    }
}

/// The record of a call the straggler policy gave up on.
fn cut_off(model: &str, waited: Duration, viable: usize) -> Candidate {
    Candidate {
        record: CandidateRecord {
            model: model.to_string(),
            ok: false,
            latency_ms: waited.as_millis() as u64,
            error_class: Some(ErrorClass::Cancelled),
            error: Some(format!(
                "model '{model}' was cut off by the straggler policy after {} ms: {viable} viable candidate(s) were already in",
                waited.as_millis()
            )),
            ..CandidateRecord::default()
        },
        code: None,
    }
}

/// One candidate model: the call, then the checks ([`judge_response`]). An answer whose edits do not
/// apply goes back to its model once with why (the block, the closest lines), as agents' edit
/// tools do: a near miss is the usual way edit answers fail, and one more answer usually fixes
/// it. The record then says what the first answer's error was and counts both calls.
pub async fn ask(
    client: &dyn ModelClient,
    model: &str,
    messages: Vec<ChatMessage>,
    expect: &Expect<'_>,
    call: CallSettings,
) -> Candidate {
    let first = ask_once(client, model, messages.clone(), expect, call).await;
    let retry = first.record.error_class == Some(ErrorClass::EditFailed) && expect.update.is_some();
    let Some(error) = first.record.error.clone().filter(|_| retry) else {
        return first;
    };
    let again = crate::synthesis::prompt::edit_retry_messages(&messages, &error);
    let mut second = ask_once(client, model, again, expect, call).await;
    let r = &mut second.record;
    r.latency_ms += first.record.latency_ms;
    r.prompt_tokens = sum(r.prompt_tokens, first.record.prompt_tokens);
    r.completion_tokens = sum(r.completion_tokens, first.record.completion_tokens);
    r.cached_tokens = sum(r.cached_tokens, first.record.cached_tokens);
    r.cost = match (r.cost, first.record.cost) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    r.edit_retry_error = Some(error);
    second
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

async fn ask_once(
    client: &dyn ModelClient,
    model: &str,
    messages: Vec<ChatMessage>,
    expect: &Expect<'_>,
    call: CallSettings,
) -> Candidate {
    let started = Instant::now();
    let req = ChatRequest {
        model: model.to_string(),
        messages,
        temperature: Some(call.temperature),
        max_tokens: Some(call.max_tokens),
        urgent: call.urgent,
        ..ChatRequest::default()
    };
    match client.chat(req).await {
        Ok(resp) => {
            let mut record = answered(model, &resp);
            let code = judge_response(&resp, expect, &mut record);
            Candidate { record, code }
        }
        Err(err) => Candidate {
            record: failed(model, started, &err),
            code: None,
        },
    }
}

/// The record of a call the provider answered, before the answer is checked (`ok` false).
pub fn answered(model: &str, resp: &ChatResponse) -> CandidateRecord {
    CandidateRecord {
        model: model.to_string(),
        ok: false,
        latency_ms: resp.latency.as_millis() as u64,
        parsed: None,
        prompt_tokens: resp.usage.prompt_tokens,
        completion_tokens: resp.usage.completion_tokens,
        cached_tokens: resp.usage.cached_tokens,
        cost: resp.usage.cost,
        ..CandidateRecord::default()
    }
}

/// The record of a call that failed.
pub fn failed(model: &str, started: Instant, err: &ModelError) -> CandidateRecord {
    CandidateRecord {
        model: model.to_string(),
        ok: false,
        latency_ms: started.elapsed().as_millis() as u64,
        error_class: Some(err.class),
        error: Some(err.to_string()),
        ..CandidateRecord::default()
    }
}

#[cfg(test)]
mod tests {
    use writ_checks::{Language, UpdateTarget};

    use super::*;
    use crate::synthesis::doubles::{Answer, ScriptedModels};
    use crate::synthesis::progress::NoProgress;

    const CALL: CallSettings = CallSettings {
        temperature: 0.0,
        max_tokens: 100,
        urgent: false,
    };

    fn code(body: &str) -> String {
        format!("```python\n{body}\n```")
    }

    fn models(names: &[&str]) -> Vec<String> {
        names.iter().map(|m| m.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_straggler_is_cut_off_once_enough_candidates_are_in_and_the_rest_waited_for() {
        let client = ScriptedModels::default()
            .with("fast", vec![Answer::after(100, &code("x = 1"))])
            .with("medium", vec![Answer::after(200, &code("x = 2"))])
            .with("slow", vec![Answer::after(10_000, &code("x = 3"))]);
        let policy = StragglerPolicy::CutOff {
            enough: Enough::Count(2),
            extra: Extra::Fixed(Duration::from_millis(50)),
        };
        let started = tokio::time::Instant::now();
        let (answers, _) = fan_out(
            &client,
            &models(&["fast", "medium", "slow"]),
            &[ChatMessage::user("write it")],
            &Expect::new_file(Language::Python),
            CALL,
            "a.py",
            &NoProgress,
            policy,
        )
        .await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(250),
            "200 ms for two, then 50 ms more"
        );
        assert_eq!(answers[0].code.as_deref(), Some("x = 1\n"));
        assert_eq!(answers[1].code.as_deref(), Some("x = 2\n"));
        assert_eq!(answers[2].code, None);
        assert_eq!(answers[2].record.error_class, Some(ErrorClass::Cancelled));
    }

    /// Passes the candidates holding a given text.
    struct PassesIf(&'static str);

    #[async_trait::async_trait]
    impl PassCheck for PassesIf {
        async fn passes(&self, code: &str) -> bool {
            code.contains(self.0)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn once_a_candidate_passes_the_calls_still_running_are_stopped() {
        let client = ScriptedModels::default()
            .with("fast", vec![Answer::after(100, &code("x = 1"))])
            .with("medium", vec![Answer::after(200, &code("x = 2"))])
            .with("slow", vec![Answer::after(10_000, &code("x = 3"))]);
        let started = tokio::time::Instant::now();
        let out = fan_out_until(
            &client,
            &models(&["fast", "medium", "slow"]),
            &[ChatMessage::user("write it")],
            &Expect::new_file(Language::Python),
            CALL,
            "a.py",
            &NoProgress,
            StragglerPolicy::WaitAll,
            Some(&PassesIf("x = 2")),
        )
        .await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(200),
            "the first candidate fails the check; the second passes it"
        );
        assert_eq!(out.answers[0].code.as_deref(), Some("x = 1\n"));
        assert_eq!(out.answers[1].code.as_deref(), Some("x = 2\n"));
        assert_eq!(out.answers[2].code, None);
        assert_eq!(
            out.answers[2].record.error_class,
            Some(ErrorClass::Cancelled)
        );
        assert_eq!(out.stopped, vec!["slow".to_string()]);
        // Nothing passes: every model is waited for and nothing is stopped.
        let out = fan_out_until(
            &client,
            &models(&["fast", "medium"]),
            &[ChatMessage::user("write it")],
            &Expect::new_file(Language::Python),
            CALL,
            "a.py",
            &NoProgress,
            StragglerPolicy::WaitAll,
            Some(&PassesIf("nothing")),
        )
        .await;
        assert!(out.stopped.is_empty());
        assert!(out.answers.iter().all(|a| a.code.is_some()));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_cut_off_every_model_is_waited_for_and_a_failure_does_not_stop_the_others() {
        let client = ScriptedModels::default()
            .with("ok", vec![Answer::after(10, &code("x = 1"))])
            .with(
                "down",
                vec![Answer {
                    delay: Duration::from_millis(5),
                    outcome: Err(ErrorClass::ServerError),
                }],
            )
            .with("slow", vec![Answer::after(3_000, &code("x = 3"))]);
        let started = tokio::time::Instant::now();
        let (answers, _) = fan_out(
            &client,
            &models(&["ok", "down", "slow"]),
            &[ChatMessage::user("write it")],
            &Expect::new_file(Language::Python),
            CALL,
            "a.py",
            &NoProgress,
            StragglerPolicy::WaitAll,
        )
        .await;
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(answers[1].record.error_class, Some(ErrorClass::ServerError));
        assert_eq!(answers[2].code.as_deref(), Some("x = 3\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_edit_that_missed_is_asked_once_more_with_why() {
        let original = "def f():\n    return 1\n";
        let miss = "<<<<<<< SEARCH\n    return 2\n=======\n    return 3\n>>>>>>> REPLACE\n";
        let hit = "<<<<<<< SEARCH\n    return 1\n=======\n    return 3\n>>>>>>> REPLACE\n";
        let client = ScriptedModels::default()
            .with("m", vec![Answer::after(10, miss), Answer::after(10, hit)]);
        let expect = Expect {
            language: Language::Python,
            update: Some(UpdateTarget {
                original,
                base: original,
                description: "return 3",
                allow_removals: false,
            }),
        };
        let c = ask(
            &client,
            "m",
            vec![ChatMessage::user("change it")],
            &expect,
            CALL,
        )
        .await;
        assert_eq!(c.code.as_deref(), Some("def f():\n    return 3\n"));
        let first_error = c.record.edit_retry_error.unwrap_or_default();
        assert!(first_error.starts_with("SEARCH block 1"), "{first_error}");
        assert_eq!(c.record.latency_ms, 20, "both calls are counted");
        let second = &client.requests_to("m")[1];
        let last = &second
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        assert!(last.contains("could not be applied"), "{last}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_file_is_never_asked_twice() {
        let client =
            ScriptedModels::default().with("m", vec![Answer::after(1, "```python\n\n```")]);
        let c = ask(
            &client,
            "m",
            vec![ChatMessage::user("write it")],
            &Expect::new_file(Language::Python),
            CALL,
        )
        .await;
        assert_eq!(c.record.error_class, Some(ErrorClass::NoCode));
        assert_eq!(client.requests_to("m").len(), 1);
    }
}
