//! Property tests: the checks take hostile input (any string a model or an
//! attacker can produce) without panicking, and keep their promises on it.
//! 256 cases per property unless `PROPTEST_CASES` says otherwise.

use proptest::prelude::*;
use writ_checks::{
    Language, check_candidate, extract_code, normalise, parse_verdict, repair_mojibake,
};

fn language() -> impl Strategy<Value = Language> {
    prop::sample::select(Language::ALL.to_vec())
}

/// Strings built from the pieces the parsers care about: fences, info
/// strings, braces, quotes, verdict words, mojibake fragments and line breaks,
/// mixed with arbitrary characters.
fn soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("```".to_owned()),
        Just("````".to_owned()),
        Just("~~~".to_owned()),
        Just("``".to_owned()),
        Just("   ".to_owned()),
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("\r".to_owned()),
        Just("python".to_owned()),
        Just("json".to_owned()),
        Just("markdown".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("\"".to_owned()),
        Just("\\".to_owned()),
        Just("\"choice\"".to_owned()),
        Just(": ".to_owned()),
        Just("Candidate ".to_owned()),
        Just("Here is".to_owned()),
        Just("\u{FEFF}".to_owned()),
        Just("Ã".to_owned()),
        Just("Â".to_owned()),
        Just("â€".to_owned()),
        Just("ðŸ".to_owned()),
        Just("\u{A0}".to_owned()),
        Just("\u{80}".to_owned()),
        "[0-9]{1,3}",
        "-?[0-9]{1,20}",
        any::<char>().prop_map(String::from),
        "[ -~]{0,8}",
    ];
    prop::collection::vec(piece, 0..48).prop_map(|pieces| pieces.concat())
}

/// Any string at all, or soup.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), soup()]
}

/// Code that can sit inside a ```python fence unchanged: no backtick fence
/// in it, and no line break at its end that the fence would absorb.
fn fence_safe_code() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z_ =():\\[\\]{}'\"#~`\t\n]{0,120}",
        soup()
    ]
    .prop_filter("code must not hold ``` nor end in a line break", |code| {
        !code.contains("```") && !code.ends_with(['\n', '\r'])
    })
}

proptest! {
    #[test]
    fn extract_code_never_panics(answer in hostile(), lang in language()) {
        let _ = extract_code(&answer, lang);
    }

    #[test]
    fn check_candidate_never_panics(answer in hostile(), lang in language()) {
        if let Ok(checked) = check_candidate(&answer, lang) {
            prop_assert!(!checked.code.is_empty());
            prop_assert!(checked.code.ends_with('\n'));
        }
    }

    #[test]
    fn parse_verdict_never_panics_and_chooses_within_range(answer in hostile(), n in 0_usize..8) {
        if let Some(verdict) = parse_verdict(&answer, n) {
            prop_assert!((1..=n).contains(&verdict.choice), "{verdict:?} for n = {n}");
        }
    }

    #[test]
    fn parse_verdict_on_json_shaped_answers_chooses_within_range(
        choice in prop_oneof![any::<i64>().prop_map(|c| c.to_string()), "\"[0-9 ]{0,4}\"", Just("null".to_owned())],
        reason in any::<String>(),
        prose in "[ -~]{0,20}",
        n in 0_usize..8,
    ) {
        let json = serde_json::json!({ "reason": reason }).to_string();
        let object = format!("{{\"choice\": {choice}, {}", json.trim_start_matches('{'));
        for answer in [object.clone(), format!("{prose}\n```json\n{object}\n```"), format!("{prose} {object} {prose}")] {
            if let Some(verdict) = parse_verdict(&answer, n) {
                prop_assert!((1..=n).contains(&verdict.choice), "{verdict:?} for n = {n}");
            }
        }
    }

    #[test]
    fn repair_mojibake_never_panics_and_is_idempotent(text in hostile()) {
        let once = repair_mojibake(&text).into_owned();
        prop_assert_eq!(repair_mojibake(&once).into_owned(), once);
    }

    #[test]
    fn normalise_is_idempotent(code in hostile()) {
        let once = normalise(&code);
        prop_assert_eq!(normalise(&once), once);
    }

    #[test]
    fn code_wrapped_in_a_python_fence_between_prose_is_extracted_exactly(code in fence_safe_code()) {
        let answer = format!("prose\n```python\n{code}\n```\nprose");
        prop_assert_eq!(extract_code(&answer, Language::Python), Some(code));
    }

    #[test]
    fn an_update_answer_never_panics(answer in hostile(), original in hostile(), lang in language()) {
        let view = writ_checks::shape::view(&original);
        let target = writ_checks::UpdateTarget {
            original: &view,
            base: &view,
            description: "change it",
            allow_removals: false,
        };
        let _ = writ_checks::check_update(&answer, lang, target);
        let _ = writ_checks::patch::parse(&answer);
    }

    #[test]
    fn rendering_the_unchanged_view_gives_the_original_back(original in hostile()) {
        let view = writ_checks::shape::view(&original);
        prop_assert_eq!(writ_checks::shape::render(&original, &view), original);
    }

    #[test]
    fn an_edit_of_one_line_changes_that_line_only(lines in prop::collection::vec("[a-z ]{0,12}", 1..40), crlf in any::<bool>(), pick in any::<prop::sample::Index>()) {
        let ending = if crlf { "\r\n" } else { "\n" };
        let original: String = lines.iter().enumerate().map(|(i, l)| format!("L{i}:{l}{ending}")).collect();
        let view = writ_checks::shape::view(&original);
        let i = pick.index(lines.len());
        let old = format!("L{i}:{}\n", lines[i]);
        let edited = writ_checks::edit::apply_one(&view, &old, "changed\n", false, 1, "edit").unwrap();
        let rendered = writ_checks::shape::render(&original, &edited.text);
        prop_assert_eq!(rendered, original.replacen(&format!("L{i}:{}{ending}", lines[i]), &format!("changed{ending}"), 1));
    }
}
