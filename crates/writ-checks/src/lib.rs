//! Pure text checks on model answers, used by the synthesis core on every
//! candidate and fuzzed as hostile input: no IO, no async, no panics.
//!
//! - [`language`]: which language a file path is in, its name and fence tags.
//! - [`analysis`]: source read once with tree-sitter — definitions, public names, imports,
//!   test cases, the calls a test checks.
//! - [`extract`]: getting the file's code out of a plain-text answer.
//! - [`mojibake`]: repairing UTF-8 text that was decoded as Windows-1252.
//! - [`normalise`](mod@normalise): one shape for code (line endings, BOM, final newline).
//! - [`syntax`]: whether code parses, where writ has a parser.
//! - [`candidate`]: all of the above applied to one answer.
//! - [`verdict`]: reading the arbiter's choice among distinct candidates.
//! - [`outline`](mod@outline): a file's definitions, one line each, for context too large to show.
//! - [`shape`]: a file's line endings, BOM and final newline, kept apart from its lines; diffs.
//! - [`edit`]: edits applied strictly (SEARCH/REPLACE blocks, `str_replace`).
//! - [`patch`]: the `apply_patch` format agents speak, parsed into per-file edits.
//! - [`loss`]: what an update must not lose (placeholders, removed definitions, cut-off files).
//! - [`hunks`]: a change as hunks with stable ids, any subset applied or merged into a changed text.

pub mod analysis;
pub mod candidate;
pub mod edit;
pub mod extract;
pub mod hunks;
pub mod language;
pub mod loss;
pub mod mojibake;
pub mod normalise;
pub mod outline;
pub mod patch;
pub mod shape;
pub mod syntax;
pub mod verdict;

pub use candidate::{
    AnswerForm, CheckedCandidate, CheckedUpdate, Rejection, UpdateRejection, UpdateTarget,
    check_candidate, check_update,
};
pub use extract::extract_code;
pub use language::Language;
pub use mojibake::repair_mojibake;
pub use normalise::normalise;
pub use outline::outline;
pub use syntax::{MAX_PARSE_BYTES, PARSE_TIME_LIMIT, syntax_ok};
pub use verdict::{Verdict, parse_verdict};
