//! Test doubles for the synthesis stages' ports, so a stage is tested without HTTP or a
//! database: a model client answering from a script per model, after a scripted delay (on
//! tokio's clock, so paused-time tests run instantly and exactly).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use crate::model::{
    ChatRequest, ChatResponse, ErrorClass, ModelClient, ModelError, ProviderReadiness, Usage,
};

/// One scripted answer: after `delay`, this content (or this failure).
#[derive(Clone)]
pub struct Answer {
    pub delay: Duration,
    pub outcome: Result<String, ErrorClass>,
}

impl Answer {
    pub fn after(ms: u64, content: &str) -> Self {
        Answer {
            delay: Duration::from_millis(ms),
            outcome: Ok(content.to_string()),
        }
    }
}

/// Answers each model from its script in order (the last answer repeats) and records every
/// request.
#[derive(Default)]
pub struct ScriptedModels {
    scripts: Mutex<HashMap<String, Vec<Answer>>>,
    pub requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModels {
    pub fn with(self, model: &str, answers: Vec<Answer>) -> Self {
        if let Ok(mut s) = self.scripts.lock() {
            s.insert(model.to_string(), answers);
        }
        self
    }

    pub fn requests_to(&self, model: &str) -> Vec<ChatRequest> {
        self.requests
            .lock()
            .map(|r| r.iter().filter(|q| q.model == model).cloned().collect())
            .unwrap_or_default()
    }
}

#[async_trait]
impl ModelClient for ScriptedModels {
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let answer = {
            let mut scripts = self
                .scripts
                .lock()
                .map_err(|_| fail(&req.model, ErrorClass::ServerError))?;
            let script = scripts.entry(req.model.clone()).or_default();
            match script.len() {
                0 => None,
                1 => script.first().cloned(),
                _ => Some(script.remove(0)),
            }
        };
        if let Ok(mut r) = self.requests.lock() {
            r.push(req.clone());
        }
        let Some(answer) = answer else {
            return Err(fail(&req.model, ErrorClass::NotFound));
        };
        tokio::time::sleep(answer.delay).await;
        match answer.outcome {
            Ok(content) => Ok(ChatResponse {
                usage: Usage {
                    prompt_tokens: Some(10),
                    completion_tokens: Some(content.len() as u64 / 4 + 1),
                    cost: None,
                },
                content,
                latency: answer.delay,
                attempts: 1,
                ..ChatResponse::default()
            }),
            Err(class) => Err(fail(&req.model, class)),
        }
    }

    fn readiness(&self) -> ProviderReadiness {
        ProviderReadiness {
            name: "scripted".into(),
            ready: true,
            detail: String::new(),
        }
    }
}

fn fail(model: &str, class: ErrorClass) -> ModelError {
    ModelError {
        model: model.to_string(),
        class,
        status: None,
        message: format!("scripted failure ({})", class.as_str()),
        attempts: 1,
        latency: Duration::ZERO,
    }
}
