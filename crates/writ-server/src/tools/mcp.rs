//! The MCP server (rmcp, the official Rust SDK) over the tool registry, on two transports:
//! streamable HTTP at `/mcp` on writ's own port (inside the router, so behind the same auth
//! layer and limits as every route), and stdio for `writ mcp`.
//!
//! rmcp owns the protocol; this file only lists [`super::TOOLS`], hands calls to
//! [`super::call`], and turns progress and errors into MCP's shapes. A tool's refusal is a tool
//! result with `isError: true` carrying the HTTP API's message, so the model reads it; a call
//! to a tool that does not exist is the JSON-RPC error `-32602` (invalid params), as the MCP
//! specification lists it.
//!
//! An HTTP session belongs to the key that opened it: a request naming another key's session is
//! answered 404, as an unknown session is, so no key can use, follow or close another's.

use std::sync::{Arc, PoisonError};

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpService;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use tower::ServiceExt as _;
use uuid::Uuid;

use super::{CallContext, Progress};
use crate::access::{Caller, Grant, Viewer};
use crate::mcp_sessions::SESSION_HEADER;
use crate::state::AppState;
use crate::telemetry::RequestId;

const INSTRUCTIONS: &str = "writ writes files into one workspace directory and records every \
    write in an audit log. Use write_codebase to create or rewrite files from descriptions (up \
    to five per call, content written by several models and checked), write_file for small \
    exact edits, read_file and list_files to look, list_operations and get_operation to see \
    what was written, begin_write_session / append_to_write_session / finish_write_session to \
    write a large file whose exact content you produce in pieces, and run (when commands are \
    configured) to check files with a configured command. Paths are relative to the workspace \
    root.";

/// One MCP connection's handler: cheap, made per session (HTTP) or once (stdio).
#[derive(Clone)]
pub struct WritMcp {
    state: AppState,
}

impl WritMcp {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

/// The tools this server offers, as MCP tools.
pub fn tools(state: &AppState) -> Vec<Tool> {
    super::available(state)
        .map(|t| {
            let schema = match t.input_schema() {
                serde_json::Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            Tool::new(t.name, t.description, Arc::new(schema)).with_annotations(
                ToolAnnotations::new()
                    .read_only(t.read_only)
                    .destructive(!t.read_only)
                    .open_world(false),
            )
        })
        .collect()
}

impl ServerHandler for WritMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("writ", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools(&self.state)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A tool that does not exist is a protocol error (the spec's "unknown tool": invalid
        // params), not a tool's refusal.
        if super::find(&self.state, &request.name).is_none() {
            let e = super::unknown_tool(&self.state, &request.name);
            return Err(ErrorData::invalid_params(e.message.clone(), Some(e.body())));
        }
        // Over HTTP the auth and request-id layers ran on this POST: its parts carry both.
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let request_id = parts
            .and_then(|p| p.extensions.get::<RequestId>())
            .map(|r| r.0)
            .unwrap_or_else(Uuid::now_v7);
        let caller = parts.and_then(|p| p.extensions.get::<Caller>()).cloned();
        let grant = parts.and_then(|p| p.extensions.get::<Grant>()).copied();
        let bound = parts
            .and_then(|p| p.extensions.get::<crate::access::KeyWorkspaces>())
            .cloned();
        let who = (caller.clone(), grant, bound.clone());
        let mut ctx = CallContext::from_request(request_id, caller, grant, bound);
        ctx.cancelled = context.ct.clone();
        // A client that takes tasks gets the batch's job as one at once (super::tasks).
        let as_task = request.name == super::tasks::TASK_TOOL
            && context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks());
        ctx.prefer_async = as_task;
        if let Some(token) = context.meta.get_progress_token() {
            ctx.progress = Some(Arc::new(McpProgress {
                peer: context.peer.clone(),
                token,
            }));
        }
        let args = request
            .arguments
            .map(serde_json::Value::Object)
            .unwrap_or(serde_json::Value::Null);
        let workspace = args.get("workspace").cloned();
        let called = match super::call(&self.state, ctx, &request.name, args).await {
            Ok(out) if !as_task => {
                Ok(decide_in_call(&self.state, &context, out, workspace, who).await)
            }
            other => other,
        };
        let result = match called {
            Ok(out)
                if let Some(job_id) = as_task
                    .then(|| super::tasks::accepted(&out.result))
                    .flatten() =>
            {
                return Ok(super::tasks::created(job_id).into());
            }
            Ok(out) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(out.content)]);
                r.structured_content = Some(out.result);
                r
            }
            Err(e) => {
                let mut r = CallToolResult::error(vec![ContentBlock::text(super::error_text(&e))]);
                r.structured_content = Some(e.body());
                r
            }
        };
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        super::tasks::get(&self.state, &viewer(&context), &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        super::tasks::cancel(&self.state, &viewer(&context), &request.task_id).await
    }
}

/// The reviewer's answer when writ asks, within the call, whether a change set lands.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Approval {
    /// true: apply every hunk now; false: reject the change set.
    approve: bool,
    /// Kept with the decision.
    #[serde(default)]
    comment: Option<String>,
}
rmcp::elicit_safe!(Approval);

/// A change set proposed for review (`write_codebase` or `edit_files` with review) is put to the
/// person at the client, in the same call, when the client takes elicitation: approved, it is
/// applied whole; refused, rejected; either way as `apply_change` / `reject_change` would, a
/// request of its own, and the decision's answer is the `review` of the call's answer. A client
/// without elicitation, or a person who dismisses the question, gets the answer as it was: the
/// change set stays open under its `change_id`.
async fn decide_in_call(
    state: &AppState,
    context: &RequestContext<RoleServer>,
    mut out: super::ToolOutput,
    workspace: Option<serde_json::Value>,
    (caller, grant, bound): (
        Option<Caller>,
        Option<Grant>,
        Option<crate::access::KeyWorkspaces>,
    ),
) -> super::ToolOutput {
    let proposed = out.result.get("status").and_then(|s| s.as_str()) == Some("awaiting_review");
    let Some(change_id) = out
        .result
        .get("change_id")
        .and_then(|c| c.as_str())
        .map(str::to_owned)
        .filter(|_| proposed)
    else {
        return out;
    };
    if context
        .peer
        .peer_info()
        .is_none_or(|info| info.capabilities.elicitation.is_none())
    {
        return out;
    }
    let question = format!(
        "{}\n\nApply this change set now (approve), or reject it?",
        out.content
    );
    let approval = match context.peer.elicit::<Approval>(question).await {
        Ok(Some(approval)) => approval,
        Ok(None) | Err(_) => return out,
    };
    let tool = if approval.approve {
        "apply_change"
    } else {
        "reject_change"
    };
    let mut args = serde_json::json!({ "change_id": change_id, "comment": approval.comment });
    if let Some(workspace) = workspace {
        args["workspace"] = workspace;
    }
    let ctx = CallContext::from_request(Uuid::now_v7(), caller, grant, bound);
    match super::call(state, ctx, tool, args).await {
        Ok(decided) => {
            out.content = format!("{}\n{}", out.content, decided.content);
            out.result["review"] = decided.result;
        }
        Err(e) => {
            out.content = format!("{}\n{}", out.content, super::error_text(&e));
            out.result["review"] = e.body();
        }
    }
    out
}

/// Whose jobs the request may see: what the auth layer found on its POST.
fn viewer(context: &RequestContext<RoleServer>) -> Viewer {
    let parts = context.extensions.get::<axum::http::request::Parts>();
    let caller = parts.and_then(|p| p.extensions.get::<Caller>());
    let grant = parts.and_then(|p| p.extensions.get::<Grant>());
    let viewer = Viewer::new(caller.map(|c| c.0.as_str()), grant.map(|g| g.scopes));
    match parts.and_then(|p| p.extensions.get::<crate::access::KeyWorkspaces>()) {
        Some(bound) => viewer.within(&bound.0),
        None => viewer,
    }
}

/// Progress as `notifications/progress` on the caller's token.
struct McpProgress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

#[async_trait::async_trait]
impl Progress for McpProgress {
    async fn report(&self, progress: f64, total: Option<f64>, message: String) {
        let mut param =
            ProgressNotificationParam::new(self.token.clone(), progress).with_message(message);
        if let Some(total) = total {
            param = param.with_total(total);
        }
        // A client that went away misses its progress; the call itself goes on.
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "could not send a progress notification");
        }
    }
}

/// `GET`, `POST` and `DELETE /mcp`: the streamable HTTP transport.
pub async fn serve_http(State(state): State<AppState>, req: Request) -> Response {
    let mcp = state.mcp.clone();
    let caller = req.extensions().get::<Caller>().map(|c| c.0.clone());
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session {
        let owner = mcp
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned();
        if owner.is_some_and(|owner| owner != caller) {
            return crate::error::ApiError::not_found("no such MCP session").into_response();
        }
    }
    let closing = req.method() == axum::http::Method::DELETE;
    let service = StreamableHttpService::new(
        move || Ok(WritMcp::new(state.clone())),
        mcp.sessions.clone(),
        mcp.config.clone(),
    );
    let resp = match service.oneshot(req).await {
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(never) => match never {},
    };
    if resp.status().is_client_error() || resp.status().is_server_error() {
        return as_api_error(resp).await;
    }
    match (&session, resp.headers().get(SESSION_HEADER)) {
        (Some(id), _) if closing => {
            mcp.owners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
        (None, Some(opened)) => {
            if let Ok(opened) = opened.to_str() {
                mcp.remember_owner(opened, caller).await;
            }
        }
        _ => {}
    }
    resp
}

/// rmcp refuses a request the transport cannot take (wrong `Accept`, no session id, a foreign
/// `Host`) with a bare text body; writ answers every error in its one JSON shape.
async fn as_api_error(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("refused")
            .to_string()
    } else {
        text
    };
    let mut out = crate::error::ApiError::new(crate::error::ErrorCode::McpTransport, message)
        .with_status(parts.status)
        .into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// `writ mcp`: one MCP session over stdin/stdout until the host closes it.
pub async fn serve_stdio(state: AppState) -> anyhow::Result<()> {
    let running = WritMcp::new(state)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("starting the MCP session on stdio: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session on stdio failed: {e}"))?;
    Ok(())
}
