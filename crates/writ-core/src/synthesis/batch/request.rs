//! The `write_codebase` request as sent: the serde/schemars types the JSON body (and the
//! `write_codebase` tool's input schema) is read into, before any check. [`super::Batch::parse`]
//! turns them into the validated types.

use serde::Deserialize;

use crate::execution::CommandCall;
use crate::synthesis::image::ImageOptions;

/// The JSON body, as sent. Unknown keys anywhere are refused.
///
/// The same type is the input schema of the `write_codebase` tool (MCP and `GET /tools`), so the
/// doc comments below are what a model reads: they say what to send, not how writ works.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteCodebaseRequest {
    /// Always "write_codebase".
    #[schemars(extend("enum" = ["write_codebase"]))]
    pub command: String,
    /// What the files are for, shared by every file of the batch (at most 50,000 characters).
    #[serde(default)]
    pub task_description: Option<String>,
    /// One to five files to write. Describe each file; never put its content here.
    #[schemars(length(min = 1, max = 5))]
    pub files: Vec<FileRequest>,
    /// Files, folders and globs of the workspace every file's models should see (at most 20):
    /// "docs/api.md", "src/models/", "src/**/*.py". Files are shown whole (large ones as an
    /// outline of their definitions), folders as a tree of their files.
    #[serde(default)]
    #[schemars(length(max = 20))]
    pub context: Vec<String>,
    /// Rules every file must follow: style, versions, conventions (at most 10,000 characters).
    #[serde(default)]
    pub constraints: Option<String>,
    #[serde(default)]
    pub options: Option<BatchOptions>,
}

/// One file to write: where, and what it must do.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRequest {
    /// Path relative to the workspace root, e.g. "src/app.py". No "..", no absolute paths.
    #[serde(default)]
    pub filename: Option<String>,
    /// What the file must contain and do, in words (at most 20,000 characters). Models write the
    /// content from this; for an existing file, say what to change.
    #[serde(default)]
    pub code_description: Option<String>,
    /// Third-party packages the file may import (at most 100).
    #[serde(default)]
    pub external_imports: Vec<String>,
    /// Other files of the project the file imports from (at most 100).
    #[serde(default)]
    pub internal_imports: Vec<String>,
    /// Write only if the file's current SHA-256 is this (64 hex digits), to avoid overwriting a
    /// change you have not seen.
    #[serde(default)]
    pub expected_sha256: Option<String>,
    /// Size and format of an image file (overrides `options.image`).
    #[serde(default)]
    pub image: Option<ImageOptions>,
    /// Files, folders and globs of the workspace this file's models should see, besides the
    /// batch's `context` (at most 20).
    #[serde(default)]
    #[schemars(length(max = 20))]
    pub context: Vec<String>,
    /// Rules this file must follow, besides the batch's `constraints` (at most 10,000 characters).
    #[serde(default)]
    pub constraints: Option<String>,
}

/// How the batch runs. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchOptions {
    /// Overrides `CODE_LIST` for this batch.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Overrides `CODE_MODEL` for this batch.
    #[serde(default)]
    pub arbiter_model: Option<String>,
    /// Return the chosen content without writing.
    #[serde(default)]
    pub dry_run: bool,
    /// Write all files of the batch or none.
    #[serde(default)]
    pub atomic: bool,
    /// Answer 202 with a job id at once instead of waiting (same as `Prefer: respond-async`).
    #[serde(default, rename = "async")]
    pub run_async: bool,
    /// Overrides `IMAGE_MODEL` for this batch's image files.
    #[serde(default)]
    pub image_model: Option<String>,
    /// Size and format for every image file of the batch (a file's own `image` wins).
    #[serde(default)]
    pub image: Option<ImageOptions>,
    /// Overrides the deployment's straggler policy (`WRIT_STRAGGLER_*`) for this batch.
    #[serde(default)]
    pub straggler: Option<StragglerOptions>,
    /// Run these checks on every candidate; choose among those that pass, repair those that fail.
    #[serde(default)]
    pub validation: Option<ValidationOptions>,
    /// Spend fewer model calls when the caller's tests (`validation.commands`) can tell a
    /// passing candidate: stop the calls still running once one passes, or ask models in rounds.
    #[serde(default)]
    pub fanout: Option<FanoutOptions>,
    /// Let a change to an existing file remove definitions the description does not name, and
    /// shrink the file by more than the documented share. Off: such candidates are not viable.
    #[serde(default)]
    pub allow_removals: bool,
    /// Prompt tokens for the repository map (outlines of the files most related to each file);
    /// 0 turns it off. Default 2,000, at most 16,000.
    #[serde(default)]
    #[schemars(range(max = 16_000))]
    pub repo_map_tokens: Option<usize>,
    /// Commit what the batch wrote, where the workspace is a git repository: one commit of
    /// exactly its files. Overrides the workspace's setting and `WRIT_GIT_COMMIT`.
    #[serde(default)]
    pub commit: Option<bool>,
    /// Write nothing: propose the chosen content for review, as a change set to apply or reject
    /// per file and per hunk (`GET /changes/{id}`). Absent: as the server is set
    /// (`WRIT_REVIEW`).
    #[serde(default)]
    pub review: Option<bool>,
    /// Refuse the batch (409 `claimed`, before any model is called) when another workspace of
    /// the same repository has claimed one of its paths (`/workspaces/{name}/claims`); `false`
    /// writes them all the same. Absent: as the server is set (`WRIT_RESPECT_CLAIMS`).
    #[serde(default)]
    pub respect_claims: Option<bool>,
}

/// `options.validation` as sent.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidationOptions {
    /// Configured command names (`WRIT_COMMANDS`) with their arguments, run in order.
    #[serde(default)]
    pub commands: Vec<CommandCall>,
    /// Per command; at most the deployment's maximum (`WRIT_RUN_MAX_TIMEOUT_SECS`).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// How many times failing candidates are sent back to their models with the failure.
    #[serde(default)]
    pub repair_rounds: Option<u32>,
    #[serde(default)]
    pub on_fail: Option<OnFail>,
    /// Have test-writing models (`WRIT_TEST_MODELS`) write tests for each code file, and choose
    /// among the candidates (those passing `commands`, when given) by the tests they agree on
    /// and by their behaviour. With it, `commands` may be empty.
    #[serde(default)]
    pub generate: Option<bool>,
    /// With `generate`, write the generated tests the chosen candidate was checked with to this
    /// path of the workspace, e.g. "tests/test_calc.py" (a batch of one code file; same
    /// language). Tests the written file fails are kept, marked as skipped.
    #[serde(default)]
    pub keep_tests: Option<String>,
    /// Format the chosen candidate with the project's formatter for its language
    /// (`WRIT_FORMATTERS`) before it is written. Default: on wherever one is configured.
    #[serde(default)]
    pub format: Option<bool>,
    /// Check every candidate with the project's diagnostics for its language
    /// (`WRIT_DIAGNOSTICS`, e.g. a compiler or linter), like a test: failing candidates rank
    /// below passing ones and go to repair with the diagnostics' output. Default: on wherever
    /// configured. With this or `format` given, `commands` may be empty.
    #[serde(default)]
    pub diagnostics: Option<bool>,
}

/// `options.fanout` as sent. Both need `options.validation.commands` or
/// `options.validation.generate`: a candidate passes when it passes the caller's tests, or,
/// without them, when it and at least one other candidate agree on the generated tests (the
/// same tests passed, at least half of them, and the same outputs) better than any other.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FanoutOptions {
    /// Once a file has a candidate that passes the caller's tests (or, without them, two
    /// candidates that agree on the generated tests), cancel that file's model calls still
    /// running.
    #[serde(default)]
    pub stop_when_passing: Option<bool>,
    /// Ask only the first N models of the list first; ask the rest only if none of their
    /// candidates passes the caller's tests, or, without them, no two of them agree on the
    /// generated tests (1 to 8).
    #[serde(default)]
    #[schemars(range(min = 1, max = 8))]
    pub first_round: Option<usize>,
    /// `adaptive`: ask first only the models that writ's recorded outcomes say will pass for
    /// this file's language and kind, the others when they fail the checks (or not at all
    /// without checks); `off`: every model. Default: the server's `WRIT_ROUTING`.
    #[serde(default)]
    pub routing: Option<crate::synthesis::routing::Routing>,
}

/// What happens to a file none of whose candidates passes its checks.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnFail {
    /// The file fails with `validation_failed`; nothing is written.
    #[default]
    Refuse,
    /// The best unvalidated candidate is written, and the answer says it did not pass.
    WriteBest,
}

/// `options.straggler` as sent: when to stop waiting for the slowest candidates.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StragglerOptions {
    /// `"all"` (wait for every model), `"all_but_slowest"`, or a count of viable candidates.
    #[serde(default)]
    #[schemars(schema_with = "enough_schema")]
    pub enough: Option<serde_json::Value>,
    /// Then wait at most this many milliseconds for the rest...
    #[serde(default)]
    pub extra_ms: Option<u64>,
    /// ...or this multiple of the first viable candidate's latency.
    #[serde(default)]
    pub extra_factor: Option<f64>,
}

/// `enough` is kept as raw JSON so its refusal can name the sub-field; its schema says what
/// it accepts.
fn enough_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "\"all\" (wait for every model), \"all_but_slowest\", or a count of viable candidates.",
        "anyOf": [
            {"type": "string", "enum": ["all", "all_but_slowest"]},
            {"type": "integer", "minimum": 1}
        ]
    })
}
