//! A write in two halves. [`prepare`] checks the target, creates its missing parents and writes
//! the content to a temp file in the target's directory; [`Prepared::sync`] makes that content
//! durable; [`Prepared::publish`] names the temp file, renames it over the target and says which
//! directories must be synced for the new entry to survive a crash.
//!
//! The temp file is anonymous (`O_TMPFILE`) wherever the filesystem allows it, so a crash before
//! the rename leaves nothing; it is given a name (a bare UUIDv4, which the start-up sweep
//! recognises) only for the instant between `linkat` and `renameat`. Where `O_TMPFILE` is not
//! supported the temp file is named from the start. A [`Prepared`] dropped unpublished removes
//! its named temp file; the directories it created are removed by the writer
//! ([`crate::writer`]), which knows whether another staged write still needs them.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::Arc;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use rustix::fs::{AtFlags, Mode, OFlags};
use writ_core::{RepoPath, WorkspaceError};

use crate::errors::from_io;
use crate::ops;

/// A file's new content, written and (after [`Prepared::sync`]) durable beside its target.
pub(crate) struct Prepared {
    path: RepoPath,
    root: Arc<Dir>,
    /// The target's directory, as resolved when the write was prepared.
    dir: Dir,
    /// `dir` relative to the root (`""`: the root).
    dir_path: String,
    file: std::fs::File,
    /// `None` while the temp file is anonymous.
    temp_name: Option<String>,
    /// Directories this write created, outermost first.
    created: Vec<String>,
}

/// The directories one group of writes has been prepared in (the writer keeps one per group), so
/// that the files of a batch that share a directory reach it through the handle the first of
/// them resolved, instead of each walking, checking and creating the same path from the root
/// again (some twenty system calls a file). Dropped with the group.
#[derive(Default)]
pub(crate) struct Parents(Vec<(String, Dir)>);

impl Parents {
    fn get(&self, dir_path: &str) -> Option<Dir> {
        let (_, dir) = self.0.iter().find(|(path, _)| path == dir_path)?;
        dir.try_clone().ok()
    }

    fn keep(&mut self, dir_path: &str, dir: &Dir) {
        if let Ok(dir) = dir.try_clone() {
            self.0.push((dir_path.to_owned(), dir));
        }
    }
}

/// Checks `path` as a write target, creates its missing parents (`create_dirs`) and writes
/// `content` to a temp file in its directory, with the mode the file will have. A directory
/// already in `parents` was checked (and created) for an earlier write of the group: the file
/// is judged there by [`ops::target_mode`] alone, which refuses anything but a regular file.
pub(crate) fn prepare(
    root: &Arc<Dir>,
    path: &RepoPath,
    content: &[u8],
    create_dirs: bool,
    parents: &mut Parents,
) -> Result<Prepared, WorkspaceError> {
    let parent = path.parent();
    let dir_path = parent.as_str().to_owned();
    let (dir, created, resolved_here) = match parents.get(&dir_path) {
        Some(dir) => (dir, Vec::new(), false),
        None => {
            ops::check_target(root, path, create_dirs)?;
            let created = if create_dirs {
                ops::create_parents(root, path)?
            } else {
                Vec::new()
            };
            // From here on, a failure takes the directories it created with it (`Prepared`'s
            // drop, or `remove_created` before there is one).
            let dir = match if parent.is_root() {
                root.try_clone()
            } else {
                root.open_dir(parent.as_str())
            } {
                Ok(dir) => dir,
                Err(e) => {
                    remove_created(root, &created);
                    return Err(from_io(&parent.to_string(), e));
                }
            };
            (dir, created, true)
        }
    };
    let mode = match ops::target_mode(root, &dir, path) {
        Ok(mode) => mode,
        Err(e) => {
            remove_created(root, &created);
            return Err(e);
        }
    };
    let (file, temp_name) = match new_temp_file(&dir) {
        Ok(made) => made,
        Err(e) => {
            remove_created(root, &created);
            return Err(from_io(path.as_str(), e));
        }
    };
    let mut prepared = Prepared {
        path: path.clone(),
        root: Arc::clone(root),
        dir,
        dir_path,
        file,
        temp_name,
        created,
    };
    // Set explicitly rather than at creation, where the process umask would apply.
    let written = rustix::fs::fchmod(&prepared.file, Mode::from_raw_mode(mode))
        .map_err(io::Error::from)
        .and_then(|()| prepared.file.write_all(content));
    if let Err(e) = written {
        let created = std::mem::take(&mut prepared.created);
        drop(prepared);
        remove_created(root, &created);
        return Err(from_io(path.as_str(), e));
    }
    // Kept only now: a write that failed has taken back the directories it created, and its
    // siblings must not be staged into one that is gone. (One that succeeded is live, so the
    // writer removes none of its directories while the group is prepared.)
    if resolved_here {
        parents.keep(&prepared.dir_path, &prepared.dir);
    }
    Ok(prepared)
}

impl Prepared {
    pub(crate) fn path(&self) -> &RepoPath {
        &self.path
    }

    /// Starts writing the temp file's content to disk without waiting. Done for every file of a
    /// group before the first [`Prepared::sync`], it lets one journal commit carry them all: on
    /// ext4 a file's blocks are allocated when its writeback starts, and a file's `fsync` then
    /// finds its allocation already committed by an earlier one's. `POSIX_FADV_DONTNEED` is the
    /// safe call that starts writeback (Linux `generic_fadvise`); pages still being written are
    /// not dropped, so nothing is lost from the cache that matters. A failure is harmless: the
    /// sync that follows does the work.
    pub(crate) fn start_writeback(&self) {
        let _ = rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::DontNeed);
    }

    /// Makes the temp file's content and mode durable.
    pub(crate) fn sync(&self) -> Result<(), WorkspaceError> {
        self.file
            .sync_all()
            .map_err(|e| from_io(self.path.as_str(), e))
    }

    /// Renames the temp file over the target. The new entry is durable once the directories
    /// [`Prepared::dirs_to_sync`] names are synced.
    pub(crate) fn publish(&mut self) -> Result<(), WorkspaceError> {
        let shown = self.path.as_str();
        let temp = match self.temp_name.take() {
            Some(name) => name,
            None => link_anonymous(&self.dir, &self.file).map_err(|e| from_io(shown, e))?,
        };
        // `renameat` replaces a symlink at the target rather than following it.
        if let Err(e) = rustix::fs::renameat(&self.dir, &temp, &self.dir, self.path.file_name()) {
            let _ = rustix::fs::unlinkat(&self.dir, &temp, AtFlags::empty());
            return Err(from_io(shown, e.into()));
        }
        Ok(())
    }

    /// The target's directory, relative to the root.
    pub(crate) fn dir_path(&self) -> &str {
        &self.dir_path
    }

    /// The directories this write created, outermost first.
    pub(crate) fn created(&self) -> &[String] {
        &self.created
    }

    /// The target's directory, then the parent of each directory this write created.
    pub(crate) fn dirs_to_sync(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.dir_path.as_str()).chain(
            self.created
                .iter()
                .map(|d| d.rfind('/').map_or("", |i| &d[..i])),
        )
    }

    /// Syncs `dir_path` (a directory [`Prepared::dirs_to_sync`] named), through this write's own
    /// handle when it is the target's directory.
    pub(crate) fn sync_dir(&self, dir_path: &str) -> io::Result<()> {
        if dir_path == self.dir_path {
            // cap-std's directory handles are `O_PATH`, which cannot be synced: open it for that.
            self.dir.open(".")?.sync_all()
        } else {
            ops::sync_dir(&self.root, dir_path)
        }
    }
}

impl Drop for Prepared {
    /// A named temp file goes with its write, unless the rename already took it (`publish`
    /// clears the name first).
    fn drop(&mut self) {
        if let Some(name) = &self.temp_name {
            let _ = rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty());
        }
    }
}

/// Removes the directories a write created, innermost first; one that is no longer empty (a
/// concurrent write put a file in it) stays.
pub(crate) fn remove_created(root: &Dir, created: &[String]) {
    for dir in created.iter().rev() {
        let _ = root.remove_dir(dir);
    }
}

/// An anonymous temp file in `dir`, or a named one (with its name) where the filesystem has no
/// `O_TMPFILE`.
fn new_temp_file(dir: &Dir) -> io::Result<(std::fs::File, Option<String>)> {
    match rustix::fs::openat(
        dir,
        ".",
        OFlags::CLOEXEC | OFlags::TMPFILE | OFlags::WRONLY,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => return Ok((std::fs::File::from(fd), None)),
        // What Linux answers when the filesystem cannot make anonymous files.
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::NOENT) => {
        }
        Err(e) => return Err(e.into()),
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(0o600);
    loop {
        let name = temp_name();
        match dir.open_with(&name, &options) {
            Ok(file) => return Ok((file.into_std(), Some(name))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Gives the anonymous `file` a fresh name in `dir` (through `/proc/self/fd`, which needs no
/// privilege, unlike `AT_EMPTY_PATH`).
fn link_anonymous(dir: &Dir, file: &std::fs::File) -> io::Result<String> {
    let proc_fd = rustix_linux_procfs::proc_self_fd()?;
    let number = rustix::path::DecInt::from_fd(file.as_fd());
    loop {
        let name = temp_name();
        match rustix::fs::linkat(
            proc_fd,
            number.as_c_str(),
            dir,
            name.as_str(),
            AtFlags::SYMLINK_FOLLOW,
        ) {
            Ok(()) => return Ok(name),
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The shape the start-up sweep takes for debris (`ops::looks_like_temp_file_name`).
fn temp_name() -> String {
    uuid::Uuid::new_v4().to_string()
}
