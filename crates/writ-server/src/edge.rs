//! What writ refuses at its edge before any route runs: foreign `Host` names while auth is off
//! (DNS rebinding) and cross-site browser requests that would change something. Its settings are
//! [`crate::config::edge`]'s.
//!
//! Why a `Host` check only while auth is off: a rebinding page can make a browser send requests to
//! a loopback writ under an attacker's host name, and without keys nothing else stops them; with
//! keys the page would need a key the browser never sends on its own.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Refuses foreign hosts while auth is off and cross-site requests that change anything.
pub async fn guard_host_and_origin(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    let host = request_host(&req);
    // Liveness carries nothing and changes nothing; orchestrators probe it by IP.
    if !state.auth.known_on() && req.uri().path() != "/healthz" {
        let allowed = host.as_deref().is_some_and(|h| {
            is_loopback_host(h)
                || state
                    .settings
                    .edge
                    .allowed_hosts
                    .iter()
                    .any(|a| host_name(h) == a)
        });
        if !allowed {
            return ApiError::new(
                ErrorCode::HostNotAllowed,
                format!(
                    "writ without API keys answers only loopback host names; '{}' is not one. Add it to WRIT_ALLOWED_HOSTS (comma-separated) or configure API keys",
                    host.as_deref().unwrap_or("")
                ),
            )
            .with_field("Host")
            .into_response();
        }
    }
    if changes_state(req.method())
        && let Some(reason) =
            cross_site(headers, host.as_deref(), &state.settings.edge.allowed_hosts)
    {
        return ApiError::new(ErrorCode::CrossSite, reason)
            .with_field("Origin")
            .into_response();
    }
    next.run(req).await
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The host the client addressed: HTTP/1's `Host`, or HTTP/2's `:authority` (in the URI).
fn request_host(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()))
        .map(|h| h.trim().to_ascii_lowercase())
}

/// `host[:port]` without the port; an IPv6 literal keeps its brackets.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

fn is_loopback_host(host: &str) -> bool {
    let name = host_name(host);
    if name == "localhost" || name == "[::1]" {
        return true;
    }
    name.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Why a state-changing request is cross-site, if it is. `Sec-Fetch-Site` is the browser's own
/// verdict (`same-site` is refused too: another port on localhost is the same site); `Origin`
/// covers browsers that do not send it.
fn cross_site(headers: &HeaderMap, host: Option<&str>, allowed: &[String]) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && matches!(site, "cross-site" | "same-site")
    {
        return Some(format!(
            "a {site} browser request may not change anything here (Sec-Fetch-Site: {site})"
        ));
    }
    let origin = headers.get(header::ORIGIN)?.to_str().unwrap_or("null");
    let origin_host = origin
        .split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/').to_ascii_lowercase());
    let same = match (&origin_host, host) {
        (Some(o), Some(h)) => o == h || allowed.iter().any(|a| host_name(o) == a),
        _ => false,
    };
    (!same).then(|| {
        format!(
            "a browser request from origin '{origin}' may not change anything here; only the page writ serves itself may (or a host in WRIT_ALLOWED_HOSTS)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_with_or_without_port_are_recognised() {
        for h in [
            "localhost",
            "localhost:80",
            "127.0.0.1",
            "127.9.8.7:1",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["localhost.evil", "128.0.0.1", "[::2]", "evil:127", ""] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}
