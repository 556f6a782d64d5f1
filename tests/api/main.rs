//! End-to-end tests of the HTTP API: the real server on loopback, real databases, real files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod budgets;
mod context;
mod dashboard;
mod edges;
mod edits;
mod fanout;
mod files;
mod generated_checks;
mod hardening;
mod history;
mod hostile;
mod images;
mod jobs;
mod local_model;
mod openapi;
mod operations;
mod outage;
mod policy;
mod probes;
mod project_checks;
mod prompt_caching;
mod reference;
mod scopes;
mod search;
mod service;
mod speed;
mod stats;
mod tools;
mod updates;
mod validation;
mod workspace_limits;
mod workspaces;
mod write_codebase;
mod write_sessions;
