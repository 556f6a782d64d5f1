//! A commit per request, checked with the real `git` CLI as a user would look at the
//! repository: exactly the request's paths, its trailers, the user's own staged change left
//! staged, its undo a revert commit; the request's option, the workspace's setting and the
//! server's; the key's name as author; two replicas over one repository.

use std::path::Path;

use serde_json::{Value, json};
use writ_core::keys::{self, Scope, Scopes};
use writ_fake_upstream::{Script, Step};
use writ_tests::{
    Backend, MODELS, TestApp, git, spawn_app_with_models, spawn_app_with_models_and, spawn_with,
    test_settings_with,
};

use super::{bytes, seed, undo};

/// Makes `dir` a repository with `files` in its first commit, then stages a change of the
/// user's own (`mine.txt`) and leaves an untracked file: what writ's commits must not touch.
fn repository_with_the_users_work(dir: &Path, files: &[(&str, &[u8])]) {
    git(dir, &["init", "-q", "-b", "main"]);
    for (name, content) in files.iter().chain([&("mine.txt", b"mine\n" as &[u8])]) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "start"]);
    std::fs::write(dir.join("mine.txt"), "mine, staged\n").unwrap();
    git(dir, &["add", "mine.txt"]);
    std::fs::write(dir.join("scratch.txt"), "untracked\n").unwrap();
}

fn commits(dir: &Path) -> usize {
    git(dir, &["rev-list", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap()
}

/// The values of trailer `key` of HEAD's message, in order.
fn trailer(dir: &Path, key: &str) -> Vec<String> {
    git(
        dir,
        &[
            "log",
            "-1",
            &format!("--format=%(trailers:key={key},valueonly)"),
        ],
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    .map(str::to_owned)
    .collect()
}

fn changed_in_head(dir: &Path) -> Vec<String> {
    let mut paths: Vec<String> = git(dir, &["show", "--name-only", "--format=", "HEAD"])
        .lines()
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths
}

fn users_work_is_as_it_was(dir: &Path) {
    let status = git(dir, &["status", "--porcelain"]);
    let mut status: Vec<&str> = status.lines().collect();
    status.sort();
    assert_eq!(
        status,
        ["?? scratch.txt", "M  mine.txt"],
        "the user's staged change is still staged, the untracked file untracked"
    );
    assert!(git(dir, &["diff", "--cached", "mine.txt"]).contains("+mine, staged"));
}

fn script_models(app: &TestApp) {
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::code("python", "def add(a, b):\n    return a + b")),
        );
    }
}

fn two_files(options: Value) -> Value {
    json!({"command": "write_codebase",
        "task_description": "Add the calculator helpers\nwith a second line",
        "files": [
            {"filename": "calc.py", "code_description": "a function add(a, b)"},
            {"filename": "src/util.py", "code_description": "the same add(a, b), for util"}],
        "options": options})
}

/// The two-file batch with `commit: true`, both files written.
async fn two_files_asking_for_a_commit(app: &TestApp) -> Value {
    let (status, batch) = app
        .post_write_codebase(&two_files(json!({"commit": true})))
        .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["succeeded"], 2, "{batch}");
    batch
}

#[tokio::test]
async fn a_batch_with_commit_is_one_commit_of_its_files_with_each_files_model_and_its_undo_a_revert()
 {
    // The server does not commit by default: the batch asks.
    let app = spawn_app_with_models(Backend::Sqlite).await;
    let d = app.repo_dir.clone();
    repository_with_the_users_work(&d, &[("calc.py", b"def add(a, b):\r\n    return 0\r\n")]);
    script_models(&app);

    let batch = two_files_asking_for_a_commit(&app).await;

    assert_eq!(commits(&d), 2, "one commit for the batch");
    let head = git(&d, &["rev-parse", "HEAD"]);
    assert_eq!(
        batch["commit"].as_str(),
        Some(head.trim()),
        "the answer names it"
    );
    assert_eq!(
        changed_in_head(&d),
        ["calc.py", "src/util.py"],
        "only writ's paths"
    );
    assert_eq!(
        trailer(&d, "Writ-Request"),
        [batch["request_id"].as_str().unwrap()]
    );
    let results = batch["results"].as_array().unwrap();
    let expected = |field: &str| -> Vec<String> {
        results
            .iter()
            .map(|r| {
                format!(
                    "{}={}",
                    r["filename"].as_str().unwrap(),
                    r[field].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(trailer(&d, "Writ-Model"), expected("chosen_model"));
    assert_eq!(trailer(&d, "Writ-Selection"), expected("selection"));
    assert_eq!(
        git(&d, &["log", "-1", "--format=%s"]).trim(),
        "Add the calculator helpers",
        "the subject is the task's first line"
    );
    let body = git(&d, &["log", "-1", "--format=%b"]);
    assert!(
        body.contains("- src/util.py: the same add(a, b), for util"),
        "{body}"
    );
    assert_eq!(
        git(&d, &["log", "-1", "--format=%an|%cn"]).trim(),
        "writ|writ"
    );
    assert_eq!(
        git(&d, &["show", "HEAD:calc.py"]).as_bytes(),
        bytes(&app, "calc.py").unwrap(),
        "the commit holds what writ wrote"
    );
    users_work_is_as_it_was(&d);

    // The undo does not say `commit`, and the server does not commit by default: it reverts
    // because the request it undoes was committed.
    let (status, undone) = undo(&app, &batch["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(commits(&d), 3, "the undo is one commit more");
    let subject = git(&d, &["log", "-1", "--format=%s"]);
    assert_eq!(
        subject.trim(),
        format!("Revert request {}", batch["request_id"].as_str().unwrap())
    );
    assert_eq!(
        trailer(&d, "Writ-Undoes"),
        [batch["request_id"].as_str().unwrap()]
    );
    assert_eq!(
        git(&d, &["show", "HEAD:calc.py"]),
        "def add(a, b):\r\n    return 0\r\n",
        "back byte for byte"
    );
    assert!(
        !git(&d, &["ls-tree", "-r", "--name-only", "HEAD"]).contains("src/util.py"),
        "the created file is gone from the tree"
    );
    users_work_is_as_it_was(&d);

    // A request that was not committed is undone without a commit.
    let mut uncommitted = two_files(json!({}));
    uncommitted["files"][0]["filename"] = json!("loose.py");
    uncommitted["files"][1]["filename"] = json!("src/loose.py");
    let (status, batch) = app.post_write_codebase(&uncommitted).await;
    assert_eq!(status, 200, "{batch}");
    let (status, undone) = undo(&app, &batch["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(commits(&d), 3, "no commit for either");
    users_work_is_as_it_was(&d);
}

#[tokio::test]
async fn an_async_batch_commits_as_the_server_is_set_and_a_batch_can_say_no() {
    let app = spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_GIT_COMMIT", "true")]).await;
    let d = app.repo_dir.clone();
    repository_with_the_users_work(&d, &[]);
    script_models(&app);

    let (status, accepted) = app
        .post_write_codebase(&two_files(json!({"async": true})))
        .await;
    assert_eq!(status, 202, "{accepted}");
    let job = accepted["job_id"].as_str().unwrap();
    let done = wait_done(&app, job).await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(commits(&d), 2);
    assert_eq!(
        trailer(&d, "Writ-Request"),
        [job],
        "a job's id is its request's"
    );
    assert_eq!(
        done["response"]["commit"].as_str(),
        Some(git(&d, &["rev-parse", "HEAD"]).trim())
    );

    let mut not = two_files(json!({"commit": false}));
    not["files"][0]["filename"] = json!("other.py");
    not["files"][1]["filename"] = json!("src/other.py");
    let (status, batch) = app.post_write_codebase(&not).await;
    assert_eq!(status, 200, "{batch}");
    assert!(batch.get("commit").is_none(), "{batch}");
    assert_eq!(commits(&d), 2, "commit: false overrides the server");
    users_work_is_as_it_was_but(&d, &["?? other.py", "?? src/other.py"]);
}

async fn wait_done(app: &TestApp, job: &str) -> Value {
    for _ in 0..400 {
        let (status, body) = app.json(&format!("/jobs/{job}")).await;
        assert_eq!(status, 200, "{body}");
        if body["status"] == "done" || body["status"] == "failed" {
            return body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("job {job} did not finish");
}

#[tokio::test]
async fn the_author_is_the_keys_name_and_the_committer_writ() {
    let (settings, dirs) = test_settings_with(Backend::Sqlite, &[]).await;
    let store = writ_store::connect(&settings.database_url.to_string())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let key = keys::generate_with_scopes("alice laptop", Scopes::of(&[Scope::Read, Scope::Write]));
    store.create_key(&key.record).await.unwrap();
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let d = app.repo_dir.clone();
    repository_with_the_users_work(&d, &[]);

    let r = app
        .client
        .put(app.url("/files/notes.txt?commit=true"))
        .bearer_auth(&key.key)
        .body("a note\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(commits(&d), 2);
    assert_eq!(
        git(&d, &["log", "-1", "--format=%an <%ae>|%cn"]).trim(),
        format!("alice laptop <{}@writ>|writ", key.record.id)
    );
    assert_eq!(trailer(&d, "Writ-Selection"), ["notes.txt=direct"]);
    users_work_is_as_it_was(&d);
}

#[tokio::test]
async fn a_workspace_set_to_commit_commits_its_requests_unless_one_says_no() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    repository_with_the_users_work(&repo, &[]);
    let root = dir.path().to_str().unwrap().to_owned();
    let (settings, dirs) =
        test_settings_with(Backend::Sqlite, &[("WRIT_WORKSPACES_DIR", root.as_str())]).await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let (status, made) = app
        .post_json(
            "/workspaces",
            &json!({"name": "team", "source": {"kind": "directory", "path": "repo"}, "git_commit": true}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["git_commit"], true);

    let put = |path: &'static str| {
        let app = &app;
        async move {
            let r = app
                .client
                .put(app.url(path))
                .body("x = 1\n")
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    };
    assert_eq!(put("/workspaces/team/files/a.py").await, 201);
    assert_eq!(commits(&repo), 2, "the workspace commits by default");
    assert_eq!(changed_in_head(&repo), ["a.py"]);
    assert_eq!(put("/workspaces/team/files/b.py?commit=false").await, 201);
    assert_eq!(commits(&repo), 2, "the request's own no wins");

    users_work_is_as_it_was_but(&repo, &["?? b.py"]);
}

#[tokio::test]
async fn a_batch_in_a_workspace_commits_in_that_workspaces_repository_only() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    repository_with_the_users_work(&repo, &[]);
    let root = dir.path().to_str().unwrap().to_owned();
    let app =
        spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_WORKSPACES_DIR", root.as_str())]).await;
    repository_with_the_users_work(&app.repo_dir, &[]);
    script_models(&app);
    let (status, made) = app
        .post_json(
            "/workspaces",
            &json!({"name": "team", "source": {"kind": "directory", "path": "repo"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");

    let (status, batch) = app
        .post_json(
            "/workspaces/team/write_codebase",
            &two_files(json!({"commit": true})),
        )
        .await;

    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["succeeded"], 2, "{batch}");
    assert!(batch["commit"].is_string(), "{batch}");
    assert_eq!(
        commits(&repo),
        2,
        "one commit in the workspace's repository"
    );
    assert_eq!(changed_in_head(&repo), ["calc.py", "src/util.py"]);
    assert_eq!(
        commits(&app.repo_dir),
        1,
        "REPO_DIR's repository is not touched"
    );
    assert!(!app.repo_dir.join("calc.py").exists());
}

#[tokio::test]
async fn a_write_session_that_asks_commits_its_file_when_it_writes_it() {
    let (settings, dirs) = test_settings_with(Backend::Sqlite, &[]).await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let d = app.repo_dir.clone();
    repository_with_the_users_work(&d, &[]);
    let (status, begun) = app
        .post_json(
            "/write_sessions",
            &json!({"target_file": "long.md", "operation": "create",
                    "intent": "Write the long notes", "commit": true}),
        )
        .await;
    assert_eq!(status, 201, "{begun}");
    assert_eq!(begun["commit"], true);
    let id = begun["id"].as_str().unwrap();
    let r = app
        .client
        .post(app.url(&format!("/write_sessions/{id}/content")))
        .header("content-type", "text/plain")
        .body("# notes\nDONE\n")
        .send()
        .await
        .unwrap();
    let done: Value = r.json().await.unwrap();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(commits(&d), 2, "{done}");
    assert_eq!(changed_in_head(&d), ["long.md"]);
    assert_eq!(git(&d, &["show", "HEAD:long.md"]), "# notes\n");
    assert_eq!(
        git(&d, &["log", "-1", "--format=%s"]).trim(),
        "Write the long notes"
    );
    assert_eq!(
        trailer(&d, "Writ-Request"),
        [done["receipt"]["request_id"].as_str().unwrap()]
    );
    // Asking for the session again answers its receipt, and makes no second commit.
    let (status, again) = app.json(&format!("/write_sessions/{id}")).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(commits(&d), 2);
    users_work_is_as_it_was(&d);
}

/// [`users_work_is_as_it_was`], with `also` (writ's uncommitted files) in the status too.
fn users_work_is_as_it_was_but(dir: &Path, also: &[&str]) {
    let status = git(dir, &["status", "--porcelain"]);
    let mut status: Vec<&str> = status.lines().collect();
    status.sort();
    let mut expected: Vec<&str> = ["?? scratch.txt", "M  mine.txt"]
        .into_iter()
        .chain(also.iter().copied())
        .collect();
    expected.sort();
    assert_eq!(status, expected);
}

/// Two servers over one PostgreSQL database and one repository, as replicas are deployed.
async fn two_replicas() -> (TestApp, TestApp) {
    let (settings, dirs) =
        test_settings_with(Backend::Postgres, &[("WRIT_GIT_COMMIT", "true")]).await;
    let url = settings.database_url.to_string();
    let first = spawn_with(settings, dirs, Backend::Postgres).await;
    let repo = first.repo_dir.to_str().unwrap().to_owned();
    let (settings, dirs) = test_settings_with(
        Backend::Postgres,
        &[
            ("WRIT_GIT_COMMIT", "true"),
            ("DATABASE_URL", url.as_str()),
            ("REPO_DIR", repo.as_str()),
        ],
    )
    .await;
    let second = spawn_with(settings, dirs, Backend::Postgres).await;
    (first, second)
}

#[tokio::test]
async fn across_two_replicas_an_undo_reverts_the_others_commit_and_races_never_tear_a_file() {
    let (first, second) = two_replicas().await;
    let d = first.repo_dir.clone();
    repository_with_the_users_work(&d, &[("hot.txt", b"original\r\n")]);

    let written = first
        .put_file("hot.txt", "", "by writ\n".repeat(2000))
        .await;
    let written: Value = written.json().await.unwrap();
    assert_eq!(commits(&d), 2);
    let (status, undone) = undo(&second, &written["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(
        commits(&d),
        3,
        "the other replica's undo is a revert commit"
    );
    assert_eq!(
        trailer(&d, "Writ-Undoes"),
        [written["request_id"].as_str().unwrap()]
    );
    assert_eq!(bytes(&first, "hot.txt").unwrap(), b"original\r\n");

    // An undo on one replica and a write on the other, on one file, at once, several times:
    // the file is always one whole version, and HEAD always holds what the file holds.
    let writer_content = "by a writer\n".repeat(2000);
    for _ in 0..5 {
        let written = first
            .put_file("hot.txt", "", "by writ\n".repeat(2000))
            .await;
        let written: Value = written.json().await.unwrap();
        let undo_call = undo(&second, &written["request_id"], json!({"force": true}));
        let write_call = first.put_file("hot.txt", "", writer_content.clone());
        let ((status, body), w) = tokio::join!(undo_call, write_call);
        assert!(status == 200 || status == 412, "{status} {body}");
        assert_eq!(w.status().as_u16(), 200);
        let now = bytes(&first, "hot.txt").unwrap();
        assert!(
            now == b"original\r\n" || now == writer_content.as_bytes(),
            "the file is one whole version, not a mix"
        );
        assert_eq!(
            git(&d, &["show", "HEAD:hot.txt"]).as_bytes(),
            now,
            "HEAD holds what the file holds"
        );
    }
    users_work_is_as_it_was(&d);
}

#[tokio::test]
async fn with_git_commits_on_an_edit_is_one_commit_of_its_paths_and_its_undo_a_revert_commit() {
    let (settings, dirs) =
        test_settings_with(Backend::Sqlite, &[("WRIT_GIT_COMMIT", "true")]).await;
    let app = spawn_with(settings, dirs, Backend::Sqlite).await;
    let d = app.repo_dir.clone();
    git(&d, &["init", "-q", "-b", "main"]);
    git(&d, &["config", "user.name", "User"]);
    git(&d, &["config", "user.email", "user@example.com"]);
    seed(&app, "a.py", b"a = 1\r\n");
    seed(&app, "mine.txt", b"mine\n");
    git(&d, &["add", "."]);
    git(&d, &["commit", "-q", "-m", "start"]);
    seed(&app, "mine.txt", b"mine, staged\n");
    git(&d, &["add", "mine.txt"]);

    let (status, edited) = app
        .post_json(
            "/edits",
            &json!({"files": [{"path": "a.py", "edits": [{"old": "a = 1", "new": "a = 2"}]}]}),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(git(&d, &["rev-list", "--count", "HEAD"]).trim(), "2");
    let request = git(
        &d,
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Writ-Request,valueonly)",
        ],
    );
    assert_eq!(request.trim(), edited["request_id"].as_str().unwrap());
    let paths = git(&d, &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(paths.trim(), "a.py", "only writ's path is in the commit");
    let status_lines = git(&d, &["status", "--porcelain"]);
    assert_eq!(
        status_lines.trim(),
        "M  mine.txt",
        "the user's change is still staged"
    );

    let (status, undone) = undo(&app, &edited["request_id"], json!({})).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(git(&d, &["rev-list", "--count", "HEAD"]).trim(), "3");
    let subject = git(&d, &["log", "-1", "--format=%s"]);
    assert!(subject.starts_with("Revert request"), "{subject}");
    assert_eq!(git(&d, &["show", "HEAD:a.py"]), "a = 1\r\n");
    assert_eq!(git(&d, &["status", "--porcelain"]).trim(), "M  mine.txt");
}

#[tokio::test]
async fn commit_asked_where_the_workspace_is_no_repository_writes_the_files_and_makes_none() {
    let app = spawn_app_with_models(Backend::Sqlite).await;
    script_models(&app);
    let batch = two_files_asking_for_a_commit(&app).await;
    assert!(batch.get("commit").is_none(), "no commit named: {batch}");
    assert!(bytes(&app, "calc.py").is_some());
    assert!(
        !app.repo_dir.join(".git").exists(),
        "no repository is made for the commit"
    );
    let (status, undone) = undo(&app, &batch["request_id"], json!({"commit": true})).await;
    assert_eq!(status, 200, "the undo works without git too: {undone}");
}
