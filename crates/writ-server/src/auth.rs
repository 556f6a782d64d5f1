//! Who may call writ: the bearer-key layer applied to the whole router, so a route added later
//! is protected without anyone remembering to (only the routes the route table declares
//! [`Access::Open`] are exempt).
//!
//! Keys come from `WRIT_API_KEYS` (hashes in the configuration) and from the store (`writ keys
//! create`). Auth is on as soon as either holds a key; once the store has issued one it stays on,
//! so revoking the last key locks the door instead of opening it. A found key's id goes into the
//! request as [`Caller`] (and from there into the audit log); the key itself is never logged.
//!
//! Each key has [`Scopes`]. The route table says what each route requires
//! ([`Access`], read from the [`crate::access::AccessTable`] made from it); a key without it is
//! refused here with 403 `insufficient_scope`.
//! The tool routes (`/tools/call`, `/mcp`) require the scope of the tool called, which only the
//! tool dispatcher knows: it checks [`Grant::scopes`] itself. The scope that allowed a request
//! goes into the request as [`Grant`] and from there onto its audit record.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use writ_core::keys::{PresentedKey, Scopes};

use crate::access::{Access, Caller, Grant, KeyWorkspaces, insufficient_scope};
use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Refuses a request without a valid key (when keys are configured), then takes one request
/// from the key's rate bucket.
pub async fn require_key(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if state.access.is_open(req.uri().path()) {
        return next.run(req).await;
    }
    // Copied out: a request (its body) is not Sync, so it cannot be borrowed across the awaits.
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match authenticate(&state, authorization.as_deref()).await {
        Ok(Some((caller, scopes, bound))) => {
            if let Err(e) = state.limits.take_request(&caller.0).await {
                return e.into_response();
            }
            // The layer runs after routing, so the matched route is known; a request no route
            // matches (404, 405) needs no scope to be told so.
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .and_then(|p| state.access.of(req.method().as_str(), p.as_str()));
            let scope = match route {
                Some(Access::Scope(needed)) if !scopes.contains(needed) => {
                    tracing::info!(key_id = %caller.0, required = %needed, held = %scopes, "refused a call outside the key's scopes");
                    return insufficient_scope(needed, scopes).into_response();
                }
                Some(Access::Scope(needed)) => Some(needed),
                _ => None,
            };
            if let Some(names) = bound {
                let bound = KeyWorkspaces(names.into());
                // A route without a workspace in its path is in `default`; the workspace
                // routes check the name they are given, the tool routes the `workspace`
                // argument of each call.
                let matched = req
                    .extensions()
                    .get::<MatchedPath>()
                    .map(|p| p.as_str().to_owned());
                let matched = matched.as_deref().unwrap_or_default();
                if EVERY_WORKSPACE.contains(&matched) {
                    return ApiError::new(
                        ErrorCode::InsufficientScope,
                        format!(
                            "{matched} reports on every workspace; a key bound to workspaces cannot read it (use a key issued without --workspace)"
                        ),
                    )
                    .into_response();
                }
                let in_default = !(matched.starts_with("/workspaces")
                    || matched == "/mcp"
                    || matched.starts_with("/tools")
                    || OUTSIDE_WORKSPACES.contains(&matched));
                if in_default
                    && !bound.allows(writ_core::workspace_registry::WorkspaceName::DEFAULT)
                {
                    return ApiError::not_found("no workspace named 'default'")
                        .with_field("name")
                        .into_response();
                }
                req.extensions_mut().insert(bound);
            }
            if let Some(workspace) = workspace_of(&req)
                && req
                    .extensions()
                    .get::<KeyWorkspaces>()
                    .is_none_or(|b| b.allows(&workspace))
                && let Err(e) = state.limits.take_workspace_request(&workspace).await
            {
                return e.into_response();
            }
            req.extensions_mut().insert(caller);
            req.extensions_mut().insert(Grant { scopes, scope });
            next.run(req).await
        }
        Ok(None) => {
            if let Some(workspace) = workspace_of(&req)
                && let Err(e) = state.limits.take_workspace_request(&workspace).await
            {
                return e.into_response();
            }
            next.run(req).await
        }
        Err(e) => challenge(e.into_response()),
    }
}

/// Routes in no workspace that a key bound to workspaces may call whichever they are: the spec,
/// and its own key's spend and model statistics (the handlers show a key only its own).
const OUTSIDE_WORKSPACES: [&str; 3] = ["/openapi.yaml", "/keys/{id}/spend", "/stats/models"];

/// Routes that report on every workspace at once (their names, every key's spend): a key bound
/// to workspaces must not learn that others exist, so it may not read them.
const EVERY_WORKSPACE: [&str; 1] = ["/metrics"];

/// The workspace a request is made in, for its rate limit: the name in `/workspaces/{name}/…`,
/// `default` for a route of [`crate::routes::WORKSPACE_ROUTES`] without one; `None` for every
/// other route (managing workspaces and keys, metrics, the spec), and for the tool routes (`/mcp`,
/// `/tools…`), whose workspace is each call's argument: each call draws on its bucket there
/// (`crate::tools::call`).
fn workspace_of(req: &Request) -> Option<String> {
    let matched = req.extensions().get::<MatchedPath>()?.as_str();
    if matched == "/workspaces/{name}/{*rest}" {
        let after = req.uri().path().strip_prefix("/workspaces/")?;
        // Decoded as the router decodes the `{name}` it serves (`%61lpha` is `alpha`), so a
        // spelling of the name never draws on a bucket of its own.
        let segment = after.split('/').next()?;
        return percent_encoding::percent_decode_str(segment)
            .decode_utf8()
            .ok()
            .map(|name| name.into_owned());
    }
    crate::routes::WORKSPACE_ROUTES
        .contains(&(req.method().as_str(), matched))
        .then(|| writ_core::workspace_registry::WorkspaceName::DEFAULT.to_owned())
}

/// Whether a caller may see the probes' details (paths, error text): anyone while auth is off
/// (writ then answers loopback host names only), else only the holder of a valid key.
pub async fn may_see_details(state: &AppState, authorization: Option<&str>) -> bool {
    // `Ok(None)` is "auth is off"; a missing or wrong key, or a store that cannot tell, is `Err`.
    authenticate(state, authorization).await.is_ok()
}

/// The caller, its key's scopes and the workspaces it is bound to (`None`: all); `None` while
/// auth is off.
async fn authenticate(
    state: &AppState,
    authorization: Option<&str>,
) -> Result<Option<(Caller, Scopes, Option<Vec<String>>)>, ApiError> {
    if !state
        .auth
        .is_on(
            state.store.as_ref(),
            state.settings.edge.auth_fail_closed_after,
        )
        .await?
    {
        return Ok(None);
    }
    let presented = authorization
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        .and_then(PresentedKey::parse)
        .ok_or_else(|| {
            unauthorized("send an API key as `Authorization: Bearer writ_<id>_<secret>`")
        })?;

    let configured = state
        .settings
        .guard
        .api_keys
        .iter()
        .find(|k| k.id == presented.id);
    let valid = match configured {
        // A configured key may use every workspace.
        Some(k) => presented
            .matches(&k.secret_sha256)
            .then_some((k.scopes, None)),
        None => match state
            .store
            .find_key(&presented.id)
            .await
            .map_err(|e| ApiError::audit_unavailable(&e))?
        {
            Some(record) => (record.revoked_at.is_none()
                && presented.matches(&record.secret_sha256))
            .then_some((record.scopes, record.workspaces)),
            None => None,
        },
    };
    let Some((scopes, bound)) = valid else {
        tracing::info!(key_id = %presented.id, "refused an unknown, revoked or wrong API key");
        return Err(unauthorized(
            "the API key is not valid (unknown, revoked or wrong)",
        ));
    };
    Ok(Some((Caller(presented.id), scopes, bound)))
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, message).with_field("Authorization")
}

/// Adds `WWW-Authenticate` to a 401 answer (RFC 6750).
fn challenge(mut resp: Response) -> Response {
    if resp.status() == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"writ\""),
        );
    }
    resp
}

/// The scope check of [`require_key`] again, for a route reached inside a named workspace
/// (`/workspaces/{name}/…`): the key was checked on the way in, by a route that could not know
/// which route inside it would answer; this one does.
pub async fn require_scope_within(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(grant) = req.extensions().get::<Grant>().cloned() else {
        // Auth is off.
        return next.run(req).await;
    };
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|p| state.access.of(req.method().as_str(), p.as_str()));
    if let Some(Access::Scope(needed)) = route {
        if !grant.scopes.contains(needed) {
            return insufficient_scope(needed, grant.scopes).into_response();
        }
        req.extensions_mut().insert(Grant {
            scopes: grant.scopes,
            scope: Some(needed),
        });
    }
    next.run(req).await
}
