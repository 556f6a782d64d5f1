//! Write sessions: content the caller streams in raw chunks (never inside JSON), written once it
//! is complete through the same recorded write as every direct write ([`crate::direct::write`]).
//!
//! A session is begun for one target and operation (the target is checked at once), takes chunks
//! as bytes — a chunk may end anywhere, even inside a UTF-8 sequence —, and is finalised by a
//! chunk whose text ends with a line that is exactly `DONE` (that line is not written) or by an
//! explicit finish. Only at finalisation is the content checked as UTF-8: invalid sequences put
//! the session in `needs_corrections` with their offsets, and after [`MAX_CORRECTION_ROUNDS`]
//! rounds whatever is still invalid becomes U+FFFD and the file is written.
//!
//! Sessions live in the store ([`SessionStore`]), so they survive a restart and every replica
//! sees them. Every state change is conditional on the state it leaves, so a session is finalised
//! at most once (a second finish answers with the same receipt) and expired at most once.
//! Abandoned sessions expire after the TTL, lazily on access and in the periodic sweep
//! ([`expire_abandoned`]); each expiry is recorded in the audit log.
//!
//! The parts: `state` the states and their names, `records` what is stored and answered,
//! `store` the store port, `service` the operations (begin, append, finish, correct), `error`
//! what they answer when they cannot, `expiry` the TTL and the sweep, `content` the `DONE` line
//! at the content's end.

mod content;
mod error;
mod expiry;
mod records;
mod review;
mod service;
mod state;
mod store;

pub use content::strip_done;
pub use error::SessionError;
pub use expiry::expire_abandoned;
pub use records::{
    BeginSession, ChunkAppend, Correction, SessionReceipt, SessionTransition, SessionView,
    WriteSession,
};
pub use service::{SessionCaller, SessionSettings, Sessions, finalising_route};
pub use state::SessionState;
pub use store::SessionStore;

/// Rounds of corrections a caller gets before invalid sequences are replaced with U+FFFD.
pub const MAX_CORRECTION_ROUNDS: u32 = 3;
/// Invalid sequences listed per round.
pub const MAX_INVALID_LISTED: usize = 50;
/// What an orchestrator relays to its model once the stream has paused.
pub const DONE_PROMPT: &str =
    "If you're finished, reply with DONE on its own line; otherwise continue.";
