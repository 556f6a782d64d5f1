//! The parts a writ is assembled from: the command runner (the sandbox probed once) and the model
//! clients (one per remote provider, the embedded model's, and the router between them) with the
//! synthesis core over them.

use super::*;

/// The command runner when commands are configured: the sandbox is probed once here, and when
/// it cannot start the runner says why to every request that needs it (never running anything
/// unsandboxed).
pub(super) async fn build_command_runner(
    settings: &Settings,
    repo_dir: &std::path::Path,
) -> Option<Arc<writ_sandbox::SandboxRunner>> {
    let commands = settings.run.commands.clone()?;
    let run = &settings.run;
    let config = run.sandbox_config();
    let sandbox = writ_sandbox::Sandbox::probe(config).await;
    if let Err(e) = &sandbox {
        tracing::error!(reason = %e.reason, "the command sandbox cannot start: POST /run and options.validation are refused");
    }
    Some(Arc::new(
        writ_sandbox::SandboxRunner::new(
            sandbox,
            commands,
            repo_dir.to_path_buf(),
            writ_core::execution::RunLimits {
                max_timeout: run.max_timeout,
                max_repair_rounds: run.max_repair_rounds,
            },
        )
        .with_max_per_key(run.max_per_key),
    ))
}

/// The model client and the synthesizer over it. A client that cannot be built (a TLS set-up
/// failure) leaves writ serving the direct routes, with the reason in the log and in `/readyz`.
pub(super) fn build_models(
    settings: &Settings,
    store: &Arc<dyn writ_core::AuditStore>,
    workspace: &Arc<dyn writ_core::Workspace>,
    commands: Option<Arc<dyn writ_core::execution::CommandRunner>>,
) -> (
    Option<Arc<dyn writ_core::ModelClient>>,
    Option<Arc<Synthesizer>>,
) {
    let remotes = match remote_clients(settings) {
        Ok(remotes) => remotes,
        Err(e) => {
            tracing::error!(error = %e, "the model client could not be built; POST /write_codebase is unavailable");
            return (None, None);
        }
    };
    let client = with_local_model(settings, remotes);
    let synthesis = SynthesisConfig {
        candidates: settings.models.code_list.clone(),
        arbiter: settings.models.arbiter_model.clone(),
        fallback: settings.models.fallback_model.clone(),
        image_model: settings.models.image_model.clone(),
        max_tokens: settings.models.max_tokens,
        repo_map_tokens: settings.models.repo_map_tokens,
        recent_operations: settings.models.recent_operations,
        fallback_backoff: settings.models.fallback_backoff,
        straggler: settings.models.straggler,
        max_file_bytes: settings.guard.max_file_bytes,
        max_shown_file_chars: settings.guard.max_shown_file_chars,
        batch_deadline: settings.guard.batch_deadline,
        store_outage_wait: settings.guard.store_outage_wait,
        allowed_models: settings.models.allowed.clone(),
        test_models: settings.models.test_models.clone(),
        generate_checks: settings.run.generate_checks,
        check_commands: settings.run.check_commands.clone(),
        formatters: settings.run.formatters.clone(),
        diagnostics: settings.run.diagnostics.clone(),
        review: settings.review.clone(),
        routing: settings.routing,
        ..SynthesisConfig::default()
    };
    // Always a committer: a batch may ask for its commit (`options.commit`) where the server
    // does not commit by default.
    let committer = crate::service::git::GitCommitter::new(
        workspace.root().to_path_buf(),
        settings.git_commit,
        store.clone(),
    );
    let synthesizer = Synthesizer::new(client.clone(), store.clone(), workspace.clone(), synthesis)
        .with_commands(commands)
        .with_committer(Some(Arc::new(committer)))
        .with_overlaps(Some(Arc::new(crate::service::workspaces::GitOverlaps {
            store: store.clone(),
            default_root: workspace.root().to_path_buf(),
        })));
    (Some(client), Some(Arc::new(synthesizer)))
}

/// One client per remote provider, the default first; each says which of its models are in use.
fn remote_clients(
    settings: &Settings,
) -> Result<Vec<writ_local::Remote>, writ_models::ClientBuildError> {
    let models = &settings.models;
    let retry = writ_models::RetryPolicy {
        max_attempts: models.max_attempts,
        initial_backoff: models.backoff,
        max_backoff: models.backoff.saturating_mul(16),
        total_deadline: models.deadline,
    };
    let mut remotes = Vec::new();
    for (i, provider) in models.providers.remotes.iter().enumerate() {
        // The default keeps the name it always had; the others are told apart by endpoint.
        let name = if i == 0 {
            writ_models::ClientConfig::default().provider_name
        } else {
            provider.base_url.clone()
        };
        let config = writ_models::ClientConfig {
            base_url: provider.base_url.clone(),
            api_key: provider.key.clone(),
            extra_headers: provider.headers.clone(),
            retry,
            max_concurrent_per_model: models.max_concurrent_per_model,
            max_concurrent_total: models.max_concurrent,
            provider_name: name.clone(),
            ..writ_models::ClientConfig::default()
        };
        let client = writ_models::OpenRouterClient::new(config)?;
        remotes.push(writ_local::Remote {
            name,
            client: Arc::new(client),
            in_use: models.remote_in_use(i),
        });
    }
    Ok(remotes)
}

/// One client for the pipeline: `local/…` ids go to the embedded model, the rest to their
/// provider in `remotes`, every answer without a cost priced from `[[models]]`. The embedded
/// model's workers start idle; the model is read on its first call.
fn with_local_model(
    settings: &Settings,
    remotes: Vec<writ_local::Remote>,
) -> Arc<dyn writ_core::ModelClient> {
    let local = if settings.models.local.enabled {
        start_local_model(settings)
    } else {
        None
    };
    let routes = settings
        .models
        .providers
        .models
        .iter()
        .map(|(pattern, entry)| {
            let route = writ_local::Route {
                remote: entry.remote,
                price: entry.price,
            };
            (pattern.clone(), route)
        })
        .collect();
    Arc::new(writ_local::RoutingClient {
        local,
        remotes,
        models: writ_local::ModelTable::new(routes),
    })
}

#[cfg(feature = "local-model")]
fn start_local_model(settings: &Settings) -> Option<Arc<dyn writ_core::ModelClient>> {
    let local = &settings.models.local;
    let mut config = writ_local::LocalConfig::new(local.model_dir.clone());
    config.files = local.files.clone();
    config.models = settings.models.local_models();
    config.workers = local.workers;
    if local.threads > 0 {
        config.threads = local.threads;
    }
    config.context_tokens = local.context_tokens;
    config.max_tokens = Some(
        local
            .max_tokens
            .unwrap_or(u32::MAX)
            .min(settings.models.max_tokens.max(1)),
    );
    config.deadline = local.deadline;
    config.memory_budget = local.memory_mb << 20;
    config.answer_cache = local.answer_cache.clone();
    match writ_local::LocalClient::start(config) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            tracing::error!(error = %e, "the embedded model's workers could not start");
            None
        }
    }
}

#[cfg(not(feature = "local-model"))]
fn start_local_model(_: &Settings) -> Option<Arc<dyn writ_core::ModelClient>> {
    None
}
