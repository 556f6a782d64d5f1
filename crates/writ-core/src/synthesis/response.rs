//! The answer to `write_codebase`, the same for HTTP, MCP and the CLI.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use crate::audit::Selection;
use crate::audit::{CallRecord, CandidateRecord, FileKind, OperationKind, RequestStatus};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Counts {
    pub total: usize,
    pub succeeded: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileResult {
    pub filename: String,
    /// `code` or `image`.
    pub kind: FileKind,
    pub success: bool,
    pub operation: Option<OperationKind>,
    pub bytes: Option<usize>,
    pub sha256: Option<String>,
    pub chosen_model: Option<String>,
    pub selection: Option<Selection>,
    pub arbiter_reason: Option<String>,
    pub candidates: Vec<CandidateRecord>,
    pub operation_id: Option<Uuid>,
    pub error: Option<String>,
    /// For an image file: what was written (size, format) and what the model had returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageInfo>,
    /// The chosen content, only for `dry_run` (an image as a data URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Whether what was chosen passed the caller's tests, when the batch asked for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<FileValidation>,
    /// For a file that existed: what the change did (lines added and removed, the unified diff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<writ_checks::shape::Change>,
    /// For a code file: the prompt tokens (estimated, four characters a token) each part of its
    /// candidates' prompt used, so a caller can see what the models saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_by_part: Option<PromptTokensByPart>,
    /// The model calls made for this file that were not candidates (the arbiter's, the test
    /// writers'), with what they cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallRecord>,
    /// For a code file whose language has a formatter (`WRIT_FORMATTERS`): whether the chosen
    /// candidate was formatted before it was written, by which command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formatted: Option<Formatted>,
    /// With `options.review`: the change proposed (not written) — its base's SHA-256 and its
    /// hunks, to apply or reject through the batch's `change_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<crate::changes::FileProposal>,
    /// With adaptive routing (`options.fanout.routing`, `WRIT_ROUTING`): which models were
    /// asked first, which only if those failed, which not at all, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<crate::synthesis::routing::RoutingDecision>,
}

/// The project's formatter on the chosen candidate (`WRIT_FORMATTERS`), run in the sandbox on
/// a scratch copy before the file is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Formatted {
    /// The configured command (`WRIT_COMMANDS`) that ran.
    pub command: String,
    /// What was written differs from the candidate as the model gave it.
    pub changed: bool,
    /// Why the candidate was written unformatted: the formatter failed, timed out, or printed
    /// nothing usable. Absent when its output was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The prompt tokens of each part of a code file's candidate prompt (estimated at four
/// characters a token).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PromptTokensByPart {
    /// The file's description, the batch's task, the imports named, the batch's other files.
    pub task: usize,
    /// The caller's `constraints`.
    pub constraints: usize,
    /// The files, folders and globs the caller named (`context`).
    pub named_context: usize,
    /// The files it imports and the files the batch's checks run, as found in the workspace.
    pub imported_files: usize,
    /// The repository map.
    pub repo_map: usize,
    /// The file's current content, when it exists.
    pub current_file: usize,
    /// The caller's recent operations.
    pub recent_operations: usize,
    /// The whole prompt: the parts, the system message and the instructions.
    pub total: usize,
}

/// A file's outcome against the caller's tests (`options.validation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileValidation {
    /// The content chosen (or, with `on_fail: "refuse"`, none) passed every command.
    pub passed: bool,
    /// Repair rounds used (0: a first candidate passed, or none was needed).
    pub rounds: u32,
    /// The generated checks, when they ran (`options.validation.generate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_checks: Option<Box<crate::audit::GeneratedChecks>>,
    /// The model calls `options.fanout` saved, when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<FanoutSaved>,
    /// The generated tests written to `options.validation.keep_tests`, when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_tests: Option<KeptTests>,
}

/// The generated tests kept in the workspace (`options.validation.keep_tests`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KeptTests {
    pub path: String,
    /// The test-writing model whose file was kept: the one whose tests the written file
    /// passes most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tests in the file the written content passes.
    pub passed: usize,
    /// Tests it fails, kept marked as skipped for the caller to look at.
    pub skipped: usize,
    /// The write's operation (absent: not written, see `error`; or a dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<uuid::Uuid>,
    /// Why nothing was kept or written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The file's content, until it is written.
    #[serde(skip)]
    pub content: Option<String>,
}

/// The model calls `options.fanout` saved for a file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FanoutSaved {
    /// Models never asked: a candidate of the first round passed (`first_round`).
    pub not_asked: Vec<String>,
    /// Models whose calls were cancelled once a candidate passed (`stop_when_passing`).
    pub stopped: Vec<String>,
}

impl FileResult {
    pub fn failed(
        filename: &str,
        kind: FileKind,
        error: impl Into<String>,
        candidates: Vec<CandidateRecord>,
    ) -> Self {
        FileResult {
            filename: filename.to_string(),
            kind,
            success: false,
            operation: None,
            bytes: None,
            sha256: None,
            chosen_model: None,
            selection: None,
            arbiter_reason: None,
            candidates,
            operation_id: None,
            error: Some(error.into()),
            image: None,
            content: None,
            validation: None,
            change: None,
            prompt_tokens_by_part: None,
            routing: None,
            calls: Vec::new(),
            formatted: None,
            proposal: None,
        }
    }
}

/// An image file's shape as written, and as the model returned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ImageInfo {
    pub width: u32,
    pub height: u32,
    pub format: String,
    pub model_width: u32,
    pub model_height: u32,
    pub model_format: String,
}

impl From<&crate::synthesis::image::ShapedImage> for ImageInfo {
    fn from(img: &crate::synthesis::image::ShapedImage) -> Self {
        ImageInfo {
            width: img.width,
            height: img.height,
            format: img.format.as_str().to_string(),
            model_width: img.original_size.0,
            model_height: img.original_size.1,
            model_format: img.original_format.as_str().to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BatchResponse {
    pub status: RequestStatus,
    pub request_id: Uuid,
    /// Absolute path of `REPO_DIR`.
    pub write_path: String,
    pub total_files: usize,
    pub succeeded: usize,
    pub code_files: Counts,
    pub image_files: Counts,
    pub results: Vec<FileResult>,
    pub duration_ms: u64,
    /// The commit of what the batch wrote, when it was committed (`options.commit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// With `options.review`: the change set holding the batch's files, proposed and not
    /// written (`status` is `awaiting_review`). Apply or reject it at `/changes/{change_id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<Uuid>,
    /// Near a budget's limit with `on_limit: degrade`: what the batch gave up (fewer models,
    /// or only the cheapest) and which budget made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<crate::budgets::Degraded>,
    /// Paths the batch wrote that another workspace of the same repository, or the branch
    /// this workspace's branch merges back into, changed too since they share a base (also the
    /// job's `overlap` events; `GET /workspaces/{name}/overlaps` lists them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<crate::overlaps::Overlap>,
    /// The batch's critical path of upstream calls (its slowest file's candidates, arbiter and
    /// fallback); not part of the answer, it is how writ's own overhead is measured.
    #[serde(skip)]
    pub upstream: std::time::Duration,
}

impl BatchResponse {
    pub fn assemble(
        request_id: Uuid,
        write_path: String,
        results: Vec<FileResult>,
        duration_ms: u64,
    ) -> Self {
        let count = |kind: FileKind| Counts {
            total: results.iter().filter(|r| r.kind == kind).count(),
            succeeded: results
                .iter()
                .filter(|r| r.kind == kind && r.success)
                .count(),
        };
        let succeeded = results.iter().filter(|r| r.success).count();
        let status = if succeeded == results.len() {
            RequestStatus::Success
        } else if succeeded == 0 {
            RequestStatus::Error
        } else {
            RequestStatus::PartialSuccess
        };
        BatchResponse {
            status,
            request_id,
            write_path,
            total_files: results.len(),
            succeeded,
            code_files: count(FileKind::Code),
            image_files: count(FileKind::Image),
            results,
            duration_ms,
            commit: None,
            change_id: None,
            degraded: None,
            overlaps: Vec::new(),
            upstream: std::time::Duration::ZERO,
        }
    }
}
