//! writ tried as a hostile caller would: each fault found by such a caller, and the class of
//! fault it stands for, tried on every surface that could have it (docs/access-limits-faults.md
//! lists what was reviewed).

mod admission;
mod bound_keys;
mod git_roots;
mod spend;
