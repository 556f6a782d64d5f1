//! The audit log: what writ records about every request and every file it touches.
//!
//! A request record per mutating call (batch or direct write) and an operation record per file,
//! with the written content kept beside it (the code log). Operations are
//! written ahead: `pending` before the file is touched, then `succeeded` or `failed`, so a crash
//! in between is visible and [`crate::files::reconcile_pending`] can settle it against the disk.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::StoreError;

/// What a file is and so what produced its content: a batch's file is `code` (candidate models)
/// or `image` (the image model); a direct write's content is the caller's (`direct`). The same
/// type is a batch target's kind, a result's `kind` and an operation's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    Code,
    Image,
    Direct,
    /// Not a file: a command run in the sandbox (`POST /run`), recorded like a write.
    Run,
}

/// What a model call that was not a candidate was for ([`CallRecord`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallRole {
    /// The arbiter choosing among whole candidates.
    Arbiter,
    /// A test-writing model writing generated checks.
    TestWriter,
    /// The arbiter asked which outputs on distinguishing inputs the description calls for.
    Distinguishing,
}

impl From<CallRole> for crate::model::CallPurpose {
    fn from(role: CallRole) -> Self {
        use crate::model::CallPurpose;
        match role {
            CallRole::Arbiter => CallPurpose::Arbiter,
            CallRole::TestWriter => CallPurpose::TestWriter,
            CallRole::Distinguishing => CallPurpose::Distinguishing,
        }
    }
}

/// How a file's content was chosen, in answers, events and operation records alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// One distinct viable candidate: no arbiter call needed.
    SingleCandidate,
    /// The arbiter chose.
    Arbiter,
    /// The arbiter failed or answered nonsense: the first viable candidate in model-list order.
    ArbiterFailedFirstViable,
    /// Every candidate failed; a fallback model produced it.
    Fallback,
    /// An atomic batch put a file back as it was after a later write failed.
    Rollback,
    /// The caller's own content (the direct file routes).
    Direct,
    /// The only distinct candidate that passed the caller's tests.
    Validated,
    /// The arbiter chose among several candidates that passed the caller's tests.
    ValidatedArbiter,
    /// No first candidate passed; one sent back with its failure came back passing.
    Repaired,
    /// The generated checks decided: the candidate of the best group (candidates that pass the
    /// same generated tests, scored by candidates × tests passed).
    Agreement,
    /// The generated checks left several candidates tied; the largest cluster of identical
    /// behaviour on the probe inputs decided.
    Behaviour,
    /// Tied clusters of behaviour; the arbiter, shown the inputs on which they disagree with
    /// each one's output, gave the same verdict in both orders.
    Distinguished,
    /// Neither tests nor behaviour nor distinguishing inputs decided: the arbiter chose among
    /// the tied candidates only.
    AgreementArbiter,
}

/// What happened to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    Created,
    Updated,
    Unchanged,
    Failed,
    /// The file was removed (an edit's delete, or the source of a move); the operation's kept
    /// content is what the file held, so that the removal can be taken back.
    Deleted,
    /// Nothing was written: the content (kept with the operation) was proposed for review, in
    /// a change set (`detail.review.change_id`), and lands only when that is applied.
    Proposed,
    /// Nothing was written: a reviewer rejected the content a change set proposed for the
    /// file, or some of its hunks (`detail.review`).
    Rejected,
}

/// Where the operation stands. `Pending` means recorded but the write not yet confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    Pending,
    Succeeded,
    Failed,
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    Running,
    Success,
    PartialSuccess,
    Error,
    /// Its files were proposed for review, not written: a change set holds them until it is
    /// applied, rejected or expires.
    AwaitingReview,
}

macro_rules! str_enum {
    ($t:ty { $($v:ident => $s:literal),+ $(,)? }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),+ }
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($s => Ok(Self::$v),)+
                    other => Err(format!("unknown {}: {other}", stringify!($t))),
                }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
str_enum!(FileKind { Code => "code", Image => "image", Direct => "direct", Run => "run" });
str_enum!(OperationKind { Created => "created", Updated => "updated", Unchanged => "unchanged", Failed => "failed", Deleted => "deleted", Proposed => "proposed", Rejected => "rejected" });
str_enum!(OperationStatus { Pending => "pending", Succeeded => "succeeded", Failed => "failed" });
str_enum!(Selection { SingleCandidate => "single_candidate", Arbiter => "arbiter", ArbiterFailedFirstViable => "arbiter_failed_first_viable", Fallback => "fallback", Rollback => "rollback", Direct => "direct", Validated => "validated", ValidatedArbiter => "validated_arbiter", Repaired => "repaired", Agreement => "agreement", Behaviour => "behaviour", Distinguished => "distinguished", AgreementArbiter => "agreement_arbiter" });
str_enum!(RequestStatus { Running => "running", Success => "success", PartialSuccess => "partial_success", Error => "error", AwaitingReview => "awaiting_review" });
str_enum!(CallRole { Arbiter => "arbiter", TestWriter => "test_writer", Distinguishing => "distinguishing" });

/// A model call made for a file that was not a candidate: the arbiter's verdict, a generated
/// test file, a question about distinguishing inputs. Paid for like a candidate, so spend and
/// model statistics count it (the operation's `detail.calls`, the file's `calls`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallRecord {
    pub role: CallRole,
    pub model: String,
    pub latency_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Why the call gave no answer (the model layer's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CallRecord {
    /// The record of one call, answered or not.
    pub fn of(
        role: CallRole,
        model: &str,
        waited: std::time::Duration,
        answer: &Result<crate::model::ChatResponse, crate::model::ModelError>,
    ) -> CallRecord {
        let mut record = CallRecord {
            role,
            model: model.to_string(),
            latency_ms: waited.as_millis() as u64,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
            cost: None,
            error: None,
        };
        match answer {
            Ok(resp) => {
                record.latency_ms = resp.latency.as_millis() as u64;
                record.prompt_tokens = resp.usage.prompt_tokens;
                record.completion_tokens = resp.usage.completion_tokens;
                record.cached_tokens = resp.usage.cached_tokens;
                record.cost = resp.usage.cost;
            }
            Err(e) => record.error = Some(e.to_string()),
        }
        record
    }

    /// The calls an operation's `detail` records (none when it holds no `calls`).
    pub fn in_detail(detail: Option<&serde_json::Value>) -> Vec<CallRecord> {
        detail
            .and_then(|d| d.get("calls"))
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default()
    }
}

/// One model's answer for one file, as recorded and as returned to the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
pub struct CandidateRecord {
    pub model: String,
    pub ok: bool,
    pub latency_ms: u64,
    /// Whether the extracted code parsed; `None` when no parser exists for the language.
    pub parsed: Option<bool>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Of `prompt_tokens`, those the provider served from its prompt cache (billed at its
    /// cached price, which `cost` already reflects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    pub cost: Option<f64>,
    /// Why the candidate is not usable: the model layer's class (`rate_limited`, …) or writ's
    /// own (`no_code`, `bad_image`, `cancelled`).
    pub error_class: Option<crate::model::ErrorClass>,
    pub error: Option<String>,
    /// The repair round that produced this candidate (absent for the first answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// How the candidate did against the caller's tests, when the batch asked for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ValidationRecord>,
    /// How the candidate did on the generated checks, when they ran (`options.validation.generate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_checks: Option<GeneratedCheckRecord>,
    /// For a file that existed: whether the answer came as `edits` or as a `whole_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_form: Option<writ_checks::AnswerForm>,
    /// Set (`whitespace`) when an edit matched only by ignoring trailing whitespace and
    /// indentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_fallback: Option<writ_checks::edit::Fallback>,
    /// What a `removed_definitions` candidate dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_definitions: Vec<String>,
    /// Why the model's first answer did not apply: it was sent back once with this, and this
    /// record is its second answer (latency, tokens and cost count both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_retry_error: Option<String>,
}

/// One candidate's run of the caller's tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ValidationRecord {
    /// Every command exited 0 within its time.
    pub passed: bool,
    /// The command that decided: the first that failed, else the last.
    pub command: String,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// All commands, in milliseconds.
    pub duration_ms: u64,
    /// The end of the deciding command's output (stdout then stderr), bounded.
    pub output_tail: String,
    /// The project's diagnostics (`WRIT_DIAGNOSTICS`), when they ran on the candidate: they run
    /// first, so when they failed, `command` and `output_tail` are theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<DiagnosticsRecord>,
}

/// One candidate's run of the project's diagnostics for its language (`WRIT_DIAGNOSTICS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DiagnosticsRecord {
    /// The configured command that ran.
    pub command: String,
    /// It exited 0 in time: the candidate is clean.
    pub passed: bool,
}

/// One candidate's results on the generated checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GeneratedCheckRecord {
    /// Generated tests (those kept) it passed.
    pub passed: usize,
    /// The kept tests it failed, by id (`file::test`).
    pub failed: Vec<String>,
    /// Its place among the groups of [`GeneratedChecks::groups`] (candidates passing the same tests).
    pub group: usize,
    /// Its cluster of identical behaviour on the probe inputs, when behaviour was compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<usize>,
    /// How long its sandboxed run took.
    pub duration_ms: u64,
}

/// A file's generated checks: who wrote them, what was kept, how the candidates grouped and
/// what the arbiter was shown. In the answer (`validation.generated_checks`) and in the
/// operation record (`detail.generated_checks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GeneratedChecks {
    /// Whether they chose the file, and if not, why not.
    #[serde(default)]
    pub status: GeneratedChecksStatus,
    /// Each test-writing model's call.
    pub writers: Vec<TestWriterCall>,
    /// The test files as they ran (or, for one that could not run, as written).
    pub files: Vec<GeneratedTestFile>,
    /// What writ changed in the files as written so they test the file under test (the whole
    /// tests of a file cut off mid-way kept, a stub of a name under test removed, the import
    /// of the file pointed at it), each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adjusted: Vec<String>,
    /// The tests kept, by id.
    pub tests: Vec<String>,
    /// Tests and test files dropped, each with why.
    pub discarded: Vec<String>,
    /// Probe inputs whose outputs were compared.
    pub probes: usize,
    /// Candidates grouped by the tests they pass, best score first.
    pub groups: Vec<CheckGroup>,
    /// The inputs on which tied candidates disagreed, as shown to the arbiter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub distinguishing: Vec<DistinguishingInput>,
    /// Why the checks could not decide, when they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the generated checks did for a file.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GeneratedChecksStatus {
    /// The generated tests, or the candidates' behaviour on the probe inputs, chose the file
    /// (`selection`: `agreement`, `behaviour` or `distinguished`).
    #[default]
    Decided,
    /// They ran and left several candidates tied: the arbiter chose among those only
    /// (`agreement_arbiter`).
    Tied,
    /// One distinct candidate stood (or one passed the caller's tests): nothing to choose.
    NotNeeded,
    /// Tests were written, but no test ran on any candidate and no probe input told them
    /// apart: the arbiter chose among all of them.
    NoUsableTests,
    /// No test-writing model gave a test file that could run (a failed call, an answer without
    /// code, a file that does not parse even in part): the arbiter chose.
    NoTests,
    /// Generated checks are made for Python and JavaScript files only: the arbiter chose.
    UnsupportedLanguage,
    /// Nothing can run them here (no command for the language in `WRIT_CHECK_COMMANDS`, or the
    /// sandbox refused it): the arbiter chose.
    CannotRun,
}

impl GeneratedChecksStatus {
    /// Whether the generated checks were asked for and could not choose the file, so the
    /// arbiter (or the fallback) chose it without their evidence.
    pub fn unavailable(self) -> bool {
        matches!(
            self,
            Self::NoUsableTests | Self::NoTests | Self::UnsupportedLanguage | Self::CannotRun
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Decided => "decided",
            Self::Tied => "tied",
            Self::NotNeeded => "not_needed",
            Self::NoUsableTests => "no_usable_tests",
            Self::NoTests => "no_tests",
            Self::UnsupportedLanguage => "unsupported_language",
            Self::CannotRun => "cannot_run",
        }
    }
}

/// One test-writing model call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestWriterCall {
    pub model: String,
    pub ok: bool,
    pub latency_ms: u64,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A generated test file: where it ran (and is kept) and its text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GeneratedTestFile {
    pub path: String,
    pub model: String,
    pub content: String,
}

/// Candidates that pass the same set of generated tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckGroup {
    pub models: Vec<String>,
    pub tests_passed: usize,
    /// Candidates × tests passed.
    pub score: usize,
}

/// An input on which two clusters of candidates disagree, with each one's output, and the
/// arbiter's verdicts in both orders.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DistinguishingInput {
    pub input: String,
    /// Per cluster compared: its candidates' models and their output.
    pub outputs: Vec<ShownOutput>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShownOutput {
    pub models: Vec<String>,
    pub output: String,
}

/// A request as it is first recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRequest {
    pub id: Uuid,
    pub received_at: DateTime<Utc>,
    /// The route, e.g. `PUT /files/{path}` or `POST /write_codebase`.
    pub route: String,
    /// The API key id of the caller (never the key), when auth is on.
    pub caller: Option<String>,
    /// The key's scope that allowed the call, when auth is on: what the route or tool required.
    pub scope: Option<crate::keys::Scope>,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request body, so an idempotent replay with another body is detected.
    pub body_sha256: Option<String>,
    /// The workspace the request was made in (`default`: `REPO_DIR`).
    pub workspace: String,
}

impl NewRequest {
    /// A request's row as every surface opens it: received now, in `workspace`, made by the key
    /// `caller` holding `scope` (both `None` while auth is off, or for writ's own requests)
    /// through `route` (`PUT /files/{path}`, `tool edit_files`, `write session expiry`).
    pub fn opened(
        id: Uuid,
        route: impl Into<String>,
        caller: Option<String>,
        scope: Option<crate::keys::Scope>,
        workspace: impl Into<String>,
    ) -> NewRequest {
        NewRequest {
            id,
            received_at: Utc::now(),
            route: route.into(),
            caller,
            scope,
            idempotency_key: None,
            body_sha256: None,
            workspace: workspace.into(),
        }
    }

    /// The SHA-256 of the body the request carried.
    pub fn with_body(mut self, body_sha256: impl Into<String>) -> NewRequest {
        self.body_sha256 = Some(body_sha256.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub id: Uuid,
    pub received_at: DateTime<Utc>,
    pub route: String,
    pub caller: Option<String>,
    /// See [`NewRequest::scope`]; `None` too for requests recorded before scopes existed.
    pub scope: Option<crate::keys::Scope>,
    pub idempotency_key: Option<String>,
    pub body_sha256: Option<String>,
    pub status: RequestStatus,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    /// The response body returned to the caller, kept for idempotent replay.
    pub response: Option<serde_json::Value>,
    /// See [`NewRequest::workspace`]; `default` for requests recorded before workspaces existed.
    pub workspace: String,
}

/// What the prompts say of an earlier operation ([`AuditLog::recent_operations`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecentOperation {
    pub created_at: DateTime<Utc>,
    pub filename: String,
    pub operation: OperationKind,
    pub chosen_model: Option<String>,
}

/// One file touched by one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Operation {
    pub id: Uuid,
    pub request_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub filename: String,
    pub kind: FileKind,
    pub operation: OperationKind,
    pub status: OperationStatus,
    pub chosen_model: Option<String>,
    pub selection: Option<Selection>,
    pub arbiter_reason: Option<String>,
    pub candidates: Vec<CandidateRecord>,
    /// Hash of the file before this operation, if it existed.
    pub previous_sha256: Option<String>,
    pub sha256: Option<String>,
    pub bytes: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
    /// What else the operation needs to say (for an image: its size and format, and the model's).
    #[serde(default)]
    pub detail: Option<serde_json::Value>,
    /// The workspace whose file it is: the directory a restart reconciles a pending write in.
    /// The store records its request's (an operation is always made in its request's
    /// workspace), whatever a new operation says here.
    #[serde(default = "default_workspace")]
    pub workspace: String,
}

fn default_workspace() -> String {
    crate::workspace_registry::WorkspaceName::DEFAULT.to_owned()
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationOutcome {
    pub status: OperationStatus,
    pub operation: OperationKind,
    pub error: Option<String>,
    pub finished_at: DateTime<Utc>,
    pub duration_ms: Option<i64>,
}

/// Filters of `GET /operations`. All are optional and combine with AND.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationFilter {
    pub request_id: Option<Uuid>,
    pub filename: Option<String>,
    pub status: Option<OperationStatus>,
    /// Matches `chosen_model`.
    pub model: Option<String>,
    /// Only operations of requests made by this caller (`Some(None)`: requests made without a
    /// key); `None` does not filter.
    pub caller: Option<Option<String>>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Only operations in these workspaces (none at all when empty); `None` does not filter.
    pub workspaces: Option<Vec<String>>,
}

/// An opaque position in the newest-first listing; the store decides what it encodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor(pub String);

#[derive(Debug, Clone, PartialEq)]
pub struct OperationPage {
    pub operations: Vec<Operation>,
    pub next_cursor: Option<Cursor>,
}

/// One change to the records, for [`AuditLog::commit`], which writes several in one
/// transaction. What must be durable together commits together (a batch's request and job; its
/// last file's completion, its request's closing and its stored answer), and the changes of
/// concurrent batches share commits instead of queueing for one each.
#[derive(Debug, Clone)]
pub enum AuditWrite {
    /// Fails the commit with [`StoreError::Conflict`] if `(caller, idempotency_key)` is taken.
    InsertRequest(NewRequest),
    /// Fails the commit if the request is not recorded.
    FinishRequest {
        id: Uuid,
        status: RequestStatus,
        duration_ms: i64,
        response: Option<serde_json::Value>,
    },
    /// An operation in whatever state it is given, with the content written (if any).
    InsertOperation {
        operation: Operation,
        content: Option<Vec<u8>>,
    },
    /// Fails the commit if the operation is not recorded.
    CompleteOperation {
        id: Uuid,
        outcome: OperationOutcome,
    },
    InsertJob {
        job: crate::jobs::NewJob,
        status: crate::jobs::JobStatus,
    },
    /// Ends a job that has not ended yet; one that has (failed by a stale-job sweep) is left
    /// as it is, without failing the commit.
    FinishJob {
        id: Uuid,
        status: crate::jobs::JobStatus,
        batch_status: Option<String>,
        response: Option<serde_json::Value>,
        error: Option<String>,
    },
    AppendEvents(Vec<crate::jobs::JobEvent>),
    /// Keeps `content` under its SHA-256 (what a file held before an update), so that the
    /// update can be undone; content already kept is kept once, its time refreshed.
    KeepContent {
        sha256: String,
        content: Vec<u8>,
    },
    /// A change set proposed for review, with what its files held and what it proposes.
    ProposeChange {
        change: Box<crate::changes::ChangeSet>,
        contents: Vec<crate::changes::FileContents>,
    },
    /// A decision on a change set, and the state it leaves the set in. Fails the commit with
    /// [`StoreError::Conflict`] when the set already holds a decision of the same number: of
    /// two decisions taken on the same version, one lands.
    DecideChange {
        change_id: Uuid,
        decision: crate::changes::Decision,
        state: crate::changes::ChangeState,
        /// Hunks still open after it.
        undecided: usize,
    },
    /// Takes back decision `seq` of a change set (its files could not be written after it was
    /// recorded), and puts back the state before it.
    WithdrawDecision {
        change_id: Uuid,
        seq: i64,
        state: crate::changes::ChangeState,
        undecided: usize,
    },
}

/// The store whole: every role below, which PostgreSQL and SQLite implement in `writ-store`
/// (one conformance suite runs against both). Whoever needs one role takes that role's trait
/// (a batch's synthesis takes [`SynthesisStore`]); an `Arc<dyn AuditStore>` is handed to it as
/// such.
pub trait AuditStore:
    SynthesisStore
    + crate::keys::KeyStore
    + crate::sessions::SessionStore
    + crate::workspace_registry::WorkspaceStore
    + crate::claims::ClaimStore
    + crate::changes::ChangeStore
{
}

impl<T> AuditStore for T where
    T: SynthesisStore
        + crate::keys::KeyStore
        + crate::sessions::SessionStore
        + crate::workspace_registry::WorkspaceStore
        + crate::claims::ClaimStore
        + crate::changes::ChangeStore
{
}

/// What a batch's synthesis uses of the store: what its writes use, its job, and the budgets
/// and spend its model calls count against.
pub trait SynthesisStore:
    WriteStore + crate::jobs::JobStore + crate::budgets::BudgetStore + crate::budgets::SpendLedger
{
}

impl<T> SynthesisStore for T where
    T: WriteStore
        + crate::jobs::JobStore
        + crate::budgets::BudgetStore
        + crate::budgets::SpendLedger
{
}

/// What a recorded write uses of the store, whichever surface makes it: the audit log, and
/// whether the workspace it writes in is still stored (a deleted one refuses it).
pub trait WriteStore: AuditLog + crate::workspace_registry::WorkspaceStore {}

impl<T> WriteStore for T where T: AuditLog + crate::workspace_registry::WorkspaceStore {}

/// The audit log: requests, the operations on files and the contents they kept, the git commits
/// they went into, written in group commits; and the store's own upkeep (migrations, readiness).
#[async_trait]
pub trait AuditLog: Send + Sync + 'static {
    /// Backend name for reports (`postgres`, `sqlite`).
    fn backend(&self) -> &'static str;
    /// Whether only one process can use this store at a time (an embedded database): then work
    /// left unfinished at start-up is known to be abandoned, with no replica to wait for.
    fn single_process(&self) -> bool;
    /// Cheap round trip, for `/readyz`.
    async fn ping(&self) -> Result<(), StoreError>;
    /// Applies the migrations this build knows (idempotent; safe with several replicas starting).
    async fn migrate(&self) -> Result<(), StoreError>;
    /// Whether every migration this build knows has been applied.
    async fn is_migrated(&self) -> Result<bool, StoreError>;

    /// Writes `writes` in one transaction: all of them or none. Concurrent calls share commits
    /// (group commit), so a burst of small records costs a few commits, not one each; the
    /// single-record methods below go the same way.
    async fn commit(&self, writes: Vec<AuditWrite>) -> Result<(), StoreError>;

    /// Fails with [`StoreError::Conflict`] if `(caller, idempotency_key)` is already recorded.
    async fn insert_request(&self, req: &NewRequest) -> Result<(), StoreError>;
    async fn finish_request(
        &self,
        id: Uuid,
        status: RequestStatus,
        duration_ms: i64,
        response: Option<&serde_json::Value>,
    ) -> Result<(), StoreError>;
    async fn get_request(&self, id: Uuid) -> Result<Option<RequestRecord>, StoreError>;
    async fn find_request_by_idempotency_key(
        &self,
        caller: Option<&str>,
        key: &str,
    ) -> Result<Option<RequestRecord>, StoreError>;

    /// Records an operation in whatever state it is given, with the content written (if any).
    async fn insert_operation(
        &self,
        op: &Operation,
        content: Option<&[u8]>,
    ) -> Result<(), StoreError>;
    /// Moves an operation to its final state.
    async fn complete_operation(
        &self,
        id: Uuid,
        outcome: &OperationOutcome,
    ) -> Result<(), StoreError>;
    async fn get_operation(
        &self,
        id: Uuid,
    ) -> Result<Option<(Operation, Option<Vec<u8>>)>, StoreError>;
    /// Newest first; `limit` is already bounded by the caller.
    async fn list_operations(
        &self,
        filter: &OperationFilter,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<OperationPage, StoreError>;
    /// `caller`'s newest `limit` operations (`None`: those made without a key), newest first,
    /// as the prompts show them: read for every batch, so only the columns they need.
    async fn recent_operations(
        &self,
        caller: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RecentOperation>, StoreError>;
    /// Operations still `pending` (oldest first), for reconciliation after a crash.
    async fn pending_operations(&self) -> Result<Vec<Operation>, StoreError>;

    /// Content kept by [`AuditWrite::KeepContent`] under `sha256`; `None` when it is not kept
    /// (never kept, or pruned).
    async fn kept_content(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Forgets kept contents (of [`AuditWrite::KeepContent`] and of operations) recorded before
    /// `before`; the records themselves stay. Returns how many contents were dropped.
    async fn prune_contents(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Records that `request`'s files went into the git commit `commit` (made after the
    /// request's own records, by whoever commits for its workspace).
    async fn record_commit(&self, request: Uuid, commit: &str) -> Result<(), StoreError>;
    /// The git commit `request`'s files went into, if it was committed.
    async fn request_commit(&self, request: Uuid) -> Result<Option<String>, StoreError>;
}
