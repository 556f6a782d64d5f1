//! The harness and its report: the usable test files staged for the sandbox with the harness
//! (`harness/run.py`, `harness/run.cjs`), a plan and the probe inputs; one run per candidate;
//! the marked lines it prints read back as each test's outcome and each probe's output, and
//! all candidates' reports made one table ([`CheckResults`]).

use std::collections::{BTreeMap, BTreeSet};

use writ_checks::Language;
use writ_checks::analysis::{Source, doctest_examples};

use super::CHECKS_DIR;
use super::flavour::Flavour;
use crate::execution::{CommandCall, CommandRunner};
use crate::path::RepoPath;
use crate::synthesis::batch::Validation;
use crate::synthesis::stage::FileCx;
use crate::synthesis::validation::agreement::{CheckResults, TestOutcome};

/// Probe inputs kept per test file.
const MAX_PROBES_PER_FILE: usize = 40;

/// The usable test files staged for the sandbox with the harness, its plan and the probes: what
/// every candidate of the file runs, once each.
pub(super) struct Suite {
    command: CommandCall,
    pub files: Vec<(String, String)>,
    /// (`file#i`, expression), in the plan's order.
    pub probes: Vec<(String, String)>,
    marker: String,
    /// The harness, the plan, the tests and the batch's other files.
    fixed: Vec<(RepoPath, Vec<u8>)>,
}

impl Suite {
    pub fn new(
        flavour: &Flavour,
        cx: FileCx<'_>,
        command: CommandCall,
        files: Vec<(String, String)>,
        names: Vec<String>,
        others: &[(RepoPath, Vec<u8>)],
    ) -> Result<Suite, String> {
        // The description's `>>>` examples are Python's doctest form.
        let examples: Vec<String> = match flavour.language {
            Language::Python => doctest_examples(&cx.file().description)
                .into_iter()
                .map(|e| e.input)
                .collect(),
            _ => Vec::new(),
        };
        let mut probes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, (path, code)) in files.iter().enumerate() {
            let mut exprs = Source::parse(code, flavour.language)
                .map(|s| s.probe_inputs(&names))
                .unwrap_or_default();
            if i == 0 {
                exprs.extend(examples.iter().cloned());
            }
            let mut seen = BTreeSet::new();
            exprs.retain(|e| seen.insert(e.clone()));
            exprs.truncate(MAX_PROBES_PER_FILE);
            probes.insert(path.clone(), exprs);
        }
        Suite::staged(
            flavour,
            &cx.file().path,
            command,
            files,
            names,
            probes,
            others,
        )
    }

    /// The suite of `files` testing `subject`, with `probes` (per test file) to evaluate.
    pub fn staged(
        flavour: &Flavour,
        subject: &RepoPath,
        command: CommandCall,
        files: Vec<(String, String)>,
        names: Vec<String>,
        probes: BTreeMap<String, Vec<String>>,
        others: &[(RepoPath, Vec<u8>)],
    ) -> Result<Suite, String> {
        let marker = format!("@@writ-check-{:016x}", rand::random::<u64>());
        let plan = serde_json::json!({
            "marker": marker,
            "tests": files.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "probes": probes,
            // Where a test file's own import fails, its probes are evaluated against these.
            "subject": subject.as_str(),
            "subject_module": flavour.module_name(subject),
            "names": names,
        });
        let mut fixed: Vec<(RepoPath, Vec<u8>)> = others.to_vec();
        for (path, content) in [
            (
                flavour.harness_path.to_string(),
                flavour.harness.as_bytes().to_vec(),
            ),
            (
                format!("{CHECKS_DIR}/plan.json"),
                plan.to_string().into_bytes(),
            ),
        ]
        .into_iter()
        .chain(
            files
                .iter()
                .map(|(p, c)| (p.clone(), c.clone().into_bytes())),
        ) {
            fixed.push((
                RepoPath::parse(&path).map_err(|e| format!("{path}: {e}"))?,
                content,
            ));
        }
        let probes = probes
            .iter()
            .flat_map(|(file, exprs)| {
                exprs
                    .iter()
                    .enumerate()
                    .map(move |(i, e)| (format!("{file}#{i}"), e.clone()))
            })
            .collect();
        Ok(Suite {
            command,
            files,
            probes,
            marker,
            fixed,
        })
    }

    /// One candidate's run: its report, the run's duration, and why it failed when it did.
    pub async fn run(
        &self,
        runner: &dyn CommandRunner,
        validation: &Validation,
        candidate: (RepoPath, Vec<u8>),
    ) -> (Report, u64, Option<String>) {
        self.run_over(runner, validation.timeout, Some(candidate))
            .await
    }

    /// A run over the workspace as it is, with `candidate` (when given) in place of its file.
    pub async fn run_over(
        &self,
        runner: &dyn CommandRunner,
        timeout: std::time::Duration,
        candidate: Option<(RepoPath, Vec<u8>)>,
    ) -> (Report, u64, Option<String>) {
        let mut staged = self.fixed.clone();
        staged.extend(candidate);
        let calls = std::slice::from_ref(&self.command);
        match runner.run(&staged, calls, timeout).await {
            Ok(outcomes) => {
                let out: String = outcomes.iter().map(|o| o.stdout.as_str()).collect();
                (
                    parse_report(&out, &self.marker),
                    outcomes.iter().map(|o| o.duration_ms).sum(),
                    None,
                )
            }
            Err(e) => (
                Report::default(),
                0,
                Some(format!("a candidate's run failed: {e}")),
            ),
        }
    }
}

/// One candidate's run, as the harness reported it.
#[derive(Debug, Clone, Default)]
pub(super) struct Report {
    /// Test id → (outcome word, error message).
    tests: BTreeMap<String, (String, String)>,
    /// Probe id (`file#i`) → output.
    outputs: BTreeMap<String, String>,
}

impl Report {
    /// A test's outcome word (`passed`, `failed`, `error`, `skipped`) and error message; a test
    /// file that could not be imported answers for each of its tests.
    pub fn outcome(&self, test: &str) -> Option<&(String, String)> {
        let file = test.split("::").next().unwrap_or_default();
        self.tests.get(test).or_else(|| self.tests.get(file))
    }
}

pub(super) fn parse_report(stdout: &str, marker: &str) -> Report {
    let mut report = Report::default();
    for line in stdout.lines() {
        let Some(json) = line.strip_prefix(marker).map(str::trim) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            continue;
        };
        if let Some(test) = v["test"].as_str() {
            report.tests.insert(
                test.to_string(),
                (
                    v["outcome"].as_str().unwrap_or("error").to_string(),
                    v["error"].as_str().unwrap_or_default().to_string(),
                ),
            );
        } else if let (Some(probe), Some(output)) = (v["probe"].as_str(), v["output"].as_str()) {
            report.outputs.insert(probe.to_string(), output.to_string());
        }
    }
    report
}

fn names_missing(error: &str) -> bool {
    [
        "NameError",
        "ImportError",
        "ModuleNotFoundError",
        "ReferenceError",
        "Cannot find module",
        "is not a function",
        "is not a constructor",
        "AttributeError: module",
    ]
    .iter()
    .any(|k| error.contains(k))
}

/// The reports as one table; a test file no candidate could import is dropped, with why.
pub(super) fn tabulate(
    reports: &[Report],
    probes: &[(String, String)],
    files: &[(String, String)],
    discarded: &mut Vec<String>,
) -> CheckResults {
    let mut tests: BTreeSet<String> = BTreeSet::new();
    for r in reports {
        tests.extend(r.tests.keys().filter(|id| id.contains("::")).cloned());
    }
    for (path, _) in files {
        let imported = reports.iter().any(|r| {
            r.tests
                .keys()
                .any(|id| id.starts_with(&format!("{path}::")))
        });
        if !imported {
            let why = reports
                .iter()
                .find_map(|r| {
                    r.tests
                        .get(path)
                        .map(|(_, e)| e.lines().next().unwrap_or("").to_string())
                })
                .unwrap_or_else(|| "it ran no test".into());
            discarded.push(format!("{path}: no candidate could run it ({why})"));
        }
    }
    let tests: Vec<String> = tests.into_iter().collect();
    let outcomes = reports
        .iter()
        .map(|r| {
            tests
                .iter()
                .map(|id| {
                    let file = id.split("::").next().unwrap_or_default();
                    match r.tests.get(id).or_else(|| r.tests.get(file)) {
                        Some((o, _)) if o == "passed" => Some(TestOutcome::Passed),
                        Some((o, _)) if o == "skipped" => None,
                        Some((_, e)) if names_missing(e) => Some(TestOutcome::NameError),
                        Some(_) => Some(TestOutcome::Failed),
                        None => None,
                    }
                })
                .collect()
        })
        .collect();
    let outputs = reports
        .iter()
        .map(|r| {
            probes
                .iter()
                .map(|(id, _)| r.outputs.get(id).cloned())
                .collect()
        })
        .collect();
    CheckResults {
        tests,
        probes: probes.iter().map(|(_, e)| e.clone()).collect(),
        outcomes,
        outputs,
    }
}
