//! Rebuilds the crate when a migration changes: `sqlx::migrate!` embeds the files at compile time
//! but does not tell cargo it read them.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
