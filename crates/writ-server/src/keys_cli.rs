//! `writ keys create|list|revoke|budget|hash`: API keys kept (hashed) in the audit store, and the
//! `WRIT_API_KEYS` entry for a key an operator wants in the configuration instead.

use std::io::{BufRead, Write};

use anyhow::Context;
use clap::Subcommand;
use writ_core::keys::{self, Scopes};

use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Issue a key and store its hash; the key is printed once and cannot be shown again.
    Create {
        /// A label for people (who or what uses the key).
        name: String,
        /// What the key may do, comma-separated: read, write, run (commands in the sandbox),
        /// admin (reserved for key management). Fixed for the key's life.
        #[arg(long, default_value = "read,write", value_parser = parse_scopes)]
        scopes: Scopes,
        /// A workspace the key may use (repeat for more); without, it may use every
        /// workspace. Any other workspace answers it 404, as one that does not exist.
        #[arg(long = "workspace", value_parser = parse_workspace)]
        workspaces: Vec<String>,
    },
    /// List issued keys: id, name, scopes, created, revoked (never a key or a hash).
    List,
    /// Revoke a key by id; requests with it are refused from then on.
    Revoke { id: String },
    /// Set what a key may spend per UTC day and month (in the provider's currency, USD on
    /// OpenRouter, and in tokens), shared by every replica; with no limit given, show the
    /// budget and this day's and month's spend. `--clear` removes the budget.
    Budget {
        id: String,
        #[arg(long)]
        daily_cost: Option<f64>,
        #[arg(long)]
        daily_tokens: Option<u64>,
        #[arg(long)]
        monthly_cost: Option<f64>,
        #[arg(long)]
        monthly_tokens: Option<u64>,
        /// `refuse` (the default) or `degrade`: from `--degrade-at` of a limit, ask fewer and
        /// cheaper models instead of running as usual (402 at the limit either way).
        #[arg(long, value_parser = parse_on_limit)]
        on_limit: Option<writ_core::budgets::OnLimit>,
        /// With `--on-limit degrade`: the share of a limit from which batches degrade (0.8).
        #[arg(long)]
        degrade_at: Option<f64>,
        #[arg(long, conflicts_with_all = ["daily_cost", "daily_tokens", "monthly_cost", "monthly_tokens"])]
        clear: bool,
    },
    /// Read a key on stdin and print its `WRIT_API_KEYS` entry (`id:sha256hex`, or
    /// `id:sha256hex:read+write` with `--scopes`).
    Hash {
        /// The scopes the configured key has, comma-separated; without, it has read, write
        /// and run, as keys had before scopes existed.
        #[arg(long, value_parser = parse_scopes)]
        scopes: Option<Scopes>,
    },
}

fn parse_on_limit(raw: &str) -> Result<writ_core::budgets::OnLimit, String> {
    writ_core::budgets::OnLimit::parse(raw.trim())
        .ok_or_else(|| format!("on-limit must be refuse or degrade, not '{raw}'"))
}

fn parse_workspace(raw: &str) -> Result<String, String> {
    writ_core::workspace_registry::WorkspaceName::parse(raw)
        .map(|name| name.to_string())
        .map_err(|why| format!("workspace name {why}"))
}

fn parse_scopes(raw: &str) -> Result<Scopes, String> {
    Scopes::parse_list(raw, ',')
}

/// Runs one `writ keys` command, writing its answer to `out`.
pub async fn run(
    settings: &Settings,
    command: KeysCommand,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    if let KeysCommand::Hash { scopes } = command {
        let mut line = String::new();
        input
            .read_line(&mut line)
            .context("reading the key from stdin")?;
        let Some(entry) = keys::config_entry_with_scopes(line.trim(), scopes) else {
            anyhow::bail!("stdin does not hold a writ key (writ_<12 hex>_<64 hex>)");
        };
        writeln!(out, "{entry}")?;
        return Ok(true);
    }
    let store = writ_store::connect(&settings.database_url).await?;
    store.migrate().await.context("applying migrations")?;
    match command {
        KeysCommand::Create {
            name,
            scopes,
            workspaces,
        } => {
            let mut new = keys::generate_with_scopes(&name, scopes);
            if !workspaces.is_empty() {
                new.record.workspaces = Some(workspaces.clone());
            }
            store
                .create_key(&new.record)
                .await
                .context("storing the key")?;
            writeln!(out, "id:  {}", new.record.id)?;
            writeln!(out, "key: {}", new.key)?;
            writeln!(out, "scopes: {scopes}")?;
            if !workspaces.is_empty() {
                writeln!(out, "workspaces: {}", workspaces.join(","))?;
            }
            writeln!(
                out,
                "Keep the key now: writ stores only its hash and cannot show it again."
            )?;
            Ok(true)
        }
        KeysCommand::List => {
            for k in store.list_keys().await.context("listing keys")? {
                let revoked = k
                    .revoked_at
                    .map(|t| format!("revoked {}", t.to_rfc3339()))
                    .unwrap_or_else(|| "active".into());
                writeln!(
                    out,
                    "{}\t{}\tscopes {}\tcreated {}\t{revoked}",
                    k.id,
                    k.name,
                    k.scopes,
                    k.created_at.to_rfc3339()
                )?;
            }
            Ok(true)
        }
        KeysCommand::Revoke { id } => {
            if store
                .revoke_key(id.trim(), chrono::Utc::now())
                .await
                .context("revoking the key")?
            {
                writeln!(out, "revoked {}", id.trim())?;
                Ok(true)
            } else {
                writeln!(out, "no key with id {}", id.trim())?;
                Ok(false)
            }
        }
        KeysCommand::Budget {
            id,
            daily_cost,
            daily_tokens,
            monthly_cost,
            monthly_tokens,
            on_limit,
            degrade_at,
            clear,
        } => {
            let id = id.trim();
            let given = writ_core::budgets::Budget {
                daily_cost,
                daily_tokens,
                monthly_cost,
                monthly_tokens,
                on_limit,
                degrade_at,
            };
            if clear || !given.is_empty() {
                given.validate().map_err(anyhow::Error::msg)?;
                if !store
                    .set_key_budget(id, &given)
                    .await
                    .context("setting the budget")?
                {
                    writeln!(out, "no key with id {id}")?;
                    return Ok(false);
                }
            } else if store
                .find_key(id)
                .await
                .context("reading the key")?
                .is_none()
            {
                writeln!(out, "no key with id {id}")?;
                return Ok(false);
            }
            let budget = store.key_budget(id).await.context("reading the budget")?;
            let windows = writ_core::budgets::windows(
                store.as_ref(),
                writ_core::budgets::SpendHolder::Key(id),
                &budget,
                chrono::Utc::now(),
            )
            .await
            .context("reading spend")?;
            for w in windows {
                let limit = |l: Option<String>| l.unwrap_or_else(|| "no limit".into());
                writeln!(
                    out,
                    "{}\tcost {:.6} of {}\ttokens {} of {}\tresets {}",
                    w.period.as_str(),
                    w.cost,
                    limit(w.cost_limit.map(|c| c.to_string())),
                    w.tokens,
                    limit(w.tokens_limit.map(|t| t.to_string())),
                    w.resets_at.to_rfc3339()
                )?;
            }
            if let Some(at) = budget.degrades_from() {
                writeln!(
                    out,
                    "near a limit\tdegrades from {:.0}% (fewer models, then the cheapest; 402 at the limit)",
                    100.0 * at
                )?;
            }
            Ok(true)
        }
        KeysCommand::Hash { .. } => Ok(true),
    }
}
