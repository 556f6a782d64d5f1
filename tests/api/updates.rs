//! Changing existing files through `POST /write_codebase`, with the fake models answering the
//! way real models go wrong on updates: lazy placeholders, silently halved files, edits that do
//! not apply — never a line of the existing file lost.

use serde_json::{Value, json};
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp, on_both_backends, spawn_app_with_models_and};

/// A Python module of `n` small functions.
fn module(n: usize) -> String {
    (0..n)
        .map(|i| format!("def f{i}(x):\n    return x + {i}\n\n\n"))
        .collect()
}

const NEW_FUNCTION: &str = "def added(x):\n    return x * 2\n";

fn add_one_function(name: &str) -> Value {
    json!({"command": "write_codebase",
           "files": [{"filename": name, "code_description": "add a function added(x) returning x * 2 at the end"}]})
}

fn edit_answer(n: usize) -> String {
    let last = n - 1;
    format!(
        "Here is the change.\n\nmod.py\n```python\n<<<<<<< SEARCH\ndef f{last}(x):\n    return x + {last}\n=======\ndef f{last}(x):\n    return x + {last}\n\n\n{NEW_FUNCTION}>>>>>>> REPLACE\n```\n"
    )
}

fn lazy_answer() -> Step {
    Step::code(
        "python",
        format!(
            "{}\n# ... rest of the file unchanged ...\n\n\n{NEW_FUNCTION}",
            module(2)
        ),
    )
}

fn halved_answer(n: usize) -> Step {
    Step::code("python", format!("{}{NEW_FUNCTION}", module(n / 2)))
}

fn seed(app: &TestApp, name: &str, content: &str) {
    std::fs::write(app.repo_dir.join(name), content).unwrap();
}

fn on_disk(app: &TestApp, name: &str) -> Vec<u8> {
    std::fs::read(app.repo_dir.join(name)).unwrap()
}

/// The error classes of the candidate models' answers (the fallback model's come after).
fn classes(result: &Value) -> Vec<String> {
    result["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .take(MODELS.len())
        .map(|c| c["error_class"].as_str().unwrap_or("ok").to_string())
        .collect()
}

async fn lazy_placeholders_from_every_model_leave_the_file_as_it_was(app: TestApp) {
    let original = module(300);
    seed(&app, "mod.py", &original);
    for m in MODELS {
        app.fake().script(m, Script::always(lazy_answer()));
    }
    let (status, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    assert_eq!(status, 200, "{body}");
    let r = &body["results"][0];
    assert_eq!(r["success"], false, "{r}");
    assert!(classes(r).iter().all(|c| c == "elided"), "{r}");
    assert!(
        r["candidates"][0]["error"]
            .as_str()
            .unwrap()
            .contains("rest of the file unchanged"),
        "{r}"
    );
    assert_eq!(on_disk(&app, "mod.py"), original.as_bytes());
}

async fn silently_halved_files_are_refused_naming_the_definitions_they_drop(app: TestApp) {
    let original = module(300);
    seed(&app, "mod.py", &original);
    for m in MODELS {
        app.fake().script(m, Script::always(halved_answer(300)));
    }
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["success"], false, "{r}");
    assert!(classes(r).iter().all(|c| c == "removed_definitions"), "{r}");
    let removed = r["candidates"][0]["removed_definitions"]
        .as_array()
        .unwrap();
    assert_eq!(removed.len(), 150);
    assert_eq!(removed[0], "f150");
    assert_eq!(on_disk(&app, "mod.py"), original.as_bytes());
}

async fn the_one_complete_candidate_wins_over_lazy_and_halved_ones(app: TestApp) {
    let original = module(300);
    seed(&app, "mod.py", &original);
    let complete = format!("{original}{NEW_FUNCTION}");
    app.fake().script(MODELS[0], Script::always(lazy_answer()));
    app.fake()
        .script(MODELS[1], Script::always(halved_answer(300)));
    app.fake().script(
        MODELS[2],
        Script::always(Step::code("python", complete.clone())),
    );
    // A judge biased to the first position would have picked a lazy one: it is never asked.
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "the first")));
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["chosen_model"], MODELS[2]);
    assert_eq!(r["selection"], "single_candidate");
    assert!(app.fake().calls_for(ARBITER).is_empty());
    assert_eq!(
        classes(r),
        vec!["elided", "removed_definitions", "ok"],
        "{r}"
    );
    assert_eq!(r["candidates"][2]["answer_form"], "whole_file");
    let written = String::from_utf8(on_disk(&app, "mod.py")).unwrap();
    assert!(
        written.starts_with(&original),
        "every original line is kept"
    );
    assert!(written.trim_end().ends_with(NEW_FUNCTION.trim_end()));
}

async fn edits_change_a_crlf_file_with_a_bom_and_keep_every_other_byte(app: TestApp) {
    let view = module(40);
    let original = format!("\u{FEFF}{}", view.replace('\n', "\r\n"));
    seed(&app, "mod.py", &original);
    for m in MODELS {
        app.fake()
            .script(m, Script::always(Step::text(edit_answer(40))));
    }
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["operation"], "updated");
    assert_eq!(r["candidates"][0]["answer_form"], "edits");
    let written = String::from_utf8(on_disk(&app, "mod.py")).unwrap();
    let new_view = format!(
        "{}{NEW_FUNCTION}\n\n",
        module(40).trim_end_matches('\n').to_string() + "\n\n\n"
    );
    assert_eq!(
        written,
        format!("\u{FEFF}{}", new_view.replace('\n', "\r\n"))
    );
    // The change is in the answer and in the audit record, with the content it replaced.
    assert_eq!(r["change"]["lines_added"], 4, "{r}");
    assert_eq!(r["change"]["lines_removed"], 0, "{r}");
    assert!(
        r["change"]["diff"]
            .as_str()
            .unwrap()
            .contains("+def added(x):")
    );
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            r["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["detail"]["change"], r["change"]);
    assert_eq!(
        op["previous_sha256"],
        writ_core::content::sha256_hex(original.as_bytes())
    );
}

async fn the_prompt_shows_a_large_file_whole_and_an_edit_keeps_all_of_it(app: TestApp) {
    let original = module(3_000);
    assert!(
        original.len() > 90_000,
        "larger than any cut a prompt used to make"
    );
    seed(&app, "mod.py", &original);
    for m in MODELS {
        app.fake()
            .script(m, Script::always(Step::text(edit_answer(3_000))));
    }
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    assert_eq!(body["results"][0]["success"], true, "{body}");
    let prompt = app.fake().calls_for(MODELS[0])[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains("def f2999(x):\n    return x + 2999\n"),
        "the whole file is shown"
    );
    assert!(prompt.contains("<<<<<<< SEARCH"), "edits are asked for");
    let written = String::from_utf8(on_disk(&app, "mod.py")).unwrap();
    assert!(written.starts_with(&original[..original.len() - 2]));
    assert_eq!(written.matches("def f").count(), 3_000);
    assert!(written.contains(NEW_FUNCTION));
}

async fn an_edit_that_does_not_apply_is_not_viable_and_names_its_block(app: TestApp) {
    let original = module(10);
    seed(&app, "mod.py", &original);
    for m in MODELS {
        app.fake().script(
            m,
            Script::always(Step::text(
                "<<<<<<< SEARCH\ndef f9(x):\n    return x + 99\n=======\nnope\n>>>>>>> REPLACE\n",
            )),
        );
    }
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["success"], false);
    assert!(classes(r).iter().all(|c| c == "edit_failed"), "{r}");
    let error = r["candidates"][0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("SEARCH block 1: the text to replace was not found"),
        "{error}"
    );
    assert!(
        error.contains("def f9(x):"),
        "the closest lines are shown: {error}"
    );
    assert_eq!(
        r["candidates"][0]["edit_retry_error"], r["candidates"][0]["error"],
        "the model was asked once more with the error: {r}"
    );
    let second_prompt = &app.fake().calls_for(MODELS[0])[1].body["messages"];
    let last = second_prompt.as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap();
    assert!(
        last.contains("could not be applied: SEARCH block 1"),
        "{last}"
    );
    assert_eq!(on_disk(&app, "mod.py"), original.as_bytes());
}

async fn an_edit_that_missed_is_sent_back_once_and_its_second_answer_lands(app: TestApp) {
    let original = module(10);
    seed(&app, "mod.py", &original);
    let miss = Step::text(
        "<<<<<<< SEARCH\ndef f9(x):\n    return x + 99\n=======\nnope\n>>>>>>> REPLACE\n",
    );
    for m in MODELS {
        app.fake().script(
            m,
            Script::steps([miss.clone(), Step::text(edit_answer(10))]),
        );
    }
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    let r = &body["results"][0];
    assert_eq!(r["success"], true, "{r}");
    assert!(
        r["candidates"][0]["edit_retry_error"]
            .as_str()
            .unwrap()
            .starts_with("SEARCH block 1")
    );
    assert!(
        String::from_utf8(on_disk(&app, "mod.py"))
            .unwrap()
            .contains(NEW_FUNCTION)
    );
}

async fn the_arbiter_judges_diffs_not_whole_files(app: TestApp) {
    let original = module(500);
    seed(&app, "mod.py", &original);
    for (i, m) in MODELS.iter().enumerate() {
        let answer = format!(
            "<<<<<<< SEARCH\ndef f499(x):\n    return x + 499\n=======\ndef f499(x):\n    return x + 499\n\n\ndef added(x):\n    return x * {i}\n>>>>>>> REPLACE\n"
        );
        app.fake().script(m, Script::always(Step::text(answer)));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(2, "the second")));
    let (_, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    assert_eq!(body["results"][0]["selection"], "arbiter", "{body}");
    let prompt = app.fake().calls_for(ARBITER)[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("--- a/mod.py\n+++ b/mod.py\n"), "{prompt}");
    assert!(prompt.contains("+def added(x):"), "{prompt}");
    assert!(
        !prompt.contains("def f100(x):"),
        "unchanged lines far from the change are not shown"
    );
    assert!(prompt.len() < original.len() / 4, "{} chars", prompt.len());
}

on_both_backends!(with_models:
    lazy_placeholders_from_every_model_leave_the_file_as_it_was,
    silently_halved_files_are_refused_naming_the_definitions_they_drop,
    the_one_complete_candidate_wins_over_lazy_and_halved_ones,
    edits_change_a_crlf_file_with_a_bom_and_keep_every_other_byte,
    the_prompt_shows_a_large_file_whole_and_an_edit_keeps_all_of_it,
    an_edit_that_does_not_apply_is_not_viable_and_names_its_block,
    an_edit_that_missed_is_sent_back_once_and_its_second_answer_lands,
    the_arbiter_judges_diffs_not_whole_files,
);

#[tokio::test]
async fn a_file_too_large_to_show_whole_is_refused_before_any_model_is_called() {
    let app =
        spawn_app_with_models_and(Backend::Sqlite, &[("WRIT_MAX_SHOWN_FILE_CHARS", "1000")]).await;
    seed(&app, "mod.py", &module(100));
    let (status, body) = app.post_write_codebase(&add_one_function("mod.py")).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "files[0].filename");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("WRIT_MAX_SHOWN_FILE_CHARS"), "{message}");
    assert!(message.contains("POST /edits"), "{message}");
    for m in MODELS {
        assert!(app.fake().calls_for(m).is_empty(), "no model was called");
    }
}

#[tokio::test]
async fn removals_the_request_allows_are_written() {
    let app = spawn_app_with_models_and(Backend::Sqlite, &[]).await;
    seed(&app, "mod.py", &module(300));
    for m in MODELS {
        app.fake().script(m, Script::always(halved_answer(300)));
    }
    let mut batch = add_one_function("mod.py");
    batch["options"] = json!({"allow_removals": true});
    let (_, body) = app.post_write_codebase(&batch).await;
    assert_eq!(body["results"][0]["success"], true, "{body}");
    assert!(
        body["results"][0]["change"]["lines_removed"]
            .as_u64()
            .unwrap()
            >= 598,
        "{body}"
    );
}
