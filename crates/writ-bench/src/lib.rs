//! The writ benchmark suite (`writ-bench`, run by `scripts/bench`).
//!
//! writ and `writ-fake-upstream` run as separate processes on loopback, as in production; this
//! crate drives load over HTTP and reads the kernel's accounts of CPU time and peak memory.
//! - [`stats`]: percentiles and how numbers are printed;
//! - [`procfs`]: CPU seconds and peak RSS of a process;
//! - [`load`]: open- and closed-loop load, one sample per batch;
//! - [`procs`]: starting and stopping the fake upstream and writ;
//! - [`scenarios`]: the four tables (overhead, ceiling, stragglers, audit path);
//! - [`eval`]: how often the correct file is written, with and without validation (`EVALS.md`);
//! - [`history`]: what a commit per request adds to a batch, and what an undo costs;
//! - [`updates`]: changes of existing files — the right file, no line lost, whatever the models
//!   answer — and what edit answers save against whole files.

pub mod context;
pub mod eval;
pub mod history;
pub mod load;
pub mod procfs;
pub mod procs;
pub mod scenarios;
pub mod stats;
pub mod updates;
