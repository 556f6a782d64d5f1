//! The generated tests kept beside the written file (`options.validation.keep_tests`).

use writ_checks::Language;
use writ_checks::analysis::{Source, TestCase};

use crate::audit::{GeneratedChecks, GeneratedTestFile};
use crate::path::RepoPath;
use crate::synthesis::response::KeptTests;

const SKIP_REASON: &str =
    "writ: the written file fails this generated test; check its expected value";

/// The generated test file to keep at `target`: of the files with kept tests, the one whose
/// tests the chosen candidate passes most (a test file is one writer's, whole, so it still
/// reads as written); every other test in it — failed by the candidate (`failed`, by id), or
/// dropped for a name error — stays, marked as skipped with why, for the caller to look at
/// rather than a red suite. JavaScript `require('../…')` paths are made relative to `target`.
pub(crate) fn kept_tests(
    summary: &GeneratedChecks,
    failed: &[String],
    language: Language,
    target: &RepoPath,
) -> KeptTests {
    let mut best: Option<(&GeneratedTestFile, Vec<&str>)> = None;
    for file in &summary.files {
        let prefix = format!("{}::", file.path);
        let passed: Vec<&str> = summary
            .tests
            .iter()
            .filter(|id| !failed.contains(id))
            .filter_map(|id| id.strip_prefix(&prefix))
            .collect();
        let any_kept = summary.tests.iter().any(|id| id.starts_with(&prefix));
        if any_kept && best.as_ref().is_none_or(|(_, p)| passed.len() > p.len()) {
            best = Some((file, passed));
        }
    }
    let Some((file, passed)) = best else {
        return KeptTests {
            path: target.to_string(),
            error: Some("no generated test could be kept (none was usable)".into()),
            ..KeptTests::default()
        };
    };
    let Some(source) = Source::parse(&file.content, language) else {
        return KeptTests {
            path: target.to_string(),
            error: Some("the generated test file could not be read again".into()),
            ..KeptTests::default()
        };
    };
    let cases = source.test_cases();
    let skip: Vec<&TestCase> = cases
        .iter()
        .filter(|c| !passed.contains(&c.id.as_str()))
        .collect();
    KeptTests {
        path: target.to_string(),
        model: Some(file.model.clone()),
        passed: passed.len(),
        skipped: skip.len(),
        content: Some(apply(&file.content, kept_edits(&source, &skip, target))),
        ..KeptTests::default()
    }
}

/// The edits that make the file as written the file kept at `target`: each test of `skip`
/// marked skipped (Python: a `pytest.mark.skip` decorator, with `import pytest` when the file
/// has none; JavaScript: `test.skip`), and JavaScript's requires of `../x` (written from the
/// checks' folder, one below the root) made relative to `target`'s folder.
fn kept_edits(source: &Source<'_>, skip: &[&TestCase], target: &RepoPath) -> Vec<Edit> {
    let code = source.code();
    let mut edits: Vec<Edit> = Vec::new();
    match source.language() {
        Language::JavaScript => {
            edits.extend(skip.iter().map(|c| Edit::insert(c.mark_at, ".skip")));
            let depth = target.as_str().matches('/').count();
            let up = if depth == 0 {
                "./".to_string()
            } else {
                "../".repeat(depth)
            };
            for import in source.imports() {
                if import.module.starts_with("../") {
                    // Past the opening quote.
                    let at = import.module_range.start + 1;
                    edits.push(Edit::Replace(at..at + "../".len(), up.clone()));
                }
            }
        }
        _ => {
            let imports_pytest = source
                .imports()
                .iter()
                .any(|i| i.binding.as_deref() == Some("pytest"));
            if !skip.is_empty() && !imports_pytest {
                edits.push(Edit::insert(0, "import pytest\n"));
            }
            for case in skip {
                let indent: String = code[case.mark_at..]
                    .chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect();
                edits.push(Edit::Insert(
                    case.mark_at,
                    format!(
                        "{indent}@pytest.mark.skip(reason={})\n",
                        serde_json::json!(SKIP_REASON)
                    ),
                ));
            }
        }
    }
    edits
}

/// A change to a test file's text, at byte offsets of the text as written.
enum Edit {
    Insert(usize, String),
    Replace(std::ops::Range<usize>, String),
}

impl Edit {
    fn insert(at: usize, text: &str) -> Edit {
        Edit::Insert(at, text.to_string())
    }

    fn start(&self) -> usize {
        match self {
            Edit::Insert(at, _) => *at,
            Edit::Replace(range, _) => range.start,
        }
    }
}

/// `code` with `edits` made, last first so each offset still holds.
fn apply(code: &str, mut edits: Vec<Edit>) -> String {
    edits.sort_by_key(|e| std::cmp::Reverse(e.start()));
    let mut out = code.to_string();
    for edit in edits {
        match edit {
            Edit::Insert(at, text) => out.insert_str(at, &text),
            Edit::Replace(range, text) => out.replace_range(range, &text),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_test_file_is_the_one_the_chosen_candidate_passes_most_with_its_failures_skipped() {
        let file = |path: &str, model: &str, content: &str| GeneratedTestFile {
            path: path.into(),
            model: model.into(),
            content: content.into(),
        };
        let summary = GeneratedChecks {
            files: vec![
                file(
                    ".writ-checks/test_calc_0.py",
                    "w0",
                    "from calc import add\n\ndef test_a():\n    assert add(1, 1) == 2\n\nclass TestMore:\n    def test_b(self):\n        assert add(1, 2) == 4\n",
                ),
                file(
                    ".writ-checks/test_calc_1.py",
                    "w1",
                    "import pytest\nfrom calc import add\n\ndef test_a():\n    assert add(2, 2) == 4\n\ndef test_b():\n    assert add(0, 0) == 0\n",
                ),
            ],
            tests: vec![
                ".writ-checks/test_calc_0.py::test_a".into(),
                ".writ-checks/test_calc_0.py::TestMore::test_b".into(),
                ".writ-checks/test_calc_1.py::test_a".into(),
                ".writ-checks/test_calc_1.py::test_b".into(),
            ],
            ..GeneratedChecks::default()
        };
        let target = RepoPath::parse("tests/test_calc.py").unwrap();
        let failed = vec![".writ-checks/test_calc_0.py::TestMore::test_b".to_string()];
        let kept = kept_tests(&summary, &failed, Language::Python, &target);
        assert_eq!(kept.model.as_deref(), Some("w1"));
        assert_eq!((kept.passed, kept.skipped), (2, 0));
        // Only w0's file has tests: its failure is kept, skipped.
        let summary = GeneratedChecks {
            tests: summary.tests[..2].to_vec(),
            ..summary
        };
        let kept = kept_tests(&summary, &failed, Language::Python, &target);
        assert_eq!((kept.passed, kept.skipped), (1, 1));
        let content = kept.content.unwrap();
        assert!(content.starts_with("import pytest\n"), "{content}");
        assert!(
            content.contains("class TestMore:\n    @pytest.mark.skip(reason=\"writ: the written file fails this generated test; check its expected value\")\n    def test_b(self):"),
            "{content}"
        );
        assert!(!content.contains(")\ndef test_a"), "{content}");
        let none = kept_tests(&GeneratedChecks::default(), &[], Language::Python, &target);
        assert!(none.content.is_none() && none.error.is_some());
    }

    #[test]
    fn a_kept_javascript_test_requires_the_file_from_where_it_is_kept() {
        let js = "const { add } = require('../calc.js');\ntest('adds', () => {});\ntest('slip', () => {});\n";
        let source = Source::parse(js, Language::JavaScript).unwrap();
        let cases = source.test_cases();
        let kept = |target: &str| {
            let target = RepoPath::parse(target).unwrap();
            apply(js, kept_edits(&source, &[&cases[1]], &target))
        };
        assert_eq!(
            kept("test/calc.test.js"),
            "const { add } = require('../calc.js');\ntest('adds', () => {});\ntest.skip('slip', () => {});\n"
        );
        assert_eq!(
            kept("calc.test.js").lines().next(),
            Some("const { add } = require('./calc.js');")
        );
        assert_eq!(
            kept("a/b/calc.test.js").lines().next(),
            Some("const { add } = require('../../calc.js');")
        );
    }
}
