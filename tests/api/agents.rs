//! Parallel agents on one repository, end to end: three agents, each with its own
//! git-worktree workspace and a key bound to it, whose tasks overlap on two files. The overlap is
//! in the answer of the first overlapping write (and its job's stream), not found at merge; a
//! claim respected refuses the second agent before any model call; after the first merge, a
//! task's rebase replays it on the moved target and re-runs its checks; a merge whose rebase
//! failed its checks is refused unless forced; a rebase is undone. The real `git` program checks
//! the branches. On PostgreSQL, half the agents talk to a second replica.

use std::path::Path;

use serde_json::{Value, json};
use tempfile::TempDir;
use writ_core::keys::{self, Scope, Scopes};
use writ_fake_upstream::{FakeUpstream, Script, Step};
use writ_tests::{ARBITER, Backend, FALLBACK, MODELS, TestApp, git};

const COMMANDS: &str = r#"{"python": ["python3", "{args}"]}"#;
const TEST_CALC: &str = "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom calc import add\nassert add(2, 3) == 5, 'add'\nprint('ok')\n";
const TEST_SHARED: &str = "import os, sys\nsys.path.insert(0, os.getcwd())\nfrom shared import greet\nassert greet().startswith('h'), 'greet'\nprint('ok')\n";

const OPS: &str = "def plus(a, b):\n    return a + b\n";

struct Scenario {
    apps: Vec<TestApp>,
    fake: FakeUpstream,
    dir: TempDir,
    admin: String,
    keys: Vec<(String, String)>,
}

fn make_repository(at: &Path) {
    std::fs::create_dir_all(at.join("tests")).unwrap();
    git(at, &["init", "-q", "-b", "main"]);
    std::fs::write(at.join("README"), "hello\n").unwrap();
    std::fs::write(at.join("shared.py"), "def greet():\n    return 'hi'\n").unwrap();
    std::fs::write(at.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    std::fs::write(at.join("ops.py"), OPS).unwrap();
    std::fs::write(at.join("tests/test_calc.py"), TEST_CALC).unwrap();
    std::fs::write(at.join("tests/test_shared.py"), TEST_SHARED).unwrap();
    git(at, &["add", "."]);
    git(at, &["commit", "-q", "-m", "first"]);
}

async fn scenario(backend: Backend, replicas: usize) -> Scenario {
    scenario_with(backend, replicas, &[]).await
}

/// The scenario, each replica also set with `extra`.
async fn scenario_with(backend: Backend, replicas: usize, extra: &[(&str, &str)]) -> Scenario {
    let fake = FakeUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    make_repository(&dir.path().join("repo"));
    let root = dir.path().to_str().unwrap().to_owned();
    let base = fake.base_url();
    let list = MODELS.join(",");
    let vars = |url: Option<&str>| {
        let mut v = vec![
            ("WRIT_WORKSPACES_DIR", root.clone()),
            ("OPENROUTER_BASE_URL", base.clone()),
            ("CODE_LIST", list.clone()),
            ("CODE_MODEL", ARBITER.to_owned()),
            ("CODE_GEN_MODEL", FALLBACK.to_owned()),
            ("WRIT_MODEL_BACKOFF_MS", "10".to_owned()),
            ("WRIT_COMMANDS", COMMANDS.to_owned()),
        ];
        v.extend(extra.iter().map(|(k, x)| (*k, (*x).to_owned())));
        if let Some(url) = url {
            v.push(("DATABASE_URL", url.to_owned()));
        }
        v
    };
    let owned = vars(None);
    let borrowed: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (settings, dirs) = writ_tests::test_settings_with(backend, &borrowed).await;
    let url = settings.database_url.to_string();
    let store = writ_store::connect(&settings.database_url).await.unwrap();
    store.migrate().await.unwrap();
    let admin = keys::generate_with_scopes(
        "ops",
        Scopes::of(&[Scope::Read, Scope::Write, Scope::Run, Scope::Admin]),
    );
    store.create_key(&admin.record).await.unwrap();
    let mut agent_keys = Vec::new();
    for name in ["a", "b", "c"] {
        let mut k = keys::generate_with_scopes(
            &format!("agent {name}"),
            Scopes::of(&[Scope::Read, Scope::Write, Scope::Run]),
        );
        k.record.workspaces = Some(vec![name.to_owned()]);
        store.create_key(&k.record).await.unwrap();
        agent_keys.push((name.to_owned(), k.key));
    }
    drop(store);
    let mut apps = vec![writ_tests::spawn_with(settings, dirs, backend).await];
    for _ in 1..replicas {
        let owned = vars(Some(&url));
        let borrowed: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (settings, dirs) = writ_tests::test_settings_with(backend, &borrowed).await;
        apps.push(writ_tests::spawn_with(settings, dirs, backend).await);
    }
    let s = Scenario {
        apps,
        fake,
        dir,
        admin: admin.key,
        keys: agent_keys,
    };
    for name in ["a", "b", "c"] {
        let (status, body) = s
            .send(
                0,
                &s.admin,
                "POST",
                "/workspaces",
                Some(json!({"name": name, "git_commit": true, "source": {
                    "kind": "git_worktree", "repository": "repo", "branch": format!("task/{name}"), "from": "main"}})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    s
}

impl Scenario {
    fn key(&self, agent: &str) -> &str {
        &self.keys.iter().find(|(n, _)| n == agent).unwrap().1
    }

    /// The replica agent `agent` talks to: on several replicas, `b` and `c` use the second.
    fn replica_of(&self, agent: &str) -> usize {
        if self.apps.len() > 1 && agent != "a" {
            1
        } else {
            0
        }
    }

    fn repo(&self) -> std::path::PathBuf {
        self.dir.path().join("repo")
    }

    async fn send(
        &self,
        replica: usize,
        key: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let app = &self.apps[replica];
        let mut r = app
            .client
            .request(method.parse().unwrap(), app.url(path))
            .bearer_auth(key);
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

    /// Every candidate model answers `code` (the arbiter picks the first).
    fn answer(&self, code: &str) {
        for m in MODELS {
            self.fake
                .script(m, Script::always(Step::code("python", code)));
        }
        self.fake
            .script(ARBITER, Script::always(Step::verdict(1, "the first")));
    }

    /// Agent `agent` writes `file` in its workspace, checked by `test` when given.
    async fn write(
        &self,
        agent: &str,
        file: &str,
        test: Option<&str>,
        extra: Value,
    ) -> (u16, Value) {
        let mut options = json!({});
        if let Some(test) = test {
            options["validation"] = json!({"commands": [{"name": "python", "args": [test]}],
                                           "timeout_secs": 30, "repair_rounds": 0});
        }
        if let Value::Object(extra) = extra {
            for (k, v) in extra {
                options[k] = v;
            }
        }
        self.send(
            self.replica_of(agent),
            self.key(agent),
            "POST",
            &format!("/workspaces/{agent}/write_codebase"),
            Some(json!({"command": "write_codebase",
                "files": [{"filename": file, "code_description": "as the tests say"}],
                "options": options})),
        )
        .await
    }

    /// The admin merges workspace `name` into main (`force` when given).
    async fn merge(&self, name: &str, force: bool) -> (u16, Value) {
        let mut body = json!({"into": "main"});
        if force {
            body["force"] = json!(true);
        }
        self.send(
            0,
            &self.admin,
            "POST",
            &format!("/workspaces/{name}/merge"),
            Some(body),
        )
        .await
    }

    fn tip(&self, branch: &str) -> String {
        git(&self.repo(), &["rev-parse", branch]).trim().to_owned()
    }
}

async fn three_agents_overlap_claim_merge_and_rebase(backend: Backend, replicas: usize) {
    let s = scenario(backend, replicas).await;

    // A rewrites shared.py; nobody else has touched it: no overlap.
    s.answer("def greet():\n    return 'hello from a'\n");
    let (status, a1) = s
        .write("a", "shared.py", Some("tests/test_shared.py"), json!({}))
        .await;
    assert_eq!(status, 200, "{a1}");
    assert_eq!(a1["results"][0]["success"], true, "{a1}");
    assert!(a1.get("overlaps").is_none(), "{a1}");

    // B writes shared.py too: told at once that workspace a changed it, with a's commit.
    s.answer("def greet():\n    return 'hey from b'\n");
    let (status, b1) = s
        .write("b", "shared.py", Some("tests/test_shared.py"), json!({}))
        .await;
    assert_eq!(status, 200, "{b1}");
    let overlaps = b1["overlaps"].as_array().unwrap_or_else(|| panic!("{b1}"));
    assert_eq!(overlaps.len(), 1, "{b1}");
    assert_eq!(overlaps[0]["path"], "shared.py");
    assert_eq!(overlaps[0]["with"], "workspace");
    // B's key is bound to b: a's name and branch are not its to see.
    assert!(overlaps[0].get("workspace").is_none(), "{b1}");
    assert_eq!(overlaps[0]["their_commit"], s.tip("task/a"), "{b1}");
    // The job's stream told it too, before `done`.
    let job = b1["request_id"].as_str().unwrap();
    let (status, events) = s
        .send(
            s.replica_of("b"),
            s.key("b"),
            "GET",
            &format!("/workspaces/b/jobs/{job}/events"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let events = events.as_str().unwrap().to_owned();
    let overlap_at = events
        .find("event: overlap")
        .unwrap_or_else(|| panic!("{events}"));
    assert!(overlap_at < events.find("event: done").unwrap(), "{events}");

    // The admin sees whose it is.
    let (status, listed) = s
        .send(0, &s.admin, "GET", "/workspaces/b/overlaps", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    let listed = listed["overlaps"].as_array().unwrap().clone();
    assert!(
        listed
            .iter()
            .any(|o| o["path"] == "shared.py" && o["workspace"] == "a" && o["branch"] == "task/a"),
        "{listed:?}"
    );

    // A direct write is told the same.
    let app = &s.apps[s.replica_of("b")];
    let put = app
        .client
        .put(app.url("/workspaces/b/files/shared.py"))
        .bearer_auth(s.key("b"))
        .body("def greet():\n    return 'howdy from b'\n")
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let put: Value = put.json().await.unwrap();
    assert_eq!(put["overlaps"][0]["path"], "shared.py", "{put}");
    assert_eq!(put["overlaps"][0]["their_commit"], s.tip("task/a"), "{put}");

    // B writes calc.py; then C writes calc.py and hears of b's.
    s.answer("def add(a, b):\n    return b + a\n");
    let (status, b2) = s
        .write("b", "calc.py", Some("tests/test_calc.py"), json!({}))
        .await;
    assert_eq!(status, 200, "{b2}");
    s.answer("def add(a, b):\n    return sum((a, b))\n");
    let (status, c1) = s
        .write("c", "calc.py", Some("tests/test_calc.py"), json!({}))
        .await;
    assert_eq!(status, 200, "{c1}");
    assert_eq!(c1["results"][0]["success"], true, "{c1}");
    assert_eq!(c1["overlaps"][0]["path"], "calc.py", "{c1}");
    assert_eq!(c1["overlaps"][0]["their_commit"], s.tip("task/b"), "{c1}");

    // A claims shared.py; C, respecting claims, is refused before any model is asked.
    let (status, claim) = s
        .send(
            0,
            s.key("a"),
            "POST",
            "/workspaces/a/claims",
            Some(json!({"paths": ["shared.py"], "ttl_secs": 600})),
        )
        .await;
    assert_eq!(status, 201, "{claim}");
    let calls = s.fake.calls().len();
    let (status, refused) = s
        .write("c", "shared.py", None, json!({"respect_claims": true}))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "claimed", "{refused}");
    assert_eq!(s.fake.calls().len(), calls, "no model was asked");
    assert_eq!(
        std::fs::read_to_string(s.dir.path().join("c/shared.py")).unwrap(),
        "def greet():\n    return 'hi'\n"
    );

    // A's work lands first. C is now one commit behind, on no common path.
    let (status, merged) = s.merge("a", false).await;
    assert_eq!(status, 200, "{merged}");
    let (status, c_info) = s.send(0, &s.admin, "GET", "/workspaces/c", None).await;
    assert_eq!(status, 200, "{c_info}");
    assert_eq!(c_info["base"]["target"], "main", "{c_info}");
    assert_eq!(c_info["base"]["behind"], 1, "{c_info}");
    assert_eq!(c_info["base"]["ahead"], 1, "{c_info}");
    assert_eq!(c_info["base"]["changed_on_both"], json!([]), "{c_info}");

    // C rebases onto the moved main: replayed, and calc.py's checks re-run and pass.
    let c_before = s.tip("task/c");
    let (status, rebased) = s
        .send(
            s.replica_of("c"),
            s.key("c"),
            "POST",
            "/workspaces/c/rebase",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{rebased}");
    assert_eq!(rebased["outcome"], "rebased", "{rebased}");
    assert_eq!(rebased["onto"], "main");
    assert_eq!(rebased["checks_passed"], true, "{rebased}");
    assert_eq!(
        rebased["checks"][0]["paths"],
        json!(["calc.py"]),
        "{rebased}"
    );
    assert_eq!(rebased["new_tip"], s.tip("task/c"));
    git(
        &s.repo(),
        &["merge-base", "--is-ancestor", "main", "task/c"],
    );
    // The worktree followed: a's shared.py is there, c's calc.py kept.
    let c_root = s.dir.path().join("c");
    assert_eq!(
        std::fs::read_to_string(c_root.join("shared.py")).unwrap(),
        "def greet():\n    return 'hello from a'\n"
    );
    assert!(
        std::fs::read_to_string(c_root.join("calc.py"))
            .unwrap()
            .contains("sum((a, b))")
    );
    assert_ne!(c_before, s.tip("task/c"));

    // B's shared.py conflicts with a's: 409 with the hunks, and nothing moved.
    let b_before = s.tip("task/b");
    let (status, conflict) = s
        .send(
            s.replica_of("b"),
            s.key("b"),
            "POST",
            "/workspaces/b/rebase",
            None,
        )
        .await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(
        conflict["error"]["details"]["files"][0]["path"], "shared.py",
        "{conflict}"
    );
    assert!(
        conflict["error"]["details"]["files"][0]["hunks"][0]
            .as_str()
            .unwrap()
            .contains("<<<<<<<"),
        "{conflict}"
    );
    assert_eq!(s.tip("task/b"), b_before);
    assert!(
        git(&s.dir.path().join("b"), &["status", "--porcelain"])
            .trim()
            .is_empty()
    );

    // main moves again with a stricter test that c's add fails: the rebase's checks fail, and
    // the merge is refused until forced.
    let repo = s.repo();
    std::fs::write(
        repo.join("tests/test_calc.py"),
        TEST_CALC.replace(
            "print('ok')",
            "assert add('a', 'b') == 'ab', 'strings'\nprint('ok')",
        ),
    )
    .unwrap();
    git(&repo, &["commit", "-q", "-am", "a stricter test"]);
    let rebase_c = || async {
        s.send(
            s.replica_of("c"),
            s.key("c"),
            "POST",
            "/workspaces/c/rebase",
            Some(json!({"onto": "main"})),
        )
        .await
    };
    let (status, failing) = rebase_c().await;
    assert_eq!(status, 200, "{failing}");
    assert_eq!(failing["checks_passed"], false, "{failing}");
    assert!(
        failing["checks"][0]["output_tail"]
            .as_str()
            .unwrap()
            .contains("strings"),
        "{failing}"
    );
    let main_before = s.tip("main");
    let (status, refused) = s.merge("c", false).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "checks_failed", "{refused}");
    assert_eq!(s.tip("main"), main_before);

    // The failing rebase is undone: task/c is back where the first rebase left it.
    let undo_path = format!(
        "/workspaces/c/requests/{}/undo",
        failing["request_id"].as_str().unwrap()
    );
    let (status, undone) = s
        .send(
            s.replica_of("c"),
            s.key("c"),
            "POST",
            &undo_path,
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(s.tip("task/c"), rebased["new_tip"].as_str().unwrap());
    // The worktree followed the branch back: main's stricter test is not in it.
    assert!(
        !std::fs::read_to_string(c_root.join("tests/test_calc.py"))
            .unwrap()
            .contains("strings")
    );

    // Rebased again it still fails; forced, the merge goes ahead.
    let (status, again) = rebase_c().await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["checks_passed"], false, "{again}");
    let (status, forced) = s.merge("c", true).await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(s.tip("main"), s.tip("task/c"));
}

#[tokio::test]
async fn sqlite_three_agents_overlap_claim_merge_and_rebase() {
    three_agents_overlap_claim_merge_and_rebase(Backend::Sqlite, 1).await;
}

#[tokio::test]
async fn postgres_three_agents_overlap_claim_merge_and_rebase_across_two_replicas() {
    three_agents_overlap_claim_merge_and_rebase(Backend::Postgres, 2).await;
}

/// The tool call `name` with `arguments`, as agent `agent` makes it (`POST /tools/call`).
async fn tool(s: &Scenario, agent: &str, name: &str, arguments: Value) -> (u16, Value) {
    s.send(
        s.replica_of(agent),
        s.key(agent),
        "POST",
        "/tools/call",
        Some(json!({"name": name, "arguments": arguments})),
    )
    .await
}

const WRITER: &str = "test/writer";
const CALC_RIGHT: &str = "from ops import plus\n\n\ndef add(a, b):\n    return plus(a, b)\n\n\ndef mul(a, b):\n    return a * b\n";
const CALC_WRONG: &str = "from ops import plus\n\n\ndef add(a, b):\n    return plus(a, b)\n\n\ndef mul(a, b):\n    return a + b\n";
/// Two right tests and one whose expected value is wrong (every candidate fails it).
const GENERATED: &str = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(4, 5) == 20\n\n\ndef test_slip():\n    assert add(1, 1) == 3\n";

/// A batch chosen by its generated tests, then a rebase onto a target that breaks what they
/// check: the rebase runs them again, the merge is refused; main mended, a rebase through the
/// tool passes them. The test the file failed when it was written is not counted either time.
#[tokio::test]
async fn a_rebase_runs_the_generated_tests_a_batch_kept_again() {
    let s = scenario_with(Backend::Sqlite, 1, &[("WRIT_TEST_MODELS", WRITER)]).await;
    for (m, code) in MODELS.iter().zip([CALC_WRONG, CALC_WRONG, CALC_RIGHT]) {
        s.fake.script(m, Script::always(Step::code("python", code)));
    }
    s.fake
        .script(ARBITER, Script::always(Step::verdict(1, "the first")));
    s.fake
        .script(WRITER, Script::always(Step::code("python", GENERATED)));
    let (status, written) = s
        .write(
            "c",
            "calc.py",
            None,
            json!({"validation": {"generate": true}}),
        )
        .await;
    assert_eq!(status, 200, "{written}");
    assert_eq!(
        written["results"][0]["chosen_model"], MODELS[2],
        "{written}"
    );
    assert_eq!(written["results"][0]["selection"], "agreement", "{written}");

    // main's ops.py now subtracts: calc's add is wrong on the rebased branch.
    let repo = s.repo();
    std::fs::write(repo.join("ops.py"), OPS.replace("a + b", "a - b")).unwrap();
    git(&repo, &["commit", "-q", "-am", "plus subtracts"]);
    let (status, rebased) = s
        .send(0, s.key("c"), "POST", "/workspaces/c/rebase", None)
        .await;
    assert_eq!(status, 200, "{rebased}");
    assert_eq!(rebased["outcome"], "rebased", "{rebased}");
    assert_eq!(rebased["checks_passed"], false, "{rebased}");
    assert_eq!(
        rebased["checks"],
        json!([]),
        "no caller's command: {rebased}"
    );
    let generated = &rebased["generated"][0];
    assert_eq!(generated["path"], "calc.py", "{rebased}");
    assert_eq!(generated["request_id"], written["request_id"], "{rebased}");
    assert_eq!(generated["passed"], false, "{rebased}");
    assert_eq!(
        (
            generated["tests"].as_u64(),
            generated["tests_passed"].as_u64(),
            generated["failed_when_written"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{rebased}"
    );
    assert!(
        generated["failed"][0]["test"]
            .as_str()
            .unwrap()
            .ends_with("::test_add"),
        "{rebased}"
    );
    // The workspace holds no test writ ran: they ran on a scratch copy.
    assert!(!s.dir.path().join("c/.writ-checks").exists());
    let main_before = s.tip("main");
    let (status, refused) = s.merge("c", false).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "checks_failed", "{refused}");
    assert_eq!(
        refused["error"]["details"]["generated"][0]["path"], "calc.py",
        "{refused}"
    );
    assert_eq!(s.tip("main"), main_before);

    // main mended; the rebase through the tool passes them, and says so in its text.
    std::fs::write(repo.join("ops.py"), OPS).unwrap();
    git(&repo, &["commit", "-q", "-am", "plus adds again"]);
    let (status, called) = tool(&s, "c", "rebase_workspace", json!({"workspace": "c"})).await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["result"]["checks_passed"], true, "{called}");
    let text = called["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("generated tests of calc.py: 2 of 2 pass"),
        "{called}"
    );
    let (status, merged) = s.merge("c", false).await;
    assert_eq!(status, 200, "{merged}");
}

/// Every surface that writes reports an overlap: edits, a write session, an applied change set;
/// and claims and overlaps are tools an agent calls in its workspace.
#[tokio::test]
async fn edits_sessions_change_sets_and_the_tools_report_overlaps_and_claims() {
    let s = scenario(Backend::Sqlite, 1).await;
    // A commits a change to shared.py and calc.py.
    s.answer("def greet():\n    return 'hello from a'\n");
    let (status, a1) = s.write("a", "shared.py", None, json!({})).await;
    assert_eq!(status, 200, "{a1}");
    let a_shared = s.tip("task/a");
    s.answer("def add(a, b):\n    return b + a\n");
    let (status, a2) = s.write("a", "calc.py", None, json!({})).await;
    assert_eq!(status, 200, "{a2}");

    // B's edit of shared.py hears of it (the admin's own key would see a's name; b's does not).
    let (status, edited) = s
        .send(
            0,
            s.key("b"),
            "POST",
            "/workspaces/b/edits",
            Some(json!({"files": [{"path": "shared.py", "edits": [
                {"old": "'hi'", "new": "'hey'"}]}]})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["overlaps"][0]["path"], "shared.py", "{edited}");
    // Their newest commit of that path, not their branch's tip.
    assert_eq!(edited["overlaps"][0]["their_commit"], a_shared, "{edited}");
    assert!(edited["overlaps"][0].get("workspace").is_none(), "{edited}");

    // B's write session of calc.py: the call that writes the file hears of it, in its text too.
    let (status, begun) = tool(
        &s,
        "b",
        "begin_write_session",
        json!({"workspace": "b", "target_file": "calc.py", "operation": "overwrite",
               "intent": "add, reversed"}),
    )
    .await;
    assert_eq!(status, 200, "{begun}");
    let id = begun["result"]["id"].as_str().unwrap().to_owned();
    let (status, appended) = tool(
        &s,
        "b",
        "append_to_write_session",
        json!({"workspace": "b", "session_id": id,
               "chunk": "def add(a, b):\n    return a + b + 0\nDONE\n"}),
    )
    .await;
    assert_eq!(status, 200, "{appended}");
    assert_eq!(
        appended["result"]["overlaps"][0]["path"], "calc.py",
        "{appended}"
    );
    assert!(
        appended["content"]
            .as_str()
            .unwrap()
            .contains("! overlap: calc.py"),
        "{appended}"
    );

    // C proposes shared.py for review, then applies it: the apply hears of a's change.
    s.answer("def greet():\n    return 'greetings from c'\n");
    let (status, proposed) = s
        .write("c", "shared.py", None, json!({"review": true}))
        .await;
    assert_eq!(status, 200, "{proposed}");
    assert!(
        proposed.get("overlaps").is_none(),
        "nothing written yet: {proposed}"
    );
    let change = proposed["change_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{proposed}"));
    let (status, applied) = s
        .send(
            0,
            s.key("c"),
            "POST",
            &format!("/workspaces/c/changes/{change}/apply"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["overlaps"][0]["path"], "shared.py", "{applied}");

    // The tools: a claim made, seen by another agent without a's name, refused, released.
    let (status, claimed) = tool(
        &s,
        "a",
        "claim_paths",
        json!({"workspace": "a", "paths": ["src/**/*.py"], "ttl_secs": 120}),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let claim_id = claimed["result"]["id"].as_str().unwrap().to_owned();
    let (status, seen) = tool(&s, "b", "list_claims", json!({"workspace": "b"})).await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(
        seen["result"]["claims"][0]["id"],
        claim_id.as_str(),
        "{seen}"
    );
    assert_eq!(seen["result"]["claims"][0]["own"], false, "{seen}");
    assert!(
        seen["result"]["claims"][0].get("workspace").is_none(),
        "{seen}"
    );
    assert!(
        seen["content"]
            .as_str()
            .unwrap()
            .contains("another workspace"),
        "{seen}"
    );
    // B may not make or release claims in a's workspace: as if it did not exist.
    let (status, foreign) = tool(&s, "b", "release_claims", json!({"workspace": "a"})).await;
    assert_eq!(status, 404, "{foreign}");
    let (status, unknown) = tool(
        &s,
        "b",
        "list_claims",
        json!({"workspace": "b", "stray": 1}),
    )
    .await;
    assert_eq!(status, 422, "{unknown}");
    assert_eq!(unknown["error"]["field"], "stray", "{unknown}");
    let (status, released) = tool(
        &s,
        "a",
        "release_claims",
        json!({"workspace": "a", "id": claim_id}),
    )
    .await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["result"]["released"], 1, "{released}");
    let (_, seen) = tool(&s, "b", "list_claims", json!({"workspace": "b"})).await;
    assert_eq!(seen["result"]["claims"], json!([]), "{seen}");

    // list_overlaps: b's shared.py and calc.py both overlap a's.
    let (status, listed) = tool(&s, "b", "list_overlaps", json!({"workspace": "b"})).await;
    assert_eq!(status, 200, "{listed}");
    let mut paths: Vec<&str> = listed["result"]["overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths, vec!["calc.py", "shared.py"], "{listed}");
    assert!(
        listed["content"].as_str().unwrap().contains("shared.py"),
        "{listed}"
    );
}
