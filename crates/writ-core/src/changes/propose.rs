//! A proposal: files' chosen contents made into a change set instead of being written. Each
//! file's operation is recorded (`proposed`, with its content and candidates, so spend and the
//! model statistics count it as any write's), the change set with its hunks, and its first
//! event; the caller commits them with its request's records.

use std::time::Duration;

use chrono::Utc;
use sha2::{Digest, Sha256};
use uuid::Uuid;
use writ_checks::hunks::{self, Hunk};
use writ_checks::shape::view;

use super::{ChangeFile, ChangeSet, FileContents, FileProposal, HunkState, HunkView};
use crate::audit::{AuditWrite, FileKind, Operation, OperationKind, OperationStatus};
use crate::content::sha256_hex;
use crate::files::Provenance;
use crate::jobs::JobEvent;
use crate::path::RepoPath;
use crate::synthesis::progress::Event;

/// A file's chosen content, proposed for review instead of written.
#[derive(Debug, Clone)]
pub struct ProposedFile {
    pub path: RepoPath,
    pub kind: FileKind,
    /// What the file held when the content was made (`None`: it did not exist).
    pub base: Option<Vec<u8>>,
    pub content: Vec<u8>,
    pub provenance: Provenance,
}

/// Who proposes, and what the change set says of itself.
#[derive(Debug, Clone)]
pub struct Proposer {
    pub change_id: Uuid,
    /// The request that proposes (its operations record the files).
    pub request_id: Uuid,
    pub route: String,
    pub caller: Option<String>,
    pub workspace: String,
    pub summary: Option<String>,
    /// Whether applying commits (absent: as the workspace is set).
    pub commit: Option<bool>,
    /// How long the change set may be applied (`WRIT_REVIEW_TTL`).
    pub ttl: Duration,
}

/// One file of a proposal, for its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposedOutcome {
    /// `proposed`, or `unchanged` when the content is what the file holds (nothing to review).
    pub operation: OperationKind,
    pub operation_id: Uuid,
    pub sha256: String,
    pub bytes: usize,
    /// The change, for a `proposed` file.
    pub proposal: Option<FileProposal>,
}

/// What [`propose`] made.
#[derive(Debug, Clone)]
pub struct Proposed {
    /// `None` when no file changes anything.
    pub change: Option<ChangeSet>,
    /// Per file, in the order given.
    pub files: Vec<ProposedOutcome>,
    /// To commit with the request's records: the operations, the change set, its first event.
    pub writes: Vec<AuditWrite>,
}

/// The change set of `files`, and the records that make it.
pub fn propose(by: Proposer, files: Vec<ProposedFile>) -> Proposed {
    let now = Utc::now();
    let mut writes = Vec::with_capacity(files.len() + 2);
    let mut outcomes = Vec::with_capacity(files.len());
    let mut changed: Vec<ChangeFile> = Vec::new();
    let mut contents: Vec<FileContents> = Vec::new();
    for f in files {
        let hunks = hunks_of(f.base.as_deref(), &f.content);
        let sha256 = sha256_hex(&f.content);
        let base_sha256 = f.base.as_deref().map(sha256_hex);
        let operation = if hunks.is_empty() {
            OperationKind::Unchanged
        } else {
            OperationKind::Proposed
        };
        let mut detail = match f.provenance.detail.clone() {
            Some(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        if operation == OperationKind::Proposed {
            detail.insert(
                "review".into(),
                serde_json::json!({ "change_id": by.change_id, "hunks": hunks.len() }),
            );
        }
        let op = Operation {
            id: Uuid::now_v7(),
            request_id: by.request_id,
            created_at: now,
            finished_at: Some(now),
            filename: f.path.to_string(),
            kind: f.kind,
            operation,
            status: OperationStatus::Succeeded,
            chosen_model: f.provenance.chosen_model.clone(),
            selection: f.provenance.selection,
            arbiter_reason: f.provenance.arbiter_reason.clone(),
            candidates: f.provenance.candidates.clone(),
            previous_sha256: base_sha256.clone(),
            sha256: Some(sha256.clone()),
            bytes: Some(f.content.len() as i64),
            error: None,
            duration_ms: Some(0),
            detail: (!detail.is_empty()).then_some(serde_json::Value::Object(detail)),
            workspace: by.workspace.clone(),
        };
        let proposal = (operation == OperationKind::Proposed).then(|| FileProposal {
            base_sha256: base_sha256.clone(),
            hunks: hunks
                .iter()
                .map(|h| HunkView::of(h, HunkState::Open))
                .collect(),
        });
        outcomes.push(ProposedOutcome {
            operation,
            operation_id: op.id,
            sha256: sha256.clone(),
            bytes: f.content.len(),
            proposal,
        });
        if operation == OperationKind::Proposed {
            changed.push(ChangeFile {
                path: f.path.to_string(),
                kind: f.kind,
                base_sha256,
                sha256,
                bytes: f.content.len(),
                hunks,
                provenance: f.provenance,
                operation_id: op.id,
            });
            contents.push(FileContents {
                path: f.path.to_string(),
                base: f.base,
                content: f.content.clone(),
            });
        }
        writes.push(AuditWrite::InsertOperation {
            operation: op,
            content: Some(f.content),
        });
    }
    if changed.is_empty() {
        return Proposed {
            change: None,
            files: outcomes,
            writes,
        };
    }
    let ttl = chrono::Duration::from_std(by.ttl).unwrap_or(chrono::Duration::MAX);
    let change = ChangeSet {
        id: by.change_id,
        request_id: by.request_id,
        route: by.route,
        caller: by.caller,
        workspace: by.workspace,
        created_at: now,
        expires_at: now.checked_add_signed(ttl).unwrap_or(now),
        summary: by.summary,
        commit: by.commit,
        files: changed,
        decisions: Vec::new(),
    };
    writes.push(AuditWrite::ProposeChange {
        change: Box::new(change.clone()),
        contents,
    });
    writes.push(AuditWrite::AppendEvents(vec![change_event(
        change.id,
        1,
        &proposed_event(&change),
    )]));
    Proposed {
        change: Some(change),
        files: outcomes,
        writes,
    }
}

/// The change from `base` to `content` as hunks: line hunks where both are UTF-8 text (in view
/// form), else one hunk that is the whole content.
pub fn hunks_of(base: Option<&[u8]>, content: &[u8]) -> Vec<Hunk> {
    if base == Some(content) {
        return Vec::new();
    }
    let base_text = match base {
        None => Some(String::new()),
        Some(b) => std::str::from_utf8(b).ok().map(view),
    };
    let lines = match (base_text, std::str::from_utf8(content)) {
        (Some(old), Ok(new)) => hunks::split(&old, &view(new)),
        _ => Vec::new(),
    };
    if lines.is_empty() {
        // Not text, or text that differs only in its shape (line endings, BOM): the whole.
        return vec![whole(base, content)];
    }
    lines
}

/// Content that is not text: one hunk, the whole file, with no lines.
fn whole(base: Option<&[u8]>, content: &[u8]) -> Hunk {
    let digest = Sha256::digest(content);
    Hunk {
        id: hex::encode(&digest[..5]),
        old_start: 0,
        old_lines: 0,
        new_start: 0,
        new_lines: 0,
        lines_added: 0,
        lines_removed: 0,
        diff: format!(
            "Binary content: {} bytes replace {}\n",
            content.len(),
            base.map_or("nothing".to_string(), |b| format!("{} bytes", b.len()))
        ),
        edits: Vec::new(),
    }
}

/// The `change_proposed` event of `change`: on the proposing batch's stream, and first on the
/// change set's own.
pub fn proposed_event(change: &ChangeSet) -> Event {
    Event::ChangeProposed {
        change_id: change.id,
        state: super::ChangeState::Open,
        files: change
            .files
            .iter()
            .map(|f| super::DecidedFile {
                path: f.path.clone(),
                hunks: f.hunks.iter().map(|h| h.id.clone()).collect(),
                sha256: None,
                operation_id: None,
                rebased: false,
            })
            .collect(),
        expires_at: change.expires_at,
    }
}

/// Event `seq` of change set `id`'s stream (stored with the jobs' events, under the set's id:
/// the proposal is 1, decision `n` is `n + 1`).
pub(super) fn change_event(id: Uuid, seq: i64, event: &Event) -> JobEvent {
    JobEvent {
        job_id: id,
        seq,
        created_at: Utc::now(),
        name: event.name().to_string(),
        data: serde_json::to_value(event).unwrap_or(serde_json::Value::Null),
    }
}
