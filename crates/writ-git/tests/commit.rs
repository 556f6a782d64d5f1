//! `commit_paths` checked with the real `git` CLI, as a user would look at the repository.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::git;

use writ_git::commit::{CommitSpec, commit_paths, message};

fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["config", "user.name", "User"]);
    git(d, &["config", "user.email", "user@example.com"]);
    std::fs::write(d.join("a.py"), "a = 1\r\n").unwrap();
    std::fs::write(d.join("mine.txt"), "mine\n").unwrap();
    std::fs::write(d.join("gone.txt"), "to delete\n").unwrap();
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "start"]);
    dir
}

#[test]
fn a_commit_holds_exactly_writs_paths_and_the_users_staged_change_stays_staged() {
    let dir = repository();
    let d = dir.path();
    // The user's own work: one change staged, one not.
    std::fs::write(d.join("mine.txt"), "mine, staged\n").unwrap();
    git(d, &["add", "mine.txt"]);
    std::fs::write(d.join("scratch.txt"), "untracked\n").unwrap();
    // What writ wrote: an update, a new file in a new folder, a deletion.
    std::fs::write(d.join("a.py"), "a = 2\r\n").unwrap();
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::write(d.join("src/new.py"), "new = True").unwrap();
    std::fs::remove_file(d.join("gone.txt")).unwrap();

    let paths = vec![
        "a.py".to_string(),
        "src/new.py".to_string(),
        "gone.txt".to_string(),
    ];
    let msg = message(
        "Update a.py, add src/new.py",
        "a.py: bump a",
        &[
            ("Writ-Request".into(), "0190-abc".into()),
            ("Writ-Models".into(), "m1, m2".into()),
            ("Writ-Selection".into(), "a.py=arbiter".into()),
        ],
    );
    let spec = CommitSpec {
        paths: &paths,
        message: &msg,
        author_name: "ci-key",
        author_email: "ci-key@writ",
        committer_name: "writ",
        committer_email: "writ@localhost",
    };
    let id = commit_paths(d, &spec).unwrap().expect("a commit");

    let log = git(d, &["log", "-1", "--format=%H%n%an%n%B"]);
    assert!(log.starts_with(&id.to_string()), "{log}");
    assert!(log.contains("\nci-key\n"), "{log}");
    assert_eq!(git(d, &["log", "-1", "--format=%cn"]).trim(), "writ");
    assert!(log.contains("Writ-Request: 0190-abc"), "{log}");
    let trailers = git(
        d,
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Writ-Request,valueonly)",
        ],
    );
    assert_eq!(trailers.trim(), "0190-abc");
    let changed = git(d, &["show", "--name-status", "--format=", "HEAD"]);
    let mut changed: Vec<&str> = changed.lines().collect();
    changed.sort();
    assert_eq!(changed, ["A\tsrc/new.py", "D\tgone.txt", "M\ta.py"]);
    assert_eq!(
        git(d, &["show", "HEAD:a.py"]),
        "a = 2\r\n",
        "bytes as on disk"
    );

    let status = git(d, &["status", "--porcelain"]);
    let mut status: Vec<&str> = status.lines().collect();
    status.sort();
    assert_eq!(
        status,
        ["?? scratch.txt", "M  mine.txt"],
        "the user's change is still staged"
    );
    assert!(git(d, &["diff", "--cached", "mine.txt"]).contains("+mine, staged"));
}

#[test]
fn nothing_changed_makes_no_commit_and_an_unborn_branch_gets_its_first() {
    let dir = repository();
    let d = dir.path();
    let paths = vec!["a.py".to_string()];
    let spec = CommitSpec {
        paths: &paths,
        message: "noop\n",
        author_name: "k",
        author_email: "k@writ",
        committer_name: "writ",
        committer_email: "writ@localhost",
    };
    assert!(commit_paths(d, &spec).unwrap().is_none());
    assert_eq!(git(d, &["rev-list", "--count", "HEAD"]).trim(), "1");

    let fresh = tempfile::tempdir().unwrap();
    git(fresh.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(fresh.path().join("a.py"), "x").unwrap();
    let id = commit_paths(fresh.path(), &spec)
        .unwrap()
        .expect("first commit");
    assert_eq!(
        git(fresh.path(), &["rev-parse", "HEAD"]).trim(),
        id.to_string()
    );
}

#[test]
fn commits_of_different_paths_at_once_all_land_one_after_the_other() {
    let dir = repository();
    let d = d_of(&dir);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || {
                let path = format!("t{i}.txt");
                std::fs::write(d.join(&path), format!("{i}\n")).unwrap();
                let paths = vec![path];
                let msg = format!("write t{i}\n");
                let spec = CommitSpec {
                    paths: &paths,
                    message: &msg,
                    author_name: "k",
                    author_email: "k@writ",
                    committer_name: "writ",
                    committer_email: "writ@localhost",
                };
                commit_paths(&d, &spec).unwrap().expect("a commit")
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(git(&d, &["rev-list", "--count", "HEAD"]).trim(), "5");
    let tree = git(&d, &["ls-tree", "--name-only", "HEAD"]);
    for i in 0..4 {
        assert!(tree.contains(&format!("t{i}.txt")), "{tree}");
    }
}

#[test]
fn a_commit_waits_out_another_process_holding_the_index_lock() {
    let dir = repository();
    let d = d_of(&dir);
    let lock = d.join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let release = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            std::fs::remove_file(lock).unwrap();
        })
    };
    std::fs::write(d.join("a.py"), "a = 3\n").unwrap();
    let paths = vec!["a.py".to_string()];
    let spec = CommitSpec {
        paths: &paths,
        message: "bump\n",
        author_name: "k",
        author_email: "k@writ",
        committer_name: "writ",
        committer_email: "writ@localhost",
    };
    let made = commit_paths(&d, &spec);
    release.join().unwrap();
    assert!(made.unwrap().is_some());
    assert_eq!(git(&d, &["show", "HEAD:a.py"]), "a = 3\n");
    assert_eq!(git(&d, &["status", "--porcelain", "a.py"]).trim(), "");
}

fn d_of(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().to_path_buf()
}

#[test]
fn only_the_written_folders_change_an_emptied_folder_leaves_the_tree_and_no_file_is_left_dirty() {
    let dir = repository();
    let d = dir.path();
    for (path, content) in [("lib/only.py", "only = 1\n"), ("keep/k.py", "k = 1\n")] {
        std::fs::create_dir_all(d.join(path).parent().unwrap()).unwrap();
        std::fs::write(d.join(path), content).unwrap();
    }
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "folders"]);
    let keep_before = git(d, &["rev-parse", "HEAD:keep"]);

    // writ removed lib's one file, wrote a script, and removed a file git never had.
    std::fs::remove_file(d.join("lib/only.py")).unwrap();
    std::fs::create_dir_all(d.join("bin")).unwrap();
    std::fs::write(d.join("bin/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let paths = vec![
        "lib/only.py".to_string(),
        "bin/run.sh".to_string(),
        "never/was.py".to_string(),
    ];
    let spec = CommitSpec {
        paths: &paths,
        message: "tidy\n",
        author_name: "k",
        author_email: "k@writ",
        committer_name: "writ",
        committer_email: "writ@localhost",
    };
    commit_paths(d, &spec).unwrap().expect("a commit");

    let tree = git(d, &["ls-tree", "-r", "HEAD"]);
    assert!(!tree.contains("lib/"), "the emptied folder is gone: {tree}");
    assert!(
        tree.contains("100755 blob") && tree.contains("bin/run.sh"),
        "the script keeps its executable bit: {tree}"
    );
    assert_eq!(
        git(d, &["rev-parse", "HEAD:keep"]),
        keep_before,
        "a folder the request did not touch is the same tree"
    );
    assert_eq!(
        git(d, &["status", "--porcelain"]).trim(),
        "",
        "every written path is clean in the index and the working tree"
    );
}

/// The packs in `d`'s object store, by name.
fn packs(d: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(d.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pack"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_commits_objects_are_one_pack_that_git_reads_and_checks() {
    let dir = repository();
    let d = dir.path();
    git(d, &["gc", "-q"]);
    let before = packs(d);
    std::fs::create_dir_all(d.join("deep/er")).unwrap();
    std::fs::write(d.join("deep/er/one.py"), "one = 1\n").unwrap();
    std::fs::write(d.join("deep/two.py"), "two = 2\n").unwrap();
    std::fs::write(d.join("a.py"), "a = 9\n").unwrap();
    // The same content twice is one object.
    std::fs::write(d.join("copy.py"), "one = 1\n").unwrap();
    let paths = vec![
        "deep/er/one.py".to_string(),
        "deep/two.py".to_string(),
        "a.py".to_string(),
        "copy.py".to_string(),
    ];
    let spec = CommitSpec {
        paths: &paths,
        message: "pack it\n\nbody\n",
        author_name: "k",
        author_email: "k@writ",
        committer_name: "writ",
        committer_email: "writ@localhost",
    };
    let id = commit_paths(d, &spec).unwrap().expect("a commit");

    let count = git(d, &["count-objects", "-v"]);
    assert!(
        count.lines().any(|l| l == "count: 0"),
        "no loose object: {count}"
    );
    let after = packs(d);
    assert_eq!(after.len(), before.len() + 1, "{before:?} {after:?}");
    let new = after.iter().find(|p| !before.contains(p)).unwrap();
    let idx = format!(".git/objects/pack/{}", new.replace(".pack", ".idx"));
    let listed = git(d, &["verify-pack", "-v", &idx]);
    // Four blobs, less the copy; the root, deep and deep/er; the commit.
    assert!(listed.contains("non delta: 7 objects"), "{listed}");
    git(d, &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(git(d, &["rev-parse", "HEAD"]).trim(), id.to_string());
    assert_eq!(git(d, &["show", "HEAD:deep/er/one.py"]), "one = 1\n");
    assert_eq!(git(d, &["status", "--porcelain"]).trim(), "");
    let reflog = git(d, &["reflog", "-1", "--format=%gs"]);
    assert_eq!(reflog.trim(), "commit: pack it");
}

#[test]
fn packs_are_merged_once_many_pile_up_and_every_commit_stays_readable() {
    let dir = repository();
    let d = dir.path();
    for n in 0..40 {
        let paths = vec![format!("f{}/n{n}.py", n % 3)];
        std::fs::create_dir_all(d.join(format!("f{}", n % 3))).unwrap();
        std::fs::write(d.join(&paths[0]), format!("n = {n}\n")).unwrap();
        let spec = CommitSpec {
            paths: &paths,
            message: "one more\n",
            author_name: "k",
            author_email: "k@writ",
            committer_name: "writ",
            committer_email: "writ@localhost",
        };
        commit_paths(d, &spec).unwrap().expect("a commit");
    }
    // The user's own first commit is loose; writ's 40 were packs, merged past 32.
    let left = packs(d);
    assert!(left.len() < 12, "{left:?}");
    assert_eq!(git(d, &["rev-list", "--count", "HEAD"]).trim(), "41");
    git(d, &["fsck", "--strict", "--no-dangling"]);
    for n in 0..40 {
        let shown = git(d, &["show", &format!("HEAD:f{}/n{n}.py", n % 3)]);
        assert_eq!(shown, format!("n = {n}\n"));
    }
    assert_eq!(git(d, &["status", "--porcelain"]).trim(), "");
    // git can repack what writ merged.
    git(d, &["gc", "-q"]);
    git(d, &["fsck", "--strict", "--no-dangling"]);
}
