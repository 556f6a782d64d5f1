//! The tools of parallel agents on one repository — `claim_paths`, `list_claims`,
//! `release_claims`, `list_overlaps`, `rebase_workspace` — over the same service as
//! `/workspaces/{name}/claims`, `/overlaps` and `/rebase`, in the workspace the call names.

use serde::Deserialize;

use super::{CallContext, ToolOutput};
use crate::error::ApiError;
use crate::service::workspaces::{self, ClaimView, MakeClaim, RebaseWorkspace};
use crate::state::AppState;

/// The arguments of a tool that needs only its workspace.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// `release_claims`' arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseClaimArgs {
    /// The claim to release (its id, as `claim_paths` answered); absent: every claim the
    /// workspace holds.
    #[serde(default)]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
}

fn output(content: String, result: &impl serde::Serialize) -> ToolOutput {
    ToolOutput {
        content,
        result: serde_json::to_value(result).unwrap_or(serde_json::Value::Null),
    }
}

fn claim_line(c: &ClaimView) -> String {
    format!(
        "{} by {}: {} (until {})",
        c.id,
        if c.own {
            "this workspace".to_owned()
        } else {
            c.workspace
                .clone()
                .map_or("another workspace".to_owned(), |w| format!("workspace {w}"))
        },
        c.paths.join(", "),
        c.expires_at.to_rfc3339(),
    )
}

/// `claim_paths`: an advisory lease on paths of the repository, for this workspace.
pub async fn claim_paths(
    state: &AppState,
    ctx: &CallContext,
    workspace: &str,
    args: MakeClaim,
) -> Result<ToolOutput, ApiError> {
    let made =
        workspaces::make_claim(&state.workspaces, workspace, args, ctx.caller.as_deref()).await?;
    Ok(output(format!("claimed {}", claim_line(&made)), &made))
}

/// `list_claims`: the live claims of every workspace of the repository.
pub async fn list_claims(
    state: &AppState,
    ctx: &CallContext,
    workspace: &str,
) -> Result<ToolOutput, ApiError> {
    let list = workspaces::list_claims(&state.workspaces, workspace, ctx.bound.as_ref()).await?;
    let content = if list.claims.is_empty() {
        "No workspace of this repository holds a claim.".to_owned()
    } else {
        list.claims
            .iter()
            .map(claim_line)
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(output(content, &list))
}

/// `release_claims`: one of the workspace's claims, or all of them.
pub async fn release_claims(
    state: &AppState,
    workspace: &str,
    args: ReleaseClaimArgs,
) -> Result<ToolOutput, ApiError> {
    let released = match &args.id {
        Some(id) => workspaces::release_claim(&state.workspaces, workspace, id).await?,
        None => workspaces::release_claims(&state.workspaces, workspace).await?,
    };
    Ok(output(
        format!("released {} claim(s)", released.released),
        &released,
    ))
}

/// `list_overlaps`: the paths this workspace changed that another side changed too.
pub async fn list_overlaps(
    state: &AppState,
    ctx: &CallContext,
    workspace: &str,
) -> Result<ToolOutput, ApiError> {
    let bound = ctx.bound.as_ref().map(|b| &b.0[..]);
    let list = workspaces::list_overlaps(&state.workspaces, workspace, bound).await?;
    let content = if list.overlaps.is_empty() {
        "No overlap: no other workspace of the repository, and not the target branch, changed a path this workspace changed.".to_owned()
    } else {
        list.overlaps
            .iter()
            .map(|o| format!("{} {}", o.path, super::batch::overlap_words(o)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(output(content, &list))
}

/// `rebase_workspace`: the workspace's branch replayed on its target's tip, its checks re-run.
pub async fn rebase_workspace(
    state: &AppState,
    ctx: &CallContext,
    workspace: &str,
    args: RebaseWorkspace,
) -> Result<ToolOutput, ApiError> {
    let bound = ctx.bound.as_ref().map(|b| &b.0[..]);
    let rebased = workspaces::rebase(
        state,
        workspace,
        args,
        ctx.caller.as_deref(),
        bound,
        ctx.request_id,
    )
    .await?;
    let mut lines = vec![match rebased.outcome.as_str() {
        "up_to_date" => format!(
            "{} already holds the tip of {}: nothing moved",
            rebased.branch, rebased.onto
        ),
        _ => format!(
            "{} replayed on {} ({} commit(s)); touched: {}; request_id {} (undo takes it back)",
            rebased.branch,
            rebased.onto,
            rebased.replayed,
            rebased.touched.join(", "),
            rebased.request_id
        ),
    }];
    for c in &rebased.checks {
        lines.push(format!(
            "- {} ({}): {}",
            c.commands.join("; "),
            c.paths.join(", "),
            if c.passed {
                "passed".to_owned()
            } else {
                format!("FAILED: {}", c.output_tail.trim())
            }
        ));
    }
    for g in &rebased.generated {
        lines.push(format!(
            "- generated tests of {}: {} of {} pass{}",
            g.path,
            g.rerun.tests_passed,
            g.rerun.tests,
            g.rerun
                .not_run
                .as_deref()
                .map(|why| format!(" (not run: {why})"))
                .unwrap_or_default()
        ));
    }
    if rebased.checks_passed == Some(false) {
        lines.push(
            "the checks fail on the rebased branch: a merge is refused until they pass (or forced)"
                .to_owned(),
        );
    }
    Ok(output(lines.join("\n"), &rebased))
}
