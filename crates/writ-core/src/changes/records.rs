//! What a change set is as stored: its files (each with its base's hash, its hunks and why its
//! content was chosen), and the decisions taken on it, in order. Its state is read from those
//! decisions ([`ChangeSet::state`]); nothing about it is kept anywhere else.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_checks::hunks::Hunk;

use crate::audit::FileKind;
use crate::files::Provenance;

/// Where a change set stands, in answers, listings and events alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeState {
    /// Nothing decided yet.
    Open,
    /// Every hunk applied.
    Applied,
    /// Some hunks applied; the others rejected, or still open.
    PartiallyApplied,
    /// Every hunk rejected.
    Rejected,
    /// Its time to be reviewed (`WRIT_REVIEW_TTL`) ran out with hunks still open: it can no
    /// longer be applied.
    Expired,
    /// Still open, but a file whose hunks are open no longer holds what the change was made
    /// from (nor what an earlier apply of it wrote): applying it needs `rebase`.
    Stale,
}

/// Where one hunk stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HunkState {
    Open,
    Applied,
    Rejected,
}

/// What a decision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    Applied,
    Rejected,
}

macro_rules! names {
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
names!(ChangeState { Open => "open", Applied => "applied", PartiallyApplied => "partially_applied", Rejected => "rejected", Expired => "expired", Stale => "stale" });
names!(DecisionKind { Applied => "applied", Rejected => "rejected" });

/// One file of a change set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeFile {
    pub path: String,
    pub kind: FileKind,
    /// SHA-256 of what the file held when the change was made; `None`: it did not exist.
    pub base_sha256: Option<String>,
    /// SHA-256 and size of the proposed content.
    pub sha256: String,
    pub bytes: usize,
    /// The change as hunks (view form). A file that is not UTF-8 text has one hunk, with no
    /// lines: the whole content.
    pub hunks: Vec<Hunk>,
    /// Which model made the content, how it was chosen, its candidates and its checks.
    pub provenance: Provenance,
    /// The operation that recorded the proposal (`proposed`, with the content).
    pub operation_id: Uuid,
}

impl ChangeFile {
    pub fn hunk(&self, id: &str) -> Option<&Hunk> {
        self.hunks.iter().find(|h| h.id == id)
    }

    /// Whether the file is UTF-8 text, whose hunks can be taken one by one and merged.
    pub fn is_text(&self) -> bool {
        !self.hunks.iter().any(|h| h.edits.is_empty())
    }
}

/// What a file held and what is proposed for it, kept beside the change set until it is
/// applied.
#[derive(Debug, Clone, PartialEq)]
pub struct FileContents {
    pub path: String,
    pub base: Option<Vec<u8>>,
    pub content: Vec<u8>,
}

/// One file of a decision: which of its hunks it applied or rejected, and what an apply wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DecidedFile {
    pub path: String,
    pub hunks: Vec<String>,
    /// What the file held once applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The operation that recorded this file's write or rejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<Uuid>,
    /// The hunks were merged into content changed since the change was made (`rebase`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rebased: bool,
}

/// An apply or a rejection of (part of) a change set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Decision {
    /// 1, 2, …: the change set holds one decision per number, so two decisions taken at once
    /// on the same version cannot both land.
    pub seq: i64,
    pub kind: DecisionKind,
    /// The request that took it (an apply's: undo it to take the apply back).
    pub request_id: Uuid,
    pub at: DateTime<Utc>,
    /// The key that took it (never the key itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    pub files: Vec<DecidedFile>,
}

/// A change set as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeSet {
    pub id: Uuid,
    /// The request that proposed it (a batch's, an edit's, a write session's).
    pub request_id: Uuid,
    /// That request's route (`POST /write_codebase`, `POST /edits`, …).
    pub route: String,
    /// The key that proposed it; only it (and an admin key) sees it.
    pub caller: Option<String>,
    pub workspace: String,
    pub created_at: DateTime<Utc>,
    /// When it can no longer be applied (`WRIT_REVIEW_TTL` after it was made).
    pub expires_at: DateTime<Utc>,
    /// What it is for, in a line (the batch's task, the edit's files).
    pub summary: Option<String>,
    /// Whether applying it commits, as the proposer asked (absent: as the workspace is set).
    pub commit: Option<bool>,
    pub files: Vec<ChangeFile>,
    /// Oldest first; `decisions.len()` is the change set's version.
    pub decisions: Vec<Decision>,
}

impl ChangeSet {
    pub fn file(&self, path: &str) -> Option<&ChangeFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// What the decisions made of one hunk.
    pub fn hunk_state(&self, path: &str, hunk: &str) -> HunkState {
        self.decisions
            .iter()
            .rev()
            .find_map(|d| {
                d.files
                    .iter()
                    .any(|f| f.path == path && f.hunks.iter().any(|h| h == hunk))
                    .then_some(match d.kind {
                        DecisionKind::Applied => HunkState::Applied,
                        DecisionKind::Rejected => HunkState::Rejected,
                    })
            })
            .unwrap_or(HunkState::Open)
    }

    /// The ids of `file`'s hunks in `state`.
    pub fn hunks_in(&self, file: &ChangeFile, state: HunkState) -> Vec<String> {
        file.hunks
            .iter()
            .filter(|h| self.hunk_state(&file.path, &h.id) == state)
            .map(|h| h.id.clone())
            .collect()
    }

    /// Hunks no decision has taken yet, over every file.
    pub fn undecided(&self) -> usize {
        self.files
            .iter()
            .map(|f| self.hunks_in(f, HunkState::Open).len())
            .sum()
    }

    /// What the last apply of this change set wrote to `path`, if one did.
    pub fn written(&self, path: &str) -> Option<&str> {
        self.decisions
            .iter()
            .rev()
            .filter(|d| d.kind == DecisionKind::Applied)
            .flat_map(|d| d.files.iter())
            .find(|f| f.path == path)
            .and_then(|f| f.sha256.as_deref())
    }

    /// The state as the decisions and the time give it (never [`ChangeState::Stale`], which
    /// needs the workspace: see [`super::Changes::view`]).
    pub fn state(&self, now: DateTime<Utc>) -> ChangeState {
        let all: Vec<HunkState> = self
            .files
            .iter()
            .flat_map(|f| f.hunks.iter().map(|h| self.hunk_state(&f.path, &h.id)))
            .collect();
        state_of(&all, now >= self.expires_at)
    }

    /// One file's state, as [`Self::state`] gives the set's.
    pub fn file_state(&self, file: &ChangeFile, now: DateTime<Utc>) -> ChangeState {
        let all: Vec<HunkState> = file
            .hunks
            .iter()
            .map(|h| self.hunk_state(&file.path, &h.id))
            .collect();
        state_of(&all, now >= self.expires_at)
    }
}

fn state_of(hunks: &[HunkState], expired: bool) -> ChangeState {
    let count = |s: HunkState| hunks.iter().filter(|h| **h == s).count();
    let (open, applied, rejected) = (
        count(HunkState::Open),
        count(HunkState::Applied),
        count(HunkState::Rejected),
    );
    match (open, applied, rejected) {
        (o, _, _) if o > 0 && expired => ChangeState::Expired,
        (o, 0, _) if o > 0 => ChangeState::Open,
        (o, _, _) if o > 0 => ChangeState::PartiallyApplied,
        (_, 0, _) => ChangeState::Rejected,
        (_, _, 0) => ChangeState::Applied,
        _ => ChangeState::PartiallyApplied,
    }
}

/// Which change sets a listing answers; the fields combine with AND.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangeFilter {
    pub workspace: String,
    /// Only those this key proposed; `None` does not filter.
    pub caller: Option<String>,
    /// Only those with hunks still open and not expired at this time.
    pub open_at: Option<DateTime<Utc>>,
}
