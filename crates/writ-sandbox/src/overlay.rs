//! Copy-on-write scratch: an overlay of the staged files over a read-only REPO_DIR, whose cost
//! does not depend on the repository's size.
//!
//! A per-run directory on the host holds three empty-at-first directories: `stage` (the staged
//! candidate files, written before the first command), `upper` and `merged` (mount points). The
//! first command starts a holder process in a mount namespace of its own, which mounts a tmpfs
//! bounded in bytes and inodes on `upper`, and an overlay on `merged` with `stage` above
//! `REPO_DIR` as read-only lower layers and the tmpfs as the upper layer. Every command of the run
//! enters that namespace (`nsenter`) and bubblewrap binds `merged` at `/work/repo`, so what one
//! command writes the next sees, and all of it lands in the bounded tmpfs: nothing a run writes
//! reaches the host's disk, and REPO_DIR is never written (overlayfs never writes a lower layer).
//! The namespace, and with it the tmpfs, goes when the holder is killed (the scratch is dropped,
//! or writ exits: the holder also ends when its stdin closes).
//!
//! Who mounts: writ's own user, and the sandbox uid only enters afterwards, as bubblewrap does
//! for itself. When writ runs as root, the holder mounts as root in a plain mount namespace; each
//! command enters it and only then drops to the sandbox uid (`nsenter` → `setpriv` →
//! `bwrap`). Overlayfs reaches its layers with the mounter's credentials, so REPO_DIR's
//! ancestors need not be passable by the sandbox uid (a home directory at 0700, a `mktemp -d`):
//! what the sandbox uid may read is decided by each file's own mode, as the overlay shows it.
//! As any other user, the holder makes a user namespace of its own too (`unshare -Urm`; Linux
//! allows overlayfs there since 5.11), and commands run as that same user.
//!
//! Not for every REPO_DIR: the sandbox uid must be able to read REPO_DIR itself (its files are
//! seen with their own modes, not handed over as a copy's are), and overlayfs's option syntax
//! cannot carry `,` `:` `\` or white space in a path. Otherwise the sandbox falls back to a
//! bounded copy and says why ([`eligible`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::error::SandboxError;

/// Bounds of the upper layer: every byte and file a run writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchLimits {
    pub max_bytes: u64,
    /// Files and directories the run may create or change (tmpfs inodes).
    pub max_files: u64,
}

/// How long the holder may take to mount.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// The holder's script: `$1` REPO_DIR, `$2` stage, `$3` upper mount point, `$4` merged, `$5`
/// bytes, `$6` inodes, `$7` the `mount` program, `$8` the sandbox uid when the holder mounts as
/// root (the upper layer, and so the tree's root, is the sandbox uid's), else empty. It stays
/// until its stdin closes.
const HOLDER_SCRIPT: &str = r#"set -e
"$7" -t tmpfs -o "size=$5,nr_inodes=$6,mode=0755" writ-scratch "$3"
mkdir "$3/upper" "$3/work"
if [ -n "$8" ]; then chown "$8:$8" "$3/upper"; fi
"$7" -t overlay writ-overlay -o "lowerdir=$2:$1,upperdir=$3/upper,workdir=$3/work" "$4"
echo ready
read _ || true
"#;

/// Host programs the overlay needs, found at probe time.
#[derive(Debug, Clone)]
pub(crate) struct OverlayTools {
    pub(crate) unshare: PathBuf,
    pub(crate) nsenter: PathBuf,
    pub(crate) mount: PathBuf,
    pub(crate) sh: PathBuf,
}

/// The script of a bounded copy's holder: `$1` the mount point (the copy's directory), `$2`
/// bytes, `$3` inodes, `$4` the `mount` program, `$5` the sandbox uid or empty (as for
/// [`HOLDER_SCRIPT`]). Once the copy is made beneath the mount point, the holder is told the
/// final bounds (the copy's size plus what a run may write) and remounts with them.
const COPY_HOLDER_SCRIPT: &str = r#"set -e
"$4" -t tmpfs -o "size=$2,nr_inodes=$3,mode=0755" writ-scratch "$1"
if [ -n "$5" ]; then chown "$5:$5" "$1"; fi
echo ready
read bytes inodes
"$4" -o "remount,size=$bytes,nr_inodes=$inodes" "$1"
echo ready
read _ || true
"#;

/// The namespace holding one run's mounts.
#[derive(Debug)]
pub(crate) struct Holder {
    child: tokio::process::Child,
    // Kept open: the holder ends when it closes.
    stdin: tokio::process::ChildStdin,
    said: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    pub(crate) pid: u32,
}

impl Holder {
    /// Starts `script` (with `args` after `$0`) in a new mount namespace — as root when writ
    /// runs as root (`sandbox_uid` set), else in a user namespace of writ's own user — and
    /// waits for its `ready`.
    async fn start(
        tools: &OverlayTools,
        sandbox_uid: Option<u32>,
        script: &str,
        args: Vec<std::ffi::OsString>,
    ) -> Result<Holder, SandboxError> {
        let mut line: Vec<std::ffi::OsString> = Vec::new();
        if sandbox_uid.is_none() {
            line.push("--user".into());
            line.push("--map-root-user".into());
        }
        for a in ["--mount", "--propagation", "private", "--"] {
            line.push(a.into());
        }
        line.push(tools.sh.clone().into());
        line.push("-c".into());
        line.push(script.into());
        line.push("writ-scratch".into());
        line.extend(args);
        let mut child = tokio::process::Command::new(&tools.unshare)
            .args(line)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(SandboxError::Spawn)?;
        let (stdin, stdout, pid) = (child.stdin.take(), child.stdout.take(), child.id());
        let (Some(stdin), Some(stdout), Some(pid)) = (stdin, stdout, pid) else {
            let _ = child.start_kill();
            return Err(SandboxError::Overlay(
                "the scratch holder could not be started".into(),
            ));
        };
        let mut holder = Holder {
            child,
            stdin,
            said: BufReader::new(stdout).lines(),
            pid,
        };
        holder.ready().await?;
        Ok(holder)
    }

    /// Waits for the holder's next `ready`; on anything else, kills it and says why.
    async fn ready(&mut self) -> Result<(), SandboxError> {
        let said = tokio::time::timeout(MOUNT_TIMEOUT, self.said.next_line()).await;
        if let Ok(Ok(Some(line))) = said
            && line == "ready"
        {
            return Ok(());
        }
        let _ = self.child.start_kill();
        let mut why = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let mut buf = Vec::new();
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                (&mut err).take(4096).read_to_end(&mut buf),
            )
            .await;
            why = String::from_utf8_lossy(&buf).trim().to_string();
        }
        Err(SandboxError::Overlay(if why.is_empty() {
            "the scratch could not be mounted".into()
        } else {
            format!("the scratch could not be mounted: {why}")
        }))
    }

    /// A bounded copy's holder: a tmpfs of `limits` mounted on `dir` in its namespace.
    pub(crate) async fn bounded_copy(
        tools: &OverlayTools,
        sandbox_uid: Option<u32>,
        dir: &Path,
        limits: ScratchLimits,
    ) -> Result<Holder, SandboxError> {
        let args = vec![
            dir.as_os_str().to_owned(),
            limits.max_bytes.to_string().into(),
            limits.max_files.to_string().into(),
            tools.mount.clone().into_os_string(),
            sandbox_uid
                .map(|uid| uid.to_string())
                .unwrap_or_default()
                .into(),
        ];
        Holder::start(tools, sandbox_uid, COPY_HOLDER_SCRIPT, args).await
    }

    /// Shrinks a bounded copy's tmpfs to `limits`, once the copy is in it.
    pub(crate) async fn bound(&mut self, limits: ScratchLimits) -> Result<(), SandboxError> {
        let line = format!("{} {}\n", limits.max_bytes, limits.max_files);
        use tokio::io::AsyncWriteExt;
        if let Err(e) = self.stdin.write_all(line.as_bytes()).await {
            let _ = self.child.start_kill();
            return Err(SandboxError::Overlay(format!(
                "the scratch holder stopped before its bounds were set: {e}"
            )));
        }
        self.ready().await
    }

    /// `path` (absolute) as seen inside the holder's mount namespace, through its /proc root.
    pub(crate) fn inside(&self, path: &Path) -> Option<PathBuf> {
        Some(
            Path::new("/proc")
                .join(self.pid.to_string())
                .join("root")
                .join(path.strip_prefix("/").ok()?),
        )
    }

    /// (bytes used, inodes used) of the filesystem at `path` inside the holder's namespace.
    pub(crate) fn usage(&self, path: &Path) -> Option<(u64, u64)> {
        let st = rustix::fs::statvfs(&self.inside(path)?).ok()?;
        let bytes = (st.f_blocks.saturating_sub(st.f_bfree)).saturating_mul(st.f_frsize);
        let files = st.f_files.saturating_sub(st.f_ffree);
        Some((bytes, files))
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Err(e) = self.child.start_kill() {
            tracing::debug!(error = %e, "the scratch holder was already gone");
        }
    }
}

/// The per-run directories of an overlay scratch.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) repo: PathBuf,
    pub(crate) stage: PathBuf,
    pub(crate) upper: PathBuf,
    pub(crate) merged: PathBuf,
    pub(crate) limits: ScratchLimits,
}

impl Layout {
    /// Starts the holder: a new mount namespace in which the tmpfs and the overlay are mounted,
    /// as root when writ runs as root (`sandbox_uid`: the uid commands drop to, which owns the
    /// upper layer), else in a user namespace of writ's own user.
    pub(crate) async fn mount(
        &self,
        tools: &OverlayTools,
        sandbox_uid: Option<u32>,
    ) -> Result<Holder, SandboxError> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        for p in [&self.repo, &self.stage, &self.upper, &self.merged] {
            args.push(p.clone().into());
        }
        args.push(self.limits.max_bytes.to_string().into());
        args.push(self.limits.max_files.to_string().into());
        args.push(tools.mount.clone().into());
        args.push(
            sandbox_uid
                .map(|uid| uid.to_string())
                .unwrap_or_default()
                .into(),
        );
        Holder::start(tools, sandbox_uid, HOLDER_SCRIPT, args).await
    }

    /// How full the upper layer is: (bytes used, inodes used), read from inside the holder's
    /// mount namespace.
    pub(crate) fn usage(&self, holder: &Holder) -> Option<(u64, u64)> {
        holder.usage(&self.upper)
    }

    /// `merged` as the holder sees it, for reading what a run wrote.
    pub(crate) fn merged_inside(&self, holder: &Holder) -> Option<PathBuf> {
        holder.inside(&self.merged)
    }
}

/// Whether REPO_DIR can be the overlay's lower layer for commands running as `uid` (`None`: as
/// writ's own user); otherwise why not, in words for `/readyz`. Its ancestors do not matter: the
/// overlay is mounted by writ's own user, who reaches REPO_DIR, and commands see it only through
/// the overlay.
pub(crate) fn eligible(repo: &Path, base: &Path, uid: Option<u32>) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for path in [repo, base] {
        let text = path.to_string_lossy();
        if text.contains([',', ':', '\\']) || text.chars().any(char::is_whitespace) {
            return Err(format!(
                "{} holds a character overlayfs options cannot carry (',', ':', '\\' or white space)",
                path.display()
            ));
        }
    }
    let Some(uid) = uid else {
        return Ok(());
    };
    if let Ok(meta) = std::fs::metadata(repo) {
        // REPO_DIR itself must be listable: its files are read with their own modes.
        let mode = meta.permissions().mode();
        if meta.uid() != uid && mode & 0o005 != 0o005 {
            return Err(format!(
                "the sandbox uid {uid} cannot read {} (chmod o+rx it to use the overlay)",
                repo.display()
            ));
        }
    }
    Ok(())
}
