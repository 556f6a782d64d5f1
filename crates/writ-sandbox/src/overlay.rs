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

/// The namespace holding one run's mounts.
#[derive(Debug)]
pub(crate) struct Holder {
    child: tokio::process::Child,
    // Kept open: the holder ends when it closes.
    _stdin: tokio::process::ChildStdin,
    pub(crate) pid: u32,
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
        let mut line: Vec<std::ffi::OsString> = vec![tools.unshare.clone().into()];
        if sandbox_uid.is_none() {
            line.push("--user".into());
            line.push("--map-root-user".into());
        }
        for a in ["--mount", "--propagation", "private", "--"] {
            line.push(a.into());
        }
        line.push(tools.sh.clone().into());
        line.push("-c".into());
        line.push(HOLDER_SCRIPT.into());
        line.push("writ-scratch".into());
        for p in [&self.repo, &self.stage, &self.upper, &self.merged] {
            line.push(p.clone().into());
        }
        line.push(self.limits.max_bytes.to_string().into());
        line.push(self.limits.max_files.to_string().into());
        line.push(tools.mount.clone().into());
        line.push(
            sandbox_uid
                .map(|uid| uid.to_string())
                .unwrap_or_default()
                .into(),
        );
        let (program, rest) = line
            .split_first()
            .ok_or(SandboxError::InvalidArgv("must name a program"))?;
        let mut child = tokio::process::Command::new(program)
            .args(rest)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(SandboxError::Spawn)?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let pid = child.id();
        let ready = async {
            let mut lines = BufReader::new(stdout?).lines();
            lines.next_line().await.ok().flatten()
        };
        let said = tokio::time::timeout(MOUNT_TIMEOUT, ready).await;
        match (said, stdin, pid) {
            (Ok(Some(line)), Some(stdin), Some(pid)) if line == "ready" => Ok(Holder {
                child,
                _stdin: stdin,
                pid,
            }),
            _ => {
                let _ = child.start_kill();
                let mut why = String::new();
                if let Some(mut err) = child.stderr.take() {
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
                    "the overlay could not be mounted".into()
                } else {
                    format!("the overlay could not be mounted: {why}")
                }))
            }
        }
    }

    /// How full the upper layer is: (bytes used, inodes used), read from inside the holder's
    /// mount namespace.
    pub(crate) fn usage(&self, holder: &Holder) -> Option<(u64, u64)> {
        let inside = Path::new("/proc")
            .join(holder.pid.to_string())
            .join("root")
            .join(self.upper.strip_prefix("/").ok()?);
        let st = rustix::fs::statvfs(&inside).ok()?;
        let bytes = (st.f_blocks.saturating_sub(st.f_bfree)).saturating_mul(st.f_frsize);
        let files = st.f_files.saturating_sub(st.f_ffree);
        Some((bytes, files))
    }

    /// `merged` as the holder sees it, for reading what a run wrote.
    pub(crate) fn merged_inside(&self, holder: &Holder) -> Option<PathBuf> {
        Some(
            Path::new("/proc")
                .join(holder.pid.to_string())
                .join("root")
                .join(self.merged.strip_prefix("/").ok()?),
        )
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
