//! A workspace's root may not be, or lie inside, a git directory, whatever it is called or however
//! it is reached: every write there would be git's own files (a `core.fsmonitor` in `config`
//! runs a command at the next `git status`).

use std::path::Path;

use serde_json::{Value, json};
use writ_tests::{Backend, TestApp, git};

async fn app_over(dir: &Path) -> TestApp {
    let root = dir.to_str().unwrap().to_owned();
    let (settings, dirs) =
        writ_tests::test_settings_with(Backend::Sqlite, &[("WRIT_WORKSPACES_DIR", root.as_str())])
            .await;
    writ_tests::spawn_with(settings, dirs, Backend::Sqlite).await
}

async fn create_directory(app: &TestApp, name: &str, path: &str) -> (u16, Value) {
    let r = app
        .client
        .post(app.url("/workspaces"))
        .json(&json!({"name": name, "source": {"kind": "directory", "path": path}}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_workspace_rooted_in_a_git_directory_by_any_name_or_route_is_refused_and_nothing_is_served()
 {
    let dir = tempfile::tempdir().unwrap();
    let app_repo = dir.path().join("app");
    std::fs::create_dir_all(&app_repo).unwrap();
    git(&app_repo, &["init", "-q", "-b", "main"]);
    std::fs::write(app_repo.join("README"), "hello\n").unwrap();
    git(&app_repo, &["add", "README"]);
    git(&app_repo, &["commit", "-q", "-m", "first"]);
    git(
        &app_repo,
        &["worktree", "add", "-q", "../linked", "-b", "x"],
    );
    // A bare repository, a submodule-style gitfile pointing at a git directory named otherwise,
    // a symlink to `.git`, and folders spelled as git or NTFS would read `.git`.
    git(dir.path(), &["init", "-q", "--bare", "bare.git"]);
    std::fs::create_dir_all(dir.path().join("gits")).unwrap();
    git(
        dir.path(),
        &["init", "-q", "--separate-git-dir", "gits/sub", "sub"],
    );
    std::os::unix::fs::symlink(app_repo.join(".git"), dir.path().join("link")).unwrap();
    for odd in ["odd/.GIT", "odd/GIT~1", "odd/.git. "] {
        std::fs::create_dir_all(dir.path().join(odd).join("hooks")).unwrap();
    }
    let app = app_over(dir.path()).await;
    let config_before = std::fs::read(app_repo.join(".git/config")).unwrap();

    for (i, path) in [
        "app/.git",
        "app/.git/hooks",
        "app/.git/worktrees/linked",
        "bare.git",
        "bare.git/hooks",
        "gits/sub",
        "link",
        "link/hooks",
        "odd/.GIT/hooks",
        "odd/GIT~1",
        "odd/.git. /hooks",
    ]
    .into_iter()
    .enumerate()
    {
        let (status, body) = create_directory(&app, &format!("w{i}"), path).await;
        assert_eq!(
            (
                status,
                body["error"]["code"].as_str(),
                body["error"]["field"].as_str()
            ),
            (403, Some("protected_path"), Some("source.path")),
            "{path}: {body}"
        );
    }
    let (_, all) = app.json("/workspaces").await;
    assert_eq!(all["workspaces"].as_array().unwrap().len(), 1, "{all}");
    assert_eq!(
        std::fs::read(app_repo.join(".git/config")).unwrap(),
        config_before
    );

    // A work tree itself is a fine root: its `.git` stays protected beneath it.
    assert_eq!(create_directory(&app, "plain", "app").await.0, 201);
    assert_eq!(create_directory(&app, "sub", "sub").await.0, 201);
    let r = app
        .client
        .put(app.url("/workspaces/plain/files/.git/config"))
        .body("[core]\n\tfsmonitor = touch /tmp/owned\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_workspace_recorded_with_a_root_inside_git_is_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("app");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let app = app_over(dir.path()).await;
    // As a writ that did not judge roots would have recorded it.
    let store = writ_store::connect(&app.database_url).await.unwrap();
    let root = std::fs::canonicalize(repo.join(".git")).unwrap();
    store
        .create_workspace(&writ_core::workspace_registry::WorkspaceRecord {
            name: writ_core::workspace_registry::WorkspaceName::parse("old").unwrap(),
            kind: writ_core::workspace_registry::WorkspaceKind::Directory,
            root: root.display().to_string(),
            source: Some("app/.git".into()),
            branch: None,
            base_ref: None,
            created_at: chrono::Utc::now(),
            created_by: None,
            git_commit: None,
        })
        .await
        .unwrap();
    let config_before = std::fs::read(root.join("config")).unwrap();

    let r = app
        .client
        .put(app.url("/workspaces/old/files/config"))
        .body("[core]\n\tfsmonitor = touch /tmp/owned\n")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();

    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("protected_path")),
        "{body}"
    );
    assert_eq!(std::fs::read(root.join("config")).unwrap(), config_before);
}
