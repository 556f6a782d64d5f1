//! Writes in two halves against a real filesystem: a staged write is invisible until it is
//! published, a discarded one leaves nothing (no temp file, no directory it created, unless
//! another staged write still lives there), many writes staged at once all land (a group staged
//! in one step too, each refused target failing alone), and so do writes
//! into directories on other mounts and into set-group-ID directories (with their group).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use writ_core::workspace::ToStage;
use writ_core::{Workspace, WorkspaceError};
use writ_workspace::RepoWorkspace;

mod common;
use common::{Mounted, open_guarding_git, p, tree};

/// Waits until the writer has handled what a `Drop` sent it (a discard is not answered): the
/// writer takes requests in order, so once a later write is answered, the discard is done.
async fn settled(ws: &RepoWorkspace) {
    let marker = p(".settled");
    ws.write_atomic(&marker, b"", false).await.unwrap();
    ws.remove(&marker).await.unwrap();
}

#[tokio::test]
async fn a_staged_write_is_invisible_until_published() {
    let dir = tempfile::tempdir().unwrap();
    let ws = RepoWorkspace::open(dir.path()).await.unwrap();
    let root = ws.root().to_path_buf();
    ws.write_atomic(&p("src/app.py"), b"old\n", true)
        .await
        .unwrap();

    let staged = ws.stage(&p("src/app.py"), b"new\n", true).await.unwrap();
    assert_eq!(
        ws.read(&p("src/app.py")).await.unwrap().as_deref(),
        Some(&b"old\n"[..])
    );
    // The temp file is anonymous: nothing but the old file is in the directory.
    assert_eq!(tree(&root), vec!["src", "src/app.py"]);

    staged.publish().await.unwrap();
    assert_eq!(
        ws.read(&p("src/app.py")).await.unwrap().as_deref(),
        Some(&b"new\n"[..])
    );
    assert_eq!(tree(&root), vec!["src", "src/app.py"]);
}

#[tokio::test]
async fn a_discarded_write_leaves_neither_file_nor_the_directories_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let ws = RepoWorkspace::open(dir.path()).await.unwrap();
    let root = ws.root().to_path_buf();
    std::fs::create_dir(root.join("kept")).unwrap();

    let staged = ws
        .stage(&p("kept/new/deeper/file.py"), b"x = 1\n", true)
        .await
        .unwrap();
    // Staging made the directories, so the temp file could sit beside its target.
    assert!(root.join("kept/new/deeper").is_dir());
    drop(staged);
    settled(&ws).await;

    assert_eq!(tree(&root), vec!["kept"]);
    assert_eq!(ws.read(&p("kept/new/deeper/file.py")).await.unwrap(), None);
}

#[tokio::test]
async fn a_discarded_write_keeps_a_directory_another_staged_write_lives_in() {
    let dir = tempfile::tempdir().unwrap();
    let ws = RepoWorkspace::open(dir.path()).await.unwrap();
    let root = ws.root().to_path_buf();

    // The first write creates `pkg/sub`; the second finds it there.
    let first = ws
        .stage(&p("pkg/sub/a.py"), b"a = 1\n", true)
        .await
        .unwrap();
    let second = ws
        .stage(&p("pkg/sub/b.py"), b"b = 2\n", true)
        .await
        .unwrap();
    // Its creator is discarded while the other write, whose temp file no listing shows, still
    // waits in the directory: removing it would make that write fail.
    drop(first);
    settled(&ws).await;
    assert!(root.join("pkg/sub").is_dir());

    second.publish().await.unwrap();
    assert_eq!(tree(&root), vec!["pkg", "pkg/sub", "pkg/sub/b.py"]);
    assert_eq!(
        ws.read(&p("pkg/sub/b.py")).await.unwrap().as_deref(),
        Some(&b"b = 2\n"[..])
    );
}

#[tokio::test]
async fn writes_discarded_one_after_another_leave_none_of_the_directories_they_created() {
    let dir = tempfile::tempdir().unwrap();
    let ws = RepoWorkspace::open(dir.path()).await.unwrap();
    let root = ws.root().to_path_buf();
    // A batch's files staged together: the first creates `pkg`, the second `pkg/deep` beneath it.
    let first = ws.stage(&p("pkg/a.py"), b"a = 1\n", true).await.unwrap();
    let second = ws
        .stage(&p("pkg/deep/b.py"), b"b = 2\n", true)
        .await
        .unwrap();
    // The creator of `pkg` goes first, while the other still lives beneath it: `pkg` must wait,
    // and go when the second is discarded too.
    drop(first);
    settled(&ws).await;
    assert!(root.join("pkg/deep").is_dir());
    drop(second);
    settled(&ws).await;
    assert_eq!(tree(&root), Vec::<String>::new());
}

/// Writes staged and published from many tasks at once form groups in the writer; every one
/// must land whole, beside its siblings, whatever group it fell in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_staged_together_all_land_whole() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(RepoWorkspace::open(dir.path()).await.unwrap());
    let root = ws.root().to_path_buf();
    let mut tasks = Vec::new();
    for batch in 0..20 {
        for file in 0..5 {
            let ws = Arc::clone(&ws);
            tasks.push(tokio::spawn(async move {
                let path = p(&format!("b{batch}/deep/f{file}.py"));
                let content = format!("# batch {batch} file {file}\n").repeat(100 + file);
                ws.stage(&path, content.as_bytes(), true)
                    .await?
                    .publish()
                    .await?;
                Ok::<_, writ_core::WorkspaceError>((path, content))
            }));
        }
    }
    for task in tasks {
        let (path, content) = task.await.unwrap().unwrap();
        assert_eq!(
            ws.read(&path).await.unwrap().as_deref(),
            Some(content.as_bytes())
        );
    }
    // 20 batch folders, each with `deep` and five files: nothing else (no temp file).
    assert_eq!(tree(&root).len(), 20 * 7);
}

/// A batch's files staged in one step: invisible until the group is published, then all in
/// place; a refused target fails only its own write, in its own place in the order.
#[tokio::test]
async fn files_staged_as_a_group_land_together_and_a_refused_one_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join("old.py"), "old\n").unwrap();
    let ws = open_guarding_git(dir.path()).await;
    let root = ws.root().to_path_buf();
    let paths = [
        p("pkg/a.py"),
        p(".git/config"),
        p("pkg/deep/b.py"),
        p("old.py"),
        p("missing/c.py"),
    ];
    let contents: Vec<String> = (0..paths.len()).map(|i| format!("x = {i}\n")).collect();
    let writes: Vec<ToStage<'_>> = paths
        .iter()
        .zip(&contents)
        .enumerate()
        .map(|(i, (path, content))| ToStage {
            path,
            content: content.as_bytes(),
            // The last one may not create its parent.
            create_dirs: i != 4,
        })
        .collect();
    let group = ws.stage_all(&writes).await;
    // Staged: the old file unchanged, no new file visible yet.
    assert_eq!(
        std::fs::read_to_string(root.join("old.py")).unwrap(),
        "old\n"
    );
    assert!(!root.join("pkg/a.py").exists());

    let published = group.publish().await;
    assert_eq!(published.len(), paths.len());
    assert!(
        matches!(published[1], Err(WorkspaceError::Protected { .. })),
        "{:?}",
        published[1]
    );
    assert!(
        matches!(published[4], Err(WorkspaceError::ParentMissing { .. })),
        "{:?}",
        published[4]
    );
    for i in [0, 2, 3] {
        assert!(published[i].is_ok(), "{}: {:?}", paths[i], published[i]);
        assert_eq!(
            ws.read(&paths[i]).await.unwrap().as_deref(),
            Some(contents[i].as_bytes()),
            "{}",
            paths[i]
        );
    }
    assert_eq!(
        tree(&root),
        vec![
            ".git",
            "old.py",
            "pkg",
            "pkg/a.py",
            "pkg/deep",
            "pkg/deep/b.py"
        ]
    );
}

/// Files of one group that share a directory reach it through one handle; each target is still
/// judged on its own there (a directory, a symlink out, a symlink in), exactly as a write of it
/// alone is judged, and a refused one does not stop the siblings after it.
#[tokio::test]
async fn files_sharing_a_directory_in_a_group_are_each_judged_as_alone() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "outside\n").unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("pkg/sub")).unwrap();
    std::fs::write(repo.join("pkg/ok.py"), "ok\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), repo.join("pkg/out")).unwrap();
    std::os::unix::fs::symlink("ok.py", repo.join("pkg/inside")).unwrap();
    let ws = RepoWorkspace::open(&repo).await.unwrap();
    let paths = [
        p("pkg/a.py"),
        p("pkg/out"),
        p("pkg/sub"),
        p("pkg/inside"),
        p("pkg/b.py"),
    ];
    let writes: Vec<ToStage<'_>> = paths
        .iter()
        .map(|path| ToStage {
            path,
            content: b"new\n",
            create_dirs: true,
        })
        .collect();
    let published = ws.stage_all(&writes).await.publish().await;
    for i in [1, 2, 3] {
        let alone = ws
            .stage(&paths[i], b"new\n", true)
            .await
            .err()
            .map(|e| e.to_string());
        assert!(alone.is_some(), "{} is refused alone", paths[i]);
        assert_eq!(
            published[i].as_ref().err().map(ToString::to_string),
            alone,
            "{}",
            paths[i]
        );
    }
    for i in [0, 4] {
        assert!(published[i].is_ok(), "{}: {:?}", paths[i], published[i]);
        assert_eq!(
            std::fs::read_to_string(repo.join(paths[i].as_str())).unwrap(),
            "new\n"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path()).unwrap(),
        "outside\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("pkg/ok.py")).unwrap(),
        "ok\n"
    );
    assert!(repo.join("pkg/sub").is_dir());
}

/// A group dropped before it is published (its audit record was refused, say) leaves nothing:
/// no file changed, no temp file, none of the directories its writes created.
#[tokio::test]
async fn a_group_dropped_unpublished_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = RepoWorkspace::open(dir.path()).await.unwrap();
    let root = ws.root().to_path_buf();
    ws.write_atomic(&p("kept.py"), b"kept\n", false)
        .await
        .unwrap();
    let paths = [p("new/a.py"), p("new/deeper/b.py"), p("kept.py")];
    let writes: Vec<ToStage<'_>> = paths
        .iter()
        .map(|path| ToStage {
            path,
            content: b"replaced\n",
            create_dirs: true,
        })
        .collect();
    let group = ws.stage_all(&writes).await;
    assert!(root.join("new/deeper").is_dir(), "staging made the parents");
    drop(group);
    settled(&ws).await;
    assert_eq!(tree(&root), vec!["kept.py"]);
    assert_eq!(
        ws.read(&p("kept.py")).await.unwrap().as_deref(),
        Some(&b"kept\n"[..])
    );
}

#[tokio::test]
async fn targets_read_together_answer_each_in_order_with_its_own_outcome() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/pkg")).unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join("src/a.py"), "a = 1\n").unwrap();
    std::fs::write(dir.path().join("notes"), "a file, not a directory\n").unwrap();
    let ws = open_guarding_git(dir.path()).await;
    let targets = [
        (p("src/a.py"), false),
        (p("src/pkg"), true),
        (p("new/b.py"), true),
        (p(".git/config"), true),
        (p("new/c.py"), false),
        (p("notes/d.py"), true),
    ];
    let read = ws.read_targets(&targets).await;
    assert_eq!(read.len(), targets.len());
    assert_eq!(read[0].as_ref().unwrap().as_deref(), Some(&b"a = 1\n"[..]));
    assert!(read[1].is_err(), "a directory is not a file to write");
    assert_eq!(read[2].as_ref().unwrap(), &None, "absent, creatable");
    assert!(
        matches!(read[3], Err(writ_core::WorkspaceError::Protected { .. })),
        "{:?}",
        read[3]
    );
    assert!(read[4].is_err(), "no parent, and create_dirs not asked");
    assert!(read[5].is_err(), "a parent that is a file");
    // Each one answers as it does read alone.
    for (target, together) in targets.iter().zip(&read) {
        let path = &target.0;
        let alone = ws
            .read_targets(std::slice::from_ref(target))
            .await
            .pop()
            .unwrap();
        assert_eq!(
            alone.as_ref().map_err(ToString::to_string),
            together.as_ref().map_err(ToString::to_string),
            "{path}"
        );
    }
    // Reading changed nothing: no directory was created.
    assert!(!dir.path().join("new").exists());
}

/// A `REPO_DIR` with other filesystems mounted inside it (a volume, a tmpfs, a bind mount of
/// another directory): a write's temp file must be made where its target is, since neither a
/// rename nor a link crosses mounts. A bind mount is the sharp case: the same filesystem (the
/// same device number) but another mount, where `linkat` and `renameat` fail with `EXDEV`.
/// Writes there land all the same, new and replaced alike.
#[tokio::test]
async fn new_files_land_in_directories_on_other_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir_in(dir.path()).unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("bound")).unwrap();
    std::fs::create_dir_all(repo.join("tmp")).unwrap();
    let _bound = Mounted::new(
        &["--bind", elsewhere.path().to_str().unwrap()],
        &repo.join("bound"),
    );
    let _tmp = Mounted::new(
        &["-t", "tmpfs", "-o", "size=1m", "tmpfs"],
        &repo.join("tmp"),
    );
    let ws = RepoWorkspace::open(&repo).await.unwrap();
    // Files in the root too, on the root's own mount.
    for i in 0..4 {
        ws.write_atomic(&p(&format!("root_{i}.txt")), b"root\n", false)
            .await
            .unwrap();
    }

    for i in 0..4 {
        for sub in ["bound", "bound/deeper", "tmp"] {
            let path = format!("{sub}/file_{i}.txt");
            ws.write_atomic(&p(&path), path.as_bytes(), true)
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            ws.write_atomic(&p(&path), b"replaced", true)
                .await
                .unwrap_or_else(|e| panic!("replacing {path}: {e}"));
        }
    }

    for i in 0..4 {
        assert_eq!(
            std::fs::read(elsewhere.path().join(format!("deeper/file_{i}.txt"))).unwrap(),
            b"replaced"
        );
        assert_eq!(
            std::fs::read(repo.join(format!("tmp/file_{i}.txt"))).unwrap(),
            b"replaced"
        );
    }
    assert_eq!(
        tree(elsewhere.path()).len(),
        9,
        "{:?}",
        tree(elsewhere.path())
    );
}

/// A new file in a set-group-ID directory takes the directory's group, as a shared checkout
/// relies on, while one in the root takes the process's: the temp file that becomes the file is
/// made in the target's own directory.
#[tokio::test]
async fn a_new_file_in_a_set_group_id_directory_takes_the_directorys_group() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let group = 4242;
    std::os::unix::fs::chown(&shared, None, Some(group)).expect("chown (run as root)");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let ws = RepoWorkspace::open(dir.path()).await.unwrap();
    let own_group = std::fs::metadata(dir.path()).unwrap().gid();
    assert_ne!(own_group, group);

    for i in 0..4 {
        ws.write_atomic(&p(&format!("root_{i}.txt")), b"root\n", false)
            .await
            .unwrap();
        ws.write_atomic(&p(&format!("shared/file_{i}.txt")), b"shared\n", false)
            .await
            .unwrap();
        ws.write_atomic(&p(&format!("shared/new/file_{i}.txt")), b"deep\n", true)
            .await
            .unwrap();
    }

    for i in 0..4 {
        let gid = |rel: &str| std::fs::metadata(dir.path().join(rel)).unwrap().gid();
        assert_eq!(gid(&format!("shared/file_{i}.txt")), group);
        assert_eq!(gid(&format!("shared/new/file_{i}.txt")), group);
        assert_eq!(gid(&format!("root_{i}.txt")), own_group);
    }
}
