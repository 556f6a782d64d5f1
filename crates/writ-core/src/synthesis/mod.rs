//! Synthesis: from a validated [`Batch`] to files written, each chosen among several models'
//! candidates. One batch passes through these modules top-down:
//! - [`jobs`]: the one entry — admission (`jobs::admission`: parse, replay, scope and models,
//!   claims, budgets, targets, slot; [`Jobs::admit`]), then every batch is a job (persisted
//!   events, lease, stored answer);
//! - [`submission`]: idempotency, target checks and each file's record, before any model is
//!   called;
//! - [`pipeline`]: the orchestrator, the one module that knows the order of the stages below — each
//!   file's stages, the deadline, the size limit, the wait for the request record;
//! - [`generation`]: a code file's prompt ([`prompt`], with what [`context`] finds in the
//!   repository) to every candidate model at once
//!   ([`fanout`], with the straggler policy), each answer checked as it arrives;
//! - [`update`]: for a file that exists, what its candidates are checked against (edits applied
//!   strictly, nothing elided, removed or cut) and how the change is written in the file's shape;
//! - [`selection`]: distinct viable candidates, the arbiter, first-viable, the fallback models;
//! - [`validation`]: with `options.validation`, the caller's tests (and the project's diagnostics,
//!   `WRIT_DIAGNOSTICS`) run on every candidate in the sandbox and decide the selection, and
//!   failing candidates go back to their models for repair;
//! - `formatting`: the project's formatter (`WRIT_FORMATTERS`) on the chosen code, in the sandbox;
//! - [`image_generation`]: the image branch — one image model call, shaped by [`image`];
//! - [`writing`]: one recorded write per file, atomic batches and their rollback;
//! - [`response`]: the answer returned to the caller and stored for idempotent replay;
//! - `outage`: how a batch's commits wait out an audit store that cannot be reached.
//!
//! Each stage is a function (or a small type: `Selector`, `Writer`) over
//! the shared types of [`stage`] (the ports, the settings, a file's context and outcome), and
//! none imports [`pipeline`]. Beside them: [`batch`] (the request and its admission checks) and
//! [`progress`] (the events a batch emits as it goes).

pub mod batch;
pub mod context;
#[cfg(test)]
pub(crate) mod doubles;
pub mod fanout;
pub(crate) mod formatting;
pub mod generation;
pub mod image;
pub mod image_generation;
pub mod jobs;
pub(crate) mod lease;
pub mod outage;
pub mod pipeline;
pub mod progress;
pub mod prompt;
pub mod record;
pub mod response;
pub mod routing;
pub mod selection;
pub(crate) mod spending;
pub mod stage;
pub mod submission;
pub mod update;
pub mod validation;
pub mod writing;

pub use batch::StragglerPolicy;
pub use batch::{Batch, BatchError, BatchOptions, FileSpec, Options, WriteCodebaseRequest};
pub use jobs::{AdmissionPorts, AdmitError, Admitted, BatchHandle, BatchRequest, EventHub, Jobs};
pub use progress::{Event, NoProgress, ProgressSink};
pub use response::{BatchResponse, Counts, FileResult};
pub use stage::{BatchFile, Content, DEFAULT_MAX_SHOWN_FILE_CHARS, SynthesisConfig, Synthesizer};
pub use submission::{BatchAnswer, Begun, Submission, SubmitError};
