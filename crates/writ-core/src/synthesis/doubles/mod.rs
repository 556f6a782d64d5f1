//! Test doubles for the synthesis stages' ports, so a stage is tested without HTTP or a
//! database: a model client answering from a script per model, after a scripted delay (on
//! tokio's clock, so paused-time tests run instantly and exactly); a command runner whose checks
//! pass for the staged contents a test names; an audit store and a workspace in memory
//! ([`store`], [`workspace`]); and the inputs a stage takes (a batch, what it read of the
//! present, candidates).

pub(crate) mod store;
mod workspace;

pub use store::MemoryStore;
pub use workspace::MemoryWorkspace;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use crate::audit::CandidateRecord;
use crate::execution::{CommandCall, CommandRunner, RunError, RunLimits, RunOutcome};
use crate::model::{
    ChatRequest, ChatResponse, ErrorClass, ModelClient, ModelError, ProviderReadiness, Usage,
};
use crate::path::RepoPath;
use crate::synthesis::batch::Batch;
use crate::synthesis::fanout::Candidate;
use crate::synthesis::stage::{BatchFile, Chosen, Content, Present, Produced};
use crate::synthesis::submission::Submission;

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
                    cached_tokens: None,
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

/// A batch of code files with these names, each with a short description.
pub fn batch(files: &[&str]) -> Batch {
    let files: Vec<_> = files
        .iter()
        .map(|f| serde_json::json!({"filename": f, "code_description": "does things"}))
        .collect();
    parse(serde_json::json!({"command": "write_codebase", "files": files}))
}

/// The batch `request` (a `write_codebase` body) makes; it must be valid.
pub fn parse(request: serde_json::Value) -> Batch {
    match serde_json::from_value(request).map(Batch::parse) {
        Ok(Ok(batch)) => batch,
        other => panic!("the test batch is valid: {other:?}"),
    }
}

/// `batch` as submitted without a key, an idempotency key or a body.
pub fn submission(batch: Batch) -> Submission {
    Submission {
        request_id: uuid::Uuid::now_v7(),
        caller: None,
        scope: None,
        idempotency_key: None,
        body_sha256: String::new(),
        body: None,
        batch,
        workspace: crate::workspace_registry::WorkspaceName::DEFAULT.to_owned(),
    }
}

/// A synthesizer over `workspace` whose one candidate model, `alpha`, is never asked: for the
/// checks made before any model is called.
pub fn synthesizer(workspace: MemoryWorkspace) -> crate::synthesis::Synthesizer {
    crate::synthesis::Synthesizer::new(
        std::sync::Arc::new(ScriptedModels::default()),
        std::sync::Arc::new(MemoryStore::default()),
        std::sync::Arc::new(workspace),
        crate::synthesis::SynthesisConfig {
            candidates: vec!["alpha".into()],
            ..crate::synthesis::SynthesisConfig::default()
        },
    )
}

/// What a batch read of a present where none of its files exist and nothing was done before.
pub fn present(batch: &Batch) -> Present {
    Present {
        recent: Vec::new(),
        files: batch.files().iter().cloned().map(BatchFile::new).collect(),
        named: Vec::new(),
        map: Default::default(),
        earlier: None,
        routing: None,
        degraded: None,
    }
}

/// A viable candidate of `model`.
pub fn viable(model: &str, code: &str) -> Candidate {
    Candidate {
        record: CandidateRecord {
            model: model.to_string(),
            ok: true,
            parsed: Some(true),
            ..CandidateRecord::default()
        },
        code: Some(code.to_string()),
    }
}

/// A file whose model `alpha` wrote `code`, chosen as the only candidate.
pub(crate) fn chosen(code: &str) -> Produced {
    Produced {
        chosen: Ok(Chosen {
            content: Content::Code(code.to_string()),
            model: "alpha".into(),
            selection: crate::audit::Selection::SingleCandidate,
            reason: None,
            formatted: None,
        }),
        candidates: vec![viable("alpha", code).record],
        validation: None,
        existing: None,
    }
}

/// A candidate of `model` that failed with `class`.
pub fn failed(model: &str, class: ErrorClass) -> Candidate {
    Candidate {
        record: CandidateRecord {
            model: model.to_string(),
            error_class: Some(class),
            error: Some(format!("scripted failure ({})", class.as_str())),
            ..CandidateRecord::default()
        },
        code: None,
    }
}

/// Runs no command: a run passes when what it staged is one of the passing sets (each a list
/// of `(path, content)`), and every run's staged files are recorded.
#[derive(Default)]
pub struct ScriptedChecks {
    passing: Vec<Vec<(String, String)>>,
    pub runs: Mutex<Vec<Vec<(String, String)>>>,
}

impl ScriptedChecks {
    pub fn passing_with(mut self, staged: &[(&str, &str)]) -> Self {
        let mut set: Vec<(String, String)> = staged
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_string()))
            .collect();
        set.sort();
        self.passing.push(set);
        self
    }
}

#[async_trait]
impl CommandRunner for ScriptedChecks {
    fn check(&self, _call: &CommandCall, _field: &str) -> Result<(), RunError> {
        Ok(())
    }

    fn limits(&self) -> RunLimits {
        RunLimits {
            max_timeout: Duration::from_secs(60),
            max_repair_rounds: 3,
        }
    }

    async fn run(
        &self,
        staged: &[(RepoPath, Vec<u8>)],
        calls: &[CommandCall],
        _timeout: Duration,
    ) -> Result<Vec<RunOutcome>, RunError> {
        let mut set: Vec<(String, String)> = staged
            .iter()
            .map(|(p, c)| (p.to_string(), String::from_utf8_lossy(c).into_owned()))
            .collect();
        set.sort();
        let passed = self.passing.contains(&set);
        if let Ok(mut runs) = self.runs.lock() {
            runs.push(set);
        }
        Ok(calls
            .iter()
            .map(|_| RunOutcome {
                exit_code: Some(if passed { 0 } else { 1 }),
                stdout: String::new(),
                stderr: if passed {
                    String::new()
                } else {
                    "1 failed".into()
                },
                duration_ms: 1,
                timed_out: false,
                truncated: false,
                missing_evidence: None,
                limit_reached: None,
            })
            .take(if passed { calls.len() } else { 1 })
            .collect())
    }
}
