//! The watcher: every path changed outside writ is queued for a refresh; an overflow or an
//! error queues the root.

use super::*;

/// The watcher, shared with the threads that add a watch for a new top folder.
pub(super) type SharedWatcher = Arc<Mutex<notify::RecommendedWatcher>>;

/// Starts the watcher on the root: every reported path is queued for a refresh; an overflow or
/// an error queues the root.
///
/// The root is watched by itself and each top folder but `.git` recursively, rather than the
/// root recursively: a commit writes the repository's index in 8 KiB pieces, and every piece was
/// an event the watcher's thread woke for — hundreds a commit, competing with it for the cores.
/// A top folder made later is watched as it is reported (from a thread of its own: the
/// watcher's thread, which reports it, cannot also add a watch), and refreshed whole, so what
/// was made in it before its watch began is found.
pub(super) fn watch(index: &Arc<Index>) -> notify::Result<SharedWatcher> {
    use notify::Watcher as _;
    let weak = Arc::downgrade(index);
    let root = index.tree.root_path.clone();
    let shared: Arc<OnceLock<Weak<Mutex<notify::RecommendedWatcher>>>> = Arc::default();
    let slot = Arc::clone(&shared);
    let handler = move |event: notify::Result<notify::Event>| {
        let Some(index) = weak.upgrade() else {
            return;
        };
        match event {
            // Opening and reading change nothing (and the index's own reads would otherwise
            // report themselves, round and round).
            Ok(event) if event.kind.is_access() && !event.need_rescan() => {}
            Ok(event) if !event.need_rescan() => {
                let named = matches!(
                    event.kind,
                    notify::EventKind::Create(_)
                        | notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
                );
                for path in &event.paths {
                    if named
                        && path.parent() == Some(root.as_path())
                        && path.file_name().is_some_and(|n| n != ".git")
                        && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
                        && let Some(watcher) = slot.get().and_then(Weak::upgrade)
                    {
                        index.lock().watching += 1;
                        watch_later(watcher, path.clone(), Arc::downgrade(&index));
                    }
                    if let Some(rel) = watched(&root, path) {
                        index.changed(&rel);
                    }
                }
            }
            Ok(_) => index.changed(""),
            Err(e) => {
                tracing::warn!(error = %e, "the workspace watcher reported an error: rescanning");
                index.changed("");
            }
        }
    };
    // Symlinks are never followed, as the walk does not follow them: a link to `/usr` must not
    // put a watch on every directory beneath it.
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher = notify::RecommendedWatcher::new(handler, config)?;
    let root = &index.tree.root_path;
    watcher.watch(root, notify::RecursiveMode::NonRecursive)?;
    let shared_watcher = Arc::new(Mutex::new(watcher));
    let _ = shared.set(Arc::downgrade(&shared_watcher));
    for entry in std::fs::read_dir(root).map_err(notify::Error::io)? {
        let entry = entry.map_err(notify::Error::io)?;
        if entry.file_name() == ".git" || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let watched = shared_watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .watch(&entry.path(), notify::RecursiveMode::Recursive);
        match watched {
            Ok(()) => {}
            // Gone since it was listed: nothing to watch.
            Err(e)
                if matches!(&e.kind, notify::ErrorKind::PathNotFound)
                    || matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) =>
                {}
            Err(e) => return Err(e),
        }
    }
    Ok(shared_watcher)
}

/// Watches the new top folder `path`, then refreshes it; a watch that cannot be added leaves the
/// index to rescans of the root (a warning says so).
fn watch_later(watcher: SharedWatcher, path: std::path::PathBuf, index: Weak<Index>) {
    let weak = index.clone();
    let spawned = std::thread::Builder::new()
        .name("writ-index-watch".into())
        .spawn(move || {
            use notify::Watcher as _;
            let added = watcher
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .watch(&path, notify::RecursiveMode::Recursive);
            let Some(index) = index.upgrade() else {
                return;
            };
            match added {
                Ok(()) => {
                    if let Some(rel) = watched(&index.tree.root_path, &path) {
                        index.changed(&rel);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "a new folder could not be watched: rescanning");
                    index.changed("");
                }
            }
            index.watch_added();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "a new folder could not be watched (no thread)");
        if let Some(index) = weak.upgrade() {
            index.changed("");
            index.watch_added();
        }
    }
}

/// The path to refresh for a reported change of `path`: `None` inside `.git`; an ignore file
/// stands for the directory it rules.
fn watched(root: &Path, path: &Path) -> Option<String> {
    let rel = crate::search::relative(root, path)?;
    if rel.split('/').any(|c| c == ".git") {
        return None;
    }
    Some(ruled_by(&rel).to_owned())
}

/// The path a change of `rel` refreshes: an ignore file stands for the folder it rules.
pub(super) fn ruled_by(rel: &str) -> &str {
    match rel.rsplit_once('/') {
        Some((dir, ".gitignore" | ".ignore")) => dir,
        None if rel == ".gitignore" || rel == ".ignore" => "",
        _ => rel,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn an_ignore_file_stands_for_its_directory_and_git_is_not_watched() {
        let root = Path::new("/r");
        assert_eq!(
            watched(root, Path::new("/r/a/.gitignore")),
            Some("a".into())
        );
        assert_eq!(
            watched(root, Path::new("/r/.gitignore")),
            Some(String::new())
        );
        assert_eq!(watched(root, Path::new("/r/.git/index")), None);
        assert_eq!(
            watched(root, Path::new("/r/src/a.py")),
            Some("src/a.py".into())
        );
    }
}
