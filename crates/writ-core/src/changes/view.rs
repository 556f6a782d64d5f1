//! A change set as callers see it: in the answer that proposed it, in `GET /changes/{id}` and
//! in the listing. The same types in every surface.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_checks::hunks::Hunk;

use super::{ChangeFile, ChangeSet, ChangeState, Decision, HunkState};
use crate::audit::{CandidateRecord, FileKind, Selection};

/// One hunk of a file's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HunkView {
    /// Stable: the same change always gives a hunk the same id, and deciding other hunks never
    /// changes it.
    pub id: String,
    pub state: HunkState,
    /// Where it stands in the file as it was (1-based) and as proposed, and the lines it spans
    /// there, three lines of context included.
    pub old_start: usize,
    pub old_lines: usize,
    pub new_start: usize,
    pub new_lines: usize,
    pub lines_added: usize,
    pub lines_removed: usize,
    /// The hunk as unified diff text, its `@@` header first (empty for content that is not
    /// text: the hunk is the whole file).
    pub diff: String,
}

impl HunkView {
    pub fn of(hunk: &Hunk, state: HunkState) -> Self {
        HunkView {
            id: hunk.id.clone(),
            state,
            old_start: hunk.old_start,
            old_lines: hunk.old_lines,
            new_start: hunk.new_start,
            new_lines: hunk.new_lines,
            lines_added: hunk.lines_added,
            lines_removed: hunk.lines_removed,
            diff: hunk.diff.clone(),
        }
    }
}

/// A file's proposed change, as the answer that proposed it gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileProposal {
    /// SHA-256 of what the file held when the change was made (null: it did not exist): the
    /// base an apply re-checks.
    pub base_sha256: Option<String>,
    /// The change from the base to the proposed content.
    pub hunks: Vec<HunkView>,
}

/// One file of a change set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangeFileView {
    pub path: String,
    pub kind: FileKind,
    /// `open`, `applied`, `partially_applied`, `rejected`, `expired`, or `stale` when its
    /// open hunks were made on content it no longer holds.
    pub state: ChangeState,
    pub base_sha256: Option<String>,
    /// What the file holds now (null: it does not exist).
    pub current_sha256: Option<String>,
    /// SHA-256 and size of the proposed content.
    pub sha256: String,
    pub bytes: usize,
    pub lines_added: usize,
    pub lines_removed: usize,
    pub hunks: Vec<HunkView>,
    /// The model that made the content, and how it was chosen.
    pub chosen_model: Option<String>,
    pub selection: Option<Selection>,
    pub arbiter_reason: Option<String>,
    /// Every candidate, with its checks and tests (the evidence the choice was made on).
    pub candidates: Vec<CandidateRecord>,
    /// The rest of the evidence: generated checks, other calls, formatting, the validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// The operation that recorded the proposal (with the content).
    pub operation_id: Uuid,
}

/// A change set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangeView {
    pub change_id: Uuid,
    pub state: ChangeState,
    /// The request that proposed it.
    pub request_id: Uuid,
    pub route: String,
    pub workspace: String,
    pub created_at: DateTime<Utc>,
    /// When it can no longer be applied.
    pub expires_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    pub files: Vec<ChangeFileView>,
    /// The applies and rejections taken on it, oldest first.
    pub decisions: Vec<Decision>,
}

impl ChangeView {
    /// `set` as it stands at `now`, given what each of its files holds (`currents`, in the
    /// set's order): a file whose open hunks no longer apply to it as they are is `stale`, and
    /// so is the set.
    pub fn of(set: &ChangeSet, currents: &[Option<String>], now: DateTime<Utc>) -> Self {
        let files: Vec<ChangeFileView> = set
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| file_view(set, f, currents.get(i).cloned().flatten(), now))
            .collect();
        let mut state = set.state(now);
        if matches!(state, ChangeState::Open | ChangeState::PartiallyApplied)
            && files.iter().any(|f| f.state == ChangeState::Stale)
        {
            state = ChangeState::Stale;
        }
        ChangeView {
            change_id: set.id,
            state,
            request_id: set.request_id,
            route: set.route.clone(),
            workspace: set.workspace.clone(),
            created_at: set.created_at,
            expires_at: set.expires_at,
            summary: set.summary.clone(),
            files,
            decisions: set.decisions.clone(),
        }
    }
}

/// Whether a file holding `current` still takes its change set's hunks without a rebase: it
/// holds what the change was made from, or what the set's last apply wrote to it.
pub fn takes_hunks(set: &ChangeSet, file: &ChangeFile, current: Option<&str>) -> bool {
    current == file.base_sha256.as_deref()
        || current.is_some_and(|c| set.written(&file.path) == Some(c))
}

fn file_view(
    set: &ChangeSet,
    f: &ChangeFile,
    current: Option<String>,
    now: DateTime<Utc>,
) -> ChangeFileView {
    let mut state = set.file_state(f, now);
    if matches!(state, ChangeState::Open | ChangeState::PartiallyApplied)
        && !takes_hunks(set, f, current.as_deref())
    {
        state = ChangeState::Stale;
    }
    ChangeFileView {
        path: f.path.clone(),
        kind: f.kind,
        state,
        base_sha256: f.base_sha256.clone(),
        current_sha256: current,
        sha256: f.sha256.clone(),
        bytes: f.bytes,
        lines_added: f.hunks.iter().map(|h| h.lines_added).sum(),
        lines_removed: f.hunks.iter().map(|h| h.lines_removed).sum(),
        hunks: f
            .hunks
            .iter()
            .map(|h| HunkView::of(h, set.hunk_state(&f.path, &h.id)))
            .collect(),
        chosen_model: f.provenance.chosen_model.clone(),
        selection: f.provenance.selection,
        arbiter_reason: f.provenance.arbiter_reason.clone(),
        candidates: f.provenance.candidates.clone(),
        detail: f.provenance.detail.clone(),
        operation_id: f.operation_id,
    }
}
