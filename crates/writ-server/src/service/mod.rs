//! What the HTTP routes and the tools share: one typed function per thing writ does, over the
//! core, answering the API's error. Routes (`routes/`) translate HTTP to these, tools (`tools/`)
//! their arguments; neither holds logic the other needs.
//!
//! One module per domain: [`files`] (list, read, direct writes), [`search`], [`edits`], [`run`]
//! (a configured command in the sandbox), [`write_sessions`], [`synthesis`] (starting a
//! `write_codebase` batch), [`jobs`] (following a job's events), [`operations`] (the audit log), [`workspaces`] (named
//! workspaces and the opened ones).

pub mod changes;
pub mod edits;
pub mod files;
pub mod git;
pub mod history;
pub mod jobs;
pub mod operations;
pub mod run;
pub mod search;
pub mod spend;
pub mod stats;
pub mod synthesis;
pub mod workspaces;
pub mod write_sessions;
