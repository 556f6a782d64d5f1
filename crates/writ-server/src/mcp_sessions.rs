//! The sessions of MCP's streamable HTTP transport at `/mcp` and the rules its transport checks:
//! kept for the process's life beside the shared state, and read by [`crate::tools::mcp`], which
//! serves the transport.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// What `/mcp` needs besides the state: the sessions it keeps and how it checks requests.
#[derive(Clone)]
pub struct McpHttp {
    pub(crate) sessions: Arc<LocalSessionManager>,
    pub(crate) config: StreamableHttpServerConfig,
    /// The key id that opened each session (`None`: opened while auth was off).
    pub(crate) owners: Arc<Mutex<HashMap<String, Option<String>>>>,
}

/// Past this many recorded owners, those of sessions rmcp no longer holds are forgotten.
const OWNERS_PRUNE_AT: usize = 1024;

/// The header naming a streamable HTTP session.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

impl McpHttp {
    /// rmcp refuses `Host` headers other than loopback names unless told otherwise, against DNS
    /// rebinding. writ's own rule decides instead: a loopback listener without keys accepts
    /// loopback hosts only (a web page a local browser opens must not reach it); a listener
    /// that requires keys, or that the operator exposed on purpose (`--insecure`), accepts any
    /// host, as every other route does — a rebinding page cannot present a key.
    pub fn new(listens_on_loopback: bool, keys_configured: bool, max_body_bytes: usize) -> Self {
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(max_body_bytes)
            // Progress must reach the client while a batch runs: stream answers as SSE.
            .with_json_response(false);
        let config = if listens_on_loopback && !keys_configured {
            config.with_allowed_hosts(["localhost", "127.0.0.1", "::1", "[::1]"])
        } else {
            config.disable_allowed_hosts()
        };
        Self {
            sessions: Arc::new(LocalSessionManager::default()),
            config,
            owners: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Ends every open MCP stream, so a graceful shutdown is not held up by idle sessions.
    pub fn shut_down(&self) {
        self.config.cancellation_token.cancel();
    }
}

impl McpHttp {
    /// Records that `caller` opened `session`; past [`OWNERS_PRUNE_AT`] entries, those of
    /// sessions rmcp no longer holds are forgotten first.
    pub(crate) async fn remember_owner(&self, session: &str, caller: Option<String>) {
        let mcp = self;
        let full = mcp
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            >= OWNERS_PRUNE_AT;
        let live: Option<std::collections::HashSet<String>> = if full {
            let sessions = mcp.sessions.sessions.read().await;
            Some(sessions.keys().map(|k| k.to_string()).collect())
        } else {
            None
        };
        let mut owners = mcp.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(live) = live {
            owners.retain(|id, _| live.contains(id));
        }
        owners.insert(session.to_owned(), caller);
    }
}
