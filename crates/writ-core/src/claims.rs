//! Claims: advisory leases a workspace takes on paths of its repository, so that the other
//! workspaces of the same repository (other agents' git worktrees, the repository's own
//! workspace) learn before they write that someone means to change them.
//!
//! A claim is a set of globs relative to the repository's root ([`ClaimPaths`]: `src/**/*.py`,
//! `a.py`), held by one workspace until it is released or its TTL runs out. Claims are kept by
//! the store ([`ClaimStore`]), so every replica sees them; which repository a workspace belongs
//! to is the server's to say (its `repository` key is given with each claim). A write that
//! respects claims is refused when another workspace of its repository holds a live claim on one
//! of its paths ([`ClaimStore::claims_on`]); nothing here refuses anything by itself.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use globset::{Glob, GlobBuilder, GlobMatcher};
use uuid::Uuid;

use crate::path::RepoPath;
use crate::store::StoreError;

/// How long a claim lasts when the request does not say.
pub const DEFAULT_TTL_SECS: u64 = 3_600;
/// The longest a claim may last: seven days.
pub const MAX_TTL_SECS: u64 = 7 * 24 * 3_600;
/// Most globs one claim holds.
pub const MAX_PATHS: usize = 100;
/// Most live claims one workspace holds at once.
pub const MAX_LIVE_CLAIMS: usize = 100;

/// Why a claim was refused before anything was stored: the field, and what it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ClaimRefusal {
    pub field: String,
    pub message: String,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> ClaimRefusal {
    ClaimRefusal {
        field: field.into(),
        message: message.into(),
    }
}

/// The globs a claim covers, checked: 1 to [`MAX_PATHS`], each a normalised path relative to
/// the repository's root (no leading `/`, no `.` or `..` component, no empty one) that compiles
/// as a glob. `*` and `?` stay within one path component; `**` crosses them (`src/**` is
/// everything beneath `src`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPaths(Vec<String>);

impl ClaimPaths {
    /// Checks the globs as sent; the refusal names `paths[i]` and the rule it breaks.
    pub fn parse(paths: Vec<String>) -> Result<Self, ClaimRefusal> {
        if paths.is_empty() || paths.len() > MAX_PATHS {
            return Err(refuse(
                "paths",
                format!("between 1 and {MAX_PATHS} globs, got {}", paths.len()),
            ));
        }
        for (i, pattern) in paths.iter().enumerate() {
            check_pattern(pattern).map_err(|why| refuse(format!("paths[{i}]"), why))?;
        }
        let mut unique: Vec<String> = Vec::with_capacity(paths.len());
        for pattern in paths {
            if !unique.contains(&pattern) {
                unique.push(pattern);
            }
        }
        Ok(Self(unique))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

/// Why `pattern` cannot be a claim's glob, if it cannot.
fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!(
            "'{pattern}' must be relative to the repository's root, without an empty, '.' or '..' component and without a leading or trailing '/' (e.g. \"src/**/*.py\")"
        ));
    }
    // Lexically a path: not absolute, no control characters, within the length limits.
    RepoPath::parse(pattern).map_err(|e| format!("'{pattern}': {e}"))?;
    glob(pattern).map_err(|e| format!("'{pattern}' is not a glob: {}", e.kind()))?;
    Ok(())
}

fn glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// A claim as asked for, checked: its globs and how long it lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewClaim {
    pub paths: ClaimPaths,
    pub ttl: Duration,
}

impl NewClaim {
    /// `ttl_secs`: 1 to [`MAX_TTL_SECS`]; [`DEFAULT_TTL_SECS`] when `None`.
    pub fn parse(paths: Vec<String>, ttl_secs: Option<u64>) -> Result<Self, ClaimRefusal> {
        let ttl_secs = ttl_secs.unwrap_or(DEFAULT_TTL_SECS);
        if !(1..=MAX_TTL_SECS).contains(&ttl_secs) {
            return Err(refuse(
                "ttl_secs",
                format!("between 1 and {MAX_TTL_SECS} seconds (7 days), got {ttl_secs}"),
            ));
        }
        Ok(Self {
            paths: ClaimPaths::parse(paths)?,
            ttl: Duration::from_secs(ttl_secs),
        })
    }

    /// The claim `workspace` of `repository` holds from `now`, made by the key `created_by`.
    pub fn held_by(
        self,
        workspace: &str,
        repository: &str,
        created_by: Option<String>,
        now: DateTime<Utc>,
    ) -> Claim {
        // Microseconds: what both backends keep, so the claim reads back as it was made.
        let now = DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now);
        let ttl = chrono::TimeDelta::from_std(self.ttl).unwrap_or(chrono::TimeDelta::MAX);
        Claim {
            id: Uuid::now_v7(),
            repository: repository.to_owned(),
            workspace: workspace.to_owned(),
            paths: self.paths.0,
            created_at: now,
            expires_at: now
                .checked_add_signed(ttl)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
            created_by,
        }
    }
}

/// One claim as it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub id: Uuid,
    /// The repository of the holding workspace, as the server names it: claims are seen by
    /// every workspace of the same repository.
    pub repository: String,
    /// The workspace holding it.
    pub workspace: String,
    /// Its globs, relative to the repository's root.
    pub paths: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The id of the key that made it; `None` when auth is off.
    pub created_by: Option<String>,
}

impl Claim {
    /// Whether the claim still holds at `now`.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.expires_at > now
    }

    /// The first of the claim's globs that covers `path`.
    pub fn covering(&self, path: &str) -> Option<&str> {
        self.paths
            .iter()
            .find(|pattern| matcher(pattern).is_some_and(|m| m.is_match(path)))
            .map(String::as_str)
    }
}

/// A stored glob, compiled; one that no longer compiles (it was checked when it was stored)
/// covers nothing but itself.
fn matcher(pattern: &str) -> Option<GlobMatcher> {
    glob(pattern)
        .or_else(|_| Glob::new(&globset::escape(pattern)))
        .ok()
        .map(|g| g.compile_matcher())
}

/// A path another workspace has claimed: the path written, and the claim with the glob that
/// covers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedPath {
    pub path: String,
    pub pattern: String,
    pub claim: Claim,
}

/// Claims, kept by the audit store (PostgreSQL or SQLite) so that every replica sees them.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Records `claim`, and forgets the claims of its repository that expired by its
    /// `created_at`.
    async fn insert_claim(&self, claim: &Claim) -> Result<(), StoreError>;
    /// The claims of `repository` live at `now` (expiring after it), oldest first.
    async fn live_claims(
        &self,
        repository: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Claim>, StoreError>;
    /// Releases the claim `id` if `workspace` holds it and it is live at `now`; `false` when
    /// it holds no such claim.
    async fn release_claim(
        &self,
        workspace: &str,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Releases every claim `workspace` holds; how many of them were live at `now`.
    async fn release_claims(&self, workspace: &str, now: DateTime<Utc>) -> Result<u64, StoreError>;

    /// The paths of `paths` that a live claim of another workspace of `repository` than
    /// `workspace` covers at `now`, each with the oldest such claim, in the order of `paths`.
    async fn claims_on(
        &self,
        repository: &str,
        workspace: &str,
        paths: &[&str],
        now: DateTime<Utc>,
    ) -> Result<Vec<ClaimedPath>, StoreError> {
        let theirs: Vec<Claim> = self
            .live_claims(repository, now)
            .await?
            .into_iter()
            .filter(|c| c.workspace != workspace)
            .collect();
        Ok(claimed(&theirs, paths))
    }
}

/// The paths of `paths` one of `claims` covers, each with the first claim that does.
pub fn claimed(claims: &[Claim], paths: &[&str]) -> Vec<ClaimedPath> {
    paths
        .iter()
        .filter_map(|path| {
            claims.iter().find_map(|claim| {
                claim.covering(path).map(|pattern| ClaimedPath {
                    path: (*path).to_owned(),
                    pattern: pattern.to_owned(),
                    claim: claim.clone(),
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(paths: &[&str]) -> Claim {
        NewClaim::parse(paths.iter().map(|p| (*p).to_owned()).collect(), Some(60))
            .unwrap()
            .held_by("a", "/srv/repo", None, Utc::now())
    }

    #[test]
    fn a_star_stays_within_a_directory_and_a_double_star_crosses_them() {
        let c = claim(&["src/*.py", "docs/**", "a.py"]);
        assert_eq!(c.covering("src/a.py"), Some("src/*.py"));
        assert_eq!(c.covering("src/pkg/a.py"), None);
        assert_eq!(c.covering("docs/x/y.md"), Some("docs/**"));
        assert_eq!(c.covering("a.py"), Some("a.py"));
        assert_eq!(
            c.covering("b/a.py"),
            None,
            "relative to the repository's root"
        );
        let deep = claim(&["src/**/*.py"]);
        assert!(deep.covering("src/a.py").is_some() && deep.covering("src/x/y/a.py").is_some());
    }

    #[test]
    fn bad_globs_and_ttls_are_refused_naming_the_field_and_the_limit() {
        let parse = |paths: &[&str], ttl| {
            NewClaim::parse(paths.iter().map(|p| (*p).to_owned()).collect(), ttl).unwrap_err()
        };
        for (paths, ttl, field, says) in [
            (&[][..], None, "paths", "between 1 and 100"),
            (&["/etc/passwd"][..], None, "paths[0]", "relative"),
            (&["a.py", "../x"][..], None, "paths[1]", "'..'"),
            (&["./a.py"][..], None, "paths[0]", "'.'"),
            (&["src/"][..], None, "paths[0]", "trailing"),
            (&["src/[a.py"][..], None, "paths[0]", "not a glob"),
            (&["a\u{7}.py"][..], None, "paths[0]", "control character"),
            (&["a.py"][..], Some(0), "ttl_secs", "between 1 and 604800"),
            (&["a.py"][..], Some(MAX_TTL_SECS + 1), "ttl_secs", "604800"),
        ] {
            let err = parse(paths, ttl);
            assert_eq!(err.field, field, "{paths:?}: {err}");
            assert!(err.message.contains(says), "{paths:?}: {err}");
        }
        let many: Vec<String> = (0..=MAX_PATHS).map(|i| format!("f{i}.py")).collect();
        let err = NewClaim::parse(many, None).unwrap_err();
        assert_eq!(err.field, "paths");
        assert!(err.message.contains("got 101"), "{err}");
    }

    #[test]
    fn a_claim_lasts_its_ttl_or_an_hour() {
        let now = Utc::now();
        let c = NewClaim::parse(vec!["a.py".into()], None)
            .unwrap()
            .held_by("a", "/r", None, now);
        assert_eq!((c.expires_at - c.created_at).num_seconds(), 3_600);
        assert!(c.is_live(now) && !c.is_live(c.expires_at));
    }

    #[test]
    fn claimed_paths_keep_the_order_of_the_paths_and_name_the_first_claim() {
        let older = claim(&["src/**"]);
        let newer = claim(&["src/a.py"]);
        let found = claimed(&[older.clone(), newer], &["README", "src/b.py", "src/a.py"]);
        let got: Vec<(&str, &str, Uuid)> = found
            .iter()
            .map(|c| (c.path.as_str(), c.pattern.as_str(), c.claim.id))
            .collect();
        assert_eq!(
            got,
            [
                ("src/b.py", "src/**", older.id),
                ("src/a.py", "src/**", older.id)
            ]
        );
    }
}
