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

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

mod run;
mod set;

pub use run::{report, run};
pub use set::load;

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
