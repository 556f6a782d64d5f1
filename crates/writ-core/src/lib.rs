//! The synthesis core of writ.
//!
//! It owns the words of the domain and the rules that do not depend on how a request arrived:
//! - [`path`]: a workspace-relative path that has already been checked lexically ([`RepoPath`]).
//! - [`audit`]: the audit log's records and the [`AuditStore`] trait (PostgreSQL and SQLite live in `writ-store`).
//! - [`store`]: what every store port shares ([`StoreError`]).
//! - [`workspace`]: the [`Workspace`] trait for `REPO_DIR`, every path confined beneath it (implemented in `writ-workspace`).
//! - [`model`]: the [`ModelClient`] trait and the typed chat request/response (implemented in `writ-models`).
//! - [`files`]: recorded writes — every write is in the audit log before it is acknowledged —
//!   shared by direct writes and synthesis; reconciliation of writes a crash interrupted.
//! - [`commits`]: a request's commit of what it wrote, where the workspace is a repository
//!   (the [`commits::Committer`] port, implemented over `writ-git` by the server).
//! - [`direct`]: direct writes of the caller's own content, the same for every surface.
//! - [`edits`]: direct edits (`str_replace`, `apply_patch`) of up to five files, all or nothing.
//! - [`changes`]: change sets — content proposed for review instead of written, applied or
//!   rejected per file and per hunk ([`changes::ChangeStore`]).
//! - [`execution`]: the [`execution::CommandRunner`] trait for running the caller's tests in a sandbox.
//! - [`jobs`]: every batch as a job row with its progress events ([`jobs::JobStore`]).
//! - [`keys`]: API keys (format, constant-time check) and the [`keys::KeyStore`] trait.
//! - [`shared_limits`]: per-key limits replicas share ([`shared_limits::LimitStore`]).
//! - [`sessions`]: write sessions — raw chunks, `DONE`, corrections — and [`sessions::SessionStore`].
//! - [`workspace_registry`]: named workspaces besides `REPO_DIR` (`default`) and [`workspace_registry::WorkspaceStore`].
//! - [`claims`]: advisory leases a workspace takes on paths of its repository, seen by the
//!   other workspaces of that repository ([`claims::ClaimStore`]).
//! - [`content`]: hashing and the text helpers (UTF-8 checks, numbered previews) both use.
//! - [`synthesis`]: from a `write_codebase` request to files written (see its module docs).
//!
//! Nothing here knows HTTP or SQL: the HTTP surface, MCP and the CLI all drive this crate.

pub mod audit;
pub mod budgets;
pub mod changes;
pub mod claims;
pub mod commits;
pub mod content;
pub mod direct;
pub mod edits;
pub mod execution;
pub mod files;
pub mod history;
pub mod jobs;
pub mod keys;
pub mod looping;
pub mod model;
pub mod overlaps;
pub mod path;
pub mod search;
pub mod sessions;
pub mod shared_limits;
pub mod stats;
pub mod store;
pub mod trace_context;
pub mod workspace;
pub mod workspace_registry;

pub use audit::{AuditLog, AuditStore, SynthesisStore, WriteStore};
pub use model::ModelClient;
pub use path::{PathError, RepoPath};
pub use store::StoreError;
pub use workspace::{Workspace, WorkspaceError};
pub mod synthesis;
