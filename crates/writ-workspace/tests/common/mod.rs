//! What this crate's test files share: paths, walking a tree, a workspace guarding `.git`, and
//! mounting a filesystem inside a test's root.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use writ_core::RepoPath;
use writ_workspace::{ProtectedPaths, RepoWorkspace};

pub fn p(raw: &str) -> RepoPath {
    RepoPath::parse(raw).unwrap()
}

/// Every path beneath `dir` (directories included), sorted; symlinks reported, not followed.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            }
            found.push(entry.path());
        }
    }
    found.sort();
    found
}

/// [`walk`], relative to `dir`, as text.
pub fn tree(dir: &Path) -> Vec<String> {
    walk(dir)
        .iter()
        .map(|path| path.strip_prefix(dir).unwrap().display().to_string())
        .collect()
}

/// A workspace over `dir` with `.git` protected, as `WRIT_PROTECTED_PATHS` would have it.
pub async fn open_guarding_git(dir: &Path) -> RepoWorkspace {
    let mut protected = ProtectedPaths::default();
    protected.add(".git", "listed in WRIT_PROTECTED_PATHS");
    RepoWorkspace::open(dir)
        .await
        .unwrap()
        .with_protected(protected)
}

/// A filesystem mounted for the test (`mount <args> <target>`), unmounted when dropped so that a
/// failed assertion leaves no mount behind. Tests run as root in CI; without the privilege this
/// fails loudly rather than skipping, so the case is never silently untested.
pub struct Mounted(PathBuf);

impl Mounted {
    pub fn new(args: &[&str], target: &Path) -> Mounted {
        let out = std::process::Command::new("mount")
            .args(args)
            .arg(target)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "this test mounts a filesystem (run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mounted(target.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}
