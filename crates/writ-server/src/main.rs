//! The `writ` binary: `serve` (default), `mcp`, `migrate`, `check`, `keys`, `models`, `write`, `ops`, `stats`,
//! `workspaces`, `openapi`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use writ_server::{Application, Settings, check, telemetry};

#[derive(Debug, Parser)]
#[command(name = "writ", version, about = "Multi-model code synthesis service")]
struct Cli {
    /// Config file (default: ./writ.toml when present). Environment variables win over it.
    #[arg(long, global = true, env = "WRIT_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the HTTP server (the default).
    Serve {
        /// Listen address; overrides WRIT_ADDR.
        #[arg(long)]
        addr: Option<SocketAddr>,
        /// Serve on a non-loopback address even with no API keys configured.
        #[arg(long)]
        insecure: bool,
    },
    /// Serve MCP on stdin/stdout for an MCP host (logs go to stderr).
    ///
    /// Runs writ in this process on the same settings as `serve` (by default SQLite in
    /// ./writ.db and the workspace ./workspace); no HTTP listener.
    Mcp {
        /// The workspace to write into; overrides REPO_DIR.
        #[arg(long)]
        repo_dir: Option<PathBuf>,
    },
    /// Manage API keys (stored hashed in the audit database).
    Keys {
        #[command(subcommand)]
        command: writ_server::keys_cli::KeysCommand,
    },
    /// Ask a running writ to write files, with live progress (uses WRIT_URL, WRIT_API_KEY).
    Write {
        #[command(flatten)]
        remote: writ_server::remote_cli::Remote,
        #[command(flatten)]
        args: writ_server::remote_cli::WriteArgs,
    },
    /// List the audit log of a running writ (same filters as GET /operations).
    Ops {
        #[command(flatten)]
        remote: writ_server::remote_cli::Remote,
        #[command(flatten)]
        args: writ_server::remote_cli::OpsArgs,
    },
    /// Each model's candidates, viable, chosen, passed validation, cost and latency (GET /stats/models).
    Stats {
        #[command(flatten)]
        remote: writ_server::remote_cli::Remote,
        #[command(flatten)]
        args: writ_server::remote_cli::StatsArgs,
    },
    /// Make, list and delete named workspaces of a running writ (needs an admin key).
    Workspaces {
        #[command(flatten)]
        remote: writ_server::remote_cli::Remote,
        #[command(subcommand)]
        command: writ_server::remote_cli::WorkspacesCommand,
    },
    /// The models writ embeds: list them (which are on this machine) or fetch one.
    Models {
        #[command(subcommand)]
        command: writ_server::models_cli::ModelsCommand,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Print a pre-flight report; exit 1 when something a write needs is missing.
    Check,
    /// Print the OpenAPI document (YAML) generated from the routes and types; openapi.yaml is
    /// its output (scripts/openapi rewrites it).
    Openapi,
}

/// The README's one run command must work offline on a fresh machine: when the default embedded
/// model will serve, get its file now (once per machine) rather than on the first request. A
/// failure is logged and left to `/readyz`; the direct file routes work without a model. Larger
/// models are fetched only by `writ models fetch`.
async fn fetch_local_model(settings: &Settings) {
    #[cfg(feature = "local-model")]
    if settings.models.local.enabled {
        for model in settings.models.local_models() {
            if !model.fetch_on_first_use {
                continue;
            }
            let path = settings.models.local.path_of(model);
            match tokio::task::spawn_blocking(move || writ_local::fetch::ensure_model(model, &path))
                .await
            {
                Ok(Ok(path)) => {
                    tracing::info!(model = %model.id(), path = %path.display(), "embedded model ready")
                }
                Ok(Err(e)) => tracing::error!(error = %e, "the embedded model is not available"),
                Err(e) => tracing::error!(error = %e, "fetching the embedded model panicked"),
            }
        }
    }
    #[cfg(not(feature = "local-model"))]
    let _ = settings;
}

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Needs no settings: the document depends on the code alone.
    if let Some(Command::Openapi) = cli.command {
        return match std::io::stdout().write_all(writ_server::openapi::yaml().as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&anyhow::Error::from(e).context("writing the document")),
        };
    }
    let settings = match Settings::from_env(cli.config.as_deref()) {
        Ok(settings) => settings,
        Err(e) => return fail(&e.into()),
    };
    // Kept to the end of `main`: dropping it sends the traces still held.
    let _telemetry = telemetry::init_logging(&settings.log);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, settings)) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

/// The whole cause chain, once.
fn fail(e: &anyhow::Error) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "writ: error: {e:#}");
    ExitCode::FAILURE
}

async fn run(cli: Cli, mut settings: Settings) -> anyhow::Result<ExitCode> {
    match cli.command.unwrap_or(Command::Serve {
        addr: None,
        insecure: false,
    }) {
        Command::Serve { addr, insecure } => {
            if let Some(addr) = addr {
                settings.addr = addr;
            }
            settings.guard.insecure = insecure;
            fetch_local_model(&settings).await;
            let app = Application::build(settings).await?;
            app.run_until(shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp { repo_dir } => {
            if let Some(dir) = repo_dir {
                settings.repo_dir = dir;
            }
            if settings.database_url == writ_server::config::DEFAULT_DATABASE_URL {
                settings.database_url = mcp_database_url(&settings.repo_dir)?;
            }
            // The host waits for the handshake: the embedded model is fetched alongside, not first.
            let fetching = settings.clone();
            tokio::spawn(async move { fetch_local_model(&fetching).await });
            writ_server::startup::serve_mcp_stdio(settings).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys { command } => {
            let ok = writ_server::keys_cli::run(
                &settings,
                command,
                &mut std::io::stdin().lock(),
                &mut std::io::stdout(),
            )
            .await?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Write { remote, args } => {
            let ok = writ_server::remote_cli::write(&remote, &args, &mut std::io::stdout()).await?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Ops { remote, args } => {
            writ_server::remote_cli::ops(&remote, &args, &mut std::io::stdout()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { remote, args } => {
            writ_server::remote_cli::stats(&remote, &args, &mut std::io::stdout()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Workspaces { remote, command } => {
            writ_server::remote_cli::workspaces(&remote, &command, &mut std::io::stdout()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Models { command } => {
            let ok =
                writ_server::models_cli::run(&settings, command, &mut std::io::stdout()).await?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Migrate => {
            let store = writ_store::connect(&settings.database_url).await?;
            store.migrate().await.context("applying migrations")?;
            let _ = writeln!(
                std::io::stdout(),
                "migrations applied to {}",
                writ_store::redact_url(&settings.database_url)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Openapi => unreachable!("answered before the settings are read"),
        Command::Check => {
            let lines = check::run_checks(&settings).await;
            let ok = check::print_report(&lines, &mut std::io::stdout())?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// An MCP host starts `writ mcp` in a directory of its choosing (often `/` or the home
/// directory), so the default `./writ.db` would land anywhere. Without DATABASE_URL the audit
/// log goes to the user's data directory instead, one file per workspace, named by a hash of
/// its absolute path (never inside the workspace, where a write could reach it).
fn mcp_database_url(repo_dir: &std::path::Path) -> anyhow::Result<String> {
    use sha2::Digest;
    let data_home = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .context("neither XDG_DATA_HOME nor HOME is set: set DATABASE_URL for `writ mcp`")?;
    let dir = data_home.join("writ");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let absolute = std::path::absolute(repo_dir)
        .with_context(|| format!("resolving {}", repo_dir.display()))?;
    let digest = sha2::Sha256::digest(absolute.to_string_lossy().as_bytes());
    let name = format!("mcp-{}.db", &hex::encode(digest)[..16]);
    Ok(format!("sqlite://{}", dir.join(name).display()))
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}
