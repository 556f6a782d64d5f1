//! Who may call writ: the bearer-key layer applied to the whole router, so a route added later
//! is protected without anyone remembering to (only [`OPEN_PATHS`] are exempt).
//!
//! Keys come from `WRIT_API_KEYS` (hashes in the configuration) and from the store (`writ keys
//! create`). Auth is on as soon as either holds a key; once the store has issued one it stays on,
//! so revoking the last key locks the door instead of opening it. A found key's id goes into the
//! request as [`Caller`] (and from there into the audit log); the key itself is never logged.
//!
//! Each key has [`Scopes`]. The route table says what each route requires
//! ([`crate::routes::Access`]); a key without it is refused here with 403 `insufficient_scope`.
//! The tool routes (`/tools/call`, `/mcp`) require the scope of the tool called, which only the
//! tool dispatcher knows: it checks [`Grant::scopes`] itself. The scope that allowed a request
//! goes into the request as [`Grant`] and from there onto its audit record.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use writ_core::keys::{PresentedKey, Scope, Scopes};

use crate::error::{ApiError, ErrorCode};
use crate::routes::{Access, access_of};
use crate::state::AppState;

/// Probes that load balancers and orchestrators call without credentials.
// `/` is the dashboard's page: it holds no data, and asks the person for a key before it reads any.
pub const OPEN_PATHS: [&str; 3] = ["/", "/healthz", "/readyz"];

/// The key id of an authenticated caller, as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub String);

/// What an authenticated caller's key may do, as a request extension beside [`Caller`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Every scope the key holds.
    pub scopes: Scopes,
    /// The scope the route required, which the key held; `None` on the tool routes, where the
    /// tool called decides.
    pub scope: Option<Scope>,
}

/// Who called and which scope allowed it, for a handler that records the request: both `None`
/// while auth is off.
pub struct AuditedCaller {
    pub caller: Option<String>,
    pub scope: Option<Scope>,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for AuditedCaller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self {
            caller: parts.extensions.get::<Caller>().map(|c| c.0.clone()),
            scope: parts.extensions.get::<Grant>().and_then(|g| g.scope),
        })
    }
}

/// Whose jobs, events and operations a caller may see: those of its own key, or everyone's
/// while auth is off and for a key with the `admin` scope. Records of other keys are answered as
/// absent (404), so a key learns nothing of the others' work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    /// `None`: sees everything.
    own: Option<String>,
}

impl Viewer {
    /// `caller`: the key id (`None` while auth is off); a keyed caller whose scopes are not
    /// known sees only its own.
    pub fn new(caller: Option<&str>, scopes: Option<Scopes>) -> Self {
        let admin = scopes.is_some_and(|s| s.contains(Scope::Admin));
        Self {
            own: caller.filter(|_| !admin).map(str::to_string),
        }
    }

    /// The key whose records only are visible; `None`: all are.
    pub fn only(&self) -> Option<&str> {
        self.own.as_deref()
    }

    /// Whether a record made by `caller` (`None`: without a key) is visible.
    pub fn sees(&self, caller: Option<&str>) -> bool {
        self.own.as_deref().is_none_or(|own| caller == Some(own))
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Viewer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let caller = parts.extensions.get::<Caller>().map(|c| c.0.as_str());
        let scopes = parts.extensions.get::<Grant>().map(|g| g.scopes);
        Ok(Self::new(caller, scopes))
    }
}

/// The 403 for a key that lacks `needed`: names the scope and what the key holds, never the key.
pub fn insufficient_scope(needed: Scope, held: Scopes) -> ApiError {
    let held_text = if held == Scopes::EMPTY {
        "none".to_string()
    } else {
        held.to_string()
    };
    ApiError::new(
        ErrorCode::InsufficientScope,
        format!(
            "this call needs the `{needed}` scope; the API key has: {held_text} (scopes are set when a key is issued: `writ keys create --scopes`)"
        ),
    )
    .with_details(serde_json::json!({
        "required_scope": needed.as_str(),
        "key_scopes": held.iter().map(Scope::as_str).collect::<Vec<_>>(),
    }))
}

/// Whether auth is on. "On" is remembered for good (keys are never deleted, only revoked);
/// "off" is trusted for `OFF_RECHECK` (2 s), so a key made with `writ keys create` on a running
/// server takes effect within that, without a query per request. While the store cannot be
/// asked, "off" holds for `WRIT_AUTH_FAIL_CLOSED_AFTER_SECS` after its last answer, then every
/// request is refused (503) until the store answers again.
#[derive(Debug)]
pub struct AuthSwitch {
    on: AtomicBool,
    /// When the store last said it holds no key.
    off_checked: Mutex<Option<Instant>>,
}

/// How long a "no keys" answer from the store is trusted.
const OFF_RECHECK: Duration = Duration::from_secs(2);

impl AuthSwitch {
    /// `on`: keys are configured at start-up; otherwise the store was just asked and had none.
    pub fn new(on: bool) -> Self {
        Self {
            on: AtomicBool::new(on),
            off_checked: Mutex::new((!on).then(Instant::now)),
        }
    }

    /// Whether auth is known to be on, without asking the store.
    pub fn known_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    async fn is_on(&self, state: &AppState) -> Result<bool, ApiError> {
        if self.on.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let last_off = *self
            .off_checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last_off.is_some_and(|at| at.elapsed() < OFF_RECHECK) {
            return Ok(false);
        }
        match state.store.any_keys().await {
            Ok(true) => {
                self.on.store(true, Ordering::Relaxed);
                Ok(true)
            }
            Ok(false) => {
                *self
                    .off_checked
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
                Ok(false)
            }
            // A short outage keeps the last "no keys" answer, so the routes that need no database
            // keep working. A long one does not: a key may have been issued meanwhile by a
            // process that could reach the store, and an open door is the wrong way to fail.
            Err(e)
                if last_off.is_some_and(|at| {
                    at.elapsed() < state.settings.edge.auth_fail_closed_after
                }) =>
            {
                tracing::warn!(error = %e, "cannot re-check for API keys; auth stays off as last seen");
                Ok(false)
            }
            Err(e) if last_off.is_some() => {
                tracing::error!(error = %e, "cannot re-check for API keys; refusing requests until the store answers");
                let mut refusal = ApiError::new(
                    ErrorCode::AuthUnavailable,
                    format!(
                        "cannot tell whether API keys are required: the audit store that holds them has not answered for over {}s (WRIT_AUTH_FAIL_CLOSED_AFTER_SECS); retry later",
                        state.settings.edge.auth_fail_closed_after.as_secs()
                    ),
                );
                refusal.retry_after_secs = Some(5);
                Err(refusal)
            }
            Err(e) => Err(ApiError::audit_unavailable(&e)),
        }
    }
}

/// Refuses a request without a valid key (when keys are configured), then takes one request
/// from the key's rate bucket.
pub async fn require_key(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    // Copied out: a request (its body) is not Sync, so it cannot be borrowed across the awaits.
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match authenticate(&state, authorization.as_deref()).await {
        Ok(Some((caller, scopes))) => {
            if let Err(e) = state.limits.take_request(&caller.0).await {
                return e.into_response();
            }
            // The layer runs after routing, so the matched route is known; a request no route
            // matches (404, 405) needs no scope to be told so.
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .and_then(|p| access_of(req.method().as_str(), p.as_str()));
            let scope = match route {
                Some(Access::Scope(needed)) if !scopes.contains(needed) => {
                    tracing::info!(key_id = %caller.0, required = %needed, held = %scopes, "refused a call outside the key's scopes");
                    return insufficient_scope(needed, scopes).into_response();
                }
                Some(Access::Scope(needed)) => Some(needed),
                _ => None,
            };
            req.extensions_mut().insert(caller);
            req.extensions_mut().insert(Grant { scopes, scope });
            next.run(req).await
        }
        Ok(None) => next.run(req).await,
        Err(e) => challenge(e.into_response()),
    }
}

/// Whether a caller may see the probes' details (paths, error text): anyone while auth is off
/// (writ then answers loopback host names only), else only the holder of a valid key.
pub async fn may_see_details(state: &AppState, authorization: Option<&str>) -> bool {
    // `Ok(None)` is "auth is off"; a missing or wrong key, or a store that cannot tell, is `Err`.
    authenticate(state, authorization).await.is_ok()
}

/// The caller and its key's scopes; `None` while auth is off.
async fn authenticate(
    state: &AppState,
    authorization: Option<&str>,
) -> Result<Option<(Caller, Scopes)>, ApiError> {
    if !state.auth.is_on(state).await? {
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
        Some(k) => presented.matches(&k.secret_sha256).then_some(k.scopes),
        None => match state
            .store
            .find_key(&presented.id)
            .await
            .map_err(|e| ApiError::audit_unavailable(&e))?
        {
            Some(record) => (record.revoked_at.is_none()
                && presented.matches(&record.secret_sha256))
            .then_some(record.scopes),
            None => None,
        },
    };
    let Some(scopes) = valid else {
        tracing::info!(key_id = %presented.id, "refused an unknown, revoked or wrong API key");
        return Err(unauthorized(
            "the API key is not valid (unknown, revoked or wrong)",
        ));
    };
    Ok(Some((Caller(presented.id), scopes)))
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
