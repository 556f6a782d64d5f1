//! Synthesis: from a validated [`Batch`] to files written, each chosen among several models'
//! candidates. The steps, one module each:
//! - [`batch`]: the request and its validation;
//! - [`prompt`]: what the candidate models and the arbiter are asked;
//! - [`fanout`]: every candidate model at once, each answer checked as it arrives, and the
//!   straggler policy that stops waiting for the slowest;
//! - [`progress`]: the events a batch emits as it goes;
//! - [`pipeline`]: fan-out, candidate checks, selection (arbiter, fallback), writes, audit;
//! - [`runner`]: every batch as a job — persisted events, heartbeat, stored answer;
//! - [`response`]: the answer returned to the caller and stored for idempotent replay.

pub mod batch;
pub mod fanout;
pub mod image;
pub mod pipeline;
pub mod progress;
pub mod prompt;
pub mod response;
pub mod runner;

pub use batch::{
    Batch, BatchError, BatchOptions, FileSpec, StragglerOptions, TargetKind, WriteCodebaseRequest,
};
pub use fanout::StragglerPolicy;
pub use pipeline::{Submission, SubmitError, Submitted, SynthesisConfig, Synthesizer};
pub use progress::{Event, NoProgress, ProgressSink};
pub use response::{BatchResponse, Counts, FileResult, Selection};
