//! [`RoutingClient`]: one [`ModelClient`] for the pipeline, every provider behind it. Ids starting
//! with `local/` go to the embedded model; any other id goes to the remote provider its entry of
//! the model table names (`[[models]]`), else to the default one (OpenRouter, or
//! `OPENROUTER_BASE_URL`), so `CODE_LIST` may mix them all.
//!
//! It also prices each answer that carries no cost, at its entry's prices: being below the
//! batch's metering, every reader of a call's cost — budgets, the spend ledger, the answer,
//! `/stats/models` — sees the same figure, and so does the call's span, which is made here for
//! every provider alike (OpenTelemetry's GenAI `chat`).

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;
use writ_core::ModelClient;
use writ_core::model::{ChatRequest, ChatResponse, ErrorClass, ModelError, ProviderReadiness};

use crate::model_id::is_local;
use crate::model_table::{ModelTable, Price};

/// One remote provider's client.
pub struct Remote {
    /// As traces name the provider (`gen_ai.provider.name`).
    pub name: String,
    pub client: Arc<dyn ModelClient>,
    /// Whether any configured model goes to it: only then does its readiness count.
    pub in_use: bool,
}

/// What an entry of the model table tells the router.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    /// The index of the remote provider in [`RoutingClient::remotes`]; `None`: the default one
    /// (for an embedded id, the embedded engine).
    pub remote: Option<usize>,
    /// Applied when the provider reports no cost.
    pub price: Option<Price>,
}

pub struct RoutingClient {
    /// `None` when the embedded provider is switched off or not built.
    pub local: Option<Arc<dyn ModelClient>>,
    /// The remote providers, one client each; the first is the default.
    pub remotes: Vec<Remote>,
    /// Which provider serves each id, and at what price.
    pub models: ModelTable<Route>,
}

impl RoutingClient {
    fn route(&self, model: &str) -> Route {
        self.models
            .entry_for(model, |route| route.remote.is_some())
            .copied()
            .unwrap_or(Route {
                remote: None,
                price: None,
            })
    }

    fn remote(&self, index: Option<usize>) -> Option<&Remote> {
        self.remotes.get(index.unwrap_or(0))
    }
}

fn unavailable(model: String, message: &str) -> ModelError {
    ModelError {
        model,
        class: ErrorClass::NotFound,
        status: None,
        message: message.into(),
        attempts: 1,
        latency: std::time::Duration::ZERO,
    }
}

/// What traces name the embedded engine.
const EMBEDDED: &str = "local";

/// A model call's span, named and attributed as OpenTelemetry's GenAI conventions name one, so
/// that a tracing backend shows it as one; the usage is recorded when the call ends.
fn call_span(model: &str, provider: &str) -> tracing::Span {
    tracing::info_span!(
        "model_call",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
        gen_ai.usage.cost = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}

fn record(span: &tracing::Span, answer: &Result<ChatResponse, ModelError>) {
    match answer {
        Ok(resp) => {
            let usage = &resp.usage;
            for (field, n) in [
                ("gen_ai.usage.input_tokens", usage.prompt_tokens),
                ("gen_ai.usage.output_tokens", usage.completion_tokens),
                ("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens),
            ] {
                if let Some(n) = n {
                    span.record(field, n);
                }
            }
            if let Some(cost) = usage.cost {
                span.record("gen_ai.usage.cost", cost);
            }
            if let Some(reason) = &resp.finish_reason {
                span.record("gen_ai.response.finish_reasons", reason.as_str());
            }
        }
        Err(e) => {
            span.record("error.type", e.class.as_str());
            span.record("otel.status_code", "error");
            span.record("otel.status_description", e.message.as_str());
        }
    }
}

#[async_trait]
impl ModelClient for RoutingClient {
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let route = self.route(&req.model);
        let (client, provider) = if is_local(&req.model) {
            let local = self.local.as_ref().ok_or_else(|| unavailable(req.model.clone(), "the embedded model is off (WRIT_LOCAL_MODEL=off, or writ was built without the local-model feature)"))?;
            (local, EMBEDDED)
        } else {
            let remote = self.remote(route.remote).ok_or_else(|| {
                unavailable(
                    req.model.clone(),
                    "no provider is configured for this model",
                )
            })?;
            (&remote.client, remote.name.as_str())
        };
        let span = call_span(&req.model, provider);
        let mut answer = client.chat(req).instrument(span.clone()).await;
        // A cost the provider reported is what it bills; the table only fills its absence.
        if let Ok(answer) = &mut answer
            && answer.usage.cost.is_none()
        {
            answer.usage.cost = route.price.and_then(|p| p.cost(&answer.usage));
        }
        record(&span, &answer);
        answer
    }

    /// Ready when every provider in use is: the embedded engine when it runs, and each remote
    /// provider some configured model goes to (the default one when none is, as before).
    fn readiness(&self) -> ProviderReadiness {
        let mut parts: Vec<ProviderReadiness> = self.local.iter().map(|l| l.readiness()).collect();
        let in_use = self.remotes.iter().filter(|r| r.in_use);
        parts.extend(in_use.map(|r| r.client.readiness()));
        if parts.is_empty()
            && let Some(default) = self.remotes.first()
        {
            parts.push(default.client.readiness());
        }
        if parts.len() == 1 {
            return parts.remove(0);
        }
        ProviderReadiness {
            name: parts
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            ready: parts.iter().all(|p| p.ready),
            detail: parts
                .iter()
                .map(|p| format!("{}: {}", p.name, p.detail))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use writ_core::model::Usage;

    use super::*;
    use crate::model_table::ModelPattern;

    /// Records which models it was asked for, and answers with `cost` in its usage.
    struct Recorder {
        name: &'static str,
        cost: Option<f64>,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl ModelClient for Recorder {
        async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
            self.seen.lock().unwrap().push(req.model);
            Ok(ChatResponse {
                content: self.name.into(),
                usage: Usage {
                    prompt_tokens: Some(1_000_000),
                    completion_tokens: Some(100_000),
                    cached_tokens: None,
                    cost: self.cost,
                },
                ..ChatResponse::default()
            })
        }
        fn readiness(&self) -> ProviderReadiness {
            ProviderReadiness {
                name: self.name.into(),
                ready: self.name == "local",
                detail: format!("{} detail", self.name),
            }
        }
    }

    fn recorder(name: &'static str) -> Arc<Recorder> {
        reporting(name, None)
    }

    fn reporting(name: &'static str, cost: Option<f64>) -> Arc<Recorder> {
        Arc::new(Recorder {
            name,
            cost,
            seen: Mutex::new(Vec::new()),
        })
    }

    fn remote(client: Arc<Recorder>, in_use: bool) -> Remote {
        Remote {
            name: client.name.into(),
            client,
            in_use,
        }
    }

    fn ask(model: &str) -> ChatRequest {
        ChatRequest {
            model: model.into(),
            ..ChatRequest::default()
        }
    }

    fn entry(id: &str, remote: Option<usize>, price: Option<Price>) -> (ModelPattern, Route) {
        (ModelPattern::parse(id).unwrap(), Route { remote, price })
    }

    #[tokio::test]
    async fn local_ids_go_to_the_embedded_model_and_the_rest_to_the_default_provider() {
        let (local, default) = (recorder("local"), recorder("openrouter"));
        let router = RoutingClient {
            local: Some(local.clone()),
            remotes: vec![remote(default.clone(), true)],
            models: ModelTable::default(),
        };
        for m in [
            "local/smollm2-135m@t0.7",
            "openai/gpt-4.1",
            "localhost/model",
        ] {
            router.chat(ask(m)).await.unwrap();
        }
        assert_eq!(*local.seen.lock().unwrap(), vec!["local/smollm2-135m@t0.7"]);
        assert_eq!(
            *default.seen.lock().unwrap(),
            vec!["openai/gpt-4.1", "localhost/model"]
        );
    }

    #[tokio::test]
    async fn each_id_goes_to_the_provider_of_its_closest_entry() {
        let (default, openai, vllm) =
            (recorder("openrouter"), recorder("openai"), recorder("vllm"));
        let router = RoutingClient {
            local: None,
            remotes: vec![
                remote(default.clone(), true),
                remote(openai.clone(), true),
                remote(vllm.clone(), true),
            ],
            models: ModelTable::new(vec![
                entry("openai/*", Some(1), None),
                entry("openai/gpt-oss-20b", Some(2), None),
                entry("anthropic/claude-x", None, None),
            ]),
        };
        for m in [
            "openai/gpt-4.1",
            "openai/gpt-oss-20b",
            "anthropic/claude-x",
            "google/gemini",
        ] {
            router.chat(ask(m)).await.unwrap();
        }
        assert_eq!(*openai.seen.lock().unwrap(), vec!["openai/gpt-4.1"]);
        assert_eq!(*vllm.seen.lock().unwrap(), vec!["openai/gpt-oss-20b"]);
        assert_eq!(
            *default.seen.lock().unwrap(),
            vec!["anthropic/claude-x", "google/gemini"]
        );
    }

    #[tokio::test]
    async fn an_answer_without_a_cost_is_priced_from_its_entry_and_a_reported_cost_wins() {
        let price = Price {
            input: 2.0,
            output: 10.0,
            cached_input: None,
        };
        let router = RoutingClient {
            local: Some(recorder("local")),
            remotes: vec![
                remote(reporting("openrouter", Some(0.5)), true),
                remote(recorder("vllm"), true),
            ],
            models: ModelTable::new(vec![
                entry("self/*", Some(1), Some(price)),
                entry("paid/model", None, Some(price)),
                entry("local/*", None, Some(price)),
            ]),
        };
        // A million prompt tokens at 2 and a tenth of a million completion tokens at 10.
        for m in ["self/model", "local/smollm2-135m"] {
            let cost = router.chat(ask(m)).await.unwrap().usage.cost;
            assert_eq!(cost, Some(3.0), "{m}");
        }
        let reported = router.chat(ask("paid/model")).await.unwrap().usage.cost;
        assert_eq!(reported, Some(0.5), "the provider's own figure wins");
        let unpriced = router
            .chat(ask("self-less/model"))
            .await
            .unwrap()
            .usage
            .cost;
        assert_eq!(unpriced, Some(0.5));
    }

    #[tokio::test]
    async fn an_unpriced_answer_without_a_cost_stays_without_one() {
        let router = RoutingClient {
            local: None,
            remotes: vec![remote(recorder("vllm"), true)],
            models: ModelTable::default(),
        };
        assert_eq!(
            router.chat(ask("any/model")).await.unwrap().usage.cost,
            None
        );
    }

    #[tokio::test]
    async fn a_local_id_with_the_embedded_model_off_is_a_permanent_error_naming_the_switch() {
        let router = RoutingClient {
            local: None,
            remotes: vec![remote(recorder("remote"), true)],
            models: ModelTable::default(),
        };
        let err = router.chat(ask("local/smollm2-135m")).await.unwrap_err();
        assert!(err.class.is_permanent());
        assert!(err.message.contains("WRIT_LOCAL_MODEL"), "{err}");
    }

    #[test]
    fn readiness_counts_every_provider_in_use_and_only_those() {
        let only_local = RoutingClient {
            local: Some(recorder("local")),
            remotes: vec![remote(recorder("remote"), false)],
            models: ModelTable::default(),
        };
        let r = only_local.readiness();
        assert_eq!((r.name.as_str(), r.ready), ("local", true));
        let mixed = RoutingClient {
            local: Some(recorder("local")),
            remotes: vec![
                remote(recorder("remote"), true),
                remote(recorder("idle"), false),
                remote(recorder("vllm"), true),
            ],
            models: ModelTable::default(),
        };
        let r = mixed.readiness();
        assert_eq!(r.name, "local+remote+vllm");
        assert!(!r.ready, "the remote ones are not ready");
        assert!(
            r.detail.contains("remote: remote detail") && r.detail.contains("vllm: vllm detail"),
            "{}",
            r.detail
        );
        assert!(!r.detail.contains("idle"), "{}", r.detail);
    }
}
