//! The edge cases of Aider's SEARCH/REPLACE tests (`tests/data/editblock/aider.toml`, which
//! cites its source and licence) against writ's reader and applier of model answers: each
//! case reads or applies as the reference expects, or ends as its `differs` says writ chose.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use writ_checks::edit::{EditBlock, apply_blocks, parse_blocks};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    parse: Vec<ParseCase>,
    apply: Vec<ApplyCase>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ParseCase {
    name: String,
    source: String,
    answer: String,
    /// (search, replace) of each block, in order.
    #[serde(default)]
    blocks: Option<Vec<(String, String)>>,
    /// Refused: a phrase of the refusal.
    #[serde(default)]
    refused: Option<String>,
    #[serde(default)]
    differs: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyCase {
    name: String,
    source: String,
    text: String,
    search: String,
    replace: String,
    #[serde(default)]
    expected: Option<String>,
    #[serde(default)]
    refused: Option<String>,
    #[serde(default)]
    differs: Option<String>,
}

fn cases() -> Cases {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/editblock/aider.toml"
    );
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_reference_answer_reads_into_the_blocks_it_holds_or_is_refused_as_documented() {
    let cases = cases();
    assert!(cases.parse.len() >= 12, "the case data is missing");
    let mut failures = Vec::new();
    for case in &cases.parse {
        assert!(case.source.contains(&case.name), "{}: source", case.name);
        let read = parse_blocks(&case.answer);
        match (&case.blocks, &case.refused, read) {
            (Some(expected), None, Ok(Some(blocks))) => {
                let expected: Vec<EditBlock> = expected
                    .iter()
                    .map(|(search, replace)| EditBlock {
                        search: search.clone(),
                        replace: replace.clone(),
                    })
                    .collect();
                if blocks != expected {
                    failures.push(format!("{}: read {blocks:?}", case.name));
                }
            }
            (None, Some(phrase), Err(e)) => {
                let message = e.to_string();
                if !message.contains(phrase.as_str()) {
                    failures.push(format!("{}: refused with {message:?}", case.name));
                }
            }
            (_, _, other) => failures.push(format!("{}: got {other:?}", case.name)),
        }
        if let Some(why) = &case.differs {
            assert!(why.contains("docs/edits.md"), "{}: {why}", case.name);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_reference_edit_applies_byte_for_byte_or_is_refused_as_documented() {
    let cases = cases();
    assert!(cases.apply.len() >= 8, "the case data is missing");
    let mut failures = Vec::new();
    for case in &cases.apply {
        assert!(case.source.contains(&case.name), "{}: source", case.name);
        let blocks = [EditBlock {
            search: case.search.clone(),
            replace: case.replace.clone(),
        }];
        match (
            &case.expected,
            &case.refused,
            apply_blocks(&case.text, &blocks),
        ) {
            (Some(expected), None, Ok(applied)) if applied.text == *expected => {}
            (None, Some(phrase), Err(e)) if e.message.contains(phrase.as_str()) => {
                assert!(
                    case.differs
                        .as_deref()
                        .is_some_and(|d| d.contains("docs/edits.md")),
                    "{}: a refusal the reference does not make names its design choice",
                    case.name
                );
            }
            (_, _, other) => failures.push(format!("{}: got {other:?}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
