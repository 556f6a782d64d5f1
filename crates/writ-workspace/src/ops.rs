//! The synchronous filesystem operations behind [`crate::RepoWorkspace`], each taking the
//! root `Dir` and resolving every path from it (never from a subdirectory handle, which would make
//! a symlink such as `a/link -> ../b` look like an escape although it stays inside the root).
//!
//! They block, so the async side runs them on tokio's blocking pool.

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::time::{Duration, SystemTime};

use cap_std::fs::{Dir, Metadata, OpenOptions, OpenOptionsExt, PermissionsExt};
use writ_core::workspace::DirEntry;
use writ_core::{RepoPath, WorkspaceError};

use crate::errors::{from_io, is_absent, is_escape};

/// Mode of a file that did not exist before; fixed rather than left to the process umask so that
/// what lands in the repository does not depend on how the service was started.
pub(crate) const NEW_FILE_MODE: u32 = 0o644;

/// Prefix of the probe file written by `/readyz` and `writ check`.
pub(crate) const PROBE_PREFIX: &str = ".writ-probe-";

pub(crate) fn read(root: &Dir, path: &RepoPath) -> Result<Option<Vec<u8>>, WorkspaceError> {
    Ok(read_head(root, path, usize::MAX)?.map(|(content, _)| content))
}

/// At most `max_bytes` of the file, and its full size.
pub(crate) fn read_head(
    root: &Dir,
    path: &RepoPath,
    max_bytes: usize,
) -> Result<Option<(Vec<u8>, u64)>, WorkspaceError> {
    let p = path.as_str();
    // Judge the type before opening: opening a FIFO for reading would block until a writer came.
    let meta = match root.metadata(p) {
        Ok(meta) => meta,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(from_io(p, e)),
    };
    refuse_non_file(path, &meta)?;

    // The path can be swapped for a FIFO or device between the stat and the open: O_NONBLOCK keeps
    // such an open from hanging (it changes nothing for a regular file), O_NOCTTY keeps a terminal
    // from becoming ours, and the type is judged again on what was actually opened.
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = match root.open_with(p, &options) {
        Ok(file) => file,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(from_io(p, e)),
    };
    let meta = file.metadata().map_err(|e| from_io(p, e))?;
    refuse_non_file(path, &meta)?;

    let size = meta.len();
    let wanted = usize::try_from(size).unwrap_or(usize::MAX).min(max_bytes);
    let mut content = Vec::with_capacity(wanted);
    file.take(u64::try_from(max_bytes).unwrap_or(u64::MAX))
        .read_to_end(&mut content)
        .map_err(|e| from_io(p, e))?;
    Ok(Some((content, size)))
}

pub(crate) fn list(root: &Dir, dir: &RepoPath) -> Result<Vec<DirEntry>, WorkspaceError> {
    let shown = dir.to_string();
    let opened;
    let listed = if dir.is_root() {
        root
    } else {
        opened = root
            .open_dir(dir.as_str())
            .map_err(|e| from_io(&shown, e))?;
        &opened
    };

    let mut entries = Vec::new();
    for entry in listed.entries().map_err(|e| from_io(&shown, e))? {
        let entry = entry.map_err(|e| from_io(&shown, e))?;
        // `DirEntry::metadata` does not follow symlinks: a link is reported as itself (its size
        // is the length of its target's name), so listing never reaches outside the root.
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            // Removed between readdir and stat: it is simply no longer there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(from_io(&shown, e)),
        };
        entries.push(DirEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            size: meta.len(),
            is_dir: meta.is_dir(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

pub(crate) fn check_target(
    root: &Dir,
    path: &RepoPath,
    create_dirs: bool,
) -> Result<(), WorkspaceError> {
    match check_parents(root, path, create_dirs)? {
        Parents::Exist => check_final(root, path),
        // Nothing exists below the first missing directory, so there is no target to judge.
        Parents::WillBeCreated => Ok(()),
    }
}

/// The mode a write of `path` gives the file: the current one's permission bits, or
/// [`NEW_FILE_MODE`]. Judged through `dir`, the directory about to be written into, since the
/// checks before ran on paths that may have changed since; anything but a regular file (or
/// nothing) at the target is refused.
pub(crate) fn target_mode(root: &Dir, dir: &Dir, path: &RepoPath) -> Result<u32, WorkspaceError> {
    match dir.symlink_metadata(path.file_name()) {
        Ok(meta) if meta.is_file() => Ok(existing_mode(&meta)),
        Ok(_) => Err(check_final(root, path)
            .err()
            .unwrap_or_else(|| special(path))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(NEW_FILE_MODE),
        Err(e) => Err(from_io(path.as_str(), e)),
    }
}

/// Removes a regular file beneath the root and syncs its directory; a missing file is fine.
pub(crate) fn remove(root: &Dir, path: &RepoPath) -> Result<(), WorkspaceError> {
    match check_parents(root, path, false) {
        Ok(_) => {}
        Err(WorkspaceError::ParentMissing { .. }) => return Ok(()),
        Err(e) => return Err(e),
    }
    match root.symlink_metadata(path.as_str()) {
        Ok(meta) => refuse_non_file(path, &meta)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(from_io(path.as_str(), e)),
    }
    root.remove_file(path.as_str())
        .map_err(|e| from_io(path.as_str(), e))?;
    sync_dir(root, path.parent().as_str()).map_err(|e| from_io(path.as_str(), e))
}

/// Removes temp files that a crash left behind, returning how many went.
///
/// A write's temp file (`crate::staged`) has a name only (a) between the `linkat` that names an
/// O_TMPFILE and the rename, or (b) for the whole write on a filesystem without O_TMPFILE.
/// Either way the name is a bare lowercase UUIDv4, and a crash in that window leaves it. Such a name carries no mark of ours,
/// so a user's file named exactly like a UUIDv4, with no extension, and untouched for `min_age`,
/// would be taken for one: callers should run this when they know the tree is theirs (start-up).
/// `min_age` keeps an in-flight write of the fallback kind from losing its temp file.
pub(crate) fn remove_stale_temp_files(root: &Dir, min_age: Duration) -> usize {
    let now = SystemTime::now();
    let mut removed = 0;
    let mut pending = vec![String::new()];
    while let Some(dir_path) = pending.pop() {
        let opened;
        let dir = if dir_path.is_empty() {
            root
        } else {
            match root.open_dir(&dir_path) {
                Ok(dir) => {
                    opened = dir;
                    &opened
                }
                Err(e) => {
                    tracing::warn!(dir = %dir_path, error = %e, "skipping a directory while looking for stale temp files");
                    continue;
                }
            }
        };
        let Ok(entries) = dir.entries() else { continue };
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            // `file_type` does not follow symlinks: linked directories are not walked twice or
            // outside the root, and a link is never mistaken for a temp file.
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_dir() {
                pending.push(join(&dir_path, &name));
            } else if file_type.is_file() && looks_like_temp_file_name(&name) {
                let old_enough = entry
                    .metadata()
                    .and_then(|meta| meta.modified())
                    .map(|modified| {
                        now.duration_since(modified.into_std()).unwrap_or_default() >= min_age
                    })
                    .unwrap_or(false);
                if old_enough && dir.remove_file(&name).is_ok() {
                    tracing::info!(file = %join(&dir_path, &name), "removed a stale temp file");
                    removed += 1;
                }
            }
        }
    }
    removed
}

/// The shape of `Uuid::new_v4().to_string()`: 8-4-4-4-12 lowercase hex, version 4, RFC variant.
fn looks_like_temp_file_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

/// Where `path` lands once its directories are resolved on disk, relative to the root: the deepest
/// existing directory on the way is opened (through the root's capability) and its real location read back
/// from `/proc/self/fd`; the components below it, not created yet, are appended as named. `None`
/// when that cannot be told (no procfs): the lexical check stands alone then.
pub(crate) fn resolved(root: &Dir, root_path: &Path, path: &RepoPath) -> Option<String> {
    let components: Vec<&str> = path.components().collect();
    let (dirs, name) = components.split_at(components.len().checked_sub(1)?);
    for depth in (0..=dirs.len()).rev() {
        let prefix = dirs[..depth].join("/");
        let opened = if prefix.is_empty() {
            root.try_clone()
        } else {
            root.open_dir(&prefix)
        };
        let Ok(dir) = opened else { continue };
        let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd())).ok()?;
        let below = real.strip_prefix(root_path).ok()?;
        let mut out: Vec<String> = below
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        out.extend(dirs[depth..].iter().chain(name).map(|c| (*c).to_owned()));
        return Some(out.join("/"));
    }
    None
}

enum Parents {
    Exist,
    WillBeCreated,
}

/// Walks the target's directories from the root down. Each is resolved from the root, so a
/// symlinked directory that leads outside is reported as an escape even when nothing below it
/// exists yet.
fn check_parents(
    root: &Dir,
    path: &RepoPath,
    create_dirs: bool,
) -> Result<Parents, WorkspaceError> {
    let mut prefix = String::new();
    for component in path.parent().components() {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(component);
        match root.metadata(&prefix) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(WorkspaceError::NotADirectory { path: prefix }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling symlink is "missing" when followed, yet mkdir cannot create it. Asked
                // a second time, though, a directory that a sibling's writer has just created is
                // there now: it is the race of two files of one batch making their folder, not a
                // reason to refuse.
                match root.symlink_metadata(&prefix) {
                    Ok(meta) if meta.is_dir() => continue,
                    Ok(_) => return Err(WorkspaceError::NotADirectory { path: prefix }),
                    Err(_) => {}
                }
                return if create_dirs {
                    Ok(Parents::WillBeCreated)
                } else {
                    Err(WorkspaceError::ParentMissing {
                        path: path.to_string(),
                        parent: path.parent().to_string(),
                    })
                };
            }
            Err(e) => return Err(from_io(&prefix, e)),
        }
    }
    Ok(Parents::Exist)
}

/// Judges the final component without following it.
///
/// A symlink is refused even when it resolves inside the root: the atomic rename would replace
/// the link itself with a regular file rather than write to its target, which is not what a caller
/// writing to that path means. An escaping link is reported as `Escapes`, any other as
/// `SpecialFile` (it is not a regular file); the caller can write to the link's target by name.
fn check_final(root: &Dir, path: &RepoPath) -> Result<(), WorkspaceError> {
    let p = path.as_str();
    match root.symlink_metadata(p) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(meta) if meta.is_dir() => Err(WorkspaceError::IsDirectory {
            path: path.to_string(),
        }),
        Ok(meta) if meta.is_symlink() => match root.metadata(p) {
            Err(e) if is_escape(&e) => Err(WorkspaceError::Escapes {
                path: path.to_string(),
            }),
            _ => Err(special(path)),
        },
        Ok(_) => Err(special(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(from_io(p, e)),
    }
}

/// Creates the target's missing directories one by one, returning those it created (so that their
/// parents can be synced once the file is in place).
pub(crate) fn create_parents(root: &Dir, path: &RepoPath) -> Result<Vec<String>, WorkspaceError> {
    let mut created = Vec::new();
    let mut prefix = String::new();
    for component in path.parent().components() {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(component);
        match root.create_dir(&prefix) {
            Ok(()) => created.push(prefix.clone()),
            // Another writer may have made it a moment ago: a directory is what we wanted. Judged
            // by following links, as the walk down to the file will.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match root.metadata(&prefix) {
                Ok(meta) if meta.is_dir() => {}
                _ => return Err(WorkspaceError::NotADirectory { path: prefix }),
            },
            Err(e) => return Err(from_io(&prefix, e)),
        }
    }
    Ok(created)
}

fn refuse_non_file(path: &RepoPath, meta: &Metadata) -> Result<(), WorkspaceError> {
    if meta.is_file() {
        Ok(())
    } else if meta.is_dir() {
        Err(WorkspaceError::IsDirectory {
            path: path.to_string(),
        })
    } else {
        Err(special(path))
    }
}

fn special(path: &RepoPath) -> WorkspaceError {
    WorkspaceError::SpecialFile {
        path: path.to_string(),
    }
}

/// Keeps the permission bits of the file being replaced, minus setuid/setgid/sticky: new content
/// should not inherit the right to run with someone else's identity.
fn existing_mode(meta: &Metadata) -> u32 {
    meta.permissions().mode() & 0o777
}

pub(crate) fn sync_dir(root: &Dir, dir: &str) -> io::Result<()> {
    root.open(if dir.is_empty() { "." } else { dir })?
        .sync_all()
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_uuid_v4_shape_counts_as_a_temp_file_name() {
        assert!(looks_like_temp_file_name(
            "3f2504e0-4f89-41d3-a654-0e02b2c3d479"
        ));
        assert!(!looks_like_temp_file_name(
            "3F2504E0-4F89-41D3-A654-0E02B2C3D479"
        ));
        assert!(!looks_like_temp_file_name(
            "3f2504e0-4f89-11d3-a654-0e02b2c3d479"
        ));
        assert!(!looks_like_temp_file_name(
            "3f2504e0-4f89-41d3-a654-0e02b2c3d479.py"
        ));
        assert!(!looks_like_temp_file_name("notes.txt"));
    }
}
