//! Whether the walk shows a file, told without walking: the ignore rules of each folder on its
//! path, read as `ignore`'s walker reads them with the walk's options ([`crate::search::Tree`]),
//! and kept by folder.
//!
//! The walker's rules, with those options (`ignore` 0.4, `dir.rs`): each folder from the root
//! down adds its `.ignore`, its `.gitignore` and, where it holds `.git`, that repository's
//! `info/exclude`; no repository is required, so every folder's files apply down to the root
//! and no further. A path is judged by the first folder, deepest first, whose `.ignore` matches
//! it (ignore or whitelist); failing that by `.gitignore`, then `info/exclude`. A folder judged
//! ignored is not entered, so a file beneath it is never shown. `.git` and protected paths are
//! pruned before any rule.
//!
//! A walk from the root to one new file reads every folder on its way — and the walker reads
//! each sibling folder whole before pruning it — which made applying one write cost what the
//! tree's top folders hold. The index's property test checks the two agree after random
//! changes to files and ignore files.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::search::{Tree, within};

/// The rules one folder adds.
struct FolderRules {
    ignore: Gitignore,
    gitignore: Gitignore,
    exclude: Gitignore,
}

/// The rules of the folders looked at so far, by path from the root (`""`: the root).
#[derive(Default)]
pub(crate) struct Rules {
    folders: HashMap<String, Arc<FolderRules>>,
}

impl Rules {
    /// Forgets the rules of `dir` and the folders beneath it (their ignore files may have
    /// changed, or a folder may now be something else).
    pub fn forget(&mut self, dir: &str) {
        if dir.is_empty() {
            self.folders.clear();
        } else {
            self.folders.retain(|d, _| !within(d, dir));
        }
    }

    /// Whether the walk shows `rel`, a regular file; `None` when only a walk can tell (a folder
    /// on its way is not a folder: a link, or gone).
    pub fn shows(&mut self, tree: &Tree, rel: &str) -> Option<bool> {
        let mut chain = vec![self.of(tree, "")];
        let mut parts = rel.split('/').peekable();
        let mut prefix = String::with_capacity(rel.len());
        while let Some(part) = parts.next() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            let is_dir = parts.peek().is_some();
            if part == ".git" || tree.protected.covers(&prefix) {
                return Some(false);
            }
            if is_dir
                && !tree
                    .root
                    .symlink_metadata(&prefix)
                    .is_ok_and(|m| m.is_dir())
            {
                return None;
            }
            if judged(&chain, &tree.root_path.join(&prefix), is_dir).is_ignore() {
                return Some(false);
            }
            if is_dir {
                chain.push(self.of(tree, &prefix));
            }
        }
        Some(true)
    }

    fn of(&mut self, tree: &Tree, dir: &str) -> Arc<FolderRules> {
        if let Some(rules) = self.folders.get(dir) {
            return Arc::clone(rules);
        }
        let abs = if dir.is_empty() {
            tree.root_path.clone()
        } else {
            tree.root_path.join(dir)
        };
        let rules = Arc::new(FolderRules::read(&abs));
        self.folders.insert(dir.to_owned(), Arc::clone(&rules));
        rules
    }
}

impl FolderRules {
    fn read(dir: &Path) -> FolderRules {
        let git = dir.join(".git");
        let exclude = match git.metadata() {
            Ok(meta) => common_dir(&git, meta.is_file())
                .map(|common| matcher(dir, &common.join("info/exclude")))
                .unwrap_or_else(Gitignore::empty),
            Err(_) => Gitignore::empty(),
        };
        FolderRules {
            ignore: matcher(dir, &dir.join(".ignore")),
            gitignore: matcher(dir, &dir.join(".gitignore")),
            exclude,
        }
    }
}

/// The rules of the ignore file `file`, rooted at `dir`; a line that does not parse is left out
/// and the rest kept, as the walker keeps them.
fn matcher(dir: &Path, file: &Path) -> Gitignore {
    if !file.exists() {
        return Gitignore::empty();
    }
    let mut builder = GitignoreBuilder::new(dir);
    let _ = builder.add(file);
    builder.build().unwrap_or_else(|_| {
        GitignoreBuilder::new(dir)
            .build()
            .unwrap_or_else(|_| Gitignore::empty())
    })
}

/// The repository's common directory, where `info/exclude` is: `.git` itself, or for a linked
/// worktree (`.git` a file naming its git directory) the `commondir` that directory names.
fn common_dir(git: &Path, is_file: bool) -> Option<PathBuf> {
    if !is_file {
        return Some(git.to_path_buf());
    }
    let first_line = |path: &Path| -> Option<String> {
        let file = std::fs::File::open(path).ok()?;
        std::io::BufReader::new(file).lines().next()?.ok()
    };
    let line = first_line(git)?;
    let real = PathBuf::from(line.strip_prefix("gitdir: ")?);
    let common = first_line(&real.join("commondir"))?;
    Some(if common.starts_with('.') {
        real.join(common)
    } else {
        PathBuf::from(common)
    })
}

/// How the folders of `chain` (the root first) judge `path`: the deepest `.ignore` that matches,
/// else the deepest `.gitignore`, else the deepest `info/exclude`.
fn judged(chain: &[Arc<FolderRules>], path: &Path, is_dir: bool) -> Match<()> {
    let first = |rules: fn(&FolderRules) -> &Gitignore| {
        chain
            .iter()
            .rev()
            .map(|f| rules(f).matched(path, is_dir))
            .find(|m| !m.is_none())
            .map_or(Match::None, |m| m.map(|_| ()))
    };
    first(|f| &f.ignore)
        .or(first(|f| &f.gitignore))
        .or(first(|f| &f.exclude))
}
