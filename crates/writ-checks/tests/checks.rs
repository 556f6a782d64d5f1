//! Behaviour of the public checks on answers shaped like real model output.

use std::borrow::Cow;

use writ_checks::{
    CheckedCandidate, Language, Rejection, Verdict, check_candidate, extract_code, normalise,
    parse_verdict, repair_mojibake, syntax_ok,
};

fn extract(answer: &str, lang: Language) -> Option<String> {
    extract_code(answer, lang)
}

// ---- extraction ----

#[test]
fn prose_around_a_fenced_block_is_dropped() {
    let answer = "Here is the file:\n\n```python\nimport os\nprint(os.getcwd())\n```\n\nIt prints the working directory.";
    assert_eq!(
        extract(answer, Language::Python).as_deref(),
        Some("import os\nprint(os.getcwd())")
    );
}

#[test]
fn the_block_tagged_with_the_language_wins_over_a_longer_block_in_another_language() {
    let answer = "```bash\npip install requests && python app.py --verbose --all\n```\n\n```python\nx = 1\n```";
    assert_eq!(extract(answer, Language::Python).as_deref(), Some("x = 1"));
}

#[test]
fn the_longest_of_several_matching_blocks_wins() {
    let answer =
        "```rust\nfn main() {\n    run();\n}\n\nfn run() {}\n```\nUsage:\n```rust\nrun();\n```";
    assert_eq!(
        extract(answer, Language::Rust).as_deref(),
        Some("fn main() {\n    run();\n}\n\nfn run() {}")
    );
}

#[test]
fn an_untagged_block_is_preferred_to_a_block_in_another_language() {
    let answer = "```\nfn main() {}\n```\n```bash\ncargo run --release --quiet\n```";
    assert_eq!(
        extract(answer, Language::Rust).as_deref(),
        Some("fn main() {}")
    );
}

#[test]
fn a_block_in_another_language_is_used_when_nothing_else_is_there() {
    let answer = "```text\nSELECT 1;\n```";
    assert_eq!(extract(answer, Language::Sql).as_deref(), Some("SELECT 1;"));
}

#[test]
fn info_string_variants_name_the_language() {
    for info in [
        "python",
        "py",
        "Python",
        "python3",
        "{.python}",
        "python title=\"x.py\"",
        "app.py",
    ] {
        let answer = format!("```bash\nls -la /tmp/some/long/path\n```\n```{info}\nx = 1\n```");
        assert_eq!(
            extract(&answer, Language::Python).as_deref(),
            Some("x = 1"),
            "{info}"
        );
    }
}

#[test]
fn a_missing_closing_fence_takes_everything_to_the_end() {
    let answer = "Sure:\n```python\ndef f():\n    return 1\n";
    assert_eq!(
        extract(answer, Language::Python).as_deref(),
        Some("def f():\n    return 1")
    );
}

#[test]
fn a_truncated_closing_fence_is_not_part_of_the_code() {
    let answer = "```python\nx = 1\n``";
    assert_eq!(extract(answer, Language::Python).as_deref(), Some("x = 1"));
}

#[test]
fn tilde_fences_work_like_backtick_fences() {
    let answer = "Here:\n~~~go\npackage main\n~~~\n";
    assert_eq!(
        extract(answer, Language::Go).as_deref(),
        Some("package main")
    );
}

#[test]
fn a_longer_closing_fence_closes_the_block() {
    let answer = "```js\nlet a = 1;\n`````\nafter";
    assert_eq!(
        extract(answer, Language::JavaScript).as_deref(),
        Some("let a = 1;")
    );
}

#[test]
fn a_four_backtick_fence_keeps_a_markdown_file_with_inner_blocks_whole() {
    let readme =
        "# Tool\n\nInstall:\n\n```\npip install tool\n```\n\nRun:\n\n```bash\ntool --help\n```";
    let answer = format!("Here is the README:\n\n````markdown\n{readme}\n````\n\nLet me know.");
    assert_eq!(
        extract(&answer, Language::Markdown).as_deref(),
        Some(readme)
    );
}

#[test]
fn a_three_backtick_fence_keeps_a_markdown_file_whole_when_inner_blocks_are_tagged() {
    let readme = "# Tool\n\n```bash\ntool --help\n```\n\nDone.";
    let answer = format!("Here is the README:\n```markdown\n{readme}\n```\n");
    assert_eq!(
        extract(&answer, Language::Markdown).as_deref(),
        Some(readme)
    );
}

#[test]
fn an_answer_without_fences_that_is_pure_code_is_used_whole() {
    let answer = "\n\nuse std::io;\n\nfn main() {}\n";
    assert_eq!(
        extract(answer, Language::Rust).as_deref(),
        Some("use std::io;\n\nfn main() {}\n")
    );
}

#[test]
fn an_answer_without_fences_that_opens_with_prose_has_no_code() {
    assert_eq!(
        extract("Here is the code you asked for.\nx = 1", Language::Python),
        None
    );
    assert_eq!(extract("Sure! I can do that.", Language::Python), None);
    assert_eq!(extract("", Language::Python), None);
    assert_eq!(extract("  \n\t\n", Language::Python), None);
}

#[test]
fn a_leading_file_name_comment_is_kept() {
    let answer = "```python\n# src/app.py\nx = 1\n```";
    assert_eq!(
        extract(answer, Language::Python).as_deref(),
        Some("# src/app.py\nx = 1")
    );
}

// ---- normalisation and mojibake ----

#[test]
fn crlf_line_endings_and_a_bom_are_normalised() {
    assert_eq!(
        normalise("\u{FEFF}line one\r\nline two\r\n\r\n\r\n"),
        "line one\nline two\n"
    );
}

#[test]
fn code_ends_with_exactly_one_newline() {
    assert_eq!(normalise("x = 1"), "x = 1\n");
    assert_eq!(normalise("x = 1\n\n\n   \n"), "x = 1\n");
}

#[test]
fn mojibake_of_an_accented_letter_is_repaired() {
    assert_eq!(repair_mojibake("cafÃ©"), "café");
}

#[test]
fn mojibake_of_smart_quotes_and_apostrophes_is_repaired() {
    assert_eq!(
        repair_mojibake("â€œquotesâ€\u{9d} and itâ€™s â€” done"),
        "“quotes” and it’s — done"
    );
}

#[test]
fn correct_accents_next_to_mojibake_are_left_as_they_are() {
    assert_eq!(
        repair_mojibake("café and cafÃ©\nnaïve Ã¼ber"),
        "café and café\nnaïve über"
    );
}

#[test]
fn correct_non_ascii_text_comes_back_borrowed() {
    for text in ["café — “fine”", "Grüße", "日本語", "emoji 🎉"] {
        assert!(matches!(repair_mojibake(text), Cow::Borrowed(_)), "{text}");
    }
}

#[test]
fn pure_ascii_comes_back_borrowed() {
    assert!(matches!(
        repair_mojibake("plain ASCII text {}[]"),
        Cow::Borrowed(_)
    ));
}

#[test]
fn normalise_repairs_mojibake_too() {
    assert_eq!(normalise("print('cafÃ©')\r\n"), "print('café')\n");
}

// ---- syntax ----

fn assert_parses(lang: Language, good: &str, bad: &str) {
    assert_eq!(
        syntax_ok(good, lang),
        Some(true),
        "{lang:?} should parse:\n{good}"
    );
    assert_eq!(
        syntax_ok(bad, lang),
        Some(false),
        "{lang:?} should not parse:\n{bad}"
    );
}

#[test]
fn python_that_parses_passes_and_a_syntax_error_fails() {
    assert_parses(
        Language::Python,
        "import os\n\n\ndef f(x: int) -> int:\n    return x + 1\n",
        "def f(x:\n    return x +\n",
    );
}

#[test]
fn rust_good_and_bad() {
    assert_parses(
        Language::Rust,
        "fn main() {\n    let v: Vec<u8> = vec![1, 2];\n    println!(\"{v:?}\");\n}\n",
        "fn main() {\n    let x = ;\n",
    );
}

#[test]
fn javascript_good_and_bad() {
    assert_parses(
        Language::JavaScript,
        "export const add = (a, b) => a + b;\nconsole.log(`sum ${add(1, 2)}`);\n",
        "function ( {\n  return;\n",
    );
}

#[test]
fn typescript_good_and_bad() {
    assert_parses(
        Language::TypeScript,
        "interface User { id: number; name?: string }\nexport function name(u: User): string { return u.name ?? ''; }\n",
        "let x: = 1;\nfunction f(: number {}\n",
    );
}

#[test]
fn tsx_good_and_bad() {
    assert_parses(
        Language::Tsx,
        "export const App = (p: { n: number }) => <div className=\"a\">{p.n}</div>;\n",
        "export const App = () => <div><span></div>;\n",
    );
}

#[test]
fn json_good_and_bad() {
    assert_parses(
        Language::Json,
        "{\"name\": \"writ\", \"list\": [1, 2.5, null]}\n",
        "{\"a\": 1,}\n",
    );
    assert_eq!(
        syntax_ok("{\"a\": 1} // comment", Language::Json),
        Some(false)
    );
}

#[test]
fn toml_good_and_bad() {
    assert_parses(
        Language::Toml,
        "[package]\nname = \"writ\"\nversion = \"0.1.0\"\n\n[dependencies]\nserde = { version = \"1\" }\n",
        "[package\nname = \"writ\"\n",
    );
}

#[test]
fn yaml_good_and_bad() {
    assert_parses(
        Language::Yaml,
        "name: ci\non:\n  push:\n    branches: [main]\njobs:\n  test:\n    runs-on: ubuntu-latest\n",
        "name: ci\njobs: [a, b\n  - c\n",
    );
}

#[test]
fn go_good_and_bad() {
    assert_parses(
        Language::Go,
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
        "package main\n\nfunc main( {\n",
    );
}

#[test]
fn css_good_and_bad() {
    assert_parses(
        Language::Css,
        "body { margin: 0; }\n.a > .b:hover { color: #fff; }\n",
        "body { margin: 0;\n.a { color: }}}\n",
    );
}

#[test]
fn html_that_is_well_formed_parses() {
    assert_eq!(
        syntax_ok(
            "<!DOCTYPE html>\n<html><head><title>x</title></head><body><p>hi</p></body></html>\n",
            Language::Html
        ),
        Some(true)
    );
}

#[test]
fn an_svg_file_must_be_xml_with_an_svg_root() {
    let good = "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 10 10\"><circle cx=\"5\" cy=\"5\" r=\"4\"/></svg>\n";
    assert_eq!(syntax_ok(good, Language::Svg), Some(true));
    let html_root = "<html xmlns=\"http://www.w3.org/2000/svg\"><body/></html>";
    assert_eq!(syntax_ok(html_root, Language::Svg), Some(false));
    let unclosed = "<svg xmlns=\"http://www.w3.org/2000/svg\"><g></svg>";
    assert_eq!(syntax_ok(unclosed, Language::Svg), Some(false));
}

#[test]
fn an_svg_without_the_svg_namespace_fails() {
    assert_eq!(
        syntax_ok("<svg viewBox=\"0 0 1 1\"></svg>", Language::Svg),
        Some(false)
    );
}

#[test]
fn an_svg_with_a_doctype_parses() {
    let svg = "<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" \"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n<svg xmlns=\"http://www.w3.org/2000/svg\"/>";
    assert_eq!(syntax_ok(svg, Language::Svg), Some(true));
}

// ---- candidates ----

#[test]
fn a_candidate_is_extracted_normalised_and_parsed() {
    let answer = "Here you go:\r\n```python\r\nprint('cafÃ©')\r\n```\r\n";
    assert_eq!(
        check_candidate(answer, Language::Python),
        Ok(CheckedCandidate {
            code: "print('café')\n".to_owned(),
            parsed: Some(true),
        })
    );
}

#[test]
fn a_candidate_that_does_not_parse_is_kept_but_marked() {
    let checked = check_candidate("```python\ndef f(:\n```", Language::Python);
    assert_eq!(checked.map(|c| c.parsed), Ok(Some(false)));
}

#[test]
fn candidates_equal_after_normalisation_have_equal_code() {
    let a = check_candidate("```js\nlet a = 1;\r\n\r\n```", Language::JavaScript);
    let b = check_candidate(
        "Sure:\n```javascript\nlet a = 1;\n```\nDone.",
        Language::JavaScript,
    );
    assert_eq!(a.map(|c| c.code), b.map(|c| c.code));
}

#[test]
fn an_answer_without_code_and_an_empty_block_are_rejected_differently() {
    assert_eq!(
        check_candidate("Here is nothing useful.", Language::Go),
        Err(Rejection::NoCode)
    );
    assert_eq!(
        check_candidate("```go\n\n\n```", Language::Go),
        Err(Rejection::Empty)
    );
}

// ---- verdicts ----

fn verdict(choice: usize, reason: &str) -> Option<Verdict> {
    Some(Verdict {
        choice,
        reason: reason.to_owned(),
    })
}

#[test]
fn a_bare_json_verdict_is_parsed() {
    assert_eq!(
        parse_verdict(r#"{"choice": 2, "reason": "handles errors"}"#, 3),
        verdict(2, "handles errors")
    );
}

#[test]
fn a_verdict_in_a_json_fence_is_parsed() {
    let answer = "```json\n{\"choice\": 1, \"reason\": \"simpler\"}\n```";
    assert_eq!(parse_verdict(answer, 2), verdict(1, "simpler"));
}

#[test]
fn a_verdict_inside_prose_is_parsed() {
    let answer = "After comparing {both} candidates, my answer is {\"choice\": 3, \"reason\": \"uses {braces} well\"}. Thanks!";
    assert_eq!(parse_verdict(answer, 3), verdict(3, "uses {braces} well"));
}

#[test]
fn a_numeric_string_choice_counts_and_a_missing_reason_is_empty() {
    assert_eq!(parse_verdict(r#"{"choice":"2"}"#, 2), verdict(2, ""));
}

#[test]
fn a_choice_out_of_range_gives_no_verdict() {
    assert_eq!(parse_verdict(r#"{"choice": 4, "reason": "x"}"#, 3), None);
    assert_eq!(parse_verdict(r#"{"choice": 0, "reason": "x"}"#, 3), None);
    assert_eq!(parse_verdict(r#"{"choice": -1, "reason": "x"}"#, 3), None);
}

#[test]
fn garbage_gives_no_verdict() {
    for answer in [
        "",
        "no idea",
        "{{{{",
        "}{",
        "{\"choice\": }",
        "```json\n{oops\n```",
        "\u{0}\u{FFFF}",
    ] {
        assert_eq!(parse_verdict(answer, 3), None, "{answer:?}");
    }
}

#[test]
fn a_prose_verdict_naming_one_candidate_is_parsed_as_a_last_resort() {
    let parsed = parse_verdict("I prefer Candidate 2 because it validates input.", 3);
    assert_eq!(parsed.map(|v| v.choice), Some(2));
    let parsed = parse_verdict("choice: 1", 2);
    assert_eq!(parsed.map(|v| v.choice), Some(1));
}
