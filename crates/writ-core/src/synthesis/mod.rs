//! Synthesis: from a validated [`Batch`] to files written, each chosen among several models'
//! candidates. The steps, one module each:
//! - [`batch`]: the request and its validation;
//! - [`prompt`]: what the candidate models and the arbiter are asked;
//! - [`pipeline`]: fan-out, candidate checks, selection (arbiter, fallback), writes, audit;
//! - [`response`]: the answer returned to the caller and stored for idempotent replay.

pub mod batch;
pub mod pipeline;
pub mod prompt;
pub mod response;

pub use batch::{Batch, BatchError, BatchOptions, FileSpec, TargetKind, WriteCodebaseRequest};
pub use pipeline::{Submission, SubmitError, SynthesisConfig, Synthesizer};
pub use response::{BatchResponse, Counts, FileResult, Selection};
