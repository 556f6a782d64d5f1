//! A `write_codebase` call, as `POST /write_codebase` and the `write_codebase` tool make it:
//! admitted by the core ([`writ_core::synthesis::Jobs::admit`], with the server's answers to its
//! questions) and started as a job. Every refusal happens before any model is called or anything
//! written.

use writ_core::budgets::BudgetExceeded;
use writ_core::synthesis::{
    AdmissionPorts, AdmitError, BatchHandle, BatchRequest, Begun, Submission, SubmitError,
};

use crate::error::{ApiError, ErrorCode, store_error};
use crate::overload::BatchPermit;
use crate::state::AppState;

/// One `write_codebase` call, from `POST /write_codebase` or the `write_codebase` tool.
pub struct BatchCall<'a> {
    pub request_id: uuid::Uuid,
    pub caller: Option<String>,
    /// Every scope the key holds, when auth is on: `options.validation` runs commands, which
    /// needs `run` beside `write`.
    pub scopes: Option<writ_core::keys::Scopes>,
    /// The key's scope that allowed the batch, when auth is on.
    pub scope: Option<writ_core::keys::Scope>,
    pub idempotency_key: Option<String>,
    /// `Prefer: respond-async`; `options.async` in the body means the same.
    pub prefer_async: bool,
    /// The request as JSON, hashed for idempotency and parsed with unknown keys refused.
    pub body: &'a [u8],
}

/// Admits a batch and starts it: every refusal happens in the core's admission
/// ([`writ_core::synthesis::Jobs::admit`], whose module lists the order), before any model is
/// called or anything written, in one order for every surface (HTTP, MCP, function calling, the
/// CLI). The server answers admission's questions of the deployment ([`ServerAdmission`]): the
/// caller's scopes and the providers, the claims, the slots.
pub async fn begin(state: &AppState, call: BatchCall<'_>) -> Result<Begun<Running>, ApiError> {
    let Some(jobs) = state.jobs.clone() else {
        // A bad body is refused first, as admission would.
        writ_core::synthesis::jobs::parse_request(call.body)?;
        return Err(unavailable(
            "no model provider could be set up; see the server log and `writ check`",
        ));
    };
    let request = BatchRequest {
        request_id: call.request_id,
        caller: call.caller,
        scope: call.scope,
        idempotency_key: call.idempotency_key,
        workspace: state.workspace.name().to_owned(),
        body: call.body,
    };
    let ports = ServerAdmission {
        state,
        scopes: call.scopes,
    };
    let admitted = match jobs.admit(request, &ports).await? {
        Begun::Replayed(done) => return Ok(Begun::Replayed(done)),
        Begun::Fresh(admitted) => admitted,
    };
    let is_async = call.prefer_async || admitted.submission().batch.options().run_async();
    // The batch then runs in its job's task, so it completes, is recorded, and can be
    // fetched later by idempotency key or from /operations, whoever waits for it.
    Ok(
        match jobs.start(admitted, is_async).await.map_err(submit_error)? {
            Begun::Replayed(done) => Begun::Replayed(done),
            Begun::Fresh(handle) => Begun::Fresh(Running { handle, is_async }),
        },
    )
}

/// What admission asks of the server.
struct ServerAdmission<'a> {
    state: &'a AppState,
    /// Every scope the key holds, when auth is on.
    scopes: Option<writ_core::keys::Scopes>,
}

#[async_trait::async_trait]
impl AdmissionPorts for ServerAdmission<'_> {
    type Refusal = ApiError;
    type Permit = BatchPermit;

    fn scope_and_models(&self, sub: &Submission) -> Result<(), ApiError> {
        let options = sub.batch.options();
        if let Some(problem) = self.state.settings.models.problem_for(options.models()) {
            return Err(unavailable(&problem));
        }
        // Validation runs the server's commands on the caller's behalf: the same scope as
        // POST /run.
        if options.validation().is_some()
            && let Some(held) = self.scopes
            && !held.contains(writ_core::keys::Scope::Run)
        {
            return Err(
                crate::access::insufficient_scope(writ_core::keys::Scope::Run, held)
                    .with_field("options.validation"),
            );
        }
        Ok(())
    }

    async fn claims(&self, sub: &Submission) -> Result<(), ApiError> {
        check_claims(self.state, sub).await
    }

    async fn slot(&self, sub: &Submission) -> Result<BatchPermit, ApiError> {
        self.state
            .limits
            .admit_batch(sub.caller.as_deref(), &sub.workspace, sub.request_id)
            .await
    }
}

impl From<AdmitError> for ApiError {
    fn from(err: AdmitError) -> Self {
        match err {
            AdmitError::Body(message) => ApiError::invalid_body(message),
            AdmitError::Submit(e) => submit_error(e),
            AdmitError::Budget {
                exceeded,
                workspace,
            } => budget_exceeded(exceeded, workspace.as_deref()),
        }
    }
}

/// A batch that went ahead. It runs in its own task, which holds the admission permit until it
/// ends: the handle gives its answer, and dropping it (an async batch: the caller follows
/// `/jobs/{job_id}`) lets the batch run on and be recorded all the same.
pub struct Running {
    pub handle: BatchHandle,
    /// The caller asked for the job at once (`Prefer: respond-async`, `options.async`).
    pub is_async: bool,
}

/// The body of a 202: where to follow the job.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct AcceptedBatch {
    pub job_id: uuid::Uuid,
    /// Always `queued`: the job's own state is at `location`.
    #[schemars(extend("enum" = ["queued"]))]
    pub status: &'static str,
    pub location: String,
    pub events: String,
}

/// `workspace`: where the batch was accepted; its job is followed there.
pub fn accepted_body(job_id: uuid::Uuid, workspace: &str) -> AcceptedBatch {
    let location = format!(
        "{}/jobs/{job_id}",
        crate::routes::jobs::workspace_prefix(workspace)
    );
    AcceptedBatch {
        job_id,
        status: "queued",
        events: format!("{location}/events"),
        location,
    }
}

fn unavailable(message: &str) -> ApiError {
    ApiError::new(ErrorCode::ModelsUnavailable, message)
}

pub fn submit_error(err: SubmitError) -> ApiError {
    match err {
        SubmitError::Invalid(e) => {
            ApiError::new(ErrorCode::InvalidRequest, e.message).with_field(e.field)
        }
        SubmitError::IdempotencyConflict => {
            ApiError::new(ErrorCode::IdempotencyConflict, err.to_string())
                .with_field("Idempotency-Key")
        }
        SubmitError::InProgress => {
            let mut e = ApiError::new(ErrorCode::IdempotencyInProgress, err.to_string())
                .with_field("Idempotency-Key");
            e.retry_after_secs = Some(5);
            e
        }
        SubmitError::Audit(store) => store_error(store),
        SubmitError::Unavailable(why) => ApiError::new(ErrorCode::CommandsUnavailable, why),
        SubmitError::Lost(why) => ApiError::internal(why),
        SubmitError::Stale { ref field, .. } => {
            let field = field.clone();
            ApiError::new(ErrorCode::PreconditionFailed, err.to_string()).with_field(field)
        }
    }
}

/// Refuses a batch that respects claims when another workspace of its repository has claimed a
/// path it writes: its files and the tests it keeps. A dry run writes nothing and is never
/// refused.
async fn check_claims(state: &AppState, submission: &Submission) -> Result<(), ApiError> {
    let options = submission.batch.options();
    if options.dry_run()
        || !crate::service::workspaces::respected(options.respect_claims(), &state.settings)
    {
        return Ok(());
    }
    let fields: Vec<String> = submission
        .batch
        .files()
        .iter()
        .enumerate()
        .map(|(i, _)| format!("files[{i}].filename"))
        .collect();
    let mut paths: Vec<(&str, &str)> = submission
        .batch
        .files()
        .iter()
        .zip(&fields)
        .map(|(f, field)| (f.path().as_str(), field.as_str()))
        .collect();
    if let Some(kept) = options.validation().and_then(|v| v.keep_tests()) {
        paths.push((kept.as_str(), "options.validation.keep_tests"));
    }
    crate::service::workspaces::refuse_claimed(
        &state.workspaces,
        &submission.workspace,
        &paths,
        submission.caller.as_deref(),
    )
    .await
}

/// The 402 for a spent limit: `field` names the limit as the budget's body does
/// (`daily_tokens`), `details` says whose budget it is (`budget`: `key` or `workspace`, and the
/// workspace's name), and `Retry-After` when the window resets.
fn budget_exceeded(refused: BudgetExceeded, workspace: Option<&str>) -> ApiError {
    let message = match workspace {
        Some(name) => format!("{refused} (workspace '{name}')"),
        None => refused.to_string(),
    };
    let mut details = serde_json::json!(refused);
    if let Some(name) = workspace {
        details["workspace"] = serde_json::json!(name);
    }
    let mut e = ApiError::new(ErrorCode::BudgetExceeded, message)
        .with_field(format!(
            "{}_{}",
            match refused.period {
                writ_core::budgets::Period::Day => "daily",
                writ_core::budgets::Period::Month => "monthly",
            },
            refused.limit_kind
        ))
        .with_details(details);
    e.retry_after_secs = u64::try_from(
        (refused.resets_at - chrono::Utc::now())
            .num_seconds()
            .max(1),
    )
    .ok();
    e
}
