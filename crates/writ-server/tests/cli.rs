//! The `writ` binary's `migrate` and `check` commands, run as a user would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn writ(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn check_passes_after_migrate_on_the_embedded_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("workspace");
    let env = [
        ("DATABASE_URL", db.as_str()),
        ("REPO_DIR", repo.to_str().unwrap()),
    ];

    let before = writ(&["check"], &env);
    assert!(
        !before.status.success(),
        "an unmigrated database fails the check:\n{}",
        text(&before)
    );
    assert!(text(&before).contains("writ migrate"), "{}", text(&before));

    let migrate = writ(&["migrate"], &env);
    assert!(migrate.status.success(), "{}", text(&migrate));

    let after = writ(&["check"], &env);
    assert!(after.status.success(), "{}", text(&after));
    assert!(text(&after).contains("[ok  ] repo_dir"), "{}", text(&after));
    assert!(
        text(&after).contains("[ok  ] provider      embedded llama.cpp: local/smollm2-135m")
            && text(&after).contains("neither OPENROUTER_API_KEY nor CODE_LIST is set"),
        "no key and no CODE_LIST: the embedded model, and why:\n{}",
        text(&after)
    );

    let off = writ(&["check"], &[env[0], env[1], ("WRIT_LOCAL_MODEL", "off")]);
    assert!(off.status.success(), "{}", text(&off));
    assert!(
        text(&off).contains("[warn] models") && text(&off).contains("WRIT_LOCAL_MODEL=off"),
        "with the embedded model off, no models is a warning, not a failure:\n{}",
        text(&off)
    );
}

#[test]
fn check_explains_an_unwritable_repo_dir_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let repo = blocker.join("workspace");
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let out = writ(
        &["check"],
        &[("DATABASE_URL", &db), ("REPO_DIR", repo.to_str().unwrap())],
    );
    assert!(!out.status.success());
    let t = text(&out);
    assert!(
        t.contains("[FAIL] repo_dir") && t.contains("REPO_DIR"),
        "{t}"
    );
}

#[test]
fn check_names_the_missing_provider_key_and_never_prints_a_present_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("ws");
    let base = [
        ("DATABASE_URL", db.as_str()),
        ("REPO_DIR", repo.to_str().unwrap()),
        ("CODE_LIST", "openai/gpt-x,anthropic/claude-y"),
    ];
    assert!(writ(&["migrate"], &base).status.success());

    let out = writ(&["check"], &base);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("OPENROUTER_API_KEY is not set"),
        "{}",
        text(&out)
    );

    let mut with_key = base.to_vec();
    with_key.push(("OPENROUTER_API_KEY", "sk-or-v1-verysecretvalue"));
    // The check asks the provider for its models: never a hosted one from a test. Nothing
    // listens on port 9 here, which the check reports as a warning.
    with_key.push(("OPENROUTER_BASE_URL", "http://127.0.0.1:9/api/v1"));
    let out = writ(&["check"], &with_key);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("verysecretvalue"));
}

#[test]
fn a_bad_setting_is_refused_naming_the_variable() {
    let out = writ(&["check"], &[("WRIT_ADDR", "not-an-address")]);
    assert!(!out.status.success());
    assert!(text(&out).contains("WRIT_ADDR"), "{}", text(&out));
}

#[test]
fn check_says_which_scope_no_key_holds_and_that_an_open_address_needs_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("workspace");
    let base = [
        ("DATABASE_URL", db.as_str()),
        ("REPO_DIR", repo.to_str().unwrap()),
        ("WRIT_LOCAL_MODEL", "off"),
    ];
    assert!(writ(&["migrate"], &base).status.success());

    let open = writ(
        &["check"],
        &[base[0], base[1], base[2], ("WRIT_ADDR", "0.0.0.0:8080")],
    );
    assert!(!open.status.success(), "{}", text(&open));
    assert!(
        text(&open).contains("[FAIL] keys")
            && text(&open).contains("writ serve will refuse to start"),
        "{}",
        text(&open)
    );

    let made = writ(
        &["keys", "create", "agent", "--scopes", "read,write"],
        &base,
    );
    assert!(made.status.success(), "{}", text(&made));
    let commands = ("WRIT_COMMANDS", r#"{"python": ["python3", "{args}"]}"#);
    let out = writ(&["check"], &[base[0], base[1], base[2], commands]);
    assert!(
        text(&out).contains("[warn] keys")
            && text(&out).contains(
                "no key holds the run scope, which options.validation and POST /run need"
            ),
        "{}",
        text(&out)
    );
}

/// `writ check` asks the provider which models it serves (`GET /models`): all of them is a pass,
/// none of them fails the check with the fix, some of them or no answer at all is a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whether_the_provider_serves_the_configured_models() {
    use writ_fake_upstream::{FakeUpstream, Script, Step};
    let fake = FakeUpstream::start().await.unwrap();
    for m in ["alpha/one", "beta/two"] {
        fake.script(m, Script::always(Step::code("python", "x = 1")));
    }
    let base = fake.base_url();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("workspace");
    let run = |list: &'static str, arbiter: &'static str, base: String| {
        let (db, repo) = (db.clone(), repo.clone());
        tokio::task::spawn_blocking(move || {
            writ(
                &["migrate"],
                &[
                    ("DATABASE_URL", db.as_str()),
                    ("REPO_DIR", repo.to_str().unwrap()),
                ],
            );
            writ(
                &["check"],
                &[
                    ("DATABASE_URL", db.as_str()),
                    ("REPO_DIR", repo.to_str().unwrap()),
                    ("OPENROUTER_BASE_URL", base.as_str()),
                    ("CODE_LIST", list),
                    ("CODE_MODEL", arbiter),
                ],
            )
        })
    };

    let served = run("alpha/one,beta/two", "alpha/one", base.clone())
        .await
        .unwrap();
    assert!(served.status.success(), "{}", text(&served));
    assert!(
        text(&served).contains("[ok  ] reachable")
            && text(&served).contains("serves alpha/one, beta/two"),
        "{}",
        text(&served)
    );

    let none = run("nope/x,nope/y", "nope/z", base.clone()).await.unwrap();
    assert!(
        !none.status.success(),
        "a list naming no served model fails:\n{}",
        text(&none)
    );
    assert!(
        text(&none).contains("serves none of the configured models (nope/x, nope/y, nope/z)")
            && text(&none).contains("set CODE_LIST"),
        "{}",
        text(&none)
    );

    let some = run("alpha/one,nope/x", "alpha/one", base.clone())
        .await
        .unwrap();
    assert!(some.status.success(), "{}", text(&some));
    assert!(
        text(&some).contains("does not list nope/x"),
        "{}",
        text(&some)
    );

    // Nothing listens there: a warning, the rest of the check as before.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = run("alpha/one", "alpha/one", gone).await.unwrap();
    assert!(unreachable.status.success(), "{}", text(&unreachable));
    assert!(
        text(&unreachable).contains("[warn] reachable")
            && text(&unreachable).contains("cannot be reached"),
        "{}",
        text(&unreachable)
    );
}

/// `writ check` names each provider a configured model goes to — its base URL, its models, the
/// variable holding its key (never the key) — and asks each whether it serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_lists_each_provider_with_its_models_and_key_variable_and_asks_each_for_them() {
    use writ_fake_upstream::{FakeUpstream, Script, Step};
    let openrouter = FakeUpstream::start().await.unwrap();
    openrouter.script("alpha/one", Script::always(Step::code("python", "x = 1")));
    let direct = FakeUpstream::start().await.unwrap();
    direct.script(
        "direct/coder",
        Script::always(Step::code("python", "x = 2")),
    );
    let entries = serde_json::json!([{
        "id": "direct/*", "base_url": direct.base_url(), "api_key_env": "DIRECT_KEY",
        "headers": {"X-Tenant": "writ-tests"}
    }])
    .to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("workspace");
    let (openrouter_base, direct_base) = (openrouter.base_url(), direct.base_url());
    let run = move |key: Option<&'static str>| {
        let (db, repo, entries, base) = (
            db.clone(),
            repo.clone(),
            entries.clone(),
            openrouter_base.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let mut env = vec![
                ("DATABASE_URL", db.as_str()),
                ("REPO_DIR", repo.to_str().unwrap()),
            ];
            writ(&["migrate"], &env);
            env.extend([
                ("OPENROUTER_BASE_URL", base.as_str()),
                ("CODE_LIST", "alpha/one,direct/coder"),
                ("CODE_MODEL", "alpha/one"),
                ("WRIT_MODEL_PROVIDERS", entries.as_str()),
            ]);
            env.extend(key.map(|k| ("DIRECT_KEY", k)));
            writ(&["check"], &env)
        })
    };

    let out = run(Some("sk-direct-verysecretvalue")).await.unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(!t.contains("verysecretvalue"), "{t}");
    let base = openrouter.base_url();
    for line in [
        format!("[ok  ] provider      {base} serves alpha/one (no key needed for this endpoint)"),
        format!(
            "[ok  ] provider      {direct_base} serves direct/coder (DIRECT_KEY set; headers X-Tenant); no cost reported and no price in [[models]]: counted by tokens only"
        ),
        format!("[ok  ] reachable     {base} serves alpha/one"),
        format!("[ok  ] reachable     {direct_base} serves direct/coder"),
    ] {
        assert!(t.contains(&line), "{line}\n{t}");
    }

    let out = run(None).await.unwrap();
    let t = text(&out);
    assert!(
        !out.status.success(),
        "a key the entry names is missing:\n{t}"
    );
    assert!(
        t.contains(&format!(
            "[FAIL] provider      {direct_base} serves direct/coder (DIRECT_KEY is not set"
        )),
        "{t}"
    );
}

/// With `WRIT_UNPRICED_MODELS=refuse`, `writ serve` does not start while a configured model's
/// provider reports no cost and `[[models]]` gives it no price, and says which.
#[test]
fn serve_refuses_to_start_naming_each_unpriced_model_when_told_to() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("workspace");
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("DATABASE_URL", &db)
        .env("REPO_DIR", &repo)
        .env("WRIT_ADDR", "127.0.0.1:0")
        .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1")
        .env("CODE_LIST", "vllm/coder,vllm/priced")
        .env(
            "WRIT_MODEL_PROVIDERS",
            r#"[{"id": "vllm/priced", "input_price": 0.2, "output_price": 0.6}]"#,
        )
        .env("WRIT_UNPRICED_MODELS", "refuse")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("writ serve started although a model has no price");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("WRIT_UNPRICED_MODELS")
            && t.contains("CODE_LIST vllm/coder (http://127.0.0.1:9/v1)")
            && !t.contains("vllm/priced ("),
        "{t}"
    );
}

/// `writ keys budget` sets what happens near a limit, shows it, and refuses a bad value naming
/// the flag, as it does the limits themselves.
#[test]
fn keys_budget_sets_and_shows_a_degrading_budget() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/writ.db", dir.path().display());
    let repo = dir.path().join("workspace");
    let base = [
        ("DATABASE_URL", db.as_str()),
        ("REPO_DIR", repo.to_str().unwrap()),
        ("WRIT_LOCAL_MODEL", "off"),
    ];
    assert!(writ(&["migrate"], &base).status.success());
    let made = writ(&["keys", "create", "agent"], &base);
    assert!(made.status.success(), "{}", text(&made));
    let id = text(&made)
        .lines()
        .find_map(|l| l.strip_prefix("id:").map(|v| v.trim().to_string()))
        .expect("the new key's id");
    let set = writ(
        &[
            "keys",
            "budget",
            &id,
            "--daily-tokens",
            "1000",
            "--on-limit",
            "degrade",
            "--degrade-at",
            "0.7",
        ],
        &base,
    );
    assert!(set.status.success(), "{}", text(&set));
    let shown = writ(&["keys", "budget", &id], &base);
    assert!(
        text(&shown).contains("tokens 0 of 1000") && text(&shown).contains("degrades from 70%"),
        "{}",
        text(&shown)
    );
    let bad = writ(
        &[
            "keys",
            "budget",
            &id,
            "--daily-tokens",
            "5",
            "--on-limit",
            "sometimes",
        ],
        &base,
    );
    assert!(!bad.status.success());
    assert!(text(&bad).contains("--on-limit"), "{}", text(&bad));
    let orphan = writ(
        &[
            "keys",
            "budget",
            &id,
            "--daily-tokens",
            "5",
            "--degrade-at",
            "0.5",
        ],
        &base,
    );
    assert!(!orphan.status.success());
    assert!(
        text(&orphan).contains("degrade_at needs on_limit"),
        "{}",
        text(&orphan)
    );
    // The refused settings changed nothing.
    let still = writ(&["keys", "budget", &id], &base);
    assert!(
        text(&still).contains("degrades from 70%"),
        "{}",
        text(&still)
    );
}
