//! Reading change sets and deciding on them: the view and the listing, an apply (all or
//! nothing, each base re-checked, undoable) and a rejection. See the module docs of
//! [`super`].

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_checks::hunks::{self, Hunk};
use writ_checks::shape::{render, view};

use super::propose::change_event;
use super::selection::{Chosen, select};
use super::view::takes_hunks;
use super::{
    ChangeError, ChangeFile, ChangeFilter, ChangeSet, ChangeState, ChangeView, ChangedFile,
    ConflictedFile, DecidedFile, Decision, DecisionKind, FileContents, HunkState, HunkView,
    MAX_COMMENT_BYTES, MAX_LISTED, ReviewSettings,
};
use crate::audit::{
    AuditStore, AuditWrite, NewRequest, Operation, OperationKind, OperationStatus, RequestStatus,
};
use crate::content::sha256_hex;
use crate::files::{
    GroupRefused, GroupedWrite, Provenance, WriteError, WriteMode, WriteSpec, write_all_or_nothing,
};
use crate::path::RepoPath;
use crate::store::StoreError;
use crate::synthesis::progress::Event;
use crate::workspace::Workspace;

/// Tries of a decision that lost its number to another decision taken at the same time: each
/// round reads the set again, so a decision that still applies lands, and one that no longer
/// does is refused with why.
const DECISION_ATTEMPTS: usize = 5;

mod reject;

/// Who reads or decides, and through which surface.
#[derive(Debug, Clone)]
pub struct Reviewer {
    /// The request a decision is recorded as.
    pub request_id: Uuid,
    pub caller: Option<String>,
    pub scope: Option<crate::keys::Scope>,
    pub route: String,
    /// Only the change sets this key proposed are visible; `None`: every one (an admin key, or
    /// auth off).
    pub only: Option<String>,
    /// Only change sets in these workspaces are visible; `None`: any workspace's.
    pub workspaces: Option<Vec<String>>,
}

/// `POST /changes/{id}/apply` and the `apply_change` tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyChange {
    /// Apply every open hunk of these files. With neither `files` nor `hunks` (or both
    /// empty), every open hunk of the change set.
    #[serde(default)]
    pub files: Vec<String>,
    /// Apply these hunks, by path: `{"src/app.py": ["3fa2b1c9d0", …]}`.
    #[serde(default)]
    pub hunks: BTreeMap<String, Vec<String>>,
    /// Kept with the decision (at most 4096 bytes).
    #[serde(default)]
    pub comment: Option<String>,
    /// Merge the hunks into files that changed since the change was made (three-way: their
    /// changes are kept; a hunk whose lines changed too is a conflict), instead of refusing
    /// those files.
    #[serde(default)]
    pub rebase: bool,
    /// Commit what the apply writes, where the workspace is a git repository; absent: as the
    /// change set was proposed, else as the workspace is set.
    #[serde(default)]
    pub commit: Option<bool>,
}

/// `POST /changes/{id}/reject` and the `reject_change` tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectChange {
    /// Reject every open hunk of these files. With neither `files` nor `hunks` (or both
    /// empty), every open hunk of the change set.
    #[serde(default)]
    pub files: Vec<String>,
    /// Reject these hunks, by path.
    #[serde(default)]
    pub hunks: BTreeMap<String, Vec<String>>,
    /// Why (at most 4096 bytes): kept with the decision and the files' operations.
    #[serde(default)]
    pub comment: Option<String>,
}

/// One file an apply wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppliedFile {
    pub path: String,
    /// The hunks written.
    pub hunks: Vec<String>,
    /// `created`, `updated` or `unchanged`.
    pub operation: OperationKind,
    pub operation_id: Uuid,
    pub sha256: String,
    pub previous_sha256: Option<String>,
    pub bytes: usize,
    /// The hunks were merged into content changed since the change was made.
    pub rebased: bool,
    /// The model that made the content, and how it was chosen.
    pub chosen_model: Option<String>,
    pub selection: Option<crate::audit::Selection>,
}

/// The answer of an apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppliedChange {
    pub change_id: Uuid,
    /// The request the apply is recorded as: undo it to take the apply back.
    pub request_id: Uuid,
    /// The change set's state after the apply.
    pub state: ChangeState,
    pub files: Vec<AppliedFile>,
    /// Hunks of the change set still open.
    pub open_hunks: usize,
    /// The commit of what the apply wrote, when it was committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Whether the proposer asked for a commit (absent: it did not say).
    #[serde(skip)]
    pub commit_asked: Option<bool>,
    /// When the workspace is a git checkout: each path written that another workspace of its
    /// repository, or the branch it goes back to, changed too since they share a base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<crate::overlaps::Overlap>,
}

/// One file a rejection decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RejectedFile {
    pub path: String,
    pub hunks: Vec<String>,
    /// The operation recording the rejection (`rejected`), with the model that made the content.
    pub operation_id: Uuid,
}

/// The answer of a rejection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RejectedChange {
    pub change_id: Uuid,
    /// The request the rejection is recorded as.
    pub request_id: Uuid,
    pub state: ChangeState,
    pub files: Vec<RejectedFile>,
    pub open_hunks: usize,
}

/// Everything reading and deciding on change sets needs.
#[derive(Clone, Copy)]
pub struct Changes<'a> {
    pub store: &'a dyn AuditStore,
    /// The workspace of the request: a change set of another is as absent as another key's.
    pub workspace: &'a dyn Workspace,
    pub settings: &'a ReviewSettings,
}

/// One file of an apply, planned: what it will hold and what it must hold until then.
struct Planned {
    chosen: Chosen,
    path: RepoPath,
    content: Vec<u8>,
    /// What the file held when planned: the write goes ahead only over exactly that.
    expected: String,
    previous_sha256: Option<String>,
    rebased: bool,
}

impl Changes<'_> {
    /// The change set as it stands, with what its files hold now.
    pub async fn get(&self, who: &Reviewer, id: &str) -> Result<ChangeView, ChangeError> {
        let set = self.load(who, id).await?;
        Ok(self.view(&set).await)
    }

    /// The change sets of this workspace the caller may see, newest first; `open` keeps those
    /// with hunks still open and time left.
    pub async fn list(
        &self,
        who: &Reviewer,
        open: bool,
        limit: u32,
    ) -> Result<Vec<ChangeView>, ChangeError> {
        if !who.sees_workspace(self.workspace.name()) {
            return Ok(Vec::new());
        }
        let filter = ChangeFilter {
            workspace: self.workspace.name().to_owned(),
            caller: who.only.clone(),
            open_at: open.then(Utc::now),
        };
        let sets = self
            .store
            .list_changes(&filter, limit.clamp(1, MAX_LISTED))
            .await?;
        let mut views = Vec::with_capacity(sets.len());
        for set in &sets {
            views.push(self.view(set).await);
        }
        Ok(views)
    }

    /// `set` as it stands, reading what its files hold now.
    async fn view(&self, set: &ChangeSet) -> ChangeView {
        let currents = self.current_hashes(set).await;
        ChangeView::of(set, &currents, Utc::now())
    }

    async fn current_hashes(&self, set: &ChangeSet) -> Vec<Option<String>> {
        let targets: Vec<(RepoPath, bool)> = set
            .files
            .iter()
            .filter_map(|f| RepoPath::parse(&f.path).ok().map(|p| (p, false)))
            .collect();
        self.workspace
            .read_targets(&targets)
            .await
            .into_iter()
            .map(|read| read.ok().flatten().as_deref().map(sha256_hex))
            .collect()
    }

    /// The change set `raw` names, when the caller may see it in this workspace.
    async fn load(&self, who: &Reviewer, raw: &str) -> Result<ChangeSet, ChangeError> {
        let not_found = || ChangeError::NotFound(raw.to_string());
        let id = Uuid::parse_str(raw).map_err(|_| not_found())?;
        let set = self.store.get_change(id).await?.ok_or_else(not_found)?;
        let visible = set.workspace == self.workspace.name()
            && who.sees_workspace(&set.workspace)
            && who
                .only
                .as_deref()
                .is_none_or(|own| set.caller.as_deref() == Some(own));
        if !visible {
            return Err(not_found());
        }
        Ok(set)
    }

    /// Refuses a change set nothing more can be decided on.
    fn still_open(set: &ChangeSet) -> Result<(), ChangeError> {
        match set.state(Utc::now()) {
            ChangeState::Expired => Err(ChangeError::Expired {
                id: set.id.to_string(),
                at: set.expires_at.to_rfc3339(),
            }),
            state @ (ChangeState::Applied
            | ChangeState::Rejected
            | ChangeState::PartiallyApplied)
                if set.undecided() == 0 =>
            {
                Err(ChangeError::Decided {
                    state,
                    message: format!(
                        "change set {} was already {state}; nothing was changed",
                        set.id
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Applies the hunks `req` names (all open ones by default), all or nothing; see the module
    /// docs.
    pub async fn apply(
        &self,
        who: &Reviewer,
        id: &str,
        req: ApplyChange,
    ) -> Result<AppliedChange, ChangeError> {
        let started = Instant::now();
        check_comment(req.comment.as_deref())?;
        let mut recorded = false;
        let applied = self.try_apply(who, id, &req, &mut recorded).await;
        if recorded {
            match &applied {
                Ok(answer) => {
                    self.finish(who, RequestStatus::Success, started, Some(answer))
                        .await
                }
                Err(_) => {
                    self.finish::<()>(who, RequestStatus::Error, started, None)
                        .await
                }
            }
        }
        applied
    }

    /// [`Self::apply`]'s tries; `recorded` is set once its request is.
    async fn try_apply(
        &self,
        who: &Reviewer,
        id: &str,
        req: &ApplyChange,
        recorded: &mut bool,
    ) -> Result<AppliedChange, ChangeError> {
        for _ in 0..DECISION_ATTEMPTS {
            let set = self.load(who, id).await?;
            Self::still_open(&set)?;
            let chosen = select(&set, &req.files, &req.hunks)?;
            let contents = self.store.change_contents(set.id).await?;
            let planned = self.plan(&set, &contents, chosen, req.rebase).await?;
            if !*recorded {
                self.record_request(who).await?;
                *recorded = true;
            }
            let seq = set.decisions.len() as i64 + 1;
            match self.write(who, &set, &planned, seq, req).await {
                Ok(answer) => return Ok(answer),
                // Another decision took this number, or another writer the file, since it was
                // read: nothing was written; read again and see.
                Err(GroupRefused {
                    error:
                        WriteError::AuditUnavailable(StoreError::Conflict(_))
                        | WriteError::PreconditionFailed { .. }
                        | WriteError::AlreadyExists { .. },
                    ..
                }) => continue,
                Err(GroupRefused { index, error }) => {
                    self.withdraw_if_recorded(set.id, seq, who.request_id).await;
                    return Err(ChangeError::Write {
                        path: planned
                            .get(index)
                            .map(|p| p.path.to_string())
                            .unwrap_or_default(),
                        source: error,
                    });
                }
            }
        }
        Err(ChangeError::Busy(id.to_string()))
    }

    /// What each chosen file will hold, read against what it holds now: its base, what this
    /// set's last apply wrote, or (with `rebase`) anything the hunks merge into.
    async fn plan(
        &self,
        set: &ChangeSet,
        contents: &[FileContents],
        chosen: Vec<Chosen>,
        rebase: bool,
    ) -> Result<Vec<Planned>, ChangeError> {
        let mut targets = Vec::with_capacity(chosen.len());
        for c in &chosen {
            let path = &set.files[c.file].path;
            let parsed = RepoPath::parse_nonempty(path).map_err(|e| ChangeError::Write {
                path: path.clone(),
                source: crate::workspace::WorkspaceError::from(e).into(),
            })?;
            targets.push((parsed, true));
        }
        let currents = self.workspace.read_targets(&targets).await;
        let mut planned = Vec::with_capacity(chosen.len());
        let mut changed = Vec::new();
        let mut conflicts = Vec::new();
        for ((c, (path, _)), current) in chosen.into_iter().zip(targets).zip(currents) {
            let file = &set.files[c.file];
            let current = current.map_err(|e| ChangeError::Write {
                path: file.path.clone(),
                source: e.into(),
            })?;
            let current_sha256 = current.as_deref().map(sha256_hex);
            let clean = takes_hunks(set, file, current_sha256.as_deref());
            if !clean && !rebase {
                changed.push(ChangedFile {
                    path: file.path.clone(),
                    base_sha256: file.base_sha256.clone(),
                    current_sha256,
                });
                continue;
            }
            let Some(stored) = contents.iter().find(|s| s.path == file.path) else {
                return Err(ChangeError::Audit(StoreError::Other(format!(
                    "the contents of '{}' in change set {} are missing",
                    file.path, set.id
                ))));
            };
            match merged(file, stored, current.as_deref(), &c.hunks, clean) {
                Ok(content) => planned.push(Planned {
                    chosen: c,
                    path,
                    content,
                    expected: current_sha256
                        .clone()
                        .unwrap_or_else(|| "absent".to_string()),
                    previous_sha256: current_sha256,
                    rebased: !clean,
                }),
                Err(ids) => conflicts.push(ConflictedFile {
                    path: file.path.clone(),
                    current_sha256,
                    hunks: ids
                        .iter()
                        .filter_map(|id| file.hunk(id))
                        .map(|h| HunkView::of(h, HunkState::Open))
                        .collect(),
                }),
            }
        }
        if !changed.is_empty() {
            return Err(ChangeError::ChangedSince(changed));
        }
        if !conflicts.is_empty() {
            return Err(ChangeError::Conflict(conflicts));
        }
        Ok(planned)
    }

    /// The planned files written as one group whose pending records carry decision `seq`.
    async fn write(
        &self,
        who: &Reviewer,
        set: &ChangeSet,
        planned: &[Planned],
        seq: i64,
        req: &ApplyChange,
    ) -> Result<AppliedChange, GroupRefused> {
        // The set as it will be once the decision lands, for the state it records.
        let mut after = set.clone();
        after.decisions.push(Decision {
            seq,
            kind: DecisionKind::Applied,
            request_id: who.request_id,
            at: Utc::now(),
            caller: who.caller.clone(),
            comment: req.comment.clone(),
            files: planned
                .iter()
                .map(|p| DecidedFile {
                    path: set.files[p.chosen.file].path.clone(),
                    hunks: p.chosen.hunks.clone(),
                    sha256: Some(sha256_hex(&p.content)),
                    operation_id: None,
                    rebased: p.rebased,
                })
                .collect(),
        });
        let now = Utc::now();
        let writes: Vec<GroupedWrite> = planned
            .iter()
            .map(|p| {
                let file = &set.files[p.chosen.file];
                GroupedWrite {
                    kind: file.kind,
                    spec: WriteSpec {
                        path: p.path.clone(),
                        content: p.content.clone(),
                        mode: WriteMode::Overwrite,
                        expected_sha256: Some(p.expected.clone()),
                        create_dirs: true,
                    },
                    provenance: decided_provenance(
                        &after,
                        file,
                        &p.chosen.hunks,
                        p.rebased,
                        req.comment.as_deref(),
                        now,
                    ),
                }
            })
            .collect();
        let decision = after.decisions.last().cloned();
        let state = after.state(now);
        let undecided = after.undecided();
        let change_id = set.id;
        let with = move |ops: &[&Operation]| -> Vec<AuditWrite> {
            let Some(mut decision) = decision.clone() else {
                return Vec::new();
            };
            for (f, op) in decision.files.iter_mut().zip(ops) {
                f.operation_id = Some(op.id);
            }
            let event = Event::ChangeApplied {
                change_id,
                request_id: decision.request_id,
                state,
                files: decision.files.clone(),
                comment: decision.comment.clone(),
            };
            vec![
                AuditWrite::DecideChange {
                    change_id,
                    decision,
                    state,
                    undecided,
                },
                AuditWrite::AppendEvents(vec![change_event(change_id, seq + 1, &event)]),
            ]
        };
        let written =
            write_all_or_nothing(self.store, self.workspace, who.request_id, writes, &with).await?;
        let completions: Vec<AuditWrite> = written.iter().filter_map(|(_, c)| c.clone()).collect();
        if let Err(e) = self.store.commit(completions).await {
            tracing::warn!(error = %e, "an apply was written but its records are still pending; reconciliation will settle them");
        }
        let files = planned
            .iter()
            .zip(written)
            .map(|(p, (receipt, _))| AppliedFile {
                chosen_model: set.files[p.chosen.file].provenance.chosen_model.clone(),
                selection: set.files[p.chosen.file].provenance.selection,
                path: p.path.to_string(),
                hunks: p.chosen.hunks.clone(),
                operation: receipt.operation,
                operation_id: receipt.operation_id,
                sha256: receipt.sha256,
                previous_sha256: p.previous_sha256.clone(),
                bytes: receipt.bytes,
                rebased: p.rebased,
            })
            .collect();
        Ok(AppliedChange {
            change_id,
            request_id: who.request_id,
            state,
            files,
            open_hunks: undecided,
            commit: None,
            commit_asked: set.commit,
            overlaps: Vec::new(),
        })
    }

    /// Takes back decision `seq` if this request recorded it (its files could not be written
    /// after all), so the hunks stay open.
    async fn withdraw_if_recorded(&self, id: Uuid, seq: i64, request_id: Uuid) {
        let set = match self.store.get_change(id).await {
            Ok(Some(set)) => set,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(change = %id, error = %e, "could not read a change set to take back an apply that was not written");
                return;
            }
        };
        if !set
            .decisions
            .iter()
            .any(|d| d.seq == seq && d.request_id == request_id)
        {
            return;
        }
        let mut before = set.clone();
        before.decisions.retain(|d| d.seq != seq);
        let withdraw = AuditWrite::WithdrawDecision {
            change_id: id,
            seq,
            state: before.state(Utc::now()),
            undecided: before.undecided(),
        };
        if let Err(e) = self.store.commit(vec![withdraw]).await {
            tracing::error!(change = %id, seq, error = %e, "an apply that was not written is still recorded on its change set");
        }
    }

    fn new_request(&self, who: &Reviewer) -> NewRequest {
        NewRequest::opened(
            who.request_id,
            who.route.clone(),
            who.caller.clone(),
            who.scope,
            self.workspace.name(),
        )
    }

    async fn record_request(&self, who: &Reviewer) -> Result<(), ChangeError> {
        Ok(self.store.insert_request(&self.new_request(who)).await?)
    }

    async fn finish<T: Serialize>(
        &self,
        who: &Reviewer,
        status: RequestStatus,
        started: Instant,
        answer: Option<&T>,
    ) {
        let response = answer.and_then(|a| serde_json::to_value(a).ok());
        if let Err(e) = self
            .store
            .finish_request(
                who.request_id,
                status,
                started.elapsed().as_millis() as i64,
                response.as_ref(),
            )
            .await
        {
            tracing::warn!(error = %e, "could not close the request record of a review decision");
        }
    }
}

impl Reviewer {
    fn sees_workspace(&self, name: &str) -> bool {
        self.workspaces
            .as_ref()
            .is_none_or(|ws| ws.iter().any(|w| w == name))
    }
}

fn check_comment(comment: Option<&str>) -> Result<(), ChangeError> {
    match comment {
        Some(c) if c.len() > MAX_COMMENT_BYTES => Err(ChangeError::Invalid {
            field: "comment".into(),
            message: format!("at most {MAX_COMMENT_BYTES} bytes, got {}", c.len()),
        }),
        _ => Ok(()),
    }
}

/// What `file` holds once `hunks` are applied to `current` (`clean`: it holds the base, or what
/// this set's last apply wrote). `Err`: the hunks that conflict with changes made since.
fn merged(
    file: &ChangeFile,
    stored: &FileContents,
    current: Option<&[u8]>,
    hunks: &[String],
    clean: bool,
) -> Result<Vec<u8>, Vec<String>> {
    let untouched = current.map(sha256_hex) == file.base_sha256;
    let every = hunks.len() == file.hunks.len();
    // The whole change on the content it was made from: the bytes proposed, as they are.
    if clean && untouched && every {
        return Ok(stored.content.clone());
    }
    if !file.is_text() {
        return if clean {
            Ok(stored.content.clone())
        } else {
            Err(hunks.to_vec())
        };
    }
    let as_text = |bytes: Option<&[u8]>| -> Option<String> {
        match bytes {
            None => Some(String::new()),
            Some(b) => std::str::from_utf8(b).ok().map(str::to_string),
        }
    };
    let (Some(base), Some(now)) = (as_text(stored.base.as_deref()), as_text(current)) else {
        return Err(hunks.to_vec());
    };
    let chosen: Vec<&Hunk> = hunks.iter().filter_map(|id| file.hunk(id)).collect();
    let merged =
        hunks::merge(&view(&base), &view(&now), &chosen).map_err(|conflict| conflict.hunks)?;
    Ok(match current {
        // Lines left as they were keep their bytes; new ones take the file's own shape.
        Some(_) => render(&now, &merged),
        None => merged,
    }
    .into_bytes())
}

/// The provenance a decided file's operation records: the model that made the content and how
/// it was chosen (its candidates were counted with the proposal), and the review.
fn decided_provenance(
    after: &ChangeSet,
    file: &ChangeFile,
    hunks: &[String],
    rebased: bool,
    comment: Option<&str>,
    now: chrono::DateTime<Utc>,
) -> Provenance {
    // Counted once, when a decision leaves none of the file's hunks open.
    let outcome = match after.file_state(file, now) {
        ChangeState::Applied => Some("applied"),
        ChangeState::Rejected => Some("rejected"),
        ChangeState::PartiallyApplied if after.hunks_in(file, HunkState::Open).is_empty() => {
            Some("partially_applied")
        }
        _ => None,
    };
    let mut review = serde_json::json!({
        "change_id": after.id,
        "hunks": hunks,
        "of": file.hunks.len(),
        "proposal": file.operation_id,
    });
    if let Some(map) = review.as_object_mut() {
        if let Some(outcome) = outcome {
            map.insert("outcome".into(), outcome.into());
        }
        if rebased {
            map.insert("rebased".into(), true.into());
        }
        if let Some(comment) = comment {
            map.insert("comment".into(), comment.into());
        }
    }
    Provenance {
        chosen_model: file.provenance.chosen_model.clone(),
        selection: file.provenance.selection,
        arbiter_reason: file.provenance.arbiter_reason.clone(),
        candidates: Vec::new(),
        detail: Some(serde_json::json!({ "review": review })),
    }
}
