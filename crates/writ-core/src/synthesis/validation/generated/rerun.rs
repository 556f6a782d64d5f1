//! Generated tests run again, later: the tests a batch kept for a file (its operation record's
//! `detail.generated_checks`) run over the file as it is now, in the sandbox, with the same
//! harness. A branch rebased onto new work asks whether what the tests checked still holds.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::flavour::{flavour, harness_command};
use super::harness::Suite;
use crate::audit::GeneratedChecks;
use crate::execution::CommandRunner;
use crate::path::RepoPath;

/// The kept generated tests of one file, run again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GeneratedRerun {
    /// The kept tests (`path::name`) the file passed when it was written, each run again.
    pub tests: usize,
    /// Kept tests the file already failed when it was written (their expected value was
    /// doubted then): run, but not counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_when_written: usize,
    /// How many of them pass now.
    pub tests_passed: usize,
    /// Those that do not, each with the first line of its error (`not run`: the harness
    /// reported nothing for it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedTest>,
    /// Why the tests could not run at all, when they could not (then `tests_passed` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

impl GeneratedRerun {
    /// Every kept test passed.
    pub fn all_passed(&self) -> bool {
        self.not_run.is_none() && self.failed.is_empty() && self.tests_passed == self.tests
    }

    /// The tests could not run at all, for `why`.
    pub fn not_run(tests: usize, why: String) -> Self {
        GeneratedRerun {
            tests,
            not_run: Some(why),
            ..GeneratedRerun::default()
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A kept generated test that does not pass any more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailedTest {
    pub test: String,
    pub error: String,
}

/// Runs `kept`'s kept tests of `subject` over the workspace `runner` copies, with the harness
/// command `check_commands` names for its language (`WRIT_CHECK_COMMANDS`); those in
/// `failed_when_written` (the written file's own failures, by id) are not counted. `None` when
/// no kept test passed when the file was written.
pub async fn rerun_generated(
    runner: &dyn CommandRunner,
    check_commands: &[(String, String)],
    subject: &RepoPath,
    kept: &GeneratedChecks,
    failed_when_written: &[String],
    timeout: Duration,
) -> Option<GeneratedRerun> {
    let counted: Vec<&String> = kept
        .tests
        .iter()
        .filter(|t| !failed_when_written.contains(t))
        .collect();
    if counted.is_empty() {
        return None;
    }
    let count = counted.len();
    let language = writ_checks::Language::from_path(subject.as_str());
    let Some(flavour) = flavour(language) else {
        return Some(GeneratedRerun::not_run(
            count,
            format!("no generated checks run for {} files", language.name()),
        ));
    };
    let command = match harness_command(check_commands, runner, &flavour) {
        Ok(command) => command,
        Err(why) => return Some(GeneratedRerun::not_run(count, why)),
    };
    // Only the files that hold a kept test run; each as it ran when the file was chosen.
    let files: Vec<(String, String)> = kept
        .files
        .iter()
        .filter(|f| {
            kept.tests
                .iter()
                .any(|t| t.split("::").next() == Some(f.path.as_str()))
        })
        .map(|f| (f.path.clone(), f.content.clone()))
        .collect();
    let probes: BTreeMap<String, Vec<String>> =
        files.iter().map(|(p, _)| (p.clone(), Vec::new())).collect();
    let suite = match Suite::staged(&flavour, subject, command, files, Vec::new(), probes, &[]) {
        Ok(suite) => suite,
        Err(why) => return Some(GeneratedRerun::not_run(count, why)),
    };
    let (report, _, error) = suite.run_over(runner, timeout, None).await;
    if let Some(why) = error {
        return Some(GeneratedRerun::not_run(count, why));
    }
    let mut rerun = GeneratedRerun {
        tests: count,
        failed_when_written: kept.tests.len() - count,
        ..GeneratedRerun::default()
    };
    for test in counted {
        match report.outcome(test) {
            Some((outcome, _)) if outcome == "passed" => rerun.tests_passed += 1,
            Some((_, error)) => rerun.failed.push(FailedTest {
                test: test.clone(),
                error: error.lines().next().unwrap_or("failed").to_owned(),
            }),
            None => rerun.failed.push(FailedTest {
                test: test.clone(),
                error: "not run".to_owned(),
            }),
        }
    }
    Some(rerun)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::audit::GeneratedTestFile;
    use crate::execution::{CommandCall, RunError, RunLimits, RunOutcome};

    /// Answers every run with a fixed stdout, keeping what it was given: the harness's report
    /// format is the unit under test here, the real sandbox is the API tests'.
    struct Scripted {
        stdout: Box<dyn Fn(&str) -> String + Send + Sync>,
        staged: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl CommandRunner for Scripted {
        fn check(&self, _: &CommandCall, _: &str) -> Result<(), RunError> {
            Ok(())
        }
        fn limits(&self) -> RunLimits {
            RunLimits {
                max_timeout: Duration::from_secs(60),
                max_repair_rounds: 1,
            }
        }
        async fn run(
            &self,
            staged: &[(RepoPath, Vec<u8>)],
            _: &[CommandCall],
            _: Duration,
        ) -> Result<Vec<RunOutcome>, RunError> {
            let plan = staged
                .iter()
                .find(|(p, _)| p.as_str().ends_with("plan.json"))
                .map(|(_, c)| String::from_utf8_lossy(c).into_owned())
                .unwrap_or_default();
            let marker = serde_json::from_str::<serde_json::Value>(&plan).unwrap()["marker"]
                .as_str()
                .unwrap()
                .to_owned();
            *self.staged.lock().unwrap() = staged.iter().map(|(p, _)| p.to_string()).collect();
            Ok(vec![RunOutcome {
                exit_code: Some(0),
                stdout: (self.stdout)(&marker),
                stderr: String::new(),
                duration_ms: 1,
                timed_out: false,
                truncated: false,
                missing_evidence: None,
                limit_reached: None,
            }])
        }
    }

    fn kept() -> GeneratedChecks {
        GeneratedChecks {
            files: vec![
                GeneratedTestFile {
                    path: ".writ-checks/test_calc_0.py".into(),
                    model: "a".into(),
                    content: "def test_add(): pass\ndef test_sub(): pass\n".into(),
                },
                GeneratedTestFile {
                    path: ".writ-checks/test_calc_1.py".into(),
                    model: "b".into(),
                    content: "def test_all_dropped(): pass\n".into(),
                },
            ],
            tests: vec![
                ".writ-checks/test_calc_0.py::test_add".into(),
                ".writ-checks/test_calc_0.py::test_sub".into(),
            ],
            ..GeneratedChecks::default()
        }
    }

    /// `kept()`'s tests of calc.py run again, `doubted` not counted.
    async fn run_again(runner: &Scripted, doubted: &[String]) -> GeneratedRerun {
        let subject = RepoPath::parse("calc.py").unwrap();
        rerun_generated(
            runner,
            &commands(),
            &subject,
            &kept(),
            doubted,
            Duration::from_secs(5),
        )
        .await
        .unwrap()
    }

    fn commands() -> Vec<(String, String)> {
        vec![("python".into(), "pytest".into())]
    }

    #[tokio::test]
    async fn the_kept_tests_are_counted_by_what_the_harness_reports_of_each() {
        let runner = Scripted {
            stdout: Box::new(|m| {
                format!(
                    "noise\n{m} {{\"test\": \".writ-checks/test_calc_0.py::test_add\", \"outcome\": \"passed\"}}\n{m} {{\"test\": \".writ-checks/test_calc_0.py::test_sub\", \"outcome\": \"failed\", \"error\": \"AssertionError: 1 != 2\\nmore\"}}\n"
                )
            }),
            staged: Mutex::default(),
        };
        let rerun = run_again(&runner, &[]).await;
        assert_eq!((rerun.tests, rerun.tests_passed), (2, 1));
        assert_eq!(
            rerun.failed,
            vec![FailedTest {
                test: ".writ-checks/test_calc_0.py::test_sub".into(),
                error: "AssertionError: 1 != 2".into()
            }]
        );
        assert!(!rerun.all_passed());
        // A test the file failed when it was written does not count against it now.
        let doubted = [".writ-checks/test_calc_0.py::test_sub".to_string()];
        let rerun = run_again(&runner, &doubted).await;
        assert_eq!(
            (rerun.tests, rerun.tests_passed, rerun.failed_when_written),
            (1, 1, 1)
        );
        assert!(rerun.all_passed());
        // The file under test is the workspace's own: only the harness, plan and the test
        // file holding kept tests are staged.
        let staged = runner.staged.lock().unwrap().clone();
        assert!(staged.contains(&".writ-checks/test_calc_0.py".to_string()));
        assert!(
            !staged
                .iter()
                .any(|p| p == "calc.py" || p.ends_with("_1.py"))
        );
    }

    #[tokio::test]
    async fn a_test_the_harness_says_nothing_of_fails_and_no_kept_test_means_no_rerun() {
        let runner = Scripted {
            stdout: Box::new(|_| String::new()),
            staged: Mutex::default(),
        };
        let subject = RepoPath::parse("calc.py").unwrap();
        let rerun = run_again(&runner, &[]).await;
        assert_eq!(rerun.tests_passed, 0);
        assert!(rerun.failed.iter().all(|f| f.error == "not run"));
        assert!(
            rerun_generated(
                &runner,
                &commands(),
                &subject,
                &GeneratedChecks::default(),
                &[],
                Duration::from_secs(5)
            )
            .await
            .is_none()
        );
        let none = rerun_generated(&runner, &[], &subject, &kept(), &[], Duration::from_secs(5))
            .await
            .unwrap();
        assert!(none.not_run.unwrap().contains("WRIT_CHECK_COMMANDS"));
    }
}
