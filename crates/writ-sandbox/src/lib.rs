//! The command sandbox: runs the caller's tests (tests) on model-written files without trusting
//! them.
//!
//! Everything a command sees is a scratch copy of REPO_DIR ([`Scratch`]), bound read-write at
//! `/work/repo` inside a bubblewrap sandbox: new user, network (only its own empty loopback: no
//! route to the host's services or anywhere else), pid, ipc, uts and cgroup namespaces; `/usr` read-only; a fresh tmpfs at `/tmp`; nothing else of
//! the host (no `/work`, `/root`, host `/tmp`, database, configuration, model cache or keys); all
//! capabilities dropped; no new privileges; a cleared environment ([`SAFE_ENV`]). When writ runs
//! as root the sandbox runs as an unprivileged uid ([`SandboxConfig::sandbox_uid`]), because the
//! kernel does not apply the process-count limit to root.
//!
//! Limits ([`Limits`]): wall time (the sandbox's process group is killed), CPU seconds, address
//! space, processes, file size (rlimits set by `prlimit` inside the sandbox), `/tmp` size (tmpfs
//! size), `/dev/shm` size ([`SHM_BYTES`]; the rest of `/dev` is read-only), and captured output
//! per stream (the rest is read and discarded).
//!
//! It fails closed: [`Sandbox::probe`] runs `true` inside a real sandbox and returns
//! [`SandboxUnavailable`] with plain words when it cannot; there is no way to run a command
//! without a probed [`Sandbox`]. Runs wait in a fair FIFO queue of `max_concurrent` slots; a
//! run's scratch is made only once it holds its slot ([`Sandbox::slot`]), so no more than
//! `max_concurrent` scratches exist at once, and callers that must not wait behind a long queue
//! ask [`Sandbox::admit`] first (`max_queue`).
//!
//! The scratch is copy-on-write where the machine allows it ([`Mechanism::Overlay`]: an overlay
//! over the read-only REPO_DIR in the run's own user namespace, its writes in a tmpfs bounded by
//! `max_scratch_bytes` and `max_scratch_files`), so a run costs the same in any repository; the
//! probe finds out, and the bounded copy is the fallback ([`Sandbox::mechanism`] says which and
//! why).
//!
//! Which programs a request may run is [`CommandSet`]'s business (`WRIT_COMMANDS`).
//!
//! The copy fallback lives in a tmpfs of its own too where one can be mounted (the copy's size
//! plus `max_scratch_bytes`, in a holder's mount namespace), so a command that fills it is
//! stopped by `ENOSPC` while it runs and its outcome says `scratch_full`. Not bounded here: a
//! copy on the host's disk, where no tmpfs can be mounted, while a command runs (each file is,
//! by `max_file_bytes`; the total is measured after the run, which then fails, naming the
//! bound). There is no seccomp filter (the namespaces, dropped capabilities and
//! `--new-session` are the boundary).
//!
//! ```no_run
//! # async fn example(repo_dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
//! use writ_sandbox::{CommandSet, Sandbox, SandboxConfig};
//! let sandbox = Sandbox::probe(SandboxConfig::default()).await?; // at start-up
//! let commands = CommandSet::parse(r#"{"pytest": ["python3", "-m", "pytest", "{args}"]}"#)?;
//! let scratch = sandbox.scratch(repo_dir).await?;
//! scratch.put("src/new.py", b"print('candidate')\n")?;
//! let argv = commands.expand("pytest", &["tests/test_new.py".to_owned()])?;
//! let out = sandbox.run(&scratch, &argv, std::time::Duration::from_secs(30)).await?;
//! println!("{:?} {}", out.exit_code, out.stdout);
//! # Ok(()) }
//! ```
//!
//! Modules: `commands` (named command templates), `evidence` (what a pass must show),
//! `scratch` (the copy), `run` (the bubblewrap
//! command line and the capture of one run), `runner` ([`SandboxRunner`], the synthesis core's
//! `CommandRunner` over all of this), `error`.

mod commands;
mod error;
mod evidence;
mod overlay;
mod run;
mod runner;
mod scratch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use commands::{COMMANDS_ENV, CommandError, CommandSet, MAX_ARG_BYTES, MAX_ARGS};
pub use error::{SandboxError, SandboxUnavailable};
pub use evidence::Evidence;
pub use overlay::ScratchLimits;
pub use run::{REPO_MOUNT, SAFE_ENV, SHM_BYTES, find_program};
pub use runner::{Admission, PER_KEY_ENV, SandboxRunner, describe};
pub use scratch::{CopyLimits, Mechanism, Scratch};

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time; past it the whole sandbox is killed and the output says `timed_out`.
    pub wall: Duration,
    /// CPU seconds (RLIMIT_CPU) of each process.
    pub cpu_secs: u64,
    /// Address space (RLIMIT_AS) of each process, in bytes.
    pub memory_bytes: u64,
    /// Processes (RLIMIT_NPROC) of the sandbox user, the sandbox's own init included.
    pub max_processes: u64,
    /// Bytes kept of stdout and, separately, of stderr.
    pub max_output_bytes: usize,
    /// Largest file a process may write (RLIMIT_FSIZE), in bytes.
    pub max_file_bytes: u64,
    /// Size of the fresh `/tmp`, in bytes.
    pub tmp_bytes: u64,
}

impl Limits {
    /// Values below these leave no room for even `true` to start.
    fn check(&self) -> Result<(), String> {
        let checks = [
            (
                "limits.wall",
                self.wall.as_millis() >= 100,
                "at least 100 ms",
            ),
            ("limits.cpu_secs", self.cpu_secs >= 1, "at least 1"),
            (
                "limits.memory_bytes",
                self.memory_bytes >= 64 << 20,
                "at least 64 MiB",
            ),
            (
                "limits.max_processes",
                self.max_processes >= 4,
                "at least 4",
            ),
            (
                "limits.max_output_bytes",
                self.max_output_bytes >= 1,
                "at least 1",
            ),
            (
                "limits.max_file_bytes",
                self.max_file_bytes >= 1,
                "at least 1",
            ),
            (
                "limits.tmp_bytes",
                self.tmp_bytes >= 1 << 20,
                "at least 1 MiB",
            ),
        ];
        match checks.iter().find(|(_, ok, _)| !ok) {
            Some((field, _, limit)) => Err(format!("{field} must be {limit}")),
            None => Ok(()),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wall: Duration::from_secs(60),
            cpu_secs: 60,
            memory_bytes: 1 << 30,
            max_processes: 64,
            max_output_bytes: 1 << 20,
            max_file_bytes: 64 << 20,
            tmp_bytes: 256 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Where scratch copies are made; default `$TMPDIR/writ-scratch-<uid>`.
    pub scratch_base: PathBuf,
    /// Runs at once; the others wait in FIFO order. Default: the number of cores.
    pub max_concurrent: usize,
    pub limits: Limits,
    /// Most bytes of regular files a scratch copy of REPO_DIR may hold.
    pub max_copy_bytes: u64,
    /// Most entries (files, directories, symlinks) a scratch copy may hold.
    pub max_copy_files: u64,
    /// The uid (and gid) commands run as when writ runs as root; ignored otherwise, where they
    /// run as writ's own user inside their user namespace.
    pub sandbox_uid: u32,
    /// More host paths shown read-only at the same place (absolute), e.g. a virtualenv with
    /// pytest outside `/usr`. Each must be passable by the sandbox uid; the probe checks.
    pub extra_ro_paths: Vec<PathBuf>,
    /// Use the copy-on-write overlay where the probe finds it works; `false`: always copy.
    pub overlay: bool,
    /// Most bytes a run may write into its scratch (the overlay's tmpfs).
    pub max_scratch_bytes: u64,
    /// Most files and directories a run may create or change in its scratch.
    pub max_scratch_files: u64,
    /// Most runs waiting for a slot before [`Sandbox::admit`] refuses more.
    pub max_queue: usize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            // One per user: a scratch base must be writ's own (see `scratch::own_base`), and
            // several users of one machine may each run writ.
            scratch_base: std::env::temp_dir().join(format!(
                "writ-scratch-{}",
                rustix::process::geteuid().as_raw()
            )),
            max_concurrent: std::thread::available_parallelism().map_or(1, usize::from),
            limits: Limits::default(),
            max_copy_bytes: 512 << 20,
            max_copy_files: 50_000,
            sandbox_uid: 65534,
            extra_ro_paths: Vec::new(),
            overlay: true,
            max_scratch_bytes: 256 << 20,
            max_scratch_files: 20_000,
            max_queue: 32,
        }
    }
}

/// bubblewrap opens the scratch directory as the sandbox uid: every existing ancestor of the
/// scratch base must let others through.
fn check_searchable(base: &Path, uid: u32) -> Result<(), SandboxUnavailable> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for dir in base.ancestors() {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let passable = meta.permissions().mode() & 0o001 != 0 || meta.uid() == uid;
        if !passable {
            return Err(SandboxUnavailable {
                reason: format!(
                    "scratch_base {}: {} cannot be passed through by the sandbox uid {uid} (chmod o+x it, or choose another scratch base)",
                    base.display(),
                    dir.display()
                ),
            });
        }
    }
    Ok(())
}

/// What a finished (or killed) command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    /// The command's exit status; a command killed by signal N reports 128 + N (bubblewrap's
    /// convention). `None` when the sandbox itself was killed (timeout).
    pub exit_code: Option<i32>,
    /// Lossy UTF-8, at most `max_output_bytes` bytes before decoding.
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    /// The wall-time limit was reached and the sandbox killed.
    pub timed_out: bool,
    /// stdout or stderr went past `max_output_bytes`; the rest was discarded.
    pub truncated: bool,
    /// The run's writes reached the scratch's bound (bytes or files): which, in words. Such a run
    /// does not pass whatever its exit code.
    pub limit_reached: Option<String>,
}

/// A sandbox proven to start on this machine. Cheap to clone; clones share the run queue.
#[derive(Debug, Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SandboxConfig,
    tools: run::Tools,
    permits: Arc<Semaphore>,
    /// Whether the overlay works here, or why not (decided by the probe).
    overlay: Result<(), String>,
    /// Whether the copy fallback can live in a bounded tmpfs of its own, or why not (decided by
    /// the probe).
    copy_in_tmpfs: Result<(), String>,
    /// Runs waiting for a slot.
    waiting: AtomicUsize,
}

/// One of the `max_concurrent` run slots, held while a run's scratch exists.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// Counts a waiter for as long as it waits (also when its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Sandbox {
    /// Checks that the sandbox can start here (tools present, namespaces usable, `true` runs
    /// inside) and returns it; otherwise says why in plain words.
    pub async fn probe(config: SandboxConfig) -> Result<Sandbox, SandboxUnavailable> {
        config
            .limits
            .check()
            .map_err(|reason| SandboxUnavailable { reason })?;
        if config.max_concurrent == 0 {
            return Err(SandboxUnavailable {
                reason: "max_concurrent must be at least 1".into(),
            });
        }
        for path in &config.extra_ro_paths {
            // These are replaced inside the sandbox, so a path there would silently show nothing.
            let hidden = path == Path::new("/")
                || ["/work", "/tmp", "/proc", "/dev"]
                    .iter()
                    .any(|p| path.starts_with(p));
            if !path.is_absolute()
                || hidden
                || path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                return Err(SandboxUnavailable {
                    reason: format!(
                        "extra_ro_paths: {} must be an absolute path without '..', neither / nor under /work, /tmp, /proc or /dev",
                        path.display()
                    ),
                });
            }
        }
        let tools =
            run::Tools::find()?.configure(config.sandbox_uid, config.extra_ro_paths.clone());
        if let Some(uid) = tools.run_as {
            check_searchable(&config.scratch_base, uid)?;
        }
        let overlay_tools = tools.overlay.as_ref().map(|_| ()).map_err(Clone::clone);
        let overlay_wanted = match (&tools.overlay, config.overlay) {
            (_, false) => Err("turned off (WRIT_RUN_OVERLAY=0)".to_string()),
            (Err(missing), true) => Err(missing.clone()),
            (Ok(_), true) => Ok(()),
        };
        let mut sandbox = Sandbox {
            inner: Arc::new(Inner {
                permits: Arc::new(Semaphore::new(config.max_concurrent)),
                config,
                tools,
                overlay: Err("not probed yet".into()),
                copy_in_tmpfs: overlay_tools,
                waiting: AtomicUsize::new(0),
            }),
        };
        if let Err(e) = sandbox.run_true(Mechanism::Copy).await {
            if sandbox.inner.copy_in_tmpfs.is_err() {
                return Err(e);
            }
            // The copy on the host's disk, measured after each command, where no tmpfs can be
            // mounted for it.
            tracing::info!(reason = %e.reason, "the copy fallback cannot live in a tmpfs of its own: its writes are measured after each command");
            if let Some(inner) = Arc::get_mut(&mut sandbox.inner) {
                inner.copy_in_tmpfs = Err(e.reason);
            }
            sandbox.run_true(Mechanism::Copy).await?;
        }
        let overlay = match overlay_wanted {
            Ok(()) => sandbox
                .run_true(Mechanism::Overlay)
                .await
                .map_err(|e| e.reason),
            Err(why) => Err(why),
        };
        if let Err(why) = &overlay {
            tracing::info!(reason = %why, "the copy-on-write scratch is not available: runs copy REPO_DIR");
        }
        if let Some(inner) = Arc::get_mut(&mut sandbox.inner) {
            inner.overlay = overlay;
        }
        Ok(sandbox)
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// The mechanism a scratch of `repo_dir` gets, and why not the overlay when not.
    pub fn mechanism(&self, repo_dir: &Path) -> (Mechanism, Option<String>) {
        let inner = &self.inner;
        let why_not = inner.overlay.clone().err().or_else(|| {
            let repo = std::fs::canonicalize(repo_dir).unwrap_or_else(|_| repo_dir.to_path_buf());
            overlay::eligible(&repo, &inner.config.scratch_base, inner.tools.run_as).err()
        });
        let copy = match &inner.copy_in_tmpfs {
            Ok(()) => "the copy lives in a tmpfs of its own, bounded by WRIT_RUN_SCRATCH_MB while a command runs".to_string(),
            Err(why) => format!("the copy's writes are measured after each command, since no tmpfs can be mounted for it: {why}"),
        };
        match why_not {
            None => (Mechanism::Overlay, None),
            Some(why) => (Mechanism::Copy, Some(format!("{why}; {copy}"))),
        }
    }

    /// Refuses a new run at once when every slot is taken and `max_queue` runs already wait.
    pub fn admit(&self) -> Result<(), SandboxError> {
        let waiting = self.inner.waiting.load(Ordering::Relaxed);
        if self.inner.permits.available_permits() == 0 && waiting >= self.inner.config.max_queue {
            return Err(SandboxError::Busy {
                waiting,
                slots: self.inner.config.max_concurrent,
            });
        }
        Ok(())
    }

    /// Runs waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Waits for a free run slot (fair FIFO order).
    pub async fn slot(&self) -> Result<Slot, SandboxError> {
        let inner = &self.inner;
        inner.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&inner.waiting);
        let permit = inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| SandboxError::Closed)?;
        Ok(Slot { _permit: permit })
    }

    /// Makes a scratch of `repo_dir`: the copy-on-write overlay where it works (four empty
    /// directories; mounted by the first run), else a copy bounded by `max_copy_bytes` /
    /// `max_copy_files`.
    pub async fn scratch(&self, repo_dir: &Path) -> Result<Scratch, SandboxError> {
        let (mechanism, _) = self.mechanism(repo_dir);
        self.scratch_with(repo_dir, mechanism).await
    }

    async fn scratch_with(
        &self,
        repo_dir: &Path,
        mechanism: Mechanism,
    ) -> Result<Scratch, SandboxError> {
        let cfg = &self.inner.config;
        let (repo, base) = (repo_dir.to_path_buf(), cfg.scratch_base.clone());
        let owner = self.inner.tools.run_as;
        if mechanism == Mechanism::Overlay {
            return Scratch::overlay(&repo, &base, self.scratch_limits(), owner);
        }
        let limits = CopyLimits {
            max_bytes: cfg.max_copy_bytes,
            max_files: cfg.max_copy_files,
        };
        if let (Ok(()), Ok(tools)) = (&self.inner.copy_in_tmpfs, &self.inner.tools.overlay) {
            return Scratch::bounded_copy(
                &repo,
                &base,
                limits,
                self.scratch_limits(),
                owner,
                tools,
            )
            .await;
        }
        tokio::task::spawn_blocking(move || Scratch::create(&repo, &base, limits, owner))
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?
    }

    fn scratch_limits(&self) -> ScratchLimits {
        ScratchLimits {
            max_bytes: self.inner.config.max_scratch_bytes,
            max_files: self.inner.config.max_scratch_files,
        }
    }

    /// Runs `argv` (a program on the sandbox's PATH or an absolute path, then its arguments) in
    /// `scratch`, with `/work/repo` as working directory, for at most `timeout` (capped by
    /// `limits.wall`). Waits for a free slot first. A non-zero exit is a normal [`RunOutput`].
    pub async fn run(
        &self,
        scratch: &Scratch,
        argv: &[String],
        timeout: Duration,
    ) -> Result<RunOutput, SandboxError> {
        let slot = self.slot().await?;
        self.run_in(&slot, scratch, argv, timeout).await
    }

    /// [`Sandbox::run`] in a slot already held (the one the scratch was made in).
    pub async fn run_in(
        &self,
        _slot: &Slot,
        scratch: &Scratch,
        argv: &[String],
        timeout: Duration,
    ) -> Result<RunOutput, SandboxError> {
        let inner = &self.inner;
        let limits = Limits {
            wall: timeout.min(inner.config.limits.wall),
            ..inner.config.limits
        };
        let tools = &inner.tools;
        let holder = scratch
            .start(
                tools.overlay.as_ref().ok(),
                tools.setpriv().map(|(_, uid)| uid),
            )
            .await?;
        let tree = match (holder, &tools.overlay) {
            (Some(holder), Ok(overlay)) => run::Tree::Enter {
                nsenter: &overlay.nsenter,
                pid: holder.pid,
                merged: scratch.bind_path(),
            },
            _ => run::Tree::Bind(scratch.bind_path()),
        };
        let mut out = run::run(tools, tree, argv, &limits).await?;
        out.limit_reached = scratch.over_bounds(self.scratch_limits());
        Ok(out)
    }

    async fn run_true(&self, mechanism: Mechanism) -> Result<(), SandboxUnavailable> {
        let unavailable = |reason: String| SandboxUnavailable { reason };
        let empty = tempfile::tempdir()
            .map_err(|e| unavailable(format!("cannot make a temporary directory: {e}")))?;
        // The overlay's lower layer is read as the sandbox uid.
        std::fs::set_permissions(
            empty.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(|e| unavailable(format!("cannot make a temporary directory: {e}")))?;
        let scratch = self
            .scratch_with(empty.path(), mechanism)
            .await
            .map_err(|e| unavailable(format!("cannot make a scratch directory: {e}")))?;
        let out = self
            .run(&scratch, &["true".to_owned()], Duration::from_secs(20))
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if out.exit_code == Some(0) {
            return Ok(());
        }
        let stderr = out.stderr.trim();
        let lower = stderr.to_lowercase();
        let reason = if lower.contains("namespace") || lower.contains("operation not permitted") {
            format!(
                "user namespaces are disabled or not permitted here (bubblewrap said: {stderr})"
            )
        } else if out.timed_out {
            "running `true` inside the sandbox did not finish within 20 s".to_owned()
        } else {
            format!(
                "running `true` inside the sandbox failed with exit code {:?}: {stderr}",
                out.exit_code
            )
        };
        Err(unavailable(reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_too_small_to_start_anything_are_named() {
        assert_eq!(Limits::default().check(), Ok(()));
        let tiny = Limits {
            max_processes: 1,
            ..Limits::default()
        };
        assert_eq!(
            tiny.check(),
            Err("limits.max_processes must be at least 4".to_owned())
        );
        let tiny = Limits {
            memory_bytes: 1 << 20,
            ..Limits::default()
        };
        assert_eq!(
            tiny.check(),
            Err("limits.memory_bytes must be at least 64 MiB".to_owned())
        );
    }
}
