//! Change sets: content writ chose but did not write, held for a person or an agent to review
//! per file and per hunk (`options.review` on a batch, `POST /edits` or a write session;
//! `WRIT_REVIEW=1` as the server's default).
//!
//! A proposal ([`propose`]) records each file's operation as `proposed` — its content and its
//! candidates, so spend and the model statistics count it — and the change set: per file the
//! base's SHA-256, the change as hunks with stable ids ([`writ_checks::hunks`]) and why the
//! content was chosen, with the checks' evidence. Open change sets hold no locks.
//!
//! A decision ([`Changes::apply`], [`Changes::reject`]) is numbered: the set holds one
//! decision per number, written in the same commit as the pending records of the files an apply
//! writes, so of two decisions taken on the same version exactly one lands, on any replica. An
//! apply re-checks each file's base under its path lock and writes all of its files or none
//! ([`crate::files::write_all_or_nothing`]): a file that changed since is refused by name
//! unless `rebase` merges the hunks into it (three-way; a conflict names the hunks). Only the
//! hunks chosen are written. It is a request of its own, so undo takes it back. A rejection is
//! recorded per file as an operation `rejected` with the model that made the content; both
//! count in `GET /stats/models`.
//!
//! The parts: `records` what is stored and the states read from it, `store` the store port,
//! `propose` a proposal, `selection` which hunks a decision names, `review` the reads and the
//! decisions, `view` what callers see, `error` the refusals.

mod error;
mod propose;
mod records;
mod review;
mod selection;
mod store;
mod view;

use std::time::Duration;

pub use error::{ChangeError, ChangedFile, ConflictedFile};
pub use propose::{
    Proposed, ProposedFile, ProposedOutcome, Proposer, hunks_of, propose, proposed_event,
};
pub use records::{
    ChangeFile, ChangeFilter, ChangeSet, ChangeState, DecidedFile, Decision, DecisionKind,
    FileContents, HunkState,
};
pub use review::{
    AppliedChange, AppliedFile, ApplyChange, Changes, RejectChange, RejectedChange, RejectedFile,
    Reviewer,
};
pub use store::ChangeStore;
pub use view::{ChangeFileView, ChangeView, FileProposal, HunkView};
pub use writ_checks::hunks::Hunk;

/// `WRIT_REVIEW_TTL` unset: a week.
pub const DEFAULT_REVIEW_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most change sets one listing answers.
pub const MAX_LISTED: u32 = 100;
/// Longest comment a decision keeps.
pub const MAX_COMMENT_BYTES: usize = 4096;

/// How review is set up on this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewSettings {
    /// `WRIT_REVIEW`: batches, edits and write sessions that do not say are proposed for
    /// review instead of written.
    pub by_default: bool,
    /// `WRIT_REVIEW_TTL`: how long a change set may be applied.
    pub ttl: Duration,
}

impl Default for ReviewSettings {
    fn default() -> Self {
        ReviewSettings {
            by_default: false,
            ttl: DEFAULT_REVIEW_TTL,
        }
    }
}

impl ReviewSettings {
    /// Whether a request that asked `asked` (absent: it did not say) is proposed for review.
    pub fn wanted(&self, asked: Option<bool>) -> bool {
        asked.unwrap_or(self.by_default)
    }
}

#[cfg(test)]
mod tests;
