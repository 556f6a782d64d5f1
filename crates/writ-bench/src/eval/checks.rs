//! `writ-bench eval-checks`: how often the correct file is written when the caller gives no
//! tests (or only a docstring's examples) and writ generates its own checks.
//!
//! The task set: every single-file task of [`super::tasks`] (Python, hand-written wrong
//! versions; the inputs are the calls its test asserts on) and every function of
//! `eval/checks/functions.toml` twice, in Python and in JavaScript, whose wrong versions are
//! mutants of the correct one (a flipped comparison, a dropped `+ 1`, `min` for `max`, ...)
//! chosen among those that change the output on some inputs and keep it on others. Every
//! version's output on every input is computed first, with the machine's `python3` and `node`.
//!
//! The test-writing model is the fake, scripted per task from those outputs, imperfectly: about
//! a quarter of the assertions expect a wrong version's output (or another input's), one task in
//! ten gets tests on inputs where every version agrees (not discriminating), and one in ten gets
//! no usable test file (it does not parse, or imports a module that does not exist). The arbiter
//! always answers `{"choice": 1}`, for whole files and for distinguishing inputs alike.
//!
//! `c-staggered` and `c-stop`, run only when named: the five-candidate configuration with the
//! models answering after different latencies, without and with `options.fanout.stop_when_passing`
//! — what stopping early on generated checks saves.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Value, json};

use super::tasks::{self, normalise};
use crate::procs::{Fake, Writ};

/// Candidate models; the first three answer in the three-candidate configurations.
pub const MODELS: [&str; 5] = [
    "eval-alpha",
    "eval-beta",
    "eval-gamma",
    "eval-delta",
    "eval-epsilon",
];
pub const ARBITER: &str = "eval-judge";
/// The test writer of the one-writer configuration (`WRIT_TEST_MODELS=eval-writer`).
pub const WRITER: &str = "eval-writer";
const COMMANDS: &str = r#"{"python": ["python3", "{args}"], "node": ["node", "{args}"]}"#;
const TIMEOUT_SECS: u64 = 30;
/// Assertions per generated test file, at most.
const MAX_ASSERTIONS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lang {
    Python,
    JavaScript,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
        }
    }
}

/// One single-file task.
#[derive(Debug, Clone)]
pub struct CheckTask {
    pub id: String,
    pub lang: Lang,
    pub path: String,
    pub description: String,
    /// The names the calls use (imported by tests).
    pub names: Vec<String>,
    pub correct: String,
    pub wrong: Vec<String>,
    /// Call expressions in the task's language.
    pub inputs: Vec<String>,
    /// `outputs[v][k]`: version `v` (0 the correct one, then `wrong`) on input `k`.
    pub outputs: Vec<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct Functions {
    function: Vec<Function>,
}

#[derive(Debug, Deserialize)]
struct Function {
    name: String,
    description: String,
    python: String,
    javascript: String,
    inputs: Vec<Vec<Value>>,
}

fn camel(name: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in name.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn literal(v: &Value, lang: Lang) -> String {
    match (v, lang) {
        (Value::Bool(b), Lang::Python) => if *b { "True" } else { "False" }.into(),
        (Value::Null, Lang::Python) => "None".into(),
        (Value::Array(items), _) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| literal(i, lang))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (other, _) => other.to_string(),
    }
}

/// Text mutations that make subtly wrong versions.
const MUTATIONS: &[(&str, &str)] = &[
    ("<=", "<"),
    (">=", ">"),
    (" < ", " <= "),
    (" > ", " >= "),
    (" < ", " > "),
    (" > ", " < "),
    (" + 1", ""),
    (" - 1", ""),
    (" + ", " - "),
    (" - ", " + "),
    ("min", "max"),
    ("max", "min"),
    (" and ", " or "),
    ("&&", "||"),
    (" or ", " and "),
    ("||", "&&"),
    ("== 0", "== 1"),
    ("=== 0", "=== 1"),
    ("= 0", "= 1"),
    ("(0", "(1"),
    ("return -1", "return 0"),
    ("% 400", "% 40"),
    ("+= 1", "+= 2"),
    (" * ", " + "),
    ("% 10", "% 100"),
    (" not in ", " in "),
    ("[k:]", "[k + 1:]"),
    ("slice(k)", "slice(k + 1)"),
    ("if x in seen", "if x not in seen"),
    ("has(x)", "has(x + 1)"),
    ("len(w)", "len(w) - 1"),
    ("w.length", "w.length - 1"),
    ("split()", "split(\" \")"),
    ("+= x", "= x"),
    ("[:1]", "[:2]"),
    ("(0, 1)", "(0, 2)"),
];

fn mutants(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for &(from, to) in MUTATIONS {
        let mut start = 0;
        while let Some(at) = code[start..].find(from) {
            let at = start + at;
            let mut m = String::with_capacity(code.len());
            m.push_str(&code[..at]);
            m.push_str(to);
            m.push_str(&code[at + from.len()..]);
            if !out.contains(&m) && m != code {
                out.push(m);
            }
            start = at + from.len();
        }
    }
    out
}

const PY_RUNNER: &str = r#"
import json, signal, sys
job = json.load(open(sys.argv[1]))
def alarm(*_):
    raise TimeoutError()
signal.signal(signal.SIGALRM, alarm)
ns = {"__name__": "m"}
try:
    exec(job["version"], ns)
    row = []
    for inp in job["inputs"]:
        signal.alarm(1)
        try:
            v = eval(inp, dict(ns))
            r = repr(v)
            import ast
            ast.literal_eval(r)
            row.append(r)
        except (ValueError, SyntaxError):
            row.append("unrepresentable")
        except BaseException as e:
            row.append("raises " + type(e).__name__)
        finally:
            signal.alarm(0)
except BaseException as e:
    row = ["raises " + type(e).__name__ for _ in job["inputs"]]
print(json.dumps(row))
"#;

const JS_RUNNER: &str = r#"
const util = require('util');
const job = JSON.parse(require('fs').readFileSync(process.argv[2], 'utf8'));
const mod = { exports: {} };
let row;
try {
  new Function('module', 'exports', 'require', job.version)(mod, mod.exports, require);
  const names = Object.keys(mod.exports);
  const vals = names.map((n) => mod.exports[n]);
  row = job.inputs.map((inp) => {
    try { return util.inspect(new Function(...names, 'return ' + inp)(...vals), { depth: 6, breakLength: Infinity }); }
    catch (e) { return 'raises ' + (e && e.name ? e.name : 'Error'); }
  });
} catch (e) { row = job.inputs.map(() => 'raises ' + (e && e.name ? e.name : 'Error')); }
console.log(JSON.stringify(row));
"#;

/// Each version's output on every input, run by the machine's interpreter (one process a
/// version, bounded, so a mutant that loops costs one timeout).
async fn outputs_of(
    lang: Lang,
    versions: &[String],
    inputs: &[String],
) -> anyhow::Result<Vec<Vec<String>>> {
    let dir = tempfile::tempdir()?;
    let (program, runner) = match lang {
        Lang::Python => ("/usr/bin/python3", PY_RUNNER),
        Lang::JavaScript => ("node", JS_RUNNER),
    };
    let runner_path = dir.path().join("runner");
    std::fs::write(&runner_path, runner)?;
    let mut rows = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let job = dir.path().join(format!("job{i}.json"));
        std::fs::write(
            &job,
            serde_json::to_vec(&json!({"version": version, "inputs": inputs}))?,
        )?;
        let child = tokio::process::Command::new(program)
            .arg(&runner_path)
            .arg(&job)
            .kill_on_drop(true)
            .output();
        let row = match tokio::time::timeout(Duration::from_secs(3), child).await {
            Ok(Ok(out)) => serde_json::from_slice::<Vec<String>>(&out.stdout)
                .unwrap_or_else(|_| vec!["raises Crash".into(); inputs.len()]),
            _ => vec!["raises Timeout".into(); inputs.len()],
        };
        rows.push(row);
    }
    Ok(rows)
}

/// The task set; see the module docs.
pub async fn load(tasks_dir: &Path, functions: &Path) -> anyhow::Result<Vec<CheckTask>> {
    let mut all = Vec::new();
    for task in tasks::load(tasks_dir)? {
        if task.files.len() != 1 {
            continue;
        }
        let file = &task.files[0];
        let module = file.path.trim_end_matches(".py");
        let defined: BTreeSet<String> = file
            .correct
            .lines()
            .filter_map(|l| l.strip_prefix("def ").or_else(|| l.strip_prefix("class ")))
            .map(|l| {
                l.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect();
        let mut inputs: Vec<String> = Vec::new();
        for line in task.test.lines() {
            let Some(rest) = line.trim().strip_prefix("assert ") else {
                continue;
            };
            let Some((lhs, _)) = rest.split_once(" == ") else {
                continue;
            };
            let lhs = lhs.trim();
            let head: String = lhs
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if defined.contains(&head) && lhs.contains('(') && !inputs.contains(&lhs.to_string()) {
                inputs.push(lhs.to_string());
            }
        }
        let names: Vec<String> = defined
            .iter()
            .filter(|d| inputs.iter().any(|i| i.contains(d.as_str())))
            .cloned()
            .collect();
        if inputs.len() < 2 {
            continue;
        }
        let _ = module;
        let mut versions = vec![file.correct.clone()];
        versions.extend(file.wrong.iter().cloned());
        let outputs = outputs_of(Lang::Python, &versions, &inputs).await?;
        all.push(CheckTask {
            id: task.id.clone(),
            lang: Lang::Python,
            path: file.path.clone(),
            description: file.description.clone(),
            names,
            correct: file.correct.clone(),
            wrong: file.wrong.clone(),
            inputs,
            outputs,
        });
    }
    let text = std::fs::read_to_string(functions)
        .with_context(|| format!("reading {}", functions.display()))?;
    let parsed: Functions = toml::from_str(&text).context("parsing the functions")?;
    for (n, f) in parsed.function.iter().enumerate() {
        for lang in [Lang::Python, Lang::JavaScript] {
            let (name, code, path) = match lang {
                Lang::Python => (f.name.clone(), &f.python, format!("{}.py", f.name)),
                Lang::JavaScript => (camel(&f.name), &f.javascript, format!("{}.js", f.name)),
            };
            let inputs: Vec<String> = f
                .inputs
                .iter()
                .map(|args| {
                    format!(
                        "{name}({})",
                        args.iter()
                            .map(|a| literal(a, lang))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            let candidates = mutants(code);
            let mut versions = vec![code.clone()];
            versions.extend(candidates.iter().cloned());
            let outputs = outputs_of(lang, &versions, &inputs).await?;
            // Subtle first: differs on some inputs, agrees on others; then, if too few, one
            // that differs on every input. One per behaviour; rotated by the function so that
            // no one mutation always comes first.
            let mut picked: Vec<usize> = Vec::new();
            let m = candidates.len();
            for subtle in [true, false] {
                for j in 0..m {
                    let v = 1 + (j + n) % m;
                    let row = &outputs[v];
                    let differs = row.iter().zip(&outputs[0]).filter(|(a, b)| a != b).count();
                    let crashes = row.iter().all(|o| o.starts_with("raises"));
                    let same_as_picked = picked.iter().any(|&p| outputs[p] == *row);
                    let fits = if subtle {
                        differs > 0 && differs < inputs.len()
                    } else {
                        differs > 0
                    };
                    if fits && !crashes && !same_as_picked && picked.len() < 3 {
                        picked.push(v);
                    }
                }
                if picked.len() >= 2 {
                    break;
                }
            }
            if picked.len() < 2 {
                continue;
            }
            all.push(CheckTask {
                id: format!(
                    "{}_{}",
                    f.name,
                    if lang == Lang::Python { "py" } else { "js" }
                ),
                lang,
                path,
                description: f.description.replace(&f.name, &name),
                names: vec![name.clone()],
                correct: code.clone(),
                wrong: picked.iter().map(|&v| versions[v].clone()).collect(),
                inputs,
                outputs: std::iter::once(outputs[0].clone())
                    .chain(picked.iter().map(|&v| outputs[v].clone()))
                    .collect(),
            });
        }
    }
    Ok(all)
}

impl CheckTask {
    fn module(&self) -> String {
        self.path.trim_end_matches(".py").to_string()
    }

    fn import(&self, module_override: Option<&str>) -> String {
        match self.lang {
            Lang::Python => format!(
                "from {} import {}",
                module_override.unwrap_or(&self.module()),
                self.names.join(", ")
            ),
            Lang::JavaScript => format!(
                "const {{ {} }} = require('../{}');",
                self.names.join(", "),
                module_override.unwrap_or(&self.path)
            ),
        }
    }

    /// One test case asserting `input` gives `expected`.
    fn case(&self, k: usize, input: &str, expected: &str) -> String {
        let raises = expected.strip_prefix("raises ");
        match (self.lang, raises) {
            (Lang::Python, Some(kind)) => format!(
                "\n\ndef test_case_{k}():\n    with pytest.raises({}):\n        {input}\n",
                if kind == "Timeout" { "Exception" } else { kind }
            ),
            (Lang::Python, None) => {
                format!("\n\ndef test_case_{k}():\n    assert {input} == {expected}\n")
            }
            (Lang::JavaScript, Some(_)) => {
                format!("\ntest('case {k}', () => {{\n  assert.throws(() => {input});\n}});\n")
            }
            (Lang::JavaScript, None) => format!(
                "\ntest('case {k}', () => {{\n  assert.deepStrictEqual({input}, {expected});\n}});\n"
            ),
        }
    }

    fn header(&self, module_override: Option<&str>) -> String {
        match self.lang {
            Lang::Python => format!("import pytest\n{}\n", self.import(module_override)),
            Lang::JavaScript => format!(
                "const test = require('node:test');\nconst assert = require('node:assert');\n{}\n",
                self.import(module_override)
            ),
        }
    }

    fn usable(&self, k: usize) -> bool {
        let o = &self.outputs[0][k];
        o != "unrepresentable" && o != "raises Timeout"
    }

    /// What the scripted test writer answers for this task (number `index` in the set), and
    /// how it was made: `normal` (some assertions wrong), `weak` (not discriminating),
    /// `unusable`.
    pub fn written_tests(&self, index: usize, writer: usize) -> (String, &'static str) {
        let kinds = (index + 5 * writer) % 10;
        if kinds == 3 {
            let text = if (index / 10).is_multiple_of(2) {
                // Cut off mid-definition: does not parse.
                format!("{}\ndef test_case_0(:\n    assert\n", self.header(None))
            } else {
                let missing = match self.lang {
                    Lang::Python => format!("{}_impl", self.module()),
                    Lang::JavaScript => format!("lib/{}", self.path),
                };
                let mut t = self.header(Some(&missing));
                for k in (0..self.inputs.len())
                    .filter(|&k| self.usable(k))
                    .take(MAX_ASSERTIONS)
                {
                    t.push_str(&self.case(k, &self.inputs[k], &self.outputs[0][k]));
                }
                t
            };
            return (text, "unusable");
        }
        let mut t = self.header(None);
        if kinds == 7 {
            let agreeing: Vec<usize> = (0..self.inputs.len())
                .filter(|&k| {
                    self.usable(k) && self.outputs.iter().all(|o| o[k] == self.outputs[0][k])
                })
                .collect();
            let chosen = if agreeing.is_empty() {
                vec![0]
            } else {
                agreeing
            };
            for k in chosen.into_iter().take(MAX_ASSERTIONS) {
                t.push_str(&self.case(k, &self.inputs[k], &self.outputs[0][k]));
            }
            return (t, "weak");
        }
        for k in (0..self.inputs.len())
            .filter(|&k| self.usable(k))
            .take(MAX_ASSERTIONS)
        {
            let wrong = (index * 7 + k * 13 + 2 * writer).is_multiple_of(4);
            let expected = if wrong {
                // The test writer's slip: a wrong version's answer, else another input's.
                self.outputs[1..]
                    .iter()
                    .map(|o| &o[k])
                    .find(|o| {
                        *o != &self.outputs[0][k]
                            && !o.starts_with("raises")
                            && *o != "unrepresentable"
                    })
                    .or_else(|| {
                        self.outputs[0].iter().find(|o| {
                            *o != &self.outputs[0][k]
                                && !o.starts_with("raises")
                                && *o != "unrepresentable"
                        })
                    })
                    .unwrap_or(&self.outputs[0][k])
            } else {
                &self.outputs[0][k]
            };
            t.push_str(&self.case(k, &self.inputs[k], expected));
        }
        (t, "normal")
    }

    /// The docstring's examples: the first two inputs that do not raise, as a caller's test.
    fn examples(&self) -> Vec<usize> {
        (0..self.inputs.len())
            .filter(|&k| self.usable(k) && !self.outputs[0][k].starts_with("raises"))
            .take(2)
            .collect()
    }

    fn examples_test_path(&self) -> String {
        match self.lang {
            Lang::Python => format!("tests/examples_{}.py", self.id),
            Lang::JavaScript => format!("tests/examples_{}.js", self.id),
        }
    }

    fn examples_test(&self) -> String {
        let mut t = match self.lang {
            Lang::Python => format!(
                "import os, sys\nsys.path.insert(0, os.getcwd())\n{}\n",
                self.import(None)
            ),
            Lang::JavaScript => format!(
                "const assert = require('node:assert');\n{}\n",
                self.import(None)
            ),
        };
        for k in self.examples() {
            let (i, o) = (&self.inputs[k], &self.outputs[0][k]);
            t.push_str(&match self.lang {
                Lang::Python => format!("assert {i} == {o}\n"),
                Lang::JavaScript => format!("assert.deepStrictEqual({i}, {o});\n"),
            });
        }
        t.push_str(match self.lang {
            Lang::Python => "print('ok')\n",
            Lang::JavaScript => "console.log('ok');\n",
        });
        t
    }

    fn description_with_examples(&self) -> String {
        let mut d = self.description.clone();
        d.push_str("\n\nExamples:\n");
        for k in self.examples() {
            match self.lang {
                Lang::Python => {
                    let _ = write!(d, ">>> {}\n{}\n", self.inputs[k], self.outputs[0][k]);
                }
                Lang::JavaScript => {
                    let _ = writeln!(d, "{} // => {}", self.inputs[k], self.outputs[0][k]);
                }
            }
        }
        d
    }
}

/// One way of choosing, on the generated-checks task set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// No tests, no generated checks: the arbiter among three.
    ArbiterOnly,
    /// (a) No caller's tests; generated checks on, default settings: the test writers are the
    /// arbiter and the first candidate model, each with its own slips.
    Generated,
    /// (a) with one test-writing model (`WRIT_TEST_MODELS` names one).
    GeneratedOneWriter,
    /// The docstring's two examples as the caller's only test, no generated checks.
    ExamplesOnly,
    /// (b) The docstring's examples as the caller's test, and generated checks among the passers.
    ExamplesGenerated,
    /// (c) Five candidates (two correct, differing in text), generated checks on.
    FiveGenerated,
    /// (c) with the five models answering after different latencies (only when named).
    FiveStaggered,
    /// As [`Config::FiveStaggered`], with `options.fanout.stop_when_passing` (only when named).
    FiveStop,
}

impl Config {
    pub const ALL: [Config; 6] = [
        Config::ArbiterOnly,
        Config::Generated,
        Config::GeneratedOneWriter,
        Config::ExamplesOnly,
        Config::ExamplesGenerated,
        Config::FiveGenerated,
    ];
    /// Run only when named in `--configs`: what stopping early saves with generated checks.
    pub const STAGGERED: [Config; 2] = [Config::FiveStaggered, Config::FiveStop];

    /// The configuration's name on the command line (`--configs`).
    pub fn key(self) -> &'static str {
        match self {
            Config::ArbiterOnly => "arbiter",
            Config::Generated => "a",
            Config::GeneratedOneWriter => "a1",
            Config::ExamplesOnly => "examples",
            Config::ExamplesGenerated => "b",
            Config::FiveGenerated => "c",
            Config::FiveStaggered => "c-staggered",
            Config::FiveStop => "c-stop",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Config::ArbiterOnly => "arbiter only (no tests)",
            Config::Generated => "(a) no caller tests, generated checks (default settings)",
            Config::GeneratedOneWriter => "(a1) as (a), one test writer",
            Config::ExamplesOnly => "docstring examples as the only tests",
            Config::ExamplesGenerated => "(b) docstring examples + generated checks",
            Config::FiveGenerated => "(c) five candidates, two correct variants, generated checks",
            Config::FiveStaggered => {
                "(c), the models answering after 100, 300, 500, 700, 900 ms, full fan-out"
            }
            Config::FiveStop => "(c), the same latencies, options.fanout.stop_when_passing",
        }
    }

    /// `WRIT_TEST_MODELS`: unset (the default writers) but in the one-writer configuration.
    fn writers(self) -> Option<&'static str> {
        (self == Config::GeneratedOneWriter).then_some(WRITER)
    }

    fn models(self) -> usize {
        match self {
            Config::FiveGenerated | Config::FiveStaggered | Config::FiveStop => 5,
            _ => 3,
        }
    }

    /// Candidate model `k`'s latency, in milliseconds, where the configuration sets one.
    fn latency_ms(self, k: usize) -> Option<u64> {
        matches!(self, Config::FiveStaggered | Config::FiveStop).then_some(100 + 200 * k as u64)
    }

    fn validation(self, task: &CheckTask) -> Option<Value> {
        let examples = || json!([{"name": if task.lang == Lang::Python { "python" } else { "node" }, "args": [task.examples_test_path()]}]);
        match self {
            Config::ArbiterOnly => None,
            Config::Generated
            | Config::GeneratedOneWriter
            | Config::FiveGenerated
            | Config::FiveStaggered
            | Config::FiveStop => Some(json!({"generate": true})),
            Config::ExamplesOnly => Some(
                json!({"commands": examples(), "timeout_secs": TIMEOUT_SECS, "repair_rounds": 0, "on_fail": "write_best"}),
            ),
            Config::ExamplesGenerated => Some(
                json!({"commands": examples(), "timeout_secs": TIMEOUT_SECS, "repair_rounds": 0, "on_fail": "write_best", "generate": true}),
            ),
        }
    }

    /// What each model answers: one correct version at a position moving with the task, the
    /// others wrong (five models: a second correct version, with other names and a comment).
    fn candidates(self, task: &CheckTask, index: usize) -> Vec<String> {
        let n = self.models();
        let p = index % n;
        let mut wrong = task.wrong.iter().cycle();
        let mut out = Vec::new();
        for k in 0..n {
            if k == p {
                out.push(task.correct.clone());
            } else if n == 5 && k == (p + 2) % n {
                out.push(variant(&task.correct, task.lang));
            } else {
                out.push(wrong.next().cloned().unwrap_or_default());
            }
        }
        out
    }
}

/// The correct version in other words: a leading comment and blank lines, the same behaviour.
fn variant(code: &str, lang: Lang) -> String {
    let comment = match lang {
        Lang::Python => "# Written to the description.\n",
        Lang::JavaScript => "// Written to the description.\n",
    };
    format!("{comment}{}\n", code.replace("\n\n", "\n\n\n"))
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub config: Config,
    pub task: String,
    pub lang: Lang,
    pub tests: &'static str,
    pub correct: bool,
    pub latency: Duration,
    pub selection: String,
    pub calls: usize,
    pub tokens: u64,
}

pub struct Options {
    pub bin_dir: PathBuf,
    pub tasks_dir: PathBuf,
    pub functions: PathBuf,
    pub only: Vec<String>,
    /// Only these configurations (by [`Config::key`]); all when empty.
    pub configs: Vec<String>,
    pub latency_ms: u64,
    pub answers_dir: Option<PathBuf>,
}

pub fn default_functions() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("eval/checks/functions.toml")
}

/// Runs every configuration over the task set.
pub async fn run(opts: &Options) -> anyhow::Result<(Vec<CheckTask>, Vec<Outcome>)> {
    let mut set = load(&opts.tasks_dir, &opts.functions).await?;
    if !opts.only.is_empty() {
        set.retain(|t| opts.only.contains(&t.id));
    }
    let (fake, client) = super::fake_and_client(&opts.bin_dir).await?;
    let mut outcomes = Vec::new();
    for config in Config::ALL.into_iter().chain(Config::STAGGERED) {
        let named = opts.configs.iter().any(|c| c == config.key());
        if !named && (!opts.configs.is_empty() || Config::STAGGERED.contains(&config)) {
            continue;
        }
        let writers: Vec<(&str, &str)> = config
            .writers()
            .map(|w| ("WRIT_TEST_MODELS", w))
            .into_iter()
            .collect();
        let (_db_dir, writ) = super::start_writ(
            &opts.bin_dir,
            &fake,
            &MODELS[..config.models()],
            COMMANDS,
            &writers,
        )
        .await?;
        std::fs::create_dir_all(writ.repo_dir().join("tests"))?;
        for task in &set {
            std::fs::write(
                writ.repo_dir().join(task.examples_test_path()),
                task.examples_test(),
            )?;
        }
        for (index, task) in set.iter().enumerate() {
            let o = run_one(&client, &fake, &writ, config, index, task, opts)
                .await
                .with_context(|| format!("task {} in {config:?}", task.id))?;
            outcomes.push(o);
        }
        writ.stop().await;
    }
    Ok((set, outcomes))
}

async fn run_one(
    client: &reqwest::Client,
    fake: &Fake,
    writ: &Writ,
    config: Config,
    index: usize,
    task: &CheckTask,
    opts: &Options,
) -> anyhow::Result<Outcome> {
    let _ = std::fs::remove_file(writ.repo_dir().join(&task.path));
    let latency = (opts.latency_ms > 0).then(|| json!({"kind": "fixed", "ms": opts.latency_ms}));
    let lang = task.lang.name();
    let route = |model: &str, prompt: String, code: &str| {
        let mut s = json!({"then": {"kind": "code", "lang": lang, "code": code}});
        if let Some(l) = &latency {
            s["latency"] = l.clone();
        }
        json!({"model": model, "prompt_contains": prompt, "script": s})
    };
    let mut routes = Vec::new();
    for (k, (model, code)) in MODELS
        .iter()
        .zip(config.candidates(task, index))
        .enumerate()
    {
        let mut r = route(model, format!("Write the file {}", json!(task.path)), &code);
        if let Some(ms) = config.latency_ms(k) {
            r["script"]["latency"] = json!({"kind": "fixed", "ms": ms});
        }
        routes.push(r);
    }
    // The default writers are the arbiter and the first candidate model; each errs at its own
    // places. The one-writer configuration's writer errs as the arbiter does.
    let (tests, kind) = task.written_tests(index, 0);
    let (tests_2, _) = task.written_tests(index, 1);
    for (writer, text) in [(ARBITER, &tests), (MODELS[0], &tests_2), (WRITER, &tests)] {
        routes.push(route(
            writer,
            format!("Write tests for the file {}", json!(task.path)),
            text,
        ));
    }
    for r in routes {
        fake.route(client, &r).await?;
    }
    fake.forget_calls(client).await;
    let description = match config {
        Config::ExamplesOnly | Config::ExamplesGenerated => task.description_with_examples(),
        _ => task.description.clone(),
    };
    let mut body = json!({"command": "write_codebase", "files": [{"filename": task.path, "code_description": description}]});
    if let Some(v) = config.validation(task) {
        body["options"] = json!({"validation": v});
    }
    if config == Config::FiveStop {
        body["options"]["fanout"] = json!({"stop_when_passing": true});
    }
    let name = format!("checks-{config:?}-{}.json", task.id).to_lowercase();
    let (answer, latency) = super::post_batch(
        client,
        &writ.base_url,
        &body,
        opts.answers_dir.as_deref(),
        &name,
    )
    .await?;
    let calls: Vec<Value> = fake.calls(client).await?;
    let result = &answer["results"][0];
    let mut tokens = 0u64;
    for c in result["candidates"].as_array().into_iter().flatten() {
        tokens +=
            c["prompt_tokens"].as_u64().unwrap_or(0) + c["completion_tokens"].as_u64().unwrap_or(0);
    }
    for w in result["validation"]["generated_checks"]["writers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        tokens +=
            w["prompt_tokens"].as_u64().unwrap_or(0) + w["completion_tokens"].as_u64().unwrap_or(0);
    }
    // The arbiter's verdicts are not in the answer: counted from the fake's record (its test
    // files are, with the writers').
    for c in calls.iter().filter(|c| c["model"] == ARBITER) {
        let texts: Vec<&str> = c["body"]["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_str())
            .collect();
        if texts.iter().any(|t| t.contains("Write tests for the file")) {
            continue;
        }
        let prompt: usize = texts.iter().map(|s| s.chars().count()).sum();
        tokens += (prompt / 4 + 1) as u64 + 20;
    }
    let selection = if result["success"] == true {
        result["selection"].as_str().unwrap_or("?").to_string()
    } else {
        "failed".into()
    };
    let correct = std::fs::read_to_string(writ.repo_dir().join(&task.path)).is_ok_and(|written| {
        normalise(&written) == normalise(&task.correct)
            || (config.models() == 5
                && normalise(&written) == normalise(&variant(&task.correct, task.lang)))
    });
    Ok(Outcome {
        config,
        task: task.id.clone(),
        lang: task.lang,
        tests: kind,
        correct,
        latency,
        selection,
        calls: calls.len(),
        tokens,
    })
}

fn rate(hits: usize, n: usize) -> String {
    if n == 0 {
        return "—".into();
    }
    format!("{hits}/{n} = {:.1}%", 100.0 * hits as f64 / n as f64)
}

/// The table, in Markdown.
pub fn report(set: &[CheckTask], outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let py = set.iter().filter(|t| t.lang == Lang::Python).count();
    let js = set.len() - py;
    let _ = writeln!(
        out,
        "Task set: {} single-file tasks ({py} Python, {js} JavaScript). Test writer per task: {} normal (about a quarter of the assertions wrong), {} not discriminating, {} unusable.\n",
        set.len(),
        (0..set.len()).filter(|i| !matches!(i % 10, 3 | 7)).count(),
        (0..set.len()).filter(|i| i % 10 == 7).count(),
        (0..set.len()).filter(|i| i % 10 == 3).count(),
    );
    out.push_str("| configuration | correct file written | Python | JavaScript | mean batch latency | model calls / batch | tokens / batch | selection methods |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for config in Config::ALL.into_iter().chain(Config::STAGGERED) {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == config).collect();
        if of.is_empty() {
            continue;
        }
        let hits = |f: &dyn Fn(&&Outcome) -> bool| {
            let sel: Vec<&&Outcome> = of.iter().filter(|o| f(o)).collect();
            rate(sel.iter().filter(|o| o.correct).count(), sel.len())
        };
        let n = of.len() as u32;
        let latency = of.iter().map(|o| o.latency).sum::<Duration>() / n;
        let calls = of.iter().map(|o| o.calls).sum::<usize>() as f64 / f64::from(n);
        let tokens = of.iter().map(|o| o.tokens).sum::<u64>() as f64 / f64::from(n);
        let mut methods: std::collections::BTreeMap<&str, usize> = Default::default();
        for o in &of {
            *methods.entry(o.selection.as_str()).or_default() += 1;
        }
        let methods = methods
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | **{}** | {} | {} | {} ms | {calls:.1} | {tokens:.0} | {methods} |",
            config.label(),
            hits(&|_| true),
            hits(&|o| o.lang == Lang::Python),
            hits(&|o| o.lang == Lang::JavaScript),
            latency.as_millis(),
        );
    }
    out.push('\n');
    for config in [
        Config::Generated,
        Config::GeneratedOneWriter,
        Config::ExamplesGenerated,
    ] {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == config).collect();
        if of.is_empty() {
            continue;
        }
        let pct = 100.0 * of.iter().filter(|o| o.correct).count() as f64 / of.len() as f64;
        let _ = writeln!(
            out,
            "- target for {}: ≥ 85% — {pct:.1}%: **{}**",
            config.label(),
            if pct >= 85.0 { "met" } else { "not met" }
        );
    }
    for kind in ["normal", "weak", "unusable"] {
        let of: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.config == Config::Generated && o.tests == kind)
            .collect();
        if !of.is_empty() {
            let _ = writeln!(
                out,
                "- (a) by what the arbiter wrote as tests (the first candidate model errs elsewhere): {kind} tests — {}",
                rate(of.iter().filter(|o| o.correct).count(), of.len())
            );
        }
    }
    let base = |c: Config| {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.config == c).collect();
        let n = of.len().max(1) as f64;
        (
            of.iter()
                .map(|o| o.latency.as_secs_f64() * 1000.0)
                .sum::<f64>()
                / n,
            of.iter().map(|o| o.calls).sum::<usize>() as f64 / n,
            of.iter().map(|o| o.tokens).sum::<u64>() as f64 / n,
        )
    };
    let ran = |c: Config| outcomes.iter().any(|o| o.config == c);
    if !(ran(Config::ArbiterOnly) && ran(Config::Generated)) {
        // A run of some configurations only (`--configs`) has nothing to compare.
        return out;
    }
    let (l0, c0, t0) = base(Config::ArbiterOnly);
    let (l1, c1, t1) = base(Config::Generated);
    let _ = writeln!(
        out,
        "- what generated checks add per batch, (a) against the arbiter alone: {:+.0} ms, {:+.1} model calls, {:+.0} tokens",
        l1 - l0,
        c1 - c0,
        t1 - t0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_flip_one_operator_at_a_time() {
        let m = mutants("if x <= 1 and y > 0:\n    return x + 1\n");
        assert!(m.contains(&"if x < 1 and y > 0:\n    return x + 1\n".to_string()));
        assert!(m.contains(&"if x <= 1 or y > 0:\n    return x + 1\n".to_string()));
        assert!(m.contains(&"if x <= 1 and y > 0:\n    return x\n".to_string()));
        assert!(m.iter().all(|v| v.lines().count() == 2));
        assert_eq!(camel("count_in_range"), "countInRange");
        assert_eq!(
            literal(&json!([true, null, "a"]), Lang::Python),
            r#"[True, None, "a"]"#
        );
    }
}
