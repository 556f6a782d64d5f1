//! Claims in the API's words: making, listing and releasing a workspace's claims
//! (`/workspaces/{name}/claims`), and the refusal (409 `claimed`) of a write into a path another
//! workspace of the same repository has claimed, for every surface that writes — batches
//! (`options.respect_claims`), direct writes, edits and write sessions (`WRIT_RESPECT_CLAIMS`).
//!
//! The rules are `writ_core::claims`; which workspaces share a repository is
//! [`super::repository`]. A claim held by a workspace the caller's key may not use is shown, and
//! refuses, without that workspace's name or its key.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use writ_core::claims::{
    Claim, ClaimedPath, DEFAULT_TTL_SECS, MAX_LIVE_CLAIMS, MAX_PATHS, MAX_TTL_SECS, NewClaim,
};

use super::opened::Workspaces;
use super::repository::repository_named;
use super::{invalid, unknown};
use crate::access::{KeyWorkspaces, may_use};
use crate::config::Settings;
use crate::error::{ApiError, ErrorCode, store_error};

/// `POST /workspaces/{name}/claims`: the paths claimed, and for how long.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ClaimCreate")]
pub struct MakeClaim {
    /// Globs relative to the repository's root (`src/**/*.py`, `a.py`): `*` and `?` stay within
    /// a directory, `**` crosses them. No leading `/`, no `.` or `..` component.
    #[schemars(length(min = 1, max = MAX_PATHS))]
    pub paths: Vec<String>,
    /// How long the claim holds unless it is released; default 3600 (an hour), at most 604800
    /// (7 days).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_TTL_SECS), extend("default" = DEFAULT_TTL_SECS))]
    pub ttl_secs: Option<u64>,
}

/// One claim as the API shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ClaimView {
    pub id: Uuid,
    /// The workspace holding it; absent when the key may not use that workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Whether the workspace the claims were asked of holds it.
    pub own: bool,
    /// Its globs, relative to the repository's root.
    pub paths: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The id of the key that made it; absent when auth is off, or when the key may not use the
    /// workspace holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// `GET /workspaces/{name}/claims`'s answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ClaimList {
    /// The live claims of every workspace of the repository, the asking one's included, oldest
    /// first.
    pub claims: Vec<ClaimView>,
}

/// What a release did.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ReleasedClaims {
    /// How many live claims were released.
    pub released: u64,
}

/// One path of a refused write, as `details.claims` of a 409 `claimed` lists it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ClaimedPathView {
    /// The path the write would have changed.
    pub path: String,
    /// The claim's glob that covers it.
    pub pattern: String,
    pub claim_id: Uuid,
    /// The workspace holding the claim; absent when the key may not use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    pub expires_at: DateTime<Utc>,
}

fn view(claim: Claim, asked_in: &str, named: bool) -> ClaimView {
    ClaimView {
        id: claim.id,
        own: claim.workspace == asked_in,
        workspace: named.then_some(claim.workspace),
        paths: claim.paths,
        created_at: claim.created_at,
        expires_at: claim.expires_at,
        created_by: claim.created_by.filter(|_| named),
    }
}

/// The repository of the workspace `name`, or 404.
async fn repository(workspaces: &Workspaces, name: &str) -> Result<String, ApiError> {
    repository_named(workspaces, name)
        .await?
        .ok_or_else(|| unknown(name))
}

/// Makes a claim of the workspace `name` on `request.paths`, made by the key `caller`.
pub async fn make(
    workspaces: &Workspaces,
    name: &str,
    request: MakeClaim,
    caller: Option<&str>,
) -> Result<ClaimView, ApiError> {
    let new = NewClaim::parse(request.paths, request.ttl_secs)
        .map_err(|e| invalid(&e.field, e.to_string()))?;
    let repository = repository(workspaces, name).await?;
    let now = Utc::now();
    let held = workspaces
        .store
        .live_claims(&repository, now)
        .await
        .map_err(store_error)?
        .iter()
        .filter(|c| c.workspace == name)
        .count();
    if held >= MAX_LIVE_CLAIMS {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "paths: workspace '{name}' holds {held} live claims, the limit is {MAX_LIVE_CLAIMS}; release some (DELETE /workspaces/{name}/claims/{{id}}) or claim more paths in one"
            ),
        )
        .with_field("paths"));
    }
    let claim = new.held_by(name, &repository, caller.map(str::to_owned), now);
    workspaces
        .store
        .insert_claim(&claim)
        .await
        .map_err(store_error)?;
    Ok(view(claim, name, true))
}

/// The live claims of every workspace of the repository `name` belongs to, each named only
/// when the key (`bound`: the workspaces it may use) may use its workspace.
pub async fn list(
    workspaces: &Workspaces,
    name: &str,
    bound: Option<&KeyWorkspaces>,
) -> Result<ClaimList, ApiError> {
    let repository = repository(workspaces, name).await?;
    let claims = workspaces
        .store
        .live_claims(&repository, Utc::now())
        .await
        .map_err(store_error)?;
    Ok(ClaimList {
        claims: claims
            .into_iter()
            .map(|c| {
                let named = may_use(bound, &c.workspace);
                view(c, name, named)
            })
            .collect(),
    })
}

/// Releases the claim `id` of the workspace `name`; 404 when it holds no live claim of that id
/// (another workspace's claims are theirs to release).
pub async fn release(
    workspaces: &Workspaces,
    name: &str,
    id: &str,
) -> Result<ReleasedClaims, ApiError> {
    repository(workspaces, name).await?;
    let no_claim = || {
        ApiError::not_found(format!(
            "workspace '{name}' holds no live claim '{id}' (released, expired, or another workspace's)"
        ))
        .with_field("id")
    };
    let id = Uuid::parse_str(id).map_err(|_| no_claim())?;
    if workspaces
        .store
        .release_claim(name, id, Utc::now())
        .await
        .map_err(store_error)?
    {
        Ok(ReleasedClaims { released: 1 })
    } else {
        Err(no_claim())
    }
}

/// Releases every claim the workspace `name` holds.
pub async fn release_all(workspaces: &Workspaces, name: &str) -> Result<ReleasedClaims, ApiError> {
    repository(workspaces, name).await?;
    let released = workspaces
        .store
        .release_claims(name, Utc::now())
        .await
        .map_err(store_error)?;
    Ok(ReleasedClaims { released })
}

/// Whether a write respects claims: as it asked (a batch's `options.respect_claims`), else as
/// the server is set (`WRIT_RESPECT_CLAIMS`). An explicit `false` writes over claims even where
/// the server respects them.
pub fn respected(asked: Option<bool>, settings: &Settings) -> bool {
    asked.unwrap_or(settings.respect_claims)
}

/// Refuses, with 409 `claimed`, a write in the workspace `workspace` of `paths` (each with the
/// field that named it) when another workspace of its repository holds a live claim covering
/// one of them. The message and `details.claims` name the path, the glob, the claim and when it
/// expires, and the holding workspace only when the key `caller` may use it.
pub async fn refuse_claimed(
    workspaces: &Workspaces,
    workspace: &str,
    paths: &[(&str, &str)],
    caller: Option<&str>,
) -> Result<(), ApiError> {
    if paths.is_empty() {
        return Ok(());
    }
    // A workspace deleted meanwhile has no claims to respect; its write is refused elsewhere.
    let Some(repository) = repository_named(workspaces, workspace).await? else {
        return Ok(());
    };
    let written: Vec<&str> = paths.iter().map(|(path, _)| *path).collect();
    let claimed = workspaces
        .store
        .claims_on(&repository, workspace, &written, Utc::now())
        .await
        .map_err(store_error)?;
    let Some(first) = claimed.first() else {
        return Ok(());
    };
    let bound = match caller {
        Some(key) => workspaces
            .store
            .find_key(key)
            .await
            .map_err(store_error)?
            .and_then(|k| k.workspaces),
        None => None,
    };
    let named = |claim: &Claim| {
        bound
            .as_ref()
            .is_none_or(|names| names.contains(&claim.workspace))
    };
    let field = paths
        .iter()
        .find(|(path, _)| *path == first.path)
        .map_or("path", |(_, field)| *field);
    Err(ApiError::new(
        ErrorCode::Claimed,
        claimed_message(field, first, named(&first.claim), claimed.len()),
    )
    .with_field(field)
    .with_details(serde_json::json!({
        "claims": claimed
            .iter()
            .map(|c| ClaimedPathView {
                path: c.path.clone(),
                pattern: c.pattern.clone(),
                claim_id: c.claim.id,
                workspace: named(&c.claim).then(|| c.claim.workspace.clone()),
                expires_at: c.claim.expires_at,
            })
            .collect::<Vec<_>>(),
    })))
}

fn claimed_message(field: &str, first: &ClaimedPath, named: bool, count: usize) -> String {
    let holder = if named {
        format!("workspace '{}'", first.claim.workspace)
    } else {
        "another workspace of this repository".to_owned()
    };
    let more = match count {
        1 => String::new(),
        n => format!(
            " ({} more claimed path{}: see details.claims)",
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
    };
    format!(
        "{field}: '{}' is claimed by {holder} until {} (glob '{}', claim {}){more}; nothing was written. Write it once the claim is released or has expired, or without respecting claims (a batch's options.respect_claims: false; the server's WRIT_RESPECT_CLAIMS)",
        first.path,
        first
            .claim
            .expires_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        first.pattern,
        first.claim.id,
    )
}
