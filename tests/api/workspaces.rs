//! Named workspaces end to end: made empty, from a directory, or as a git worktree on a new
//! branch (checked with the `git` program, as a user would); the files routes inside each
//! (`/workspaces/{name}/…`) reach that workspace only, whatever the path says; refusals name
//! the field; and every replica serves a workspace made on another.

use std::path::Path;

use serde_json::{Value, json};
use tempfile::TempDir;
use writ_tests::{Backend, TestApp};

/// A server whose workspaces are made in a directory of their own, which holds a git
/// repository `repo` with one commit (`README`).
async fn app_with_workspaces(backend: Backend) -> (TestApp, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    make_repository(&dir.path().join("repo"));
    let root = dir.path().to_str().unwrap().to_owned();
    let (settings, dirs) =
        writ_tests::test_settings_with(backend, &[("WRIT_WORKSPACES_DIR", root.as_str())]).await;
    (writ_tests::spawn_with(settings, dirs, backend).await, dir)
}

use writ_tests::git;

fn make_repository(at: &Path) {
    std::fs::create_dir_all(at).unwrap();
    git(at, &["init", "-q", "-b", "main"]);
    std::fs::write(at.join("README"), "hello\n").unwrap();
    git(at, &["add", "README"]);
    git(at, &["commit", "-q", "-m", "first"]);
}

async fn create(app: &TestApp, body: Value) -> (u16, Value) {
    let r = app
        .client
        .post(app.url("/workspaces"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Empty workspaces named `names`, made with the admin key `admin`.
async fn make_empty(app: &TestApp, admin: &str, names: &[&str]) {
    for name in names {
        let r = app
            .client
            .post(app.url("/workspaces"))
            .bearer_auth(admin)
            .json(&json!({"name": name}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "workspace {name}");
    }
}

async fn put(app: &TestApp, path: &str, content: &str) -> u16 {
    let r = app
        .client
        .put(app.url(path))
        .body(content.to_owned())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    if status >= 500 {
        panic!("PUT {path}: {status} {}", r.text().await.unwrap());
    }
    status
}

async fn get(app: &TestApp, path: &str) -> (u16, String) {
    let r = app.client.get(app.url(path)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_git_worktree_workspace_is_on_a_new_branch_and_holds_what_is_written_there_only() {
    let (app, dir) = app_with_workspaces(Backend::Sqlite).await;
    let repo = dir.path().join("repo");
    let (status, made) = create(
        &app,
        json!({"name": "task-1", "source": {"kind": "git_worktree", "repository": "repo", "branch": "task/1"}}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["kind"], "git_worktree");
    assert_eq!(made["branch"], "task/1");
    assert_eq!(made["base_ref"], "HEAD");
    assert!(git(&repo, &["branch", "--list", "task/1"]).contains("task/1"));
    let worktree = dir.path().join("task-1");
    assert_eq!(
        git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "task/1"
    );

    assert_eq!(
        put(
            &app,
            "/workspaces/task-1/files/new.txt",
            "in the worktree\n"
        )
        .await,
        201
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("new.txt")).unwrap(),
        "in the worktree\n"
    );
    assert!(
        !repo.join("new.txt").exists(),
        "not in the repository's checkout"
    );
    assert!(!app.repo_dir.join("new.txt").exists(), "not in REPO_DIR");
    assert!(git(&worktree, &["status", "--porcelain"]).contains("?? new.txt"));
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    let (status, body) = get(&app, "/workspaces/task-1/files/new.txt").await;
    assert_eq!(status, 200);
    assert!(body.contains("in the worktree"), "{body}");
    assert_eq!(
        get(&app, "/files/new.txt").await.0,
        404,
        "default is REPO_DIR"
    );

    // Deleting prunes git's record of the worktree and keeps its files and branch.
    let r = app
        .client
        .delete(app.url("/workspaces/task-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let deleted: Value = r.json().await.unwrap();
    assert_eq!(deleted["files_removed"], false);
    assert_eq!(deleted["worktree_pruned"], true);
    assert!(!git(&repo, &["worktree", "list"]).contains("task-1"));
    assert!(git(&repo, &["branch", "--list", "task/1"]).contains("task/1"));
    assert!(worktree.join("new.txt").exists());
    assert_eq!(get(&app, "/workspaces/task-1/files/new.txt").await.0, 404);
    assert_eq!(get(&app, "/workspaces/task-1").await.0, 404);
}

async fn merge(app: &TestApp, name: &str, into: &str) -> (u16, Value) {
    let r = app
        .client
        .post(app.url(&format!("/workspaces/{name}/merge")))
        .json(&json!({"into": into}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_tasks_branch_merges_back_by_fast_forward_or_one_commit_and_a_conflict_moves_nothing() {
    let (app, dir) = app_with_workspaces(Backend::Sqlite).await;
    let repo = dir.path().join("repo");
    for (name, branch) in [
        ("task-a", "task/a"),
        ("task-b", "task/b"),
        ("task-c", "task/c"),
    ] {
        let (status, made) = create(
            &app,
            json!({"name": name, "source": {"kind": "git_worktree", "repository": "repo", "branch": branch}}),
        )
        .await;
        assert_eq!(status, 201, "{made}");
    }
    // Each task writes through writ and commits in its worktree, as an agent's harness would.
    let commit_in = |name: &str, file: &str, content: &str| {
        std::fs::write(dir.path().join(name).join(file), content).unwrap();
        git(&dir.path().join(name), &["add", file]);
        git(&dir.path().join(name), &["commit", "-q", "-m", name]);
    };
    assert_eq!(
        put(&app, "/workspaces/task-a/files/a.txt", "from a\n").await,
        201
    );
    git(&dir.path().join("task-a"), &["add", "a.txt"]);
    git(
        &dir.path().join("task-a"),
        &["commit", "-q", "-m", "task a"],
    );
    commit_in("task-b", "README", "hello from b\n");
    commit_in("task-c", "README", "hello from c\n");

    // main has not moved: a fast-forward, and main's checkout follows.
    let (status, merged) = merge(&app, "task-a", "main").await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["outcome"], "fast_forward");
    assert_eq!(
        git(&repo, &["rev-parse", "main"]).trim(),
        merged["commit"].as_str().unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "from a\n"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    // Recorded in the audit log with its answer.
    let id = merged["request_id"].as_str().unwrap();
    assert!(
        app.json(&format!("/operations?request_id={id}")).await.0 == 200,
        "the request id is an audit id"
    );

    // main moved: task b merges as one merge commit with both parents.
    let (status, merged) = merge(&app, "task-b", "main").await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["outcome"], "merged");
    let parents = git(&repo, &["rev-list", "--parents", "-n", "1", "main"]);
    assert_eq!(parents.split_whitespace().count(), 3, "{parents}");
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "hello from b\n"
    );

    // task c changed the same line: 409 naming the file and its hunk, and nothing moves.
    let main_before = git(&repo, &["rev-parse", "main"]);
    let c_before = git(&repo, &["rev-parse", "task/c"]);
    let (status, refused) = merge(&app, "task-c", "main").await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["details"]["files"][0]["path"], "README");
    let hunk = refused["error"]["details"]["files"][0]["hunks"][0]
        .as_str()
        .unwrap();
    assert!(
        hunk.contains("hello from c") && hunk.contains("hello from b"),
        "{hunk}"
    );
    assert_eq!(git(&repo, &["rev-parse", "main"]), main_before);
    assert_eq!(git(&repo, &["rev-parse", "task/c"]), c_before);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // Refusals name the field.
    let (status, body) = merge(&app, "default", "main").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("name")),
        "{body}"
    );
    let (status, body) = merge(&app, "task-a", "no-such-branch").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("into")),
        "{body}"
    );
    assert_eq!(merge(&app, "nope", "main").await.0, 404);
}

#[tokio::test]
async fn workspaces_are_isolated_from_each_other_whatever_the_path_says() {
    let (app, dir) = app_with_workspaces(Backend::Sqlite).await;
    assert_eq!(create(&app, json!({"name": "a"})).await.0, 201);
    std::fs::create_dir(dir.path().join("existing")).unwrap();
    std::fs::write(dir.path().join("existing/kept.txt"), "was here\n").unwrap();
    let (status, made) = create(
        &app,
        json!({"name": "b", "source": {"kind": "directory", "path": "existing"}}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["kind"], "directory");
    let (status, body) = get(&app, "/workspaces/b/files/kept.txt").await;
    assert_eq!(status, 200);
    assert!(body.contains("was here"));

    assert_eq!(
        put(&app, "/workspaces/a/files/same.txt", "in a\n").await,
        201
    );
    assert_eq!(
        put(&app, "/workspaces/b/files/same.txt", "in b\n").await,
        201
    );
    assert!(
        get(&app, "/workspaces/a/files/same.txt")
            .await
            .1
            .contains("in a")
    );
    assert!(
        get(&app, "/workspaces/b/files/same.txt")
            .await
            .1
            .contains("in b")
    );
    assert_eq!(get(&app, "/workspaces/a/files/kept.txt").await.0, 404);
    let (_, listing) = get(&app, "/workspaces/a/files").await;
    assert!(
        listing.contains("same.txt") && !listing.contains("kept.txt"),
        "{listing}"
    );

    // Path tricks: climbing out, encoded, absolute. None reaches b's file.
    for trick in [
        "/workspaces/a/files/..%2Fexisting%2Fkept.txt",
        "/workspaces/a/files/%2E%2E/existing/kept.txt",
        "/workspaces/a/files/%2Fetc%2Fpasswd",
        "/workspaces/a/files//etc/passwd",
    ] {
        let (status, body) = get(&app, trick).await;
        assert!(
            [400, 404, 422].contains(&status),
            "{trick}: {status} {body}"
        );
        assert!(
            !body.contains("was here") && !body.contains("root:"),
            "{trick}"
        );
    }
    assert!(
        [400, 404, 422]
            .contains(&put(&app, "/workspaces/a/files/..%2Fexisting%2Fkept.txt", "x").await)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("existing/kept.txt")).unwrap(),
        "was here\n"
    );

    // A symlink in a pointing into b is an escape like any other.
    std::os::unix::fs::symlink(dir.path().join("existing"), dir.path().join("a/link")).unwrap();
    let (status, body) = get(&app, "/workspaces/a/files/link/kept.txt").await;
    assert!(
        status >= 400 && !body.contains("was here"),
        "{status} {body}"
    );
    assert!(put(&app, "/workspaces/a/files/link/new.txt", "x").await >= 400);
    assert!(!dir.path().join("existing/new.txt").exists());

    // A workspace that does not exist answers 404 on every route inside it.
    for path in [
        "/workspaces/nope/files",
        "/workspaces/nope/files/x",
        "/workspaces/..%2Fa/files",
    ] {
        assert_eq!(get(&app, path).await.0, 404, "{path}");
    }
    assert_eq!(put(&app, "/workspaces/nope/files/x", "x").await, 404);

    // The listing: default first, then by name.
    let (_, all) = get(&app, "/workspaces").await;
    let all: Value = serde_json::from_str(&all).unwrap();
    let names: Vec<&str> = all["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "a", "b"]);
}

#[tokio::test]
async fn bad_requests_name_the_field_and_make_nothing() {
    let (app, dir) = app_with_workspaces(Backend::Sqlite).await;
    let (status, body) = create(&app, json!({"name": "Bad/Name"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "name", "{body}");
    for taken in ["default"] {
        let (status, body) = create(&app, json!({"name": taken})).await;
        assert_eq!(status, 409, "{body}");
    }
    assert_eq!(create(&app, json!({"name": "one"})).await.0, 201);
    let (status, body) = create(&app, json!({"name": "one"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("already_exists"))
    );
    let (status, body) = create(
        &app,
        json!({"name": "two", "source": {"kind": "directory", "path": "../.."}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "source.path");
    let (status, body) = create(
        &app,
        json!({"name": "three", "source": {"kind": "git_worktree", "repository": "repo", "branch": "b", "from": "no-such-ref"}}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("source.from")),
        "{body}"
    );
    assert!(!dir.path().join("three").exists());
    assert!(!git(&dir.path().join("repo"), &["branch", "--list"]).contains(" b\n"));
    let (_, all) = get(&app, "/workspaces").await;
    assert!(
        !all.contains("\"two\"") && !all.contains("\"three\""),
        "{all}"
    );
    let r = app
        .client
        .delete(app.url("/workspaces/default"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let r = app
        .client
        .delete(app.url("/workspaces/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn without_a_workspaces_directory_creating_one_is_refused_naming_the_variable() {
    let app = writ_tests::spawn_app(Backend::Sqlite).await;
    let (status, body) = create(&app, json!({"name": "one"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WRIT_WORKSPACES_DIR"),
        "{body}"
    );
    // `default` is served as always, also by its name.
    assert_eq!(put(&app, "/files/x.txt", "x\n").await, 201);
    assert!(
        get(&app, "/workspaces/default/files/x.txt")
            .await
            .1
            .contains('x')
    );
}

#[tokio::test]
async fn a_replica_serves_a_workspace_made_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let (settings, dirs) = writ_tests::test_settings_with(
        Backend::Postgres,
        &[("WRIT_WORKSPACES_DIR", root.as_str())],
    )
    .await;
    let url = settings.database_url.to_string();
    let first = writ_tests::spawn_with(settings, dirs, Backend::Postgres).await;
    let (settings, dirs) = writ_tests::test_settings_with(
        Backend::Postgres,
        &[
            ("WRIT_WORKSPACES_DIR", root.as_str()),
            ("DATABASE_URL", url.as_str()),
        ],
    )
    .await;
    let second = writ_tests::spawn_with(settings, dirs, Backend::Postgres).await;
    assert_eq!(create(&first, json!({"name": "shared"})).await.0, 201);
    assert_eq!(
        put(
            &second,
            "/workspaces/shared/files/x.txt",
            "from the second\n"
        )
        .await,
        201
    );
    assert!(
        get(&first, "/workspaces/shared/files/x.txt")
            .await
            .1
            .contains("from the second")
    );
    assert_eq!(get(&second, "/workspaces/shared").await.0, 200);
}

#[tokio::test]
async fn a_key_bound_to_a_workspace_finds_no_other_anywhere() {
    use writ_core::keys::{self, Scope, Scopes};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let (settings, dirs) =
        writ_tests::test_settings_with(Backend::Sqlite, &[("WRIT_WORKSPACES_DIR", root.as_str())])
            .await;
    // Keys are issued before the server starts, so that it starts with auth on.
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let all = Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]);
    let admin = keys::generate_with_scopes("ops", all);
    store.create_key(&admin.record).await.unwrap();
    let mut a = keys::generate_with_scopes("agent a", all);
    a.record.workspaces = Some(vec!["a".to_owned()]);
    store.create_key(&a.record).await.unwrap();
    let mut b = keys::generate_with_scopes("agent b", all);
    b.record.workspaces = Some(vec!["b".to_owned(), "default".to_owned()]);
    store.create_key(&b.record).await.unwrap();
    drop(store);
    let app = writ_tests::spawn_with(settings, dirs, Backend::Sqlite).await;
    let send = |key: &str, method: &str, path: &str| {
        let mut rb = app
            .client
            .request(method.parse().unwrap(), app.url(path))
            .bearer_auth(key.to_owned());
        if method == "PUT" {
            rb = rb.body("hello\n");
        }
        if method == "POST" && path == "/mcp" {
            rb = rb
                .header("accept", "application/json, text/event-stream")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        }
        async move { rb.send().await.unwrap().status().as_u16() }
    };
    make_empty(&app, &admin.key, &["a", "b"]).await;

    assert_eq!(
        send(&a.key, "PUT", "/workspaces/a/files/mine.txt").await,
        201
    );
    assert_eq!(
        send(&a.key, "GET", "/workspaces/a/files/mine.txt").await,
        200
    );
    assert_eq!(
        send(&b.key, "PUT", "/workspaces/b/files/mine.txt").await,
        201
    );
    // Another's workspace answers as one that does not exist, on every route.
    for (key, other) in [(&a.key, "b"), (&b.key, "a")] {
        for (method, path) in [
            ("GET", format!("/workspaces/{other}/files")),
            ("GET", format!("/workspaces/{other}/files/mine.txt")),
            ("PUT", format!("/workspaces/{other}/files/theirs.txt")),
            ("GET", format!("/workspaces/{other}/search?q=hello")),
            ("GET", format!("/workspaces/{other}")),
            ("DELETE", format!("/workspaces/{other}")),
        ] {
            assert_eq!(send(key, method, &path).await, 404, "{method} {path}");
        }
    }
    assert!(!dir.path().join("a/theirs.txt").exists() && !dir.path().join("b/theirs.txt").exists());
    // Told the same as of a workspace that does not exist, but for the name: no enumeration.
    let answer = |path: &'static str| {
        let r = app
            .client
            .get(app.url(path))
            .bearer_auth(a.key.clone())
            .send();
        async move { r.await.unwrap().json::<Value>().await.unwrap() }
    };
    let theirs = answer("/workspaces/b/files").await;
    let none = answer("/workspaces/c/files").await;
    assert_eq!(theirs["error"]["code"], none["error"]["code"]);
    assert_eq!(
        theirs["error"]["message"]
            .as_str()
            .unwrap()
            .replace("'b'", "'c'"),
        none["error"]["message"].as_str().unwrap()
    );
    // `a` may not use `default`: its routes, the audit and jobs are `default`'s. (MCP and the
    // tools take a `workspace` argument instead: see below.)
    for (method, path) in [
        ("GET", "/files"),
        ("PUT", "/files/x.txt"),
        ("GET", "/operations"),
        ("GET", "/jobs"),
        ("GET", "/workspaces/default/files"),
    ] {
        assert_eq!(send(&a.key, method, path).await, 404, "{method} {path}");
    }
    assert_eq!(
        send(&b.key, "GET", "/files").await,
        200,
        "b may use default"
    );
    // Listings show only the key's workspaces.
    let listed = |key: String| {
        let r = app
            .client
            .get(app.url("/workspaces"))
            .bearer_auth(key)
            .send();
        async move {
            let body: Value = r.await.unwrap().json().await.unwrap();
            body["workspaces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(a.key.clone()).await, ["a"]);
    assert_eq!(listed(b.key.clone()).await, ["default", "b"]);
    assert_eq!(listed(admin.key.clone()).await, ["default", "a", "b"]);
}

#[tokio::test]
async fn the_cli_makes_lists_and_deletes_workspaces() {
    use writ_server::remote_cli::{Remote, WorkspacesCommand, workspaces};
    let (app, dir) = app_with_workspaces(Backend::Sqlite).await;
    let remote = Remote {
        url: app.address.clone(),
        api_key: None,
    };
    let mut out = Vec::new();
    let create = WorkspacesCommand::Create {
        name: "cli".into(),
        directory: None,
        worktree_of: Some("repo".into()),
        branch: Some("from-cli".into()),
        from: None,
        budget: Default::default(),
    };
    workspaces(&remote, &create, &mut out).await.unwrap();
    workspaces(&remote, &WorkspacesCommand::List, &mut out)
        .await
        .unwrap();
    let shown = String::from_utf8(out).unwrap();
    assert!(
        shown.contains("git_worktree") && shown.contains("from-cli"),
        "{shown}"
    );
    assert!(shown.lines().any(|l| l.starts_with("default ")), "{shown}");
    assert!(git(&dir.path().join("repo"), &["branch", "--list"]).contains("from-cli"));
    let err = workspaces(&remote, &create, &mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    let mut out = Vec::new();
    let delete = WorkspacesCommand::Delete { name: "cli".into() };
    workspaces(&remote, &delete, &mut out).await.unwrap();
    let shown = String::from_utf8(out).unwrap();
    assert!(
        shown.contains("files kept") && shown.contains("worktree pruned"),
        "{shown}"
    );
}

/// A server with models (the fake upstream) and workspaces in a directory of their own, with
/// three keys issued before it starts (so it starts with auth on): an admin, and one agent key
/// bound to the workspace `a`, another to `b`; `a` and `b` made by the admin.
struct Agents {
    app: TestApp,
    dir: TempDir,
    admin: String,
    a: String,
    b: String,
}

async fn agents(backend: Backend) -> Agents {
    use writ_core::keys::{self, Scope, Scopes};
    let fake = writ_fake_upstream::FakeUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let base = fake.base_url();
    let list = writ_tests::MODELS.join(",");
    let (settings, dirs) = writ_tests::test_settings_with(
        backend,
        &[
            ("WRIT_WORKSPACES_DIR", root.as_str()),
            ("OPENROUTER_BASE_URL", base.as_str()),
            ("CODE_LIST", list.as_str()),
            ("CODE_MODEL", writ_tests::ARBITER),
            ("CODE_GEN_MODEL", writ_tests::FALLBACK),
            ("WRIT_MODEL_BACKOFF_MS", "10"),
        ],
    )
    .await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let all = Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]);
    let admin = keys::generate_with_scopes("ops", all);
    store.create_key(&admin.record).await.unwrap();
    let agent = Scopes::of(&[Scope::Read, Scope::Write]);
    let mut a = keys::generate_with_scopes("agent a", agent);
    a.record.workspaces = Some(vec!["a".to_owned()]);
    store.create_key(&a.record).await.unwrap();
    let mut b = keys::generate_with_scopes("agent b", agent);
    b.record.workspaces = Some(vec!["b".to_owned()]);
    store.create_key(&b.record).await.unwrap();
    drop(store);
    let mut app = writ_tests::spawn_with(settings, dirs, backend).await;
    app.fake = Some(fake);
    make_empty(&app, &admin.key, &["a", "b"]).await;
    Agents {
        app,
        dir,
        admin: admin.key,
        a: a.key,
        b: b.key,
    }
}

impl Agents {
    async fn get(&self, key: &str, path: &str) -> (u16, Value) {
        let r = self
            .app
            .client
            .get(self.app.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A batch of one file in `workspace`, as the holder of `key`; `prefer_async` asks for the
    /// job at once.
    async fn batch(
        &self,
        key: &str,
        workspace: &str,
        file: &str,
        prefer_async: bool,
    ) -> (u16, Value) {
        let mut r = self
            .app
            .client
            .post(
                self.app
                    .url(&format!("/workspaces/{workspace}/write_codebase")),
            )
            .bearer_auth(key)
            .json(&json!({"command": "write_codebase",
                "files": [{"filename": file, "code_description": "a small module"}]}));
        if prefer_async {
            r = r.header("prefer", "respond-async");
        }
        let r = r.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn wait_done(&self, key: &str, job_path: &str) -> Value {
        for _ in 0..400 {
            let (status, body) = self.get(key, job_path).await;
            assert_eq!(status, 200, "{job_path}: {body}");
            if body["status"] == "done" || body["status"] == "failed" {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("{job_path} did not finish");
    }

    /// One stateless MCP request as the holder of `key`.
    async fn mcp(&self, key: &str, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "workspaces-test", "version": "1"},
        });
        let mut req = self
            .app
            .client
            .post(self.app.url("/mcp"))
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        if let Some(name) = params["name"].as_str() {
            req = req.header("mcp-name", name);
        }
        let text = req.send().await.unwrap().text().await.unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data:").or(Some(l)))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"))
    }
}

async fn two_agents_each_run_a_batch_in_their_own_workspace_and_see_only_its_records(
    backend: Backend,
) {
    let t = agents(backend).await;
    // a's batch is taken as a job and followed where it was accepted.
    let (status, accepted) = t.batch(&t.a, "a", "x.py", true).await;
    assert_eq!(status, 202, "{accepted}");
    let a_job = accepted["job_id"].as_str().unwrap().to_owned();
    assert_eq!(accepted["location"], format!("/workspaces/a/jobs/{a_job}"));
    assert_eq!(
        accepted["events"],
        format!("/workspaces/a/jobs/{a_job}/events")
    );
    let (status, answer) = t.batch(&t.b, "b", "y.py", false).await;
    assert_eq!(status, 200, "{answer}");
    let b_job = answer["request_id"].as_str().unwrap().to_owned();
    let done = t
        .wait_done(&t.a, &format!("/workspaces/a/jobs/{a_job}"))
        .await;
    assert_eq!(done["batch_status"], "success", "{done}");
    assert_eq!(done["workspace"], "a");

    // Each file is in its own workspace only.
    assert!(t.dir.path().join("a/x.py").exists());
    assert!(t.dir.path().join("b/y.py").exists());
    assert!(!t.dir.path().join("b/x.py").exists() && !t.dir.path().join("a/y.py").exists());
    assert!(!t.app.repo_dir.join("x.py").exists() && !t.app.repo_dir.join("y.py").exists());

    // Each key lists its own workspace's jobs and operations, and nothing of the other's.
    let (_, jobs) = t.get(&t.b, "/workspaces/b/jobs").await;
    let ids: Vec<&str> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [b_job.as_str()]);
    let (_, ops) = t.get(&t.a, "/workspaces/a/operations").await;
    let ops = ops["operations"].as_array().unwrap().clone();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0]["filename"], "x.py");
    assert_eq!(ops[0]["workspace"], "a");
    let a_op = ops[0]["id"].as_str().unwrap().to_owned();
    for (key, path) in [
        (&t.b, format!("/workspaces/b/jobs/{a_job}")),
        (&t.b, format!("/workspaces/b/jobs/{a_job}/events")),
        (&t.b, format!("/workspaces/a/jobs/{a_job}")),
        (&t.b, format!("/workspaces/b/operations/{a_op}")),
        (&t.b, "/workspaces/a/operations".to_string()),
        (&t.a, format!("/workspaces/a/jobs/{b_job}")),
        (&t.a, format!("/jobs/{a_job}")),
    ] {
        assert_eq!(t.get(key, &path).await.0, 404, "{path}");
    }
    // Its own events stream, to the end.
    let r = t
        .app
        .client
        .get(t.app.url(&format!("/workspaces/a/jobs/{a_job}/events")))
        .bearer_auth(&t.a)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("event: done"));

    // The admin sees both, and narrows by workspace.
    let (_, all) = t.get(&t.admin, "/operations").await;
    assert_eq!(all["operations"].as_array().unwrap().len(), 2, "{all}");
    let (_, only_b) = t.get(&t.admin, "/operations?workspace=b").await;
    let only_b = only_b["operations"].as_array().unwrap();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0]["filename"], "y.py");
    let (_, jobs) = t.get(&t.admin, "/jobs?workspace=a").await;
    assert_eq!(jobs["jobs"][0]["id"], a_job.as_str());
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1);
    // A request is undone only in its own workspace.
    let r = t
        .app
        .client
        .post(t.app.url(&format!("/workspaces/b/requests/{a_job}/undo")))
        .bearer_auth(&t.admin)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(t.dir.path().join("a/x.py").exists());
}

async fn tools_take_a_workspace_and_a_key_reaches_only_its_own(backend: Backend) {
    let t = agents(backend).await;
    let write = |workspace: Option<&str>| {
        let mut arguments = json!({"path": "t.txt", "content": "by tool\n"});
        if let Some(w) = workspace {
            arguments["workspace"] = json!(w);
        }
        json!({"name": "write_file", "arguments": arguments})
    };
    let done = t.mcp(&t.a, "tools/call", write(Some("a"))).await;
    assert_ne!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        std::fs::read_to_string(t.dir.path().join("a/t.txt")).unwrap(),
        "by tool\n"
    );
    // Without `workspace` the call is in `default`, which a's key may not use; `b` is
    // answered as a workspace that does not exist.
    for (workspace, name) in [(None, "default"), (Some("b"), "b"), (Some("c"), "c")] {
        let refused = t.mcp(&t.a, "tools/call", write(workspace)).await;
        assert_eq!(refused["result"]["isError"], true, "{refused}");
        let text = refused["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains(&format!("no workspace named '{name}'")),
            "{text}"
        );
    }
    assert!(!t.dir.path().join("b/t.txt").exists() && !t.app.repo_dir.join("t.txt").exists());
    // Every tool declares the argument.
    let listed = t.mcp(&t.a, "tools/list", json!({})).await;
    for tool in listed["result"]["tools"].as_array().unwrap() {
        assert_eq!(
            tool["inputSchema"]["properties"]["workspace"]["type"], "string",
            "{}",
            tool["name"]
        );
    }
    // Function calling: the same argument, the same refusal.
    let r = t
        .app
        .client
        .post(t.app.url("/tools/call"))
        .bearer_auth(&t.b)
        .json(&json!({"name": "read_file", "arguments": {"path": "t.txt", "workspace": "a"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = t
        .app
        .client
        .post(t.app.url("/tools/call"))
        .bearer_auth(&t.a)
        .json(&json!({"name": "list_operations", "arguments": {"workspace": "a"}}))
        .send()
        .await
        .unwrap();
    let listed: Value = r.json().await.unwrap();
    let ops = listed["result"]["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{listed}");
    assert_eq!(ops[0]["workspace"], "a");
}

async fn a_workspace_with_a_running_job_is_not_deleted(backend: Backend) {
    use writ_fake_upstream::{Latency, Script, Step};
    let t = agents(backend).await;
    for m in writ_tests::MODELS {
        t.app.fake().script(
            m,
            Script::always(Step::code("python", "a = 1"))
                .with_latency(Latency::fixed(std::time::Duration::from_millis(1500))),
        );
    }
    let (status, accepted) = t.batch(&t.a, "a", "slow.py", true).await;
    assert_eq!(status, 202, "{accepted}");
    let job = accepted["job_id"].as_str().unwrap().to_owned();
    let r = t
        .app
        .client
        .delete(t.app.url("/workspaces/a"))
        .bearer_auth(&t.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains(&job),
        "{body}"
    );
    assert_eq!(body["error"]["details"]["running_jobs"][0], job.as_str());
    t.wait_done(&t.a, &format!("/workspaces/a/jobs/{job}"))
        .await;
    let r = t
        .app
        .client
        .delete(t.app.url("/workspaces/a"))
        .bearer_auth(&t.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

async fn a_batch_cannot_write_through_a_link_into_another_workspace(backend: Backend) {
    let t = agents(backend).await;
    std::os::unix::fs::symlink(t.dir.path().join("b"), t.dir.path().join("a/into-b")).unwrap();
    let (status, answer) = t.batch(&t.a, "a", "into-b/planted.py", false).await;
    assert!(status >= 400, "{status} {answer}");
    assert!(!t.dir.path().join("b/planted.py").exists());
}

writ_tests::on_both_backends!(backend:
    two_agents_each_run_a_batch_in_their_own_workspace_and_see_only_its_records,
    tools_take_a_workspace_and_a_key_reaches_only_its_own,
    a_workspace_with_a_running_job_is_not_deleted,
    a_batch_cannot_write_through_a_link_into_another_workspace,
);
