//! What a passing check must show besides exit 0.
//!
//! A candidate runs inside the process of the tests that import it, so exit 0 alone proves
//! little: `os._exit(0)` at import time, `sys.exit(0)` in a module-level `atexit`, a test
//! collection that found nothing all exit 0 with no test run. A check passes only when its output
//! also shows the runner's own report of at least one passing test and no failure. writ knows the
//! reports of the common runners from the command's argv ([`Evidence::detect`]); a named command
//! can declare its own pattern instead (`WRIT_COMMANDS`: `{"argv": [...], "evidence": "..."}`).
//! A command that is no known runner and declares nothing passes on exit 0, as before.

use regex::Regex;

/// A pass's required evidence.
#[derive(Debug, Clone)]
pub enum Evidence {
    /// pytest's summary: `N passed` (N ≥ 1), no `N failed`, no `N error(s)`.
    Pytest,
    /// unittest's `Ran N tests` (N ≥ 1) and its closing `OK`.
    Unittest,
    /// `cargo test`'s `test result: ok. N passed` (N ≥ 1 in all), no `test result: FAILED`.
    CargoTest,
    /// `go test`'s `ok <package>` or `PASS` (not `[no tests to run]`), no `FAIL`.
    GoTest,
    /// node's test runner: `# pass N` (N ≥ 1) and `# fail 0` (TAP), or `ℹ pass N` / `ℹ fail 0`.
    NodeTest,
    /// The operator's own pattern (multi-line: `^` and `$` match at line ends). When it has a
    /// group named `count`, that number must be at least 1.
    Pattern(Regex),
}

impl PartialEq for Evidence {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Evidence::Pattern(a), Evidence::Pattern(b)) => a.as_str() == b.as_str(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for Evidence {}

/// Longest pattern an operator may declare.
const MAX_PATTERN_BYTES: usize = 1024;

impl Evidence {
    /// The operator's pattern, compiled; the error says why it is refused.
    pub fn pattern(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() || raw.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "evidence must be a regular expression of 1 to {MAX_PATTERN_BYTES} bytes"
            ));
        }
        regex::RegexBuilder::new(raw)
            .multi_line(true)
            .size_limit(1 << 20)
            .build()
            .map(Evidence::Pattern)
            .map_err(|e| format!("evidence is not a valid regular expression: {e}"))
    }

    /// The runner a command template names, if writ knows its report.
    pub fn detect(argv: &[String]) -> Option<Self> {
        let base = |a: &String| a.rsplit('/').next().unwrap_or(a).to_owned();
        let names: Vec<String> = argv.iter().map(base).collect();
        let has = |w: &str| names.iter().any(|n| n == w);
        let module = |m: &str| argv.windows(2).any(|w| w[0] == "-m" && w[1] == m);
        let program = names.first().map(String::as_str).unwrap_or_default();
        if module("pytest") || program == "pytest" || program == "py.test" {
            Some(Evidence::Pytest)
        } else if module("unittest") {
            Some(Evidence::Unittest)
        } else if program == "cargo" && has("test") {
            Some(Evidence::CargoTest)
        } else if program == "go" && has("test") {
            Some(Evidence::GoTest)
        } else if program == "node" && has("--test") {
            Some(Evidence::NodeTest)
        } else {
            None
        }
    }

    /// What a pass must show, in words for the caller and for a model repairing its candidate.
    pub fn describe(&self) -> String {
        match self {
            Evidence::Pytest => "pytest's `N passed` (N ≥ 1) with no failures or errors".into(),
            Evidence::Unittest => "unittest's `Ran N tests` (N ≥ 1) and `OK`".into(),
            Evidence::CargoTest => "cargo test's `test result: ok. N passed` (N ≥ 1)".into(),
            Evidence::GoTest => "go test's `ok` or `PASS` with no `FAIL`".into(),
            Evidence::NodeTest => "node's test runner's `pass N` (N ≥ 1) and `fail 0`".into(),
            Evidence::Pattern(re) => format!("output matching `{}`", re.as_str()),
        }
    }

    /// `Ok` when `output` (stdout and stderr) shows a pass; otherwise why not.
    pub fn check(&self, output: &str) -> Result<(), String> {
        let shown = match self {
            Evidence::Pytest => {
                let passed = sum(r"(?m)\b(\d+) passed\b", output);
                let failed = sum(r"(?m)\b(\d+) (?:failed|errors?)\b", output);
                passed >= 1 && failed == 0
            }
            Evidence::Unittest => {
                sum(r"(?m)^Ran (\d+) tests? in ", output) >= 1
                    && found(r"(?m)^OK(?: \(.*\))?\s*$", output)
            }
            Evidence::CargoTest => {
                sum(r"(?m)^test result: ok\. (\d+) passed", output) >= 1
                    && !found(r"(?m)^test result: FAILED", output)
            }
            Evidence::GoTest => {
                let ok = output.lines().any(|l| {
                    (l.starts_with("ok ") || l.starts_with("ok\t") || l.trim_end() == "PASS")
                        && !l.contains("[no tests to run]")
                });
                ok && !found(r"(?m)^(?:FAIL|--- FAIL)", output)
            }
            Evidence::NodeTest => {
                sum(r"(?m)^(?:#|ℹ) pass (\d+)\s*$", output) >= 1
                    && found(r"(?m)^(?:#|ℹ) fail 0\s*$", output)
                    && !found(r"(?m)^(?:#|ℹ) fail [1-9]", output)
            }
            Evidence::Pattern(re) => match re.captures(output) {
                None => false,
                Some(caps) => caps
                    .name("count")
                    .is_none_or(|n| n.as_str().parse::<u64>().is_ok_and(|n| n >= 1)),
            },
        };
        if shown {
            Ok(())
        } else {
            Err(format!(
                "the command exited 0 but its output does not show a pass: expected {}",
                self.describe()
            ))
        }
    }
}

/// The sum of every match's first group as a number (0 when none).
fn sum(pattern: &str, text: &str) -> u64 {
    match Regex::new(pattern) {
        Ok(re) => re
            .captures_iter(text)
            .filter_map(|c| c.get(1)?.as_str().parse::<u64>().ok())
            .fold(0, u64::saturating_add),
        Err(_) => 0,
    }
}

fn found(pattern: &str, text: &str) -> bool {
    Regex::new(pattern).is_ok_and(|re| re.is_match(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_common_runners_are_recognised_from_their_argv() {
        let cases: &[(&[&str], Option<Evidence>)] = &[
            (
                &["python3", "-m", "pytest", "-q", "{args}"],
                Some(Evidence::Pytest),
            ),
            (&["/opt/venv/bin/pytest", "{args}"], Some(Evidence::Pytest)),
            (
                &["python3", "-m", "unittest", "{args}"],
                Some(Evidence::Unittest),
            ),
            (&["cargo", "test", "--offline"], Some(Evidence::CargoTest)),
            (&["/usr/bin/go", "test", "./..."], Some(Evidence::GoTest)),
            (&["node", "--test", "{args}"], Some(Evidence::NodeTest)),
            (&["python3", "{args}"], None),
            (&["node", "{args}"], None),
            (&["cargo", "build"], None),
        ];
        for (template, expected) in cases {
            assert_eq!(&Evidence::detect(&argv(template)), expected, "{template:?}");
        }
    }

    #[test]
    fn a_runner_passes_only_with_its_report_of_a_passing_test() {
        let cases: &[(Evidence, &str, bool)] = &[
            (Evidence::Pytest, "..\n2 passed in 0.01s\n", true),
            (Evidence::Pytest, "", false),
            (Evidence::Pytest, "no tests ran in 0.01s\n", false),
            (Evidence::Pytest, "1 failed, 1 passed in 0.02s\n", false),
            (Evidence::Pytest, "1 passed, 1 error in 0.02s\n", false),
            (Evidence::Pytest, "0 passed\n", false),
            (
                Evidence::Unittest,
                "----\nRan 3 tests in 0.001s\n\nOK\n",
                true,
            ),
            (
                Evidence::Unittest,
                "Ran 1 test in 0.001s\n\nOK (skipped=1)\n",
                true,
            ),
            (Evidence::Unittest, "Ran 0 tests in 0.000s\n\nOK\n", false),
            (
                Evidence::Unittest,
                "Ran 2 tests in 0.1s\n\nFAILED (failures=1)\n",
                false,
            ),
            (
                Evidence::CargoTest,
                "test result: ok. 0 passed; 0 failed\ntest result: ok. 4 passed; 0 failed\n",
                true,
            ),
            (
                Evidence::CargoTest,
                "test result: ok. 0 passed; 0 failed\n",
                false,
            ),
            (
                Evidence::CargoTest,
                "test result: ok. 2 passed\ntest result: FAILED. 1 passed; 1 failed\n",
                false,
            ),
            (Evidence::GoTest, "ok  \texample.com/m\t0.01s\n", true),
            (Evidence::GoTest, "PASS\n", true),
            (
                Evidence::GoTest,
                "ok  \tm\t0.01s [no tests to run]\n",
                false,
            ),
            (
                Evidence::GoTest,
                "--- FAIL: TestX\nFAIL\nok  \tother\n",
                false,
            ),
            (Evidence::NodeTest, "# tests 1\n# pass 1\n# fail 0\n", true),
            (Evidence::NodeTest, "ℹ tests 2\nℹ pass 2\nℹ fail 0\n", true),
            (Evidence::NodeTest, "# tests 0\n# pass 0\n# fail 0\n", false),
            (Evidence::NodeTest, "# pass 1\n# fail 1\n", false),
        ];
        for (evidence, output, pass) in cases {
            assert_eq!(
                evidence.check(output).is_ok(),
                *pass,
                "{evidence:?} on {output:?}"
            );
        }
        let why = Evidence::Pytest.check("").unwrap_err();
        assert!(
            why.contains("exited 0") && why.contains("N passed"),
            "{why}"
        );
    }

    #[test]
    fn a_declared_pattern_is_matched_line_by_line_and_its_count_must_be_positive() {
        let e = Evidence::pattern(r"^checked (?<count>\d+) files$").unwrap();
        assert!(e.check("start\nchecked 3 files\n").is_ok());
        assert!(e.check("checked 0 files\n").is_err());
        assert!(e.check("nothing\n").is_err());
        let plain = Evidence::pattern("ALL GOOD").unwrap();
        assert!(plain.check("x\nALL GOOD\n").is_ok());
        assert!(Evidence::pattern("(").unwrap_err().contains("not a valid"));
        assert!(Evidence::pattern(" ").is_err());
    }
}
