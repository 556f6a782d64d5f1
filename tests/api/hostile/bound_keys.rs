//! A key bound to workspaces learns nothing of the others: not through an argument other than
//! the path's workspace (a merge's `into`), not through an answer that differs for "exists but
//! not yours" and "does not exist" (making a workspace), and not through a route that reports on
//! every workspace (`/metrics`). What is its own it may read whatever its binding: the spec, its
//! own key's spend, its own model statistics.

use std::path::Path;

use reqwest::Method;
use serde_json::{Value, json};
use tempfile::TempDir;
use writ_core::keys::{self, Scope, Scopes};
use writ_tests::{Backend, TestApp, git};

struct Repo {
    app: TestApp,
    dir: TempDir,
    /// Unbound, every scope.
    admin: String,
    /// Every scope, bound to `wc` and `mine` (which does not exist yet).
    bound_admin: String,
    /// read and write, bound to `default` and `wc`.
    agent: String,
    /// read, bound to `wc` only; and its key id.
    reader: (String, String),
}

fn commit_file(d: &Path, name: &str, content: &str) {
    std::fs::write(d.join(name), content).unwrap();
    git(d, &["add", name]);
    git(d, &["commit", "-q", "-m", &format!("write {name}")]);
}

/// A repository `repo` with workspaces `wc` (branch task/c) and `wd` (branch task/d), each with
/// a commit of its own, and the four keys above.
async fn repo(backend: Backend) -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit_file(&repo, "README", "hello\n");
    let root = dir.path().to_str().unwrap().to_owned();
    let (settings, dirs) =
        writ_tests::test_settings_with(backend, &[("WRIT_WORKSPACES_DIR", root.as_str())]).await;
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let every = Scopes::of(&[Scope::Read, Scope::Write, Scope::Admin]);
    let key = |name: &str, scopes: Scopes, bound: Option<&[&str]>| {
        let mut k = keys::generate_with_scopes(name, scopes);
        k.record.workspaces = bound.map(|b| b.iter().map(|s| s.to_string()).collect());
        k
    };
    let admin = key("ops", every, None);
    let bound_admin = key("ops of wc", every, Some(&["wc", "mine"]));
    let agent = key(
        "agent",
        Scopes::of(&[Scope::Read, Scope::Write]),
        Some(&["default", "wc"]),
    );
    let reader = key("reader", Scopes::of(&[Scope::Read]), Some(&["wc"]));
    for k in [&admin, &bound_admin, &agent, &reader] {
        store.create_key(&k.record).await.unwrap();
    }
    drop(store);
    let app = writ_tests::spawn_with(settings, dirs, backend).await;
    let r = Repo {
        app,
        dir,
        admin: admin.key,
        bound_admin: bound_admin.key,
        agent: agent.key,
        reader: (reader.key, reader.record.id),
    };
    for (name, branch) in [("wc", "task/c"), ("wd", "task/d")] {
        let (status, made) = r
            .call(
                &r.admin,
                Method::POST,
                "/workspaces",
                json!({"name": name, "source": {"kind": "git_worktree", "repository": "repo", "branch": branch}}),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        commit_file(&r.dir.path().join(name), &format!("{name}.txt"), name);
    }
    r
}

impl Repo {
    async fn call(&self, key: &str, method: Method, path: &str, body: Value) -> (u16, Value) {
        let mut r = self
            .app
            .client
            .request(method.clone(), self.app.url(path))
            .bearer_auth(key);
        if method != Method::GET {
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

    async fn get(&self, key: &str, path: &str) -> u16 {
        self.call(key, Method::GET, path, Value::Null).await.0
    }

    fn rev(&self, branch: &str) -> String {
        git(&self.dir.path().join("repo"), &["rev-parse", branch])
    }
}

async fn a_bound_key_merges_only_into_branches_it_may_see_and_another_workspaces_branch_is_as_absent(
    backend: Backend,
) {
    let r = repo(backend).await;
    let d_before = r.rev("task/d");
    let merge = |into: &str| {
        r.call(
            &r.bound_admin,
            Method::POST,
            "/workspaces/wc/merge",
            json!({ "into": into }),
        )
    };
    let (status, theirs) = merge("task/d").await;
    let (absent_status, absent) = merge("task/nowhere").await;
    assert_eq!((status, absent_status), (422, 422), "{theirs} / {absent}");
    assert_eq!(theirs["error"]["field"], "into");
    // The same answer but for the name: nothing tells a branch of a hidden workspace apart.
    assert_eq!(
        theirs["error"]["message"]
            .as_str()
            .unwrap()
            .replace("task/d", "X"),
        absent["error"]["message"]
            .as_str()
            .unwrap()
            .replace("task/nowhere", "X"),
    );
    assert_eq!(r.rev("task/d"), d_before, "task/d did not move");

    // An unbound key merges it, and wd's worktree, which has task/d checked out, follows: the
    // merged file is there and git sees nothing staged, so its next commit keeps the merge.
    let (status, merged) = r
        .call(
            &r.admin,
            Method::POST,
            "/workspaces/wc/merge",
            json!({"into": "task/d"}),
        )
        .await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["outcome"], "merged");
    let wd = r.dir.path().join("wd");
    assert_eq!(std::fs::read_to_string(wd.join("wc.txt")).unwrap(), "wc");
    assert_eq!(git(&wd, &["status", "--porcelain"]), "");
    // The bound key may still merge its own branch into main, which is no workspace's branch.
    let (status, merged) = merge("main").await;
    assert_eq!(status, 200, "{merged}");
}

async fn a_bound_key_reads_what_is_its_own_and_nothing_that_spans_every_workspace(
    backend: Backend,
) {
    let r = repo(backend).await;
    let (reader, reader_id) = (&r.reader.0, &r.reader.1);
    // Its own spend, the spec and its own statistics, bound only to `wc`.
    assert_eq!(
        r.get(reader, &format!("/keys/{reader_id}/spend")).await,
        200
    );
    assert_eq!(r.get(reader, "/openapi.yaml").await, 200);
    assert_eq!(r.get(reader, "/stats/models").await, 200);
    // /metrics names every workspace and every key's spend: refused to any bound key, even one
    // that may use `default`, while an unbound key reads it.
    for key in [reader, &r.agent, &r.bound_admin] {
        let (status, refused) = r.call(key, Method::GET, "/metrics", Value::Null).await;
        assert_eq!(status, 403, "{refused}");
        let text = refused.to_string();
        assert!(!text.contains("wd"), "{text}");
    }
    assert_eq!(r.get(&r.admin, "/metrics").await, 200);
}

async fn making_a_workspace_tells_a_bound_key_nothing_of_the_workspaces_it_may_not_use(
    backend: Backend,
) {
    let r = repo(backend).await;
    let mut answers = Vec::new();
    for body in [
        json!({"name": "wd"}),
        json!({"name": "wd", "source": {"kind": "directory", "path": "nowhere"}}),
        json!({"name": "fresh"}),
        json!({"name": "fresh", "source": {"kind": "directory", "path": "nowhere"}}),
    ] {
        let (status, answer) = r
            .call(&r.bound_admin, Method::POST, "/workspaces", body.clone())
            .await;
        answers.push((
            status,
            answer["error"]["code"].clone(),
            answer["error"]["field"].clone(),
            answer["error"]["message"].clone(),
        ));
    }
    assert_eq!(answers[0].0, 403, "{answers:?}");
    assert_eq!(answers[0].1, "insufficient_scope", "{answers:?}");
    assert_eq!(answers[0].2, "name", "{answers:?}");
    assert!(
        answers.iter().all(|a| *a == answers[0]),
        "one answer whether or not the name exists: {answers:?}"
    );
    assert!(!r.dir.path().join("fresh").exists());
    // A name it is bound to is made as for any admin key.
    let (status, made) = r
        .call(
            &r.bound_admin,
            Method::POST,
            "/workspaces",
            json!({"name": "mine"}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
}

writ_tests::on_both_backends!(backend:
    a_bound_key_merges_only_into_branches_it_may_see_and_another_workspaces_branch_is_as_absent,
    a_bound_key_reads_what_is_its_own_and_nothing_that_spans_every_workspace,
    making_a_workspace_tells_a_bound_key_nothing_of_the_workspaces_it_may_not_use,
);
