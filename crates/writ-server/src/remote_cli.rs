//! `writ write` and `writ ops`: the CLI side, talking to a running writ over HTTP.
//!
//! `write` starts an async batch, follows its event stream with one progress bar per file, and
//! prints a summary table; it exits non-zero when a file failed. `ops` lists the audit log with
//! the filters of `GET /operations`. Both read `WRIT_URL` and `WRIT_API_KEY`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use writ_core::synthesis::{BatchResponse, Event};

/// Where the server is and how to get in.
#[derive(Debug, Clone, clap::Args)]
pub struct Remote {
    /// Base URL of a running writ.
    #[arg(
        long,
        env = "WRIT_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// API key, when the server requires one.
    #[arg(long, env = "WRIT_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct WriteArgs {
    /// Files as `path=description`, e.g. `src/app.py="A Flask app with /health"` (at most 5).
    #[arg(required = true, value_name = "PATH=DESCRIPTION")]
    pub files: Vec<String>,
    /// The overall task the files serve.
    #[arg(long)]
    pub task: Option<String>,
    /// Candidate models for this batch (repeat or comma-separate); default: the server's CODE_LIST.
    #[arg(long = "model", value_delimiter = ',')]
    pub models: Vec<String>,
    /// Return the content without writing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write all files or none.
    #[arg(long)]
    pub atomic: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct OpsArgs {
    #[arg(long)]
    pub request_id: Option<String>,
    #[arg(long)]
    pub filename: Option<String>,
    /// pending, succeeded or failed.
    #[arg(long)]
    pub status: Option<String>,
    /// The chosen model.
    #[arg(long)]
    pub model: Option<String>,
    /// RFC 3339, inclusive.
    #[arg(long)]
    pub since: Option<String>,
    /// RFC 3339, exclusive.
    #[arg(long)]
    pub until: Option<String>,
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// The `next` cursor printed by a previous call.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// `writ stats`: the query of `GET /stats/models`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatsArgs {
    /// RFC 3339 (default: 24 hours before --until).
    #[arg(long)]
    pub since: Option<String>,
    /// RFC 3339 (default: now).
    #[arg(long)]
    pub until: Option<String>,
    /// One row per model and language of the file.
    #[arg(long)]
    pub by_language: bool,
}

/// Prints each model's figures over a window of the audit log of a running writ.
pub async fn stats(remote: &Remote, args: &StatsArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut query: Vec<(&str, String)> = Vec::new();
    for (k, v) in [("since", &args.since), ("until", &args.until)] {
        if let Some(v) = v {
            query.push((k, v.clone()));
        }
    }
    if args.by_language {
        query.push(("by", "language".into()));
    }
    let page = get_json(remote, "/stats/models", &query).await?;
    writeln!(
        out,
        "{:<32} {:<12} {:>10} {:>7} {:>7} {:>10} {:>6} {:>10} {:>9} {:>9}",
        "MODEL",
        "LANGUAGE",
        "CANDIDATES",
        "VIABLE",
        "CHOSEN",
        "PASSED",
        "OTHER",
        "COST",
        "P50 MS",
        "P95 MS"
    )?;
    for m in page["models"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:<32} {:<12} {:>10} {:>7} {:>7} {:>10} {:>6} {:>10.4} {:>9} {:>9}",
            m["model"].as_str().unwrap_or(""),
            m["language"].as_str().unwrap_or("-"),
            m["candidates"],
            m["viable"],
            m["chosen"],
            format!("{}/{}", m["passed_validation"], m["validated"]),
            m["other_calls"],
            m["cost"].as_f64().unwrap_or(0.0),
            m["latency_p50_ms"],
            m["latency_p95_ms"],
        )?;
    }
    writeln!(
        out,
        "{} operations from {} to {}{}",
        page["operations"],
        page["since"].as_str().unwrap_or("?"),
        page["until"].as_str().unwrap_or("?"),
        if page["truncated"] == true {
            " (truncated: the newest were counted)"
        } else {
            ""
        }
    )?;
    Ok(())
}

/// `GET {WRIT_URL}{path}?{query}` as JSON; a refusal or an unreachable server is the error.
async fn get_json(remote: &Remote, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
    let base = remote.url.trim_end_matches('/');
    let url = reqwest::Url::parse_with_params(&format!("{base}{path}"), query)
        .with_context(|| format!("WRIT_URL {base} is not a URL"))?;
    let resp = authed(http()?.get(url), remote)
        .send()
        .await
        .with_context(|| format!("cannot reach writ at {base} (set WRIT_URL)"))?;
    if !resp.status().is_success() {
        return Err(refusal(resp).await);
    }
    Ok(resp.json().await?)
}

fn http() -> anyhow::Result<reqwest::Client> {
    // reqwest is built without a bundled TLS provider (ring is ours); install it once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .context("building the HTTP client")
}

fn authed(req: reqwest::RequestBuilder, remote: &Remote) -> reqwest::RequestBuilder {
    match &remote.api_key {
        Some(key) => req.bearer_auth(key),
        None => req,
    }
}

/// The server's error body in plain words.
async fn refusal(resp: reqwest::Response) -> anyhow::Error {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"].as_str().unwrap_or("no details");
    match body["error"]["field"].as_str() {
        Some(field) => anyhow::anyhow!("writ refused the request ({status}): {field}: {message}"),
        None => anyhow::anyhow!("writ refused the request ({status}): {message}"),
    }
}

/// Parses `path=description` pairs into file descriptors.
pub fn parse_files(pairs: &[String]) -> anyhow::Result<Vec<Value>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((path, desc)) if !path.trim().is_empty() && !desc.trim().is_empty() => {
                Ok(json!({"filename": path.trim(), "code_description": desc.trim()}))
            }
            _ => bail!("'{pair}' is not PATH=DESCRIPTION (e.g. src/app.py=\"A Flask app\")"),
        })
        .collect()
}

/// Runs `writ write`; returns whether every file succeeded.
pub async fn write(remote: &Remote, args: &WriteArgs, out: &mut dyn Write) -> anyhow::Result<bool> {
    let files = parse_files(&args.files)?;
    let mut options = json!({"async": true, "dry_run": args.dry_run, "atomic": args.atomic});
    if !args.models.is_empty() {
        options["models"] = json!(args.models);
    }
    let mut body = json!({"command": "write_codebase", "files": files, "options": options});
    if let Some(task) = &args.task {
        body["task_description"] = json!(task);
    }
    let client = http()?;
    let base = remote.url.trim_end_matches('/');
    let resp = authed(client.post(format!("{base}/write_codebase")), remote)
        .json(&body)
        .send()
        .await
        .with_context(|| format!("cannot reach writ at {base} (set WRIT_URL)"))?;
    if resp.status().as_u16() != 202 {
        return Err(refusal(resp).await);
    }
    let accepted: Value = resp.json().await.context("reading the 202 answer")?;
    let job = accepted["job_id"]
        .as_str()
        .context("no job_id in the answer")?
        .to_string();

    follow(&client, remote, base, &job, &args.files).await?;

    let resp = authed(client.get(format!("{base}/jobs/{job}")), remote)
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(refusal(resp).await);
    }
    let mut job_state: Value = resp.json().await?;
    if job_state["status"] == "failed" {
        writeln!(
            out,
            "batch {job} failed: {}",
            job_state["error"].as_str().unwrap_or("unknown reason")
        )?;
        return Ok(false);
    }
    let response: BatchResponse = serde_json::from_value(job_state["response"].take())
        .context("reading the batch's answer")?;
    print_summary(&response, out)?;
    Ok(response.results.iter().all(|f| f.success))
}

/// One bar per file, moved along by the job's event stream until `done`.
async fn follow(
    client: &reqwest::Client,
    remote: &Remote,
    base: &str,
    job: &str,
    pairs: &[String],
) -> anyhow::Result<()> {
    let multi = MultiProgress::new();
    let style = ProgressStyle::with_template("{spinner} {prefix:<28} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let mut bars: BTreeMap<String, ProgressBar> = BTreeMap::new();
    for pair in pairs {
        let path = pair
            .split_once('=')
            .map(|(p, _)| p.trim())
            .unwrap_or(pair)
            .trim_start_matches("./")
            .to_string();
        let bar = multi.add(ProgressBar::new_spinner());
        bar.set_style(style.clone());
        bar.set_prefix(path.clone());
        bar.set_message("queued");
        bar.enable_steady_tick(Duration::from_millis(120));
        bars.insert(path, bar);
    }
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut resp = authed(client.get(format!("{base}/jobs/{job}/events")), remote)
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(refusal(resp).await);
    }
    let mut buffer = String::new();
    while let Some(chunk) = resp.chunk().await? {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) else {
                continue;
            };
            // A line this build cannot read (a newer server's event) is skipped, not fatal.
            let Ok(event) = serde_json::from_str::<Event>(data.trim()) else {
                continue;
            };
            match event {
                Event::FileStarted { file } => bars
                    .get(&file)
                    .into_iter()
                    .for_each(|b| b.set_message("asking the models")),
                Event::CandidateStarted { file, .. } => counts.entry(file).or_default().0 += 1,
                Event::CandidateFinished {
                    file,
                    model,
                    latency_ms,
                    ..
                } => {
                    let c = counts.entry(file.clone()).or_default();
                    c.1 += 1;
                    if let Some(b) = bars.get(&file) {
                        b.set_message(format!(
                            "{}/{} candidates in (last: {} {latency_ms} ms)",
                            c.1,
                            c.0,
                            terminal_safe(&model)
                        ));
                    }
                }
                Event::ArbiterStarted {
                    file, candidates, ..
                } => bars.get(&file).into_iter().for_each(|b| {
                    b.set_message(format!("arbiter comparing {candidates} candidates"))
                }),
                Event::ArbiterChose { file, model, .. } => {
                    bars.get(&file).into_iter().for_each(|b| {
                        b.set_message(format!("arbiter chose {}", terminal_safe(&model)))
                    })
                }
                Event::FileWritten {
                    file,
                    operation,
                    bytes,
                    ..
                } => bars.get(&file).into_iter().for_each(|b| {
                    b.finish_with_message(format!(
                        "✓ {} ({bytes} bytes)",
                        terminal_safe(&operation)
                    ))
                }),
                Event::FileFailed { file, error } => bars
                    .get(&file)
                    .into_iter()
                    .for_each(|b| b.finish_with_message(format!("✗ {}", terminal_safe(&error)))),
                Event::ChangeProposed { files, .. } => {
                    for f in files {
                        bars.get(&f.path).into_iter().for_each(|b| {
                            b.finish_with_message(format!(
                                "proposed for review ({} hunk(s))",
                                f.hunks.len()
                            ))
                        });
                    }
                }
                // A change set's own stream, not a batch's.
                Event::ChangeApplied { .. } | Event::ChangeRejected { .. } => {}
                Event::Overlap(o) => bars.get(&o.path).into_iter().for_each(|b| {
                    b.println(format!(
                        "! {} was changed in {} too since you share a base",
                        terminal_safe(&o.path),
                        terminal_safe(
                            o.workspace
                                .as_deref()
                                .or(o.branch.as_deref())
                                .unwrap_or("another workspace")
                        )
                    ))
                }),
                Event::Done { .. } => {
                    for b in bars.values() {
                        if !b.is_finished() {
                            b.finish();
                        }
                    }
                    return Ok(());
                }
                Event::ChecksGenerated { file, tests, .. } => bars
                    .get(&file)
                    .into_iter()
                    .for_each(|b| b.set_message(format!("running {tests} generated tests"))),
                Event::ChecksUnavailable { file, status, .. } => {
                    bars.get(&file).into_iter().for_each(|b| {
                        b.set_message(format!(
                            "generated checks could not choose ({}): the arbiter chooses",
                            status.as_str()
                        ))
                    })
                }
                Event::AgreementComputed { file, tied, .. } => {
                    bars.get(&file).into_iter().for_each(|b| {
                        b.set_message(format!("{tied} candidate(s) tied on the generated tests"))
                    })
                }
                Event::ArbiterAskedInputs { file, inputs } => bars
                    .get(&file)
                    .into_iter()
                    .for_each(|b| b.set_message(format!("arbiter asked about {inputs} input(s)"))),
                Event::StoppedEarly {
                    file, cancelled, ..
                } => bars.get(&file).into_iter().for_each(|b| {
                    b.set_message(format!("a candidate passed; {cancelled} call(s) stopped"))
                }),
                Event::RoundStarted { file, models, .. } => {
                    bars.get(&file).into_iter().for_each(|b| {
                        b.set_message(format!("none passed; asking {models} more model(s)"))
                    })
                }
                Event::ValidationStarted { file, candidates } => {
                    bars.get(&file).into_iter().for_each(|b| {
                        b.set_message(format!("running the checks on {candidates} candidates"))
                    })
                }
                Event::ValidationFinished {
                    file,
                    model,
                    passed,
                    ..
                } => bars.get(&file).into_iter().for_each(|b| {
                    b.set_message(format!(
                        "checks {} for {}",
                        if passed { "passed" } else { "failed" },
                        terminal_safe(&model)
                    ))
                }),
                Event::Formatted { file, changed, .. } => {
                    bars.get(&file).into_iter().for_each(|b| {
                        b.set_message(if changed {
                            "formatted"
                        } else {
                            "format checked"
                        })
                    })
                }
                Event::RepairStarted { file, round, .. } => bars
                    .get(&file)
                    .into_iter()
                    .for_each(|b| b.set_message(format!("repair round {round}"))),
                Event::Queued { .. } => {}
            }
        }
    }
    Ok(())
}

/// Text from the server as it may be shown on a terminal: control characters (escape
/// sequences that could rewrite the screen) are shown escaped.
fn terminal_safe(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn print_summary(response: &BatchResponse, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<32} {:<8} {:<10} {:<28} {:<28} {:>8}",
        "FILE", "RESULT", "OPERATION", "MODEL", "SELECTION", "BYTES"
    )?;
    for r in &response.results {
        writeln!(
            out,
            "{:<32} {:<8} {:<10} {:<28} {:<28} {:>8}",
            terminal_safe(&r.filename),
            if r.success { "ok" } else { "FAILED" },
            r.operation.map_or("-", |o| o.as_str()),
            terminal_safe(r.chosen_model.as_deref().unwrap_or("-")),
            r.selection.map_or("-", |s| s.as_str()),
            r.bytes.map_or_else(|| "-".to_string(), |b| b.to_string())
        )?;
        if let Some(e) = &r.error {
            writeln!(out, "    error: {}", terminal_safe(e))?;
        }
    }
    writeln!(
        out,
        "{}: {} of {} files written in {} ms (request {})",
        response.status.as_str(),
        response.succeeded,
        response.total_files,
        response.duration_ms,
        response.request_id
    )
}

/// Runs `writ ops`.
pub async fn ops(remote: &Remote, args: &OpsArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut query: Vec<(&str, String)> = vec![("limit", args.limit.to_string())];
    for (k, v) in [
        ("request_id", &args.request_id),
        ("filename", &args.filename),
        ("status", &args.status),
        ("model", &args.model),
        ("since", &args.since),
        ("until", &args.until),
        ("cursor", &args.cursor),
    ] {
        if let Some(v) = v {
            query.push((k, v.clone()));
        }
    }
    let page = get_json(remote, "/operations", &query).await?;
    writeln!(
        out,
        "{:<27} {:<10} {:<10} {:<32} {:<24} {:<26} {:>8}",
        "CREATED", "STATUS", "OPERATION", "FILE", "MODEL", "SELECTION", "BYTES"
    )?;
    for op in page["operations"].as_array().into_iter().flatten() {
        let s = |k: &str| terminal_safe(op[k].as_str().unwrap_or("-"));
        let created: String = s("created_at").chars().take(26).collect();
        writeln!(
            out,
            "{:<27} {:<10} {:<10} {:<32} {:<24} {:<26} {:>8}",
            created,
            s("status"),
            s("operation"),
            s("filename"),
            s("chosen_model"),
            s("selection"),
            op["bytes"]
                .as_i64()
                .map(|b| b.to_string())
                .unwrap_or_else(|| "-".into())
        )?;
        if let Some(e) = op["error"].as_str() {
            writeln!(out, "    error: {}", terminal_safe(e))?;
        }
    }
    if let Some(next) = page["next_cursor"].as_str() {
        writeln!(out, "more: writ ops --cursor {next}")?;
    }
    Ok(())
}

/// `writ workspaces`: named workspaces of a running writ (needs an `admin` key).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum WorkspacesCommand {
    /// Make a workspace: empty, from a directory under WRIT_WORKSPACES_DIR (`--directory`), or a
    /// git worktree of a repository on a new branch (`--worktree-of REPO --branch B [--from REF]`).
    Create {
        name: String,
        /// A directory relative to the server's WRIT_WORKSPACES_DIR.
        #[arg(long, conflicts_with_all = ["worktree_of", "branch", "from"])]
        directory: Option<String>,
        /// The repository: a workspace's name, or a path relative to WRIT_WORKSPACES_DIR.
        #[arg(long, requires = "branch")]
        worktree_of: Option<String>,
        /// The new branch the worktree is checked out on.
        #[arg(long, requires = "worktree_of")]
        branch: Option<String>,
        /// The ref the branch is made at (default HEAD).
        #[arg(long, requires = "worktree_of")]
        from: Option<String>,
        /// What the workspace's batches may spend, whoever's key runs them.
        #[command(flatten)]
        budget: WorkspaceBudget,
    },
    /// List the workspaces the key may use.
    List,
    /// Forget a workspace (its files are kept; a worktree is pruned, its branch kept).
    Delete { name: String },
    /// Set what a workspace's batches may spend per UTC day and month, whoever's key runs them
    /// (in the provider's currency, USD on OpenRouter, and in tokens); with no limit given, show
    /// the budget and this day's and month's spend. `--clear` removes the budget.
    Budget {
        name: String,
        #[command(flatten)]
        budget: WorkspaceBudget,
        #[arg(long, conflicts_with_all = ["daily_cost", "daily_tokens", "monthly_cost", "monthly_tokens"])]
        clear: bool,
    },
}

/// A workspace's budget as `writ keys budget` takes a key's: each limit its own flag, any left
/// out unlimited. The server validates it (a negative or zero limit is refused by name).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorkspaceBudget {
    #[arg(long)]
    pub daily_cost: Option<f64>,
    #[arg(long)]
    pub daily_tokens: Option<u64>,
    #[arg(long)]
    pub monthly_cost: Option<f64>,
    #[arg(long)]
    pub monthly_tokens: Option<u64>,
    /// `refuse` (the default) or `degrade`: from `--degrade-at` of a limit, fewer and cheaper
    /// models instead of running as usual (402 at the limit either way).
    #[arg(long, value_parser = ["refuse", "degrade"])]
    pub on_limit: Option<String>,
    /// With `--on-limit degrade`: the share of a limit from which batches degrade (0.8).
    #[arg(long)]
    pub degrade_at: Option<f64>,
}

impl WorkspaceBudget {
    /// The budget as `POST /workspaces` and `PUT /workspaces/{name}/budget` take it; `None`
    /// when no limit is given.
    fn body(&self) -> Option<Value> {
        let mut body = serde_json::Map::new();
        let mut put = |field: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(field.to_owned(), value);
            }
        };
        put("daily_cost", self.daily_cost.map(|v| json!(v)));
        put("daily_tokens", self.daily_tokens.map(|v| json!(v)));
        put("monthly_cost", self.monthly_cost.map(|v| json!(v)));
        put("monthly_tokens", self.monthly_tokens.map(|v| json!(v)));
        put("on_limit", self.on_limit.as_ref().map(|v| json!(v)));
        put("degrade_at", self.degrade_at.map(|v| json!(v)));
        (!body.is_empty()).then_some(Value::Object(body))
    }
}

/// Runs a `writ workspaces` command against the server at `remote`.
pub async fn workspaces(
    remote: &Remote,
    command: &WorkspacesCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let client = http()?;
    let base = remote.url.trim_end_matches('/');
    let request = match command {
        WorkspacesCommand::Create {
            name,
            directory,
            worktree_of,
            branch,
            from,
            budget,
        } => {
            let source = match (directory, worktree_of) {
                (Some(path), _) => json!({"kind": "directory", "path": path}),
                (None, Some(repository)) => {
                    let mut source =
                        json!({"kind": "git_worktree", "repository": repository, "branch": branch});
                    if let Some(from) = from {
                        source["from"] = json!(from);
                    }
                    source
                }
                (None, None) => json!({"kind": "empty"}),
            };
            let mut body = json!({"name": name, "source": source});
            if let Some(budget) = budget.body() {
                body["budget"] = budget;
            }
            client.post(format!("{base}/workspaces")).json(&body)
        }
        WorkspacesCommand::List => client.get(format!("{base}/workspaces")),
        WorkspacesCommand::Delete { name } => client.delete(format!("{base}/workspaces/{name}")),
        WorkspacesCommand::Budget {
            name,
            budget,
            clear,
        } => match (budget.body(), clear) {
            (Some(budget), _) => client
                .put(format!("{base}/workspaces/{name}/budget"))
                .json(&budget),
            (None, true) => client
                .put(format!("{base}/workspaces/{name}/budget"))
                .json(&json!({})),
            (None, false) => client.get(format!("{base}/workspaces/{name}")),
        },
    };
    let resp = authed(request, remote)
        .send()
        .await
        .with_context(|| format!("cannot reach writ at {base} (set WRIT_URL)"))?;
    if !resp.status().is_success() {
        return Err(refusal(resp).await);
    }
    let body: Value = resp.json().await?;
    let line = |w: &Value| {
        let s = |k: &str| terminal_safe(w[k].as_str().unwrap_or("-"));
        format!(
            "{:<24} {:<13} {:<20} {}",
            s("name"),
            s("kind"),
            s("branch"),
            s("root")
        )
    };
    match command {
        WorkspacesCommand::List => {
            writeln!(out, "{:<24} {:<13} {:<20} ROOT", "NAME", "KIND", "BRANCH")?;
            for w in body["workspaces"].as_array().into_iter().flatten() {
                writeln!(out, "{}", line(w))?;
            }
        }
        WorkspacesCommand::Create { .. } => writeln!(out, "{}", line(&body))?,
        WorkspacesCommand::Delete { name } => writeln!(
            out,
            "deleted {}; files kept in {}{}",
            terminal_safe(name),
            terminal_safe(body["root"].as_str().unwrap_or("-")),
            if body["worktree_pruned"] == json!(true) {
                "; worktree pruned, branch kept"
            } else {
                ""
            }
        )?,
        WorkspacesCommand::Budget { .. } => write_spend(&body, out)?,
    }
    Ok(())
}

/// A workspace's budget and spend, one line per period, as `writ keys budget` shows a key's.
fn write_spend(workspace: &Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let limit = |v: &Value| {
        if v.is_null() {
            "no limit".to_owned()
        } else {
            v.to_string()
        }
    };
    for w in workspace["spend"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{}\tcost {:.6} of {}\ttokens {} of {}\tresets {}",
            terminal_safe(w["period"].as_str().unwrap_or("-")),
            w["cost"].as_f64().unwrap_or(0.0),
            limit(&w["cost_limit"]),
            w["tokens"].as_u64().unwrap_or(0),
            limit(&w["tokens_limit"]),
            terminal_safe(w["resets_at"].as_str().unwrap_or("-")),
        )?;
    }
    let budget = &workspace["budget"];
    if budget["on_limit"] == "degrade" {
        writeln!(
            out,
            "near a limit\tdegrades from {:.0}% (fewer models, then the cheapest; 402 at the limit)",
            100.0
                * budget["degrade_at"]
                    .as_f64()
                    .unwrap_or(writ_core::budgets::DEFAULT_DEGRADE_AT)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspaces_spend_shows_a_degrading_budget() {
        let mut out = Vec::new();
        let workspace = serde_json::json!({
            "budget": {"daily_tokens": 1000, "on_limit": "degrade"},
            "spend": [{"period": "day", "cost": 0.0, "cost_limit": null, "tokens": 5,
                       "tokens_limit": 1000, "resets_at": "2026-12-03T00:00:00Z"}]});
        write_spend(&workspace, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("tokens 5 of 1000"), "{text}");
        assert!(text.contains("degrades from 80%"), "{text}");
        let mut out = Vec::new();
        write_spend(
            &serde_json::json!({"budget": {"daily_tokens": 1}}),
            &mut out,
        )
        .unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("degrades"));
    }

    #[test]
    fn escape_sequences_from_the_server_are_shown_not_obeyed() {
        let shown = terminal_safe("a\u{1b}[2J\nb.py");
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\n'),
            "{shown}"
        );
        assert!(shown.contains("\\u{1b}[2J\\nb.py"), "{shown}");
    }

    #[test]
    fn file_arguments_split_at_the_first_equals_sign() {
        let files = parse_files(&["src/a.py=compute x = y + 1".into()]).unwrap();
        assert_eq!(files[0]["filename"], "src/a.py");
        assert_eq!(files[0]["code_description"], "compute x = y + 1");
        assert!(parse_files(&["nodescription".into()]).is_err());
        assert!(parse_files(&["a.py=".into()]).is_err());
    }
}
