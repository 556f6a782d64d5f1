//! The generated checks end to end on one file: real test files run by the real harness with
//! the machine's `python3`, scripted test writers and arbiter.

use writ_checks::Language;

use super::harness::{parse_report, tabulate};
use super::*;
use crate::audit::Selection;
use crate::execution::CommandCall;
use crate::synthesis::validation::agreement::TestOutcome;

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
    fn check(&self, _call: &CommandCall, _field: &str) -> Result<(), crate::execution::RunError> {
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
    use crate::synthesis::generation::Generated;
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::stage::SynthesisConfig;

    let batch = doubles::batch(&["clamp.py"]);
    let present = doubles::present(&batch);
    let cx = FileCx {
        batch: &batch,
        batch_file: &present.files[0],
        present: &present,
        sink: &NoProgress,
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
        batch_file: &present.files[0],
        generated: Generated {
            language: Language::Python,
            models: names.iter().map(|m| m.to_string()).collect(),
            messages: Vec::new(),
            answers: Vec::new(),
            existing: None,
            allow_removals: false,
            rounds: Default::default(),
        },
        early: None,
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
    let (checked, _, judged) = decide_among(&[SWAPPED, CORRECT, LAX], 2, tests, Vec::new()).await;
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
    let (checked, prompt, judged) = decide_with(&[SWAPPED, CORRECT, LAX], tests, Vec::new()).await;
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
    // The writer imports a helper module that does not exist: no test runs, but its calls are
    // inputs from the description. Every candidate behaves differently; CORRECT's outputs are
    // the ones the others share most, input by input.
    let tests = "from clamp import clamp\nfrom clamp_helpers import approx\n\ndef test_a():\n    assert clamp(5, 0, 10) == 5\n\ndef test_b():\n    assert clamp(11, 0, 10) == 10\n\ndef test_c():\n    assert clamp(-1, 0, 10) == 0\n\ndef test_d():\n    assert clamp(1, 5, 2) == 0\n";
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
async fn a_test_file_importing_the_file_under_another_module_name_runs_against_the_candidates() {
    // `from solution import clamp`: the writer's usual name for the module under test.
    let tests = "from solution import clamp\n\ndef test_a():\n    assert clamp(5, 0, 10) == 5\n\ndef test_b():\n    assert clamp(11, 0, 10) == 10\n\ndef test_c():\n    assert clamp(-1, 0, 10) == 0\n";
    let (checked, _, judged) = decide_with(&[SWAPPED, CORRECT, LAX], tests, Vec::new()).await;
    assert_eq!(checked.summary.tests.len(), 3, "{:?}", checked.summary);
    assert_eq!(
        checked.summary.adjusted,
        [
            ".writ-checks/test_clamp_0.py: it imported the file under test as `solution`: pointed at `clamp`"
        ]
    );
    let decision = checked.decision.expect("the tests decide");
    assert_eq!(
        checked.summary.status,
        crate::audit::GeneratedChecksStatus::Decided
    );
    assert_ne!(decision.trial, 0, "the swapped bounds fail two tests");
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
