//! [`LocalClient`]: the embedded model behind writ's [`ModelClient`] trait, so the synthesis
//! pipeline (fan-out, checks, arbiter, audit) runs unchanged offline.

use std::time::Instant;

use async_trait::async_trait;
use writ_core::ModelClient;
use writ_core::model::{
    CallPurpose, ChatRequest, ChatResponse, ErrorClass, ModelError, ProviderReadiness, Usage,
};

use crate::cache::{Access, AnswerCache, CachedAnswer};
use crate::catalogue;
use crate::engine::{GenError, Generated, Job, LocalConfig, Pool};
use crate::model_id::LocalModelId;

pub struct LocalClient {
    pool: Pool,
    config: LocalConfig,
    cache: Option<AnswerCache>,
}

impl LocalClient {
    /// Starts the worker pool; each model is loaded (and the default fetched if missing) on its
    /// first call.
    pub fn start(config: LocalConfig) -> std::io::Result<Self> {
        let cache = config
            .answer_cache
            .as_deref()
            .map(AnswerCache::open)
            .transpose()?;
        Ok(Self {
            pool: Pool::start(&config)?,
            config,
            cache,
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
        let Some(spec) = catalogue::find(&id.base) else {
            return Err(fail(
                ErrorClass::NotFound,
                format!(
                    "no embedded model '{}': writ embeds {}",
                    id.base,
                    catalogue::names()
                ),
            ));
        };
        let cap = self.config.cap_for(req.purpose);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job {
            model: spec,
            purpose: req.purpose,
            messages: req.messages.clone(),
            temperature: id.temperature.or(req.temperature).unwrap_or(0.2),
            seed: id
                .seed
                .or(req.seed)
                .map_or_else(|| seed_of(&req.model), |s| s as u32),
            max_tokens: req.max_tokens.unwrap_or(cap).min(cap),
            grammar: req.response_format.as_ref().and_then(verdict_grammar),
            queued_at: Instant::now(),
            reply,
        };
        let key = self.cache.as_ref().map(|_| {
            AnswerCache::key(&serde_json::json!({
                "model": req.model,
                "file": self.config.path_of(spec),
                "sha256": spec.sha256,
                "context": self.config.context_tokens,
                "purpose": purpose_name(req.purpose),
                "messages": job.messages.iter().map(|m| (format!("{:?}", m.role), &m.content)).collect::<Vec<_>>(),
                "temperature": job.temperature,
                "seed": job.seed,
                "max_tokens": job.max_tokens,
                "grammar": job.grammar,
            }))
        });
        if let (Some(cache), Some(key)) = (&self.cache, &key)
            && let Some(hit) = cache.get(key)
        {
            cache.record(&Access {
                key: key.clone(),
                model: req.model.clone(),
                purpose: purpose_name(req.purpose).into(),
                hit: true,
                prompt_tokens: hit.prompt_tokens,
                completion_tokens: hit.completion_tokens,
                latency_ms: hit.latency_ms,
            });
            return self.answer(
                &req,
                spec,
                Generated {
                    text: hit.content,
                    prompt_tokens: hit.prompt_tokens,
                    completion_tokens: hit.completion_tokens,
                    finish_reason: match hit.finish_reason.as_str() {
                        "stop" => "stop",
                        "repetition" => "repetition",
                        _ => "length",
                    },
                    generating: std::time::Duration::from_millis(hit.latency_ms),
                    cap: job.max_tokens,
                },
                started,
            );
        }
        self.pool
            .submit(job)
            .map_err(|e| fail(ErrorClass::RateLimited, e.to_string()))?;
        // Dropping `answer` (the caller's future was dropped) tells the worker to stop
        // generating for this call, or not to start it.
        let generated = answer
            .await
            .map_err(|_| fail(ErrorClass::ServerError, "the local worker stopped".into()))?;
        let generated = generated.map_err(|e| {
            let class = match e {
                GenError::Unavailable(_) => ErrorClass::ServerError,
                GenError::NotTheModel(_) => ErrorClass::NotFound,
                GenError::PromptTooLong(_) => ErrorClass::BadRequest,
                GenError::Deadline(_) | GenError::QueueWait(_) => ErrorClass::DeadlineExceeded,
                GenError::Inference(_) => ErrorClass::ServerError,
            };
            fail(class, e.to_string())
        })?;
        if let (Some(cache), Some(key)) = (&self.cache, key) {
            let answer = CachedAnswer {
                key: key.clone(),
                model: req.model.clone(),
                content: generated.text.clone(),
                finish_reason: generated.finish_reason.into(),
                prompt_tokens: generated.prompt_tokens,
                completion_tokens: generated.completion_tokens,
                latency_ms: generated.generating.as_millis() as u64,
            };
            cache.put(&answer);
            cache.record(&Access {
                key,
                model: req.model.clone(),
                purpose: purpose_name(req.purpose).into(),
                hit: false,
                prompt_tokens: answer.prompt_tokens,
                completion_tokens: answer.completion_tokens,
                latency_ms: answer.latency_ms,
            });
        }
        self.answer(&req, spec, generated, started)
    }

    fn readiness(&self) -> ProviderReadiness {
        self.readiness_now()
    }
}

impl LocalClient {
    /// The answer to `req` from what the engine (or the cache) generated.
    fn answer(
        &self,
        req: &ChatRequest,
        spec: &catalogue::LocalModel,
        generated: Generated,
        started: Instant,
    ) -> Result<ChatResponse, ModelError> {
        // A whole file cut at the cap inside its code block is a file with its end missing; a
        // lenient parser may still accept it, so it never becomes a candidate. A cut test file
        // goes back marked `length`: its complete tests are still worth keeping.
        // A file stopped because it repeated itself is junk at its end, fenced or not.
        if generated.finish_reason == "repetition"
            && matches!(req.purpose, CallPurpose::Candidate | CallPurpose::Repair)
        {
            return Err(ModelError {
                model: req.model.clone(),
                class: ErrorClass::BadResponse,
                status: None,
                attempts: 1,
                latency: started.elapsed(),
                message: format!(
                    "the answer fell into a loop (one block of lines repeated over and over) and was stopped there (a {} call); a file that repeats itself is not a candidate",
                    purpose_name(req.purpose)
                ),
            });
        }
        if generated.finish_reason == "length"
            && matches!(req.purpose, CallPurpose::Candidate | CallPurpose::Repair)
            && crate::engine::has_open_fence(&generated.text)
        {
            return Err(ModelError {
                model: req.model.clone(),
                class: ErrorClass::BadResponse,
                status: None,
                attempts: 1,
                latency: started.elapsed(),
                message: format!(
                    "the answer reached its {}-token cap inside its code block (a {} call; WRIT_LOCAL_MAX_TOKENS caps every call); a cut file is not a candidate",
                    generated.cap,
                    purpose_name(req.purpose)
                ),
            });
        }
        metrics::counter!("writ_local_completion_tokens_total", "model" => spec.id())
            .increment(generated.completion_tokens);
        Ok(ChatResponse {
            content: generated.text,
            images: Vec::new(),
            // Cut short either way, for whoever reads the answer.
            finish_reason: Some(
                match generated.finish_reason {
                    "repetition" => "length",
                    other => other,
                }
                .to_string(),
            ),
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

    fn readiness_now(&self) -> ProviderReadiness {
        let (failures, states): (Vec<String>, Vec<String>) = {
            let registry = self.pool.shared.registry.lock();
            let mut failures = Vec::new();
            let mut states = Vec::new();
            for spec in &self.config.models {
                let path = self.config.path_of(spec);
                let failure = registry
                    .as_ref()
                    .ok()
                    .and_then(|r| r.failures.get(spec.name).cloned());
                let loaded = registry
                    .as_ref()
                    .ok()
                    .and_then(|r| r.state(spec.name).cloned());
                match (failure, loaded) {
                    (Some(e), _) => failures.push(format!("{} cannot load: {e}", spec.id())),
                    (None, Some(identity)) => {
                        states.push(format!("{} loaded ({})", spec.id(), identity.describe()));
                    }
                    (None, None) if path.is_file() => states.push(format!(
                        "{} present at {}, loaded on first use",
                        spec.id(),
                        path.display()
                    )),
                    (None, None) if spec.fetch_on_first_use => states.push(format!(
                        "{} missing at {}, fetched on first use",
                        spec.id(),
                        path.display()
                    )),
                    (None, None) => failures.push(format!(
                        "{} is not on this machine ({}): `writ models fetch {}`",
                        spec.id(),
                        path.display(),
                        spec.name
                    )),
                }
            }
            (failures, states)
        };
        let engine = format!(
            "embedded llama.cpp, {} worker(s) x {} thread(s)",
            self.config.workers, self.config.threads
        );
        ProviderReadiness {
            name: "local".into(),
            ready: failures.is_empty(),
            detail: if failures.is_empty() {
                format!("{engine}: {}", states.join("; "))
            } else {
                format!("{engine}: {}", failures.join("; "))
            },
        }
    }
}

fn purpose_name(purpose: CallPurpose) -> &'static str {
    match purpose {
        CallPurpose::Candidate => "candidate",
        CallPurpose::Repair => "repair",
        CallPurpose::Arbiter => "arbiter",
        CallPurpose::TestWriter => "test-writing",
        CallPurpose::Distinguishing => "distinguishing",
        CallPurpose::Image => "image",
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

    #[tokio::test]
    async fn an_answer_stopped_in_a_loop_is_never_a_candidate_and_a_test_file_keeps_it_as_cut() {
        let dir = tempfile::tempdir().unwrap();
        let client = LocalClient::start(LocalConfig::new(dir.path().to_path_buf())).unwrap();
        let looped = || crate::engine::Generated {
            // Unfenced: the open-fence rule alone would let it through.
            text: include_str!("../../writ-core/tests/data/looping/how_many_times_1.py")
                .to_string(),
            prompt_tokens: 10,
            completion_tokens: 400,
            finish_reason: "repetition",
            generating: Duration::from_secs(1),
            cap: 2048,
        };
        let spec = &crate::catalogue::QWEN25_CODER_1_5B;
        for purpose in [CallPurpose::Candidate, CallPurpose::Repair] {
            let req = ChatRequest {
                purpose,
                ..ask("local/qwen2.5-coder-1.5b")
            };
            let err = client
                .answer(&req, spec, looped(), Instant::now())
                .unwrap_err();
            assert_eq!(err.class, ErrorClass::BadResponse);
            assert!(err.message.contains("loop"), "{err}");
        }
        let req = ChatRequest {
            purpose: CallPurpose::TestWriter,
            ..ask("local/qwen2.5-coder-1.5b")
        };
        let answer = client.answer(&req, spec, looped(), Instant::now()).unwrap();
        assert_eq!(answer.finish_reason.as_deref(), Some("length"));
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
        let client = LocalClient::start(LocalConfig::new(dir.path().to_path_buf())).unwrap();
        let err = client.chat(ask("local/llama-70b")).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotFound);
        assert!(err.message.contains("local/smollm2-135m"), "{err}");
        assert!(err.message.contains("local/qwen2.5-coder-1.5b"), "{err}");
        let err = client.chat(ask("local/smollm2-135m@t7")).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::BadRequest);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing was fetched"
        );
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_model_fails_the_call_and_readiness_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.gguf");
        std::fs::write(&path, b"this is not a GGUF file").unwrap();
        let mut config = LocalConfig::new(dir.path().to_path_buf());
        config.files.insert("smollm2-135m".into(), path);
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

    #[tokio::test]
    async fn a_file_given_for_one_model_that_is_another_is_refused_and_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("impostor.gguf");
        std::fs::write(
            &path,
            crate::gguf::tests::header_bytes(&[(
                "general.name",
                crate::gguf::tests::Value::Str("Smollm2 135M 8k Lc100K Mix1 Ep2"),
            )]),
        )
        .unwrap();
        let mut config = LocalConfig::new(dir.path().to_path_buf());
        config.files.insert("qwen2.5-coder-1.5b".into(), path);
        config.models = vec![&crate::catalogue::QWEN25_CODER_1_5B];
        let client = LocalClient::start(config).unwrap();
        let err = client
            .chat(ask("local/qwen2.5-coder-1.5b@t0.2,s1"))
            .await
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::NotFound, "{err}");
        assert!(
            err.message.contains("is not local/qwen2.5-coder-1.5b"),
            "{err}"
        );
        assert!(err.message.contains("Smollm2"), "{err}");
        let r = client.readiness();
        assert!(!r.ready);
        assert!(
            r.detail.contains("is not local/qwen2.5-coder-1.5b"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn a_configured_large_model_that_is_absent_is_not_ready_and_readiness_gives_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = LocalConfig::new(dir.path().to_path_buf());
        config.models = vec![
            &crate::catalogue::SMOLLM2_135M,
            &crate::catalogue::QWEN25_CODER_1_5B,
        ];
        let client = LocalClient::start(config).unwrap();
        let r = client.readiness();
        assert!(!r.ready);
        assert!(
            r.detail.contains("writ models fetch qwen2.5-coder-1.5b"),
            "{}",
            r.detail
        );
    }
}
