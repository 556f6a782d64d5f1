//! A batch proposed for review (`options.review`, `WRIT_REVIEW`): each file's chosen content
//! becomes a proposal instead of a write, and the batch's proposals one change set
//! ([`crate::changes`]), recorded in the batch's closing commit with its answer.

use uuid::Uuid;

use crate::audit::{AuditWrite, CandidateRecord, FileKind, OperationKind};
use crate::changes::{ProposedFile, Proposer, propose, proposed_event};
use crate::files::Provenance;
use crate::synthesis::batch::FileSpec;
use crate::synthesis::response::{FileResult, FileValidation, ImageInfo};
use crate::synthesis::stage::Chosen;
use writ_checks::shape::Change;

use super::{Writer, Written};

impl Writer<'_> {
    /// `file`'s chosen content, held for the batch's change set; its result says what will be
    /// proposed (its operation and hunks are filled in by [`Self::propose`]).
    #[expect(
        clippy::too_many_arguments,
        reason = "a proposal carries everything a write's result and record would"
    )]
    pub(super) fn proposal(
        &self,
        file: &FileSpec,
        chosen: Chosen,
        candidates: Vec<CandidateRecord>,
        validation: Option<FileValidation>,
        image: Option<ImageInfo>,
        change: Option<Change>,
        base: Option<Vec<u8>>,
        provenance: Provenance,
    ) -> Written {
        let content = chosen.content.bytes().to_vec();
        let kind = FileKind::from(file.kind);
        let result = FileResult {
            filename: file.path.to_string(),
            kind,
            success: true,
            operation: Some(OperationKind::Proposed),
            bytes: Some(content.len()),
            sha256: Some(crate::content::sha256_hex(&content)),
            chosen_model: Some(chosen.model),
            selection: Some(chosen.selection),
            arbiter_reason: chosen.reason,
            candidates,
            operation_id: None,
            error: None,
            image,
            content: None,
            validation,
            change,
            prompt_tokens_by_part: None,
            routing: None,
            calls: Vec::new(),
            formatted: chosen.formatted,
            proposal: None,
        };
        Written {
            result,
            before: None,
            completion: None,
            proposed: Some(ProposedFile {
                path: file.path.clone(),
                kind,
                base,
                content,
                provenance,
            }),
        }
    }

    /// The batch's proposed files as one change set: each result completed (its operation
    /// `proposed`, or `unchanged` when there is nothing to review, its record and hunks), the
    /// `change_proposed` event emitted, and the records to commit with the batch's closing.
    /// Returns the change set's id (`None`: no file changes anything).
    pub(crate) async fn propose(
        &self,
        written: &mut [Written],
        by: Proposer,
    ) -> (Option<Uuid>, Vec<AuditWrite>) {
        let mut files = Vec::new();
        let mut at = Vec::new();
        for (i, w) in written.iter_mut().enumerate() {
            let Some(mut proposed) = w.proposed.take() else {
                continue;
            };
            // An image's base is what the file holds now: the batch read only code files.
            if proposed.base.is_none() && proposed.kind == FileKind::Image {
                proposed.base = self.workspace.read(&proposed.path).await.ok().flatten();
            }
            files.push(proposed);
            at.push(i);
        }
        if files.is_empty() {
            return (None, Vec::new());
        }
        let made = propose(by, files);
        for (i, outcome) in at.into_iter().zip(made.files) {
            let result = &mut written[i].result;
            result.operation = Some(outcome.operation);
            result.operation_id = Some(outcome.operation_id);
            result.proposal = outcome.proposal;
        }
        if let Some(change) = &made.change {
            self.sink.emit(proposed_event(change));
        }
        (made.change.map(|c| c.id), made.writes)
    }
}
