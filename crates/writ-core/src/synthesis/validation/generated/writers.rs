//! The test writers: the models asked for a test file of a file, from its description and the
//! public names every candidate defines — never from a candidate's code, whose bugs a test
//! written from it would encode — and what their answers give.

use std::time::Instant;

use futures::future::join_all;

use super::CHECKS_DIR;
use super::flavour::Flavour;
use super::test_file::prepare;
use crate::audit::{CallRecord, CallRole, GeneratedTestFile, TestWriterCall};
use crate::model::{ChatMessage, ChatRequest};
use crate::synthesis::selection::Selector;
use crate::synthesis::stage::FileCx;

/// A test file's size cap, in bytes; a longer answer is cut off by the model anyway.
const MAX_TEST_BYTES: usize = 64 * 1024;

/// What the test-writing models gave for a file, before any candidate ran it.
#[derive(Debug, Clone, Default)]
pub(crate) struct WrittenTests {
    pub writers: Vec<TestWriterCall>,
    /// Every test file as written (shown in the answer), usable or not.
    pub shown: Vec<GeneratedTestFile>,
    pub discarded: Vec<String>,
    /// What was changed in the files as written so they test the file under test.
    pub adjusted: Vec<String>,
    /// The usable ones: (path in the scratch, code).
    pub files: Vec<(String, String)>,
    /// The public names the tests were written against.
    pub names: Vec<String>,
}

/// Asks every test-writing model for a test file of the file at `cx`, from its description and
/// `names` (never from a candidate's code). Each file is made a test of the file under test
/// ([`prepare`]); one that cannot be is kept for the record but not run.
pub(super) async fn write_tests(
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
    cx.upstream().add(asked.elapsed());
    for (model, answer) in writers.iter().zip(&answers) {
        cx.upstream().called(CallRecord::of(
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
                let path = flavour.test_path(&cx.file().path, k);
                match writ_checks::extract_code(&resp.content, flavour.language) {
                    None => out
                        .discarded
                        .push(format!("{model}: the answer holds no {language_key} code")),
                    Some(code) if code.len() > MAX_TEST_BYTES => out.discarded.push(format!(
                        "{model}: the test file is {} bytes, above {MAX_TEST_BYTES}",
                        code.len()
                    )),
                    Some(code) => match prepare(&code, flavour, &cx.file().path, names) {
                        Err(why) => {
                            out.discarded.push(format!("{path}: {why}"));
                            out.shown.push(GeneratedTestFile {
                                path,
                                model: model.clone(),
                                content: code,
                            });
                        }
                        Ok(prepared) => {
                            out.adjusted
                                .extend(prepared.adjusted.iter().map(|a| format!("{path}: {a}")));
                            out.shown.push(GeneratedTestFile {
                                path: path.clone(),
                                model: model.clone(),
                                content: prepared.code.clone(),
                            });
                            out.files.push((path, prepared.code));
                        }
                    },
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

/// The models that write the tests: `WRIT_TEST_MODELS`, else the arbiter and the first of the
/// file's candidate models that is not the arbiter. Two writers rather than one because a
/// single writer's wrong assertion that happens to expect a buggy candidate's answer outvotes
/// the correct candidate; a second model errs at other places, so its tests outvote the slip
/// (EVALS.md: one writer 70 %, two 88 %). Both are models the deployment already calls, so the
/// default needs no configuration of its own.
pub(super) fn test_writers(selector: &Selector<'_>, models: &[String]) -> Vec<String> {
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
    let file = cx.file();
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

/// The batch's task, which opens these prompts for every file of the batch alike.
pub(super) fn shared_task(cx: &FileCx<'_>) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
