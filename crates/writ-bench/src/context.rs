//! The repository's context, measured (`writ-bench context`): on generated Python repositories of
//! 100, 2,000 and 20,000 files, how long the repository map takes to build (first, with the
//! outline cache cold, and again, warm), how many prompt tokens a candidate prompt then holds,
//! how long a search of the workspace takes; and a task set where a file can only be written
//! right with code from elsewhere in the repository — a helper in a module the description does
//! not name, a project constant, a style rule — counting the tasks whose prompt holds what the
//! file needs, with the map and the caller's constraints and without them.
//!
//! The workspace keeps its index (as the server's does): the table also says how long its first
//! build took, what it holds in memory, and how long a file written outside writ takes to show
//! in a search.
//!
//! Everything runs in-process against the real workspace (`RepoWorkspace` on a temporary
//! directory) and the real prompt builder; no model is called.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use writ_core::search::{Freshness, SearchQuery};
use writ_core::synthesis::batch::{Batch, WriteCodebaseRequest};
use writ_core::synthesis::context::{self, tokens};
use writ_core::synthesis::prompt::{self, MoreContext};
use writ_core::synthesis::stage::BatchFile;
use writ_core::{RepoPath, Workspace};
use writ_workspace::RepoWorkspace;

const VERBS: &[&str] = &[
    "normalize",
    "validate",
    "format",
    "parse",
    "merge",
    "round",
    "encode",
    "summarize",
    "compress",
    "schedule",
];
const NOUNS: &[&str] = &[
    "invoice", "customer", "address", "shipment", "coupon", "receipt", "ledger", "payment",
    "refund", "voucher", "basket", "tariff",
];
const LIMITS: &[&str] = &["LIMIT", "TIMEOUT", "RETRIES", "PRECISION"];

/// One task of the measured set.
struct Task {
    /// The file to write.
    path: String,
    description: String,
    constraints: Option<String>,
    /// What its prompt must hold for the file to be written right.
    needs: String,
    kind: &'static str,
}

/// A module of generic code: `functions` small functions with made-up names.
fn filler(seed: usize, functions: usize) -> String {
    let mut out = String::from("import math\n\n\n");
    for j in 0..functions {
        let _ = write!(
            out,
            "def step_{seed}_{j}(value, factor=2):\n    \"\"\"Step {j} of stage {seed}.\"\"\"\n    return math.floor(value * factor) + {j}\n\n\n"
        );
    }
    out
}

/// Writes a repository of `files` Python files (folders of 20) and returns the measured tasks:
/// every (verb, noun) helper and every limit constant is defined somewhere, each task uses one.
fn generate(root: &Path, files: usize) -> anyhow::Result<Vec<Task>> {
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join(".gitignore"), "build/\n")?;
    let folder = |i: usize| format!("pkg{}/sub{}", i / 400, (i / 20) % 20);
    let mut helpers: Vec<(String, String, String)> = Vec::new(); // (verb, noun, path)
    for (k, (verb, noun)) in VERBS
        .iter()
        .flat_map(|v| NOUNS.iter().map(move |n| (*v, *n)))
        .enumerate()
    {
        let i = (k * 7919) % files;
        helpers.push((
            verb.to_string(),
            noun.to_string(),
            format!("{}/mod_{i}.py", folder(i)),
        ));
    }
    let mut constants: Vec<(String, String)> = Vec::new(); // (name, path)
    for (k, noun) in NOUNS.iter().enumerate() {
        for (l, limit) in LIMITS.iter().enumerate() {
            let i = (k * 31 + l * 577 + 13) % files;
            constants.push((
                format!("{}_{}", noun.to_uppercase(), limit),
                format!("{}/mod_{i}.py", folder(i)),
            ));
        }
    }
    for i in 0..files {
        let path = format!("{}/mod_{i}.py", folder(i));
        let mut code = filler(i, 8);
        for (verb, noun, p) in &helpers {
            if *p == path {
                let _ = write!(
                    code,
                    "def {verb}_{noun}(record):\n    \"\"\"The project's way to {verb} a {noun}.\"\"\"\n    return record\n\n\n"
                );
            }
        }
        for (name, p) in &constants {
            if *p == path {
                let _ = writeln!(code, "{name} = {}", name.len());
            }
        }
        let full = root.join(&path);
        std::fs::create_dir_all(full.parent().unwrap_or(root))?;
        std::fs::write(full, code)?;
    }
    let mut tasks = Vec::new();
    for (k, (verb, noun, p)) in helpers.iter().enumerate().step_by(6) {
        // Half beside the helper's module, half in another package.
        let dir = if k % 12 == 0 {
            p.rsplit_once('/')
                .map_or(String::new(), |(d, _)| d.to_owned())
        } else {
            format!("app/feature_{k}")
        };
        tasks.push(Task {
            path: format!("{dir}/task_{k}.py"),
            description: format!(
                "A function handle(records) that uses the project's existing helper to {verb} each {noun} record, and returns the list."
            ),
            constraints: None,
            needs: format!("def {verb}_{noun}(record):"),
            kind: "helper in an unnamed module",
        });
    }
    for (k, (name, _)) in constants.iter().enumerate().step_by(4) {
        let (noun, limit) = name.split_once('_').unwrap_or((name, ""));
        tasks.push(Task {
            path: format!("app/check_{k}.py"),
            description: format!(
                "A function check(value) that refuses a {} value above the project's {} {} constant.",
                noun.to_lowercase(),
                noun.to_lowercase(),
                limit.to_lowercase()
            ),
            constraints: None,
            needs: format!("{name} = "),
            kind: "project constant",
        });
    }
    for k in 0..10 {
        let rule = format!("Amounts are integer cents (rule {k}); never use float for money.");
        tasks.push(Task {
            path: format!("app/money_{k}.py"),
            description: "A function total(items) that adds the prices of the items.".into(),
            constraints: Some(rule.clone()),
            needs: rule,
            kind: "style rule",
        });
    }
    Ok(tasks)
}

/// The candidate prompt of `task` as writ builds it, with or without the repository context.
async fn prompt_of(
    ws: &RepoWorkspace,
    task: &Task,
    map_tokens: usize,
    with_context: bool,
) -> anyhow::Result<(String, usize)> {
    let mut body = json!({
        "command": "write_codebase",
        "files": [{"filename": task.path, "code_description": task.description}],
    });
    if with_context && let Some(c) = &task.constraints {
        body["constraints"] = json!(c);
    }
    let request: WriteCodebaseRequest = serde_json::from_value(body)?;
    let batch = Batch::parse(request).map_err(|e| anyhow::anyhow!("{e}"))?;
    let file = &batch.files()[0];
    let batch_files = [BatchFile::new(file.clone())];
    let mut more = MoreContext::default();
    if with_context && map_tokens > 0 {
        (more.map, more.map_pending) = context::repo_map(
            ws,
            &Default::default(),
            &batch_files,
            &batch,
            &batch_files[0],
            &[],
            map_tokens,
        )
        .await;
    }
    let messages = prompt::candidate_messages(
        &batch,
        file,
        writ_checks::Language::Python,
        None,
        &[],
        &[],
        &more,
    );
    let text: String = messages.iter().map(|m| m.content.as_str()).collect();
    let map = tokens(&more.map_section());
    Ok((text, map))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Runs the measurements on repositories of each size in `sizes`; prints markdown tables.
pub async fn run(sizes: &[usize], map_tokens: usize) -> anyhow::Result<String> {
    let mut perf = String::from(
        "| files | index first build (s) | index memory (MB) | map, cold cache (ms) | map, warm (ms) | map tokens | prompt tokens | search, literal (ms) | search, regex (ms) | outside change shown (ms) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut quality = String::from(
        "| files | tasks | kind | prompt holds what the file needs: with map and constraints | without |\n|---:|---:|---|---:|---:|\n",
    );
    for &size in sizes {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("repo");
        let tasks = generate(&root, size)?;
        let started = Instant::now();
        let ws = RepoWorkspace::open(&root).await?.with_index();
        anyhow::ensure!(
            ws.index_caught_up(Duration::from_secs(600)).await,
            "the index was not built within 10 minutes"
        );
        let build = started.elapsed();
        let index_mb = ws.index_status().map_or(0, |s| s.bytes) as f64 / 1e6;

        let probe = &tasks[0];
        let started = Instant::now();
        let (text, map) = prompt_of(&ws, probe, map_tokens, true).await?;
        let cold = started.elapsed();
        let mut warm = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            prompt_of(&ws, probe, map_tokens, true).await?;
            warm.push(started.elapsed());
        }
        let mut literal = Vec::new();
        let mut regex = Vec::new();
        for _ in 0..5 {
            for (pattern, is_regex, out) in [
                ("def schedule_tariff", false, &mut literal),
                (r"^[A-Z]+_TIMEOUT\s*=", true, &mut regex),
            ] {
                let started = Instant::now();
                let found = ws
                    .search(SearchQuery {
                        pattern: pattern.into(),
                        regex: is_regex,
                        ignore_case: false,
                        dir: RepoPath::root(),
                        glob: None,
                        context_lines: 2,
                        max_matches: 50,
                        max_files: 1_000_000,
                        max_file_bytes: 2 << 20,
                        time_limit: Duration::from_secs(5),
                        freshness: Freshness::Current,
                        keep_compiled: false,
                    })
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                anyhow::ensure!(!found.matches.is_empty(), "the search found nothing");
                out.push(started.elapsed());
            }
        }
        let mut shown = Vec::new();
        for n in 0..5 {
            let token = format!("outside_change_{n}_token");
            let started = Instant::now();
            std::fs::write(
                root.join(format!("outside_{n}.py")),
                format!("{token} = 1\n"),
            )?;
            loop {
                let found = ws
                    .search(SearchQuery {
                        pattern: token.clone(),
                        regex: false,
                        ignore_case: false,
                        dir: RepoPath::root(),
                        glob: None,
                        context_lines: 0,
                        max_matches: 1,
                        max_files: 1_000_000,
                        max_file_bytes: 2 << 20,
                        time_limit: Duration::from_secs(5),
                        freshness: Freshness::Current,
                        keep_compiled: false,
                    })
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                if !found.matches.is_empty() {
                    break;
                }
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(10),
                    "a file written outside writ did not show in 10 s"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            shown.push(started.elapsed());
        }
        let _ = writeln!(
            perf,
            "| {size} | {:.1} | {index_mb:.1} | {} | {} | {map} | {} | {} | {} | {} |",
            build.as_secs_f64(),
            ms(cold),
            ms(median(warm)),
            tokens(&text),
            ms(median(literal)),
            ms(median(regex)),
            ms(median(shown)),
        );

        let mut by_kind: Vec<(&str, usize, usize, usize)> = Vec::new();
        for task in &tasks {
            let (with, _) = prompt_of(&ws, task, map_tokens, true).await?;
            let (without, _) = prompt_of(&ws, task, map_tokens, false).await?;
            let row = match by_kind.iter_mut().find(|r| r.0 == task.kind) {
                Some(row) => row,
                None => {
                    by_kind.push((task.kind, 0, 0, 0));
                    by_kind
                        .last_mut()
                        .ok_or_else(|| anyhow::anyhow!("no row"))?
                }
            };
            row.1 += 1;
            row.2 += usize::from(with.contains(&task.needs));
            row.3 += usize::from(without.contains(&task.needs));
        }
        let pct = |n: usize, of: usize| {
            format!("{n}/{of} ({:.0} %)", 100.0 * n as f64 / of.max(1) as f64)
        };
        let (mut all, mut with_all, mut without_all) = (0, 0, 0);
        for (kind, n, with, without) in &by_kind {
            let _ = writeln!(
                quality,
                "| {size} | {n} | {kind} | {} | {} |",
                pct(*with, *n),
                pct(*without, *n)
            );
            all += n;
            with_all += with;
            without_all += without;
        }
        let _ = writeln!(
            quality,
            "| {size} | {all} | **all** | **{}** | {} |",
            pct(with_all, all),
            pct(without_all, all)
        );
    }
    Ok(format!(
        "### Repository map and search (map budget {map_tokens} tokens; medians of 5 runs)\n\n{perf}\n### What the prompt holds\n\n{quality}"
    ))
}
