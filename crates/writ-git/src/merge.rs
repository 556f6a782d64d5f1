//! A task's branch back into the main line: fast-forward when the target has not moved, else a
//! three-way merge made as one commit; conflicts are answered (files and hunks) and nothing moves.
//!
//! When the target branch is checked out — in the repository, or in a linked worktree (another
//! task's workspace) — that working tree follows the new commit through a safe checkout (which
//! refuses to overwrite local changes to the files it would touch, and then nothing moves).

use std::path::Path;

use git2::build::CheckoutBuilder;
use git2::{BranchType, MergeFileOptions, Oid, Repository, Signature};

use crate::commit::GitError;

/// How a merge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// The target already contains the source.
    UpToDate,
    /// The target moved to the source's commit.
    FastForward { commit: String },
    /// One merge commit with both as parents.
    Merged { commit: String },
    /// Nothing changed on either side.
    Conflicts(Vec<MergeConflict>),
}

/// A file both sides changed in ways that do not combine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeConflict {
    pub path: String,
    /// Each conflicting region with its `<<<<<<<`/`=======`/`>>>>>>>` markers (empty for a
    /// conflict without text, e.g. one side deleted the file).
    pub hunks: Vec<String>,
}

/// Merges branch `source` into branch `target` of the repository at `repo_path` (see the module
/// docs); the merge commit's author is `author_name`.
pub fn merge_branches(
    repo_path: &Path,
    source: &str,
    target: &str,
    author_name: &str,
    author_email: &str,
) -> Result<MergeOutcome, GitError> {
    let repo = Repository::open(repo_path)
        .map_err(|_| GitError::NotARepository(repo_path.to_path_buf()))?;
    let source_commit = repo
        .find_branch(source, BranchType::Local)?
        .get()
        .peel_to_commit()?;
    let target_branch =
        repo.find_branch(target, BranchType::Local)
            .map_err(|e| match e.code() {
                git2::ErrorCode::NotFound => GitError::NoSuchBranch(target.to_owned()),
                _ => GitError::Git(e),
            })?;
    let target_ref = target_branch.get().name()?.to_string();
    let target_commit = target_branch.get().peel_to_commit()?;
    let (s, t) = (source_commit.id(), target_commit.id());
    if s == t || repo.graph_descendant_of(t, s)? {
        return Ok(MergeOutcome::UpToDate);
    }
    if repo.graph_descendant_of(s, t)? {
        move_target(
            &repo,
            &target_ref,
            s,
            &format!("merge {source}: fast-forward"),
        )?;
        return Ok(MergeOutcome::FastForward {
            commit: s.to_string(),
        });
    }
    let mut index = repo.merge_commits(&target_commit, &source_commit, None)?;
    if index.has_conflicts() {
        let mut conflicts = Vec::new();
        for conflict in index.conflicts()? {
            let conflict = conflict?;
            let side = conflict
                .our
                .as_ref()
                .or(conflict.their.as_ref())
                .or(conflict.ancestor.as_ref());
            let path = side
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .unwrap_or_default();
            let hunks = match (&conflict.ancestor, &conflict.our, &conflict.their) {
                (ancestor, Some(ours), Some(theirs)) => {
                    let mut opts = MergeFileOptions::new();
                    opts.our_label(target).their_label(source);
                    let merged = match ancestor {
                        Some(a) => repo.merge_file_from_index(a, ours, theirs, Some(&mut opts))?,
                        None => {
                            // Added on both sides: merged against an empty ancestor.
                            let empty = crate::commit::entry(&path, Oid::ZERO_SHA1, ours.mode, 0);
                            repo.merge_file_from_index(&empty, ours, theirs, Some(&mut opts))?
                        }
                    };
                    hunks_of(&String::from_utf8_lossy(merged.content()))
                }
                _ => Vec::new(),
            };
            conflicts.push(MergeConflict { path, hunks });
        }
        return Ok(MergeOutcome::Conflicts(conflicts));
    }
    let tree = repo.find_tree(index.write_tree_to(&repo)?)?;
    let author = Signature::now(author_name, author_email)?;
    let committer = repo.signature().unwrap_or_else(|_| author.clone());
    let message = format!("Merge branch '{source}' into {target}\n");
    let id = repo.commit(
        None,
        &author,
        &committer,
        &message,
        &tree,
        &[&target_commit, &source_commit],
    )?;
    move_target(&repo, &target_ref, id, &format!("merge {source}"))?;
    Ok(MergeOutcome::Merged {
        commit: id.to_string(),
    })
}

/// Points `target_ref` at `to`, first bringing along every working tree that has it checked out:
/// the repository's own and any linked worktree's (another task's workspace), each through a safe
/// checkout. Moving a branch under a worktree that does not follow would leave that worktree's
/// index on the old commit, so its next `commit -a` would revert the merge; git refuses that
/// case, and here the worktree follows instead, or nothing moves.
fn move_target(repo: &Repository, target_ref: &str, to: Oid, log: &str) -> Result<(), GitError> {
    let object = repo.find_object(to, None)?;
    if !repo.is_bare() && has_head(repo, target_ref) {
        repo.checkout_tree(&object, Some(CheckoutBuilder::new().safe()))?;
    }
    for linked in linked_checkouts(repo, target_ref)? {
        // The same object, looked up through the worktree's own handle (libgit2 checks out only
        // objects of the repository it is asked through).
        let object = linked.find_object(to, None)?;
        linked.checkout_tree(&object, Some(CheckoutBuilder::new().safe()))?;
    }
    repo.reference(target_ref, to, true, log)?;
    Ok(())
}

fn has_head(repo: &Repository, target_ref: &str) -> bool {
    repo.head()
        .ok()
        .and_then(|h| h.name().ok().map(str::to_string))
        .is_some_and(|name| name == target_ref)
}

/// The linked worktrees whose HEAD is `target_ref`. One whose folder is gone while its HEAD
/// file names the branch is an error, not skipped: its checkout could not follow.
fn linked_checkouts(repo: &Repository, target_ref: &str) -> Result<Vec<Repository>, GitError> {
    let mut found = Vec::new();
    let common = repo.commondir().to_path_buf();
    let names = repo.worktrees()?;
    for i in 0..names.len() {
        // A name that is not UTF-8 is not one writ made, nor can the checks below read it.
        let Ok(Some(name)) = names.get(i) else {
            continue;
        };
        let worktree = repo.find_worktree(name)?;
        if worktree.validate().is_err() {
            // Its folder is gone (git would prune it): a HEAD that still names the branch is
            // refused, since nothing could follow.
            let head = std::fs::read_to_string(common.join("worktrees").join(name).join("HEAD"))
                .unwrap_or_default();
            if head.trim() == format!("ref: {target_ref}") {
                return Err(GitError::Git(git2::Error::from_str(&format!(
                    "'{target_ref}' is checked out in worktree '{name}', whose folder is missing; run `git worktree prune` first"
                ))));
            }
            continue;
        }
        let linked = Repository::open_from_worktree(&worktree)?;
        if has_head(&linked, target_ref) {
            found.push(linked);
        }
    }
    Ok(found)
}

/// The conflict-marked regions of a merged file's text.
fn hunks_of(text: &str) -> Vec<String> {
    let mut hunks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.split_inclusive('\n') {
        if line.starts_with("<<<<<<<") {
            current = Some(String::new());
        }
        if let Some(h) = current.as_mut() {
            h.push_str(line);
            if line.starts_with(">>>>>>>") {
                hunks.extend(current.take());
            }
        }
    }
    hunks
}
