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

use crate::search::{FileStat, Tree, within};

/// How the walk meets a path.
enum Way {
    /// Shown, with the rules of the folders down to it.
    Shown(Vec<Arc<FolderRules>>),
    /// Pruned: ignored, protected, or in `.git`.
    Hidden,
    /// A folder on the way is not a folder: only the walker can tell.
    Unknown,
}

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
        match self.way(tree, rel, false) {
            Way::Shown(_) => Some(true),
            Way::Hidden => Some(false),
            Way::Unknown => None,
        }
    }

    /// The regular files the walk shows at and beneath the folder `dir` (from the root, not the
    /// root itself), with their sizes and times, in no order; `None` when only the walker can
    /// tell (`dir` or a folder on its way is not a folder, or a folder could not be read).
    pub fn files_beneath(&mut self, tree: &Tree, dir: &str) -> Option<Vec<FileStat>> {
        match self.way(tree, dir, true) {
            Way::Unknown => None,
            Way::Hidden => Some(Vec::new()),
            Way::Shown(chain) => {
                let mut found = Vec::new();
                self.collect(tree, dir, chain, &mut found)?;
                Some(found)
            }
        }
    }

    /// How the walk meets `rel`: the rules of the folders down to it (its own last when
    /// `is_dir`), or that it is pruned, or that a folder on the way is not one.
    fn way(&mut self, tree: &Tree, rel: &str, is_dir: bool) -> Way {
        let mut chain = vec![self.of(tree, "")];
        let mut parts = rel.split('/').peekable();
        let mut prefix = String::with_capacity(rel.len());
        while let Some(part) = parts.next() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            let folder = is_dir || parts.peek().is_some();
            if part == ".git" || tree.protected.covers(&prefix) {
                return Way::Hidden;
            }
            if folder
                && !tree
                    .root
                    .symlink_metadata(&prefix)
                    .is_ok_and(|m| m.is_dir())
            {
                return Way::Unknown;
            }
            if judged(&chain, &tree.root_path.join(&prefix), folder).is_ignore() {
                return Way::Hidden;
            }
            if folder {
                chain.push(self.of(tree, &prefix));
            }
        }
        Way::Shown(chain)
    }

    /// Adds the files the walk shows beneath the shown folder `dir`, whose rules (and its
    /// ancestors') are `chain`.
    fn collect(
        &mut self,
        tree: &Tree,
        dir: &str,
        chain: Vec<Arc<FolderRules>>,
        found: &mut Vec<FileStat>,
    ) -> Option<()> {
        for entry in tree.root.read_dir(dir).ok()? {
            let entry = entry.ok()?;
            let name = entry.file_name();
            // The walker leaves out what it cannot name as text.
            let Some(name) = name.to_str() else {
                continue;
            };
            let rel = format!("{dir}/{name}");
            if name == ".git" || tree.protected.covers(&rel) {
                continue;
            }
            let kind = entry.file_type().ok()?;
            let abs = tree.root_path.join(&rel);
            if kind.is_dir() {
                if judged(&chain, &abs, true).is_ignore() {
                    continue;
                }
                let mut deeper = chain.clone();
                deeper.push(self.of(tree, &rel));
                self.collect(tree, &rel, deeper, found)?;
            } else if kind.is_file() {
                if judged(&chain, &abs, false).is_ignore() {
                    continue;
                }
                let meta = entry.metadata().ok()?;
                found.push(FileStat {
                    rel,
                    size: meta.len(),
                    modified: meta.modified().ok().map(|t| t.into_std()),
                });
            }
        }
        Some(())
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

/// Ignore files' contents the tests try: plain, folder-only, anchored and negated rules.
#[cfg(test)]
pub(crate) const IGNORE_SAMPLES: &[&str] = &[
    "",
    "*.log\n",
    "d/\n",
    "*.txt\n!h.txt\n",
    "!*.log\n",
    "/b.py\n",
    "*.py\n!e.py\n",
    "!d/\n",
    "e.*\n",
    "a/\n",
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;

    use cap_std::fs::Dir;

    use super::*;
    use crate::protect::ProtectedPaths;

    const FILES: &[&str] = &[
        "a.py",
        "a.log",
        "h.txt",
        "x.txt",
        "a/b.py",
        "a/c.log",
        "a/h.txt",
        "a/d/e.py",
        "a/d/f.log",
        "a/d/e.txt",
        "b/f.py",
        "b/g.txt",
        "b/d/e.py",
    ];
    const FOLDERS: &[&str] = &["", "a", "a/d", "b"];
    const RULES: &[&str] = IGNORE_SAMPLES;

    /// Every combination is a different tree; a small generator picks them reproducibly.
    fn next(seed: &mut u64) -> usize {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (*seed >> 33) as usize
    }

    #[test]
    fn the_rules_show_exactly_the_files_the_walker_shows() {
        let mut seed = 7_u64;
        for round in 0..200_u32 {
            let base = tempfile::tempdir().unwrap();
            let root_path = base.path().join("root");
            for f in FILES {
                let path = root_path.join(f);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, "x").unwrap();
            }
            let mut written = Vec::new();
            for folder in FOLDERS {
                for name in [".gitignore", ".ignore"] {
                    let rules = RULES[next(&mut seed) % RULES.len()];
                    if rules.is_empty() || next(&mut seed).is_multiple_of(3) {
                        continue;
                    }
                    let rel = if folder.is_empty() {
                        name.to_owned()
                    } else {
                        format!("{folder}/{name}")
                    };
                    std::fs::write(root_path.join(&rel), rules).unwrap();
                    written.push((rel, rules));
                }
            }
            if round.is_multiple_of(3) {
                // A repository's own excludes, read where the folder holds `.git`.
                let rules = RULES[next(&mut seed) % RULES.len()];
                std::fs::create_dir_all(root_path.join(".git/info")).unwrap();
                std::fs::write(root_path.join(".git/info/exclude"), rules).unwrap();
                written.push((".git/info/exclude".into(), rules));
            }
            let tree = Tree {
                root: Arc::new(
                    Dir::open_ambient_dir(&root_path, cap_std::ambient_authority()).unwrap(),
                ),
                root_path,
                protected: Arc::new(ProtectedPaths::default()),
            };
            let walked: BTreeSet<String> = tree.stats("", true).map(|f| f.rel).collect();
            let mut rules = Rules::default();
            let mut candidates: Vec<String> = FILES.iter().map(|f| (*f).to_owned()).collect();
            candidates.extend(
                written
                    .iter()
                    .filter(|(rel, _)| !rel.starts_with(".git/"))
                    .map(|(rel, _)| rel.clone()),
            );
            for file in &candidates {
                assert_eq!(
                    rules.shows(&tree, file),
                    Some(walked.contains(file)),
                    "round {round}: {file} with {written:?}"
                );
            }
            for folder in ["a", "a/d", "b", "b/d"] {
                let beneath: BTreeSet<String> = rules
                    .files_beneath(&tree, folder)
                    .expect("a folder")
                    .into_iter()
                    .map(|f| f.rel)
                    .collect();
                let expected: BTreeSet<String> = walked
                    .iter()
                    .filter(|f| within(f, folder))
                    .cloned()
                    .collect();
                assert_eq!(
                    beneath, expected,
                    "round {round}: beneath {folder} with {written:?}"
                );
            }
        }
    }
}
