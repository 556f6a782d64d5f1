//! Every setting writ reads, declared once: its name, type, default, meaning and where it may be
//! given. [`super::source`] answers only for declared names (the code asking for another makes
//! start-up fail, naming it), `writ.toml` accepts only declared keys, and docs/configuration.md
//! and the settings tables of the other docs are generated from this list (`scripts/docs`; a test
//! fails when a checked-in table differs).
//!
//! To add a setting: one entry below, in its group; read it as the others are read; run
//! `scripts/docs`. A default given as [`DefaultValue::Literal`] is checked against the code by a
//! test (the setting set to it must change nothing), so it is written as one would set it.

use std::borrow::Cow;

/// What a value looks like, for the docs and for reading `writ.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// Never printed, logged or shown by `writ check`.
    Secret,
    Path,
    Url,
    /// `host:port`.
    Address,
    Whole,
    Decimal,
    /// `true`/`false` (also `1`/`0`, `on`/`off`; a TOML boolean in `writ.toml`).
    Switch,
    /// Comma-separated (an array of strings in `writ.toml`).
    List,
    /// A JSON object (a table in `writ.toml`).
    Json,
    /// A JSON array of objects (an array of tables in `writ.toml`, `[[models]]`).
    Tables,
    /// A number with a unit: `30d`, `12h`, `90m`, `3600s`.
    Duration,
    /// One of these words.
    OneOf(&'static [&'static str]),
}

impl Kind {
    pub fn describe(self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Kind::Text => "text",
            Kind::Secret => "secret",
            Kind::Path => "path",
            Kind::Url => "URL",
            Kind::Address => "host:port",
            Kind::Whole => "whole number",
            Kind::Decimal => "number",
            Kind::Switch => "true/false",
            Kind::List => "list",
            Kind::Json => "JSON object",
            Kind::Tables => "JSON array of objects",
            Kind::Duration => "duration",
            Kind::OneOf(words) => {
                return Cow::Owned(
                    words
                        .iter()
                        .map(|w| format!("`{w}`"))
                        .collect::<Vec<_>>()
                        .join(" / "),
                );
            }
        })
    }
}

/// What a setting is when it is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    Unset,
    /// Exactly what setting it would write; a test checks the code agrees.
    Literal(&'static str),
    /// Computed (from the machine, another setting, the configured models), in words.
    Derived(&'static str),
}

/// Where in `writ.toml` a setting may be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFile {
    /// Under its name in lower case (`WRIT_ADDR` → `writ_addr`).
    Lower,
    /// Under this key.
    Key(&'static str),
    /// Not at all: the environment only, for this reason.
    No(&'static str),
}

/// The sections of docs/configuration.md, in order; each one's table can also be shown in the
/// doc about its subject (`<!-- settings: KEY -->`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Server,
    Models,
    LocalModel,
    Access,
    Edge,
    Sessions,
    Commands,
    GeneratedChecks,
    Telemetry,
    Client,
    Platform,
}

impl Group {
    pub const ALL: [Group; 11] = [
        Group::Server,
        Group::Models,
        Group::LocalModel,
        Group::Access,
        Group::Edge,
        Group::Sessions,
        Group::Commands,
        Group::GeneratedChecks,
        Group::Telemetry,
        Group::Client,
        Group::Platform,
    ];

    /// The name a doc's marker uses.
    pub fn key(self) -> &'static str {
        match self {
            Group::Server => "server",
            Group::Models => "models",
            Group::LocalModel => "local-model",
            Group::Access => "access",
            Group::Edge => "edge",
            Group::Sessions => "sessions",
            Group::Commands => "commands",
            Group::GeneratedChecks => "generated-checks",
            Group::Telemetry => "telemetry",
            Group::Client => "client",
            Group::Platform => "platform",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Group::Server => "The server",
            Group::Models => "Models and their provider",
            Group::LocalModel => "The embedded model",
            Group::Access => "Access and limits",
            Group::Edge => "Hosts, protected paths and connections",
            Group::Sessions => "Write sessions",
            Group::Commands => "Commands and the sandbox",
            Group::GeneratedChecks => "Generated checks",
            Group::Telemetry => "Logs and traces",
            Group::Client => "The client commands",
            Group::Platform => "Read from the platform",
        }
    }
}

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    pub group: Group,
    pub kind: Kind,
    pub default: DefaultValue,
    /// One line for the docs (Markdown).
    pub meaning: &'static str,
    pub in_file: InFile,
}

impl Setting {
    const fn new(
        name: &'static str,
        group: Group,
        kind: Kind,
        default: DefaultValue,
        meaning: &'static str,
    ) -> Self {
        Self {
            name,
            group,
            kind,
            default,
            meaning,
            in_file: InFile::Lower,
        }
    }

    const fn env_only(mut self, why: &'static str) -> Self {
        self.in_file = InFile::No(why);
        self
    }

    const fn in_file_as(mut self, key: &'static str) -> Self {
        self.in_file = InFile::Key(key);
        self
    }

    /// Its key in `writ.toml`, if it may be given there.
    pub fn file_key(&self) -> Option<Cow<'static, str>> {
        match self.in_file {
            InFile::Lower => Some(Cow::Owned(self.name.to_ascii_lowercase())),
            InFile::Key(key) => Some(Cow::Borrowed(key)),
            InFile::No(_) => None,
        }
    }
}

/// The declared setting called `name`.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The declared setting whose `writ.toml` key is `key`.
pub fn find_in_file(key: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.file_key().is_some_and(|k| k == key))
}

use DefaultValue::{Derived, Literal, Unset};
use Group::*;
use Kind::*;

const SDK_READS_ENV: &str = "the OpenTelemetry SDK reads it from the environment";
const PLATFORM: &str = "the platform's own variable";
const CLIENT: &str = "the client commands read the environment or their flags";

/// Every setting, in the order the docs show them.
pub static SETTINGS: &[Setting] = &[
    // The server.
    Setting::new("REPO_DIR", Server, Path, Literal("./workspace"),
        "the workspace `default`; created if missing; every path of a route without `/workspaces/{name}` is relative to it"),
    Setting::new("WRIT_WORKSPACES_DIR", Server, Path, Unset,
        "where named workspaces are made and found ([workspaces.md](workspaces.md)); unset: creating one is refused"),
    Setting::new("DATABASE_URL", Server, Url, Literal("sqlite://./writ.db"),
        "audit store: `postgres://…` or `sqlite://…` (the file is created on first start). On PostgreSQL a busy process holds up to `WRIT_MAX_BATCHES_IN_FLIGHT` (4–64) read connections, 4 for the group commit and 1 for progress events: 37 by default, so two replicas fit the server's default `max_connections` of 100"),
    Setting::new("WRIT_ADDR", Server, Address, Literal("127.0.0.1:8080"),
        "listen address (`writ serve --addr` overrides); on an address that is not loopback writ needs an API key ([access](access-limits-faults.md)) or `writ serve --insecure`"),
    Setting::new("WRIT_CONFIG", Server, Path, Derived("`./writ.toml` when it exists"),
        "the config file (`--config FILE` overrides)")
        .env_only("it names the file"),
    Setting::new("WRIT_MAX_BODY_BYTES", Server, Whole, Literal("10485760"),
        "largest request body (413 beyond)"),
    Setting::new("WRIT_READ_DEFAULT_CHARS", Server, Whole, Literal("10000"),
        "characters `GET /files/{path}` returns unless asked for more"),
    Setting::new("WRIT_READ_MAX_CHARS", Server, Whole, Literal("1000000"),
        "most characters a caller may ask `GET /files/{path}` for"),
    Setting::new("WRIT_RECONCILE_AFTER_SECS", Server, Whole, Literal("30"),
        "a write still `pending` after this long is settled against the disk"),
    Setting::new("WRIT_HISTORY_RETENTION", Server, Duration, Literal("30d"),
        "how long the contents undo and restore need are kept (`s`, `m`, `h`, `d`; `0`/`off`: for ever); see [history.md](history.md)"),
    Setting::new("WRIT_GIT_COMMIT", Server, Switch, Literal("false"),
        "when the workspace is a git repository, commit exactly the paths each request (batch, edit, direct write, write session, undo, restore) wrote; a request's own `commit` option and a workspace's `git_commit` come first ([history.md](history.md))"),
    Setting::new("WRIT_REVIEW", Server, Switch, Literal("false"),
        "batches, edits and write sessions that do not say (`review`) are proposed for review as change sets instead of written ([review.md](review.md))"),
    Setting::new("WRIT_REVIEW_TTL", Server, Duration, Literal("7d"),
        "how long a change set may be applied (`s`, `m`, `h`, `d`); past it, it is `expired`; open change sets hold no locks ([review.md](review.md))"),
    Setting::new("WRIT_RESPECT_CLAIMS", Server, Switch, Literal("false"),
        "refuse (409 `claimed`) a write into a path another workspace of the same repository has claimed (`POST /workspaces/{name}/claims`): batches that do not say (`options.respect_claims`), direct writes, edits and write sessions ([workspaces.md](workspaces.md#claims))"),
    // Models and their provider.
    Setting::new("OPENROUTER_API_KEY", Models, Secret, Unset,
        "provider key; never logged or returned"),
    Setting::new("OPENROUTER_BASE_URL", Models, Url, Literal("https://openrouter.ai/api/v1"),
        "any OpenAI-compatible endpoint works (a local llama.cpp/vLLM/Ollama server needs no key)"),
    Setting::new("WRIT_MODEL_PROVIDERS", Models, Tables, Unset,
        "each model's provider and price, `[[models]]` tables in writ.toml: `id` (a model id, or a prefix ending in `*`; the id beats a prefix, a longer prefix a shorter one), `base_url`, `api_key_env` (the name of the variable holding the key, never the key), `headers`, and per million tokens `input_price`, `output_price`, `cached_input_price`; an id no entry names goes to `OPENROUTER_BASE_URL`, a `local/…` id to the embedded engine (its entry gives a price only) ([costs.md](costs.md#a-provider-per-model-and-its-prices))")
        .in_file_as("models"),
    Setting::new("WRIT_UNPRICED_MODELS", Models, OneOf(&["tokens", "refuse"]), Literal("tokens"),
        "a model whose provider reports no cost (any but OpenRouter's own, the embedded engine too) and that `[[models]]` gives no price: `tokens`, counted by tokens only (no cost; token budgets still bind); `refuse`, start-up fails naming each such model of `CODE_LIST`, `CODE_MODEL`, `CODE_GEN_MODEL`, `WRIT_TEST_MODELS`, `WRIT_ALLOWED_MODELS` and `IMAGE_MODEL`"),
    Setting::new("CODE_LIST", Models, List, Derived("the embedded model's three samplings when neither `OPENROUTER_API_KEY` nor `CODE_LIST` is set, else none"),
        "the candidate models asked for every file"),
    Setting::new("CODE_MODEL", Models, Text, Derived("the embedded model when it is the default, else none (the first viable candidate wins)"),
        "the arbiter model"),
    Setting::new("CODE_GEN_MODEL", Models, Text, Derived("the embedded model when it is the default, else none"),
        "fallback model, asked when every candidate failed"),
    Setting::new("IMAGE_MODEL", Models, Text, Unset,
        "image model for `.png`, `.jpg`, `.gif`, `.webp` files"),
    Setting::new("WRIT_ALLOWED_MODELS", Models, List, Derived("the configured models only"),
        "the models a batch may name in `options.models` (the full list), so no key holder picks a costlier model than the operator did"),
    Setting::new("WRIT_MODEL_MAX_ATTEMPTS", Models, Whole, Literal("3"),
        "attempts per model call, the first included"),
    Setting::new("WRIT_MODEL_BACKOFF_MS", Models, Whole, Literal("500"),
        "first retry wait cap (full jitter, doubling per attempt; a provider's `Retry-After` wins)"),
    Setting::new("WRIT_MODEL_DEADLINE_SECS", Models, Whole, Literal("120"),
        "bound on one model call, retries included (the embedded models have `WRIT_LOCAL_DEADLINE_SECS`)"),
    Setting::new("WRIT_MAX_TOKENS", Models, Whole, Literal("8000"),
        "completion cap per candidate"),
    Setting::new("WRIT_RECENT_OPERATIONS", Models, Whole, Literal("10"),
        "how many of the caller's recent operations each candidate prompt lists (0: none; an eval that compares batches keeps their prompts alike with 0)"),
    Setting::new("WRIT_REPO_MAP_TOKENS", Models, Whole, Literal("2000"),
        "prompt tokens of the repository map in each candidate prompt (0: none; at most 16,000; `options.repo_map_tokens` per batch)"),
    Setting::new("WRIT_MAX_SHOWN_FILE_CHARS", Models, Whole, Literal("200000"),
        "the largest existing file `write_codebase` changes: the models see it whole, never cut; a larger one is refused (422) — change it with `POST /edits`"),
    Setting::new("WRIT_FALLBACK_BACKOFF_MS", Models, Whole, Literal("500"),
        "wait before the second fallback model, doubling after each"),
    Setting::new("WRIT_MODEL_MAX_CONCURRENT_PER_MODEL", Models, Whole, Literal("16"),
        "upstream calls in flight at once per model; more wait for a slot (the wait counts as upstream time)"),
    Setting::new("WRIT_MODEL_MAX_CONCURRENT", Models, Whole, Literal("64"),
        "upstream calls in flight at once in total, to each provider; more wait for a slot"),
    Setting::new("WRIT_STRAGGLER_ENOUGH", Models, Text, Literal("all"),
        "when a fan-out stops waiting for slow models: `all` (wait for every one), a count of viable candidates (1–8) or `all_but_slowest`, then at most one extra wait, `WRIT_STRAGGLER_EXTRA_MS` or `WRIT_STRAGGLER_EXTRA_FACTOR` ([deployment.md](deployment.md)); a batch may send its own `options.straggler`"),
    Setting::new("WRIT_STRAGGLER_EXTRA_MS", Models, Whole, Unset,
        "the extra wait in milliseconds, once enough viable candidates are in"),
    Setting::new("WRIT_STRAGGLER_EXTRA_FACTOR", Models, Decimal, Unset,
        "the extra wait relative to the first viable candidate's time (0.5: half as long again)"),
    Setting::new("WRIT_ROUTING", Models, OneOf(&["off", "adaptive"]), Literal("off"),
        "`adaptive`: for each code file, ask first only the candidate models that writ's recorded outcomes (candidates that passed their file's checks, per language and kind) say will pass, the others only when those fail the checks ([routing.md](routing.md)); applies to batches that name no `options.models` or `first_round`; a batch may send its own `options.fanout.routing`"),
    Setting::new("WRIT_ROUTING_TARGET", Models, Decimal, Literal("0.8"),
        "the chance that at least one model asked first passes, which routing asks models until it reaches"),
    Setting::new("WRIT_ROUTING_MIN_EVIDENCE", Models, Whole, Literal("8"),
        "outcomes a model needs (for the file's language and kind, else its language, else any file) before routing may leave it out; until then it is always asked"),
    Setting::new("WRIT_ROUTING_EXPLORE", Models, Decimal, Literal("0.05"),
        "the chance that a model routing would leave out is asked anyway, so a model that improved is noticed"),
    Setting::new("WRIT_ROUTING_WINDOW", Models, Whole, Literal("40"),
        "each model's newest outcomes counted per language and kind (and per language, and overall): a drop in quality shows within this many files"),
    // The embedded model.
    Setting::new("WRIT_LOCAL_MODEL", LocalModel, OneOf(&["auto", "off"]), Literal("auto"),
        "`auto`: the embedded default (`local/smollm2-135m`) serves when neither `OPENROUTER_API_KEY` nor `CODE_LIST` is set; `off`: no `local/…` model serves"),
    Setting::new("WRIT_LOCAL_MODEL_DIR", LocalModel, Path, Derived("`$XDG_CACHE_HOME/writ/models` (else `~/.cache/writ/models`)"),
        "where `writ models fetch` puts the embedded models and writ looks for them"),
    Setting::new("WRIT_LOCAL_MODEL_FILES", LocalModel, List, Unset,
        "models given by path, `NAME=PATH` each (`qwen2.5-coder-1.5b=/models/q.gguf`); each file is still checked to be that model"),
    Setting::new("WRIT_LOCAL_MODEL_PATH", LocalModel, Path, Derived("in `WRIT_LOCAL_MODEL_DIR`"),
        "the default model's file (fetched there when missing)"),
    Setting::new("WRIT_LOCAL_WORKERS", LocalModel, Whole, Literal("1"),
        "generations running at once; more queue fairly (FIFO)"),
    Setting::new("WRIT_LOCAL_THREADS", LocalModel, Whole, Literal("0"),
        "llama.cpp threads per worker (0: half the cores); its threads spin-wait, so more than the idle cores makes it much slower"),
    Setting::new("WRIT_LOCAL_CONTEXT_TOKENS", LocalModel, Whole, Literal("4096"),
        "context window (512 to 32768, and at most what the model was trained for)"),
    Setting::new("WRIT_LOCAL_MAX_TOKENS", LocalModel, Whole, Unset,
        "a cap on every call's completion; unset, the kind of call sets it (2,048 for a candidate, a repair or a test file; 512 for a verdict)"),
    Setting::new("WRIT_LOCAL_DEADLINE_SECS", LocalModel, Whole, Literal("600"),
        "bound on one generation from its start, and apart on its wait in the queue"),
    Setting::new("WRIT_LOCAL_MEMORY_MB", LocalModel, Whole, Literal("4096"),
        "what the loaded models may take (file, context and buffers); the least recently used are unloaded to make room"),
    Setting::new("WRIT_LOCAL_ANSWER_CACHE", LocalModel, Path, Unset,
        "a directory where answers are kept and replayed (the engine is deterministic per model, prompt, settings and seed), for evals that compare ways of choosing among the same samples (`scripts/eval-real`); never needed in service"),
    // Access and limits.
    Setting::new("WRIT_API_KEYS", Access, List, Unset,
        "keys admitted by configuration besides the database's: `id:sha256hex` or `id:sha256hex:read+write` entries (`writ keys hash`; scopes joined by `+`; without, `read,write,run`)"),
    Setting::new("WRIT_ADMIN_KEY_FILE", Access, Path, Unset,
        "when writ starts with no API key at all (none in the database or `WRIT_API_KEYS`), it makes one with every scope and writes it to this file (mode 0600), naming only the file and the key's id in its log; Docker Compose sets it (`docker compose exec writ cat /data/keys/admin.key`)"),
    Setting::new("WRIT_RATE_LIMIT_PER_MIN", Access, Whole, Literal("600"),
        "requests per minute per key (0: off); beyond it 429 `rate_limited` + `Retry-After`"),
    Setting::new("WRIT_RATE_LIMIT_BURST", Access, Whole, Literal("60"),
        "requests a key may make at once before its rate applies"),
    Setting::new("WRIT_MAX_BATCHES_PER_KEY", Access, Whole, Literal("4"),
        "batches one key may have running; beyond it 429 `too_many_batches` + `Retry-After`"),
    Setting::new("WRIT_MAX_BATCHES_IN_FLIGHT", Access, Whole, Literal("32"),
        "batches the whole process runs at once; beyond it 503 `busy` + `Retry-After`"),
    Setting::new("WRIT_WORKSPACE_RATE_LIMIT_PER_MIN", Access, Whole, Literal("0"),
        "requests per minute into one workspace, every key using it together (0: off); beyond it 429 `rate_limited` + `Retry-After`, `details.limit` is `workspace` ([workspaces.md](workspaces.md#limits-per-workspace))"),
    Setting::new("WRIT_WORKSPACE_RATE_LIMIT_BURST", Access, Whole, Literal("60"),
        "requests into one workspace at once before its rate applies"),
    Setting::new("WRIT_MAX_BATCHES_PER_WORKSPACE", Access, Whole, Literal("0"),
        "batches one workspace may have running, whatever the keys (0: off); beyond it 429 `too_many_batches` + `Retry-After`"),
    Setting::new("WRIT_MAX_FILE_BYTES", Access, Whole, Literal("1048576"),
        "the largest file writ writes: a generated file beyond it fails (`success: false`); a direct write (an append counts the whole resulting file) is 413 `file_too_large`; nothing written"),
    Setting::new("WRIT_BATCH_DEADLINE_SECS", Access, Whole, Literal("600"),
        "files still waiting on models after this fail cleanly"),
    Setting::new("WRIT_SHUTDOWN_GRACE_SECS", Access, Whole, Literal("30"),
        "after SIGTERM: no new connections, in-flight batches get this long"),
    Setting::new("WRIT_STORE_OUTAGE_WAIT", Access, Whole, Literal("30"),
        "seconds a batch with results ready waits out an unreachable database; then 503 `audit_unavailable` + `Retry-After`, nothing more written ([faults.md](faults.md))"),
    // Hosts, protected paths and connections.
    Setting::new("WRIT_ALLOWED_HOSTS", Edge, List, Unset,
        "host names answered while auth is off, besides loopback ones (no port)"),
    Setting::new("WRIT_PROTECTED_PATHS", Edge, List, Literal(".git"),
        "names (any component) or paths (from the root) no write may touch; `none`: none"),
    Setting::new("WRIT_HEADER_READ_TIMEOUT_SECS", Edge, Whole, Literal("10"),
        "a request's headers must arrive within this; an idle keep-alive connection is closed after it"),
    Setting::new("WRIT_MAX_CONNECTIONS", Edge, Whole, Literal("1024"),
        "connections served at once; more wait in the listen backlog"),
    Setting::new("WRIT_AUTH_FAIL_CLOSED_AFTER_SECS", Edge, Whole, Literal("30"),
        "how long auth stays off, while the store cannot be asked, after its last answer that no key exists"),
    // Write sessions.
    Setting::new("WRITE_SESSION_IDLE_MS", Sessions, Whole, Literal("2000"),
        "a write session with no chunk for this long is `awaiting_done_or_more_content`"),
    Setting::new("WRITE_SESSION_TTL_SECS", Sessions, Whole, Literal("3600"),
        "a write session untouched for this long expires (recorded in the audit log)"),
    Setting::new("WRITE_SESSION_MAX_BYTES", Sessions, Whole, Derived("`WRIT_MAX_FILE_BYTES`"),
        "content per write session (413 naming the limit)"),
    Setting::new("WRITE_SESSION_MAX_CHUNK_BYTES", Sessions, Whole, Derived("1048576, at most `WRIT_MAX_BODY_BYTES`"),
        "content per chunk (413 naming the limit)"),
    Setting::new("WRITE_SESSION_MAX_OPEN", Sessions, Whole, Literal("16"),
        "open write sessions per caller (429 beyond)"),
    // Commands and the sandbox.
    Setting::new("WRIT_COMMANDS", Commands, Json, Unset,
        "the commands a request may run in the sandbox, by name (`{\"pytest\": [\"python3\", \"-m\", \"pytest\", \"{args}\"]}`; [writing-files.md](writing-files.md#choosing-by-running-your-tests-validation-repair-and-post-run)); none: `POST /run` and `options.validation` answer 503 naming it")
        .in_file_as("commands"),
    Setting::new("WRIT_FORMATTERS", Commands, Json, Unset,
        "the project's formatter per language, a command of `WRIT_COMMANDS` that prints the formatted file given as its argument (`{\"python\": \"black\"}`); runs on the chosen candidate before it is written"),
    Setting::new("WRIT_DIAGNOSTICS", Commands, Json, Unset,
        "the project's diagnostics per language, a command of `WRIT_COMMANDS` given the file (`{\"python\": \"py_compile\"}`); a non-zero exit fails the candidate like a test"),
    Setting::new("WRIT_RUN_CONCURRENCY", Commands, Whole, Derived("the cores"),
        "runs at once; more wait in a fair (FIFO) queue"),
    Setting::new("WRIT_RUN_MAX_TIMEOUT_SECS", Commands, Whole, Literal("120"),
        "the longest timeout a request may ask for"),
    Setting::new("WRIT_RUN_DEFAULT_TIMEOUT_SECS", Commands, Whole, Literal("30"),
        "a run's timeout when the request asks none"),
    Setting::new("WRIT_MAX_REPAIR_ROUNDS", Commands, Whole, Literal("3"),
        "the most repair rounds a batch may ask for"),
    Setting::new("WRIT_RUN_MEMORY_MB", Commands, Whole, Literal("1024"),
        "address space of each process of a run"),
    Setting::new("WRIT_RUN_MAX_PROCESSES", Commands, Whole, Literal("64"),
        "processes one run may have"),
    Setting::new("WRIT_RUN_MAX_OUTPUT_BYTES", Commands, Whole, Literal("1048576"),
        "bytes kept of stdout and of stderr"),
    Setting::new("WRIT_SANDBOX_RO_PATHS", Commands, List, Unset,
        "more host directories the sandbox sees read-only beside `/usr` (a toolchain under `/opt`, a virtualenv); absolute paths"),
    Setting::new("WRIT_RUN_QUEUE", Commands, Whole, Literal("32"),
        "runs that may wait for a slot once all are busy; beyond it `POST /run` answers 503 `run_queue_full` with `Retry-After`"),
    Setting::new("WRIT_RUN_MAX_PER_KEY", Commands, Whole, Literal("4"),
        "one key's `POST /run` calls in flight at once; beyond it 429 `too_many_runs` with `Retry-After`"),
    Setting::new("WRIT_RUN_SCRATCH_MB", Commands, Whole, Literal("256"),
        "what one run may write into its scratch; beyond it the run does not pass and `limit_reached` says so"),
    Setting::new("WRIT_RUN_SCRATCH_FILES", Commands, Whole, Literal("20000"),
        "files and directories one run may create or change; beyond it the run does not pass and `limit_reached` says so"),
    Setting::new("WRIT_RUN_OVERLAY", Commands, Switch, Literal("true"),
        "`false`: every run copies `REPO_DIR` instead of the copy-on-write overlay"),
    Setting::new("WRIT_RUN_COPY_MAX_MB", Commands, Whole, Literal("512"),
        "the largest `REPO_DIR` the copy fallback copies; beyond it 503 `repository_too_large` naming the variable"),
    Setting::new("WRIT_RUN_COPY_MAX_FILES", Commands, Whole, Literal("50000"),
        "the most files and directories the copy fallback copies; beyond it 503 `repository_too_large` naming the variable"),
    // Generated checks.
    Setting::new("WRIT_GENERATE_CHECKS", GeneratedChecks, Switch, Literal("false"),
        "generated checks for every batch that sends no `options.validation` (they need `WRIT_COMMANDS` and a command of `WRIT_CHECK_COMMANDS`; `writ check` says when they cannot run)"),
    Setting::new("WRIT_TEST_MODELS", GeneratedChecks, List, Derived("the arbiter (`CODE_MODEL`) and the first candidate model that is not the arbiter"),
        "models that write the tests; each writes one test file per code file"),
    Setting::new("WRIT_CHECK_COMMANDS", GeneratedChecks, Json, Literal(r#"{"javascript": "node", "python": "python"}"#),
        "the command of `WRIT_COMMANDS` that runs generated checks, per language; it must take one path argument and run it with the interpreter, e.g. `\"python\": [\"python3\", \"{args}\"]`, `\"node\": [\"node\", \"{args}\"]`"),
    // Logs and traces.
    Setting::new("RUST_LOG", Telemetry, Text, Literal("info,sqlx=warn"),
        "what is logged ([`EnvFilter`](https://docs.rs/tracing-subscriber/latest/tracing_subscriber/filter/struct.EnvFilter.html) directives)"),
    Setting::new("WRIT_LOG_FORMAT", Telemetry, OneOf(&["text", "json"]), Literal("text"),
        "the log lines' format, on stderr"),
    Setting::new("OTEL_EXPORTER_OTLP_ENDPOINT", Telemetry, Url, Unset,
        "OpenTelemetry traces over OTLP/HTTP to this endpoint (`<endpoint>/v1/traces`); unset: no traces ([traces.md](traces.md))")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Telemetry, Url, Unset,
        "the full URL traces are posted to, instead")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_EXPORTER_OTLP_HEADERS", Telemetry, List, Unset,
        "headers sent with every export, `key=value` pairs (a tracing backend's API key)")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_EXPORTER_OTLP_TIMEOUT", Telemetry, Whole, Literal("10000"),
        "milliseconds an export may take")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_SERVICE_NAME", Telemetry, Text, Literal("writ"),
        "the traces' service name")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_RESOURCE_ATTRIBUTES", Telemetry, List, Unset,
        "more attributes of the process, `key=value` pairs (`deployment.environment=prod`)")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_BSP_SCHEDULE_DELAY", Telemetry, Whole, Literal("5000"),
        "milliseconds between two exports of the spans held")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_BSP_MAX_QUEUE_SIZE", Telemetry, Whole, Literal("2048"),
        "spans held for export; more are dropped, never queued without bound")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", Telemetry, Whole, Literal("512"),
        "spans sent in one export")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_SDK_DISABLED", Telemetry, Switch, Literal("false"),
        "`true`: no traces, whatever the endpoint")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_TRACES_SAMPLER", Telemetry, Text, Literal("parentbased_always_on"),
        "which traces are kept, whole: `always_on`, `always_off`, `traceidratio` and their `parentbased_` forms; an unknown sampler is said at start-up and every trace kept")
        .env_only(SDK_READS_ENV),
    Setting::new("OTEL_TRACES_SAMPLER_ARG", Telemetry, Decimal, Unset,
        "the ratio kept by `traceidratio`, 0–1")
        .env_only(SDK_READS_ENV),
    // The client commands.
    Setting::new("WRIT_URL", Client, Url, Literal("http://127.0.0.1:8080"),
        "the writ that `writ write`, `writ ops`, `writ stats` and `writ workspaces` talk to (`--url`)")
        .env_only(CLIENT),
    Setting::new("WRIT_API_KEY", Client, Secret, Unset,
        "the key they send (`--api-key`)")
        .env_only(CLIENT),
    // Read from the platform.
    Setting::new("HOME", Platform, Path, Unset,
        "the cache and data directories' fallback (`~/.cache/writ/models`, `~/.local/share/writ`)")
        .env_only(PLATFORM),
    Setting::new("XDG_CACHE_HOME", Platform, Path, Derived("`~/.cache`"),
        "where the embedded model is kept (`writ/models`)")
        .env_only(PLATFORM),
    Setting::new("XDG_DATA_HOME", Platform, Path, Derived("`~/.local/share`"),
        "where `writ mcp` keeps its audit database without `DATABASE_URL` (`writ/mcp-<hash>.db`)")
        .env_only(PLATFORM),
    Setting::new("HOSTNAME", Platform, Text, Unset,
        "names the replica in job leases and logs (a container's id under Docker)")
        .env_only(PLATFORM),
    Setting::new("TMPDIR", Platform, Path, Derived("`/tmp`"),
        "where the sandbox's scratch directories are made (`writ-scratch-<uid>`)")
        .env_only(PLATFORM),
    Setting::new("PATH", Platform, Text, Unset,
        "where `bwrap`, `git`, `python3` and the configured commands' programs are found")
        .env_only(PLATFORM),
    Setting::new("PGSSLMODE", Platform, Text, Unset,
        "TLS to PostgreSQL as libpq reads it; a server on this machine is spoken to without TLS unless this or the URL sets `sslmode`")
        .env_only(PLATFORM),
];
