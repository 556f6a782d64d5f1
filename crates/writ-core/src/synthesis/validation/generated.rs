//! Generated checks: when the caller's tests leave several candidates (or there are none),
//! test-writing models write tests for the file and the candidates' behaviour decides.
//!
//! 1. Each test-writing model (`WRIT_TEST_MODELS`, default the arbiter) is asked for a test file
//!    from the description, the file's imports and the public names every candidate defines —
//!    never from one candidate's code, whose bugs a test written from it would encode. A test
//!    file that does not parse is dropped.
//! 2. Every candidate runs every test file in the sandbox (one run per candidate: the harness
//!    `harness/run.py` runs pytest in-process, `harness/run.cjs` the `node:test` tests, and
//!    reports each test case, so one wrong assertion sinks one test, not the file). The probe
//!    inputs — the left side of each equality assertion, and the description's `>>>`
//!    examples — are evaluated on each candidate in the same run.
//! 3. [`super::agreement`] drops the tests that fail everywhere for a name error, groups the
//!    candidates by the tests they pass, and scores the groups; the best group decides.
//! 4. Tied candidates are clustered by their outputs on the probes; the largest cluster decides.
//! 5. Tied clusters: the arbiter is shown a few inputs on which two of them disagree, with each
//!    one's output, in both orders; only the same verdict both times counts. Otherwise the
//!    arbiter judges among the tied candidates only.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::future::join_all;
use writ_checks::Language;

use super::FileTrials;
use super::agreement::{
    CheckResults, TestOutcome, any_output, best_supported, clusters, disagreements, rank,
    usable_tests,
};
use crate::audit::{
    CallRecord, CallRole, CheckGroup, DistinguishingInput, GeneratedCheckRecord, GeneratedChecks,
    GeneratedTestFile, Selection, ShownOutput, TestWriterCall,
};
use crate::execution::{CommandCall, CommandRunner};
use crate::model::{ChatMessage, ChatRequest};
use crate::path::RepoPath;
use crate::synthesis::batch::Validation;
use crate::synthesis::progress::Event;
use crate::synthesis::prompt;
use crate::synthesis::response::KeptTests;
use crate::synthesis::selection::{Selector, Viable};
use crate::synthesis::stage::{Chosen, FileCx};

/// Where the checks live in the sandbox's scratch (never in `REPO_DIR`).
pub(crate) const CHECKS_DIR: &str = ".writ-checks";
/// Probe inputs kept per test file.
const MAX_PROBES_PER_FILE: usize = 40;
/// Inputs shown to the arbiter per comparison of two clusters.
pub(crate) const MAX_DISTINGUISHING_INPUTS: usize = 3;
/// A test file's size cap, in bytes; a longer answer is cut off by the model anyway.
const MAX_TEST_BYTES: usize = 64 * 1024;

const PYTHON_HARNESS: &str = include_str!("harness/run.py");
const NODE_HARNESS: &str = include_str!("harness/run.cjs");

/// What the generated checks decided for a file.
pub(super) struct Decision {
    /// The trial chosen.
    pub trial: usize,
    pub selection: Selection,
    pub reason: Option<String>,
}

/// The generated checks' outcome for a file: the decision (none when the checks could not
/// decide anything, e.g. no usable test), the evidence, and each trial's results.
pub(super) struct Checked {
    pub decision: Option<Decision>,
    pub summary: GeneratedChecks,
    pub records: Vec<(usize, GeneratedCheckRecord)>,
}

/// How tests are written and run for a language.
struct Flavour {
    language: Language,
    harness_path: &'static str,
    harness: &'static str,
}

fn flavour(language: Language) -> Option<Flavour> {
    match language {
        Language::Python => Some(Flavour {
            language,
            harness_path: ".writ-checks/run.py",
            harness: PYTHON_HARNESS,
        }),
        Language::JavaScript => Some(Flavour {
            language,
            harness_path: ".writ-checks/run.cjs",
            harness: NODE_HARNESS,
        }),
        _ => None,
    }
}

impl Flavour {
    fn test_path(&self, file: &RepoPath, k: usize) -> String {
        let stem = file
            .file_name()
            .rsplit_once('.')
            .map_or(file.file_name(), |(s, _)| s);
        let stem: String = stem
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        match self.language {
            Language::JavaScript => format!("{CHECKS_DIR}/{stem}_{k}.test.js"),
            _ => format!("{CHECKS_DIR}/test_{stem}_{k}.py"),
        }
    }

    /// How a test imports the file, shown to the test writer.
    fn import_line(&self, file: &RepoPath, names: &[String]) -> String {
        let path = file.as_str();
        match self.language {
            Language::JavaScript => {
                format!("const {{ {} }} = require('../{path}');", names.join(", "))
            }
            _ => format!(
                "from {} import {}",
                self.module_name(file).unwrap_or_default(),
                names.join(", ")
            ),
        }
    }

    /// The file's dotted module name (Python only).
    fn module_name(&self, file: &RepoPath) -> Option<String> {
        (self.language == Language::Python)
            .then(|| file.as_str().trim_end_matches(".py").replace('/', "."))
    }

    fn form(&self) -> &'static str {
        match self.language {
            Language::JavaScript => {
                "CommonJS with node's test runner: `const test = require('node:test');` and `const assert = require('node:assert');`, one `test('what it checks', () => { ... })` per behaviour, `assert.strictEqual(actual, expected)` or `assert.deepStrictEqual(actual, expected)` with the call under test as the first argument"
            }
            _ => {
                "pytest: one `def test_...():` per behaviour with plain `assert call(...) == expected` (the call under test on the left), `pytest.raises` for errors"
            }
        }
    }
}

/// The candidates of a file's generated checks, by trial index.
pub(super) struct Candidates<'a> {
    /// Those that may be chosen: every candidate, or those that passed the caller's tests.
    pub eligible: &'a [usize],
    /// Candidates that failed the caller's own tests: they run the checks too and count in the
    /// agreement and behaviour scores, but are never chosen.
    pub voters: &'a [usize],
}

/// Runs the generated checks on `candidates` and decides among the eligible; see the module
/// docs.
pub(super) async fn check_and_decide(
    selector: &Selector<'_>,
    runner: &dyn CommandRunner,
    validation: &Validation,
    cx: FileCx<'_>,
    f: &FileTrials<'_>,
    candidates: Candidates<'_>,
    others: &[(RepoPath, Vec<u8>)],
) -> Checked {
    let Candidates {
        eligible: among,
        voters,
    } = candidates;
    let mut summary = GeneratedChecks::default();
    let undecided = |summary: GeneratedChecks, note: String| Checked {
        decision: None,
        summary: GeneratedChecks {
            note: Some(note),
            ..summary
        },
        records: Vec::new(),
    };
    let Some(flavour) = flavour(f.generated.language) else {
        return undecided(
            summary,
            format!(
                "no generated checks for {} files (Python and JavaScript only)",
                f.generated.language.name()
            ),
        );
    };
    let command = match check_command(selector, runner, &flavour) {
        Ok(command) => command,
        Err(note) => return undecided(summary, note),
    };

    // 1. The tests, from what every candidate shares (or as written while the candidates
    //    arrived, under `options.fanout.stop_when_passing`).
    let written = match f
        .generated
        .rounds
        .early
        .as_ref()
        .and_then(|e| e.written.clone())
    {
        Some(written) => written,
        None => {
            let codes: Vec<&str> = among.iter().map(|&t| f.trials[t].code.as_str()).collect();
            let names = shared_public_names(&codes, flavour.language);
            let writers = test_writers(selector, &f.generated.models);
            write_tests(selector, cx, &flavour, &names, &writers).await
        }
    };
    summary.writers = written.writers;
    summary.files = written.shown;
    summary.discarded = written.discarded;
    let files = written.files;
    let names = written.names;
    if files.is_empty() {
        cx.sink.emit(Event::ChecksGenerated {
            file: cx.file.path.to_string(),
            models: summary.writers.len(),
            tests: 0,
            discarded: summary.discarded.len(),
        });
        return undecided(summary, "no test file could be used".into());
    }

    // 2. Every candidate against every test file, with the probes.
    let suite = match Suite::new(&flavour, cx, command, files, names, others) {
        Ok(suite) => suite,
        Err(note) => return undecided(summary, note),
    };
    // The candidates that may be chosen come first: result `c < among.len()` is `among[c]`.
    let pool: Vec<usize> = among.iter().chain(voters).copied().collect();
    let runs = join_all(
        pool.iter()
            .map(|&t| suite.run(runner, validation, f.staged(&f.trials[t].code))),
    )
    .await;
    let mut reports: Vec<Report> = Vec::new();
    let mut durations: Vec<u64> = Vec::new();
    for (report, duration, error) in runs {
        durations.push(duration);
        summary.discarded.extend(error);
        reports.push(report);
    }
    let files = &suite.files;
    let results = tabulate(&reports, &suite.probes, files, &mut summary.discarded);

    // 3. Agreement.
    let usable = usable_tests(&results);
    for (t, id) in results.tests.iter().enumerate() {
        if !usable.contains(&t) {
            summary.discarded.push(format!(
                "{id}: fails on every candidate for a name or import error"
            ));
        }
    }
    summary.tests = usable.iter().map(|&t| results.tests[t].clone()).collect();
    summary.probes = results.probes.len();
    cx.sink.emit(Event::ChecksGenerated {
        file: cx.file.path.to_string(),
        models: summary.writers.len(),
        tests: usable.len(),
        discarded: summary.discarded.len(),
    });
    let model_of = |c: usize| f.trials[among[c]].model.clone();
    let (groups, tied) = rank(&results, among.len(), &usable);
    summary.groups = groups
        .iter()
        .map(|g| CheckGroup {
            models: g.members.iter().map(|&c| model_of(c)).collect(),
            tests_passed: g.tests_passed,
            score: g.score,
        })
        .collect();
    let mut records: Vec<(usize, GeneratedCheckRecord)> = (0..among.len())
        .map(|c| {
            let passed = results.passed(c, &usable);
            (
                among[c],
                GeneratedCheckRecord {
                    passed: passed.len(),
                    failed: usable
                        .iter()
                        .filter(|t| !passed.contains(t))
                        .map(|&t| results.tests[t].clone())
                        .collect(),
                    group: groups
                        .iter()
                        .position(|g| g.members.contains(&c))
                        .unwrap_or(0),
                    cluster: None,
                    duration_ms: durations.get(c).copied().unwrap_or(0),
                },
            )
        })
        .collect();
    let best_score = groups.first().map_or(0, |g| g.score);
    let best_consensus = groups.first().map_or(0, |g| g.consensus);
    if usable.is_empty() && !any_output(&results, &tied) {
        cx.sink.emit(Event::AgreementComputed {
            file: cx.file.path.to_string(),
            groups: groups.len(),
            tied: tied.len(),
            clusters: None,
        });
        return Checked {
            decision: None,
            summary: GeneratedChecks {
                note: Some("no generated test or probe input could be used".into()),
                ..summary
            },
            records,
        };
    }
    // One best group (of several): agreement decides, and only its members remain; several
    // groups share the best score and consensus: every candidate in them remains.
    let top_groups = groups
        .iter()
        .filter(|g| (g.score, g.consensus) == (best_score, best_consensus))
        .count();
    let agreed = top_groups == 1 && best_score > 0 && groups.len() > 1;
    // The tests alone do not separate the best group from another one that passes the same
    // tests with other outputs: its size — behaviour — did.
    let by_behaviour = agreed
        && groups[1..].iter().any(|g| {
            results.passed(g.members[0], &usable) == results.passed(groups[0].members[0], &usable)
        });
    let tied: Vec<usize> = if agreed {
        groups[0].members.clone()
    } else {
        tied
    };
    let agreement_reason = || {
        format!(
            "passes {} of {} generated tests with {} other candidate(s); best of {} group(s)",
            groups[0].tests_passed,
            usable.len(),
            groups[0].members.len() - 1,
            groups.len()
        ) + if groups.get(1).is_some_and(|g| g.score == best_score) {
            " (equal score with another group; the tests it passes are shared by more candidates)"
        } else {
            ""
        }
    };
    if let [only] = tied.as_slice() {
        cx.sink.emit(Event::AgreementComputed {
            file: cx.file.path.to_string(),
            groups: groups.len(),
            tied: 1,
            clusters: None,
        });
        return Checked {
            decision: Some(Decision {
                trial: among[*only],
                selection: Selection::Agreement,
                reason: Some(agreement_reason()),
            }),
            summary,
            records,
        };
    }

    // 4. Behaviour among those that remain.
    let found = clusters(&results, &tied);
    for (k, cluster) in found.iter().enumerate() {
        for &c in cluster {
            records[c].1.cluster = Some(k);
        }
    }
    cx.sink.emit(Event::AgreementComputed {
        file: cx.file.path.to_string(),
        groups: groups.len(),
        tied: tied.len(),
        clusters: Some(found.len()),
    });
    let top = found.first().map_or(0, Vec::len);
    let tied_clusters: Vec<&Vec<usize>> = found.iter().filter(|c| c.len() == top).collect();
    if any_output(&results, &tied) && tied_clusters.len() == 1 {
        let winner = tied_clusters[0][0];
        return Checked {
            decision: Some(Decision {
                trial: among[winner],
                selection: if agreed && !by_behaviour {
                    Selection::Agreement
                } else {
                    Selection::Behaviour
                },
                reason: Some(if agreed && !by_behaviour {
                    agreement_reason()
                } else {
                    format!(
                        "{} of {} tied candidates behave the same on {} probe input(s)",
                        top,
                        tied.len(),
                        results.probes.len()
                    )
                }),
            }),
            summary,
            records,
        };
    }

    // 4'. Clusters of equal size: the one whose outputs most other candidates share.
    let everyone: Vec<usize> = (0..pool.len()).collect();
    let tied_clusters: Vec<&Vec<usize>> = if tied_clusters.len() > 1 && any_output(&results, &tied)
    {
        let supported = best_supported(&results, &tied_clusters, &everyone);
        if let [winner] = supported.as_slice() {
            return Checked {
                decision: Some(Decision {
                    trial: among[*winner],
                    selection: Selection::Behaviour,
                    reason: Some(format!(
                        "{} tied behaviour clusters; on the {} probe input(s), its outputs are shared by the most other candidates",
                        tied_clusters.len(),
                        results.probes.len()
                    )),
                }),
                summary,
                records,
            };
        }
        tied_clusters
            .into_iter()
            .filter(|c| supported.contains(&c[0]))
            .collect()
    } else {
        tied_clusters
    };

    // 5. Distinguishing inputs between tied clusters, champion against challenger.
    let mut champion = tied_clusters.first().map_or(tied[0], |c| c[0]);
    let mut decided = false;
    if any_output(&results, &tied) {
        for challenger in tied_clusters.iter().skip(1).map(|c| c[0]) {
            let inputs = disagreements(&results, champion, challenger, MAX_DISTINGUISHING_INPUTS);
            if inputs.is_empty() {
                continue;
            }
            let pair = [champion, challenger];
            let shown: Vec<DistinguishingInput> = inputs
                .iter()
                .map(|&p| DistinguishingInput {
                    input: results.probes[p].clone(),
                    outputs: pair
                        .iter()
                        .map(|&c| ShownOutput {
                            models: found
                                .iter()
                                .find(|cl| cl.contains(&c))
                                .map(|cl| cl.iter().map(|&m| model_of(m)).collect())
                                .unwrap_or_default(),
                            output: output_of(&results, c, p),
                        })
                        .collect(),
                })
                .collect();
            cx.sink.emit(Event::ArbiterAskedInputs {
                file: cx.file.path.to_string(),
                inputs: shown.len(),
            });
            let verdict = ask_both_orders(selector, cx, f, &shown).await;
            summary.distinguishing.extend(shown);
            if let Some(winner) = verdict {
                champion = pair[winner];
                decided = true;
            } else {
                decided = false;
                break;
            }
        }
    }
    if decided {
        return Checked {
            decision: Some(Decision {
                trial: among[champion],
                selection: Selection::Distinguished,
                reason: Some(
                    "the arbiter, shown the inputs on which the tied candidates disagree, chose the same outputs in both orders".into(),
                ),
            }),
            summary,
            records,
        };
    }

    // No consistent verdict: the arbiter among the tied candidates only.
    let shown: Vec<usize> = if any_output(&results, &tied) {
        tied_clusters.iter().map(|c| c[0]).collect()
    } else {
        tied.clone()
    };
    let viable: Vec<Viable<'_>> = shown
        .iter()
        .map(|&c| Viable {
            model: f.trials[among[c]].model.as_str(),
            code: f.trials[among[c]].code.as_str(),
        })
        .collect();
    let chosen: Chosen = selector.arbitrate(cx, &f.generated, &viable).await;
    let trial = among
        .iter()
        .copied()
        .find(|&t| f.trials[t].code.as_bytes() == chosen.content.bytes())
        .unwrap_or(among[champion]);
    Checked {
        decision: Some(Decision {
            trial,
            selection: Selection::AgreementArbiter,
            reason: chosen.reason,
        }),
        summary,
        records,
    }
}

/// The configured command that runs the harness for `flavour`'s language, when it can run.
fn check_command(
    selector: &Selector<'_>,
    runner: &dyn CommandRunner,
    flavour: &Flavour,
) -> Result<CommandCall, String> {
    let language_key = flavour.language.name().to_ascii_lowercase();
    let command = selector
        .config
        .check_commands
        .iter()
        .find(|(l, _)| *l == language_key)
        .map(|(_, c)| CommandCall {
            name: c.clone(),
            args: vec![flavour.harness_path.to_string()],
        })
        .ok_or_else(|| format!("WRIT_CHECK_COMMANDS names no command for {language_key}"))?;
    runner
        .check(&command, "WRIT_CHECK_COMMANDS")
        .map_err(|e| format!("the generated checks cannot run: {e}"))?;
    Ok(command)
}

/// What the test-writing models gave for a file, before any candidate ran it.
#[derive(Debug, Clone, Default)]
pub(crate) struct WrittenTests {
    writers: Vec<TestWriterCall>,
    /// Every test file as written (shown in the answer), usable or not.
    shown: Vec<GeneratedTestFile>,
    discarded: Vec<String>,
    /// The usable ones: (path in the scratch, code).
    files: Vec<(String, String)>,
    /// The public names the tests were written against.
    names: Vec<String>,
}

/// Asks every test-writing model for a test file of the file at `cx`, from its description and
/// `names` (never from a candidate's code); a file that does not parse is kept for the record
/// but not run.
async fn write_tests(
    selector: &Selector<'_>,
    cx: FileCx<'_>,
    flavour: &Flavour,
    names: &[String],
    writers: &[String],
) -> WrittenTests {
    let language_key = flavour.language.name().to_ascii_lowercase();
    let messages = test_messages(cx, flavour, names);
    let asked = Instant::now();
    let answers = join_all(writers.iter().map(|model| {
        let req = ChatRequest {
            model: model.clone(),
            messages: messages.clone(),
            temperature: Some(selector.config.temperature),
            max_tokens: Some(selector.config.max_tokens),
            urgent: cx.batch.resumed(),
            purpose: CallRole::TestWriter.into(),
            ..ChatRequest::default()
        };
        selector.models.chat(req)
    }))
    .await;
    cx.upstream.add(asked.elapsed());
    for (model, answer) in writers.iter().zip(&answers) {
        cx.upstream.called(CallRecord::of(
            CallRole::TestWriter,
            model,
            asked.elapsed(),
            answer,
        ));
    }
    let mut out = WrittenTests {
        names: names.to_vec(),
        ..WrittenTests::default()
    };
    for (k, (model, answer)) in writers.iter().zip(answers).enumerate() {
        let mut call = TestWriterCall {
            model: model.clone(),
            ..TestWriterCall::default()
        };
        match answer {
            Ok(resp) => {
                call.ok = true;
                call.latency_ms = resp.latency.as_millis() as u64;
                call.prompt_tokens = resp.usage.prompt_tokens;
                call.completion_tokens = resp.usage.completion_tokens;
                let path = flavour.test_path(&cx.file.path, k);
                match writ_checks::extract_code(&resp.content, flavour.language) {
                    None => out
                        .discarded
                        .push(format!("{model}: the answer holds no {language_key} code")),
                    Some(code) if code.len() > MAX_TEST_BYTES => out.discarded.push(format!(
                        "{model}: the test file is {} bytes, above {MAX_TEST_BYTES}",
                        code.len()
                    )),
                    Some(code)
                        if writ_checks::syntax_ok(&code, flavour.language) == Some(false) =>
                    {
                        out.discarded.push(format!("{path}: does not parse"));
                        out.shown.push(GeneratedTestFile {
                            path,
                            model: model.clone(),
                            content: code,
                        });
                    }
                    Some(code) => {
                        out.shown.push(GeneratedTestFile {
                            path: path.clone(),
                            model: model.clone(),
                            content: code.clone(),
                        });
                        out.files.push((path, code));
                    }
                }
            }
            Err(e) => {
                call.error = Some(e.to_string());
                out.discarded.push(format!("{model}: {e}"));
            }
        }
        out.writers.push(call);
    }
    out
}

/// The usable test files staged for the sandbox with the harness, its plan and the probes: what
/// every candidate of the file runs, once each.
struct Suite {
    command: CommandCall,
    files: Vec<(String, String)>,
    /// (`file#i`, expression), in the plan's order.
    probes: Vec<(String, String)>,
    marker: String,
    /// The harness, the plan, the tests and the batch's other files.
    fixed: Vec<(RepoPath, Vec<u8>)>,
}

impl Suite {
    fn new(
        flavour: &Flavour,
        cx: FileCx<'_>,
        command: CommandCall,
        files: Vec<(String, String)>,
        names: Vec<String>,
        others: &[(RepoPath, Vec<u8>)],
    ) -> Result<Suite, String> {
        let examples = docstring_examples(&cx.file.description, flavour.language);
        let mut probes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, (path, code)) in files.iter().enumerate() {
            let mut exprs = probe_inputs(code, flavour.language);
            if i == 0 {
                exprs.extend(examples.iter().cloned());
            }
            let mut seen = BTreeSet::new();
            exprs.retain(|e| seen.insert(e.clone()));
            exprs.truncate(MAX_PROBES_PER_FILE);
            probes.insert(path.clone(), exprs);
        }
        let marker = format!("@@writ-check-{:016x}", rand::random::<u64>());
        let plan = serde_json::json!({
            "marker": marker,
            "tests": files.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "probes": probes,
            // Where a test file's own import fails, its probes are evaluated against these.
            "subject": cx.file.path.as_str(),
            "subject_module": flavour.module_name(&cx.file.path),
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
    async fn run(
        &self,
        runner: &dyn CommandRunner,
        validation: &Validation,
        candidate: (RepoPath, Vec<u8>),
    ) -> (Report, u64, Option<String>) {
        let mut staged = self.fixed.clone();
        staged.push(candidate);
        let calls = std::slice::from_ref(&self.command);
        match runner.run(&staged, calls, validation.timeout).await {
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

/// Candidates needed in agreement before the generated checks stop a fan-out: one candidate
/// passing every generated test may only share a wrong assertion's mistake, while two
/// candidates from different models with identical behaviour rarely share a subtle bug.
pub(crate) const EARLY_AGREEING: usize = 2;
/// Usable generated tests needed before the generated checks stop a fan-out: passing one test
/// says too little.
pub(crate) const EARLY_MIN_TESTS: usize = 2;

/// The generated checks as a file's candidates arrive (`options.fanout.stop_when_passing`,
/// `first_round` with `validation.generate` and no caller's tests): kept with the file so the
/// choice afterwards reuses the tests instead of asking the writers again.
#[derive(Debug, Clone, Default)]
pub(crate) struct Early {
    /// The tests, written once the first [`EARLY_AGREEING`] distinct viable candidates are in
    /// (from the names they share, never their code).
    pub written: Option<WrittenTests>,
    /// The distinct candidates seen, in arrival order, and their reports (same order; a
    /// candidate arrived before the tests were written has none yet).
    codes: Vec<String>,
    reports: Vec<Report>,
    /// Whether the candidates so far agreed ([`agree_early`]).
    pub agreed: bool,
}

/// [`Early`] as a [`crate::synthesis::fanout::PassCheck`]: a candidate "passes" once the
/// candidates so far agree ([`agree_early`]).
pub(crate) struct EarlyAgreement<'a> {
    selector: Selector<'a>,
    runner: &'a dyn CommandRunner,
    validation: &'a Validation,
    cx: FileCx<'a>,
    flavour: Flavour,
    command: CommandCall,
    writers: Vec<String>,
    state: tokio::sync::Mutex<Early>,
}

impl<'a> EarlyAgreement<'a> {
    /// `None` where generated checks cannot run for the file (language, command).
    pub(crate) fn new(
        selector: Selector<'a>,
        runner: &'a dyn CommandRunner,
        validation: &'a Validation,
        cx: FileCx<'a>,
        models: &[String],
        early: Early,
    ) -> Option<Self> {
        let flavour = flavour(Language::from_path(cx.file.path.as_str()))?;
        let command = check_command(&selector, runner, &flavour).ok()?;
        let writers = test_writers(&selector, models);
        Some(EarlyAgreement {
            selector,
            runner,
            validation,
            cx,
            flavour,
            command,
            writers,
            state: tokio::sync::Mutex::new(early),
        })
    }

    /// What it found, for the file's choice afterwards.
    pub(crate) fn into_early(self) -> Early {
        self.state.into_inner()
    }

    /// Every candidate of `codes` not seen yet, checked; whether the agreement holds.
    pub(crate) async fn settle(&self, codes: &[&str]) -> bool {
        let mut state = self.state.lock().await;
        for code in codes {
            if !state.codes.iter().any(|c| c == code) {
                state.codes.push(code.to_string());
            }
        }
        self.advance(&mut state).await
    }

    /// Writes the tests once enough candidates are in, runs those not run yet, and decides.
    async fn advance(&self, state: &mut Early) -> bool {
        if state.agreed {
            return true;
        }
        if state.written.is_none() {
            if state.codes.len() < EARLY_AGREEING {
                return false;
            }
            let codes: Vec<&str> = state.codes.iter().map(String::as_str).collect();
            let names = shared_public_names(&codes, self.flavour.language);
            state.written = Some(
                write_tests(
                    &self.selector,
                    self.cx,
                    &self.flavour,
                    &names,
                    &self.writers,
                )
                .await,
            );
        }
        let Some(written) = &state.written else {
            return false;
        };
        if written.files.is_empty() {
            return false;
        }
        // The batch's other files as they are in `REPO_DIR`, as for the caller's tests.
        let Ok(suite) = Suite::new(
            &self.flavour,
            self.cx,
            self.command.clone(),
            written.files.clone(),
            written.names.clone(),
            &[],
        ) else {
            return false;
        };
        let pending: Vec<String> = state.codes[state.reports.len()..].to_vec();
        let runs = join_all(pending.iter().map(|code| {
            suite.run(
                self.runner,
                self.validation,
                (self.cx.file.path.clone(), code.as_bytes().to_vec()),
            )
        }))
        .await;
        state.reports.extend(runs.into_iter().map(|(r, _, _)| r));
        state.agreed = agree_early(&tabulate(
            &state.reports,
            &suite.probes,
            &suite.files,
            &mut Vec::new(),
        ));
        state.agreed
    }
}

/// The early-stop rule on the results so far: at least [`EARLY_MIN_TESTS`] usable tests, and
/// the best agreement group ([`rank`]: the same tests passed, the same outputs on every probe
/// input) is the only best one, holds at least [`EARLY_AGREEING`] candidates and passes at
/// least half of the tests. Not "every test": generated tests are wrong in places, and a
/// correct candidate fails the wrong ones.
fn agree_early(results: &CheckResults) -> bool {
    let usable = usable_tests(results);
    if usable.len() < EARLY_MIN_TESTS {
        return false;
    }
    let (groups, tied) = rank(results, results.outcomes.len(), &usable);
    groups.first().is_some_and(|best| {
        best.members.len() >= EARLY_AGREEING
            && tied.len() == best.members.len()
            && best.tests_passed >= EARLY_MIN_TESTS
            && 2 * best.tests_passed >= usable.len()
    })
}

#[async_trait::async_trait]
impl crate::synthesis::fanout::PassCheck for EarlyAgreement<'_> {
    async fn passes(&self, code: &str) -> bool {
        let mut state = self.state.lock().await;
        // The same code from another model is no second opinion.
        if state.codes.iter().any(|c| c == code) {
            return state.agreed;
        }
        state.codes.push(code.to_string());
        self.advance(&mut state).await
    }

    fn passed(&self) -> &'static str {
        "agreed with another candidate on the generated tests (the same tests passed, the same outputs)"
    }
}

/// The arbiter asked which cluster's outputs the description calls for, in both orders; the
/// index in the pair it chose both times, or `None` when it did not (or could not answer).
async fn ask_both_orders(
    selector: &Selector<'_>,
    cx: FileCx<'_>,
    f: &FileTrials<'_>,
    shown: &[DistinguishingInput],
) -> Option<usize> {
    let arbiter = selector.arbiter_model(&f.generated);
    let ask = |flipped: bool| {
        let req = ChatRequest {
            model: arbiter.clone(),
            messages: distinguishing_messages(cx, f.generated.language, shown, flipped),
            temperature: Some(0.0),
            max_tokens: Some(1_000),
            response_format: Some(prompt::verdict_schema(2)),
            urgent: cx.batch.resumed(),
            purpose: CallRole::Distinguishing.into(),
            ..ChatRequest::default()
        };
        selector.models.chat(req)
    };
    let started = Instant::now();
    let (straight, flipped) = futures::future::join(ask(false), ask(true)).await;
    cx.upstream.add(started.elapsed());
    for answer in [&straight, &flipped] {
        cx.upstream.called(CallRecord::of(
            CallRole::Distinguishing,
            &arbiter,
            started.elapsed(),
            answer,
        ));
    }
    let choice = |answer: Result<crate::model::ChatResponse, crate::model::ModelError>| {
        answer
            .ok()
            .and_then(|r| writ_checks::parse_verdict(&r.content, 2))
            .map(|v| v.choice - 1)
    };
    match (choice(straight), choice(flipped).map(|c| 1 - c)) {
        (Some(a), Some(b)) if a == b => Some(a),
        _ => None,
    }
}

fn distinguishing_messages(
    cx: FileCx<'_>,
    language: Language,
    shown: &[DistinguishingInput],
    flipped: bool,
) -> Vec<ChatMessage> {
    // The task first: the calls for the batch's files share it (see `prompt::candidate_messages`).
    let mut p = shared_task(&cx);
    let shared = p.len();
    p.push_str(&format!(
        "The file {} ({}) must do this:\n{}\n\n",
        serde_json::json!(cx.file.path.as_str()),
        language.name(),
        cx.file.description.trim()
    ));
    p.push_str("Two versions of it give different outputs on these inputs:\n\n");
    for input in shown {
        p.push_str(&format!("Input: `{}`\n", input.input));
        let mut outputs: Vec<&ShownOutput> = input.outputs.iter().collect();
        if flipped {
            outputs.reverse();
        }
        for (i, o) in outputs.iter().enumerate() {
            p.push_str(&format!("- Output {}: `{}`\n", i + 1, o.output));
        }
        p.push('\n');
    }
    p.push_str("Which outputs does the description call for? Answer only with {\"choice\": N, \"reason\": \"one or two sentences\"}, N being 1 or 2.");
    vec![
        ChatMessage::system(
            "You decide which of two behaviours a specification calls for. Work out the expected output of each input from the description alone.",
        ),
        ChatMessage::user(p).with_shared_prefix(shared),
    ]
}

/// The batch's task, which opens these prompts for every file of the batch alike.
fn shared_task(cx: &FileCx<'_>) -> String {
    cx.batch
        .task_description()
        .map(|task| {
            format!(
                "The files of this batch serve this task:\n{}\n\n",
                task.trim()
            )
        })
        .unwrap_or_default()
}

fn output_of(r: &CheckResults, c: usize, p: usize) -> String {
    r.outputs
        .get(c)
        .and_then(|o| o.get(p))
        .and_then(|o| o.clone())
        .unwrap_or_else(|| "(no output)".into())
}

/// The models that write the tests: `WRIT_TEST_MODELS`, else the arbiter and the first of the
/// file's candidate models that is not the arbiter. Two writers rather than one because a
/// single writer's wrong assertion that happens to expect a buggy candidate's answer outvotes
/// the correct candidate; a second model errs at other places, so its tests outvote the slip
/// (EVALS.md: one writer 70 %, two 88 %). Both are models the deployment already calls, so the
/// default needs no configuration of its own.
fn test_writers(selector: &Selector<'_>, models: &[String]) -> Vec<String> {
    if !selector.config.test_models.is_empty() {
        return selector.config.test_models.clone();
    }
    default_test_writers(&selector.arbiter_of(models), models)
}

fn default_test_writers(arbiter: &str, candidates: &[String]) -> Vec<String> {
    let mut writers = vec![arbiter.to_string()];
    writers.extend(candidates.iter().find(|m| *m != arbiter).cloned());
    writers
}

fn test_messages(cx: FileCx<'_>, flavour: &Flavour, names: &[String]) -> Vec<ChatMessage> {
    let file = cx.file;
    let mut p = shared_task(&cx);
    let shared = p.len();
    p.push_str(&format!(
        "Write tests for the file {} ({}).\n\nIt must do this:\n{}\n\n",
        serde_json::json!(file.path.as_str()),
        flavour.language.name(),
        file.description.trim()
    ));
    let imports: Vec<&String> = file
        .external_imports
        .iter()
        .chain(&file.internal_imports)
        .collect();
    if !imports.is_empty() {
        p.push_str(&format!(
            "It imports: {}\n\n",
            imports
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !names.is_empty() {
        p.push_str(&format!(
            "Its public names: {}\nImport them as:\n{}\n\n",
            names.join(", "),
            flavour.import_line(&file.path, names)
        ));
    }
    p.push_str(&format!(
        "The tests run from the repository root; the test file sits in `{CHECKS_DIR}/`. Write them in the usual form: {}. One behaviour per test; work each expected value out from the description (not from any implementation); cover the edge cases it names. Answer with one code block holding the whole test file.",
        flavour.form()
    ));
    vec![
        ChatMessage::system(
            "You write precise unit tests from a specification. You never see an implementation.",
        ),
        ChatMessage::user(p).with_shared_prefix(shared),
    ]
}

/// The generated test file to keep at `target` (`options.validation.keep_tests`): of the files
/// with kept tests, the one whose tests the chosen candidate passes most (a test file is one
/// writer's, whole, so it still reads as written); every other test in it — failed by the
/// candidate (`failed`, by id), or dropped for a name error — stays, marked as skipped with
/// why, for the caller to look at rather than a red suite. JavaScript `require('../…')` paths
/// are made relative to `target`.
pub(crate) fn kept_tests(
    summary: &GeneratedChecks,
    failed: &[String],
    language: Language,
    target: &RepoPath,
) -> KeptTests {
    let mut best: Option<(&GeneratedTestFile, Vec<&str>)> = None;
    for file in &summary.files {
        let prefix = format!("{}::", file.path);
        let passed: Vec<&str> = summary
            .tests
            .iter()
            .filter(|id| id.starts_with(&prefix) && !failed.contains(id))
            .filter_map(|id| id.rsplit("::").next())
            .collect();
        let any_kept = summary.tests.iter().any(|id| id.starts_with(&prefix));
        if any_kept && best.as_ref().is_none_or(|(_, p)| passed.len() > p.len()) {
            best = Some((file, passed));
        }
    }
    let Some((file, passed)) = best else {
        return KeptTests {
            path: target.to_string(),
            error: Some("no generated test could be kept (none was usable)".into()),
            ..KeptTests::default()
        };
    };
    let skip: Vec<String> = test_names(&file.content, language)
        .into_iter()
        .filter(|n| !passed.contains(&n.as_str()))
        .collect();
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let content = match language {
        Language::JavaScript => skip_js(&relocate_requires(&file.content, target), &skip),
        _ => skip_python(&file.content, &skip),
    };
    KeptTests {
        path: target.to_string(),
        model: Some(file.model.clone()),
        passed: passed.len(),
        skipped: skip.len(),
        content: Some(content),
        ..KeptTests::default()
    }
}

/// The tests a test file defines, by the names its runner reports: pytest's `test…`
/// functions, `node:test`'s `test('…')` / `it('…')` names.
fn test_names(code: &str, language: Language) -> Vec<String> {
    let mut names = Vec::new();
    match language {
        Language::JavaScript => {
            for call in ["test(", "it("] {
                let mut rest = code;
                while let Some(at) = rest.find(call) {
                    let before = rest[..at].chars().next_back();
                    rest = &rest[at + call.len()..];
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
                        continue;
                    }
                    let Some(quote) = rest
                        .chars()
                        .next()
                        .filter(|c| matches!(c, '\'' | '"' | '`'))
                    else {
                        continue;
                    };
                    if let Some(end) = rest[1..].find(quote) {
                        names.push(rest[1..1 + end].to_string());
                    }
                }
            }
        }
        _ => {
            for line in code.lines() {
                let t = line.trim_start();
                let Some(rest) = t
                    .strip_prefix("def ")
                    .or_else(|| t.strip_prefix("async def "))
                else {
                    continue;
                };
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with("test") {
                    names.push(name);
                }
            }
        }
    }
    names
}

const SKIP_REASON: &str =
    "writ: the written file fails this generated test; check its expected value";

fn skip_python(code: &str, names: &[&str]) -> String {
    if names.is_empty() {
        return code.to_string();
    }
    let mut out = String::new();
    if !code
        .lines()
        .any(|l| l.trim() == "import pytest" || l.starts_with("import pytest,"))
    {
        out.push_str("import pytest\n");
    }
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let defines = |name: &&str| {
            trimmed
                .strip_prefix("def ")
                .or_else(|| trimmed.strip_prefix("async def "))
                .is_some_and(|rest| rest.strip_prefix(*name).is_some_and(|r| r.starts_with('(')))
        };
        if names.iter().any(defines) {
            out.push_str(&format!(
                "{indent}@pytest.mark.skip(reason={})\n",
                serde_json::json!(SKIP_REASON)
            ));
        }
        out.push_str(line);
    }
    out
}

fn skip_js(code: &str, names: &[&str]) -> String {
    let mut out = code.to_string();
    for name in names {
        for call in ["test", "it"] {
            for quote in ['\'', '"', '`'] {
                let from = format!("{call}({quote}{name}{quote}");
                let to = format!("{call}.skip({quote}{name}{quote}");
                out = out.replace(&from, &to);
            }
        }
    }
    out
}

/// The test was written to sit in `CHECKS_DIR/`, one folder below the root: its requires of
/// `../x` become relative to `target`'s folder.
fn relocate_requires(code: &str, target: &RepoPath) -> String {
    let depth = target.as_str().matches('/').count();
    let prefix = if depth == 0 {
        "./".to_string()
    } else {
        "../".repeat(depth)
    };
    code.replace("require('../", &format!("require('{prefix}"))
        .replace("require(\"../", &format!("require(\"{prefix}"))
}

/// The top-level public names every candidate defines, sorted.
pub(crate) fn shared_public_names(codes: &[&str], language: Language) -> Vec<String> {
    let mut shared: Option<BTreeSet<String>> = None;
    for code in codes {
        let names = public_names(code, language);
        shared = Some(match shared {
            None => names,
            Some(s) => s.intersection(&names).cloned().collect(),
        });
    }
    shared.unwrap_or_default().into_iter().collect()
}

fn public_names(code: &str, language: Language) -> BTreeSet<String> {
    let ident = |s: &str| -> Option<String> {
        let name: String = s
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        (!name.is_empty() && !name.starts_with('_')).then_some(name)
    };
    let mut names = BTreeSet::new();
    let mut exported = BTreeSet::new();
    for line in code.lines() {
        match language {
            Language::JavaScript => {
                let l = line
                    .trim_start_matches("export ")
                    .trim_start_matches("async ");
                if line.starts_with(' ') || line.starts_with('\t') {
                    if let Some(rest) = line.trim().strip_prefix("module.exports.") {
                        exported.extend(ident(rest));
                    }
                    continue;
                }
                for prefix in [
                    "function* ",
                    "function ",
                    "class ",
                    "const ",
                    "let ",
                    "var ",
                ] {
                    if let Some(rest) = l.strip_prefix(prefix) {
                        names.extend(ident(rest.trim_start()));
                    }
                }
                for prefix in ["exports.", "module.exports."] {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        exported.extend(ident(rest));
                    }
                }
            }
            _ => {
                for prefix in ["def ", "async def ", "class "] {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        names.extend(ident(rest));
                    }
                }
            }
        }
    }
    if language == Language::JavaScript
        && let Some(start) = code.find("module.exports = {")
    {
        let body = &code[start + "module.exports = {".len()..];
        let body = body.split('}').next().unwrap_or_default();
        for part in body.split(',') {
            let key = part.split(':').next().unwrap_or_default().trim();
            exported.extend(ident(key));
        }
    }
    if exported.is_empty() { names } else { exported }
}

/// The description's `>>> expr` examples (Python docstring form).
pub(crate) fn docstring_examples(description: &str, language: Language) -> Vec<String> {
    if language != Language::Python {
        return Vec::new();
    }
    description
        .lines()
        .filter_map(|l| l.trim().strip_prefix(">>> "))
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect()
}

/// The inputs a test file's assertions call: the left side of each equality assertion.
pub(crate) fn probe_inputs(test: &str, language: Language) -> Vec<String> {
    let mut out = Vec::new();
    match language {
        Language::JavaScript => {
            for form in [
                "assert.strictEqual(",
                "assert.deepStrictEqual(",
                "assert.equal(",
                "assert.deepEqual(",
            ] {
                let mut rest = test;
                while let Some(at) = rest.find(form) {
                    rest = &rest[at + form.len()..];
                    if let Some(first) = first_argument(rest) {
                        out.push(first.trim().to_string());
                    }
                }
            }
        }
        _ => {
            for line in test.lines() {
                let l = line.trim();
                if let Some(rest) = l.strip_prefix("assert ") {
                    let rest = split_top_level(rest, ",").map_or(rest, |(a, _)| a);
                    if let Some((lhs, _)) = split_top_level(rest, "==") {
                        out.push(lhs.trim().to_string());
                    }
                } else if let Some(rest) = l.strip_prefix("self.assertEqual(")
                    && let Some(first) = first_argument(rest)
                {
                    out.push(first.trim().to_string());
                }
            }
        }
    }
    out.retain(|e| e.contains('(') && !e.is_empty());
    out
}

/// The text up to the first top-level `,` (or the closing `)`) of an argument list whose `(`
/// is already consumed.
fn first_argument(args: &str) -> Option<&str> {
    let (first, _) = split_top_level(args, ",").or_else(|| split_top_level(args, ")"))?;
    Some(first)
}

/// Splits `s` at the first occurrence of `sep` outside brackets and string literals.
fn split_top_level<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let bytes = s.as_bytes();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(q) = quote {
            if b == b'\\' {
                i += 2;
                continue;
            }
            if b == q {
                quote = None;
            }
        } else {
            match b {
                b'\'' | b'"' | b'`' => quote = Some(b),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' if depth > 0 => depth -= 1,
                _ if depth == 0 && s[i..].starts_with(sep) => {
                    // `==` must not be the start of `===` or the end of `!=`, `<=`, `>=`.
                    let clean = sep != "=="
                        || (!s[i + 2..].starts_with('=')
                            && !matches!(
                                bytes.get(i.wrapping_sub(1)),
                                Some(b'!' | b'<' | b'>' | b'=')
                            ));
                    if clean {
                        return Some((&s[..i], &s[i + sep.len()..]));
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// One candidate's run, as the harness reported it.
#[derive(Debug, Clone, Default)]
struct Report {
    /// Test id → (outcome word, error message).
    tests: BTreeMap<String, (String, String)>,
    /// Probe id (`file#i`) → output.
    outputs: BTreeMap<String, String>,
}

fn parse_report(stdout: &str, marker: &str) -> Report {
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
fn tabulate(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_inputs_are_the_called_side_of_equality_assertions() {
        let py = "def test_a():\n    assert clamp(5, 0, 10) == 5\n    assert clamp(1, 2, 3) == 2, 'low'\n    assert x == 1\n    assert parse('a==b') != 3\n";
        assert_eq!(
            probe_inputs(py, Language::Python),
            vec!["clamp(5, 0, 10)", "clamp(1, 2, 3)"]
        );
        let js = "test('a', () => {\n  assert.strictEqual(add(1, [2, 3]), 6);\n  assert.deepStrictEqual(split('a,b'), ['a', 'b']);\n});";
        assert_eq!(
            probe_inputs(js, Language::JavaScript),
            vec!["add(1, [2, 3])", "split('a,b')"]
        );
        assert_eq!(
            docstring_examples("Clamps.\n    >>> clamp(5, 0, 1)\n    1\n", Language::Python),
            vec!["clamp(5, 0, 1)"]
        );
    }

    #[test]
    fn the_kept_test_file_is_the_one_the_chosen_candidate_passes_most_with_its_failures_skipped() {
        let file = |path: &str, model: &str, content: &str| GeneratedTestFile {
            path: path.into(),
            model: model.into(),
            content: content.into(),
        };
        let summary = GeneratedChecks {
            files: vec![
                file(
                    ".writ-checks/test_calc_0.py",
                    "w0",
                    "from calc import add\n\ndef test_a():\n    assert add(1, 1) == 2\n\ndef test_b():\n    assert add(1, 2) == 4\n",
                ),
                file(
                    ".writ-checks/test_calc_1.py",
                    "w1",
                    "import pytest\nfrom calc import add\n\ndef test_a():\n    assert add(2, 2) == 4\n\ndef test_b():\n    assert add(0, 0) == 0\n",
                ),
            ],
            tests: vec![
                ".writ-checks/test_calc_0.py::test_a".into(),
                ".writ-checks/test_calc_0.py::test_b".into(),
                ".writ-checks/test_calc_1.py::test_a".into(),
                ".writ-checks/test_calc_1.py::test_b".into(),
            ],
            ..GeneratedChecks::default()
        };
        let target = RepoPath::parse("tests/test_calc.py").unwrap();
        let failed = vec![".writ-checks/test_calc_0.py::test_b".to_string()];
        let kept = kept_tests(&summary, &failed, Language::Python, &target);
        assert_eq!(kept.model.as_deref(), Some("w1"));
        assert_eq!((kept.passed, kept.skipped), (2, 0));
        // Only w0's file has tests: its failure is kept, skipped.
        let summary = GeneratedChecks {
            tests: summary.tests[..2].to_vec(),
            ..summary
        };
        let kept = kept_tests(&summary, &failed, Language::Python, &target);
        assert_eq!((kept.passed, kept.skipped), (1, 1));
        let content = kept.content.unwrap();
        assert!(content.starts_with("import pytest\n"), "{content}");
        assert!(
            content.contains("@pytest.mark.skip(reason=\"writ: the written file fails this generated test; check its expected value\")\ndef test_b():"),
            "{content}"
        );
        assert!(!content.contains(")\ndef test_a"), "{content}");
        let js = "const { add } = require('../calc.js');\ntest('adds', () => {});\ntest('slip', () => {});\n";
        assert_eq!(
            skip_js(
                &relocate_requires(js, &RepoPath::parse("test/calc.test.js").unwrap()),
                &["slip"]
            ),
            "const { add } = require('../calc.js');\ntest('adds', () => {});\ntest.skip('slip', () => {});\n"
        );
        assert_eq!(
            relocate_requires(js, &RepoPath::parse("calc.test.js").unwrap())
                .lines()
                .next(),
            Some("const { add } = require('./calc.js');")
        );
        let none = kept_tests(&GeneratedChecks::default(), &[], Language::Python, &target);
        assert!(none.content.is_none() && none.error.is_some());
    }

    #[test]
    fn by_default_the_arbiter_and_the_first_other_candidate_model_write_the_tests() {
        let models = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            default_test_writers("judge", &models(&["a", "b"])),
            models(&["judge", "a"])
        );
        assert_eq!(
            default_test_writers("a", &models(&["a", "b"])),
            models(&["a", "b"]),
            "the arbiter is also a candidate: the next model"
        );
        assert_eq!(default_test_writers("a", &models(&["a"])), models(&["a"]));
    }

    #[test]
    fn the_names_shown_to_the_test_writer_are_the_public_ones_every_candidate_defines() {
        let a = "import os\n\ndef clamp(x, lo, hi):\n    pass\n\ndef _helper():\n    pass\n\nclass Range:\n    def inner(self): pass\n";
        let b = "def clamp(x, lo, hi):\n    return x\n\nclass Range:\n    pass\n\ndef extra():\n    pass\n";
        assert_eq!(
            shared_public_names(&[a, b], Language::Python),
            vec!["Range", "clamp"]
        );
        let js_a = "function add(a, b) { return a + b; }\nfunction helper() {}\nmodule.exports = { add, sub: minus };\n";
        let js_b = "const add = (a, b) => a + b;\nconst sub = (a, b) => a - b;\nmodule.exports = { add, sub };\n";
        assert_eq!(
            shared_public_names(&[js_a, js_b], Language::JavaScript),
            vec!["add", "sub"]
        );
    }

    #[test]
    fn a_report_reads_only_marked_lines_and_a_file_no_candidate_imports_is_dropped() {
        let out = "noise\n@@m {\"test\": \"t.py::test_a\", \"outcome\": \"passed\", \"error\": null}\n@@m {\"test\": \"t.py::test_b\", \"outcome\": \"failed\", \"error\": \"NameError: name 'f' is not defined\"}\n@@m {\"probe\": \"t.py#0\", \"output\": \"5\"}\n@@m {\"test\": \"u.py\", \"outcome\": \"error\", \"error\": \"ImportError: nope\"}\nprinted by a candidate: @@m {\"test\": \"t.py::test_c\", \"outcome\": \"passed\"}\n";
        let report = parse_report(out, "@@m");
        let files = vec![
            ("t.py".to_string(), String::new()),
            ("u.py".to_string(), String::new()),
        ];
        let mut discarded = Vec::new();
        let r = tabulate(
            &[report],
            &[("t.py#0".into(), "f(1)".into())],
            &files,
            &mut discarded,
        );
        assert_eq!(r.tests, vec!["t.py::test_a", "t.py::test_b"]);
        assert_eq!(
            r.outcomes[0],
            vec![Some(TestOutcome::Passed), Some(TestOutcome::NameError)]
        );
        assert_eq!(r.outputs[0], vec![Some("5".to_string())]);
        assert_eq!(discarded.len(), 1);
        assert!(
            discarded[0].starts_with("u.py: no candidate could run it (ImportError"),
            "{discarded:?}"
        );
    }

    /// Runs the harness with the machine's `/usr/bin/python3` in a fresh directory holding the
    /// staged files: the real harness and pytest, without the sandbox (whose own tests live in
    /// `writ-sandbox`).
    struct LocalPython;

    #[async_trait::async_trait]
    impl CommandRunner for LocalPython {
        fn check(
            &self,
            _call: &CommandCall,
            _field: &str,
        ) -> Result<(), crate::execution::RunError> {
            Ok(())
        }
        fn limits(&self) -> crate::execution::RunLimits {
            crate::execution::RunLimits {
                max_timeout: std::time::Duration::from_secs(60),
                max_repair_rounds: 3,
            }
        }
        async fn run(
            &self,
            staged: &[(RepoPath, Vec<u8>)],
            calls: &[CommandCall],
            _timeout: std::time::Duration,
        ) -> Result<Vec<crate::execution::RunOutcome>, crate::execution::RunError> {
            let dir = std::env::temp_dir().join(format!("writ-checks-{}", uuid::Uuid::now_v7()));
            let failed = |e: std::io::Error| crate::execution::RunError::Failed(e.to_string());
            for (path, bytes) in staged {
                let target = dir.join(path.as_str());
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(failed)?;
                }
                std::fs::write(target, bytes).map_err(failed)?;
            }
            let out = std::process::Command::new("/usr/bin/python3")
                .args(&calls[0].args)
                .current_dir(&dir)
                .output()
                .map_err(failed)?;
            let _ = std::fs::remove_dir_all(&dir);
            Ok(vec![crate::execution::RunOutcome {
                exit_code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                duration_ms: 1,
                timed_out: false,
                truncated: false,
                missing_evidence: None,
                limit_reached: None,
            }])
        }
    }

    const CORRECT: &str = "def clamp(x, lo, hi):\n    if lo > hi:\n        raise ValueError('lo > hi')\n    return max(lo, min(x, hi))\n";
    /// Swaps the bounds when `x` is out of range.
    const SWAPPED: &str = "def clamp(x, lo, hi):\n    if lo > hi:\n        raise ValueError('lo > hi')\n    if x < lo:\n        return hi\n    if x > hi:\n        return lo\n    return x\n";
    /// Never raises.
    const LAX: &str = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n";

    async fn decide_with(
        codes: &[&str],
        tests: &str,
        verdicts: Vec<crate::synthesis::doubles::Answer>,
    ) -> (Checked, Vec<String>, usize) {
        decide_among(codes, codes.len(), tests, verdicts).await
    }

    /// As [`decide_with`], the candidates after the first `eligible` having failed the
    /// caller's tests (voters).
    async fn decide_among(
        codes: &[&str],
        eligible: usize,
        tests: &str,
        verdicts: Vec<crate::synthesis::doubles::Answer>,
    ) -> (Checked, Vec<String>, usize) {
        use crate::synthesis::doubles::{self, Answer, ScriptedModels};
        use crate::synthesis::fanout::Upstream;
        use crate::synthesis::generation::Generated;
        use crate::synthesis::progress::NoProgress;
        use crate::synthesis::stage::SynthesisConfig;

        let batch = doubles::batch(&["clamp.py"]);
        let prior = doubles::prior(&batch);
        let clock = Upstream::default();
        let cx = FileCx {
            batch: &batch,
            file: &batch.files()[0],
            prior: &prior,
            sink: &NoProgress,
            upstream: &clock,
        };
        let models = ScriptedModels::default()
            .with(
                "writer",
                vec![Answer::after(1, &format!("Here:\n```python\n{tests}```\n"))],
            )
            .with("judge", verdicts);
        let config = SynthesisConfig {
            arbiter: Some("judge".into()),
            test_models: vec!["writer".into()],
            ..SynthesisConfig::default()
        };
        let selector = Selector {
            models: &models,
            config: &config,
            batch: &batch,
        };
        let names = ["m1", "m2", "m3", "m4", "m5"];
        let f = FileTrials {
            file: &batch.files()[0],
            position: 0,
            generated: Generated {
                language: Language::Python,
                models: names.iter().map(|m| m.to_string()).collect(),
                messages: Vec::new(),
                answers: Vec::new(),
                existing: None,
                allow_removals: false,
                rounds: Default::default(),
            },
            records: vec![Default::default(); codes.len()],
            trials: codes
                .iter()
                .enumerate()
                .map(|(i, c)| super::super::Trial {
                    model: names[i].to_string(),
                    code: c.to_string(),
                    round: 0,
                    record: i,
                    outcome: None,
                })
                .collect(),
            best: Some(0),
            rounds: 0,
            checks: Vec::new(),
            diagnostics: None,
        };
        let validation = crate::synthesis::batch::Validation::generated_only();
        let among: Vec<usize> = (0..eligible).collect();
        let voters: Vec<usize> = (eligible..codes.len()).collect();
        let candidates = Candidates {
            eligible: &among,
            voters: &voters,
        };
        let checked = check_and_decide(
            &selector,
            &LocalPython,
            &validation,
            cx,
            &f,
            candidates,
            &[],
        )
        .await;
        let writer_prompt: Vec<String> = models
            .requests_to("writer")
            .iter()
            .flat_map(|r| r.messages.iter().map(|m| m.content.clone()))
            .collect();
        (checked, writer_prompt, models.requests_to("judge").len())
    }

    #[tokio::test]
    async fn a_candidate_that_failed_the_callers_tests_breaks_a_tie_between_two_passers() {
        // CORRECT and SWAPPED each pass two of three tests (the third expects SWAPPED's answer
        // below the range); LAX, ruled out by the caller's tests, ends every test as CORRECT.
        let tests = "from clamp import clamp\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n\ndef test_above():\n    assert clamp(11, 0, 10) == 10\n\ndef test_below():\n    assert clamp(-1, 0, 10) == 10\n";
        let (checked, _, judged) =
            decide_among(&[SWAPPED, CORRECT, LAX], 2, tests, Vec::new()).await;
        let decision = checked.decision.expect("the checks decide");
        assert_eq!(decision.trial, 1, "{:?}", checked.summary);
        assert_eq!(decision.selection, Selection::Agreement);
        assert_eq!(judged, 0, "no arbiter call");
        assert_eq!(checked.records.len(), 2, "only the passers are grouped");
        // Without the voter the two are tied, and only the arbiter can part them.
        let (checked, _, judged) = decide_among(
            &[SWAPPED, CORRECT],
            2,
            tests,
            vec![crate::synthesis::doubles::Answer::after(1, "{\"choice\": 1}"); 4],
        )
        .await;
        assert!(judged > 0);
        assert_ne!(
            checked.decision.map(|d| d.selection),
            Some(Selection::Agreement)
        );
    }

    #[tokio::test]
    async fn the_candidate_the_generated_tests_agree_on_is_chosen_despite_a_wrong_assertion() {
        // One wrong assertion (clamp(11, 0, 10) is 10), one test of a name no candidate has.
        let tests = "import pytest\nfrom clamp import clamp\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n\ndef test_above():\n    assert clamp(11, 0, 10) == 10\n\ndef test_below():\n    assert clamp(-1, 0, 10) == 0\n\ndef test_wrong():\n    assert clamp(11, 0, 10) == 11\n\ndef test_raises():\n    with pytest.raises(ValueError):\n        clamp(1, 5, 2)\n\ndef test_other_name():\n    assert bound(1) == 1\n";
        let (checked, prompt, judged) =
            decide_with(&[SWAPPED, CORRECT, LAX], tests, Vec::new()).await;
        let decision = checked.decision.expect("the checks decide");
        assert_eq!(decision.trial, 1);
        assert_eq!(decision.selection, Selection::Agreement);
        assert_eq!(judged, 0, "no arbiter call");
        assert_eq!(checked.summary.tests.len(), 5, "{:?}", checked.summary);
        assert!(
            checked
                .summary
                .discarded
                .iter()
                .any(|d| d.contains("test_other_name"))
        );
        assert_eq!(checked.summary.groups[0].models, vec!["m2"]);
        assert_eq!(checked.summary.groups[0].score, 4);
        let record = &checked.records.iter().find(|(t, _)| *t == 1).expect("m2").1;
        assert_eq!(
            record.failed.len(),
            1,
            "only the wrong assertion fails it: {record:?}"
        );
        let prompt = prompt.join("\n");
        assert!(prompt.contains("from clamp import clamp"), "{prompt}");
        assert!(
            !prompt.contains("return max"),
            "no candidate's code reaches the test writer"
        );
    }

    #[tokio::test]
    async fn a_test_file_that_cannot_be_imported_still_lends_its_inputs_to_behaviour() {
        // The writer got the module name wrong: no test runs, but its calls are inputs from the
        // description. Every candidate behaves differently; CORRECT's outputs are the ones the
        // others share most, input by input.
        let tests = "from clamp_impl import clamp\n\ndef test_a():\n    assert clamp(5, 0, 10) == 5\n\ndef test_b():\n    assert clamp(11, 0, 10) == 10\n\ndef test_c():\n    assert clamp(-1, 0, 10) == 0\n\ndef test_d():\n    assert clamp(1, 5, 2) == 0\n";
        let (checked, _, judged) = decide_with(&[SWAPPED, LAX, CORRECT], tests, Vec::new()).await;
        assert!(checked.summary.tests.is_empty(), "{:?}", checked.summary);
        assert!(
            checked
                .summary
                .discarded
                .iter()
                .any(|d| d.contains("no candidate could run it")),
            "{:?}",
            checked.summary.discarded
        );
        let decision = checked.decision.expect("behaviour decides");
        assert_eq!(decision.selection, Selection::Behaviour);
        assert_eq!(decision.trial, 2);
        assert_eq!(judged, 0, "no arbiter call");
    }

    #[tokio::test]
    async fn tests_that_do_not_separate_leave_behaviour_and_then_distinguishing_inputs_to_decide() {
        // Passed by every candidate: the probes decide. Two of three behave alike.
        let probing = "from clamp import clamp\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n\ndef test_probe():\n    assert clamp(11, 0, 10) == clamp(11, 0, 10)\n";
        let (checked, _, _) = decide_with(&[SWAPPED, CORRECT, LAX], probing, Vec::new()).await;
        let decision = checked.decision.expect("behaviour decides");
        assert_eq!(decision.selection, Selection::Behaviour);
        assert_eq!(
            decision.trial, 1,
            "CORRECT and LAX agree; the first of them"
        );

        // Two clusters of one: the arbiter sees the disagreeing input in both orders.
        use crate::synthesis::doubles::Answer;
        let consistent = vec![
            Answer::after(1, r#"{"choice": 2, "reason": "10 is the bound"}"#),
            Answer::after(1, r#"{"choice": 1, "reason": "10 is the bound"}"#),
        ];
        let (checked, _, judged) = decide_with(&[SWAPPED, CORRECT], probing, consistent).await;
        assert_eq!(judged, 2);
        let shown = &checked.summary.distinguishing;
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].input, "clamp(11, 0, 10)");
        let decision = checked.decision.expect("decided");
        assert_eq!(decision.selection, Selection::Distinguished);
        let position_biased = vec![Answer::after(1, r#"{"choice": 1, "reason": "first"}"#)];
        let (checked, _, judged) = decide_with(&[SWAPPED, CORRECT], probing, position_biased).await;
        assert_eq!(judged, 3, "both orders, then the arbiter among the tied");
        let decision = checked.decision.expect("the arbiter decides");
        assert_eq!(decision.selection, Selection::AgreementArbiter);
    }
}
