//! `writ keys create|list|revoke|hash`: API keys kept (hashed) in the audit store, and the
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
    },
    /// List issued keys: id, name, scopes, created, revoked (never a key or a hash).
    List,
    /// Revoke a key by id; requests with it are refused from then on.
    Revoke { id: String },
    /// Read a key on stdin and print its `WRIT_API_KEYS` entry (`id:sha256hex`, or
    /// `id:sha256hex:read+write` with `--scopes`).
    Hash {
        /// The scopes the configured key has, comma-separated; without, it has read, write
        /// and run, as keys had before scopes existed.
        #[arg(long, value_parser = parse_scopes)]
        scopes: Option<Scopes>,
    },
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
        KeysCommand::Create { name, scopes } => {
            let new = keys::generate_with_scopes(&name, scopes);
            store
                .create_key(&new.record)
                .await
                .context("storing the key")?;
            writeln!(out, "id:  {}", new.record.id)?;
            writeln!(out, "key: {}", new.key)?;
            writeln!(out, "scopes: {scopes}")?;
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
        KeysCommand::Hash { .. } => Ok(true),
    }
}
