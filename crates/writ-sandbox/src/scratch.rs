//! Scratch trees of REPO_DIR: the only tree a sandboxed command can write.
//!
//! Two mechanisms. Copy-on-write ([`crate::overlay`]): the staged files and REPO_DIR as read-only
//! layers of an overlay whose upper layer is a bounded tmpfs; nothing is copied, so a run costs
//! the same in any repository. The bounded copy, where the overlay cannot be used: made on the
//! host before any command runs, bounded in bytes and entries, copy-on-write where the
//! filesystem can (reflink), never following a symlink: symlinks whose target stays inside the
//! tree are recreated, the others are left out. When writ runs as root the copy is handed to the
//! unprivileged sandbox uid while nothing else can touch it yet.
//!
//! Files staged with [`Scratch::put`] are written through `cap-std` (resolved beneath the root of
//! the copy, or of the overlay's stage layer, so a symlink planted by a command cannot redirect
//! the write) and handed over by file descriptor. The directory is removed when the `Scratch` is
//! dropped (with the overlay's namespace and its tmpfs).

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::error::SandboxError;
use crate::overlay::{Holder, Layout, OverlayTools, ScratchLimits};

/// Bounds on the copy of REPO_DIR.
#[derive(Debug, Clone, Copy)]
pub struct CopyLimits {
    /// Sum of the regular files' sizes.
    pub max_bytes: u64,
    /// Files, directories and symlinks together.
    pub max_files: u64,
}

/// Which mechanism a scratch uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// An overlay over the read-only REPO_DIR; the run writes into a bounded tmpfs.
    Overlay,
    /// A bounded copy of REPO_DIR on the host.
    Copy,
}

/// A scratch tree of REPO_DIR, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
    /// Where staged files go: the copy, or the overlay's stage layer.
    root: Dir,
    owner: Option<u32>,
    bytes_copied: u64,
    files_copied: u64,
    skipped_symlinks: u64,
    overlay: Option<Overlay>,
    /// A copy made in a tmpfs of its own: the namespace holding it, and what the copy itself
    /// took of it (bytes, inodes), which the run's writes come on top of.
    bounded: Option<Bounded>,
}

#[derive(Debug)]
struct Bounded {
    holder: Holder,
    /// The copy's directory as seen from the host, through the holder's `/proc` root.
    inside: PathBuf,
    /// What the copy itself took of the tmpfs (bytes, inodes); the run's writes come on top.
    copied: (u64, u64),
}

#[derive(Debug)]
struct Overlay {
    layout: Layout,
    /// Started by the first run; staging ends then.
    holder: tokio::sync::OnceCell<Holder>,
}

impl Scratch {
    /// Copies `repo_dir` into a new directory under `base`. `owner` (uid = gid) takes ownership of
    /// everything copied; `None` leaves it to the current user.
    pub(crate) fn create(
        repo_dir: &Path,
        base: &Path,
        limits: CopyLimits,
        owner: Option<u32>,
    ) -> Result<Self, SandboxError> {
        let (source, dir) = copy_target(repo_dir, base, owner)?;
        let mut copy = Copy {
            limits,
            owner,
            bytes: 0,
            entries: 0,
            skipped_symlinks: 0,
        };
        copy.tree(&source, dir.path())?;
        if let Some(uid) = owner {
            std::os::unix::fs::lchown(dir.path(), Some(uid), Some(uid))
                .map_err(|e| SandboxError::io("scratch", dir.path(), e))?;
        }
        let root = Dir::open_ambient_dir(dir.path(), ambient_authority())
            .map_err(|e| SandboxError::io("scratch", dir.path(), e))?;
        Ok(Self {
            dir,
            root,
            owner,
            bytes_copied: copy.bytes,
            files_copied: copy.entries,
            skipped_symlinks: copy.skipped_symlinks,
            overlay: None,
            bounded: None,
        })
    }

    /// A copy of `repo_dir` made in a tmpfs of its own (mounted on the scratch's directory in a
    /// holder's mount namespace), bounded by `copy` for the copy and by `run` for what the run
    /// then writes: a command that fills it gets `ENOSPC` (or `EDQUOT`-like inode exhaustion)
    /// while it runs, so nothing a run writes reaches the host's disk. Made through the holder's
    /// `/proc` root; commands enter its namespace as for an overlay.
    pub(crate) async fn bounded_copy(
        repo_dir: &Path,
        base: &Path,
        copy: CopyLimits,
        run: ScratchLimits,
        owner: Option<u32>,
        tools: &OverlayTools,
    ) -> Result<Self, SandboxError> {
        let (source, dir) = copy_target(repo_dir, base, owner)?;
        let room = ScratchLimits {
            max_bytes: copy.max_bytes.saturating_add(run.max_bytes),
            max_files: copy.max_files.saturating_add(run.max_files),
        };
        let mut holder = Holder::bounded_copy(tools, owner, dir.path(), room).await?;
        let inside = holder.inside(dir.path()).ok_or_else(|| {
            SandboxError::Overlay("the scratch directory is not an absolute path".into())
        })?;
        let made = tokio::task::spawn_blocking({
            let inside = inside.clone();
            move || {
                let mut copy = Copy {
                    limits: copy,
                    owner,
                    bytes: 0,
                    entries: 0,
                    skipped_symlinks: 0,
                };
                copy.tree(&source, &inside)?;
                if let Some(uid) = owner {
                    std::os::unix::fs::lchown(&inside, Some(uid), Some(uid))
                        .map_err(|e| SandboxError::io("scratch", &inside, e))?;
                }
                let root = Dir::open_ambient_dir(&inside, ambient_authority())
                    .map_err(|e| SandboxError::io("scratch", &inside, e))?;
                Ok::<_, SandboxError>((copy, root))
            }
        })
        .await
        .map_err(|e| SandboxError::Task(e.to_string()))??;
        let (copy, root) = made;
        let used = holder.usage(dir.path()).unwrap_or((0, 0));
        holder
            .bound(ScratchLimits {
                max_bytes: used.0.saturating_add(run.max_bytes),
                max_files: used.1.saturating_add(run.max_files),
            })
            .await?;
        Ok(Self {
            dir,
            root,
            owner,
            bytes_copied: copy.bytes,
            files_copied: copy.entries,
            skipped_symlinks: copy.skipped_symlinks,
            overlay: None,
            bounded: Some(Bounded {
                holder,
                inside,
                copied: used,
            }),
        })
    }

    /// An overlay scratch of `repo_dir`: four empty directories, whatever REPO_DIR's size. The
    /// mounts are made by the first run ([`Scratch::start`]).
    pub(crate) fn overlay(
        repo_dir: &Path,
        base: &Path,
        limits: ScratchLimits,
        owner: Option<u32>,
    ) -> Result<Self, SandboxError> {
        let repo = std::fs::canonicalize(repo_dir)
            .map_err(|e| SandboxError::io("REPO_DIR", repo_dir, e))?;
        if !repo.is_dir() {
            return Err(SandboxError::NotADirectory(repo_dir.to_path_buf()));
        }
        own_base(base, owner)?;
        let dir = tempfile::Builder::new()
            .prefix("overlay-")
            .tempdir_in(base)
            .map_err(|e| SandboxError::io("scratch base", base, e))?;
        let (stage, upper, merged) = (
            dir.path().join("stage"),
            dir.path().join("upper"),
            dir.path().join("merged"),
        );
        for d in [&stage, &upper, &merged] {
            std::fs::create_dir(d).map_err(|e| SandboxError::io("scratch", d, e))?;
            set_mode(d, 0o755)?;
        }
        if let Some(uid) = owner {
            for d in [dir.path(), &stage, &upper, &merged] {
                std::os::unix::fs::lchown(d, Some(uid), Some(uid))
                    .map_err(|e| SandboxError::io("scratch", d, e))?;
            }
        }
        let root = Dir::open_ambient_dir(&stage, ambient_authority())
            .map_err(|e| SandboxError::io("scratch", &stage, e))?;
        Ok(Self {
            dir,
            root,
            owner,
            bytes_copied: 0,
            files_copied: 0,
            skipped_symlinks: 0,
            overlay: Some(Overlay {
                layout: Layout {
                    repo,
                    stage,
                    upper,
                    merged,
                    limits,
                },
                holder: tokio::sync::OnceCell::new(),
            }),
            bounded: None,
        })
    }

    /// The scratch's own directory on the host. Do not write there directly: use
    /// [`Scratch::put`]. For a copy, the tree the commands see (for a copy in a tmpfs of its
    /// own, through its holder's `/proc` root); for an overlay, its layers' directories (what
    /// the commands see exists only inside the run's namespace).
    pub fn path(&self) -> &Path {
        match &self.bounded {
            Some(b) => &b.inside,
            None => self.dir.path(),
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        if self.overlay.is_some() {
            Mechanism::Overlay
        } else {
            Mechanism::Copy
        }
    }

    /// Mounts an overlay scratch (once): the namespace every command of the run enters.
    pub(crate) async fn start(
        &self,
        tools: Option<&OverlayTools>,
        sandbox_uid: Option<u32>,
    ) -> Result<Option<&Holder>, SandboxError> {
        if let Some(b) = &self.bounded {
            return Ok(Some(&b.holder));
        }
        let Some(overlay) = &self.overlay else {
            return Ok(None);
        };
        let tools = tools.ok_or_else(|| {
            SandboxError::Overlay("the overlay's programs were not found at start-up".into())
        })?;
        overlay
            .holder
            .get_or_try_init(|| overlay.layout.mount(tools, sandbox_uid))
            .await
            .map(Some)
    }

    /// What bubblewrap binds at `/work/repo`: the copy, or the overlay's merged view.
    pub(crate) fn bind_path(&self) -> &Path {
        match &self.overlay {
            Some(o) => &o.layout.merged,
            None => self.dir.path(),
        }
    }

    /// The namespace holder of a mounted overlay.
    pub(crate) fn holder(&self) -> Option<&Holder> {
        self.overlay.as_ref().and_then(|o| o.holder.get())
    }

    /// Whether the copy lives in a bounded tmpfs of its own ([`Scratch::bounded_copy`]).
    pub fn is_bounded_copy(&self) -> bool {
        self.bounded.is_some()
    }

    /// Why the tree a run wrote is past `limits`, if it is. An overlay's tmpfs, or a bounded
    /// copy's, stops the writes themselves; this names the bound the command ran into. A copy
    /// on the host's disk is measured after the run.
    pub(crate) fn over_bounds(&self, limits: ScratchLimits) -> Option<String> {
        let in_tmpfs = match (&self.overlay, &self.bounded) {
            (Some(o), _) => o.layout.usage(o.holder.get()?),
            (None, Some(b)) => b.holder.usage(self.dir.path()).map(|(bytes, files)| {
                (
                    bytes.saturating_sub(b.copied.0),
                    files.saturating_sub(b.copied.1),
                )
            }),
            (None, None) => None,
        };
        let (bytes, files) = match (&self.overlay, &self.bounded) {
            (Some(_), _) | (None, Some(_)) => {
                let (bytes, files) = in_tmpfs?;
                // A full tmpfs keeps a few blocks and inodes of its own.
                let near = |used: u64, max: u64| used.saturating_add(max / 100 + 4096) >= max;
                if !near(bytes, limits.max_bytes) && !near(files, limits.max_files) {
                    return None;
                }
                (bytes, files)
            }
            (None, None) => {
                let (bytes, files) = tree_size(self.dir.path());
                let bytes = bytes.saturating_sub(self.bytes_copied);
                let files = files.saturating_sub(self.files_copied);
                if bytes <= limits.max_bytes && files <= limits.max_files {
                    return None;
                }
                (bytes, files)
            }
        };
        Some(format!(
            "scratch_full: the run's writes reached the scratch bound: {} MiB and {files} files written, at most {} MiB (WRIT_RUN_SCRATCH_MB) and {} files (WRIT_RUN_SCRATCH_FILES)",
            bytes >> 20,
            limits.max_bytes >> 20,
            limits.max_files
        ))
    }

    /// Writes `bytes` at `rel_path` inside the scratch (creating parent directories), replacing
    /// what is there. The path is resolved beneath the scratch root; absolute paths, `..` and
    /// symlinks leading out are refused.
    pub fn put(&self, rel_path: &str, bytes: &[u8]) -> Result<(), SandboxError> {
        let rel = checked_relative(rel_path)?;
        if self.holder().is_some() {
            // An overlay's stage is a lower layer now: overlayfs does not expect it to change.
            return Err(SandboxError::Staged {
                path: rel_path.to_owned(),
            });
        }
        let bad = |e: std::io::Error| SandboxError::Put {
            path: rel_path.to_owned(),
            source: e,
        };
        let (parent, name) = match (rel.parent(), rel.file_name()) {
            (Some(parent), Some(name)) => (parent, name),
            _ => {
                return Err(SandboxError::InvalidPath {
                    path: rel_path.to_owned(),
                    reason: "names no file",
                });
            }
        };
        let mut dir = self.root.try_clone().map_err(bad)?;
        for component in parent.components() {
            let Component::Normal(part) = component else {
                continue;
            };
            match dir.open_dir(part) {
                Ok(next) => dir = next,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    dir.create_dir(part).map_err(bad)?;
                    // Directories open as `O_PATH`, which cannot be chowned: hand over through a
                    // read-only descriptor of the same, new, directory.
                    self.hand_over(&dir.open(part).map_err(bad)?).map_err(bad)?;
                    dir = dir.open_dir(part).map_err(bad)?;
                }
                Err(e) => return Err(bad(e)),
            }
        }
        // Replace rather than open the old file: a symlink or hard link left there by a command
        // must not receive the write.
        match dir.remove_file(name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(bad(e)),
        }
        let mut options = cap_std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        let mut file = dir.open_with(name, &options).map_err(bad)?;
        file.write_all(bytes).map_err(bad)?;
        self.hand_over(&file).map_err(bad)?;
        Ok(())
    }

    /// Reads a file of the scratch (e.g. a report a command wrote), resolved beneath its root.
    pub fn read(&self, rel_path: &str) -> Result<Vec<u8>, SandboxError> {
        let rel = checked_relative(rel_path)?;
        let bad = |e: std::io::Error| SandboxError::Put {
            path: rel_path.to_owned(),
            source: e,
        };
        match self.overlay.as_ref().zip(self.holder()) {
            // What the run wrote is in the holder's namespace, seen through its /proc root.
            Some((o, holder)) => {
                let inside = o
                    .layout
                    .merged_inside(holder)
                    .ok_or_else(|| bad(std::io::Error::from(std::io::ErrorKind::NotFound)))?;
                Dir::open_ambient_dir(inside, ambient_authority())
                    .and_then(|d| d.read(rel))
                    .map_err(bad)
            }
            None => self.root.read(rel).map_err(bad),
        }
    }

    /// Bytes of regular files copied from REPO_DIR.
    pub fn bytes_copied(&self) -> u64 {
        self.bytes_copied
    }

    /// Files, directories and symlinks copied from REPO_DIR.
    pub fn files_copied(&self) -> u64 {
        self.files_copied
    }

    /// Symlinks of REPO_DIR left out because their target leaves the tree.
    pub fn skipped_symlinks(&self) -> u64 {
        self.skipped_symlinks
    }

    fn hand_over(&self, fd: &impl AsFd) -> std::io::Result<()> {
        match self.owner {
            Some(uid) => std::os::unix::fs::fchown(fd, Some(uid), Some(uid)),
            None => Ok(()),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The namespace first: its tmpfs and overlay go with it.
        if let Some(o) = &mut self.overlay {
            drop(o.holder.take());
        }
        if let Some(b) = self.bounded.take() {
            drop(b);
            // The copy lived in the namespace's tmpfs: the host holds an empty directory.
            if std::fs::remove_dir_all(self.dir.path()).is_ok() {
                return;
            }
        }
        if std::fs::remove_dir_all(self.dir.path()).is_ok() {
            return;
        }
        // A command may have taken the permissions off its own directories (only root removes
        // those regardless): give them back, staying beneath the root, and try again.
        let restored = restore_dir_permissions(&self.root);
        if let Err(e) = restored.and_then(|()| std::fs::remove_dir_all(self.dir.path())) {
            tracing::warn!(path = %self.dir.path().display(), error = %e, "a scratch directory could not be removed");
        }
    }
}

/// Makes every directory beneath `root` owner-rwx; cap-std keeps every step beneath `root`.
fn restore_dir_permissions(root: &Dir) -> std::io::Result<()> {
    use cap_std::fs::PermissionsExt;
    let mut pending = vec![root.try_clone()?];
    while let Some(dir) = pending.pop() {
        for entry in dir.entries()? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let name = entry.file_name();
            dir.set_permissions(&name, cap_std::fs::Permissions::from_mode(0o700))?;
            pending.push(dir.open_dir(&name)?);
        }
    }
    Ok(())
}

/// Bytes of regular files and entries beneath `root`, symlinks not followed.
fn tree_size(root: &Path) -> (u64, u64) {
    let (mut bytes, mut entries) = (0u64, 0u64);
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(list) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in list.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            entries += 1;
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                bytes = bytes.saturating_add(meta.len());
            }
        }
    }
    (bytes, entries)
}

fn checked_relative(rel_path: &str) -> Result<&Path, SandboxError> {
    let invalid = |reason| SandboxError::InvalidPath {
        path: rel_path.to_owned(),
        reason,
    };
    if rel_path.is_empty() || rel_path.chars().any(char::is_control) {
        return Err(invalid(
            "must be a non-empty path without control characters",
        ));
    }
    let path = Path::new(rel_path);
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(invalid("must be relative, without '..'"));
    }
    Ok(path)
}

/// Makes the scratch base if it is missing and checks it is writ's own: a directory (not a
/// symlink) owned by writ's user that no one else may write. Whoever owns the folder a scratch
/// lives in can swap the scratch for their own, reading the copy of REPO_DIR or the results of
/// its checks; in a shared `/tmp` anyone can make a folder first.
fn own_base(base: &Path, owner: Option<u32>) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(base).map_err(|e| SandboxError::io("scratch base", base, e))?;
    let meta =
        std::fs::symlink_metadata(base).map_err(|e| SandboxError::io("scratch base", base, e))?;
    let me = rustix::process::geteuid().as_raw();
    let refused = if !meta.is_dir() {
        Some("it is not a directory (a symlink?)".to_owned())
    } else if meta.uid() != me {
        Some(format!(
            "it belongs to uid {}, not to writ's uid {me}: another user made it (set TMPDIR to a folder of writ's own)",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some("others may write in it (chmod go-w it)".to_owned())
    } else {
        None
    };
    if let Some(why) = refused {
        return Err(SandboxError::io(
            "scratch base",
            base,
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
        ));
    }
    if owner.is_some() {
        set_mode(base, 0o711)?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| SandboxError::io("scratch", path, e))
}

struct Copy {
    limits: CopyLimits,
    owner: Option<u32>,
    bytes: u64,
    entries: u64,
    skipped_symlinks: u64,
}

impl Copy {
    fn tree(&mut self, source_root: &Path, dest_root: &Path) -> Result<(), SandboxError> {
        // (source dir, destination dir, depth below the root)
        let mut pending: Vec<(PathBuf, PathBuf, usize)> =
            vec![(source_root.to_path_buf(), dest_root.to_path_buf(), 0)];
        while let Some((src_dir, dest_dir, depth)) = pending.pop() {
            let entries = std::fs::read_dir(&src_dir)
                .map_err(|e| SandboxError::io("REPO_DIR", &src_dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| SandboxError::io("REPO_DIR", &src_dir, e))?;
                let src = entry.path();
                let dest = dest_dir.join(entry.file_name());
                // symlink_metadata: a symlink is looked at, never followed.
                let meta = std::fs::symlink_metadata(&src)
                    .map_err(|e| SandboxError::io("REPO_DIR", &src, e))?;
                let kind = meta.file_type();
                if kind.is_symlink() {
                    let target = std::fs::read_link(&src)
                        .map_err(|e| SandboxError::io("REPO_DIR", &src, e))?;
                    if !stays_inside(depth, &target) {
                        self.skipped_symlinks += 1;
                        continue;
                    }
                    self.count(0)?;
                    std::os::unix::fs::symlink(&target, &dest)
                        .map_err(|e| SandboxError::io("scratch", &dest, e))?;
                } else if kind.is_dir() {
                    self.count(0)?;
                    std::fs::create_dir(&dest)
                        .map_err(|e| SandboxError::io("scratch", &dest, e))?;
                    // Owner rwx whatever the source says, or the copy could not fill it.
                    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) | 0o700;
                    set_mode(&dest, mode)?;
                    pending.push((src, dest.clone(), depth + 1));
                } else if kind.is_file() {
                    self.count(meta.len())?;
                    reflink_copy::reflink_or_copy(&src, &dest)
                        .map_err(|e| SandboxError::io("scratch", &dest, e))?;
                } else {
                    // Sockets, FIFOs and devices are no source code.
                    continue;
                }
                if let Some(uid) = self.owner {
                    std::os::unix::fs::lchown(&dest, Some(uid), Some(uid))
                        .map_err(|e| SandboxError::io("scratch", &dest, e))?;
                }
            }
        }
        Ok(())
    }

    fn count(&mut self, bytes: u64) -> Result<(), SandboxError> {
        self.entries += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.entries > self.limits.max_files {
            return Err(SandboxError::RepoTooLarge {
                what: "files",
                limit: self.limits.max_files,
                field: "max_copy_files",
                variable: "WRIT_RUN_COPY_MAX_FILES",
            });
        }
        if self.bytes > self.limits.max_bytes {
            return Err(SandboxError::RepoTooLarge {
                what: "bytes",
                limit: self.limits.max_bytes,
                field: "max_copy_bytes",
                variable: "WRIT_RUN_COPY_MAX_MB",
            });
        }
        Ok(())
    }
}

/// Whether a symlink `depth` directories below the root, pointing at `target`, stays in the tree
/// (judged on the text of the target; the sandbox shows nothing of the host beyond it anyway).
fn stays_inside(depth: usize, target: &Path) -> bool {
    let mut depth = depth;
    for component in target.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// `repo_dir` resolved (it must be a directory) and a fresh scratch directory under `base` for
/// its copy; with `owner`, `base` is made passable so the sandbox uid reaches its own scratch.
fn copy_target(
    repo_dir: &Path,
    base: &Path,
    owner: Option<u32>,
) -> Result<(std::path::PathBuf, tempfile::TempDir), SandboxError> {
    let source =
        std::fs::canonicalize(repo_dir).map_err(|e| SandboxError::io("REPO_DIR", repo_dir, e))?;
    if !source.is_dir() {
        return Err(SandboxError::NotADirectory(repo_dir.to_path_buf()));
    }
    own_base(base, owner)?;
    let dir = tempfile::Builder::new()
        .prefix("scratch-")
        .tempdir_in(base)
        .map_err(|e| SandboxError::io("scratch base", base, e))?;
    Ok((source, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_base_someone_else_could_write_in_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("made");
        own_base(&fresh, None).unwrap();
        assert!(fresh.is_dir(), "a missing base is made");

        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = own_base(&open, None).unwrap_err().to_string();
        assert!(err.contains("others may write"), "{err}");

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let err = own_base(&link, None).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");

        if rustix::process::geteuid().is_root() {
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let err = own_base(&theirs, None).unwrap_err().to_string();
            assert!(err.contains("belongs to uid 65534"), "{err}");
        }
    }

    #[test]
    fn symlink_targets_are_judged_from_the_link_depth() {
        assert!(stays_inside(0, Path::new("a/b")));
        assert!(stays_inside(1, Path::new("../a")));
        assert!(!stays_inside(0, Path::new("../a")));
        assert!(!stays_inside(1, Path::new("../../a")));
        assert!(!stays_inside(3, Path::new("/etc/passwd")));
    }
}
