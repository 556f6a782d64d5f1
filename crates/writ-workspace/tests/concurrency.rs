//! Many writers at once: sibling files creating the same new folders must all land.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use writ_core::{RepoPath, Workspace};
use writ_workspace::RepoWorkspace;

/// Each batch writes five files into a folder nothing has created yet, checking each target
/// first as a recorded write does, while the other batches do the same next door.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sibling_writes_into_a_new_folder_all_succeed_under_contention() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(RepoWorkspace::open(dir.path()).await.unwrap());
    let mut failures = Vec::new();
    for round in 0..40 {
        let mut tasks = Vec::new();
        for batch in 0..16 {
            for file in 0..5 {
                let ws = Arc::clone(&ws);
                let path = RepoPath::parse(&format!("r{round}/b{batch}/deep/f{file}.py")).unwrap();
                tasks.push(tokio::spawn(async move {
                    ws.check_target(&path, true).await?;
                    ws.write_atomic(&path, b"x = 1\n", true).await?;
                    ws.check_target(&path, true).await
                }));
            }
        }
        for t in tasks {
            if let Err(e) = t.await.unwrap() {
                failures.push(e.to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed: {failures:?}",
        failures.len()
    );
}
