//! `WRIT_ADMIN_KEY_FILE`: a writ that starts with no API key at all (none in the database, none
//! in `WRIT_API_KEYS`) makes one with every scope and writes it to that file, so a container can
//! serve on a non-loopback address from its first start without anyone pasting a hash into its
//! configuration. The key goes only into the file (mode 0600); the log names the file and the
//! key's public id, never the key.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use writ_core::keys::{KeyStore, Scope, Scopes};

use crate::config::Settings;

/// Makes the first key when the settings ask for one and none exists; whether it made one.
pub(super) async fn make_if_none(settings: &Settings, keys: &dyn KeyStore) -> anyhow::Result<bool> {
    let Some(file) = &settings.guard.admin_key_file else {
        return Ok(false);
    };
    if !settings.guard.api_keys.is_empty()
        || keys
            .any_keys()
            .await
            .context("reading the API keys in the store")?
    {
        return Ok(false);
    }
    let new = writ_core::keys::generate_with_scopes("admin (first start)", Scopes::of(&Scope::ALL));
    write_secret(file, &new.key).with_context(|| {
        format!(
            "writing the first key to {} (WRIT_ADMIN_KEY_FILE)",
            file.display()
        )
    })?;
    if let Err(e) = keys.create_key(&new.record).await {
        // A key the store does not know must not stay where someone would take it for one.
        let _ = std::fs::remove_file(file);
        return Err(anyhow::Error::from(e).context("storing the first key"));
    }
    tracing::warn!(
        key_id = %new.record.id,
        file = %file.display(),
        "no API key existed: made one with every scope (read, write, run, admin) and wrote it to WRIT_ADMIN_KEY_FILE; every route but /healthz, /readyz and / now needs it"
    );
    Ok(true)
}

/// `secret` into `file`, readable by this user only, whole or not at all.
fn write_secret(file: &Path, secret: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut temp = file.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = std::path::PathBuf::from(temp);
    let written = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        writeln!(out, "{secret}")?;
        out.sync_all()?;
        std::fs::rename(&temp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}
