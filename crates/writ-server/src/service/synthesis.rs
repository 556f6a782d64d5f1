//! A `write_codebase` call, as `POST /write_codebase` and the `write_codebase` tool make it:
//! validated into a [`Batch`], admitted, and started as a job ([`writ_core::synthesis::Jobs`]).
//! Every refusal happens before any model is called or anything written.

use writ_core::budgets::{BatchBudgets, Budget, BudgetExceeded, BudgetHolder};
use writ_core::content::sha256_hex;
use writ_core::synthesis::{
    Batch, BatchHandle, Begun, Submission, SubmitError, WriteCodebaseRequest,
};

use crate::error::{ApiError, ErrorCode, store_error};
use crate::extract::parse_json;
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

/// Admits a batch and starts it: every refusal happens here, before any model is called or
/// anything written, in one order for every surface (HTTP, MCP, function calling, the CLI):
///
/// 1. parse — the body, with unknown keys refused;
/// 2. replay — a repeated `Idempotency-Key` answers what its first try answered, before
///    anything is checked or taken (a retry never holds a second slot);
/// 3. scope and models — `run` for validation, the configured models;
/// 4. claims — where the batch respects them (`options.respect_claims`, else
///    `WRIT_RESPECT_CLAIMS`), none of the paths it writes claimed by another workspace of its
///    repository (409 `claimed`);
/// 5. budgets — the key's, then the workspace's;
/// 6. targets — the files on disk, each `expected_sha256`, the validation commands;
/// 7. slot — one of the key's (and the workspace's) batches in flight, taken last.
///
/// A batch resumed by another replica goes through steps 3 (models) and 6 again, and every
/// model call asks the budgets again (`writ_core::synthesis::jobs`); claims are asked once, here.
pub async fn begin(state: &AppState, call: BatchCall<'_>) -> Result<Begun<Running>, ApiError> {
    // 1. parse
    let req: WriteCodebaseRequest = parse_json(call.body)?;
    let batch = Batch::parse(req)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.message).with_field(e.field))?;
    let Some(jobs) = state.jobs.clone() else {
        return Err(unavailable(
            "no model provider could be set up; see the server log and `writ check`",
        ));
    };
    let submission = Submission {
        request_id: call.request_id,
        caller: call.caller,
        scope: call.scope,
        idempotency_key: call.idempotency_key,
        body_sha256: sha256_hex(call.body),
        body: std::str::from_utf8(call.body).ok().map(str::to_owned),
        batch,
        workspace: state.workspace.name().to_owned(),
    };

    // 2. replay
    if let Some(done) = jobs.replay(&submission).await.map_err(submit_error)? {
        return Ok(Begun::Replayed(done));
    }

    // 3. scope and models
    let options = submission.batch.options();
    if let Some(problem) = state.settings.models.problem_for(options.models()) {
        return Err(unavailable(&problem));
    }
    // Validation runs the server's commands on the caller's behalf: the same scope as POST /run.
    if options.validation().is_some()
        && let Some(held) = call.scopes
        && !held.contains(writ_core::keys::Scope::Run)
    {
        return Err(
            crate::access::insufficient_scope(writ_core::keys::Scope::Run, held)
                .with_field("options.validation"),
        );
    }

    // 4. claims
    check_claims(state, &submission).await?;

    // 5. budgets
    check_budgets(state, submission.caller.as_deref()).await?;

    // 6. targets (and the models and commands as the core knows them)
    let checked = jobs.check(&submission).await.map_err(submit_error)?;

    // 7. slot: refused at once rather than queued; the permit travels with the task it bounds.
    let permit = state
        .limits
        .admit_batch(
            submission.caller.as_deref(),
            &submission.workspace,
            submission.request_id,
        )
        .await?;
    let is_async = call.prefer_async || submission.batch.options().run_async();
    // The batch then runs in its job's task, so it completes, is recorded, and can be
    // fetched later by idempotency key or from /operations, whoever waits for it.
    Ok(
        match jobs
            .start(submission, checked, is_async, permit)
            .await
            .map_err(submit_error)?
        {
            Begun::Replayed(done) => Begun::Replayed(done),
            Begun::Fresh(handle) => Begun::Fresh(Running { handle, is_async }),
        },
    )
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

/// Refuses a batch whose key, or whose workspace, has spent a limit of its budget in the current
/// day or month, before any model is called (the key's budget is checked first). A repeated
/// `Idempotency-Key` never gets here: it was answered by the replay, whatever was spent since.
async fn check_budgets(state: &AppState, caller: Option<&str>) -> Result<(), ApiError> {
    let key_budget = match caller {
        Some(caller) => state.store.key_budget(caller).await.map_err(store_error)?,
        None => Budget::default(),
    };
    let workspace = state.workspace.name();
    let workspace_budget = state
        .store
        .workspace_budget(workspace)
        .await
        .map_err(store_error)?;
    if key_budget.is_empty() && workspace_budget.is_empty() {
        return Ok(());
    }
    let budgets = BatchBudgets {
        caller: caller.map(str::to_owned),
        workspace: workspace.to_owned(),
        key: key_budget,
        in_workspace: workspace_budget,
    };
    match budgets
        .exceeded(state.store.as_ref(), chrono::Utc::now())
        .await
        .map_err(store_error)?
    {
        Some(refused) => Err(budget_exceeded(
            refused,
            (refused.budget == BudgetHolder::Workspace).then_some(workspace),
        )),
        None => Ok(()),
    }
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
