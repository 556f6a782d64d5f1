//! One run: the bubblewrap command line, the limits, and the capture of its output.
//!
//! The process tree is `[nsenter →] [setpriv →] bwrap → (sandbox init) → prlimit → command`
//! (`nsenter` into an overlay run's mount namespace, each replacing itself with the next).
//! `setpriv` drops root to the sandbox uid before bubblewrap starts, so bubblewrap makes an unprivileged
//! user namespace and the kernel enforces RLIMIT_NPROC. `prlimit` sets the rlimits inside the
//! sandbox, where they are inherited by everything the command starts. On timeout the host side
//! (`setpriv`/`bwrap`, its own process group) is killed; bubblewrap's `--die-with-parent` then
//! kills the sandbox's init, and with it every process of the pid namespace.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::overlay::OverlayTools;
use crate::{Limits, RunOutput, SandboxError, SandboxUnavailable};

/// Where the scratch copy appears inside the sandbox; also the working directory.
pub const REPO_MOUNT: &str = "/work/repo";

/// The whole environment of a sandboxed command.
pub const SAFE_ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("HOME", "/tmp"),
    ("TMPDIR", "/tmp"),
    ("LANG", "C.UTF-8"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
];

/// Host directories shown read-only: the system, nothing of writ or its users.
const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];

/// Single files and directories of `/etc` that programs need to start (dynamic loader cache,
/// Debian's alternatives). Deliberately not `/etc` as a whole.
const ETC_PATHS: &[&str] = &["/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime"];

/// Size of the sandbox's `/dev/shm`: enough for the semaphores and small shared buffers of
/// Python's `multiprocessing` and the like, never a way to hold host memory.
pub const SHM_BYTES: u64 = 16 << 20;

/// How long the output readers may take after the sandbox is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Host programs found at probe time.
#[derive(Debug)]
pub(crate) struct Tools {
    bwrap: PathBuf,
    /// Present when writ runs as root: the sandbox must not.
    setpriv: Option<PathBuf>,
    /// The uid scratch copies are handed to and commands run as (root only).
    pub(crate) run_as: Option<u32>,
    extra_ro_paths: Vec<PathBuf>,
    /// The programs of the copy-on-write scratch, or which one is missing.
    pub(crate) overlay: Result<OverlayTools, String>,
}

impl Tools {
    pub(crate) fn find() -> Result<Self, SandboxUnavailable> {
        let missing = |reason: &str| SandboxUnavailable {
            reason: reason.to_owned(),
        };
        let bwrap = which("bwrap").ok_or_else(|| {
            missing("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        })?;
        // prlimit runs inside, from /usr; finding it on the host is the early, clearer check.
        which("prlimit")
            .ok_or_else(|| missing("prlimit is not installed: apt-get install util-linux"))?;
        if let Ok(raw) = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            && raw.trim() == "0"
        {
            return Err(missing(
                "user namespaces are disabled: /proc/sys/user/max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=10000)",
            ));
        }
        let root = rustix::process::geteuid().is_root();
        let setpriv =
            if root {
                Some(which("setpriv").ok_or_else(|| {
                    missing("setpriv is not installed: apt-get install util-linux")
                })?)
            } else {
                None
            };
        let overlay = ["unshare", "nsenter", "mount", "sh"]
            .map(|p| which(p).ok_or_else(|| format!("{p} is not installed (util-linux)")));
        let overlay = match overlay {
            [Ok(unshare), Ok(nsenter), Ok(mount), Ok(sh)] => Ok(OverlayTools {
                unshare,
                nsenter,
                mount,
                sh,
            }),
            [a, b, c, d] => Err([a, b, c, d]
                .into_iter()
                .find_map(Result::err)
                .unwrap_or_default()),
        };
        Ok(Self {
            bwrap,
            setpriv,
            run_as: None,
            extra_ro_paths: Vec::new(),
            overlay,
        })
    }

    /// `setpriv` and the uid it switches to, when writ runs as root.
    pub(crate) fn setpriv(&self) -> Option<(&Path, u32)> {
        self.setpriv.as_deref().zip(self.run_as)
    }

    pub(crate) fn configure(mut self, uid: u32, extra_ro_paths: Vec<PathBuf>) -> Self {
        if self.setpriv.is_some() {
            self.run_as = Some(uid);
        }
        self.extra_ro_paths = extra_ro_paths;
        self
    }
}

/// Where a command run in the sandbox finds `program`: a path it names, when the sandbox shows it
/// (under the system directories or `extra_ro_paths`), else the first match on the sandbox's
/// `PATH`; `None`: a run of it would fail to start.
pub fn find_program(program: &str, extra_ro_paths: &[PathBuf]) -> Option<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
        })
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        let shown = SYSTEM_DIRS
            .iter()
            .map(PathBuf::from)
            .chain(extra_ro_paths.iter().cloned())
            .any(|dir| path.starts_with(dir));
        return (shown && executable(&path)).then_some(path);
    }
    let sandbox_path = SAFE_ENV
        .iter()
        .find(|(k, _)| *k == "PATH")
        .map_or("/usr/bin:/bin", |(_, v)| v);
    std::env::split_paths(sandbox_path)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

fn which(program: &str) -> Option<PathBuf> {
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
}

/// Where a run's tree comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tree<'a> {
    /// A host directory (a copy), bound as it is.
    Bind(&'a Path),
    /// An overlay mounted in the namespace of the holder `pid`: the command enters it
    /// (`nsenter`) and binds `merged` from there.
    Enter {
        nsenter: &'a Path,
        pid: u32,
        merged: &'a Path,
    },
}

/// The uid a command has inside an overlay run's sandbox: the sandbox uid (or, where writ is not
/// root, the root of the holder's user namespace: writ's own), which bubblewrap shows as this
/// ordinary uid.
const OVERLAY_INNER_UID: &str = "65534";

/// The full host command line for one run.
pub(crate) fn command_line(
    tools: &Tools,
    tree: Tree<'_>,
    argv: &[String],
    limits: &Limits,
) -> Vec<OsString> {
    let mut line = Line::default();
    let drop_to = |line: &mut Line| {
        if let (Some(setpriv), Some(uid)) = (&tools.setpriv, tools.run_as) {
            let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={uid}"));
            line.path(setpriv);
            line.push(&[&reuid, &regid, "--clear-groups", "--no-new-privs", "--"]);
        }
    };
    let scratch = match tree {
        Tree::Bind(path) => {
            drop_to(&mut line);
            path
        }
        // The holder's namespace is entered first, with writ's own rights (as root, only root
        // may enter the mount namespace root made), and the sandbox uid taken only inside it.
        Tree::Enter {
            nsenter,
            pid,
            merged,
        } => {
            let target = pid.to_string();
            line.path(nsenter);
            if tools.run_as.is_some() {
                line.push(&["--target", &target, "--mount", "--"]);
            } else {
                line.push(&[
                    "--target",
                    &target,
                    "--user",
                    "--mount",
                    "--preserve-credentials",
                    "--",
                ]);
            }
            drop_to(&mut line);
            merged
        }
    };
    line.path(&tools.bwrap);
    if matches!(tree, Tree::Enter { .. }) {
        line.push(&["--uid", OVERLAY_INNER_UID, "--gid", OVERLAY_INNER_UID]);
    }
    line.push(&[
        "--unshare-user",
        "--disable-userns",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "writ-sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]);
    for (key, value) in SAFE_ENV {
        line.push(&["--setenv", key, value]);
    }
    for dir in SYSTEM_DIRS.iter().chain(ETC_PATHS) {
        let host = Path::new(dir);
        match std::fs::symlink_metadata(host) {
            // /bin → usr/bin on merged-/usr systems: the same link, not a second mount.
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(host) {
                    line.push(&["--symlink"]);
                    line.path(&target);
                    line.push(&[dir]);
                }
            }
            Ok(_) => line.push(&["--ro-bind", dir, dir]),
            Err(_) => {}
        }
    }
    for path in &tools.extra_ro_paths {
        line.push(&["--ro-bind"]);
        line.path(path);
        line.path(path);
    }
    let (tmp_size, shm_size) = (limits.tmp_bytes.to_string(), SHM_BYTES.to_string());
    // bubblewrap's /dev is a tmpfs of the kernel's default size (half the RAM) that the command
    // owns: it gets a small /dev/shm of its own and the rest of /dev read-only.
    line.push(&[
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        &shm_size,
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        &tmp_size,
        "--tmpfs",
        "/tmp",
    ]);
    line.push(&["--bind"]);
    line.path(scratch);
    line.push(&[REPO_MOUNT, "--chdir", REPO_MOUNT, "--remount-ro", "/", "--"]);
    let rlimits = [
        format!("--cpu={}", limits.cpu_secs),
        format!("--as={}", limits.memory_bytes),
        format!("--nproc={}", limits.max_processes),
        format!("--fsize={}", limits.max_file_bytes),
        "--core=0".to_owned(),
    ];
    line.push(&["prlimit"]);
    line.push(&rlimits.iter().map(String::as_str).collect::<Vec<_>>());
    line.push(&["--"]);
    line.push(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    line.0
}

#[derive(Default)]
struct Line(Vec<OsString>);

impl Line {
    fn push(&mut self, parts: &[&str]) {
        self.0.extend(parts.iter().map(OsString::from));
    }

    /// Paths go in as they are, not through a (lossy) `str`.
    fn path(&mut self, path: &Path) {
        self.0.push(path.as_os_str().to_owned());
    }
}

pub(crate) async fn run(
    tools: &Tools,
    tree: Tree<'_>,
    argv: &[String],
    limits: &Limits,
) -> Result<RunOutput, SandboxError> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(SandboxError::InvalidArgv("must name a program"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(SandboxError::InvalidArgv("must not contain NUL bytes"));
    }
    let line = command_line(tools, tree, argv, limits);
    let (program, rest) = line
        .split_first()
        .ok_or(SandboxError::InvalidArgv("must name a program"))?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        // The sandbox clears its environment itself; the host side needs nothing of writ's either.
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    tracing::debug!(program = %argv[0], args = argv.len() - 1, "sandbox run");

    let started = Instant::now();
    let mut child = command.spawn().map_err(SandboxError::Spawn)?;
    let cap = limits.max_output_bytes;
    let stdout = child.stdout.take().map(|s| tokio::spawn(capture(s, cap)));
    let stderr = child.stderr.take().map(|s| tokio::spawn(capture(s, cap)));

    let (status, timed_out) = match tokio::time::timeout(limits.wall, child.wait()).await {
        Ok(status) => (status.map_err(SandboxError::Wait)?, false),
        Err(_) => {
            kill_group(&child);
            (child.wait().await.map_err(SandboxError::Wait)?, true)
        }
    };
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (stdout, out_cut) = collect(stdout).await;
    let (stderr, err_cut) = collect(stderr).await;
    Ok(RunOutput {
        exit_code: if timed_out { None } else { status.code() },
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        duration_ms,
        timed_out,
        truncated: out_cut || err_cut,
        limit_reached: None,
    })
}

fn kill_group(child: &tokio::process::Child) {
    if let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // The group is the one `process_group(0)` made: setpriv/bwrap on the host side only.
        if let Err(e) = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL) {
            tracing::warn!(error = %e, "killing the sandbox's process group failed");
        }
    }
}

async fn collect(task: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>) -> (Vec<u8>, bool) {
    let Some(task) = task else {
        return (Vec::new(), false);
    };
    let abort = task.abort_handle();
    match tokio::time::timeout(DRAIN_GRACE, task).await {
        Ok(Ok(captured)) => captured,
        Ok(Err(_)) => (Vec::new(), false),
        Err(_) => {
            abort.abort();
            (Vec::new(), true)
        }
    }
}

/// Reads `reader` to its end, keeping the first `cap` bytes: a writer that never stops is not
/// blocked on a full pipe (it is stopped by the wall-time limit instead).
async fn capture(mut reader: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(kept.len());
        if n > room {
            truncated = true;
        }
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
    (kept, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_isolates_and_limits_as_configured() {
        let tools = Tools {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            setpriv: Some(PathBuf::from("/usr/bin/setpriv")),
            run_as: Some(65534),
            extra_ro_paths: vec![PathBuf::from("/opt/venv")],
            overlay: Err("not needed".into()),
        };
        let limits = Limits {
            cpu_secs: 7,
            memory_bytes: 1000,
            max_processes: 9,
            max_file_bytes: 55,
            ..Limits::default()
        };
        let line: Vec<String> = command_line(
            &tools,
            Tree::Bind(Path::new("/s/scratch-1")),
            &["python3".into(), "t.py".into()],
            &limits,
        )
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
        let text = line.join(" ");
        assert!(text.starts_with("/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs -- /usr/bin/bwrap "), "{text}");
        for part in [
            "--unshare-user --disable-userns --unshare-net --unshare-pid --unshare-ipc --unshare-uts",
            "--die-with-parent --new-session --cap-drop ALL --clearenv",
            "--ro-bind /usr /usr",
            "--ro-bind /opt/venv /opt/venv",
            "--dev /dev --size 16777216 --tmpfs /dev/shm --remount-ro /dev",
            "--bind /s/scratch-1 /work/repo --chdir /work/repo --remount-ro / --",
            "-- prlimit --cpu=7 --as=1000 --nproc=9 --fsize=55 --core=0 -- python3 t.py",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(text.ends_with("python3 t.py"));
        // Nothing of the host besides the system directories, the configured paths and the scratch.
        let binds: Vec<&str> = line
            .windows(2)
            .filter(|w| w[0].contains("bind"))
            .map(|w| w[1].as_str())
            .collect();
        for bind in binds {
            let allowed = [
                "/usr",
                "/bin",
                "/sbin",
                "/lib",
                "/lib32",
                "/lib64",
                "/opt/venv",
                "/s/scratch-1",
            ]
            .contains(&bind)
                || bind.starts_with("/etc/");
            assert!(allowed, "{bind} is bound into the sandbox");
        }
    }

    #[test]
    fn an_overlay_run_enters_its_holders_namespace_and_binds_the_merged_view() {
        let tools = Tools {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            setpriv: Some(PathBuf::from("/usr/bin/setpriv")),
            run_as: Some(65534),
            extra_ro_paths: Vec::new(),
            overlay: Err("not needed".into()),
        };
        let text = command_line(
            &tools,
            Tree::Enter {
                nsenter: Path::new("/usr/bin/nsenter"),
                pid: 4242,
                merged: Path::new("/s/overlay-1/merged"),
            },
            &["true".into()],
            &Limits::default(),
        )
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
        for part in [
            "/usr/bin/nsenter --target 4242 --mount -- /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs -- /usr/bin/bwrap --uid 65534 --gid 65534 --unshare-user",
            "--bind /s/overlay-1/merged /work/repo",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }
}
