//! `writ-fake-upstream`: the fake OpenAI-compatible upstream as a process, for benchmarks.
//!
//! `writ-fake-upstream --addr 127.0.0.1:8089 --script bench.json` serves the scripts in
//! `bench.json` (see [`writ_fake_upstream::ScriptFile`] and `bench-script.example.json` next to
//! this crate's Cargo.toml) and prints its base URL on stdout so a
//! bench script can read it (useful with port 0). Scripts can also be changed while it runs:
//! `PUT /_fake/script/{model}`, `PUT /_fake/route` (a script for one model and prompt needle, see
//! [`writ_fake_upstream::PromptRoute`]), `PUT /_fake/default`, `GET`/`DELETE /_fake/calls`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use writ_fake_upstream::{FakeUpstream, ScriptFile};

// The same allocator as writ: the fake shares the benchmark machine with writ, and glibc's
// malloc/free were a quarter of the fake's CPU there.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "A programmable fake OpenAI-compatible (OpenRouter) upstream"
)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "FAKE_UPSTREAM_ADDR", default_value = "127.0.0.1:8089")]
    addr: SocketAddr,
    /// JSON file: `{"models": {"name": Script}, "default": Script}`.
    #[arg(long)]
    script: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let scripts = match &args.script {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str::<ScriptFile>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => ScriptFile::default(),
    };
    let fake = FakeUpstream::start_on(args.addr)
        .await
        .with_context(|| format!("binding {}", args.addr))?;
    fake.load(scripts);
    tracing::info!(base_url = %fake.base_url(), "fake upstream listening");
    print_base_url(&fake.base_url());
    fake.serve_until(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}

#[expect(
    clippy::print_stdout,
    reason = "bench scripts read the base URL from stdout"
)]
fn print_base_url(url: &str) {
    println!("{url}");
}
