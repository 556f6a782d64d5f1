//! What `commit_paths` costs on a repository of many files: a generated repository (the `git`
//! CLI makes and packs it), then five-file commits, timed one by one.
//!
//!   cargo run --release -p writ-git --example commit_cost -- [FILES] [COMMITS] [durable]
//!
//! With `durable`, each batch's files are written as writ writes them (temp file, fsync, rename,
//! fsync of the folder) right before the commit: on ext4 a commit that follows fresh syncs pays
//! more for each file it creates than one made alone.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use writ_git::commit::{CommitSpec, commit_paths};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// As writ's workspace writes: a temp file synced, renamed into place, its folder synced.
fn write_durably(path: &Path, content: &[u8]) {
    use std::io::Write;
    let temp = path.with_extension("writ-tmp");
    let mut file = std::fs::File::create(&temp).expect("a temp file");
    file.write_all(content).expect("write");
    file.sync_all().expect("sync");
    std::fs::rename(&temp, path).expect("rename");
    let folder = path.parent().expect("a folder");
    std::fs::File::open(folder)
        .and_then(|d| d.sync_all())
        .expect("folder sync");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let commits: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let durable = args.next().is_some_and(|a| a == "durable");
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["config", "user.name", "bench"]);
    git(root, &["config", "user.email", "bench@example.com"]);
    git(root, &["config", "gc.auto", "0"]);
    for i in 0..files {
        let folder = root.join(format!("pkg{}", i % 200));
        std::fs::create_dir_all(&folder).expect("a folder");
        std::fs::write(
            folder.join(format!("m{i}.py")),
            format!("def f{i}(x):\n    return x + {i}\n"),
        )
        .expect("a file");
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    git(root, &["gc", "-q"]);
    let mut times = Vec::with_capacity(commits);
    for n in 0..commits {
        let paths: Vec<String> = (0..5)
            .map(|i| format!("pkg{}/new_{n}_{i}.py", (n * 5 + i) % 200))
            .collect();
        for p in &paths {
            let content = format!("def g{n}():\n    return {n}\n");
            if durable {
                write_durably(&root.join(p), content.as_bytes());
            } else {
                std::fs::write(root.join(p), content).expect("write");
            }
        }
        let spec = CommitSpec {
            paths: &paths,
            message: "bench",
            author_name: "bench",
            author_email: "bench@example.com",
            committer_name: "writ",
            committer_email: "writ@example.com",
        };
        let started = Instant::now();
        commit_paths(root, &spec)
            .expect("commit")
            .expect("a commit");
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "{files} files, {commits} five-file commits: p50 {:.2} ms, p90 {:.2}, p99 {:.2}",
        at(0.5),
        at(0.9),
        at(0.99)
    );
}
