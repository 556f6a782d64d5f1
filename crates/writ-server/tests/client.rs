//! `writ write` and `writ ops` run as a user would, against a real writ on loopback whose models
//! are the fake upstream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;
use std::time::Duration;

use writ_fake_upstream::{FakeUpstream, Latency, Script, Step};
use writ_server::{Application, Settings};

struct Server {
    url: String,
    repo: std::path::PathBuf,
    fake: FakeUpstream,
    _dirs: tempfile::TempDir,
}

async fn start() -> Server {
    let fake = FakeUpstream::start().await.unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let repo = dirs.path().join("repo");
    let vars = [
        ("WRIT_ADDR", "127.0.0.1:0".to_string()),
        ("REPO_DIR", repo.display().to_string()),
        (
            "DATABASE_URL",
            format!("sqlite://{}/writ.db", dirs.path().display()),
        ),
        ("OPENROUTER_BASE_URL", fake.base_url()),
        ("CODE_LIST", "m/one,m/two".to_string()),
        ("CODE_MODEL", "m/judge".to_string()),
        ("CODE_GEN_MODEL", "m/rescue".to_string()),
        ("WRIT_MODEL_MAX_ATTEMPTS", "1".to_string()),
        ("WRIT_FALLBACK_BACKOFF_MS", "10".to_string()),
    ];
    let settings = Settings::load(None, &|k| {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .unwrap();
    let app = Application::build(settings).await.unwrap();
    let url = format!("http://{}", app.local_addr());
    let repo = app.state().workspace.root().to_path_buf();
    tokio::spawn(app.run_until(std::future::pending()));
    Server {
        url,
        repo,
        fake,
        _dirs: dirs,
    }
}

async fn writ(server: &Server, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.args(args)
        .env("WRIT_URL", &server.url)
        .env_remove("WRIT_API_KEY")
        .env("RUST_LOG", "warn");
    tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .unwrap()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_write_follows_the_batch_and_prints_a_summary() {
    let server = start().await;
    for m in ["m/one", "m/two"] {
        server.fake.script(
            m,
            Script::always(Step::code("python", "x = 1"))
                .with_latency(Latency::fixed(Duration::from_millis(200))),
        );
    }
    let out = writ(
        &server,
        &[
            "write",
            "pkg/a.py=defines x",
            "pkg/b.py=defines x too",
            "--task",
            "demo",
        ],
    )
    .await;
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("pkg/a.py") && l.contains(" ok ")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("pkg/b.py") && l.contains("single_candidate")),
        "{text}"
    );
    assert!(text.contains("success: 2 of 2 files written"), "{text}");
    assert_eq!(
        std::fs::read_to_string(server.repo.join("pkg/a.py")).unwrap(),
        "x = 1\n"
    );
    let task_seen = server
        .fake
        .calls_for("m/one")
        .iter()
        .any(|c| c.body.to_string().contains("demo"));
    assert!(task_seen, "--task reaches the prompt");

    let ops = writ(&server, &["ops", "--filename", "pkg/a.py"]).await;
    let text = stdout(&ops);
    assert!(ops.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("pkg/a.py") && l.contains("succeeded") && l.contains("created")),
        "{text}"
    );

    // The same batch, counted per model: one candidate per file from the one model.
    let stats = writ(&server, &["stats", "--by-language"]).await;
    let text = stdout(&stats);
    assert!(stats.status.success(), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("m/one"))
        .unwrap_or_else(|| panic!("no row for m/one: {text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cols[1..5], ["python", "2", "2", "2"], "{row}");
    assert!(text.contains("2 operations from"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_write_exits_non_zero_when_a_file_failed() {
    let server = start().await;
    for m in ["m/one", "m/two", "m/rescue"] {
        server.fake.script(m, Script::always(Step::status(400)));
    }
    let out = writ(&server, &["write", "bad.py=never works"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("FAILED"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writ_write_explains_a_refusal_and_an_unreachable_server() {
    let server = start().await;
    let out = writ(&server, &["write", "../escape.py=nope"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("files[0].filename"), "{err}");

    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.args(["ops"]).env("WRIT_URL", "http://127.0.0.1:9");
    let out = cmd.output().await.unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach writ at http://127.0.0.1:9")
    );
}
