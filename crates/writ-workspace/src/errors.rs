//! Translation of the `io::Error`s that cap-std returns into [`WorkspaceError`]s a caller can
//! branch on.

use std::io;

use writ_core::WorkspaceError;

/// cap-std refuses a path that leaves its `Dir` (an absolute symlink, or `..` / a relative
/// symlink climbing above it) with a synthetic error: `PermissionDenied`, message "a path led
/// outside of the filesystem", and no errno (cap-primitives `fs/errors.rs::escape_attempt`; the
/// kernel's `EXDEV` from `openat2(RESOLVE_BENEATH)` is converted into it). A real `EACCES`
/// always carries its errno, which is how the two are told apart.
pub(crate) fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// The path, or one of its directories, does not exist: for `read` this means "no such file".
pub(crate) fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        )
}

/// Maps an error met while working on `path` (shown to the caller as given).
pub(crate) fn from_io(path: &str, e: io::Error) -> WorkspaceError {
    let path = path.to_owned();
    if is_escape(&e) {
        return WorkspaceError::Escapes { path };
    }
    if is_no_space(&e) {
        return WorkspaceError::NoSpace { path };
    }
    match e.kind() {
        io::ErrorKind::NotFound => WorkspaceError::NotFound { path },
        io::ErrorKind::IsADirectory => WorkspaceError::IsDirectory { path },
        io::ErrorKind::NotADirectory => WorkspaceError::NotADirectory { path },
        _ => WorkspaceError::Io { path, source: e },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_or_quota_is_no_space() {
        for errno in [libc::ENOSPC, libc::EDQUOT] {
            let mapped = from_io("a.txt", io::Error::from_raw_os_error(errno));
            assert!(
                matches!(mapped, WorkspaceError::NoSpace { .. }),
                "{errno}: {mapped:?}"
            );
        }
    }

    #[test]
    fn only_the_errno_less_permission_error_is_an_escape() {
        let escape = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a path led outside of the filesystem",
        );
        assert!(matches!(
            from_io("x", escape),
            WorkspaceError::Escapes { .. }
        ));
        let eacces = io::Error::from_raw_os_error(libc::EACCES);
        assert!(matches!(from_io("x", eacces), WorkspaceError::Io { .. }));
    }
}
