//! Paths no write may touch, whatever the caller asks: `.git` (whose hooks and config run code on
//! the next git command), and writ's own files when they lie inside the root.
//!
//! A target is judged twice: as named, and as the filesystem resolves its directory (so a symlink
//! `link -> .git` inside the root does not lead around the rule). Names are compared the way
//! case-insensitive and normalising filesystems would see them: case folded, default-ignorable
//! characters dropped (HFS+ ignores them, so `.g\u{200c}it` is `.git` there), trailing dots and
//! spaces dropped (Windows and Samba strip them). NTFS short names (`GIT~1`) are not recognised.

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
                Rule::Name(name) => folded.iter().any(|c| c == name),
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

/// A component as a case-insensitive, normalising filesystem would compare it.
fn fold(component: &str) -> String {
    let kept: String = component
        .chars()
        .filter(|c| !is_default_ignorable(*c))
        .flat_map(char::to_lowercase)
        .collect();
    kept.trim_end_matches(['.', ' ']).to_owned()
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
        ] {
            assert!(refused(&p, raw), "{raw:?}");
        }
        for raw in [".github/ci.yml", "git/config", ".gitignore", "a.git.py"] {
            assert!(!refused(&p, raw), "{raw:?}");
        }
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
