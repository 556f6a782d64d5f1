//! The confined workspace against a real filesystem: symlinks planted inside the root, special
//! files, atomic replacement under a concurrent reader, and a property test that no generated path
//! ever creates anything outside the root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use writ_core::workspace::DirEntry;
use writ_core::{RepoPath, Workspace, WorkspaceError};
use writ_workspace::RepoWorkspace;

mod common;
use common::{Mounted, open_guarding_git, p, walk};

/// A root and, beside it, a directory that must stay untouched.
struct Sandbox {
    _base: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    ws: RepoWorkspace,
}

async fn sandbox() -> Sandbox {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let outside = base.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let ws = RepoWorkspace::open(&root).await.unwrap();
    let root = ws.root().to_path_buf();
    let outside = outside.canonicalize().unwrap();
    Sandbox {
        _base: base,
        root,
        outside,
        ws,
    }
}

fn dir(raw: &str) -> RepoPath {
    RepoPath::parse_dir(raw).unwrap()
}

fn names(entries: &[DirEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.name.as_str()).collect()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo failed");
}

#[tokio::test]
async fn a_written_file_reads_back_unchanged() {
    let sb = sandbox().await;
    let content = "héllo\nwörld\n".as_bytes();

    sb.ws
        .write_atomic(&p("src/main.py"), content, true)
        .await
        .unwrap();

    assert_eq!(
        sb.ws.read(&p("src/main.py")).await.unwrap().as_deref(),
        Some(content)
    );
    assert_eq!(std::fs::read(sb.root.join("src/main.py")).unwrap(), content);
}

#[tokio::test]
async fn a_file_that_does_not_exist_reads_as_none() {
    let sb = sandbox().await;
    std::fs::write(sb.root.join("plain.txt"), "x").unwrap();

    assert_eq!(sb.ws.read(&p("missing.txt")).await.unwrap(), None);
    assert_eq!(sb.ws.read(&p("no/such/dir/f.txt")).await.unwrap(), None);
    assert_eq!(sb.ws.read(&p("plain.txt/below")).await.unwrap(), None);
}

#[tokio::test]
async fn opening_creates_a_missing_root_and_reports_it_canonical() {
    let base = tempfile::tempdir().unwrap();
    let wanted = base.path().join("deep/./repo");

    let ws = RepoWorkspace::open(&wanted).await.unwrap();

    assert!(wanted.is_dir());
    assert_eq!(
        ws.root(),
        base.path().join("deep/repo").canonicalize().unwrap()
    );
    assert!(ws.root().is_absolute());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_reader_sees_one_whole_version_or_the_other_while_a_file_is_replaced() {
    let sb = sandbox().await;
    let ws = Arc::new(sb.ws);
    let path = p("big.bin");
    let first = vec![b'A'; 1 << 20];
    let second = vec![b'B'; (1 << 20) + 4096];
    ws.write_atomic(&path, &first, false).await.unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (ws, path, done) = (Arc::clone(&ws), path.clone(), Arc::clone(&done));
        let (first, second) = (first.clone(), second.clone());
        tokio::spawn(async move {
            let mut reads = 0u32;
            while !done.load(Ordering::Acquire) || reads == 0 {
                let seen = ws
                    .read(&path)
                    .await
                    .unwrap()
                    .expect("the file never disappears");
                assert!(
                    seen == first || seen == second,
                    "a mixed or partial version of {} bytes",
                    seen.len()
                );
                reads += 1;
            }
            reads
        })
    };
    for round in 0..40 {
        let content = if round % 2 == 0 { &second } else { &first };
        ws.write_atomic(&path, content, false).await.unwrap();
    }
    done.store(true, Ordering::Release);

    assert!(reader.await.unwrap() > 0);
}

#[tokio::test]
async fn a_symlinked_directory_leading_outside_refuses_writes_beneath_it_and_creates_nothing_outside()
 {
    let sb = sandbox().await;
    std::fs::create_dir(sb.root.join("inside")).unwrap();
    symlink(&sb.outside, sb.root.join("inside/link")).unwrap();
    symlink("../../outside", sb.root.join("inside/up")).unwrap();

    for raw in [
        "inside/link/x.txt",
        "inside/link/deeper/x.txt",
        "inside/up/x.txt",
        "inside/up/deeper/x.txt",
    ] {
        for create_dirs in [false, true] {
            let checked = sb.ws.check_target(&p(raw), create_dirs).await;
            assert!(
                matches!(checked, Err(WorkspaceError::Escapes { .. })),
                "check {raw}: {checked:?}"
            );
            let written = sb.ws.write_atomic(&p(raw), b"pwned", create_dirs).await;
            assert!(
                matches!(written, Err(WorkspaceError::Escapes { .. })),
                "write {raw}: {written:?}"
            );
        }
        let read = sb.ws.read(&p(raw)).await;
        assert!(
            matches!(read, Err(WorkspaceError::Escapes { .. })),
            "read {raw}: {read:?}"
        );
    }
    let listed = sb.ws.list(&dir("inside/link")).await;
    assert!(
        matches!(listed, Err(WorkspaceError::Escapes { .. })),
        "{listed:?}"
    );

    assert_eq!(walk(&sb.outside), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_symlinked_file_leading_outside_is_neither_read_nor_written() {
    let sb = sandbox().await;
    let secret = sb.outside.join("secret.txt");
    std::fs::write(&secret, "secret").unwrap();
    symlink(&secret, sb.root.join("evil.txt")).unwrap();
    symlink("../outside/secret.txt", sb.root.join("evil_relative.txt")).unwrap();

    for raw in ["evil.txt", "evil_relative.txt"] {
        let read = sb.ws.read(&p(raw)).await;
        assert!(
            matches!(read, Err(WorkspaceError::Escapes { .. })),
            "read {raw}: {read:?}"
        );
        let checked = sb.ws.check_target(&p(raw), false).await;
        assert!(
            matches!(checked, Err(WorkspaceError::Escapes { .. })),
            "check {raw}: {checked:?}"
        );
        let written = sb.ws.write_atomic(&p(raw), b"pwned", true).await;
        assert!(
            matches!(written, Err(WorkspaceError::Escapes { .. })),
            "write {raw}: {written:?}"
        );
        assert!(
            std::fs::symlink_metadata(sb.root.join(raw))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
    assert_eq!(walk(&sb.outside), vec![secret]);
}

#[tokio::test]
async fn an_absolute_symlink_is_refused_even_when_it_names_a_place_inside_the_root() {
    let sb = sandbox().await;
    std::fs::create_dir(sb.root.join("sub")).unwrap();
    std::fs::write(sb.root.join("sub/kept.txt"), "kept").unwrap();
    symlink(sb.root.join("sub"), sb.root.join("abs")).unwrap();

    let read = sb.ws.read(&p("abs/kept.txt")).await;
    assert!(
        matches!(read, Err(WorkspaceError::Escapes { .. })),
        "{read:?}"
    );
    let written = sb.ws.write_atomic(&p("abs/new.txt"), b"x", false).await;
    assert!(
        matches!(written, Err(WorkspaceError::Escapes { .. })),
        "{written:?}"
    );

    assert_eq!(
        walk(&sb.root.join("sub")),
        vec![sb.root.join("sub/kept.txt")]
    );
}

#[tokio::test]
async fn a_relative_symlink_that_stays_inside_is_followed_as_a_directory_and_for_reading() {
    let sb = sandbox().await;
    std::fs::create_dir_all(sb.root.join("sub")).unwrap();
    std::fs::create_dir_all(sb.root.join("other")).unwrap();
    symlink("sub", sb.root.join("rel")).unwrap();
    // Climbs out of `sub` but not out of the root: resolved from the root, so allowed.
    symlink("../other", sb.root.join("sub/up")).unwrap();
    std::fs::write(sb.root.join("sub/real.txt"), "real").unwrap();
    symlink("real.txt", sb.root.join("sub/alias.txt")).unwrap();

    sb.ws
        .write_atomic(&p("rel/x.txt"), b"via rel", false)
        .await
        .unwrap();
    sb.ws
        .write_atomic(&p("sub/up/y.txt"), b"via up", true)
        .await
        .unwrap();

    assert_eq!(
        std::fs::read(sb.root.join("sub/x.txt")).unwrap(),
        b"via rel"
    );
    assert_eq!(
        std::fs::read(sb.root.join("other/y.txt")).unwrap(),
        b"via up"
    );
    assert_eq!(
        sb.ws.read(&p("rel/x.txt")).await.unwrap().unwrap(),
        b"via rel"
    );
    assert_eq!(
        sb.ws.read(&p("sub/alias.txt")).await.unwrap().unwrap(),
        b"real"
    );
    assert_eq!(
        names(&sb.ws.list(&dir("rel")).await.unwrap()),
        ["alias.txt", "real.txt", "up", "x.txt"]
    );
}

#[tokio::test]
async fn a_symlink_as_the_final_component_of_a_write_is_refused_and_its_target_left_alone() {
    let sb = sandbox().await;
    std::fs::write(sb.root.join("real.txt"), "real").unwrap();
    symlink("real.txt", sb.root.join("alias.txt")).unwrap();
    symlink("gone.txt", sb.root.join("dangling.txt")).unwrap();

    for raw in ["alias.txt", "dangling.txt"] {
        let checked = sb.ws.check_target(&p(raw), false).await;
        assert!(
            matches!(checked, Err(WorkspaceError::SpecialFile { .. })),
            "check {raw}: {checked:?}"
        );
        let written = sb.ws.write_atomic(&p(raw), b"new", false).await;
        assert!(
            matches!(written, Err(WorkspaceError::SpecialFile { .. })),
            "write {raw}: {written:?}"
        );
        assert!(
            std::fs::symlink_metadata(sb.root.join(raw))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    assert_eq!(
        std::fs::read_to_string(sb.root.join("real.txt")).unwrap(),
        "real"
    );
    assert!(!sb.root.join("gone.txt").exists());
}

#[tokio::test]
async fn a_directory_is_not_a_file_to_read_or_write() {
    let sb = sandbox().await;
    std::fs::create_dir(sb.root.join("pkg")).unwrap();

    let read = sb.ws.read(&p("pkg")).await;
    assert!(
        matches!(read, Err(WorkspaceError::IsDirectory { .. })),
        "{read:?}"
    );
    let checked = sb.ws.check_target(&p("pkg"), true).await;
    assert!(
        matches!(checked, Err(WorkspaceError::IsDirectory { .. })),
        "{checked:?}"
    );
    let written = sb.ws.write_atomic(&p("pkg"), b"x", true).await;
    assert!(
        matches!(written, Err(WorkspaceError::IsDirectory { .. })),
        "{written:?}"
    );

    assert!(sb.root.join("pkg").is_dir());
}

#[tokio::test]
async fn a_fifo_is_refused_for_reading_and_writing_without_blocking() {
    let sb = sandbox().await;
    mkfifo(&sb.root.join("pipe"));
    let read = tokio::time::timeout(Duration::from_secs(10), sb.ws.read(&p("pipe")))
        .await
        .expect("read blocked");
    assert!(
        matches!(read, Err(WorkspaceError::SpecialFile { .. })),
        "{read:?}"
    );
    let checked = tokio::time::timeout(
        Duration::from_secs(10),
        sb.ws.check_target(&p("pipe"), false),
    )
    .await
    .expect("check blocked");
    assert!(
        matches!(checked, Err(WorkspaceError::SpecialFile { .. })),
        "{checked:?}"
    );
    let written = tokio::time::timeout(
        Duration::from_secs(10),
        sb.ws.write_atomic(&p("pipe"), b"x", false),
    )
    .await
    .expect("write blocked");
    assert!(
        matches!(written, Err(WorkspaceError::SpecialFile { .. })),
        "{written:?}"
    );

    let listed = sb.ws.list(&dir("")).await.unwrap();
    assert_eq!(
        listed,
        [DirEntry {
            name: "pipe".into(),
            size: 0,
            is_dir: false
        }]
    );
}

#[tokio::test]
async fn a_missing_parent_is_reported_unless_create_dirs_is_set() {
    let sb = sandbox().await;
    let path = p("a/b/c.txt");

    let checked = sb.ws.check_target(&path, false).await;
    assert!(
        matches!(&checked, Err(WorkspaceError::ParentMissing { path, parent }) if path == "a/b/c.txt" && parent == "a/b"),
        "{checked:?}"
    );
    let written = sb.ws.write_atomic(&path, b"x", false).await;
    assert!(
        matches!(written, Err(WorkspaceError::ParentMissing { .. })),
        "{written:?}"
    );
    sb.ws.check_target(&path, true).await.unwrap();
    assert!(!sb.root.join("a").exists(), "check_target changed the tree");

    sb.ws.write_atomic(&path, b"x", true).await.unwrap();

    assert_eq!(std::fs::read(sb.root.join("a/b/c.txt")).unwrap(), b"x");
}

#[tokio::test]
async fn a_parent_that_is_a_file_is_not_a_directory_and_leaves_no_stray_file() {
    let sb = sandbox().await;
    std::fs::write(sb.root.join("file.txt"), "x").unwrap();

    for create_dirs in [false, true] {
        let written = sb
            .ws
            .write_atomic(&p("file.txt/inner.txt"), b"y", create_dirs)
            .await;
        assert!(
            matches!(&written, Err(WorkspaceError::NotADirectory { path }) if path == "file.txt"),
            "{written:?}"
        );
    }

    assert_eq!(walk(&sb.root), vec![sb.root.join("file.txt")]);
}

#[tokio::test]
async fn a_hundred_writes_leave_only_the_target_in_the_directory() {
    let sb = sandbox().await;

    for i in 0..100 {
        sb.ws
            .write_atomic(
                &p("dir/target.txt"),
                format!("version {i}").as_bytes(),
                true,
            )
            .await
            .unwrap();
    }

    assert_eq!(
        walk(&sb.root),
        vec![sb.root.join("dir"), sb.root.join("dir/target.txt")]
    );
    assert_eq!(
        std::fs::read_to_string(sb.root.join("dir/target.txt")).unwrap(),
        "version 99"
    );
}

#[tokio::test]
async fn a_write_that_runs_out_of_space_is_no_space_and_leaves_no_temp_file() {
    let sb = sandbox().await;
    let mount_point = sb.root.join("small");
    std::fs::create_dir(&mount_point).unwrap();
    let _mounted = Mounted::new(&["-t", "tmpfs", "-o", "size=64k", "tmpfs"], &mount_point);
    std::fs::write(mount_point.join("kept.txt"), "kept").unwrap();

    let written = sb
        .ws
        .write_atomic(&p("small/kept.txt"), &vec![b'x'; 1 << 20], false)
        .await;

    assert!(
        matches!(written, Err(WorkspaceError::NoSpace { .. })),
        "{written:?}"
    );
    assert_eq!(walk(&mount_point), vec![mount_point.join("kept.txt")]);
    assert_eq!(
        std::fs::read_to_string(mount_point.join("kept.txt")).unwrap(),
        "kept"
    );
}

#[tokio::test]
async fn a_listing_is_sorted_by_name_with_sizes_and_shows_symlinks_as_themselves() {
    let sb = sandbox().await;
    std::fs::write(sb.root.join("b.txt"), "12345").unwrap();
    std::fs::write(sb.root.join("a.txt"), "").unwrap();
    std::fs::create_dir(sb.root.join("c")).unwrap();
    symlink(&sb.outside, sb.root.join("d_link")).unwrap();

    let listed = sb.ws.list(&dir(".")).await.unwrap();

    let link_len = sb.outside.as_os_str().len() as u64;
    assert_eq!(names(&listed), ["a.txt", "b.txt", "c", "d_link"]);
    assert_eq!((listed[0].size, listed[0].is_dir), (0, false));
    assert_eq!((listed[1].size, listed[1].is_dir), (5, false));
    assert!(listed[2].is_dir);
    assert_eq!((listed[3].size, listed[3].is_dir), (link_len, false));
}

#[tokio::test]
async fn listing_a_missing_path_or_a_file_is_an_error() {
    let sb = sandbox().await;
    std::fs::write(sb.root.join("f.txt"), "x").unwrap();

    let missing = sb.ws.list(&dir("nope")).await;
    assert!(
        matches!(missing, Err(WorkspaceError::NotFound { .. })),
        "{missing:?}"
    );
    let file = sb.ws.list(&dir("f.txt")).await;
    assert!(
        matches!(file, Err(WorkspaceError::NotADirectory { .. })),
        "{file:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_queued_on_the_path_lock_leave_one_whole_content() {
    let sb = sandbox().await;
    let ws = Arc::new(sb.ws);
    let path = p("shared/out.txt");
    let contents: Vec<Vec<u8>> = (0..16u8)
        .map(|i| vec![b'a' + i; 64 * 1024 + usize::from(i)])
        .collect();

    let writers: Vec<_> = contents
        .iter()
        .cloned()
        .map(|content| {
            let (ws, path) = (Arc::clone(&ws), path.clone());
            tokio::spawn(async move {
                let _guard = ws.lock(&path).await;
                ws.write_atomic(&path, &content, true).await.unwrap();
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }

    let last = ws.read(&path).await.unwrap().unwrap();
    assert!(contents.contains(&last));
    assert_eq!(
        walk(&sb.root.join("shared")),
        vec![sb.root.join("shared/out.txt")]
    );
}

#[tokio::test]
async fn the_writability_probe_leaves_nothing_behind() {
    let sb = sandbox().await;

    sb.ws.probe_writable().await.unwrap();
    sb.ws.probe_writable().await.unwrap();

    assert_eq!(walk(&sb.root), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_replaced_file_keeps_its_permission_bits_and_a_new_one_gets_0644() {
    let sb = sandbox().await;
    std::fs::write(sb.root.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        sb.root.join("run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();

    sb.ws
        .write_atomic(&p("run.sh"), b"#!/bin/sh\necho hi\n", false)
        .await
        .unwrap();
    sb.ws
        .write_atomic(&p("new.txt"), b"new", false)
        .await
        .unwrap();

    let mode = |name: &str| {
        std::fs::metadata(sb.root.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("run.sh"), 0o750);
    assert_eq!(mode("new.txt"), 0o644);
}

#[tokio::test]
async fn only_old_temp_file_debris_is_swept() {
    let sb = sandbox().await;
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::create_dir(sb.root.join("sub")).unwrap();
    let debris = sb.root.join("sub/3f2504e0-4f89-41d3-a654-0e02b2c3d479");
    let fresh = sb.root.join("sub/9b2c1d7e-1a2b-4c3d-8e4f-5a6b7c8d9e0f");
    let user_file = sb.root.join("sub/notes.txt");
    for (path, modified) in [
        (&debris, Some(old)),
        (&fresh, None),
        (&user_file, Some(old)),
    ] {
        let file = std::fs::File::create(path).unwrap();
        if let Some(modified) = modified {
            file.set_modified(modified).unwrap();
        }
    }

    let removed = sb.ws.remove_stale_temp_files().await;

    assert_eq!(removed, 1);
    assert_eq!(walk(&sb.root.join("sub")), vec![fresh, user_file]);
}

// ---------------------------------------------------------------------------------------------
// Property: whatever path a caller sends, nothing is created outside the root.

/// Components an attacker (or a confused model) might combine.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(String::new()),
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("link_out".to_owned()),
        Just("link_up".to_owned()),
        Just("link_in".to_owned()),
        Just("é".to_owned()),
        Just("\u{2215}".to_owned()),
        (200usize..=300).prop_map(|len| "x".repeat(len)),
        (100usize..=150).prop_map(|len| "é".repeat(len)),
    ]
}

fn raw_path() -> impl Strategy<Value = String> {
    prop::collection::vec(component(), 1..7).prop_map(|components| components.join("/"))
}

proptest! {
    // `ProptestConfig::default()` reads PROPTEST_CASES (256 when unset).
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn no_generated_path_creates_anything_outside_the_root(raws in prop::collection::vec(raw_path(), 1..4)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let sb = sandbox().await;
            std::fs::create_dir(sb.root.join("sub")).unwrap();
            symlink(&sb.outside, sb.root.join("link_out")).unwrap();
            symlink("../outside", sb.root.join("link_up")).unwrap();
            symlink("sub", sb.root.join("link_in")).unwrap();

            for raw in &raws {
                let Ok(path) = RepoPath::parse(raw) else { continue };
                let content = format!("content of {raw}");

                let checked = sb.ws.check_target(&path, true).await;
                let written = sb.ws.write_atomic(&path, content.as_bytes(), true).await;

                prop_assert_eq!(
                    checked.as_ref().err().map(std::mem::discriminant),
                    written.as_ref().err().map(std::mem::discriminant),
                    "check_target and write_atomic disagree on {:?}: {:?} vs {:?}", raw, checked, written
                );
                if written.is_ok() {
                    let landed = sb.root.join(path.as_str()).canonicalize().unwrap();
                    prop_assert!(landed.starts_with(&sb.root), "{:?} landed at {:?}", raw, landed);
                    let read = sb.ws.read(&path).await.unwrap();
                    prop_assert_eq!(read.as_deref(), Some(content.as_bytes()));
                }
                prop_assert_eq!(walk(&sb.outside), Vec::<PathBuf>::new(), "{:?} created something outside", raw);
            }
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn a_symlink_inside_the_root_does_not_lead_around_a_protected_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
    symlink(".git", dir.path().join("innocent")).unwrap();
    let ws = open_guarding_git(dir.path()).await;
    for raw in [
        "innocent/config",
        "innocent/hooks/pre-commit",
        "innocent/new/x",
    ] {
        let path = RepoPath::parse(raw).unwrap();
        let err = ws.write_atomic(&path, b"boom", true).await.unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Protected { .. }),
            "{raw}: {err}"
        );
        assert!(ws.check_target(&path, true).await.is_err(), "{raw}");
    }
    assert!(!dir.path().join(".git/config").exists());
    assert!(!dir.path().join(".git/new").exists());
    ws.write_atomic(&RepoPath::parse("src/ok.py").unwrap(), b"x", true)
        .await
        .unwrap();
}
