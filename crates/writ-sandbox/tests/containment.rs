//! The sandbox against hostile programs, with real processes: each test runs a Python script
//! inside a real bubblewrap sandbox and checks from the host that nothing leaked out.
//!
//! When the sandbox cannot start on this machine these tests FAIL, unless
//! `WRIT_SANDBOX_TESTS=skip` is set explicitly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use writ_sandbox::{Limits, Mechanism, RunOutput, Sandbox, SandboxConfig, SandboxError, Scratch};

/// A probed sandbox whose scratch copies live in the test's own temp directory.
struct Harness {
    sandbox: Sandbox,
    repo: tempfile::TempDir,
    _base: tempfile::TempDir,
}

async fn harness_with(limits: Limits) -> Option<Harness> {
    harness_on(SandboxConfig {
        limits,
        ..SandboxConfig::default()
    })
    .await
}

/// A harness whose scratches are bounded copies, as on a machine without the overlay.
async fn copy_harness() -> Option<Harness> {
    harness_on(SandboxConfig {
        limits: test_limits(),
        overlay: false,
        ..SandboxConfig::default()
    })
    .await
}

async fn harness_on(config: SandboxConfig) -> Option<Harness> {
    let base = searchable_tempdir();
    let config = SandboxConfig {
        scratch_base: base.path().join("scratch"),
        max_concurrent: 2,
        ..config
    };
    let sandbox = match Sandbox::probe(config).await {
        Ok(sandbox) => sandbox,
        Err(e) if std::env::var("WRIT_SANDBOX_TESTS").as_deref() == Ok("skip") => {
            eprintln!("WRIT_SANDBOX_TESTS=skip: not testing the sandbox: {e}");
            return None;
        }
        Err(e) => panic!("{e} (set WRIT_SANDBOX_TESTS=skip to skip these tests)"),
    };
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("pkg/sub")).unwrap();
    std::fs::create_dir_all(repo.path().join(".git/objects")).unwrap();
    std::fs::write(repo.path().join("README.md"), "# repo\n").unwrap();
    std::fs::write(repo.path().join("pkg/__init__.py"), "").unwrap();
    std::fs::write(
        repo.path().join("pkg/sub/util.py"),
        "def double(x):\n    return 2 * x\n",
    )
    .unwrap();
    std::fs::write(repo.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::os::unix::fs::symlink("pkg/sub/util.py", repo.path().join("util_link.py")).unwrap();
    Some(Harness {
        sandbox,
        repo,
        _base: base,
    })
}

async fn harness() -> Option<Harness> {
    harness_with(test_limits()).await
}

/// A temp directory the unprivileged sandbox uid may pass through (as root, sandboxes run as
/// another uid, and tempdirs are 0700).
fn searchable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    dir
}

fn test_limits() -> Limits {
    Limits {
        wall: Duration::from_secs(30),
        cpu_secs: 20,
        // node reserves most of 1 GiB of address space at start-up.
        memory_bytes: 1 << 30,
        max_processes: 32,
        max_output_bytes: 64 * 1024,
        max_file_bytes: 8 << 20,
        tmp_bytes: 32 << 20,
    }
}

impl Harness {
    async fn scratch(&self) -> Scratch {
        self.sandbox.scratch(self.repo.path()).await.unwrap()
    }

    /// Stages `script` as `check.py` in a fresh scratch and runs it with python3.
    async fn python(&self, script: &str, timeout: Duration) -> (RunOutput, Scratch) {
        let scratch = self.scratch().await;
        scratch.put("check.py", script.as_bytes()).unwrap();
        let out = self
            .sandbox
            .run(&scratch, &argv(&["python3", "check.py"]), timeout)
            .await
            .unwrap();
        (out, scratch)
    }
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// Every path under `root` (symlinks not followed) with its type and content hash.
fn tree_hash(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
            let value = if meta.file_type().is_symlink() {
                format!(
                    "link {mode:o} {}",
                    std::fs::read_link(&path).unwrap().display()
                )
            } else if meta.is_dir() {
                pending.push(path);
                format!("dir {mode:o}")
            } else {
                format!(
                    "file {mode:o} {}",
                    hex::encode(Sha256::digest(std::fs::read(&path).unwrap()))
                )
            };
            out.insert(rel, value);
        }
    }
    out
}

#[tokio::test]
async fn a_python_script_runs_and_its_output_and_exit_code_come_back() {
    let Some(h) = harness().await else { return };
    let script = "import sys\nfrom pkg.sub.util import double\nimport util_link\nprint('double', double(21), util_link.double(1))\nprint('to stderr', file=sys.stderr)\nsys.exit(3)\n";
    let (out, _scratch) = h.python(script, Duration::from_secs(20)).await;
    assert_eq!(out.stdout, "double 42 2\n", "{out:?}");
    assert_eq!(out.stderr, "to stderr\n");
    assert_eq!(out.exit_code, Some(3));
    assert!(!out.timed_out && !out.truncated);
    eprintln!("trivial python run took {} ms", out.duration_ms);
}

#[tokio::test]
async fn repo_dir_is_byte_for_byte_unchanged_after_a_run_that_writes_and_deletes() {
    for h in [harness().await, copy_harness().await] {
        let Some(h) = h else { return };
        damage_and_check(&h).await;
    }
}

/// A run that tries to wreck its tree: what it may change, it changes in its scratch only.
async fn damage_and_check(h: &Harness) {
    let before = tree_hash(h.repo.path());
    let repo_abs = h.repo.path().display().to_string();
    // On the overlay, REPO_DIR's own files keep their owner (root here): those the sandbox uid
    // may not change stay as they are even in the scratch, so each step may be refused.
    let script = format!(
        r#"
import os, shutil
def attempt(f, *a):
    try:
        f(*a)
    except OSError:
        pass
attempt(os.remove, "README.md")
attempt(shutil.rmtree, ".git")
attempt(lambda: open("pkg/sub/util.py", "w").write("broken"))
attempt(os.symlink, "/etc/passwd", "evil")
attempt(os.chmod, "pkg", 0o000)
open("new.txt", "w").write("new")
try:
    shutil.rmtree({repo_abs:?})
    print("deleted host repo?!")
except OSError as e:
    print("host repo path:", type(e).__name__)
print(sorted(os.listdir(".")))
"#
    );
    let (out, scratch) = h.python(&script, Duration::from_secs(20)).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("host repo path: FileNotFoundError"),
        "{out:?}"
    );
    assert!(out.stdout.contains("'new.txt'"), "{out:?}");
    // The scratch saw the damage, REPO_DIR did not.
    assert_eq!(scratch.read("new.txt").unwrap(), b"new");
    assert!(scratch.read("README.md").is_err());
    assert_eq!(tree_hash(h.repo.path()), before);

    let passwd = std::fs::read("/etc/passwd").unwrap();
    match scratch.mechanism() {
        // A symlink planted by the command cannot redirect a later staged write out of the
        // scratch.
        Mechanism::Copy => {
            scratch.put("evil", b"staged").unwrap();
            assert_eq!(std::fs::read_link(scratch.path().join("evil")).ok(), None);
        }
        // Staging ends with the first run: the stage is a lower layer now.
        Mechanism::Overlay => {
            let err = scratch.put("evil", b"staged").unwrap_err();
            assert!(matches!(err, SandboxError::Staged { .. }), "{err}");
        }
    }
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);

    let scratch_path = scratch.path().to_path_buf();
    drop(scratch);
    assert!(!scratch_path.exists(), "the scratch is removed on drop");
}

#[tokio::test]
async fn the_network_is_unreachable_even_on_loopback() {
    let Some(h) = harness().await else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        r#"
import socket
for host, port in [("127.0.0.1", 5432), ("127.0.0.1", {port}), ("1.1.1.1", 53), ("10.0.0.1", 80)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, port, "CONNECTED")
    except OSError as e:
        print(host, port, "refused", type(e).__name__)
try:
    socket.getaddrinfo("example.com", 80)
    print("dns RESOLVED")
except OSError as e:
    print("dns failed")
"#
    );
    let (out, _scratch) = h.python(&script, Duration::from_secs(20)).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(
        !out.stdout.contains("CONNECTED") && !out.stdout.contains("RESOLVED"),
        "{}",
        out.stdout
    );
    assert_eq!(out.stdout.matches("refused").count(), 4, "{}", out.stdout);
    assert!(out.stdout.contains("dns failed"), "{}", out.stdout);
    // Nothing ever reached the host's listener.
    assert_eq!(
        listener.accept().map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock)
    );
}

#[tokio::test]
async fn writes_outside_the_scratch_fail_or_stay_invisible() {
    let Some(h) = harness().await else { return };
    let marker = format!("writ-sandbox-escape-{}", std::process::id());
    let repo_file = h.repo.path().join("README.md");
    let host_targets = [
        PathBuf::from(format!("/work/{marker}")),
        PathBuf::from(format!("/root/{marker}")),
        PathBuf::from(format!("/tmp/{marker}")),
        PathBuf::from(format!("/usr/{marker}")),
        PathBuf::from(format!("/{marker}")),
        h.repo.path().join(&marker),
    ];
    let mut paths: Vec<String> = host_targets
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    paths.push("/etc/passwd".into());
    paths.push(repo_file.display().to_string());
    let script = format!(
        r#"
import os
for path in {paths:?}:
    try:
        with open(path, "a") as f: f.write("owned\n")
        print("wrote", path)
    except OSError as e:
        print("denied", path, type(e).__name__)
"#
    );
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let readme = std::fs::read(&repo_file).unwrap();
    let (out, _scratch) = h.python(&script, Duration::from_secs(20)).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    // Only the fresh /tmp inside is writable; everything else is refused.
    for line in out.stdout.lines() {
        assert!(
            line.starts_with("denied") || line == format!("wrote /tmp/{marker}"),
            "{}",
            out.stdout
        );
    }
    for target in &host_targets {
        assert!(
            !target.exists(),
            "{} appeared on the host",
            target.display()
        );
    }
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
    assert_eq!(std::fs::read(&repo_file).unwrap(), readme);
}

#[tokio::test]
async fn writ_files_outside_repo_dir_are_not_visible() {
    let Some(h) = harness().await else { return };
    let secrets = tempfile::tempdir().unwrap();
    let db = secrets.path().join("writ.db");
    let config = secrets.path().join("writ.toml");
    std::fs::write(&db, "SQLite format 3 secret-audit-rows").unwrap();
    std::fs::write(&config, "openrouter_api_key = \"sk-secret\"").unwrap();
    let paths = [
        db.display().to_string(),
        config.display().to_string(),
        secrets.path().display().to_string(),
        "/work".into(),
        "/root".into(),
        "/home".into(),
        "/etc/passwd".into(),
        "/etc/shadow".into(),
        "/var/lib/postgresql".into(),
    ];
    let script = format!(
        r#"
import os
for path in {paths:?}:
    try:
        if os.path.isdir(path):
            print("listed", path, sorted(os.listdir(path)))
        else:
            print("read", path, open(path).read())
    except OSError as e:
        print("hidden", path, type(e).__name__)
"#
    );
    let (out, _scratch) = h.python(&script, Duration::from_secs(20)).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("secret"), "{}", out.stdout);
    // /work holds only the scratch mount point; nothing else is there at all.
    for line in out.stdout.lines() {
        assert!(
            line.starts_with("hidden") || line == "listed /work ['repo']",
            "{}",
            out.stdout
        );
    }
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_by_the_process_limit() {
    let Some(h) = harness().await else { return };
    let marker = format!("{}.{}", 900 + std::process::id() % 90, std::process::id());
    let script = format!(
        r#"
import os
forks = 0
try:
    while True:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "{marker}"])
        forks += 1
except OSError as e:
    print("forks", forks, "errno", e.errno)
"#
    );
    let started = Instant::now();
    let (out, _scratch) = h.python(&script, Duration::from_secs(20)).await;
    assert!(started.elapsed() < Duration::from_secs(15), "{out:?}");
    assert!(!out.timed_out, "{out:?}");
    let mut words = out.stdout.split_whitespace();
    assert_eq!(words.next(), Some("forks"), "{out:?}");
    let forks: u64 = words.next().unwrap().parse().unwrap();
    assert!(forks < test_limits().max_processes, "{forks} forks");
    assert!(forks > 10, "the limit should allow some processes: {forks}");
    assert!(
        out.stdout.trim_end().ends_with("errno 11"),
        "EAGAIN: {out:?}"
    );
    // When the command ends, the whole pid namespace goes: no sleeper is left on the host.
    let leftover = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        });
    assert!(!leftover, "a sleeper of the fork bomb survived the run");

    // The shell classic, left to spin until the wall-time limit.
    let scratch = h.scratch().await;
    let started = Instant::now();
    let out = h
        .sandbox
        .run(
            &scratch,
            &argv(&["sh", "-c", "b() { b | b & }; b; sleep 100"]),
            Duration::from_secs(3),
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "{out:?}");
    let sane = h
        .python("print('still fine')", Duration::from_secs(10))
        .await
        .0;
    assert_eq!(
        sane.stdout, "still fine\n",
        "the sandbox works after a fork bomb: {sane:?}"
    );
}

#[tokio::test]
async fn an_infinite_loop_times_out_and_is_killed() {
    let Some(h) = harness().await else { return };
    let marker = format!("loop-{}", std::process::id());
    let script = format!(
        "import os\nos.execv('/bin/sh', ['sh', '-c', 'while :; do :; done; echo {marker}'])\n"
    );
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let (out, _scratch) = h.python(&script, timeout).await;
    let elapsed = started.elapsed();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(3),
        "{elapsed:?}"
    );
    let leftover = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        });
    assert!(!leftover, "the looping process survived the timeout");
}

#[tokio::test]
async fn cpu_time_is_limited_even_before_the_wall_time() {
    let Some(h) = harness_with(Limits {
        cpu_secs: 1,
        ..test_limits()
    })
    .await
    else {
        return;
    };
    let started = Instant::now();
    let (out, _scratch) = h
        .python("while True:\n    pass\n", Duration::from_secs(20))
        .await;
    assert!(!out.timed_out, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{out:?}");
    // Killed by SIGXCPU (24) or SIGKILL (9) at the hard limit: 128 + signal.
    assert!(matches!(out.exit_code, Some(152) | Some(137)), "{out:?}");
}

#[tokio::test]
async fn a_memory_hog_gets_memory_error_not_the_host() {
    let Some(h) = harness().await else { return };
    let script = "try:\n    hog = bytearray(4 << 30)\n    print('allocated 4 GiB')\nexcept MemoryError:\n    print('MemoryError')\n";
    let (out, _scratch) = h.python(script, Duration::from_secs(20)).await;
    assert_eq!(out.stdout, "MemoryError\n", "{out:?}");
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn large_files_and_a_full_tmp_are_refused() {
    let Some(h) = harness().await else { return };
    let script = r#"
import errno
for path, size in [("big.bin", 16 << 20), ("/tmp/big.bin", 16 << 20)]:
    try:
        with open(path, "wb") as f:
            f.write(b"x" * size)
        print("wrote", path)
    except OSError as e:
        print("refused", path, errno.errorcode[e.errno])
try:
    for i in range(16):
        with open(f"/tmp/fill{i}", "wb") as f:
            f.write(b"x" * (4 << 20))
    print("filled /tmp")
except OSError as e:
    print("refused /tmp/fill", errno.errorcode[e.errno])
"#;
    let (out, scratch) = h.python(script, Duration::from_secs(20)).await;
    assert_eq!(
        out.stdout, "refused big.bin EFBIG\nrefused /tmp/big.bin EFBIG\nrefused /tmp/fill ENOSPC\n",
        "{out:?}"
    );
    assert!(scratch.read("big.bin").unwrap().len() <= 8 << 20);
}

#[tokio::test]
async fn huge_output_is_truncated_at_the_cap() {
    let Some(h) = harness().await else { return };
    let script = "import sys\nsys.stdout.write('o' * (10 << 20))\nsys.stderr.write('e' * 100)\n";
    let (out, _scratch) = h.python(script, Duration::from_secs(20)).await;
    assert!(out.truncated, "{}", out.stdout.len());
    assert_eq!(out.stdout.len(), test_limits().max_output_bytes);
    assert_eq!(out.stderr, "e".repeat(100));
    assert_eq!(
        out.exit_code,
        Some(0),
        "the command was drained, not blocked"
    );
}

#[tokio::test]
async fn the_environment_is_cleared_but_for_a_safe_list() {
    // The secret is given to a child test process, so this one needs no unsafe `set_var`.
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "environment_inner",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WRIT_TEST_SECRET_KEY", "sk-must-not-leak")
        .env("OPENROUTER_API_KEY", "sk-or-must-not-leak")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[tokio::test]
#[ignore = "run by the_environment_is_cleared_but_for_a_safe_list with a secret in its environment"]
async fn environment_inner() {
    assert_eq!(
        std::env::var("WRIT_TEST_SECRET_KEY").as_deref(),
        Ok("sk-must-not-leak")
    );
    let Some(h) = harness().await else { return };
    let script = "import os\nfor k in sorted(os.environ): print(k + '=' + os.environ[k])\n";
    let (out, _scratch) = h.python(script, Duration::from_secs(20)).await;
    assert!(!out.stdout.contains("must-not-leak"), "{}", out.stdout);
    let names: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split('=').next())
        .collect();
    let allowed: Vec<&str> = writ_sandbox::SAFE_ENV.iter().map(|(k, _)| *k).collect();
    for name in &names {
        // bubblewrap sets PWD for --chdir.
        assert!(
            allowed.contains(name) || *name == "PWD",
            "{name} leaked into the sandbox: {}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("PWD=/work/repo\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains("HOME=/tmp\n")
            && out.stdout.contains("PATH=/usr/local/bin:/usr/bin:/bin\n")
    );
}

#[tokio::test]
async fn node_runs_too() {
    let Some(h) = harness().await else { return };
    let scratch = h.scratch().await;
    scratch
        .put(
            "check.js",
            b"console.log(require('fs').readdirSync('.').sort().join(','))",
        )
        .unwrap();
    let out = h
        .sandbox
        .run(
            &scratch,
            &argv(&["node", "check.js"]),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, ".git,README.md,check.js,pkg,util_link.py\n");
}

#[tokio::test]
async fn copies_past_the_limits_are_refused_and_symlinks_out_are_left_out() {
    let Some(h) = copy_harness().await else {
        return;
    };
    std::os::unix::fs::symlink("/etc", h.repo.path().join("etc_link")).unwrap();
    std::os::unix::fs::symlink("../../outside", h.repo.path().join("pkg/out_link")).unwrap();
    let scratch = h.scratch().await;
    assert_eq!(scratch.skipped_symlinks(), 2);
    assert!(std::fs::symlink_metadata(scratch.path().join("etc_link")).is_err());
    assert_eq!(
        std::fs::read_link(scratch.path().join("util_link.py")).unwrap(),
        Path::new("pkg/sub/util.py")
    );
    // README.md, pkg, pkg/__init__.py, pkg/sub, pkg/sub/util.py, .git, .git/objects, .git/HEAD,
    // util_link.py.
    assert_eq!(scratch.files_copied(), 9);

    let base = searchable_tempdir();
    let tight = |max_copy_bytes, max_copy_files| SandboxConfig {
        scratch_base: base.path().to_path_buf(),
        max_copy_bytes,
        max_copy_files,
        overlay: false,
        ..SandboxConfig::default()
    };
    let small = Sandbox::probe(tight(1 << 20, 5)).await.unwrap();
    let err = small.scratch(h.repo.path()).await.unwrap_err();
    assert!(matches!(err, SandboxError::RepoTooLarge { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "REPO_DIR is too large to copy: more than 5 files (max_copy_files, WRIT_RUN_COPY_MAX_FILES)"
    );
    let small = Sandbox::probe(tight(10, 100)).await.unwrap();
    let err = small.scratch(h.repo.path()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPO_DIR is too large to copy: more than 10 bytes (max_copy_bytes, WRIT_RUN_COPY_MAX_MB)"
    );
    // The refused copies left nothing behind.
    let left: Vec<_> = std::fs::read_dir(base.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.iter().all(|n| n.to_string_lossy().starts_with('.')),
        "{left:?}"
    );
}

#[tokio::test]
async fn staged_paths_cannot_leave_the_scratch() {
    let Some(h) = harness().await else { return };
    let scratch = h.scratch().await;
    for bad in ["/etc/passwd", "../x", "a/../../x", "", "a\nb"] {
        assert!(
            matches!(
                scratch.put(bad, b"x"),
                Err(SandboxError::InvalidPath { .. })
            ),
            "{bad:?}"
        );
    }
    scratch
        .put("tests/new/test_x.py", b"assert True\n")
        .unwrap();
    scratch.put("README.md", b"staged over the copy\n").unwrap();
    assert_eq!(
        scratch.read("tests/new/test_x.py").unwrap(),
        b"assert True\n"
    );
    // Staged files and directories belong to the sandbox user: the command can change them.
    let script = argv(&[
        "sh",
        "-c",
        "cat README.md && echo ran > tests/new/out && rm tests/new/test_x.py",
    ]);
    let out = h
        .sandbox
        .run(&scratch, &script, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "staged over the copy\n");
    assert_eq!(scratch.read("tests/new/out").unwrap(), b"ran\n");
}

#[tokio::test]
async fn without_bubblewrap_the_probe_fails_closed() {
    let exe = std::env::current_exe().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "probe_without_bwrap_inner",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

#[tokio::test]
#[ignore = "run by without_bubblewrap_the_probe_fails_closed with an empty PATH"]
async fn probe_without_bwrap_inner() {
    let err = Sandbox::probe(SandboxConfig::default()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the command sandbox is unavailable: bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    );
}

#[tokio::test]
async fn runs_beyond_max_concurrent_wait_their_turn() {
    let Some(h) = harness().await else { return };
    // max_concurrent is 2: three runs of ~1 s each need at least two rounds.
    let scratch = h.scratch().await;
    let sleep = argv(&["sleep", "1"]);
    let started = Instant::now();
    let (a, b, c) = tokio::join!(
        h.sandbox.run(&scratch, &sleep, Duration::from_secs(10)),
        h.sandbox.run(&scratch, &sleep, Duration::from_secs(10)),
        h.sandbox.run(&scratch, &sleep, Duration::from_secs(10)),
    );
    let elapsed = started.elapsed();
    for out in [a, b, c] {
        assert_eq!(out.unwrap().exit_code, Some(0));
    }
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn extra_read_only_paths_are_visible_but_not_writable() {
    let Some(h) = harness().await else { return };
    // Not under /tmp: the sandbox has its own /tmp.
    let venv = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        venv.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    std::fs::create_dir(venv.path().join("lib")).unwrap();
    std::fs::write(venv.path().join("lib/helper.py"), "VALUE = 7\n").unwrap();
    let config = SandboxConfig {
        scratch_base: h.sandbox.config().scratch_base.clone(),
        extra_ro_paths: vec![venv.path().to_path_buf()],
        ..SandboxConfig::default()
    };
    let sandbox = Sandbox::probe(config).await.unwrap();
    let scratch = sandbox.scratch(h.repo.path()).await.unwrap();
    let lib = venv.path().join("lib");
    let script = format!(
        "import sys\nsys.path.insert(0, {lib:?})\nimport helper\nprint(helper.VALUE)\ntry:\n    open({lib:?} + '/x', 'w')\nexcept OSError as e:\n    print(type(e).__name__)\n",
        lib = lib.display().to_string()
    );
    scratch.put("check.py", script.as_bytes()).unwrap();
    let out = sandbox
        .run(
            &scratch,
            &argv(&["python3", "check.py"]),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "7\nOSError\n", "{out:?}");
    assert!(!lib.join("x").exists());

    let refused = SandboxConfig {
        extra_ro_paths: vec![PathBuf::from("/tmp/x")],
        ..SandboxConfig::default()
    };
    let err = Sandbox::probe(refused).await.unwrap_err();
    assert!(
        err.reason.starts_with("extra_ro_paths: /tmp/x must be"),
        "{err}"
    );
}

/// bubblewrap's own `/dev` is a tmpfs as large as half the host's memory: a command must not be
/// able to park host memory there, in `/dev/shm` or beside it.
#[tokio::test]
async fn dev_and_dev_shm_cannot_hold_host_memory() {
    let Some(h) = harness().await else { return };
    // 1 MiB files (each under the file-size limit) until 1 GiB or the first refusal.
    let script = r#"
import errno
for where in ["/dev/shm", "/dev"]:
    written = 0
    try:
        for i in range(1024):
            with open(f"{where}/fill{i}", "wb") as f:
                f.write(b"x" * (1 << 20))
            written += 1
        print(where, "wrote", written, "MiB")
    except OSError as e:
        print(where, "stopped at", written, "MiB", errno.errorcode[e.errno])
"#;
    let (out, _scratch) = h.python(script, Duration::from_secs(30)).await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    let mib = |line: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.parse().ok())
            .unwrap()
    };
    assert!(lines[0].starts_with("/dev/shm stopped at"), "{out:?}");
    assert!(mib(lines[0]) <= writ_sandbox::SHM_BYTES >> 20, "{out:?}");
    assert!(lines[1].starts_with("/dev stopped at 0 MiB"), "{out:?}");
}

/// The overlay, and the copy fallback's own tmpfs, bound what a run writes: a run that tries to
/// write 1 GiB, or 100,000 files, into its tree is stopped at the scratch bound while it runs,
/// and its outcome names the bound and its variable.
#[tokio::test]
async fn writes_into_the_scratch_are_bounded_in_bytes_and_files() {
    for overlay in [true, false] {
        let Some(h) = harness_on(SandboxConfig {
            limits: test_limits(),
            overlay,
            max_scratch_bytes: 16 << 20,
            max_scratch_files: 500,
            ..SandboxConfig::default()
        })
        .await
        else {
            return;
        };
        let script = r#"
import errno
written = 0
try:
    for i in range(1024):
        with open(f"fill{i}", "wb") as f:
            f.write(b"x" * (1 << 20))
        written += 1
    print("wrote", written, "MiB")
except OSError as e:
    print("stopped at", written, "MiB", errno.errorcode[e.errno])
"#;
        let (out, scratch) = h.python(script, Duration::from_secs(30)).await;
        let limit = out.limit_reached.clone().unwrap_or_default();
        assert!(limit.starts_with("scratch_full:"), "{overlay}: {out:?}");
        assert!(limit.contains("WRIT_RUN_SCRATCH_MB"), "{overlay}: {out:?}");
        // The overlay's tmpfs, or the copy's own, refused the writes themselves: the run was
        // stopped at the bound, not measured past it afterwards.
        assert!(
            scratch.mechanism() == Mechanism::Overlay || scratch.is_bounded_copy(),
            "{overlay}: the copy is not in a tmpfs of its own"
        );
        assert!(out.stdout.starts_with("stopped at 1"), "{overlay}: {out:?}");
        drop(scratch);

        let script = "import os\nfor i in range(100000):\n    open(f'f{i}', 'w').close()\n";
        let (out, _scratch) = h.python(script, Duration::from_secs(30)).await;
        let limit = out.limit_reached.clone().unwrap_or_default();
        assert!(
            limit.contains("WRIT_RUN_SCRATCH_FILES"),
            "{overlay}: {out:?}"
        );
    }
}

/// The mechanism follows the machine and the repository: the overlay for a REPO_DIR the
/// sandbox uid can read, the copy (with the reason) for one it cannot, or when turned off.
#[tokio::test]
async fn the_overlay_is_used_where_it_can_be_and_the_copy_says_why_not() {
    let Some(h) = harness().await else { return };
    let (mechanism, why) = h.sandbox.mechanism(h.repo.path());
    assert_eq!((mechanism, why), (Mechanism::Overlay, None));
    assert_eq!(h.scratch().await.mechanism(), Mechanism::Overlay);
    if rustix_is_root() {
        let closed = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            closed.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let (mechanism, why) = h.sandbox.mechanism(closed.path());
        assert_eq!(mechanism, Mechanism::Copy);
        assert!(why.unwrap().contains("chmod o+rx"));
    }
    let Some(c) = copy_harness().await else {
        return;
    };
    let (mechanism, why) = c.sandbox.mechanism(c.repo.path());
    assert_eq!(mechanism, Mechanism::Copy);
    assert!(why.unwrap().contains("WRIT_RUN_OVERLAY"));
}

/// REPO_DIR where developers keep their code — under a parent the sandbox uid may not pass
/// through (a home directory at 0700, a `mktemp -d`): the overlay is still used, a run reads the
/// repository's files and writes beside them, and REPO_DIR is left as it was.
#[tokio::test]
async fn the_overlay_is_used_for_a_repo_dir_under_a_private_parent() {
    let Some(h) = harness().await else { return };
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        private.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let repo = private.path().join("code");
    std::fs::create_dir_all(repo.join("pkg")).unwrap();
    for dir in [&repo, &repo.join("pkg")] {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        repo.join("pkg/util.py"),
        "def triple(x):\n    return 3 * x\n",
    )
    .unwrap();
    let before = tree_hash(&repo);

    let (mechanism, why) = h.sandbox.mechanism(&repo);
    assert_eq!((mechanism, why), (Mechanism::Overlay, None));
    let scratch = h.sandbox.scratch(&repo).await.unwrap();
    assert_eq!(scratch.mechanism(), Mechanism::Overlay);
    scratch
        .put(
            "check.py",
            b"from pkg.util import triple\nopen('out.txt', 'w').write('done')\nprint(triple(14), open('out.txt').read())\n",
        )
        .unwrap();
    let out = h
        .sandbox
        .run(
            &scratch,
            &argv(&["python3", "check.py"]),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "42 done\n", "{out:?}");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    drop(scratch);
    assert_eq!(tree_hash(&repo), before, "REPO_DIR was changed");
}

fn rustix_is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// Callers that must not wait behind a long queue are refused once every slot is taken and
/// `max_queue` runs wait; a waiter that gives up leaves the queue.
#[tokio::test]
async fn a_full_run_queue_refuses_new_runs_at_once() {
    let Some(h) = harness_on(SandboxConfig {
        limits: test_limits(),
        max_queue: 1,
        ..SandboxConfig::default()
    })
    .await
    else {
        return;
    };
    let (a, b) = (
        h.sandbox.slot().await.unwrap(),
        h.sandbox.slot().await.unwrap(),
    );
    h.sandbox.admit().unwrap();
    let sandbox = h.sandbox.clone();
    let waiter = tokio::spawn(async move { sandbox.slot().await.map(drop) });
    while h.sandbox.waiting() == 0 {
        tokio::task::yield_now().await;
    }
    let err = h.sandbox.admit().unwrap_err();
    assert!(
        matches!(
            err,
            SandboxError::Busy {
                waiting: 1,
                slots: 2
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("WRIT_RUN_QUEUE"), "{err}");
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(h.sandbox.waiting(), 0);
    h.sandbox.admit().unwrap();
    drop((a, b));
}

/// A batch that checks many candidates at once holds at most `max_concurrent` scratches: a run's
/// scratch is made only once it holds its slot.
#[tokio::test]
async fn many_runs_at_once_hold_no_more_scratches_than_slots() {
    use writ_core::execution::{CommandCall, CommandRunner, RunLimits};
    for overlay in [true, false] {
        let Some(h) = harness_on(SandboxConfig {
            limits: test_limits(),
            overlay,
            ..SandboxConfig::default()
        })
        .await
        else {
            return;
        };
        let base = h.sandbox.config().scratch_base.clone();
        let runner = std::sync::Arc::new(writ_sandbox::SandboxRunner::new(
            Ok(h.sandbox.clone()),
            writ_sandbox::CommandSet::parse(r#"{"python": ["python3", "{args}"]}"#).unwrap(),
            h.repo.path().to_path_buf(),
            RunLimits {
                max_timeout: Duration::from_secs(30),
                max_repair_rounds: 0,
            },
        ));
        let staged = vec![(
            writ_core::RepoPath::parse("check.py").unwrap(),
            b"import time\ntime.sleep(0.3)\n".to_vec(),
        )];
        let call = CommandCall {
            name: "python".into(),
            args: vec!["check.py".into()],
        };
        let mut runs = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (runner, staged, call) = (runner.clone(), staged.clone(), call.clone());
            runs.spawn(async move { runner.run(&staged, &[call], Duration::from_secs(30)).await });
        }
        let mut most = 0;
        while !runs.is_empty() {
            let held = std::fs::read_dir(&base)
                .map(|d| d.filter_map(Result::ok).count())
                .unwrap_or(0);
            most = most.max(held);
            if let Ok(Some(done)) =
                tokio::time::timeout(Duration::from_millis(20), runs.join_next()).await
            {
                assert!(done.unwrap().unwrap()[0].passed());
            }
        }
        assert!(most >= 1, "{overlay}: no scratch was seen");
        assert!(
            most <= 2,
            "{overlay}: {most} scratches at once with 2 slots"
        );
    }
}
