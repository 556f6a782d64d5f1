//! What each route asks of its caller, and who the caller is once a key was checked: the one
//! declaration of which routes are open ([`Access`], given per route in the route table and
//! handed to the auth layer as an [`AccessTable`] at start-up), the caller's identity and grant
//! as request extensions ([`Caller`], [`Grant`]), whose records a caller may see ([`Viewer`]),
//! and whether keys are required at all ([`AuthSwitch`]). A leaf: the auth layer, the service
//! layer, the tools and the routes all read it; it reads none of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use writ_core::keys::{KeyStore, Scope, Scopes};

use crate::error::{ApiError, ErrorCode};

/// What a caller's key must hold for a route (checked by [`crate::auth::require_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No key at all: the probes and the dashboard's page (it holds no data, and asks the
    /// person for a key before it reads any).
    Open,
    /// A valid key with this scope.
    Scope(Scope),
    /// A valid key; the tool dispatcher then requires the scope of the tool called.
    PerTool,
}

/// `(method, axum path, access)` of every route, made from the route table at start-up.
#[derive(Debug, Clone, Default)]
pub struct AccessTable(Vec<(&'static str, &'static str, Access)>);

impl AccessTable {
    pub fn new(routes: impl IntoIterator<Item = (&'static str, &'static str, Access)>) -> Self {
        Self(routes.into_iter().collect())
    }

    /// The access a route requires, by method and matched axum path; `None` when no route has
    /// that method on that path (axum then answers 404 or 405). `HEAD` is served by the `GET`
    /// route.
    pub fn of(&self, method: &str, path: &str) -> Option<Access> {
        let method = if method == "HEAD" { "GET" } else { method };
        self.0
            .iter()
            .find(|(m, p, _)| *m == method && *p == path)
            .map(|(_, _, access)| *access)
    }

    /// Whether `path` is an open route's: answered without a key whatever the method, so that
    /// a wrong method on a probe is told 405, not asked for a key.
    pub fn is_open(&self, path: &str) -> bool {
        self.0
            .iter()
            .any(|(_, p, access)| *p == path && *access == Access::Open)
    }
}

/// The workspaces an authenticated caller's key may use, as a request extension; absent when
/// the key may use every workspace (or auth is off). A workspace it may not use answers 404,
/// as one that does not exist.
#[derive(Debug, Clone)]
pub struct KeyWorkspaces(pub std::sync::Arc<[String]>);

impl KeyWorkspaces {
    pub fn allows(&self, name: &str) -> bool {
        self.0.iter().any(|n| n == name)
    }
}

/// The workspace a request was made in, when its path named one (`/workspaces/{name}/…`): set
/// by [`crate::routes::workspaces::serve_within`] on the request it hands the routes inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InWorkspace(pub String);

/// Whether the request's key may use the workspace `name`.
pub fn may_use(bound: Option<&KeyWorkspaces>, name: &str) -> bool {
    bound.is_none_or(|b| b.allows(name))
}

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
/// while auth is off and for a key with the `admin` scope; and only in the workspaces its key
/// may use — in the one workspace its path names, if it names one. Records it may not see are
/// answered as absent (404), so a key learns nothing of the others' work.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Viewer {
    /// `None`: sees everything.
    own: Option<String>,
    /// The workspaces whose records are visible; `None`: every workspace's.
    workspaces: Option<Vec<String>>,
}

impl Viewer {
    /// `caller`: the key id (`None` while auth is off); a keyed caller whose scopes are not
    /// known sees only its own.
    pub fn new(caller: Option<&str>, scopes: Option<Scopes>) -> Self {
        let admin = scopes.is_some_and(|s| s.contains(Scope::Admin));
        Self {
            own: caller.filter(|_| !admin).map(str::to_string),
            workspaces: None,
        }
    }

    /// The same viewer, seeing only the records of `workspaces` (intersected with what it saw).
    pub fn within(mut self, workspaces: &[String]) -> Self {
        self.workspaces = Some(match self.workspaces {
            None => workspaces.to_vec(),
            Some(seen) => seen
                .into_iter()
                .filter(|w| workspaces.contains(w))
                .collect(),
        });
        self
    }

    /// The workspaces whose records only are visible; `None`: all are.
    pub fn workspaces(&self) -> Option<&[String]> {
        self.workspaces.as_deref()
    }

    /// Whether a record of the workspace `name` is visible.
    pub fn sees_workspace(&self, name: &str) -> bool {
        self.workspaces
            .as_ref()
            .is_none_or(|ws| ws.iter().any(|w| w == name))
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
        let mut viewer = Self::new(caller, scopes);
        if let Some(KeyWorkspaces(bound)) = parts.extensions.get::<KeyWorkspaces>() {
            viewer = viewer.within(bound);
        }
        if let Some(InWorkspace(name)) = parts.extensions.get::<InWorkspace>() {
            viewer = viewer.within(std::slice::from_ref(name));
        }
        Ok(viewer)
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
    .with_details(serde_json::json!(ScopeDetails {
        required_scope: needed,
        key_scopes: held.iter().collect(),
    }))
}

/// The `details` of a 403 `insufficient_scope`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeDetails {
    /// The scope the call needs.
    pub required_scope: Scope,
    /// Every scope the key holds.
    pub key_scopes: Vec<Scope>,
}

/// writ's error body as a key without the scope a call needs is answered it.
// The OpenAPI document's description of what `insufficient_scope` makes (through `ErrorBody`):
// a test reads that body back into this type, so the two cannot drift apart.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "InsufficientScope")]
pub struct InsufficientScopeBody {
    pub error: InsufficientScopeError,
}

/// The error: always `insufficient_scope`, and its `details`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InsufficientScopeError {
    pub code: InsufficientScopeCode,
    pub message: String,
    pub details: ScopeDetails,
}

// `ErrorCode::InsufficientScope` alone, so that reading a body with another code fails.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum InsufficientScopeCode {
    InsufficientScope,
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

    /// Whether auth is on now, asking `keys` when a "no keys" answer is older than
    /// `OFF_RECHECK`; `fail_closed_after` is `WRIT_AUTH_FAIL_CLOSED_AFTER_SECS`.
    pub(crate) async fn is_on(
        &self,
        keys: &dyn KeyStore,
        fail_closed_after: Duration,
    ) -> Result<bool, ApiError> {
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
        match keys.any_keys().await {
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
            Err(e) if last_off.is_some_and(|at| at.elapsed() < fail_closed_after) => {
                tracing::warn!(error = %e, "cannot re-check for API keys; auth stays off as last seen");
                Ok(false)
            }
            Err(e) if last_off.is_some() => {
                tracing::error!(error = %e, "cannot re-check for API keys; refusing requests until the store answers");
                let mut refusal = ApiError::new(
                    ErrorCode::AuthUnavailable,
                    format!(
                        "cannot tell whether API keys are required: the audit store that holds them has not answered for over {}s (WRIT_AUTH_FAIL_CLOSED_AFTER_SECS); retry later",
                        fail_closed_after.as_secs()
                    ),
                );
                refusal.retry_after_secs = Some(5);
                Err(refusal)
            }
            Err(e) => Err(ApiError::audit_unavailable(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_insufficient_scope_body_is_the_one_the_openapi_document_describes() {
        let err = insufficient_scope(Scope::Run, Scopes::of(&[Scope::Write, Scope::Read]));

        let body: InsufficientScopeBody =
            serde_json::from_value(err.body()).unwrap_or_else(|e| panic!("{e}: {}", err.body()));

        assert_eq!(body.error.details.required_scope, Scope::Run);
        assert_eq!(body.error.details.key_scopes, [Scope::Read, Scope::Write]);
    }

    #[test]
    fn a_key_without_scopes_is_answered_an_empty_list() {
        let err = insufficient_scope(Scope::Read, Scopes::EMPTY);

        let body: InsufficientScopeBody = serde_json::from_value(err.body()).unwrap();

        assert!(body.error.details.key_scopes.is_empty());
        assert!(
            body.error.message.contains("has: none"),
            "{}",
            body.error.message
        );
    }
}
