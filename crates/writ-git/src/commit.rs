//! A commit of exactly the paths a request wrote.
//!
//! The tree is HEAD's tree with those paths' contents (as they are on disk now) put in; only the
//! trees along those paths are rebuilt, so a commit's cost does not grow with the repository.
//! The user's index is never the source, so what they staged or changed elsewhere is not swept
//! into writ's commit. The real index is then updated for those paths only, so `git status`
//! shows them clean and everything else the user staged still staged. The commit's new objects
//! are written as one pack (`packs.rs`) before the index and the branch name them.
//!
//! Commits into one repository are made one at a time: within the process behind one lock, and
//! against other processes (replicas sharing the working tree, a person's `git commit`) by
//! git's own lock files, which make a commit that meets them fail; it is then tried again from a
//! fresh read of HEAD and the index, for a short while.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use git2::{IndexEntry, IndexTime, Oid, Repository, Signature};

use crate::packs;

/// What a commit says: its message and who it is by.
#[derive(Debug, Clone)]
pub struct CommitSpec<'a> {
    /// Paths relative to the workspace root, `/`-separated; a path that no longer exists on disk
    /// is removed from the tree.
    pub paths: &'a [String],
    pub message: &'a str,
    pub author_name: &'a str,
    pub author_email: &'a str,
    pub committer_name: &'a str,
    pub committer_email: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("'{0}' is not inside a git repository with a working tree")]
    NotARepository(PathBuf),
    #[error("'{path}' is outside the repository's working tree")]
    OutsideWorkTree { path: String },
    #[error("no branch '{0}' in the repository")]
    NoSuchBranch(String),
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("writing the commit's objects: {0}")]
    Pack(#[source] std::io::Error),
    #[error("reading '{path}': {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("'{ours}' and '{theirs}' share no commit")]
    NoMergeBase { ours: String, theirs: String },
    /// Another writer moved the branch between its tip being read and the move; nothing moved.
    #[error("branch '{branch}' moved while it was being changed; nothing was changed")]
    BranchMoved { branch: String },
    /// A working tree that has the branch checked out holds changes the move could lose.
    #[error(
        "the working tree at '{}' has uncommitted changes ({}); nothing was changed",
        path.display(),
        listed(files)
    )]
    DirtyWorktree { path: PathBuf, files: Vec<String> },
}

/// A few of `files` for a message; the error keeps them all.
fn listed(files: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = files
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if files.len() > SHOWN {
        text.push_str(&format!(" and {} more", files.len() - SHOWN));
    }
    text
}

/// The message of a request's commit: a subject, a body, and `Key: value` trailers.
pub fn message(subject: &str, body: &str, trailers: &[(String, String)]) -> String {
    let subject: String = subject
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(72)
        .collect();
    let mut m = subject;
    let body = body.trim();
    if !body.is_empty() {
        m.push_str("\n\n");
        m.push_str(body);
    }
    if !trailers.is_empty() {
        m.push_str("\n\n");
        for (k, v) in trailers {
            m.push_str(&format!("{k}: {}\n", v.replace('\n', " ")));
        }
    }
    if !m.ends_with('\n') {
        m.push('\n');
    }
    m
}

/// How long a commit keeps trying while another process holds the repository's locks.
const LOCKED_FOR_AT_MOST: Duration = Duration::from_secs(2);

/// Commits in this process, one at a time (see the module docs), and the repositories committed
/// into lately, kept open: reading a large repository's index costs as much as the rest of a
/// commit, and an open repository keeps its index in memory, read again only when another
/// process changed the file.
static COMMITTING: Mutex<Vec<OpenRepository>> = Mutex::new(Vec::new());

/// How many repositories stay open (each holds its index: about 100 bytes per tracked file).
const KEPT_OPEN: usize = 4;

struct OpenRepository {
    /// The workspace root it was found from.
    root: PathBuf,
    repo: Repository,
}

/// Commits `spec.paths` onto HEAD (see the module docs). `None` when HEAD already holds them as
/// they are: no empty commit is made.
pub fn commit_paths(workspace_root: &Path, spec: &CommitSpec<'_>) -> Result<Option<Oid>, GitError> {
    // A panic while committing leaves nothing of this lock's to repair: an open repository whose
    // commit failed is dropped below, before its in-memory index could be written by another.
    let mut open = COMMITTING.lock().unwrap_or_else(PoisonError::into_inner);
    let cached = open.iter().position(|o| o.root == workspace_root);
    let kept = match cached.map(|at| open.remove(at)) {
        // Still there (a workspace deleted and made again has a new repository).
        Some(kept) if kept.repo.path().is_dir() => kept,
        _ => OpenRepository {
            root: workspace_root.to_path_buf(),
            repo: Repository::discover(workspace_root)
                .map_err(|_| GitError::NotARepository(workspace_root.to_path_buf()))?,
        },
    };
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    let mut first_try = true;
    loop {
        // A try that failed may have left entries in the in-memory index: read it afresh.
        let made = commit_once(&kept.repo, workspace_root, spec, !first_try);
        first_try = false;
        match made {
            Err(GitError::Git(e))
                if matches!(
                    e.code(),
                    git2::ErrorCode::Locked | git2::ErrorCode::Modified | git2::ErrorCode::Exists
                ) && started.elapsed() < LOCKED_FOR_AT_MOST =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Ok(made) => {
                // Merging packs removes ones this repository's object database still lists:
                // it is opened afresh next time. A merge that failed leaves the packs as they
                // were, one more to merge next time.
                if !matches!(packs::merge_small_packs(&kept.repo), Ok(true)) {
                    open.insert(0, kept);
                    open.truncate(KEPT_OPEN);
                }
                return Ok(made);
            }
            Err(e) => return Err(e),
        }
    }
}

fn commit_once(
    repo: &Repository,
    workspace_root: &Path,
    spec: &CommitSpec<'_>,
    reread_index: bool,
) -> Result<Option<Oid>, GitError> {
    let workdir = repo
        .workdir()
        .ok_or_else(|| GitError::NotARepository(workspace_root.to_path_buf()))?
        .to_path_buf();
    let root = workspace_root
        .canonicalize()
        .map_err(|source| GitError::Io {
            path: workspace_root.display().to_string(),
            source,
        })?;
    let workdir = workdir.canonicalize().unwrap_or(workdir);
    let prefix = root
        .strip_prefix(&workdir)
        .map_err(|_| GitError::OutsideWorkTree {
            path: root.display().to_string(),
        })?
        .to_path_buf();

    let parent = match repo.head() {
        Ok(head) => Some(head.peel_to_commit()?),
        // An unborn branch: the first commit has no parent.
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch => None,
        Err(e) if e.code() == git2::ErrorCode::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    // Every object made from here on stays in memory until it is written as one pack.
    let in_memory = packs::Staged::begin(repo)?;
    let base_tree = match &parent {
        Some(parent) => parent.tree()?,
        None => repo.find_tree(repo.treebuilder(None)?.write()?)?,
    };
    // Only the trees on the written paths are rebuilt, so a commit costs the same on a
    // repository of any size; the user's index is read and written once, for its entries.
    let mut update = git2::build::TreeUpdateBuilder::new();
    let mut real_index = repo.index()?;
    // Unchanged on disk since this process last read or wrote it: kept as it is.
    real_index.read(reread_index)?;
    let mut changes = 0usize;
    let mut new_objects = Vec::with_capacity(spec.paths.len() * 3 + 2);
    for path in spec.paths {
        let in_repo = prefix.join(path);
        let in_repo_str = in_repo.to_string_lossy().replace('\\', "/");
        let on_disk = workdir.join(&in_repo);
        match std::fs::symlink_metadata(&on_disk) {
            Ok(meta) if meta.is_file() => {
                let bytes = std::fs::read(&on_disk).map_err(|source| GitError::Io {
                    path: path.clone(),
                    source,
                })?;
                let id = repo.blob(&bytes)?;
                new_objects.push(id);
                let mode = mode_of(&meta);
                update.upsert(
                    in_repo_str.as_str(),
                    id,
                    if mode == 0o100755 {
                        git2::FileMode::BlobExecutable
                    } else {
                        git2::FileMode::Blob
                    },
                );
                changes += 1;
                real_index.add(&staged(&in_repo_str, id, mode, &meta))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Removed by the request: out of the tree, and out of the index if it was there.
                if base_tree.get_path(&in_repo).is_ok() {
                    update.remove(in_repo_str.as_str());
                    changes += 1;
                }
                let _ = real_index.remove_path(&in_repo);
            }
            Err(source) => {
                return Err(GitError::Io {
                    path: path.clone(),
                    source,
                });
            }
        }
    }
    let tree_id = if changes == 0 {
        base_tree.id()
    } else {
        update.create_updated(repo, &base_tree)?
    };
    let unchanged = parent.as_ref().is_some_and(|p| p.tree_id() == tree_id)
        || (parent.is_none() && changes == 0);
    let made = if unchanged {
        // Every blob the index now names is in HEAD's tree already.
        drop(in_memory);
        None
    } else {
        let tree = repo.find_tree(tree_id)?;
        new_objects.extend(trees_along(&tree, &prefix, spec.paths));
        let author = Signature::now(spec.author_name, spec.author_email)?;
        let committer = Signature::now(spec.committer_name, spec.committer_email)?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        // No branch moves yet: the objects are still in memory only.
        let id = repo.commit(None, &author, &committer, spec.message, &tree, &parents)?;
        let summary =
            String::from_utf8_lossy(repo.find_commit(id)?.summary_bytes().unwrap_or_default())
                .into_owned();
        new_objects.push(id);
        in_memory.write(&new_objects).map_err(GitError::Pack)?;
        Some((id, summary))
    };
    // The index before the branch, as `git commit` does: one held by another process fails this
    // try before the branch moved, and the next try starts over (the pack written stays, unused,
    // until a `git gc` prunes it).
    // Elsewhere an open file may stop its replacement.
    let replaced = cfg!(unix)
        .then(|| real_index.path().and_then(|p| std::fs::File::open(p).ok()))
        .flatten();
    real_index.write()?;
    close_elsewhere(replaced);
    let Some((id, summary)) = made else {
        return Ok(None);
    };
    move_branch(repo, id, parent.as_ref(), &summary)?;
    Ok(Some(id))
}

/// Closes `replaced`, the index file a commit replaced, on a thread of its own. Replacing a file
/// frees its blocks, and the rename that replaced the index (1.6 MB for 20,000 files) waited for
/// that, 1.2 ms on ext4 mounted with `discard`; while it is held open the rename only unlinks it,
/// and the blocks are freed when it closes, after the commit.
fn close_elsewhere(replaced: Option<std::fs::File>) {
    if let Some(file) = replaced {
        // Unable to start a thread, it is closed here, as it would have been.
        let _ = std::thread::Builder::new()
            .name("writ-git-close".into())
            .spawn(move || drop(file));
    }
}

/// The trees of `tree` along `paths` (relative to `prefix`): the root and each folder above a
/// path, the trees a commit of those paths made or kept.
fn trees_along(tree: &git2::Tree<'_>, prefix: &Path, paths: &[String]) -> Vec<Oid> {
    let mut ids = vec![tree.id()];
    let mut seen = std::collections::HashSet::new();
    for path in paths {
        let in_repo = prefix.join(path);
        for folder in in_repo.ancestors().skip(1) {
            if folder.as_os_str().is_empty() || !seen.insert(folder.to_path_buf()) {
                continue;
            }
            // A folder the commit emptied is gone from the tree.
            if let Ok(entry) = tree.get_path(folder) {
                ids.push(entry.id());
            }
        }
    }
    ids
}

/// Moves HEAD's branch (HEAD itself when detached) from `parent` to `id`, as `git commit` would,
/// with the same reflog line; another process's move in between fails it as `Modified`.
fn move_branch(
    repo: &Repository,
    id: Oid,
    parent: Option<&git2::Commit<'_>>,
    summary: &str,
) -> Result<(), git2::Error> {
    let head = repo.find_reference("HEAD")?;
    let name = match head.kind() {
        Some(git2::ReferenceType::Symbolic) => head
            .symbolic_target_bytes()
            .and_then(|name| std::str::from_utf8(name).ok())
            .ok_or_else(|| git2::Error::from_str("HEAD names a branch that is not UTF-8"))?
            .to_string(),
        _ => "HEAD".to_string(),
    };
    match parent {
        Some(parent) => {
            repo.reference_matching(&name, id, true, parent.id(), &format!("commit: {summary}"))?
        }
        None => repo.reference(&name, id, false, &format!("commit (initial): {summary}"))?,
    };
    Ok(())
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o111 != 0 {
        0o100755
    } else {
        0o100644
    }
}

#[cfg(not(unix))]
fn mode_of(_meta: &std::fs::Metadata) -> u32 {
    0o100644
}

/// The user's index entry for a file writ committed: its blob and the file's stat, so `git
/// status` sees it unchanged without hashing it again.
#[cfg(unix)]
fn staged(path: &str, id: Oid, mode: u32, meta: &std::fs::Metadata) -> IndexEntry {
    use std::os::unix::fs::MetadataExt;
    let time = |secs: i64, nanos: i64| {
        IndexTime::new(
            i32::try_from(secs).unwrap_or(0),
            u32::try_from(nanos).unwrap_or(0),
        )
    };
    IndexEntry {
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        // The index keeps these 32 bits wide, as git does.
        dev: meta.dev() as u32,
        ino: meta.ino() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        ..entry(path, id, mode, meta.len() as usize)
    }
}

#[cfg(not(unix))]
fn staged(path: &str, id: Oid, mode: u32, meta: &std::fs::Metadata) -> IndexEntry {
    entry(path, id, mode, meta.len() as usize)
}

pub(crate) fn entry(path: &str, id: Oid, mode: u32, size: usize) -> IndexEntry {
    let zero = IndexTime::new(0, 0);
    IndexEntry {
        ctime: zero,
        mtime: zero,
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: u32::try_from(size).unwrap_or(u32::MAX),
        id,
        flags: u16::try_from(path.len().min(0xfff)).unwrap_or(0xfff),
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}
