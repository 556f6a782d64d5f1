//! Function calling without MCP: `GET /tools` (the tools as a provider's declarations) and
//! `POST /tools/call` (a tool call as the provider returned it, run by the same dispatcher as
//! MCP). `/mcp` itself is served by [`crate::tools::mcp::serve_http`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::hang_ups::HungUp;
use crate::access::Caller;
use crate::error::{ApiError, ErrorCode, ErrorDetail};
use crate::extract::{ApiQuery, body_error, json_error};
use crate::headers::header_map;
use crate::state::AppState;
use crate::telemetry::RequestId;
use crate::tools::formats::{Declarations, Format, declarations};
use crate::tools::{self, CallContext};

/// The query of `GET /tools`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsParams {
    /// Whose declarations.
    #[schemars(with = "Option<Format>", extend("default" = "openai"))]
    format: Option<String>,
}

/// The tools as function declarations for OpenAI, Anthropic or Gemini.
pub async fn list_tools(
    State(state): State<AppState>,
    ApiQuery(p): ApiQuery<ToolsParams>,
) -> Result<Json<Declarations>, ApiError> {
    let raw = p.format.as_deref().unwrap_or("openai");
    let format = Format::parse(raw).ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!(
                "format must be one of {}, got '{raw}'",
                Format::NAMES.join(", ")
            ),
        )
        .with_field("format")
    })?;
    Ok(Json(declarations(format, tools::available(&state))))
}

/// A tool call as providers return it. `input` (Anthropic) and `args` (Gemini) are accepted for
/// `arguments`; a call id and type are accepted and ignored.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = list_argument_aliases)]
pub struct ToolCall {
    /// The tool's name.
    name: String,
    /// The arguments, as an object or a string holding one (as OpenAI returns them); absent or
    /// `null`: no arguments.
    #[serde(default, alias = "input", alias = "args")]
    #[schemars(extend("oneOf" = [{"type": "object"}, {"type": "string"}], "nullable" = true))]
    arguments: Option<Value>,
    /// The provider's call id; ignored.
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "accepted so a provider's tool call can be posted as is"
    )]
    id: Option<Value>,
    /// The provider's call type; ignored.
    #[serde(default, rename = "type")]
    #[expect(
        dead_code,
        reason = "accepted so a provider's tool call can be posted as is"
    )]
    kind: Option<Value>,
}

/// Lists `input` and `args` as properties: serde accepts them for `arguments`, but schemars
/// leaves aliases out, and `additionalProperties: false` would then refuse them.
fn list_argument_aliases(schema: &mut schemars::Schema) {
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(arguments) = props.get("arguments").cloned() else {
        return;
    };
    for (alias, whose) in [("input", "Anthropic"), ("args", "Gemini")] {
        let mut same = arguments.clone();
        same["description"] = json!(format!(
            "{whose}'s name for `arguments`; a call sends one of the three."
        ));
        props.insert(alias.to_owned(), same);
    }
}

/// A tool call's answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ToolCallAnswer {
    /// Text for the model.
    pub content: String,
    /// The tool's answer as the HTTP API gives it.
    pub result: Value,
}

/// A refused or failed tool call: writ's error body with the text to hand back to the model.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ToolCallError {
    pub error: ErrorDetail,
    /// The error as text for the model.
    pub content: String,
}

/// Run one tool call. Every answer, error or not, carries `content`: the text to hand back to
/// the model as the tool's result.
pub async fn call_tool(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    caller: Option<axum::Extension<Caller>>,
    grant: Option<axum::Extension<crate::access::Grant>>,
    bound: Option<axum::Extension<crate::access::KeyWorkspaces>>,
    axum::Extension(HungUp(hung_up)): axum::Extension<HungUp>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut ctx = CallContext::from_request(
        request_id,
        caller.map(|axum::Extension(c)| c),
        grant.map(|axum::Extension(g)| g),
        bound.map(|axum::Extension(b)| b),
    );
    ctx.hung_up = hung_up;
    match run(&state, ctx, body).await {
        Ok(out) => Json(ToolCallAnswer {
            content: out.content,
            result: out.result,
        })
        .into_response(),
        Err(e) => {
            let body = ToolCallError {
                error: e.detail(),
                content: tools::error_text(&e),
            };
            (e.status, header_map(&e.headers()), Json(body)).into_response()
        }
    }
}

async fn run(
    state: &AppState,
    ctx: CallContext,
    body: Result<Bytes, BytesRejection>,
) -> Result<tools::ToolOutput, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let Json(call) = Json::<ToolCall>::from_bytes(&body).map_err(|e| json_error(&e))?;
    if tools::find(state, &call.name).is_none() {
        return Err(tools::unknown_tool(state, &call.name));
    }
    let args = tools::arguments_from(call.arguments)?;
    tools::call(state, ctx, &call.name, args).await
}
