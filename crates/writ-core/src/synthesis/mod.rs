//! Synthesis: from a validated [`Batch`] to files written, each chosen among several models'
//! candidates. The steps, one module each:
//! - [`batch`]: the request and its validation;
//! - [`prompt`]: what the candidate models and the arbiter are asked;
//! - [`fanout`]: every candidate model at once, each answer checked as it arrives;
//! - [`progress`]: the events a batch emits as it goes;
//! - [`pipeline`]: fan-out, candidate checks, selection (arbiter, fallback), writes, audit;
//! - [`response`]: the answer returned to the caller and stored for idempotent replay.

pub mod batch;
pub mod fanout;
pub mod pipeline;
pub mod progress;
pub mod prompt;
pub mod response;

pub use batch::{Batch, BatchError, BatchOptions, FileSpec, TargetKind, WriteCodebaseRequest};
pub use pipeline::{Submission, SubmitError, SynthesisConfig, Synthesizer};
pub use progress::{Event, NoProgress, ProgressSink};
pub use response::{BatchResponse, Counts, FileResult, Selection};
