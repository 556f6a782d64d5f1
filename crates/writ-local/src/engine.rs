//! Generation on llama.cpp: one process-wide backend, one shared model, and a fixed pool of worker
//! threads fed by a bounded FIFO queue. Each worker owns its own context (a `LlamaContext` is not
//! `Send`), so inference never runs on the async runtime's threads and cannot starve HTTP.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use writ_core::model::{ChatMessage, Role};

use crate::fetch;

/// How the embedded provider runs; every field has a `WRIT_LOCAL_*` variable in writ-server.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The GGUF file; fetched there on first use when missing.
    pub model_path: PathBuf,
    /// Generations that run at once. More than one on a small box only makes each slower.
    pub workers: usize,
    /// ggml threads per worker. ggml spin-waits, so more threads than idle cores collapses
    /// throughput; the default is half the cores.
    pub threads: usize,
    /// Context window per worker (prompt + completion), in tokens.
    pub context_tokens: u32,
    /// Completion cap, whatever the request asks for: a toy model that loops must stop somewhere.
    pub max_tokens: u32,
    /// Bound on one call, time waiting in the queue included.
    pub deadline: Duration,
    /// Calls waiting beyond this are refused at once (rate_limited) instead of piling up.
    pub queue_capacity: usize,
}

impl LocalConfig {
    pub fn new(model_path: PathBuf) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            model_path,
            workers: 1,
            threads: (cores / 2).max(1),
            context_tokens: 4096,
            max_tokens: 512,
            deadline: Duration::from_secs(120),
            queue_capacity: 64,
        }
    }
}

/// One generation to run.
pub(crate) struct Job {
    pub messages: Vec<ChatMessage>,
    pub temperature: f32,
    pub seed: u32,
    pub max_tokens: u32,
    /// A GBNF grammar the answer must follow (the arbiter's verdict), if any.
    pub grammar: Option<String>,
    pub deadline: Instant,
    pub reply: tokio::sync::oneshot::Sender<Result<Generated, GenError>>,
}

#[derive(Debug)]
pub(crate) struct Generated {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish_reason: &'static str,
}

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GenError {
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    PromptTooLong(String),
    #[error("the deadline passed before generation finished")]
    Deadline,
    #[error("{0}")]
    Inference(String),
}

/// State the workers share and readiness reports.
#[derive(Default)]
pub(crate) struct Shared {
    model: Mutex<Option<Arc<LlamaModel>>>,
    /// The last load failure, cleared by a successful load.
    pub last_error: Mutex<Option<String>>,
    /// llama.cpp may adjust the model while creating a context, so workers create theirs one
    /// at a time.
    context_creation: Mutex<()>,
}

impl Shared {
    pub fn loaded(&self) -> bool {
        self.model.lock().map(|m| m.is_some()).unwrap_or(false)
    }
}

fn backend() -> Result<&'static LlamaBackend, String> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs every tensor at load; our own errors carry what matters.
            llama_cpp_2::send_logs_to_tracing(
                llama_cpp_2::LogOptions::default().with_logs_enabled(false),
            );
            LlamaBackend::init().map_err(|e| format!("llama.cpp backend: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The worker pool. Dropping it closes the queue and waits for the workers: a worker still inside
/// llama.cpp while the process exits would crash in ggml's teardown.
pub(crate) struct Pool {
    queue: Option<SyncSender<Job>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    pub shared: Arc<Shared>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.queue.take();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Pool {
    pub fn start(config: &LocalConfig) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(config.queue_capacity.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let shared = Arc::new(Shared::default());
        let mut workers = Vec::new();
        for i in 0..config.workers.max(1) {
            let (rx, shared, config) = (rx.clone(), shared.clone(), config.clone());
            workers.push(
                std::thread::Builder::new()
                    .name(format!("writ-local-{i}"))
                    .spawn(move || worker(&rx, &shared, &config))?,
            );
        }
        Ok(Self {
            queue: Some(tx),
            workers,
            shared,
        })
    }

    /// Queues `job` behind those already waiting (FIFO); a full queue is refused, not waited on.
    pub fn submit(&self, job: Job) -> Result<(), GenError> {
        let Some(queue) = &self.queue else {
            return Err(GenError::Unavailable(
                "the local model is shutting down".into(),
            ));
        };
        match queue.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(GenError::Unavailable(
                "the local model's queue is full; try again shortly".into(),
            )),
            Err(TrySendError::Disconnected(_)) => Err(GenError::Unavailable(
                "the local model's workers have stopped".into(),
            )),
        }
    }
}

fn next_job(rx: &Mutex<Receiver<Job>>) -> Option<Job> {
    rx.lock().ok()?.recv().ok()
}

fn worker(rx: &Mutex<Receiver<Job>>, shared: &Shared, config: &LocalConfig) {
    // The model is loaded on the first job, not at start-up, so a writ that never generates
    // locally (tests, OpenRouter users) never reads the file.
    let (model, backend, first) = loop {
        let Some(job) = next_job(rx) else { return };
        match load_model(shared, config) {
            Ok((model, backend)) => break (model, backend, job),
            Err(e) => {
                let _ = job.reply.send(Err(GenError::Unavailable(e)));
            }
        }
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(config.context_tokens.max(256)))
        .with_n_batch(512)
        .with_n_threads(config.threads.max(1) as i32)
        .with_n_threads_batch(config.threads.max(1) as i32);
    let created = {
        let _one_at_a_time = shared.context_creation.lock();
        model.new_context(backend, params)
    };
    let mut ctx = match created {
        Ok(c) => c,
        Err(e) => {
            let message = format!("creating a llama.cpp context: {e}");
            if let Ok(mut last) = shared.last_error.lock() {
                *last = Some(message.clone());
            }
            let _ = first
                .reply
                .send(Err(GenError::Unavailable(message.clone())));
            while let Some(job) = next_job(rx) {
                let _ = job.reply.send(Err(GenError::Unavailable(message.clone())));
            }
            return;
        }
    };
    let mut job = Some(first);
    while let Some(j) = job.take().or_else(|| next_job(rx)) {
        // The caller gave up (deadline, client gone): do not spend a core on nobody.
        if j.reply.is_closed() {
            continue;
        }
        let result = if Instant::now() >= j.deadline {
            Err(GenError::Deadline)
        } else {
            generate(&model, &mut ctx, &j)
        };
        ctx.clear_kv_cache();
        let _ = j.reply.send(result);
    }
}

fn load_model(
    shared: &Shared,
    config: &LocalConfig,
) -> Result<(Arc<LlamaModel>, &'static LlamaBackend), String> {
    let backend = backend()?;
    let mut slot = shared
        .model
        .lock()
        .map_err(|_| "the local model's lock is poisoned".to_string())?;
    if let Some(m) = slot.as_ref() {
        return Ok((m.clone(), backend));
    }
    let result = fetch::ensure_model(&config.model_path)
        .map_err(|e| e.to_string())
        .and_then(|path| {
            let started = Instant::now();
            let model = LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default())
                .map_err(|e| format!("loading {}: {e}", path.display()))?;
            tracing::info!(path = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "embedded model loaded");
            Ok(Arc::new(model))
        });
    if let Ok(mut last) = shared.last_error.lock() {
        *last = result.as_ref().err().cloned();
    }
    let model = result?;
    *slot = Some(model.clone());
    Ok((model, backend))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn generate(
    model: &LlamaModel,
    ctx: &mut LlamaContext<'_>,
    job: &Job,
) -> Result<Generated, GenError> {
    let inference =
        |what: &str, e: &dyn std::fmt::Display| GenError::Inference(format!("{what}: {e}"));
    let template = model
        .chat_template(None)
        .map_err(|e| inference("the model has no chat template", &e))?;
    let messages = job
        .messages
        .iter()
        .map(|m| LlamaChatMessage::new(role_name(m.role).to_string(), m.content.replace('\0', "")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| inference("building the chat", &e))?;
    let prompt = model
        .apply_chat_template(&template, &messages, true)
        .map_err(|e| inference("applying the chat template", &e))?;

    let vocab = model.vocab();
    let tokens = vocab.tokenize(prompt.as_bytes(), true, true);
    let n_ctx = ctx.n_ctx() as usize;
    if tokens.len() + 16 > n_ctx {
        return Err(GenError::PromptTooLong(format!(
            "the prompt is {} tokens; the local model's context holds {n_ctx} (WRIT_LOCAL_CONTEXT_TOKENS)",
            tokens.len()
        )));
    }
    let budget = (n_ctx - tokens.len()).min(job.max_tokens as usize);

    let n_batch = ctx.n_batch() as usize;
    let mut batch = LlamaBatch::new(n_batch.max(1), 1);
    for (chunk_index, chunk) in tokens.chunks(n_batch.max(1)).enumerate() {
        batch.clear();
        let base = chunk_index * n_batch;
        for (i, t) in chunk.iter().enumerate() {
            let pos = (base + i) as i32;
            let last = base + i == tokens.len() - 1;
            batch
                .add(*t, pos, &[0], last)
                .map_err(|e| inference("filling the batch", &e))?;
        }
        ctx.decode(&mut batch)
            .map_err(|e| inference("reading the prompt", &e))?;
    }

    // Small models fall into loops; a mild penalty keeps them moving without mangling code.
    let penalty = LlamaSampler::penalties(model.n_vocab(), 64, 1.1, 0.0, 0.0);
    let pick = if job.temperature <= 0.0 {
        LlamaSampler::chain_simple([penalty, LlamaSampler::greedy()])
    } else {
        LlamaSampler::chain_simple([
            penalty,
            LlamaSampler::top_k(40),
            LlamaSampler::top_p(0.95, 1),
            LlamaSampler::temp(job.temperature),
            LlamaSampler::dist(job.seed),
        ])
    };
    let mut sampler = match &job.grammar {
        Some(g) => LlamaSampler::chain_simple([
            LlamaSampler::grammar(model, g, "root")
                .map_err(|e| inference("the answer grammar", &e))?,
            pick,
        ]),
        None => pick,
    };

    let mut out: Vec<u8> = Vec::new();
    let mut pos = tokens.len() as i32;
    let mut produced = 0usize;
    let mut finish = "length";
    let mut last_index = batch.n_tokens() - 1;
    while produced < budget {
        if Instant::now() >= job.deadline || job.reply.is_closed() {
            return Err(GenError::Deadline);
        }
        let token = sampler.sample(ctx, last_index);
        if vocab.is_eog(token) {
            finish = "stop";
            break;
        }
        produced += 1;
        let piece = vocab.token_to_piece(token, false, None);
        out.extend_from_slice(&piece);
        if piece.contains(&b'\n') && fenced_block_closed(&out) {
            finish = "stop";
            break;
        }
        batch.clear();
        batch
            .add(token, pos, &[0], true)
            .map_err(|e| inference("filling the batch", &e))?;
        pos += 1;
        last_index = 0;
        ctx.decode(&mut batch)
            .map_err(|e| inference("generating", &e))?;
    }
    Ok(Generated {
        text: String::from_utf8_lossy(&out).into_owned(),
        prompt_tokens: tokens.len() as u64,
        completion_tokens: produced as u64,
        finish_reason: finish,
    })
}

/// writ asks for the whole file in one fenced block; once that block is closed, anything more is
/// prose the extractor throws away, so stop paying for it.
pub(crate) fn fenced_block_closed(text: &[u8]) -> bool {
    let text = String::from_utf8_lossy(text);
    let fences = text
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    fences >= 2 && text.ends_with('\n')
}

/// Whether the text opened a fenced block it never closed.
pub(crate) fn has_open_fence(text: &str) -> bool {
    text.lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        % 2
        == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_counts_as_closed_only_after_its_closing_fence_line() {
        assert!(!fenced_block_closed(b"```python\nx = 1\n"));
        assert!(!fenced_block_closed(b"```python\nx = 1\n```"));
        assert!(fenced_block_closed(b"Here:\n```python\nx = 1\n```\n"));
    }

    #[test]
    fn an_unclosed_fence_is_seen() {
        assert!(has_open_fence("Here:\n```python\nx = 1"));
        assert!(!has_open_fence("```python\nx = 1\n```"));
        assert!(!has_open_fence("just prose"));
    }

    #[test]
    fn defaults_keep_one_worker_and_leave_a_core_free() {
        let c = LocalConfig::new(PathBuf::from("m.gguf"));
        assert_eq!(c.workers, 1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(c.threads >= 1 && c.threads <= cores.max(1));
        assert!(c.max_tokens <= c.context_tokens);
    }
}
