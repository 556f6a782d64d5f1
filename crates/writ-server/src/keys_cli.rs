//! `writ keys create|list|revoke|hash`: API keys kept (hashed) in the audit store, and the
//! `WRIT_API_KEYS` entry for a key an operator wants in the configuration instead.

use std::io::{BufRead, Write};

use anyhow::Context;
use clap::Subcommand;
use writ_core::keys;

use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Issue a key and store its hash; the key is printed once and cannot be shown again.
    Create {
        /// A label for people (who or what uses the key).
        name: String,
    },
    /// List issued keys: id, name, created, revoked (never a key or a hash).
    List,
    /// Revoke a key by id; requests with it are refused from then on.
    Revoke { id: String },
    /// Read a key on stdin and print its `WRIT_API_KEYS` entry (`id:sha256hex`).
    Hash,
}

/// Runs one `writ keys` command, writing its answer to `out`.
pub async fn run(
    settings: &Settings,
    command: KeysCommand,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    if let KeysCommand::Hash = command {
        let mut line = String::new();
        input
            .read_line(&mut line)
            .context("reading the key from stdin")?;
        let Some(entry) = keys::config_entry(line.trim()) else {
            anyhow::bail!("stdin does not hold a writ key (writ_<12 hex>_<64 hex>)");
        };
        writeln!(out, "{entry}")?;
        return Ok(true);
    }
    let store = writ_store::connect(&settings.database_url).await?;
    store.migrate().await.context("applying migrations")?;
    match command {
        KeysCommand::Create { name } => {
            let new = keys::generate(&name);
            store
                .create_key(&new.record)
                .await
                .context("storing the key")?;
            writeln!(out, "id:  {}", new.record.id)?;
            writeln!(out, "key: {}", new.key)?;
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
                    "{}\t{}\tcreated {}\t{revoked}",
                    k.id,
                    k.name,
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
        KeysCommand::Hash => Ok(true),
    }
}
