//! Formatting: the project's formatter for a code file's language (`WRIT_FORMATTERS`) runs on
//! the chosen candidate before it is written, so what lands passes the project's format check
//! (the most common CI failure of agent-written code).
//!
//! The formatter is a configured command (`WRIT_COMMANDS`) given the file's path; it runs in the
//! sandbox on a scratch copy of `REPO_DIR` with the candidate staged at that path, like every
//! other check, and prints the formatted file on its stdout. Model output is untrusted: nothing
//! runs on `REPO_DIR` itself, and the formatter's output replaces the candidate only when it is
//! whole — a formatter that fails, times out, is cut at the output bound, prints nothing, or
//! prints code that no longer parses leaves the candidate as it was, and the answer says why.

use std::time::Duration;

use writ_checks::Language;

use crate::execution::{CommandCall, CommandRunner, RunError, RunOutcome, tail};
use crate::path::RepoPath;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::response::Formatted;
use crate::synthesis::stage::{Content, Produced};

/// Bytes of a failing formatter's stderr kept in the answer.
const ERROR_TAIL_BYTES: usize = 300;

/// What the formatting stage needs: where to run, what, and for how long.
pub(crate) struct Formatter<'a> {
    pub runner: &'a dyn CommandRunner,
    /// The configured command's name.
    pub command: &'a str,
    pub timeout: Duration,
}

/// `produced` with its chosen code formatted, and the attempt recorded on it; anything else
/// (a failure, an image) passes through.
pub(crate) async fn format_chosen(
    formatter: Formatter<'_>,
    path: &RepoPath,
    language: Language,
    sink: &dyn ProgressSink,
    mut produced: Produced,
) -> Produced {
    let Ok(chosen) = produced.chosen.as_mut() else {
        return produced;
    };
    let Content::Code(code) = &chosen.content else {
        return produced;
    };
    let staged = [(path.clone(), code.as_bytes().to_vec())];
    let call = CommandCall {
        name: formatter.command.to_string(),
        args: vec![path.to_string()],
    };
    let outcome = formatter
        .runner
        .run(&staged, std::slice::from_ref(&call), formatter.timeout)
        .await;
    let (formatted, record) = match formatted_output(code, language, formatter.timeout, outcome) {
        Ok(out) => {
            let changed = out != *code;
            (
                Some(out),
                Formatted {
                    command: call.name,
                    changed,
                    error: None,
                },
            )
        }
        Err(why) => (
            None,
            Formatted {
                command: call.name,
                changed: false,
                error: Some(why),
            },
        ),
    };
    sink.emit(Event::Formatted {
        file: path.to_string(),
        command: record.command.clone(),
        changed: record.changed,
        error: record.error.clone(),
    });
    if let Some(out) = formatted {
        chosen.content = Content::Code(out);
    }
    chosen.formatted = Some(record);
    produced
}

/// The formatter's output when it can replace `code`, else why not.
fn formatted_output(
    code: &str,
    language: Language,
    timeout: Duration,
    outcome: Result<Vec<RunOutcome>, RunError>,
) -> Result<String, String> {
    let runs = outcome.map_err(|e| format!("the formatter could not run: {e}"))?;
    let run = runs
        .into_iter()
        .next()
        .ok_or_else(|| "the formatter did not run".to_string())?;
    if run.timed_out {
        return Err(format!(
            "the formatter timed out after {} s",
            timeout.as_secs()
        ));
    }
    if let Some(why) = run.limit_reached {
        return Err(format!("the formatter's run was stopped: {why}"));
    }
    match run.exit_code {
        Some(0) => {}
        Some(code) => {
            return Err(format!(
                "the formatter exited {code}: {}",
                tail(run.stderr.trim_end(), ERROR_TAIL_BYTES)
            ));
        }
        None => return Err("the formatter was killed".into()),
    }
    if run.truncated {
        return Err(
            "the formatter's output passed the capture bound (WRIT_RUN_MAX_OUTPUT_BYTES)".into(),
        );
    }
    if run.stdout.trim().is_empty() {
        return Err("the formatter printed nothing (it must print the formatted file)".into());
    }
    if writ_checks::syntax_ok(&run.stdout, language) == Some(false)
        && writ_checks::syntax_ok(code, language) != Some(false)
    {
        return Err("the formatter's output does not parse".into());
    }
    Ok(run.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exit_code: Option<i32>, stdout: &str) -> RunOutcome {
        RunOutcome {
            exit_code,
            stdout: stdout.into(),
            stderr: "error: cannot format".into(),
            duration_ms: 3,
            timed_out: false,
            truncated: false,
            missing_evidence: None,
            limit_reached: None,
        }
    }

    const CODE: &str = "x  =  1\n";
    const TIMEOUT: Duration = Duration::from_secs(7);

    fn output(outcome: Result<Vec<RunOutcome>, RunError>) -> Result<String, String> {
        formatted_output(CODE, Language::Python, TIMEOUT, outcome)
    }

    #[test]
    fn a_formatter_that_exits_zero_with_parsing_output_replaces_the_code() {
        assert_eq!(
            output(Ok(vec![run(Some(0), "x = 1\n")])),
            Ok("x = 1\n".into())
        );
    }

    #[test]
    fn empty_failed_cut_or_unparsable_output_leaves_the_code_as_it_was_and_says_why() {
        let why = |o| output(o).expect_err("the output is not taken");

        assert!(why(Ok(vec![run(Some(0), "  \n")])).contains("printed nothing"));
        assert!(why(Ok(vec![run(Some(2), "x = 1\n")])).contains("exited 2: error: cannot format"));
        assert!(why(Ok(vec![run(None, "")])).contains("killed"));
        assert!(why(Ok(Vec::new())).contains("did not run"));
        assert!(why(Ok(vec![run(Some(0), "def f(:\n")])).contains("does not parse"));

        let mut late = run(None, "x = 1\n");
        late.timed_out = true;
        assert!(why(Ok(vec![late])).contains("timed out after 7 s"));

        let mut cut = run(Some(0), "x = 1\n");
        cut.truncated = true;
        assert!(why(Ok(vec![cut])).contains("WRIT_RUN_MAX_OUTPUT_BYTES"));

        let unavailable = Err(RunError::Unavailable("bubblewrap is missing".into()));
        assert!(why(unavailable).contains("bubblewrap is missing"));
    }
}
