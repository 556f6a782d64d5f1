//! Generation on llama.cpp: one process-wide backend, the loaded models ([`Registry`], within a
//! memory budget), and a fixed pool of worker threads fed by a bounded FIFO queue. Each worker
//! owns a context for the model of the call it runs (a `LlamaContext` is not `Send`), made anew
//! when the next call is for another model, so inference never runs on the async runtime's
//! threads and cannot starve HTTP.

use std::collections::BTreeMap;
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
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use writ_core::model::{CallPurpose, ChatMessage, Role};

use crate::catalogue::LocalModel;
use crate::identity::{self, Hashing, Identity};
use crate::{fetch, gguf};

/// How the embedded provider runs; every field has a `WRIT_LOCAL_*` variable in writ-server.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Where fetched models live; a model's file is `<model_dir>/<its file name>` unless
    /// [`Self::files`] names another.
    pub model_dir: PathBuf,
    /// Files given by path, by model name (`qwen2.5-coder-1.5b`).
    pub files: BTreeMap<String, PathBuf>,
    /// The models writ is configured to call, for readiness.
    pub models: Vec<&'static LocalModel>,
    /// Generations that run at once. More than one on a small box only makes each slower.
    pub workers: usize,
    /// ggml threads per worker. ggml spin-waits, so more threads than idle cores collapses
    /// throughput; the default is half the cores.
    pub threads: usize,
    /// Context window per worker (prompt + completion), in tokens; never more than the model
    /// was trained for (its GGUF's context length).
    pub context_tokens: u32,
    /// An operator's cap on every call's completion, over the caps by purpose.
    pub max_tokens: Option<u32>,
    /// Bound on one generation, from when a worker starts it; and, apart, on its wait in the
    /// queue (on a CPU, three candidates of a 1.5B model take minutes one after another, so one
    /// bound over both would fail the third for the first two's time).
    pub deadline: Duration,
    /// Calls waiting beyond this are refused at once (rate_limited) instead of piling up.
    pub queue_capacity: usize,
    /// Replays answers computed before (evaluations only; see [`crate::cache`]).
    pub answer_cache: Option<PathBuf>,
    /// Bytes the loaded models may take (file plus [`LocalModel::runtime_bytes`] per worker);
    /// the least recently used are unloaded to make room.
    pub memory_budget: u64,
}

impl LocalConfig {
    pub fn new(model_dir: PathBuf) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            model_dir,
            files: BTreeMap::new(),
            models: vec![&crate::catalogue::SMOLLM2_135M],
            workers: 1,
            threads: (cores / 2).max(1),
            context_tokens: 4096,
            max_tokens: None,
            deadline: Duration::from_secs(600),
            queue_capacity: 64,
            memory_budget: 4 << 30,
            answer_cache: None,
        }
    }

    /// The file `model` is served from.
    pub fn path_of(&self, model: &LocalModel) -> PathBuf {
        self.files
            .get(model.name)
            .cloned()
            .unwrap_or_else(|| self.model_dir.join(model.file_name))
    }

    /// The completion cap of a call for `purpose`: whole files and test files need room (a
    /// HumanEval solution is 100–400 tokens, a test file 300–1,200); a verdict is short and its
    /// grammar bounds it anyway.
    pub fn cap_for(&self, purpose: CallPurpose) -> u32 {
        let by_purpose = match purpose {
            CallPurpose::Candidate | CallPurpose::Repair | CallPurpose::TestWriter => 2048,
            CallPurpose::Arbiter | CallPurpose::Distinguishing | CallPurpose::Image => 512,
        };
        self.max_tokens.map_or(by_purpose, |m| m.min(by_purpose))
    }
}

/// One generation to run.
pub(crate) struct Job {
    pub model: &'static LocalModel,
    pub purpose: CallPurpose,
    pub messages: Vec<ChatMessage>,
    pub temperature: f32,
    pub seed: u32,
    pub max_tokens: u32,
    /// A GBNF grammar the answer must follow (the arbiter's verdict), if any.
    pub grammar: Option<String>,
    pub queued_at: Instant,
    pub reply: tokio::sync::oneshot::Sender<Result<Generated, GenError>>,
}

#[derive(Debug)]
pub(crate) struct Generated {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish_reason: &'static str,
    /// Time generating, queue wait excluded.
    pub generating: Duration,
    /// The cap this call had.
    pub cap: u32,
}

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GenError {
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    NotTheModel(String),
    #[error("{0}")]
    PromptTooLong(String),
    #[error("generation ran past its {0}s deadline (WRIT_LOCAL_DEADLINE_SECS)")]
    Deadline(u64),
    #[error("waited {0}s in the local model's queue without starting (WRIT_LOCAL_DEADLINE_SECS)")]
    QueueWait(u64),
    #[error("{0}")]
    Inference(String),
}

/// A model in memory.
pub(crate) struct Loaded {
    pub spec: &'static LocalModel,
    pub model: LlamaModel,
    pub template: LlamaChatTemplate,
    /// The context the model was trained for (its GGUF's).
    pub trained_context: u32,
    pub identity: Identity,
    bytes: u64,
}

/// The loaded models, least recently used first out when the budget is short; and each model's
/// last load failure, for readiness.
#[derive(Default)]
pub(crate) struct Registry {
    loaded: Vec<(Arc<Loaded>, Instant)>,
    pub failures: BTreeMap<&'static str, String>,
}

impl Registry {
    pub fn state(&self, name: &str) -> Option<&Identity> {
        self.loaded
            .iter()
            .find(|(l, _)| l.spec.name == name)
            .map(|(l, _)| &l.identity)
    }
}

/// State the workers share and readiness reports.
#[derive(Default)]
pub(crate) struct Shared {
    pub registry: Mutex<Registry>,
    /// llama.cpp may adjust a model while creating a context, so workers create theirs one at a
    /// time.
    context_creation: Mutex<()>,
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
    // A model is loaded on the first call for it, not at start-up, so a writ that never
    // generates locally (tests, OpenRouter users) never reads a file.
    let mut pending: Option<Job> = None;
    loop {
        let Some(first) = pending.take().or_else(|| next_job(rx)) else {
            return;
        };
        // The caller gave up (deadline, client gone): do not spend a core on nobody.
        if first.reply.is_closed() {
            continue;
        }
        let loaded = match load(shared, config, first.model) {
            Ok(l) => l,
            Err(e) => {
                let _ = first.reply.send(Err(e));
                continue;
            }
        };
        let backend = match backend() {
            Ok(b) => b,
            Err(e) => {
                let _ = first.reply.send(Err(GenError::Unavailable(e)));
                continue;
            }
        };
        let n_ctx = config.context_tokens.min(loaded.trained_context).max(256);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(512)
            .with_n_threads(config.threads.max(1) as i32)
            .with_n_threads_batch(config.threads.max(1) as i32);
        let created = {
            let _one_at_a_time = shared.context_creation.lock();
            loaded.model.new_context(backend, params)
        };
        let mut ctx = match created {
            Ok(c) => c,
            Err(e) => {
                let message = format!("creating a llama.cpp context for {}: {e}", loaded.spec.id());
                if let Ok(mut r) = shared.registry.lock() {
                    r.failures.insert(loaded.spec.name, message.clone());
                }
                let _ = first.reply.send(Err(GenError::Unavailable(message)));
                continue;
            }
        };
        let mut job = Some(first);
        while let Some(j) = job.take().or_else(|| next_job(rx)) {
            if j.model.name != loaded.spec.name {
                pending = Some(j);
                break;
            }
            if j.reply.is_closed() {
                continue;
            }
            if j.queued_at.elapsed() > config.deadline {
                let _ = j
                    .reply
                    .send(Err(GenError::QueueWait(j.queued_at.elapsed().as_secs())));
                continue;
            }
            let deadline = Instant::now() + config.deadline;
            let result = generate(&loaded, &mut ctx, &j, deadline, config.deadline);
            ctx.clear_kv_cache();
            let _ = j.reply.send(result);
        }
        if pending.is_none() {
            return;
        }
    }
}

/// `spec` in memory: loaded now (its file fetched when it is fetched on first use, and checked
/// to be that model) unless it already is, after unloading the least recently used models the
/// budget has no room beside.
fn load(
    shared: &Shared,
    config: &LocalConfig,
    spec: &'static LocalModel,
) -> Result<Arc<Loaded>, GenError> {
    let backend = backend().map_err(GenError::Unavailable)?;
    let mut registry = shared
        .registry
        .lock()
        .map_err(|_| GenError::Unavailable("the local models' lock is poisoned".into()))?;
    if let Some((loaded, used)) = registry
        .loaded
        .iter_mut()
        .find(|(l, _)| l.spec.name == spec.name)
    {
        *used = Instant::now();
        return Ok(loaded.clone());
    }
    let result = load_file(backend, config, spec);
    match &result {
        Ok(loaded) => {
            registry.failures.remove(spec.name);
            let room = config.memory_budget.saturating_sub(loaded.bytes);
            registry.loaded.sort_by_key(|(_, used)| *used);
            while registry.loaded.iter().map(|(l, _)| l.bytes).sum::<u64>() > room
                && !registry.loaded.is_empty()
            {
                let (evicted, _) = registry.loaded.remove(0);
                tracing::info!(model = %evicted.spec.id(), "local model unloaded to make room (WRIT_LOCAL_MEMORY_MB)");
            }
            registry.loaded.push((loaded.clone(), Instant::now()));
        }
        Err(e) => {
            registry.failures.insert(spec.name, e.to_string());
        }
    }
    result
}

fn load_file(
    backend: &'static LlamaBackend,
    config: &LocalConfig,
    spec: &'static LocalModel,
) -> Result<Arc<Loaded>, GenError> {
    let path = fetch::ensure_model(spec, &config.path_of(spec))
        .map_err(|e| GenError::Unavailable(e.to_string()))?;
    let identity = identity::check(spec, &path, Hashing::Always).map_err(|e| match e {
        identity::IdentityError::NotTheModel { .. } => GenError::NotTheModel(e.to_string()),
        other => GenError::Unavailable(other.to_string()),
    })?;
    if let Identity::Unpinned { sha256 } = &identity {
        tracing::warn!(model = %spec.id(), path = %path.display(), sha256, "serving a file that names the model but is not its pinned build");
    }
    let header = gguf::read_header(&path).map_err(|e| GenError::Unavailable(e.to_string()))?;
    let started = Instant::now();
    let model = LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default())
        .map_err(|e| GenError::Unavailable(format!("loading {}: {e}", path.display())))?;
    // The GGUF's own template; where it carries none, llama.cpp's built-in one for the family.
    let template = match (model.chat_template(None), spec.template_fallback) {
        (Ok(t), _) => t,
        (Err(_), Some(name)) => LlamaChatTemplate::new(name)
            .map_err(|e| GenError::Inference(format!("the chat template: {e}")))?,
        (Err(e), None) => {
            return Err(GenError::Unavailable(format!(
                "{} has no chat template: {e}",
                path.display()
            )));
        }
    };
    tracing::info!(model = %spec.id(), path = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, identity = %identity.describe(), "local model loaded");
    let workers = config.workers.max(1) as u64;
    Ok(Arc::new(Loaded {
        spec,
        model,
        template,
        trained_context: header
            .context_length
            .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        identity,
        bytes: spec.bytes + spec.runtime_bytes * workers,
    }))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// Whether an answer for `purpose` ends once its fenced block closes: writ asks for a whole file
/// in one block, so past it is prose the extractor drops. A test writer may answer in several
/// blocks (the file, then the tests), so it runs to its end-of-turn token.
fn stops_at_closed_fence(purpose: CallPurpose) -> bool {
    matches!(purpose, CallPurpose::Candidate | CallPurpose::Repair)
}

fn generate(
    loaded: &Loaded,
    ctx: &mut LlamaContext<'_>,
    job: &Job,
    deadline: Instant,
    limit: Duration,
) -> Result<Generated, GenError> {
    let started = Instant::now();
    let model = &loaded.model;
    let inference =
        |what: &str, e: &dyn std::fmt::Display| GenError::Inference(format!("{what}: {e}"));
    let messages = job
        .messages
        .iter()
        .map(|m| LlamaChatMessage::new(role_name(m.role).to_string(), m.content.replace('\0', "")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| inference("building the chat", &e))?;
    let prompt = model
        .apply_chat_template(&loaded.template, &messages, true)
        .map_err(|e| inference("applying the chat template", &e))?;

    let vocab = model.vocab();
    let tokens = vocab.tokenize(prompt.as_bytes(), true, true);
    let n_ctx = ctx.n_ctx() as usize;
    if tokens.len() + 16 > n_ctx {
        return Err(GenError::PromptTooLong(format!(
            "the prompt is {} tokens; {}'s context holds {n_ctx} (WRIT_LOCAL_CONTEXT_TOKENS)",
            tokens.len(),
            loaded.spec.id()
        )));
    }
    let budget = (n_ctx - tokens.len()).min(job.max_tokens as usize);

    let n_batch = ctx.n_batch() as usize;
    let mut batch = LlamaBatch::new(n_batch.max(1), 1);
    for (chunk_index, chunk) in tokens.chunks(n_batch.max(1)).enumerate() {
        if Instant::now() >= deadline || job.reply.is_closed() {
            return Err(GenError::Deadline(limit.as_secs()));
        }
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

    let mut samplers = Vec::new();
    if loaded.spec.repeat_penalty > 1.0 {
        // Tiny models fall into loops; a mild penalty keeps them moving. Coder models are left
        // alone: code repeats tokens by nature.
        samplers.push(LlamaSampler::penalties(
            model.n_vocab(),
            64,
            loaded.spec.repeat_penalty,
            0.0,
            0.0,
        ));
    }
    if let Some(g) = &job.grammar {
        samplers.push(
            LlamaSampler::grammar(model, g, "root")
                .map_err(|e| inference("the answer grammar", &e))?,
        );
    }
    if job.temperature <= 0.0 {
        samplers.push(LlamaSampler::greedy());
    } else {
        samplers.extend([
            LlamaSampler::top_k(40),
            LlamaSampler::top_p(0.95, 1),
            LlamaSampler::temp(job.temperature),
            LlamaSampler::dist(job.seed),
        ]);
    }
    let mut sampler = LlamaSampler::chain_simple(samplers);

    let mut out: Vec<u8> = Vec::new();
    let mut pos = tokens.len() as i32;
    let mut produced = 0usize;
    let mut finish = "length";
    let mut last_index = batch.n_tokens() - 1;
    let fence_stops = stops_at_closed_fence(job.purpose);
    while produced < budget {
        if Instant::now() >= deadline || job.reply.is_closed() {
            return Err(GenError::Deadline(limit.as_secs()));
        }
        let token = sampler.sample(ctx, last_index);
        // The end-of-generation tokens are the GGUF's own (end of turn, end of text).
        if vocab.is_eog(token) {
            finish = "stop";
            break;
        }
        produced += 1;
        let piece = vocab.token_to_piece(token, false, None);
        out.extend_from_slice(&piece);
        if fence_stops && piece.contains(&b'\n') && fenced_block_closed(&out) {
            finish = "stop";
            break;
        }
        if piece.contains(&b'\n') && writ_core::looping::looping(&out) {
            // Cut, as at the cap: the rest would only repeat itself until the cap.
            tracing::info!(
                model = %loaded.spec.id(),
                tokens = produced,
                "stopped an answer that repeats itself"
            );
            finish = "repetition";
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
        generating: started.elapsed(),
        cap: budget as u32,
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
        let c = LocalConfig::new(PathBuf::from("models"));
        assert_eq!(c.workers, 1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(c.threads >= 1 && c.threads <= cores.max(1));
        assert!(c.cap_for(CallPurpose::Candidate) < c.context_tokens);
    }

    #[test]
    fn files_and_tests_get_room_a_verdict_does_not_and_an_operator_cap_bounds_all() {
        let mut c = LocalConfig::new(PathBuf::from("models"));
        assert!(c.cap_for(CallPurpose::TestWriter) >= 2048);
        assert!(c.cap_for(CallPurpose::Candidate) >= 2048);
        assert!(c.cap_for(CallPurpose::Arbiter) <= 512);
        c.max_tokens = Some(300);
        assert_eq!(c.cap_for(CallPurpose::TestWriter), 300);
        assert_eq!(c.cap_for(CallPurpose::Arbiter), 300);
    }

    #[test]
    fn a_test_writer_is_not_stopped_at_its_first_closed_block() {
        assert!(stops_at_closed_fence(CallPurpose::Candidate));
        assert!(stops_at_closed_fence(CallPurpose::Repair));
        assert!(!stops_at_closed_fence(CallPurpose::TestWriter));
    }

    #[test]
    fn a_model_given_by_path_is_served_from_there_and_the_others_from_the_model_dir() {
        let mut c = LocalConfig::new(PathBuf::from("/models"));
        c.files
            .insert("gemma-3-270m".into(), PathBuf::from("/elsewhere/g.gguf"));
        assert_eq!(
            c.path_of(&crate::catalogue::GEMMA3_270M),
            PathBuf::from("/elsewhere/g.gguf")
        );
        assert_eq!(
            c.path_of(&crate::catalogue::QWEN25_CODER_1_5B),
            PathBuf::from("/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
        );
    }
}
