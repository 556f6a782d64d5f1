//! The tools agents call writ through, whatever carries the call: MCP (`/mcp` on writ's port and
//! `writ mcp` on stdio) and provider function calling (`GET /tools`, `POST /tools/call`).
//!
//! - [`TOOLS`]: the registry — name, description for a model, input schema. The schemas are
//!   generated from the same Rust types the HTTP API parses (or, where the HTTP API spreads its
//!   input over path, query and headers, from a thin argument type here), so they cannot drift.
//! - [`call`]: the one dispatcher. Adding a tool is one entry in [`TOOLS`] and one arm in `call`.
//! - [`dispatch`], `batch`, `changes` and `workspaces`: the adapter, the only files that call into
//!   [`crate::service`] and the core.
//! - [`formats`]: the registry as OpenAI, Anthropic and Gemini declarations.
//! - [`mcp`]: the MCP server over the registry (rmcp), for both transports.

mod batch;
mod changes;
pub mod dispatch;
pub mod formats;
pub mod mcp;
pub mod tasks;
mod workspaces;

use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use writ_core::files::WriteMode;
use writ_core::keys::{Scope, Scopes};
use writ_core::workspace_registry::WorkspaceName;

use crate::error::{ApiError, ErrorCode};
use crate::extract::parse_json;
use crate::state::AppState;

/// One tool: what a model sees of it.
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// Reads only: lets an MCP host run it without asking.
    pub read_only: bool,
    /// Offered only when commands are configured (`WRIT_COMMANDS`).
    pub needs_commands: bool,
    /// What the caller's key must hold to call it (checked by [`call`]).
    pub scope: Scope,
    schema: fn() -> Value,
}

impl ToolSpec {
    /// The JSON Schema of the tool's arguments (draft 2020-12, subschemas inlined).
    pub fn input_schema(&self) -> Value {
        let mut schema = (self.schema)();
        // A tool with no arguments of its own has no `properties` yet: the workspace is one.
        if let Some(object) = schema.as_object_mut() {
            object
                .entry("properties")
                .or_insert_with(|| Value::Object(Default::default()));
        }
        if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            properties.insert(
                WORKSPACE_ARG.to_owned(),
                serde_json::json!({
                    "type": "string",
                    "description": "The workspace to work in (its name); `default` when absent. A workspace the key may not use answers as one that does not exist.",
                    "default": WorkspaceName::DEFAULT,
                }),
            );
        }
        schema
    }
}

/// Every tool writ offers, in the order models see them.
pub static TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "write_codebase",
        description: "Write up to five files of a codebase from descriptions. Several models each \
            write every file; writ keeps the candidates that parse, lets an arbiter model choose \
            among them, writes the chosen file atomically and records it in the audit log. You \
            describe each file (`code_description`, with the imports it may use); you never send \
            its content, so this is the safe way to create large files. Send related files in \
            one call: each file's prompt sees the others. Answers with one result per file \
            (operation, bytes, SHA-256, chosen model, or the error) and the batch's request_id. \
            Paths are relative to the workspace root; `..` and absolute paths are refused. \
            Takes seconds to minutes; progress is reported while it runs.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<writ_core::synthesis::WriteCodebaseRequest>,
    },
    ToolSpec {
        name: "list_files",
        description: "List the entries of one directory of the workspace (not recursive): \
            names, sizes in bytes, and which are directories. `dir` is relative to the \
            workspace root; omit it for the root.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<crate::service::files::ListParams>,
    },
    ToolSpec {
        name: "read_file",
        description: "Read a text file of the workspace. The content is cut at `max_chars` \
            characters (default 10,000) with a marker saying so and how much there is; ask again \
            with a larger `max_chars` for more. The result also gives the file's SHA-256: pass \
            it as `expected_sha256` to `write_file` or `write_codebase` so you never overwrite a \
            change you have not seen.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<ReadFileArgs>,
    },
    ToolSpec {
        name: "search_files",
        description: "Search the workspace's files for a literal string (or a regular \
            expression with `regex: true`): answers the matching lines with their paths, line \
            numbers and `context_lines` lines around each (default 2). Narrow it with `glob` \
            (`*.py`, `src/**/*.rs`) and `dir`. Files ignored by .gitignore, binary files and \
            protected paths are not searched. At most `max_matches` lines (default 50); \
            `stopped` says when a bound cut the search short. Use it to find where something is \
            defined or used before reading or writing files.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<crate::service::search::SearchParams>,
    },
    ToolSpec {
        name: "write_file",
        description: "Write one file with the exact content you give: `create` (fails if it \
            exists), `overwrite` (the default) or `append`. Recorded in the audit log and written \
            atomically. For small files and small edits only: content that travels inside a tool \
            call can be cut off, so large content belongs in `write_codebase` (describe the file, \
            models write it) or a write session.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<WriteFileArgs>,
    },
    ToolSpec {
        name: "edit_files",
        description: "Change up to five existing files with exact edits, all or nothing. Either \
            `files`: per file `{path, edits: [{old, new, replace_all?}], expected_sha256?}` — each \
            `old` must match the file exactly once (unless `replace_all`), copied with its \
            indentation; or `patch`: an apply_patch patch (`*** Begin Patch`, `*** Update File: \
            path` with `@@` hunks of ' ' context, '-' removed and '+' added lines, `*** Add File: \
            path` with '+' lines, `*** End Patch`). If any edit does not apply, nothing is written \
            and the error names the file and the edit and shows the closest lines, so you can \
            retry at once. Optional `validation` runs configured checks on the edited files \
            first. Everything outside the edits stays byte for byte (line endings too). Answers \
            with each file's diff, SHA-256 and operation_id.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<writ_core::edits::EditsRequest>,
    },
    ToolSpec {
        name: "list_operations",
        description: "List the audit log: every write writ made (newest first), with its file, \
            operation, size, SHA-256, status and the model that wrote it. Filter by request_id, \
            filename, status, model or time; page with `cursor` (the previous page's \
            next_cursor).",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<crate::service::operations::ListParams>,
    },
    ToolSpec {
        name: "get_operation",
        description: "One write from the audit log, with the full content it wrote. `id` is an \
            operation id from `list_operations` or from a write's answer (`operation_id`).",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<crate::service::operations::OperationId>,
    },
    ToolSpec {
        name: "undo",
        description: "Take back a request writ made (a batch, edits, a direct write, a write \
            session, an undo): every file it wrote goes back to the bytes it held before, files \
            it created are removed and files it deleted come back, all or nothing, recorded as \
            a new request you can undo in turn (redo). Refused, naming the files, when one \
            changed since the request, unless `force` (the answer then says which later \
            changes were replaced). `dry_run` answers what would change and writes nothing.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<crate::service::history::UndoArgs>,
    },
    ToolSpec {
        name: "restore",
        description: "Write the content an earlier operation wrote (an `id` from \
            `list_operations` filtered by filename) back to its path, recorded and undoable. \
            Pass `expected_sha256` (the file's current SHA-256, `absent` if it does not exist) \
            to refuse if the file changed meanwhile.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<crate::service::history::RestoreArgs>,
    },
    ToolSpec {
        name: "list_changes",
        description: "List the change sets awaiting review in the workspace: files writ chose \
            but did not write because the request asked for review (`options.review` on \
            `write_codebase`, `review` on `edit_files` and write sessions). Each with its id, \
            state (`open`, `partially_applied`, `stale` when a file changed since) and open \
            hunks. `state: \"all\"` lists decided ones too.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<crate::service::changes::ListChanges>,
    },
    ToolSpec {
        name: "show_change",
        description: "One change set: per file the unified diff against the content it was made \
            from, split into hunks with stable ids (each `open`, `applied` or `rejected`), the \
            model that made the content, how it was chosen and the checks' evidence. Read it \
            before `apply_change` or `reject_change`.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<crate::service::changes::ShowChangeArgs>,
    },
    ToolSpec {
        name: "apply_change",
        description: "Apply a change set: every open hunk, or only `files` (all their open \
            hunks) and `hunks` (`{path: [hunk ids]}`). All or nothing: each file must still hold \
            what the change was made from (or what an earlier apply wrote), else it is refused \
            naming the file, unless `rebase: true` merges the hunks into what it holds now (a \
            hunk whose lines changed too is refused as a conflict, naming it). Only the hunks \
            chosen are written. Answers with the request_id the apply is recorded as (`undo` \
            takes it back).",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<crate::service::changes::ApplyChangeArgs>,
    },
    ToolSpec {
        name: "reject_change",
        description: "Reject a change set's hunks (every open one, or only `files` and \
            `hunks`), with a `comment` saying why. Nothing is written; each file's rejection is \
            recorded with the model that made it, so the model statistics show whose code is \
            kept.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<crate::service::changes::RejectChangeArgs>,
    },
    ToolSpec {
        name: "begin_write_session",
        description: "Begin a write session: the way to write a large file whose exact content \
            you produce yourself. Give the target path (relative to the workspace root), the \
            operation (`create` fails if the file exists, `overwrite` creates or replaces, \
            `append` adds to the end) and the intent in a sentence. The target is checked now. \
            Then send the content in pieces with `append_to_write_session` and end it with a \
            line that is exactly DONE (or call `finish_write_session`). Nothing is written until \
            the end; then the file is written atomically and recorded in the audit log. Answers \
            with the session's id.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<writ_core::sessions::BeginSession>,
    },
    ToolSpec {
        name: "append_to_write_session",
        description: "Append the next piece of a write session's content, exactly as it should \
            appear in the file (pieces are joined with nothing in between, so a piece may end \
            mid-line). Meant for models that produce text in pieces: send each piece as you \
            write it. When the content is complete, end your last piece with a line that is \
            exactly DONE: the session then writes the file (the DONE line is not written). If the \
            session says it is waiting, reply with DONE on its own line if you are finished, \
            otherwise continue. Content that already exists elsewhere should go to writ's HTTP \
            route `POST /write_sessions/{id}/content` as raw text instead of through a tool call.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<AppendArgs>,
    },
    ToolSpec {
        name: "finish_write_session",
        description: "Finish a write session without a DONE line: the content sent so far is \
            written to the target file and recorded in the audit log. Answers with the write's \
            receipt (operation, bytes, SHA-256, operation_id). Calling it again on a finished \
            session answers the same receipt; nothing is written twice.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<SessionArgs>,
    },
    ToolSpec {
        name: "claim_paths",
        description: "Claim paths of the repository for this workspace, for a while: an advisory \
            lease the other agents' workspaces of the same repository see (`list_claims`) before \
            they write. `paths` are globs relative to the repository's root (`src/**/*.py`); \
            `ttl_secs` how long it holds (default an hour). Where claims are respected, another \
            workspace's write into a claimed path is refused (`claimed`) before any model call; \
            otherwise its answer reports the overlap. Release it with `release_claims` when done.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<crate::service::workspaces::MakeClaim>,
    },
    ToolSpec {
        name: "list_claims",
        description: "List the live claims of every workspace of this workspace's repository \
            (its own marked): which paths other agents are working on, and until when. A claim \
            of a workspace your key may not use is shown without its name.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<workspaces::NoArgs>,
    },
    ToolSpec {
        name: "release_claims",
        description: "Release one of this workspace's claims (`id`, as `claim_paths` answered), \
            or every claim it holds (no `id`).",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<workspaces::ReleaseClaimArgs>,
    },
    ToolSpec {
        name: "list_overlaps",
        description: "List the paths this workspace changed that another workspace of the same \
            repository, or the branch it merges back into, changed too since they share a base: \
            where a merge would conflict or a rebase is due. Each names the other side (when \
            your key may see it), its commit or request, and since when.",
        read_only: true,
        needs_commands: false,
        scope: Scope::Read,
        schema: schema_of::<workspaces::NoArgs>,
    },
    ToolSpec {
        name: "rebase_workspace",
        description: "Bring a git-worktree workspace's branch up to date: its commits are \
            replayed on the tip of `onto` (absent: the branch it was made from). A conflict is \
            refused naming each file and its hunks, and nothing moves. After a clean rebase, the \
            checks recorded for the files it touched (the caller's test commands of the batches \
            that wrote them, and the generated tests they kept) run again in the sandbox, and \
            the answer says what still passes; a merge is refused while they fail, unless \
            forced. Recorded as a request: `undo` puts the branch back.",
        read_only: false,
        needs_commands: false,
        scope: Scope::Write,
        schema: schema_of::<crate::service::workspaces::RebaseWorkspace>,
    },
    ToolSpec {
        name: "run",
        description: "Run one of the configured commands (tests, linters, type checkers) in a \
            sandbox on a copy of the workspace: no network, bounded time and output, nothing it \
            does reaches the workspace. `command` is a configured command's name; `args` are \
            workspace paths put in place of its `{args}`. Answers with the exit code, whether it \
            timed out, and its output. Use it to check files you wrote.",
        read_only: false,
        needs_commands: true,
        scope: Scope::Run,
        schema: schema_of::<crate::service::run::RunRequest>,
    },
];

/// The tools this server offers: all of [`TOOLS`] but those that need what is not configured.
pub fn available(state: &AppState) -> impl Iterator<Item = &'static ToolSpec> + use<> {
    let commands = state.commands.is_some();
    TOOLS.iter().filter(move |t| commands || !t.needs_commands)
}

pub fn find(state: &AppState, name: &str) -> Option<&'static ToolSpec> {
    available(state).find(|t| t.name == name)
}

/// `append_to_write_session`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendArgs {
    /// The id `begin_write_session` answered.
    pub session_id: String,
    /// The next piece of the content, exactly as it goes into the file.
    pub chunk: String,
}

/// The arguments of the session tools that name only the session.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArgs {
    /// The id `begin_write_session` answered.
    pub session_id: String,
}

/// `read_file`'s arguments: the path and query of `GET /files/{path}` as one object.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path relative to the workspace root, e.g. "src/app.py".
    pub path: String,
    /// Cut the text after this many characters (default 10,000).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_chars: Option<usize>,
}

/// `write_file`'s arguments: the path, query, `If-Match` header and body of `PUT /files/{path}`
/// as one object.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path relative to the workspace root, e.g. "src/app.py".
    pub path: String,
    /// The file's full new content (or the text to append).
    pub content: String,
    /// `create` fails if the file exists; `overwrite` creates or replaces; `append` adds to the end.
    #[serde(default)]
    pub mode: WriteMode,
    /// Create missing parent directories.
    #[serde(default)]
    pub create_dirs: bool,
    /// Write only if the file's current SHA-256 is this (64 hex digits, from `read_file`).
    #[serde(default)]
    pub expected_sha256: Option<String>,
    /// Commit the write, where the workspace is a git repository; absent: as the workspace is
    /// set.
    #[serde(default)]
    pub commit: Option<bool>,
}

/// Who calls, and how to tell them how it goes.
pub struct CallContext {
    /// The id the call is audited under (a batch's job id too).
    pub request_id: Uuid,
    /// The API key id, when keys are on.
    pub caller: Option<String>,
    /// The key's scopes, when keys are on. A caller without them may call no tool.
    pub scopes: Option<Scopes>,
    /// The scope that allowed the call, set by [`call`] for the audit record.
    pub scope: Option<Scope>,
    /// Where progress goes, when the caller asked for it.
    pub progress: Option<Arc<dyn Progress>>,
    /// Cancelled when the caller gives up; work already started completes and is recorded.
    pub cancelled: CancellationToken,
    /// Cancelled when the connection that carries the call is gone (`POST /tools/call`): a run
    /// then stops, as for `POST /run`. Never over MCP, where a call outlives its transport.
    pub hung_up: CancellationToken,
    /// `write_codebase` answers with its job at once instead of waiting (an MCP task).
    pub prefer_async: bool,
    /// The workspaces the key may use (`None`: all, or keys are off).
    pub bound: Option<crate::access::KeyWorkspaces>,
}

impl CallContext {
    /// `grant`: what the auth layer found on the request (`None` while keys are off).
    pub fn from_request(
        request_id: Uuid,
        caller: Option<crate::access::Caller>,
        grant: Option<crate::access::Grant>,
        bound: Option<crate::access::KeyWorkspaces>,
    ) -> Self {
        let mut ctx = Self::new(request_id, caller.map(|c| c.0));
        ctx.scopes = grant.map(|g| g.scopes);
        ctx.bound = bound;
        ctx
    }

    /// Whose records the call may see: the key's own (unless it is an admin's), in `workspace`.
    fn viewer(&self, workspace: &str) -> crate::access::Viewer {
        crate::access::Viewer::new(self.caller.as_deref(), self.scopes)
            .within(std::slice::from_ref(&workspace.to_owned()))
    }

    pub fn new(request_id: Uuid, caller: Option<String>) -> Self {
        Self {
            request_id,
            caller,
            scopes: None,
            scope: None,
            progress: None,
            cancelled: CancellationToken::new(),
            hung_up: CancellationToken::new(),
            prefer_async: false,
            bound: None,
        }
    }
}

/// Receives a long call's progress: a number that grows with each report, and a line for people.
#[async_trait::async_trait]
pub trait Progress: Send + Sync {
    async fn report(&self, progress: f64, total: Option<f64>, message: String);
}

/// A tool's answer.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Text for the model.
    pub content: String,
    /// The same, structured, as the HTTP API answers it.
    pub result: Value,
}

/// Runs one tool call. Errors are the HTTP API's own (same code, message and field). A caller
/// with a key must hold the tool's scope (403 `insufficient_scope` otherwise, which MCP turns
/// into a tool error); without keys (auth off, `writ mcp` on stdio) every tool may be called.
pub async fn call(
    state: &AppState,
    mut ctx: CallContext,
    name: &str,
    args: Value,
) -> Result<ToolOutput, ApiError> {
    let tool = find(state, name).ok_or_else(|| unknown_tool(state, name))?;
    if ctx.caller.is_some() {
        // A keyed caller whose scopes were not passed on holds none: refuse rather than allow.
        let held = ctx.scopes.unwrap_or(Scopes::EMPTY);
        if !held.contains(tool.scope) {
            return Err(crate::access::insufficient_scope(tool.scope, held));
        }
        ctx.scope = Some(tool.scope);
    }
    let (args, workspace) = take_workspace(args)?;
    let state = &in_workspace(state, ctx.bound.as_ref(), &workspace).await?;
    match name {
        "write_codebase" => batch::write_codebase(state, ctx, args).await,
        "list_files" => dispatch::list_files(state, parse(args)?).await,
        "read_file" => dispatch::read_file(state, parse(args)?).await,
        "search_files" => dispatch::search_files(state, parse(args)?).await,
        "write_file" => dispatch::write_file(state, ctx, parse(args)?).await,
        "edit_files" => dispatch::edit_files(state, ctx, args).await,
        "list_operations" => {
            let viewer = ctx.viewer(&workspace);
            dispatch::list_operations(state, &viewer, parse(args)?).await
        }
        "get_operation" => {
            let viewer = ctx.viewer(&workspace);
            dispatch::get_operation(state, &viewer, parse(args)?).await
        }
        "undo" => {
            let viewer = ctx.viewer(&workspace);
            dispatch::undo(state, &viewer, ctx, parse(args)?).await
        }
        "restore" => {
            let viewer = ctx.viewer(&workspace);
            dispatch::restore(state, &viewer, ctx, parse(args)?).await
        }
        "list_changes" => {
            let viewer = ctx.viewer(&workspace);
            changes::list_changes(state, &viewer, &ctx, parse(args)?).await
        }
        "show_change" => {
            let viewer = ctx.viewer(&workspace);
            changes::show_change(state, &viewer, &ctx, parse(args)?).await
        }
        "apply_change" => {
            let viewer = ctx.viewer(&workspace);
            changes::apply_change(state, &viewer, &ctx, parse(args)?).await
        }
        "reject_change" => {
            let viewer = ctx.viewer(&workspace);
            changes::reject_change(state, &viewer, &ctx, parse(args)?).await
        }
        "begin_write_session" => dispatch::begin_write_session(state, ctx, parse(args)?).await,
        "append_to_write_session" => {
            dispatch::append_to_write_session(state, ctx, parse(args)?).await
        }
        "finish_write_session" => dispatch::finish_write_session(state, ctx, parse(args)?).await,
        "run" => dispatch::run(state, ctx, parse(args)?).await,
        "claim_paths" => workspaces::claim_paths(state, &ctx, &workspace, parse(args)?).await,
        "list_claims" => {
            parse::<workspaces::NoArgs>(args)?;
            workspaces::list_claims(state, &ctx, &workspace).await
        }
        "release_claims" => workspaces::release_claims(state, &workspace, parse(args)?).await,
        "list_overlaps" => {
            parse::<workspaces::NoArgs>(args)?;
            workspaces::list_overlaps(state, &ctx, &workspace).await
        }
        "rebase_workspace" => {
            workspaces::rebase_workspace(state, &ctx, &workspace, parse(args)?).await
        }
        _ => Err(unknown_tool(state, name)),
    }
}

/// The argument every tool takes besides its own: the workspace the call works in.
pub const WORKSPACE_ARG: &str = "workspace";

/// The call's `workspace` argument (`default` when absent), taken out of `args` so the tool's
/// own arguments parse as they always have.
fn take_workspace(args: Value) -> Result<(Value, String), ApiError> {
    let Value::Object(mut map) = args else {
        return Ok((args, WorkspaceName::DEFAULT.to_owned()));
    };
    let workspace = match map.remove(WORKSPACE_ARG) {
        None | Some(Value::Null) => WorkspaceName::DEFAULT.to_owned(),
        Some(Value::String(name)) => name,
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidArguments,
                "workspace must be a workspace's name (a string)",
            )
            .with_field(WORKSPACE_ARG));
        }
    };
    Ok((Value::Object(map), workspace))
}

/// The state a call in `workspace` is served with; a workspace the key may not use answers
/// exactly as one that does not exist.
///
/// The call draws on the workspace's request bucket (`WRIT_WORKSPACE_RATE_LIMIT_PER_MIN`) as a
/// request under `/workspaces/{name}/…` does in the auth layer, and at the same point (once the
/// key may use it, before it is looked up): the tool routes carry no workspace in their path, so
/// the auth layer cannot, and a tool would otherwise be a way around the workspace's limit.
async fn in_workspace(
    state: &AppState,
    bound: Option<&crate::access::KeyWorkspaces>,
    workspace: &str,
) -> Result<AppState, ApiError> {
    let unknown = || {
        ApiError::not_found(format!("no workspace named '{workspace}'")).with_field(WORKSPACE_ARG)
    };
    if !crate::access::may_use(bound, workspace) {
        return Err(unknown());
    }
    state.limits.take_workspace_request(workspace).await?;
    let opened = state
        .workspaces
        .open(workspace)
        .await?
        .ok_or_else(unknown)?;
    Ok(crate::routes::workspaces::state_within(
        state, workspace, opened,
    ))
}

pub fn unknown_tool(state: &AppState, name: &str) -> ApiError {
    let known: Vec<&str> = available(state).map(|t| t.name).collect();
    ApiError::not_found(format!(
        "no tool named '{name}'; the tools are: {}",
        known.join(", ")
    ))
    .with_field("name")
}

/// Parses arguments exactly as the HTTP API parses a JSON body, so a refusal reads the same
/// (unknown keys named, wrong types with their path).
pub fn parse<T: DeserializeOwned>(args: Value) -> Result<T, ApiError> {
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    let bytes = serde_json::to_vec(&args).map_err(ApiError::internal)?;
    let v: T = parse_json(&bytes)?;
    Ok(v)
}

/// Tool arguments as a provider hands them over: an object, or a string holding one (OpenAI's
/// `arguments`). A string that is not JSON — typically a streamed call cut short — is refused
/// with where it broke off and what was expected.
pub fn arguments_from(raw: Option<Value>) -> Result<Value, ApiError> {
    let invalid = |message: String| {
        ApiError::new(ErrorCode::InvalidArguments, message).with_field("arguments")
    };
    match raw {
        None | Some(Value::Null) => Ok(Value::Object(Default::default())),
        Some(Value::Object(map)) => Ok(Value::Object(map)),
        Some(Value::String(text)) => {
            let parsed: Value = serde_json::from_str(&text).map_err(|e| {
                // At the end of input serde_json points at the last character read; the
                // arguments broke off just after it.
                let offset = if e.is_eof() {
                    text.len()
                } else {
                    byte_offset(&text, e.line(), e.column())
                };
                let what = if e.is_eof() {
                    "the arguments end too early (the tool call looks truncated)"
                } else {
                    "the arguments are not valid JSON"
                };
                invalid(format!(
                    "{what}: {e} (byte offset {offset} of {}); nothing was done — send the complete arguments as one JSON object",
                    text.len()
                ))
            })?;
            match parsed {
                Value::Object(map) => Ok(Value::Object(map)),
                other => Err(invalid(format!(
                    "the arguments must be a JSON object, got {}",
                    json_kind(&other)
                ))),
            }
        }
        Some(other) => Err(invalid(format!(
            "the arguments must be a JSON object (or a string holding one), got {}",
            json_kind(&other)
        ))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// serde_json reports 1-based line and column (column in bytes); this is the 0-based byte offset.
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (line_start + column.saturating_sub(1)).min(text.len())
}

/// The error as a model should read it: what went wrong and which argument.
pub fn error_text(e: &ApiError) -> String {
    match &e.field {
        Some(field) => format!("error ({}, field `{field}`): {}", e.code, e.message),
        None => format!("error ({}): {}", e.code, e.message),
    }
}

/// Draft 2020-12 with every subschema inlined: the declarations then mean the same to every
/// provider (Gemini takes no `$ref`), and there is no recursion to need `$defs`.
fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(map) = schema.as_object_mut() {
        // The Rust type's name and the dialect mean nothing to a model.
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn a_truncated_arguments_string_is_refused_with_where_it_broke_off() {
        let err = arguments_from(Some(Value::String(
            r#"{"path": "a.py", "content": "pri"#.into(),
        )))
        .unwrap_err();
        assert_eq!(err.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(err.field.as_deref(), Some("arguments"));
        assert!(err.message.contains("truncated"), "{}", err.message);
        assert!(err.message.contains("line 1 column 32"), "{}", err.message);
        assert!(
            err.message.contains("byte offset 32 of 32"),
            "{}",
            err.message
        );
    }

    #[test]
    fn byte_offsets_count_earlier_lines() {
        assert_eq!(byte_offset("ab\ncd", 2, 2), 4);
        assert_eq!(byte_offset("ab", 1, 1), 0);
    }

    #[test]
    fn every_tool_schema_is_an_inlined_object() {
        for tool in TOOLS {
            let schema = tool.input_schema();
            assert_eq!(schema["type"], "object", "{}", tool.name);
            assert!(!schema.to_string().contains("$ref"), "{}", tool.name);
        }
    }
}
