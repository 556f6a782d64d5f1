//! What writ refuses at its edge before any route runs: foreign `Host` names while auth is off
//! (DNS rebinding), cross-site browser requests that would change something, and framing or
//! sniffing of the dashboard page. Also the settings of the connection-level limits that
//! [`crate::startup`] applies (header-read timeout, connection cap) and the paths no write may touch.
//!
//! Why a `Host` check only while auth is off: a rebinding page can make a browser send requests to
//! a loopback writ under an attacker's host name, and without keys nothing else stops them; with
//! keys the page would need a key the browser never sends on its own.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::config::ConfigError;
use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// `WRIT_PROTECTED_PATHS` when unset: the one directory whose files run code on the next git command.
pub const DEFAULT_PROTECTED_PATHS: &str = ".git";

/// Settings of the edge, read with the rest of [`crate::Settings`].
#[derive(Debug, Clone)]
pub struct EdgeSettings {
    /// `WRIT_ALLOWED_HOSTS`: host names answered while auth is off, besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// `WRIT_PROTECTED_PATHS`: names (any component) or paths (from the root) no write may touch.
    pub protected_paths: Vec<String>,
    /// `WRIT_HEADER_READ_TIMEOUT_SECS`: a client must send a request's headers within this, and an
    /// idle keep-alive connection is closed after it.
    pub header_read_timeout: Duration,
    /// `WRIT_MAX_CONNECTIONS`: connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// `WRIT_AUTH_FAIL_CLOSED_AFTER_SECS`: how old the store's last "no keys" answer may be for
    /// auth to stay off while the store cannot be asked again.
    pub auth_fail_closed_after: Duration,
}

impl EdgeSettings {
    pub fn load(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let list = |v: Option<String>| -> Vec<String> {
            v.unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let secs = |name: &'static str, default: u64| -> Result<Duration, ConfigError> {
            let n = match get(name) {
                None => default,
                Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
                    name,
                    message: format!("'{v}' is not a whole number of seconds"),
                })?,
            };
            if n == 0 {
                return Err(ConfigError::Invalid {
                    name,
                    message: "must be at least 1".into(),
                });
            }
            Ok(Duration::from_secs(n))
        };
        let max_connections = match get("WRIT_MAX_CONNECTIONS") {
            None => 1024,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(ConfigError::Invalid {
                        name: "WRIT_MAX_CONNECTIONS",
                        message: format!("'{v}' is not a whole number of at least 1"),
                    });
                }
            },
        };
        // An empty value reads as unset (the default), so turning protection off takes a word.
        let protected = match get("WRIT_PROTECTED_PATHS") {
            Some(v) if v.trim().eq_ignore_ascii_case("none") => Vec::new(),
            v => list(Some(
                v.unwrap_or_else(|| DEFAULT_PROTECTED_PATHS.to_owned()),
            )),
        };
        Ok(Self {
            allowed_hosts: list(get("WRIT_ALLOWED_HOSTS"))
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            protected_paths: protected,
            header_read_timeout: secs("WRIT_HEADER_READ_TIMEOUT_SECS", 10)?,
            max_connections,
            auth_fail_closed_after: secs("WRIT_AUTH_FAIL_CLOSED_AFTER_SECS", 30)?,
        })
    }
}

/// The paths no write may touch: `WRIT_PROTECTED_PATHS`, plus writ's own files (the SQLite
/// database and its journal files, the config file, the embedded model) when they lie inside
/// `root`, the canonical `REPO_DIR`. writ refuses writes there rather than refusing to start, so
/// an existing layout keeps working; moving them out of `REPO_DIR` is still better.
pub fn protected_paths(settings: &crate::Settings, root: &Path) -> writ_workspace::ProtectedPaths {
    let mut protected = writ_workspace::ProtectedPaths::default();
    for entry in &settings.edge.protected_paths {
        protected.add(entry, "listed in WRIT_PROTECTED_PATHS");
    }
    let mut own = |file: &Path, what: &str| {
        if let Some(relative) = inside(root, file) {
            protected.add_path(&relative, &format!("{what}, inside REPO_DIR"));
        }
    };
    if let Some(db) = sqlite_file(&settings.database_url) {
        own(&db, "writ's own database (DATABASE_URL)");
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut journal = db.clone().into_os_string();
            journal.push(suffix);
            own(
                Path::new(&journal),
                "writ's own database journal (DATABASE_URL)",
            );
        }
    }
    if let Some(config) = &settings.config_file {
        own(config, "writ's config file");
    }
    if settings.models.local.enabled {
        let model = &settings.models.local.model_path;
        // The fetch writes temp files beside the model, so its whole directory is the cache;
        // unless that directory is REPO_DIR itself, where only the file can be claimed.
        let cache = model
            .parent()
            .filter(|dir| std::fs::canonicalize(dir).is_ok_and(|dir| dir != root));
        own(
            cache.unwrap_or(model),
            "the embedded model's cache (WRIT_LOCAL_MODEL_PATH)",
        );
    }
    protected
}

/// The file behind a `sqlite:` URL, if it names one.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let file = rest.split('?').next().unwrap_or_default();
    (!file.is_empty() && !file.starts_with(":memory:")).then(|| PathBuf::from(file))
}

/// `file` relative to `root` (both resolved as far as they exist), if it lies inside.
fn inside(root: &Path, file: &Path) -> Option<String> {
    let name = file.file_name()?;
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = std::fs::canonicalize(&parent).ok()?;
    let relative = parent.join(name);
    let relative = relative.strip_prefix(root).ok()?;
    let shown = relative.to_str()?.to_owned();
    (!shown.is_empty()).then_some(shown)
}

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

/// The dashboard's one inline script, allowed by its hash so that no other inline script runs.
static DASHBOARD_CSP: LazyLock<String> = LazyLock::new(|| {
    let page = crate::routes::meta::DASHBOARD_HTML;
    let script = page
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map_or("", |(script, _)| script);
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script.as_bytes()));
    // Styles: the page uses `style` attributes, which a hash cannot allow without
    // 'unsafe-hashes'; inline style cannot run code, so 'unsafe-inline' is confined to style-src.
    format!(
        "default-src 'self'; script-src 'sha256-{hash}'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'; object-src 'none'"
    )
});

/// Headers of the dashboard page: its CSP, no framing, no MIME sniffing.
pub fn dashboard_headers() -> [(header::HeaderName, HeaderValue); 3] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_str(&DASHBOARD_CSP)
                .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'")),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ]
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

    #[test]
    fn the_dashboard_csp_names_its_script_by_hash() {
        assert!(DASHBOARD_CSP.contains("script-src 'sha256-"));
        assert!(!DASHBOARD_CSP.contains("script-src 'unsafe-inline'"));
    }
}
