//! What writ says about itself: liveness, readiness, metrics, the OpenAPI document and the
//! dashboard page. (The service layer the other routes share is [`crate::service`].)

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use metrics_exporter_prometheus::PrometheusHandle;
use sha2::{Digest, Sha256};
use writ_core::AuditStore;

use crate::headers::PresentedKey;
use crate::readiness::{Check, Checks, Readiness, ReadinessBody, ReadyStatus};
use crate::state::AppState;

/// The spec, checked in at the repository root: the output of [`crate::openapi`] (a test
/// fails when they differ). Served from the file so the route layer does not depend on the
/// generator, which reads the route table.
pub const OPENAPI_YAML: &str = include_str!("../../../../openapi.yaml");

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// `/healthz`'s answer: the process is alive.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Health {
    pub status: Alive,
}

#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Alive {
    Ok,
}

/// The process is alive.
pub async fn healthz() -> Json<Health> {
    Json(Health { status: Alive::Ok })
}

/// Every check, run now.
async fn probe(state: &AppState) -> Readiness {
    metrics::counter!("writ_readyz_probes_total").increment(1);
    let (database, repo_dir) = tokio::join!(check_database(state), check_repo_dir(state));
    Readiness::new(Checks {
        database,
        repo_dir,
        provider: check_provider(state),
        commands: check_commands(state),
    })
}

/// One entry per check; 503 when a check that writes need fails. While API keys exist, the
/// details (REPO_DIR's absolute path, database errors) are shown only to a caller with a valid
/// key; everyone else sees which checks pass.
pub async fn readyz(
    State(state): State<AppState>,
    PresentedKey(authorization): PresentedKey,
) -> Response {
    let readiness = state.readiness.get(probe(&state)).await;
    let detailed = crate::auth::may_see_details(&state, authorization.as_deref()).await;
    let checks = if detailed {
        readiness.checks.clone()
    } else {
        readiness.checks.map(|check| Check {
            detail: if check.ok { "ok" } else { "failing" }.to_string()
                + "; details need an API key",
            ..check.clone()
        })
    };
    let body = ReadinessBody {
        status: if readiness.ready {
            ReadyStatus::Ready
        } else {
            ReadyStatus::NotReady
        },
        checks,
    };
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

pub async fn check_database(state: &AppState) -> Check {
    let backend = state.store.backend();
    let result = tokio::time::timeout(CHECK_TIMEOUT, async {
        state.store.ping().await?;
        state.store.is_migrated().await
    })
    .await;
    match result {
        Ok(Ok(true)) => Check {
            ok: true,
            required: true,
            detail: format!("{backend}: reachable, migrated"),
        },
        Ok(Ok(false)) => Check {
            ok: false,
            required: true,
            detail: format!("{backend}: reachable but not migrated (run `writ migrate`)"),
        },
        Ok(Err(e)) => Check {
            ok: false,
            required: true,
            detail: format!("{backend}: {e}"),
        },
        Err(_) => Check {
            ok: false,
            required: true,
            detail: format!("{backend}: no answer within {}s", CHECK_TIMEOUT.as_secs()),
        },
    }
}

pub async fn check_repo_dir(state: &AppState) -> Check {
    let root = state.workspace.root().display().to_string();
    match tokio::time::timeout(CHECK_TIMEOUT, state.workspace.probe_writable()).await {
        Ok(Ok(())) => Check {
            ok: true,
            required: true,
            detail: format!("{root}: writable"),
        },
        Ok(Err(e)) => Check {
            ok: false,
            required: true,
            detail: format!("{root}: not writable: {e}"),
        },
        Err(_) => Check {
            ok: false,
            required: true,
            detail: format!("{root}: no answer within {}s", CHECK_TIMEOUT.as_secs()),
        },
    }
}

/// Model-backed writes need the provider; direct file routes do not. So the provider only makes
/// writ not ready when models are configured but unusable.
/// The command sandbox (`POST /run`, `options.validation`): not required for writes, so never
/// makes writ unready, but says in plain words why commands cannot run when they cannot.
pub fn check_commands(state: &AppState) -> Check {
    match &state.commands {
        None => Check {
            ok: true,
            required: false,
            detail:
                "no commands configured (WRIT_COMMANDS): POST /run and options.validation are off"
                    .into(),
        },
        Some(runner) => match runner.problem() {
            Some(problem) => Check {
                ok: false,
                required: false,
                detail: format!("{problem}; POST /run and options.validation answer 503"),
            },
            None => Check {
                ok: true,
                required: false,
                detail: format!(
                    "sandbox ready; scratch: {}; commands: {}",
                    runner.scratch_mechanism().unwrap_or_default(),
                    runner.command_names().join(", ")
                ),
            },
        },
    }
}

pub fn check_provider(state: &AppState) -> Check {
    let settings = &state.settings;
    if settings.models.code_list.is_empty() {
        return Check {
            ok: false,
            required: false,
            detail: format!(
                "no models configured ({}): POST /write_codebase is unavailable, direct file routes work",
                settings.models.reason
            ),
        };
    }
    if let Some(problem) = settings.models.problem() {
        return Check {
            ok: false,
            required: true,
            detail: problem,
        };
    }
    if let Some(models) = &state.models {
        let r = models.readiness();
        return Check {
            ok: r.ready,
            required: true,
            // Which provider is active and why (the embedded model is a default, not a choice).
            detail: format!("{}: {}; why: {}", r.name, r.detail, settings.models.reason),
        };
    }
    Check {
        ok: true,
        required: true,
        detail: format!("{} configured", settings.models.openrouter_base_url),
    }
}

/// Prometheus text exposition.
pub async fn metrics(
    State(handle): State<PrometheusHandle>,
    State(store): State<Arc<dyn AuditStore>>,
) -> Response {
    // Spend is read from the store at each scrape, so every replica reports every key's.
    if let Err(e) = crate::service::spend::publish_all(store.as_ref()).await {
        tracing::warn!(error = %e.message, "key spend left out of /metrics");
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// The dashboard page, whose inline script the CSP names by hash.
pub const DASHBOARD_HTML: &str = include_str!("../../assets/dashboard.html");

/// The dashboard's one inline script, allowed by its hash so that no other inline script runs.
static DASHBOARD_CSP: LazyLock<String> = LazyLock::new(|| {
    let page = DASHBOARD_HTML;
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

/// The dashboard: one self-contained page (no build step, no CDN) that reads the same API with
/// the key the person types in, so it works with auth on.
pub async fn dashboard() -> Response {
    (
        dashboard_headers(),
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        DASHBOARD_HTML,
    )
        .into_response()
}

/// The OpenAPI document of this server.
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_dashboard_csp_names_its_script_by_hash() {
        assert!(super::DASHBOARD_CSP.contains("script-src 'sha256-"));
        assert!(!super::DASHBOARD_CSP.contains("script-src 'unsafe-inline'"));
    }
}
