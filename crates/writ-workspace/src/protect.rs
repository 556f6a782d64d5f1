//! Paths no write may touch, whatever the caller asks: `.git` (whose hooks and config run code on
//! the next git command), and writ's own files when they lie inside the root.
//!
//! A target is judged twice: as named, and as the filesystem resolves its directory (so a symlink
//! `link -> .git` inside the root does not lead around the rule). Names are compared the way
//! case-insensitive and normalising filesystems would see them: case folded, default-ignorable
//! characters dropped (HFS+ ignores them, so `.g\u{200c}it` is `.git` there), trailing dots and
//! spaces dropped (Windows and Samba strip them), an NTFS stream suffix (`.git::$INDEX_ALLOCATION`)
//! dropped, and `.git`'s NTFS short name `GIT~1` taken for `.git`, as git itself refuses them.
//!
//! A workspace's root is judged too ([`ProtectedPaths::check_root`]): none of its own components
//! may be a protected name, and while `.git` is protected, neither the root nor a folder above it
//! may be a git directory, whatever it is called (a bare repository, a worktree's or a
//! submodule's git directory, where a gitfile points) — writes there would be git's own files.

use std::path::{Component, Path};

use writ_core::{RepoPath, WorkspaceError};

/// One rule: a name that may not appear as any component, or a path from the root that may not
/// be the target or lie above it.
#[derive(Debug, Clone)]
enum Rule {
    Name(String),
    Path(Vec<String>),
}

#[derive(Debug, Clone)]
struct Protected {
    rule: Rule,
    /// As the operator wrote it, for the refusal.
    shown: String,
    /// Where the rule comes from, for the refusal.
    reason: String,
}

/// The set of protected names and paths.
#[derive(Debug, Clone, Default)]
pub struct ProtectedPaths {
    entries: Vec<Protected>,
}

impl ProtectedPaths {
    /// Protects `entry`: without a `/` it is a name refused as any component of a path; with one
    /// it is a path from the root, refused along with everything beneath it. `reason` says where
    /// the rule comes from (shown to a refused caller).
    pub fn add(&mut self, entry: &str, reason: &str) {
        let parts: Vec<String> = entry
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(fold)
            .collect();
        let rule = match parts.as_slice() {
            [] => return,
            [one] if !entry.trim_matches('/').contains('/') => Rule::Name(one.clone()),
            _ => Rule::Path(parts),
        };
        self.entries.push(Protected {
            rule,
            shown: entry.trim_matches('/').to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// Protects `path`, taken from the root whether or not it has a `/` (writ's own files).
    pub fn add_path(&mut self, path: &str, reason: &str) {
        let parts: Vec<String> = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(fold)
            .collect();
        if parts.is_empty() {
            return;
        }
        self.entries.push(Protected {
            rule: Rule::Path(parts),
            shown: path.trim_matches('/').to_owned(),
            reason: reason.to_owned(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Refuses `root` (canonical: symlinks resolved) as a workspace's root when one of its own
    /// components is a protected name, or, while `.git` is protected, when it or a folder above
    /// it is a git directory. Rules anchored at a root (paths with `/`) say nothing of a root.
    pub fn check_root(&self, root: &Path) -> Result<(), WorkspaceError> {
        let refused = |protected: &str, reason: String| WorkspaceError::Protected {
            path: root.display().to_string(),
            protected: protected.to_owned(),
            reason,
        };
        for component in root.components() {
            let Component::Normal(name) = component else {
                continue;
            };
            let folded = fold(&name.to_string_lossy());
            for p in &self.entries {
                if let Rule::Name(protected) = &p.rule
                    && names_match(&folded, protected)
                {
                    return Err(refused(
                        &p.shown,
                        format!(
                            "the workspace root lies inside '{}' ({})",
                            name.to_string_lossy(),
                            p.reason
                        ),
                    ));
                }
            }
        }
        let guards_git = self
            .entries
            .iter()
            .any(|p| matches!(&p.rule, Rule::Name(name) if name == DOT_GIT));
        if guards_git && let Some(git_dir) = root.ancestors().find(|dir| is_git_directory(dir)) {
            return Err(refused(
                DOT_GIT,
                format!(
                    "'{}' is a git directory, and the workspace root {} it",
                    git_dir.display(),
                    if git_dir == root { "is" } else { "lies inside" }
                ),
            ));
        }
        Ok(())
    }

    /// Whether a rule covers `target` (a path from the root): reads skip what writes may not touch.
    pub(crate) fn covers(&self, target: &str) -> bool {
        let Ok(path) = RepoPath::parse(target) else {
            return true;
        };
        self.check(&path, target).is_err()
    }

    /// Refuses `target` (shown as `path`) if a rule covers it.
    pub(crate) fn check(&self, path: &RepoPath, target: &str) -> Result<(), WorkspaceError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let folded: Vec<String> = target
            .split('/')
            .filter(|c| !c.is_empty())
            .map(fold)
            .collect();
        for p in &self.entries {
            let hit = match &p.rule {
                Rule::Name(name) => folded.iter().any(|c| names_match(c, name)),
                Rule::Path(parts) => folded.starts_with(parts),
            };
            if hit {
                return Err(WorkspaceError::Protected {
                    path: path.to_string(),
                    protected: p.shown.clone(),
                    reason: p.reason.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The name whose look-alikes git refuses, and whose directories run code on git's next command.
const DOT_GIT: &str = ".git";

/// A component as a case-insensitive, normalising filesystem would compare it: what follows a
/// `:` is an NTFS stream of the name before it.
fn fold(component: &str) -> String {
    let kept: String = component
        .chars()
        .filter(|c| !is_default_ignorable(*c))
        .flat_map(char::to_lowercase)
        .collect();
    let named = kept.split(':').next().unwrap_or_default();
    named.trim_end_matches(['.', ' ']).to_owned()
}

/// Whether the folded component `folded` is the protected name `protected`; `.git` is also
/// reached on NTFS by its short name, which git refuses as `.git` (`is_ntfs_dotgit`).
fn names_match(folded: &str, protected: &str) -> bool {
    folded == protected || (protected == DOT_GIT && folded == "git~1")
}

/// Whether git takes `dir` for a git directory (as `is_git_directory` in git's setup does): a
/// `HEAD`, with `objects` and `refs` beside it, or a `commondir` file leading to them (a linked
/// worktree's git directory).
fn is_git_directory(dir: &Path) -> bool {
    dir.join("HEAD").is_file()
        && ((dir.join("objects").is_dir() && dir.join("refs").is_dir())
            || dir.join("commondir").is_file())
}

/// The default-ignorable code points HFS+ and APFS skip when comparing names (the set git itself
/// refuses in `.git` look-alikes, `is_hfs_dotgit`).
fn is_default_ignorable(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git() -> ProtectedPaths {
        let mut p = ProtectedPaths::default();
        p.add(".git", "listed in WRIT_PROTECTED_PATHS");
        p.add("data/writ.db", "writ's own database");
        p
    }

    fn refused(p: &ProtectedPaths, raw: &str) -> bool {
        let path = RepoPath::parse(raw).unwrap();
        p.check(&path, path.as_str()).is_err()
    }

    #[test]
    fn every_spelling_of_a_protected_name_is_refused_anywhere_in_the_path() {
        let p = git();
        for raw in [
            ".git/config",
            ".GIT/config",
            ".git./config",
            ".git /config",
            ".git. . /hooks/x",
            "vendor/lib/.Git/HEAD",
            ".g\u{200c}it/config",
            "\u{feff}.git/config",
            ".git",
            "GIT~1/config",
            "git~1./hooks/pre-commit",
            ".git::$INDEX_ALLOCATION/config",
            ".git:stream",
        ] {
            assert!(refused(&p, raw), "{raw:?}");
        }
        for raw in [
            ".github/ci.yml",
            "git/config",
            ".gitignore",
            "a.git.py",
            "git~2/config",
            "agit~1",
        ] {
            assert!(!refused(&p, raw), "{raw:?}");
        }
    }

    #[test]
    fn a_root_is_refused_inside_any_spelling_of_git_and_inside_any_git_directory() {
        let p = git();
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for inside in [
            ".git",
            ".GIT/hooks",
            "app/.git./worktrees/x",
            "GIT~1",
            "x/.git:y",
        ] {
            assert!(p.check_root(&base.join(inside)).is_err(), "{inside}");
        }
        // A git directory of any name: bare, a linked worktree's, and one a gitfile points to.
        let bare = base.join("bare.git");
        for sub in ["objects", "refs", "hooks"] {
            std::fs::create_dir_all(bare.join(sub)).unwrap();
        }
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let linked = base.join("gits/wt");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(linked.join("HEAD"), "ref: refs/heads/x\n").unwrap();
        std::fs::write(linked.join("commondir"), "../../bare.git\n").unwrap();
        for root in [bare.clone(), bare.join("hooks"), linked.clone()] {
            let err = p.check_root(&root).unwrap_err().to_string();
            assert!(err.contains("git directory"), "{root:?}: {err}");
        }

        for fine in ["app", "app/.github", "git", "gits"] {
            std::fs::create_dir_all(base.join(fine)).unwrap();
            assert!(p.check_root(&base.join(fine)).is_ok(), "{fine}");
        }
        assert!(
            ProtectedPaths::default().check_root(&bare).is_ok(),
            "with .git unprotected, the operator allowed it"
        );
    }

    #[test]
    fn a_protected_path_covers_itself_and_what_lies_beneath_only() {
        let p = git();
        assert!(refused(&p, "data/writ.db"));
        assert!(refused(&p, "DATA/Writ.db"));
        assert!(!refused(&p, "data/writ.db-wal"));
        assert!(!refused(&p, "writ.db"));
        assert!(!refused(&p, "other/data/writ.db"));
        let mut p = ProtectedPaths::default();
        p.add_path("writ.db", "writ's own database");
        assert!(refused(&p, "writ.db"));
        assert!(
            !refused(&p, "sub/writ.db"),
            "anchored at the root, unlike a name"
        );
    }
}
