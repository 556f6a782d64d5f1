//! Claims end to end: a workspace claims paths of its repository for a while; the other
//! workspaces of that repository (git worktrees made from it, and the repository's own
//! workspace) see the claim, and a write of theirs that respects claims is refused 409 `claimed`
//! before any model is called, until the claim is released or expires — on any replica. Bad
//! claims are refused naming the field; a key that may not use the holding workspace sees its
//! claims without its name.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use writ_tests::{Backend, TestApp, git};

fn make_repository(at: &Path) {
    std::fs::create_dir_all(at).unwrap();
    git(at, &["init", "-q", "-b", "main"]);
    std::fs::write(at.join("README"), "hello\n").unwrap();
    git(at, &["add", "README"]);
    git(at, &["commit", "-q", "-m", "first"]);
}

/// The workspaces `a` and `b`, git worktrees of the repository `repo` (made in `dir`), made on
/// `app` with `key` (none while auth is off).
async fn make_worktrees(app: &TestApp, key: Option<&str>) {
    for name in ["a", "b"] {
        let (status, made) = send(
            app,
            key,
            "POST",
            "/workspaces",
            Some(json!({"name": name, "source": {
                "kind": "git_worktree", "repository": "repo", "branch": format!("task/{name}")}})),
        )
        .await;
        assert_eq!(status, 201, "{made}");
    }
}

/// A server with models (the fake upstream) whose workspaces are made beside a git repository
/// `repo`, with `extra` variables; `a` and `b` are worktrees of `repo`.
async fn two_worktrees(backend: Backend, extra: &[(&str, &str)]) -> (TestApp, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    make_repository(&dir.path().join("repo"));
    let root = dir.path().to_str().unwrap().to_owned();
    let mut vars = vec![("WRIT_WORKSPACES_DIR", root.as_str())];
    vars.extend_from_slice(extra);
    let app = writ_tests::spawn_app_with_models_and(backend, &vars).await;
    make_worktrees(&app, None).await;
    (app, dir)
}

async fn send(
    app: &TestApp,
    key: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = app.client.request(method.parse().unwrap(), app.url(path));
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    if let Some(body) = body {
        r = r.json(&body);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn claim(app: &TestApp, workspace: &str, paths: &[&str], ttl_secs: u64) -> Value {
    let (status, made) = send(
        app,
        None,
        "POST",
        &format!("/workspaces/{workspace}/claims"),
        Some(json!({"paths": paths, "ttl_secs": ttl_secs})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    made
}

async fn claims_seen_from(app: &TestApp, key: Option<&str>, workspace: &str) -> Vec<Value> {
    let (status, list) = send(
        app,
        key,
        "GET",
        &format!("/workspaces/{workspace}/claims"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{list}");
    list["claims"].as_array().unwrap().clone()
}

/// A batch of one file in `workspace`, with `options`.
async fn batch(
    app: &TestApp,
    key: Option<&str>,
    workspace: &str,
    file: &str,
    options: Value,
) -> (u16, Value) {
    send(
        app,
        key,
        "POST",
        &format!("/workspaces/{workspace}/write_codebase"),
        Some(json!({"command": "write_codebase",
            "files": [{"filename": file, "code_description": "a small module"}],
            "options": options})),
    )
    .await
}

async fn a_batch_into_a_path_another_workspace_claimed_waits_for_its_release(backend: Backend) {
    let (app, dir) = two_worktrees(backend, &[]).await;
    let made = claim(&app, "a", &["src/*.py", "docs/**"], 600).await;
    assert_eq!(made["workspace"], "a");
    assert_eq!(made["own"], true);
    assert_eq!(made["paths"], json!(["src/*.py", "docs/**"]));
    let id = made["id"].as_str().unwrap().to_owned();

    // B sees A's claim among the repository's; A sees it as its own.
    let seen = claims_seen_from(&app, None, "b").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["id"], id.as_str());
    assert_eq!(seen[0]["workspace"], "a");
    assert_eq!(seen[0]["own"], false);
    assert_eq!(claims_seen_from(&app, None, "a").await[0]["own"], true);
    assert!(
        claims_seen_from(&app, None, "default").await.is_empty(),
        "REPO_DIR is another repository"
    );

    // Respecting claims, B is refused before any model is asked, naming the path and the claim.
    let (status, refused) =
        batch(&app, None, "b", "src/a.py", json!({"respect_claims": true})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "claimed");
    assert_eq!(refused["error"]["field"], "files[0].filename");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("'src/a.py'")
            && message.contains("workspace 'a'")
            && message.contains("src/*.py"),
        "{message}"
    );
    let detail = &refused["error"]["details"]["claims"][0];
    assert_eq!(detail["path"], "src/a.py");
    assert_eq!(detail["pattern"], "src/*.py");
    assert_eq!(detail["claim_id"], id.as_str());
    assert_eq!(detail["workspace"], "a");
    assert_eq!(detail["expires_at"], made["expires_at"]);
    assert!(app.fake().calls().is_empty(), "no model was asked");
    assert!(!dir.path().join("b/src/a.py").exists());
    // A's own claim does not hold A back, and `*` stays within `src`.
    let (status, answer) =
        batch(&app, None, "a", "src/a.py", json!({"respect_claims": true})).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = batch(
        &app,
        None,
        "b",
        "src/deep/x.py",
        json!({"respect_claims": true}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // Not respecting claims, B writes all the same.
    let (status, answer) = batch(&app, None, "b", "docs/x/y.py", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(dir.path().join("b/docs/x/y.py").exists());

    // B cannot release A's claim; A can, and B goes ahead.
    let (status, _) = send(
        &app,
        None,
        "DELETE",
        &format!("/workspaces/b/claims/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, released) = send(
        &app,
        None,
        "DELETE",
        &format!("/workspaces/a/claims/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["released"], 1);
    let (status, _) = send(
        &app,
        None,
        "DELETE",
        &format!("/workspaces/a/claims/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 404, "released already");
    let (status, answer) =
        batch(&app, None, "b", "src/a.py", json!({"respect_claims": true})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(dir.path().join("b/src/a.py").exists());
    assert!(claims_seen_from(&app, None, "b").await.is_empty());
}

async fn a_claim_expires_with_its_ttl_and_goes_with_its_workspace(backend: Backend) {
    let (app, _dir) = two_worktrees(backend, &[]).await;
    claim(&app, "a", &["a.py"], 1).await;
    let (status, refused) = batch(&app, None, "b", "a.py", json!({"respect_claims": true})).await;
    assert_eq!(status, 409, "{refused}");

    tokio::time::sleep(Duration::from_millis(1_200)).await;

    assert!(claims_seen_from(&app, None, "b").await.is_empty());
    let (status, answer) = batch(&app, None, "b", "a.py", json!({"respect_claims": true})).await;
    assert_eq!(status, 200, "{answer}");

    // Deleting a workspace releases its claims.
    claim(&app, "a", &["b.py"], 600).await;
    let (status, deleted) = send(&app, None, "DELETE", "/workspaces/a", None).await;
    assert_eq!(status, 200, "{deleted}");
    assert!(claims_seen_from(&app, None, "b").await.is_empty());
    let (status, answer) = batch(&app, None, "b", "b.py", json!({"respect_claims": true})).await;
    assert_eq!(status, 200, "{answer}");
}

async fn the_servers_setting_refuses_every_write_unless_a_batch_says_otherwise(backend: Backend) {
    let (app, dir) = two_worktrees(backend, &[("WRIT_RESPECT_CLAIMS", "1")]).await;
    // Before the claim, b writes src/c.py and proposes src/d.py for review.
    let r = app
        .client
        .put(app.url("/workspaces/b/files/src/c.py?create_dirs=true"))
        .body("c = 1\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let put: Value = r.json().await.unwrap();
    let (status, proposed) = batch(&app, None, "b", "src/d.py", json!({"review": true})).await;
    assert_eq!(status, 200, "{proposed}");
    let change = proposed["change_id"].as_str().unwrap().to_owned();
    let asked_before = app.fake().calls().len();
    claim(&app, "a", &["src/**"], 600).await;

    let refused = |status: u16, body: &Value, field: &str| {
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "claimed", "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    };
    let r = app
        .client
        .put(app.url("/workspaces/b/files/src/a.py"))
        .body("x = 1\n")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    refused(status, &r.json().await.unwrap(), "path");
    let (status, body) = send(
        &app,
        None,
        "POST",
        "/workspaces/b/edits",
        Some(json!({"patch": "*** Begin Patch\n*** Add File: src/a.py\n+x = 1\n*** End Patch\n"})),
    )
    .await;
    refused(status, &body, "patch (src/a.py)");
    let (status, body) = send(
        &app,
        None,
        "POST",
        "/workspaces/b/write_sessions",
        Some(json!({"target_file": "src/a.py", "operation": "overwrite"})),
    )
    .await;
    refused(status, &body, "target_file");
    let (status, body) = batch(&app, None, "b", "src/a.py", json!({})).await;
    refused(status, &body, "files[0].filename");
    assert_eq!(app.fake().calls().len(), asked_before, "no model was asked");
    assert!(
        !dir.path().join("b/src/a.py").exists(),
        "nothing was written"
    );
    // Undoing b's earlier write, restoring it, applying its proposal: each writes a claimed
    // path, and is refused the same way.
    let undo = format!(
        "/workspaces/b/requests/{}/undo",
        put["request_id"].as_str().unwrap()
    );
    let restore = format!(
        "/workspaces/b/operations/{}/restore",
        put["operation_id"].as_str().unwrap()
    );
    let apply = format!("/workspaces/b/changes/{change}/apply");
    for (path, field) in [(&undo, "id"), (&restore, "id"), (&apply, "files")] {
        let (status, body) = send(&app, None, "POST", path, Some(json!({}))).await;
        refused(status, &body, field);
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b/src/c.py")).unwrap(),
        "c = 1\n"
    );
    assert!(!dir.path().join("b/src/d.py").exists());

    // A batch that says so writes over the claim; the holder writes as ever.
    let (status, answer) = batch(
        &app,
        None,
        "b",
        "src/a.py",
        json!({"respect_claims": false}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let r = app
        .client
        .put(app.url("/workspaces/a/files/src/b.py?create_dirs=true"))
        .body("y = 2\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // Outside the claim, B writes as ever.
    let r = app
        .client
        .put(app.url("/workspaces/b/files/README"))
        .body("changed\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

async fn a_worktree_and_the_repository_it_was_made_from_share_claims(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let app = writ_tests::spawn_app_with_models_and(
        backend,
        &[
            ("WRIT_WORKSPACES_DIR", root.as_str()),
            ("WRIT_RESPECT_CLAIMS", "1"),
        ],
    )
    .await;
    make_repository(&app.repo_dir);
    let (status, made) = send(
        &app,
        None,
        "POST",
        "/workspaces",
        Some(json!({"name": "task", "source": {
            "kind": "git_worktree", "repository": "default", "branch": "task/1"}})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    claim(&app, "default", &["README"], 600).await;

    assert_eq!(claims_seen_from(&app, None, "task").await.len(), 1);
    let r = app
        .client
        .put(app.url("/workspaces/task/files/README"))
        .body("theirs\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    // And the other way round.
    claim(&app, "task", &["NOTES"], 600).await;
    let r = app
        .client
        .put(app.url("/files/NOTES"))
        .body("mine\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
}

async fn a_bad_claim_is_refused_naming_the_field_and_the_limit_and_claims_nothing(
    backend: Backend,
) {
    let (app, _dir) = two_worktrees(backend, &[]).await;
    let many: Vec<String> = (0..101).map(|i| format!("f{i}.py")).collect();
    for (body, field, says) in [
        (json!({"paths": []}), "paths", "between 1 and 100"),
        (json!({"paths": many}), "paths", "got 101"),
        (json!({"paths": ["a.py", "../x.py"]}), "paths[1]", "'..'"),
        (json!({"paths": ["/etc/passwd"]}), "paths[0]", "relative"),
        (json!({"paths": ["src/[a.py"]}), "paths[0]", "not a glob"),
        (
            json!({"paths": ["a.py"], "ttl_secs": 0}),
            "ttl_secs",
            "between 1 and 604800",
        ),
        (
            json!({"paths": ["a.py"], "ttl_secs": 604_801}),
            "ttl_secs",
            "604800",
        ),
    ] {
        let (status, refused) = send(
            &app,
            None,
            "POST",
            "/workspaces/a/claims",
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, 422, "{body}: {refused}");
        assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
        assert_eq!(refused["error"]["field"], field, "{body}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    let (status, refused) = send(
        &app,
        None,
        "POST",
        "/workspaces/a/claims",
        Some(json!({"paths": ["a.py"], "until": "later"})),
    )
    .await;
    assert!((400..500).contains(&status), "{refused}");
    assert!(
        claims_seen_from(&app, None, "a").await.is_empty(),
        "nothing was claimed"
    );
    let (status, _) = send(&app, None, "GET", "/workspaces/nope/claims", None).await;
    assert_eq!(status, 404);
    let (status, _) = send(
        &app,
        None,
        "DELETE",
        "/workspaces/a/claims/not-a-uuid",
        None,
    )
    .await;
    assert_eq!(status, 404);

    // The default TTL is an hour; releasing all releases the workspace's own only.
    let mine = claim(&app, "a", &["a.py"], 3_600).await;
    let (status, theirs) = send(
        &app,
        None,
        "POST",
        "/workspaces/b/claims",
        Some(json!({"paths": ["b.py"]})),
    )
    .await;
    assert_eq!(status, 201, "{theirs}");
    let lasts = |c: &Value| {
        let at = |k: &str| chrono::DateTime::parse_from_rfc3339(c[k].as_str().unwrap()).unwrap();
        (at("expires_at") - at("created_at")).num_seconds()
    };
    assert_eq!(lasts(&theirs), 3_600);
    assert_eq!(lasts(&mine), 3_600);
    let (status, released) = send(&app, None, "DELETE", "/workspaces/a/claims", None).await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["released"], 1);
    let left = claims_seen_from(&app, None, "a").await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["workspace"], "b");
}

/// Keys issued before the server starts (so that it starts with auth on): an admin, and an
/// agent key bound to `a`, another to `b`, and a read-only one bound to `b`.
async fn a_key_that_may_not_use_the_holder_sees_its_claim_without_its_name(backend: Backend) {
    use writ_core::keys::{self, Scope, Scopes};
    let fake = writ_fake_upstream::FakeUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    make_repository(&dir.path().join("repo"));
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
        ],
    )
    .await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let admin = keys::generate_with_scopes(
        "ops",
        Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]),
    );
    store.create_key(&admin.record).await.unwrap();
    let agent = Scopes::of(&[Scope::Read, Scope::Write]);
    let mut a = keys::generate_with_scopes("agent a", agent);
    a.record.workspaces = Some(vec!["a".to_owned()]);
    store.create_key(&a.record).await.unwrap();
    let mut b = keys::generate_with_scopes("agent b", agent);
    b.record.workspaces = Some(vec!["b".to_owned()]);
    store.create_key(&b.record).await.unwrap();
    let mut reader = keys::generate_with_scopes("reader b", Scopes::of(&[Scope::Read]));
    reader.record.workspaces = Some(vec!["b".to_owned()]);
    store.create_key(&reader.record).await.unwrap();
    drop(store);
    let mut app = writ_tests::spawn_with(settings, dirs, backend).await;
    app.fake = Some(fake);
    make_worktrees(&app, Some(&admin.key)).await;

    let (status, made) = send(
        &app,
        Some(&a.key),
        "POST",
        "/workspaces/a/claims",
        Some(json!({"paths": ["x.py"]})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["created_by"], a.record.id.as_str());
    let id = made["id"].as_str().unwrap().to_owned();

    // B's key sees the claim, but neither the workspace holding it nor the key that made it.
    let seen = claims_seen_from(&app, Some(&b.key), "b").await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["id"], id.as_str());
    assert!(
        seen[0].get("workspace").is_none() && seen[0].get("created_by").is_none(),
        "{seen:?}"
    );
    // The admin's key may use every workspace: it sees both.
    let seen = claims_seen_from(&app, Some(&admin.key), "b").await;
    assert_eq!(seen[0]["workspace"], "a");
    assert_eq!(seen[0]["created_by"], a.record.id.as_str());

    // Refused without the name either.
    let (status, refused) = batch(
        &app,
        Some(&b.key),
        "b",
        "x.py",
        json!({"respect_claims": true}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("another workspace") && !message.contains("'a'"),
        "{message}"
    );
    assert!(
        refused["error"]["details"]["claims"][0]
            .get("workspace")
            .is_none(),
        "{refused}"
    );
    assert!(app.fake().calls().is_empty());

    // B's key reaches neither A's claims nor A's release; a read-only key makes no claim.
    for (method, path) in [
        ("GET", "/workspaces/a/claims".to_owned()),
        ("POST", "/workspaces/a/claims".to_owned()),
        ("DELETE", format!("/workspaces/a/claims/{id}")),
        ("DELETE", "/workspaces/a/claims".to_owned()),
    ] {
        let body = (method == "POST").then(|| json!({"paths": ["y.py"]}));
        let (status, answer) = send(&app, Some(&b.key), method, &path, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
    }
    let (status, answer) = send(
        &app,
        Some(&reader.key),
        "POST",
        "/workspaces/b/claims",
        Some(json!({"paths": ["y.py"]})),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        claims_seen_from(&app, Some(&reader.key), "b").await.len(),
        1
    );
}

writ_tests::on_both_backends!(backend:
    a_batch_into_a_path_another_workspace_claimed_waits_for_its_release,
    a_claim_expires_with_its_ttl_and_goes_with_its_workspace,
    the_servers_setting_refuses_every_write_unless_a_batch_says_otherwise,
    a_worktree_and_the_repository_it_was_made_from_share_claims,
    a_bad_claim_is_refused_naming_the_field_and_the_limit_and_claims_nothing,
    a_key_that_may_not_use_the_holder_sees_its_claim_without_its_name,
);

#[tokio::test]
async fn a_claim_made_through_one_replica_refuses_a_batch_on_another() {
    let dir = tempfile::tempdir().unwrap();
    make_repository(&dir.path().join("repo"));
    let root = dir.path().to_str().unwrap().to_owned();
    let first = writ_tests::spawn_app_with_models_and(
        Backend::Postgres,
        &[("WRIT_WORKSPACES_DIR", root.as_str())],
    )
    .await;
    let url = first.database_url.clone();
    let second = writ_tests::spawn_app_with_models_and(
        Backend::Postgres,
        &[
            ("WRIT_WORKSPACES_DIR", root.as_str()),
            ("DATABASE_URL", url.as_str()),
        ],
    )
    .await;
    make_worktrees(&first, None).await;

    claim(&first, "a", &["shared.py"], 600).await;

    let (status, refused) = batch(
        &second,
        None,
        "b",
        "shared.py",
        json!({"respect_claims": true}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["details"]["claims"][0]["workspace"], "a");
    assert!(second.fake().calls().is_empty());
    assert_eq!(claims_seen_from(&second, None, "b").await.len(), 1);
    // Released on the second, the first sees it gone.
    let (status, _) = send(&second, None, "DELETE", "/workspaces/a/claims", None).await;
    assert_eq!(status, 200);
    let (status, answer) = batch(
        &first,
        None,
        "b",
        "shared.py",
        json!({"respect_claims": true}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
}
