//! A task's branch back into the main line: fast-forward when the target has not moved, else a
//! three-way merge made as one commit; conflicts are answered (files and hunks) and nothing moves.
//!
//! When the target branch is checked out — in the repository, or in a linked worktree (another
//! task's workspace) — that working tree follows the new commit through a safe checkout (which
//! refuses to overwrite local changes to the files it would touch, and then nothing moves).

use std::path::Path;

use git2::{BranchType, Index, MergeFileOptions, Oid, Repository, Signature};

use crate::checkouts::{self, LocalChanges};
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
    let repo = crate::open(repo_path)?;
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
        checkouts::move_branch(
            &repo,
            &target_ref,
            t,
            s,
            LocalChanges::KeptWhereUntouched,
            &format!("merge {source}: fast-forward"),
        )?;
        return Ok(MergeOutcome::FastForward {
            commit: s.to_string(),
        });
    }
    let mut index = repo.merge_commits(&target_commit, &source_commit, None)?;
    if index.has_conflicts() {
        return Ok(MergeOutcome::Conflicts(conflicts_in(
            &repo, &index, target, source,
        )?));
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
    checkouts::move_branch(
        &repo,
        &target_ref,
        t,
        id,
        LocalChanges::KeptWhereUntouched,
        &format!("merge {source}"),
    )?;
    Ok(MergeOutcome::Merged {
        commit: id.to_string(),
    })
}

/// The conflicts of an in-memory merge's `index`, each file's hunks marked with `our_label` and
/// `their_label`.
pub(crate) fn conflicts_in(
    repo: &Repository,
    index: &Index,
    our_label: &str,
    their_label: &str,
) -> Result<Vec<MergeConflict>, GitError> {
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
                opts.our_label(our_label).their_label(their_label);
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
    Ok(conflicts)
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
