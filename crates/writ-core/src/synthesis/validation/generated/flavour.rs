//! How generated checks are written and run for each language they are made for: where a test
//! file sits, how it imports the file under test, the form the writer is asked for, and the
//! harness that runs it.

use writ_checks::Language;

use super::CHECKS_DIR;
use crate::execution::{CommandCall, CommandRunner};
use crate::path::RepoPath;
use crate::synthesis::selection::Selector;

const PYTHON_HARNESS: &str = include_str!("harness/run.py");
const NODE_HARNESS: &str = include_str!("harness/run.cjs");

/// How tests are written and run for a language.
pub(super) struct Flavour {
    pub language: Language,
    pub harness_path: &'static str,
    pub harness: &'static str,
}

/// How generated checks are written and run for `language`; `None` where they are not made.
pub(super) fn flavour(language: Language) -> Option<Flavour> {
    match language {
        Language::Python => Some(Flavour {
            language,
            harness_path: ".writ-checks/run.py",
            harness: PYTHON_HARNESS,
        }),
        Language::JavaScript => Some(Flavour {
            language,
            harness_path: ".writ-checks/run.cjs",
            harness: NODE_HARNESS,
        }),
        _ => None,
    }
}

impl Flavour {
    pub fn test_path(&self, file: &RepoPath, k: usize) -> String {
        let stem = file
            .file_name()
            .rsplit_once('.')
            .map_or(file.file_name(), |(s, _)| s);
        let stem: String = stem
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        match self.language {
            Language::JavaScript => format!("{CHECKS_DIR}/{stem}_{k}.test.js"),
            _ => format!("{CHECKS_DIR}/test_{stem}_{k}.py"),
        }
    }

    /// How a test imports the file, shown to the test writer.
    pub fn import_line(&self, file: &RepoPath, names: &[String]) -> String {
        let path = file.as_str();
        match self.language {
            Language::JavaScript => {
                format!("const {{ {} }} = require('../{path}');", names.join(", "))
            }
            _ => format!(
                "from {} import {}",
                self.module_name(file).unwrap_or_default(),
                names.join(", ")
            ),
        }
    }

    /// The file's dotted module name (Python only).
    pub fn module_name(&self, file: &RepoPath) -> Option<String> {
        (self.language == Language::Python)
            .then(|| file.as_str().trim_end_matches(".py").replace('/', "."))
    }

    pub fn form(&self) -> &'static str {
        match self.language {
            Language::JavaScript => {
                "CommonJS with node's test runner: `const test = require('node:test');` and `const assert = require('node:assert');`, one `test('what it checks', () => { ... })` per behaviour, `assert.strictEqual(actual, expected)` or `assert.deepStrictEqual(actual, expected)` with the call under test as the first argument"
            }
            _ => {
                "pytest: one `def test_...():` per behaviour with plain `assert call(...) == expected` (the call under test on the left), `pytest.raises` for errors"
            }
        }
    }
}

/// The configured command that runs the harness for `flavour`'s language, when it can run.
pub(super) fn check_command(
    selector: &Selector<'_>,
    runner: &dyn CommandRunner,
    flavour: &Flavour,
) -> Result<CommandCall, String> {
    harness_command(&selector.config.check_commands, runner, flavour)
}

/// The command of `check_commands` (language, command name) that runs the harness for
/// `flavour`'s language, when it can run.
pub(super) fn harness_command(
    check_commands: &[(String, String)],
    runner: &dyn CommandRunner,
    flavour: &Flavour,
) -> Result<CommandCall, String> {
    let language_key = flavour.language.name().to_ascii_lowercase();
    let command = crate::synthesis::stage::command_for(check_commands, flavour.language)
        .map(|c| CommandCall {
            name: c.to_owned(),
            args: vec![flavour.harness_path.to_string()],
        })
        .ok_or_else(|| format!("WRIT_CHECK_COMMANDS names no command for {language_key}"))?;
    runner
        .check(&command, "WRIT_CHECK_COMMANDS")
        .map_err(|e| format!("the generated checks cannot run: {e}"))?;
    Ok(command)
}
