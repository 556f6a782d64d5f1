//! The types the synthesis stages share, so that no stage imports another's orchestrator: the
//! dependency bundle ([`Synthesizer`]) and its settings ([`SynthesisConfig`]), what a batch's
//! prompts show of the present ([`Present`]), a file's outcome before it is written
//! ([`Produced`], [`Chosen`], [`Content`]), each file's record through every stage
//! ([`BatchFile`]) and what travels with it ([`FileCx`]). The gate a write waits at until the batch's request is recorded is the
//! batch record's (`record::Recorded`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::audit::{CallRecord, CandidateRecord, RecentOperation, Selection, SynthesisStore};
use crate::execution::CommandRunner;
use crate::model::ModelClient;
use crate::path::RepoPath;
use crate::search::{MapFiles, SearchError, SearchResults, WalkedFile};
use crate::synthesis::batch::StragglerPolicy;
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::image::ShapedImage;
use crate::synthesis::progress::ProgressSink;
use crate::synthesis::response::{FileValidation, PromptTokensByPart};
use crate::synthesis::update::Existing;
use crate::workspace::Workspace;

/// `WRIT_MAX_SHOWN_FILE_CHARS` unset: about 50,000 tokens of code, which every current
/// long-context model takes with room for the rest of the prompt and the answer.
pub const DEFAULT_MAX_SHOWN_FILE_CHARS: usize = 200_000;

/// The map's budget when neither the deployment nor the batch sets one, in prompt tokens.
pub const DEFAULT_REPO_MAP_TOKENS: usize = 2_000;
/// Which models to ask and how; from `CODE_LIST`, `CODE_MODEL`, `CODE_GEN_MODEL`.
#[derive(Debug, Clone)]
pub struct SynthesisConfig {
    pub candidates: Vec<String>,
    /// The arbiter; the first candidate model when unset.
    pub arbiter: Option<String>,
    /// Tried first when every candidate failed.
    pub fallback: Option<String>,
    pub max_tokens: u32,
    pub temperature: f32,
    /// Wait before the second fallback attempt; doubles after each.
    pub fallback_backoff: Duration,
    /// How many recent audit operations the prompt shows.
    pub recent_operations: u32,
    /// A chosen candidate (code or image) larger than this fails its file instead of being
    /// written (`WRIT_MAX_FILE_BYTES`).
    pub max_file_bytes: usize,
    /// The largest existing file (in characters) shown whole to the models for a change
    /// (`WRIT_MAX_SHOWN_FILE_CHARS`); a larger one is refused, never cut.
    pub max_shown_file_chars: usize,
    /// Files run at once, so each file's generation is bounded by this (`WRIT_BATCH_DEADLINE_SECS`).
    pub batch_deadline: Duration,
    /// When a fan-out stops waiting for slow candidates (`WRIT_STRAGGLER_*`; `options.straggler`).
    pub straggler: StragglerPolicy,
    /// The image model (`IMAGE_MODEL`).
    pub image_model: Option<String>,
    /// Models a batch may name in `options.models`, `arbiter_model` or `image_model`
    /// (`WRIT_ALLOWED_MODELS`); empty: only the configured ones.
    pub allowed_models: Vec<String>,
    /// Prompt tokens of the repository map in each candidate prompt (`WRIT_REPO_MAP_TOKENS`;
    /// `options.repo_map_tokens` overrides it; 0: no map).
    pub repo_map_tokens: usize,
    /// How long a batch whose results are ready waits out an audit store it cannot reach before
    /// it gives up and answers 503 (`WRIT_STORE_OUTAGE_WAIT`).
    pub store_outage_wait: Duration,
    /// The models that write generated checks (`WRIT_TEST_MODELS`); empty: the arbiter.
    pub test_models: Vec<String>,
    /// Batches without `options.validation` get generated checks (`WRIT_GENERATE_CHECKS`).
    pub generate_checks: bool,
    /// The configured command (`WRIT_COMMANDS`) that runs generated checks, per language name
    /// (`WRIT_CHECK_COMMANDS`; `python` and `javascript`).
    pub check_commands: Vec<(String, String)>,
    /// The project's formatter per language name (`WRIT_FORMATTERS`): a configured command
    /// (`WRIT_COMMANDS`) given the file's path that prints the formatted file on stdout.
    pub formatters: Vec<(String, String)>,
    /// The project's diagnostics per language name (`WRIT_DIAGNOSTICS`): a configured command
    /// given the file's path; exit 0 is clean, anything else fails the candidate like a test.
    pub diagnostics: Vec<(String, String)>,
    /// Whether batches are proposed for review by default (`WRIT_REVIEW`), and for how long a
    /// change set may be applied (`WRIT_REVIEW_TTL`).
    pub review: crate::changes::ReviewSettings,
    /// Adaptive routing: the server's default and how it decides (`WRIT_ROUTING*`).
    pub routing: crate::synthesis::routing::RoutingPolicy,
}

/// `WRIT_CHECK_COMMANDS` unset: the commands named like the interpreters.
pub fn default_check_commands() -> Vec<(String, String)> {
    vec![
        ("python".into(), "python".into()),
        ("javascript".into(), "node".into()),
    ]
}

/// The command a per-language setting (`WRIT_CHECK_COMMANDS`, `WRIT_FORMATTERS`,
/// `WRIT_DIAGNOSTICS`) names for `language`, keyed by its lower-case name (`python`, `rust`).
pub fn command_for(setting: &[(String, String)], language: writ_checks::Language) -> Option<&str> {
    let key = language.name().to_ascii_lowercase();
    setting
        .iter()
        .find(|(l, _)| *l == key)
        .map(|(_, c)| c.as_str())
}

/// The language names a per-language setting accepts as keys (`python`, `rust`, …).
pub fn language_keys() -> Vec<String> {
    writ_checks::Language::ALL
        .iter()
        .filter(|l| **l != writ_checks::Language::Other)
        .map(|l| l.name().to_ascii_lowercase())
        .collect()
}

impl SynthesisConfig {
    /// Whether a batch may ask for `model`: it is on the allow-list, or (with no list) it is one
    /// of the configured models, so a key holder cannot pick a costlier model than the operator.
    pub fn allows(&self, model: &str) -> bool {
        if !self.allowed_models.is_empty() {
            return self.allowed_models.iter().any(|m| m == model);
        }
        self.candidates
            .iter()
            .chain(&self.arbiter)
            .chain(&self.fallback)
            .chain(&self.image_model)
            .any(|m| m == model)
    }
}

impl Default for SynthesisConfig {
    fn default() -> Self {
        SynthesisConfig {
            candidates: Vec::new(),
            arbiter: None,
            fallback: None,
            max_tokens: 8_000,
            temperature: 0.2,
            fallback_backoff: Duration::from_millis(500),
            recent_operations: 10,
            image_model: None,
            max_file_bytes: 1024 * 1024,
            max_shown_file_chars: DEFAULT_MAX_SHOWN_FILE_CHARS,
            batch_deadline: Duration::from_secs(600),
            straggler: StragglerPolicy::WaitAll,
            allowed_models: Vec::new(),
            repo_map_tokens: DEFAULT_REPO_MAP_TOKENS,
            store_outage_wait: crate::synthesis::outage::DEFAULT_STORE_OUTAGE_WAIT,
            test_models: Vec::new(),
            generate_checks: false,
            check_commands: default_check_commands(),
            formatters: Vec::new(),
            diagnostics: Vec::new(),
            review: crate::changes::ReviewSettings::default(),
            routing: crate::synthesis::routing::RoutingPolicy::default(),
        }
    }
}

/// The ports and settings a batch runs with. The orchestrator ([`super::pipeline`]) hands each stage
/// only the parts it uses; the admission checks ([`super::submission`]) and [`super::jobs`] use it
/// whole.
pub struct Synthesizer {
    pub(crate) models: Arc<dyn ModelClient>,
    pub(crate) store: Arc<dyn SynthesisStore>,
    pub(crate) workspace: Arc<dyn Workspace>,
    pub(crate) config: SynthesisConfig,
    /// Runs the caller's tests for `options.validation`; `None` when no sandbox or no
    /// commands are configured (such batches are refused before any model is called).
    pub(crate) commands: Option<Arc<dyn CommandRunner>>,
    /// Commits what a batch wrote (`options.commit`, else its default); `None`: never.
    pub(crate) committer: Option<Arc<dyn crate::commits::Committer>>,
    /// Tells which written paths other workspaces of the repository changed too; `None`: not
    /// asked (no workspaces).
    pub(crate) overlaps: Option<Arc<dyn crate::overlaps::OverlapFinder>>,
}

/// What a batch's prompts show of what exists before it, read while the batch is checked
/// (`Synthesizer::prepare`, which refuses the batch when a code file cannot be read), and each
/// of its files' record ([`BatchFile`]).
pub(crate) struct Present {
    pub recent: Vec<RecentOperation>,
    /// One record per file, in the request's order: every stage reads and fills a file's state
    /// there, never by position, path or pointer.
    pub files: Vec<BatchFile>,
    /// What the caller named in the batch's `context`, found on disk.
    pub named: Vec<Named>,
    /// What the batch's repository maps look up, once for all its files.
    pub map: MapShared,
    /// What earlier attempts of a resumed batch wrote: the request's one commit holds those files
    /// too, since the run that wrote them may have stopped before committing.
    pub earlier: Option<EarlierAttempts>,
    /// The recorded outcomes adaptive routing decides from, read once for the batch; `None`
    /// when the batch is not routed.
    pub routing: Option<crate::synthesis::routing::Outcomes>,
    /// How the batch degrades near a budget's limit (`on_limit: degrade`), decided when it is
    /// admitted.
    pub degraded: Option<crate::budgets::Degraded>,
}

/// One file of a batch from its admission to its answer: the request's file, what it held when
/// the batch began, what the caller named for it, and what its stages leave for its answer and
/// record (its upstream calls, its prompt's tokens, its map's look-ups). Built once when the
/// batch is admitted ([`BatchFile::new`]) and handed to every stage by reference.
pub struct BatchFile {
    pub(crate) spec: FileSpec,
    /// Its content when the batch began (`None`: no such file yet, or an image, whose prompts do
    /// not show the old one).
    pub(crate) current: Option<Vec<u8>>,
    /// What the caller named in `files[i].context`, found on disk.
    pub(crate) named: Vec<Named>,
    pub(crate) upstream: Upstream,
    /// The prompt tokens its candidates' prompt spent on each part, for its answer.
    pub(crate) prompt_tokens: Mutex<Option<PromptTokensByPart>>,
    /// Its answer from the workspace's index for its repository map, left by the batch's first
    /// map ([`MapShared`]) and taken by its own.
    pub(crate) map_lookup: Mutex<Option<Lookup>>,
}

impl BatchFile {
    /// The record of `spec` with nothing read yet: no current content, nothing named.
    pub fn new(spec: FileSpec) -> Self {
        BatchFile {
            spec,
            current: None,
            named: Vec::new(),
            upstream: Upstream::default(),
            prompt_tokens: Mutex::new(None),
            map_lookup: Mutex::new(None),
        }
    }

    pub(crate) fn with_current(mut self, current: Option<Vec<u8>>) -> Self {
        self.current = current;
        self
    }

    pub(crate) fn with_named(mut self, named: Vec<Named>) -> Self {
        self.named = named;
        self
    }

    /// The request's file.
    pub fn spec(&self) -> &FileSpec {
        &self.spec
    }

    /// Keeps what its prompt spent on each part, for the answer.
    pub(crate) fn record_prompt_tokens(&self, tokens: PromptTokensByPart) {
        *self
            .prompt_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tokens);
    }

    pub(crate) fn prompt_tokens(&self) -> Option<PromptTokensByPart> {
        self.prompt_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The files earlier attempts of a resumed batch wrote, and the whole batch they belong to (the
/// commit's message describes every file it holds).
pub(crate) struct EarlierAttempts {
    pub batch: crate::synthesis::batch::Batch,
    pub files: Vec<crate::commits::CommitFile>,
}

/// One file's outcome before it is written: the chosen content (or why there is none) and every
/// candidate that was asked, for the answer and the audit record.
pub(crate) struct Produced {
    pub chosen: Result<Chosen, String>,
    pub candidates: Vec<CandidateRecord>,
    /// How the file did against the caller's tests, when the batch asked for them.
    pub validation: Option<FileValidation>,
    /// The file as the batch found it, when it existed: the chosen code is a change of it.
    pub existing: Option<Existing>,
}

impl Produced {
    pub fn failed(error: impl Into<String>, candidates: Vec<CandidateRecord>) -> Self {
        Produced {
            chosen: Err(error.into()),
            candidates,
            validation: None,
            existing: None,
        }
    }
}

impl Synthesizer {
    pub fn new(
        models: Arc<dyn ModelClient>,
        store: Arc<dyn SynthesisStore>,
        workspace: Arc<dyn Workspace>,
        config: SynthesisConfig,
    ) -> Self {
        Synthesizer {
            models,
            store,
            workspace,
            config,
            commands: None,
            committer: None,
            overlaps: None,
        }
    }

    /// Lets batches validate their candidates with `runner`.
    pub fn with_commands(mut self, runner: Option<Arc<dyn CommandRunner>>) -> Self {
        self.commands = runner;
        self
    }

    /// Lets batches commit what they wrote through `committer`.
    pub fn with_committer(mut self, committer: Option<Arc<dyn crate::commits::Committer>>) -> Self {
        self.committer = committer;
        self
    }

    /// Lets batches report the paths they wrote that other workspaces changed too.
    pub fn with_overlaps(
        mut self,
        finder: Option<Arc<dyn crate::overlaps::OverlapFinder>>,
    ) -> Self {
        self.overlaps = finder;
        self
    }

    /// The same synthesizer writing in another workspace, its caller's tests run by `commands`
    /// (a runner over that workspace): every batch reads its context, map and search from the
    /// workspace it writes in, and nothing else.
    /// `committer` commits in that workspace's repository (`None`: its batches never commit).
    pub fn in_workspace(
        &self,
        workspace: Arc<dyn Workspace>,
        commands: Option<Arc<dyn CommandRunner>>,
        committer: Option<Arc<dyn crate::commits::Committer>>,
    ) -> Self {
        Synthesizer {
            models: self.models.clone(),
            store: self.store.clone(),
            workspace,
            config: self.config.clone(),
            commands,
            committer,
            overlaps: self.overlaps.clone(),
        }
    }

    /// The workspace this synthesizer writes in.
    pub fn workspace(&self) -> &Arc<dyn Workspace> {
        &self.workspace
    }
}

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
    /// The project's formatter ran on it before it was written (`WRIT_FORMATTERS`).
    pub formatted: Option<crate::synthesis::response::Formatted>,
}

impl SynthesisConfig {
    /// How every candidate, repair and fallback call of `batch` is made.
    pub(crate) fn call_settings(&self, batch: &Batch) -> CallSettings {
        CallSettings {
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            urgent: batch.resumed(),
        }
    }
}

/// What one file carries through its stages: its batch, its record, what the batch read of the
/// present and where its events go.
#[derive(Clone, Copy)]
pub(crate) struct FileCx<'a> {
    pub batch: &'a Batch,
    pub batch_file: &'a BatchFile,
    pub present: &'a Present,
    pub sink: &'a dyn ProgressSink,
}

impl<'a> FileCx<'a> {
    /// The request's file.
    pub fn file(&self) -> &'a FileSpec {
        &self.batch_file.spec
    }

    /// What its upstream calls took.
    pub fn upstream(&self) -> &'a Upstream {
        &self.batch_file.upstream
    }
}

/// The same for a whole batch, whose stages (validation) see every file at once.
#[derive(Clone, Copy)]
pub(crate) struct BatchCx<'a> {
    pub batch: &'a Batch,
    pub present: &'a Present,
    pub sink: &'a dyn ProgressSink,
}

impl<'a> BatchCx<'a> {
    /// The context of one of the batch's files.
    pub fn file(&self, batch_file: &'a BatchFile) -> FileCx<'a> {
        FileCx {
            batch: self.batch,
            batch_file,
            present: self.present,
            sink: self.sink,
        }
    }

    /// Every file's context, in the request's order.
    pub fn files(&self) -> impl Iterator<Item = FileCx<'a>> + 'a {
        let cx = *self;
        self.present
            .files
            .iter()
            .map(move |batch_file| cx.file(batch_file))
    }
}

/// How a candidate call is made.
#[derive(Debug, Clone, Copy)]
pub struct CallSettings {
    pub temperature: f32,
    pub max_tokens: u32,
    /// [`crate::model::ChatRequest::urgent`].
    pub urgent: bool,
}

/// What one file's upstream calls took: the time it waited on them (candidates, arbiter,
/// fallback), so a batch's own overhead is its duration minus the slowest file's upstream
/// time; and the calls that were not candidates (arbiter, test writers), so what they cost is
/// recorded with the file and counted like its candidates.
#[derive(Debug, Default)]
pub struct Upstream {
    waited_micros: std::sync::atomic::AtomicU64,
    calls: std::sync::Mutex<Vec<CallRecord>>,
    routing: std::sync::Mutex<Option<crate::synthesis::routing::RoutingDecision>>,
}

impl Upstream {
    pub fn add(&self, waited: Duration) {
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.waited_micros
            .fetch_add(micros, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn total(&self) -> Duration {
        Duration::from_micros(
            self.waited_micros
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Records a call that was not a candidate.
    pub fn called(&self, call: CallRecord) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
    }

    /// Keeps how adaptive routing chose the file's models, for its answer and record.
    pub fn routed(&self, decision: crate::synthesis::routing::RoutingDecision) {
        *self
            .routing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(decision);
    }

    pub fn routing(&self) -> Option<crate::synthesis::routing::RoutingDecision> {
        self.routing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The calls recorded so far, in the order they ended.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// One `context` entry as found on disk.
#[derive(Debug, Clone)]
pub(crate) enum Named {
    File(RepoPath),
    Folder {
        path: RepoPath,
        files: Vec<WalkedFile>,
        truncated: bool,
    },
    Glob {
        pattern: String,
        files: Vec<WalkedFile>,
        truncated: bool,
    },
}

/// Every `context` entry of a batch, found on disk: the batch's, then each file's.
#[derive(Debug, Clone, Default)]
pub(crate) struct NamedContext {
    pub batch: Vec<Named>,
    /// One list per file, in the batch's order; each goes to its file's [`BatchFile`].
    pub files: Vec<Vec<Named>>,
}

/// What a batch's repository maps look up once for all its files: the walk (without a current
/// index) and the index's answers with each file's searches, asked in one go (one blocking hop a
/// batch, not one a file); each answer is left in its file's record ([`BatchFile::map_lookup`]).
#[derive(Default)]
pub struct MapShared {
    pub(crate) walk: tokio::sync::OnceCell<Option<crate::search::Walk>>,
    /// Whether the index answered (its answers are in the files' records).
    pub(crate) looked_up: tokio::sync::OnceCell<bool>,
}

/// One file's answer from the index: the files that may rank and its searches' results.
pub(crate) type Lookup = (MapFiles, Vec<Result<SearchResults, SearchError>>);
