//! A test file as a real test-writing model answers it, made a test of the file under test.
//!
//! Real answers break in ways a scripted writer does not (each case below was seen in a real
//! model's answer; the fixtures under `tests/data/generated-checks/` keep them):
//! - **Cut off** at the token cap, mid-test: the whole tests before the break are kept.
//! - **Stubs of the names under test**: the file defines the function itself (often its
//!   signature and docstring only) instead of importing it, so its tests would test the stub
//!   and every candidate would fail alike. The definitions are removed and the names imported
//!   from the file under test.
//! - **Another module name**: `from solution import f`, `import main`, a module named after the
//!   function. The import is pointed at the file under test.
//! - **No import at all** of the names it calls: one is added.
//! - **Code run at import**: a call of its own tests, or a shell line (`pytest -v tests.py`)
//!   that happens to parse as Python, runs when the file is imported and fails it whole. Such
//!   statements are removed.
//! - **Replacing a name under test** inside a test (`monkeypatch.setattr(m, "f", …)`,
//!   `patch("m.f")`, `m.f = …`): such a test checks its replacement, not the candidate, and is
//!   removed.
//!
//! Each change is said in the answer (`generated_checks.adjusted`).

use std::collections::BTreeSet;
use std::ops::Range;

use writ_checks::Language;
use writ_checks::analysis::{DefinitionKind, Source};

use super::flavour::Flavour;
use crate::path::RepoPath;

/// A test file ready to run, and what was changed in the model's text to make it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TestFile {
    pub code: String,
    pub adjusted: Vec<String>,
}

/// `code` (a test file as extracted from a writer's answer) made a test of `subject`, whose
/// names under test are `names`; `Err` with why when nothing of it can run.
pub(super) fn prepare(
    code: &str,
    flavour: &Flavour,
    subject: &RepoPath,
    names: &[String],
) -> Result<TestFile, String> {
    let language = flavour.language;
    let mut adjusted = Vec::new();
    let parsed = Source::parse(code, language).ok_or("it could not be parsed")?;
    let mut code = match parsed.complete_prefix() {
        None if parsed.has_errors() => return Err("it does not parse".into()),
        None => code.to_string(),
        Some(whole) => {
            let kept = Source::parse(whole, language).map_or(0, |s| s.test_cases().len());
            if kept == 0 {
                return Err("it was cut off before its first whole test".into());
            }
            adjusted.push(format!(
                "cut off mid-way: its {kept} whole test(s) kept, the rest dropped"
            ));
            whole.to_string()
        }
    };

    // Code run at import, stubs and replacements of the names under test.
    let source = Source::parse(&code, language).ok_or("it could not be parsed")?;
    let mut removals: Vec<Range<usize>> = source.bare_expressions();
    if !removals.is_empty() {
        let first = removals
            .iter()
            .map(|r| &code[r.clone()])
            .next()
            .unwrap_or_default();
        adjusted.push(format!(
            "it ran {} statement(s) at import (`{}`): removed",
            removals.len(),
            first.lines().next().unwrap_or_default()
        ));
    }
    let mut stubbed = Vec::new();
    for definition in source.definitions() {
        let stub = definition.top_level
            && names.contains(&definition.name)
            && matches!(
                definition.kind,
                DefinitionKind::Function | DefinitionKind::Class | DefinitionKind::Variable
            );
        if stub {
            stubbed.push(definition.name.clone());
            removals.push(statement(&source, definition.range));
        }
    }
    if !stubbed.is_empty() {
        adjusted.push(format!(
            "it defined {} itself: removed, so its tests run the file under test",
            quoted(&stubbed)
        ));
    }
    let replaced: Vec<(usize, &str)> = source
        .replaced_names()
        .into_iter()
        .filter(|(_, name)| names.iter().any(|n| n == name))
        .collect();
    for case in source.test_cases() {
        if let Some((_, name)) = replaced.iter().find(|(at, _)| case.range.contains(at)) {
            adjusted.push(format!(
                "test `{}` replaces `{name}` and so tests the replacement: removed",
                case.id
            ));
            removals.push(case.range.clone());
        }
    }
    if !removals.is_empty() {
        code = without(&code, removals);
    }

    // Imports of the file under test under another name, or none at all.
    let source = Source::parse(&code, language).ok_or("it could not be parsed")?;
    let (edits, said) = imports_of_subject(&source, flavour, subject, names);
    adjusted.extend(said);
    if !edits.is_empty() {
        code = edited(&code, edits);
    }

    let source = Source::parse(&code, language).ok_or("it could not be parsed")?;
    if source.has_errors() {
        return Err("it no longer parses once made a test of the file".into());
    }
    if source.test_cases().is_empty() {
        return Err("it holds no test a runner would collect".into());
    }
    Ok(TestFile { code, adjusted })
}

/// The edits that import the names under test from `subject`, and what each says: imports of
/// them from another module pointed at `subject`, and one import added for the names the file
/// uses with no import or definition of its own.
fn imports_of_subject(
    source: &Source<'_>,
    flavour: &Flavour,
    subject: &RepoPath,
    names: &[String],
) -> (Vec<(Range<usize>, String)>, Vec<String>) {
    let language = source.language();
    let wanted = match language {
        Language::JavaScript => format!("../{}", subject.as_str()),
        _ => flavour.module_name(subject).unwrap_or_default(),
    };
    let is_subject = |module: &str| match language {
        Language::JavaScript => module == wanted || Some(module) == wanted.strip_suffix(".js"),
        _ => module == wanted,
    };
    let under_test = |name: &str| names.iter().any(|n| n == name);
    let mut edits = Vec::new();
    let mut said = Vec::new();
    let mut bound: BTreeSet<String> = BTreeSet::new();
    let imports = source.imports();
    for import in &imports {
        let taken: Vec<&str> = import.names.iter().map(|(n, _)| n.as_str()).collect();
        let module_used = import
            .binding
            .as_deref()
            .is_some_and(|b| source.attributes_of(b).iter().any(|a| under_test(a)));
        let subjects = taken.iter().any(|n| under_test(n)) || module_used;
        // A wildcard import of another module, in a file that calls the names under test
        // without importing them otherwise, was meant for the file under test.
        let wildcard = import.wildcard && !is_subject(&import.module);
        if is_subject(&import.module) || !(subjects || wildcard) {
            bound.extend(import.names.iter().map(|(n, _)| n.clone()));
            continue;
        }
        let replacement = match language {
            Language::JavaScript => format!("'{wanted}'"),
            _ => wanted.clone(),
        };
        let fully = taken.iter().all(|n| under_test(n));
        if wildcard && imports.iter().any(|i| i.wildcard && is_subject(&i.module)) {
            continue;
        }
        if fully || module_used || wildcard {
            said.push(format!(
                "it imported the file under test as `{}`: pointed at `{wanted}`",
                import.module
            ));
            edits.push((import.module_range.clone(), replacement));
            bound.extend(taken.iter().map(|n| n.to_string()));
        }
    }
    if imports.iter().any(|i| {
        i.wildcard && (is_subject(&i.module) || edits.iter().any(|e| e.0 == i.module_range))
    }) {
        return (edits, said);
    }
    let defined: BTreeSet<String> = source.definitions().into_iter().map(|d| d.name).collect();
    let used = source.names_used();
    let missing: Vec<String> = names
        .iter()
        .filter(|n| used.contains(n.as_str()) && !bound.contains(*n) && !defined.contains(*n))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let line = match language {
            Language::JavaScript => {
                format!(
                    "const {{ {} }} = require('{wanted}');\n",
                    missing.join(", ")
                )
            }
            _ => format!("from {wanted} import {}\n", missing.join(", ")),
        };
        said.push(format!(
            "it used {} without importing it: imported from the file under test",
            quoted(&missing)
        ));
        let at = imports
            .iter()
            .map(|i| line_end(source.code(), i.range.end))
            .max()
            .unwrap_or(0);
        edits.push((at..at, line));
    }
    (edits, said)
}

/// `range` widened to whole lines (and, in JavaScript, to the declaration holding a
/// declarator alone).
fn statement(source: &Source<'_>, range: Range<usize>) -> Range<usize> {
    let code = source.code();
    let start = code[..range.start].rfind('\n').map_or(0, |i| i + 1);
    let mut end = line_end(code, range.end);
    // `const f = …;`: the declaration's `;` may follow the declarator.
    if source.language() == Language::JavaScript && code[range.end..end].trim() == ";" {
        end = line_end(code, end);
    }
    start..end
}

/// The offset just past the end of the line holding `at`.
fn line_end(code: &str, at: usize) -> usize {
    code[at..].find('\n').map_or(code.len(), |i| at + i + 1)
}

fn without(code: &str, mut removals: Vec<Range<usize>>) -> String {
    removals.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(code.len());
    let mut at = 0;
    for r in removals {
        if r.start < at {
            at = at.max(r.end);
            continue;
        }
        out.push_str(&code[at..r.start]);
        at = r.end;
    }
    out.push_str(&code[at.min(code.len())..]);
    out
}

fn edited(code: &str, mut edits: Vec<(Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = code.to_string();
    for (range, text) in edits {
        out.replace_range(range, &text);
    }
    out
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesis::validation::generated::flavour::flavour;

    fn prepared(code: &str, language: Language, subject: &str, names: &[&str]) -> TestFile {
        try_prepare(code, language, subject, names).unwrap()
    }

    fn try_prepare(
        code: &str,
        language: Language,
        subject: &str,
        names: &[&str],
    ) -> Result<TestFile, String> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let subject = RepoPath::parse(subject).unwrap();
        prepare(code, &flavour(language).unwrap(), &subject, &names)
    }

    #[test]
    fn a_test_file_cut_mid_test_keeps_its_whole_tests() {
        let code = "from calc import add\n\ndef test_a():\n    assert add(1, 2) == 3\n\ndef test_b():\n    assert add(2, 2) == 4\n\ndef test_c():\n    assert add(1,";
        let file = prepared(code, Language::Python, "calc.py", &["add"]);
        assert!(file.code.ends_with("== 4"), "{}", file.code);
        assert_eq!(
            file.adjusted,
            ["cut off mid-way: its 2 whole test(s) kept, the rest dropped"]
        );
        let cut_early = "from calc import add\n\ndef test_a():\n    assert add(";
        assert_eq!(
            try_prepare(cut_early, Language::Python, "calc.py", &["add"]),
            Err("it was cut off before its first whole test".into())
        );
    }

    #[test]
    fn a_stub_of_the_function_under_test_is_removed_and_the_function_imported() {
        let code =
            "def add(a, b):\n    \"\"\"Adds.\"\"\"\n\n\ndef test_a():\n    assert add(1, 2) == 3\n";
        let file = prepared(code, Language::Python, "pkg/calc.py", &["add"]);
        assert_eq!(
            file.code,
            "from pkg.calc import add\n\n\ndef test_a():\n    assert add(1, 2) == 3\n"
        );
        assert_eq!(file.adjusted.len(), 2, "{:?}", file.adjusted);
        let js = "const assert = require('node:assert');\nfunction add(a, b) {\n  return a + b;\n}\ntest('adds', () => {\n  assert.strictEqual(add(1, 2), 3);\n});\n";
        let file = prepared(js, Language::JavaScript, "calc.js", &["add"]);
        assert_eq!(
            file.code,
            "const assert = require('node:assert');\nconst { add } = require('../calc.js');\ntest('adds', () => {\n  assert.strictEqual(add(1, 2), 3);\n});\n"
        );
    }

    #[test]
    fn imports_of_the_file_under_other_names_are_pointed_at_it() {
        let from = "import pytest\nfrom solution import add, sub\n\ndef test_a():\n    assert add(1, 2) == 3\n";
        let file = prepared(from, Language::Python, "calc.py", &["add", "sub"]);
        assert!(
            file.code.contains("from calc import add, sub\n"),
            "{}",
            file.code
        );
        let whole = "import solution as s\n\ndef test_a():\n    assert s.add(1, 2) == 3\n";
        let file = prepared(whole, Language::Python, "calc.py", &["add"]);
        assert!(file.code.starts_with("import calc as s\n"), "{}", file.code);
        let star = "from main import *\n\ndef test_a():\n    assert add(1, 2) == 3\n";
        let file = prepared(star, Language::Python, "calc.py", &["add"]);
        assert!(
            file.code.starts_with("from calc import *\n"),
            "{}",
            file.code
        );
        let js = "const { add } = require('./calc');\ntest('adds', () => {});\n";
        let file = prepared(js, Language::JavaScript, "src/calc.js", &["add"]);
        assert!(
            file.code
                .starts_with("const { add } = require('../src/calc.js');"),
            "{}",
            file.code
        );
        // Right already: nothing changes.
        let right = "import math\nfrom calc import add\n\ndef test_a():\n    assert add(1, 2) == math.floor(3.2)\n";
        let file = prepared(right, Language::Python, "calc.py", &["add"]);
        assert_eq!((file.code.as_str(), file.adjusted.len()), (right, 0));
    }

    #[test]
    fn a_test_that_replaces_the_function_under_test_is_removed() {
        let code = "import calc\nfrom calc import add\n\ndef test_a():\n    assert add(1, 2) == 3\n\ndef test_patched(monkeypatch):\n    monkeypatch.setattr(calc, \"add\", lambda a, b: 0)\n    assert calc.add(1, 2) == 0\n\ndef test_other(monkeypatch):\n    monkeypatch.setattr(calc, \"helper\", None)\n    assert add(0, 0) == 0\n";
        let file = prepared(code, Language::Python, "calc.py", &["add"]);
        assert!(!file.code.contains("test_patched"), "{}", file.code);
        assert!(file.code.contains("def test_other"), "{}", file.code);
        assert_eq!(
            file.adjusted,
            ["test `test_patched` replaces `add` and so tests the replacement: removed"]
        );
    }

    #[test]
    fn a_file_without_a_test_or_that_does_not_parse_cannot_run() {
        assert_eq!(
            try_prepare(
                "def helper():\n    pass\n",
                Language::Python,
                "calc.py",
                &[]
            ),
            Err("it holds no test a runner would collect".into())
        );
        assert_eq!(
            try_prepare("def test_a(:\n    pass\n", Language::Python, "calc.py", &[]),
            Err("it does not parse".into())
        );
    }

    /// A real answer kept under `tests/data/generated-checks/` (a header saying where it came
    /// from, the prompt, then the answer): the test file extracted from the answer.
    fn real_answer(fixture: &str) -> String {
        let answer = fixture
            .split_once("\n=== answer\n")
            .map_or("", |(_, answer)| answer);
        writ_checks::extract_code(answer, Language::Python).unwrap_or_default()
    }

    #[test]
    fn a_real_test_file_that_defines_the_function_and_runs_pytest_at_import_tests_the_file() {
        let code = real_answer(include_str!(
            "../../../../tests/data/generated-checks/defines-the-function-and-runs-pytest-at-import.txt"
        ));
        let file = prepared(
            &code,
            Language::Python,
            "he000_has_close_elements.py",
            &["has_close_elements"],
        );
        let source = Source::parse(&file.code, Language::Python).unwrap();
        assert!(
            source
                .definitions()
                .iter()
                .all(|d| d.name != "has_close_elements")
        );
        assert!(source.bare_expressions().is_empty(), "{}", file.code);
        assert!(
            file.code
                .contains("from he000_has_close_elements import has_close_elements\n"),
            "{}",
            file.code
        );
        let ids: Vec<String> = source.test_cases().into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["test_has_close_elements"]);
        assert_eq!(file.adjusted.len(), 3, "{:?}", file.adjusted);
    }

    #[test]
    fn a_real_answer_holding_the_implementation_and_its_tests_keeps_only_the_tests() {
        let code = real_answer(include_str!(
            "../../../../tests/data/generated-checks/implementation-and-tests-in-one-file.txt"
        ));
        let file = prepared(
            &code,
            Language::Python,
            "he162_string_to_md5.py",
            &["string_to_md5"],
        );
        assert!(!file.code.contains("hexdigest"), "{}", file.code);
        assert!(!file.code.contains("pytest -v"), "{}", file.code);
        assert!(
            file.code
                .contains("from he162_string_to_md5 import string_to_md5\n"),
            "{}",
            file.code
        );
        assert!(
            file.code.contains("def test_string_to_md5():"),
            "{}",
            file.code
        );
    }

    #[test]
    fn a_real_test_file_that_imports_the_file_by_its_name_is_left_as_written() {
        let code = real_answer(include_str!(
            "../../../../tests/data/generated-checks/pytest-raises-and-one-test-of-many-asserts.txt"
        ));
        let file = prepared(
            &code,
            Language::Python,
            "he101_words_string.py",
            &["words_string"],
        );
        assert_eq!(
            (file.code.as_str(), file.adjusted.len()),
            (code.as_str(), 0)
        );
    }
}
