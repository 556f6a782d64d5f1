//! [`LocalClient`]: the embedded model behind writ's [`ModelClient`] trait, so the synthesis
//! pipeline (fan-out, checks, arbiter, audit) runs unchanged offline.

use std::time::Instant;

use async_trait::async_trait;
use writ_core::ModelClient;
use writ_core::model::{
    ChatRequest, ChatResponse, ErrorClass, ModelError, ProviderReadiness, Usage,
};

use crate::engine::{GenError, Job, LocalConfig, Pool};
use crate::model_id::{LocalModelId, SMOLLM2_135M};

pub struct LocalClient {
    pool: Pool,
    config: LocalConfig,
}

impl LocalClient {
    /// Starts the worker pool; the model itself is loaded (and fetched if missing) on first use.
    pub fn start(config: LocalConfig) -> std::io::Result<Self> {
        Ok(Self {
            pool: Pool::start(&config)?,
            config,
        })
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }
}

/// Without a seed in the id or the request, each listing of the model still samples its own way.
fn seed_of(model: &str) -> u32 {
    model.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    })
}

/// writ's arbiter asks for `{"choice": 1..=n, "reason": "…"}` through a JSON schema. A 135M model
/// does not follow instructions well enough to answer that unaided, so the schema becomes a
/// grammar the sampler cannot leave; the reason is bounded in characters so a looping model still
/// closes the object within any sane token cap. Other schemas are left to the prompt.
fn verdict_grammar(format: &serde_json::Value) -> Option<String> {
    let properties = format.pointer("/json_schema/schema/properties")?;
    let n = properties.pointer("/choice/maximum")?.as_u64()?;
    properties.pointer("/reason")?;
    if !(1..=32).contains(&n) {
        return None;
    }
    let choices: Vec<String> = (1..=n).map(|i| format!("\"{i}\"")).collect();
    Some(format!(
        "root ::= \"{{\\\"choice\\\": \" choice \", \\\"reason\\\": \\\"\" reason \"\\\"}}\"\n\
         choice ::= {}\n\
         reason ::= [^\"\\\\\\n]{{1,160}}\n",
        choices.join(" | ")
    ))
}

#[async_trait]
impl ModelClient for LocalClient {
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let started = Instant::now();
        let fail = |class: ErrorClass, message: String| ModelError {
            model: req.model.clone(),
            class,
            status: None,
            message,
            attempts: 1,
            latency: started.elapsed(),
        };
        let id = LocalModelId::parse(&req.model).map_err(|m| fail(ErrorClass::BadRequest, m))?;
        if id.base != SMOLLM2_135M {
            return Err(fail(
                ErrorClass::NotFound,
                format!(
                    "no embedded model '{}': writ embeds only {SMOLLM2_135M}",
                    id.base
                ),
            ));
        }
        let deadline = tokio::time::Instant::now() + self.config.deadline;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job {
            messages: req.messages.clone(),
            temperature: id.temperature.or(req.temperature).unwrap_or(0.2),
            seed: id
                .seed
                .or(req.seed)
                .map_or_else(|| seed_of(&req.model), |s| s as u32),
            max_tokens: req
                .max_tokens
                .unwrap_or(self.config.max_tokens)
                .min(self.config.max_tokens),
            grammar: req.response_format.as_ref().and_then(verdict_grammar),
            deadline: deadline.into_std(),
            reply,
        };
        self.pool
            .submit(job)
            .map_err(|e| fail(ErrorClass::RateLimited, e.to_string()))?;
        // Dropping `answer` (the caller's future was dropped, or the deadline hit) tells the
        // worker to stop generating for this call.
        let generated = match tokio::time::timeout_at(deadline, answer).await {
            Err(_) => {
                return Err(fail(
                    ErrorClass::DeadlineExceeded,
                    format!(
                        "no answer within {}s, queue wait included (WRIT_MODEL_DEADLINE_SECS)",
                        self.config.deadline.as_secs()
                    ),
                ));
            }
            Ok(Err(_)) => {
                return Err(fail(
                    ErrorClass::ServerError,
                    "the local worker stopped".into(),
                ));
            }
            Ok(Ok(r)) => r,
        };
        let generated = generated.map_err(|e| {
            let class = match e {
                GenError::Unavailable(_) => ErrorClass::ServerError,
                GenError::PromptTooLong(_) => ErrorClass::BadRequest,
                GenError::Deadline => ErrorClass::DeadlineExceeded,
                GenError::Inference(_) => ErrorClass::ServerError,
            };
            fail(class, e.to_string())
        })?;
        // An answer cut at the cap inside its code block is a file with its end missing; a lenient
        // parser may still accept it, so it never becomes a candidate.
        if generated.finish_reason == "length" && crate::engine::has_open_fence(&generated.text) {
            return Err(fail(
                ErrorClass::BadResponse,
                format!(
                    "the answer reached the {}-token cap inside its code block (WRIT_LOCAL_MAX_TOKENS); a cut file is not a candidate",
                    generated.completion_tokens
                ),
            ));
        }
        metrics::counter!("writ_local_completion_tokens_total")
            .increment(generated.completion_tokens);
        Ok(ChatResponse {
            content: generated.text,
            images: Vec::new(),
            finish_reason: Some(generated.finish_reason.to_string()),
            usage: Usage {
                prompt_tokens: Some(generated.prompt_tokens),
                completion_tokens: Some(generated.completion_tokens),
                cached_tokens: None,
                cost: Some(0.0),
            },
            generation_id: None,
            latency: started.elapsed(),
            time_to_first_token: None,
            attempts: 1,
        })
    }

    fn readiness(&self) -> ProviderReadiness {
        let path = self.config.model_path.display();
        let last_error = self
            .pool
            .shared
            .last_error
            .lock()
            .ok()
            .and_then(|e| e.clone());
        let state = if self.pool.shared.loaded() {
            "loaded".to_string()
        } else if self.config.model_path.is_file() {
            "present, loaded on first use".to_string()
        } else {
            "missing, fetched on first use".to_string()
        };
        ProviderReadiness {
            name: "local".into(),
            ready: last_error.is_none(),
            detail: match last_error {
                Some(e) => format!("{SMOLLM2_135M} (embedded llama.cpp) cannot load: {e}"),
                None => format!(
                    "{SMOLLM2_135M} (embedded llama.cpp): model {path} {state}; {} worker(s) x {} thread(s)",
                    self.config.workers, self.config.threads
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use writ_core::model::ChatMessage;

    use super::*;

    fn ask(model: &str) -> ChatRequest {
        ChatRequest {
            model: model.into(),
            messages: vec![ChatMessage::user("hello")],
            ..ChatRequest::default()
        }
    }

    #[test]
    fn the_arbiter_schema_becomes_a_grammar_of_its_choices() {
        let format = serde_json::json!({"type": "json_schema", "json_schema": {"schema": {
            "type": "object",
            "properties": {"choice": {"type": "integer", "minimum": 1, "maximum": 3},
                           "reason": {"type": "string"}}}}});
        let g = verdict_grammar(&format).unwrap();
        assert!(g.contains("choice ::= \"1\" | \"2\" | \"3\""), "{g}");
        assert!(
            g.starts_with("root ::= \"{\\\"choice\\\": \" choice"),
            "{g}"
        );
        assert_eq!(
            verdict_grammar(&serde_json::json!({"type": "json_object"})),
            None
        );
    }

    #[tokio::test]
    async fn an_unknown_local_model_is_not_found_without_touching_the_workers() {
        let dir = tempfile::tempdir().unwrap();
        let client = LocalClient::start(LocalConfig::new(dir.path().join("absent.gguf"))).unwrap();
        let err = client.chat(ask("local/llama-70b")).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotFound);
        assert!(err.message.contains("local/smollm2-135m"), "{err}");
        let err = client.chat(ask("local/smollm2-135m@t7")).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::BadRequest);
        assert!(
            !dir.path().join("absent.gguf").exists(),
            "nothing was fetched"
        );
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_model_fails_the_call_and_readiness_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.gguf");
        std::fs::write(&path, b"this is not a GGUF file").unwrap();
        let mut config = LocalConfig::new(path);
        config.deadline = Duration::from_secs(30);
        let client = LocalClient::start(config).unwrap();
        assert!(
            client.readiness().ready,
            "not known to be broken before its first use"
        );
        let err = client.chat(ask("local/smollm2-135m")).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::ServerError, "{err}");
        assert!(err.message.contains("broken.gguf"), "{err}");
        let r = client.readiness();
        assert!(!r.ready);
        assert!(r.detail.contains("cannot load"), "{}", r.detail);
    }
}
