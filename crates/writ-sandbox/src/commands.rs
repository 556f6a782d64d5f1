//! Named commands: the only programs a request can run.
//!
//! The operator configures `WRIT_COMMANDS` as JSON, e.g.
//! `{"pytest": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "{args}"]}`.
//! A request names one command and gives arguments; each argument must be a relative path inside
//! the sandbox and replaces the `{args}` element. A request therefore never chooses a program
//! and never adds an option.
//!
//! A command may also be an object, `{"argv": [...], "evidence": "<regex>"}`: the pattern its
//! output must show for exit 0 to count as a pass ([`Evidence`]). Without one, a known test
//! runner's own report is required ([`Evidence::detect`]).

use std::collections::BTreeMap;
use std::path::{Component, Path};

use crate::evidence::Evidence;

/// The environment variable holding the command templates.
pub const COMMANDS_ENV: &str = "WRIT_COMMANDS";

/// The template element replaced by the request's arguments.
const ARGS_PLACEHOLDER: &str = "{args}";

/// How many arguments one request may pass.
pub const MAX_ARGS: usize = 64;

/// How long one argument may be, in bytes.
pub const MAX_ARG_BYTES: usize = 1024;

/// Configured command templates by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandSet {
    templates: BTreeMap<String, Vec<String>>,
    /// What a pass of each command must show besides exit 0, when anything.
    evidence: BTreeMap<String, Evidence>,
}

/// A command as `WRIT_COMMANDS` may give it: its argv, or its argv and its evidence.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Spec {
    Argv(Vec<String>),
    Declared {
        argv: Vec<String>,
        evidence: Option<String>,
    },
}

/// Why a command set or a request's command could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error(
        "{COMMANDS_ENV} is not valid JSON of the form {{\"name\": [\"program\", \"arg\", …]}} or {{\"name\": {{\"argv\": [...], \"evidence\": \"pattern\"}}}}: {0}"
    )]
    InvalidJson(String),
    #[error("{COMMANDS_ENV}: command {name:?}: {reason}")]
    InvalidTemplate { name: String, reason: String },
    #[error("no commands are configured: set {COMMANDS_ENV}")]
    NoneConfigured,
    #[error("command: unknown command {name:?}; known commands: {known}")]
    Unknown { name: String, known: String },
    #[error("args: command {name:?} takes no arguments")]
    TakesNoArgs { name: String },
    #[error("args: at most {MAX_ARGS} arguments, got {got}")]
    TooManyArgs { got: usize },
    #[error("args[{index}]: {reason}")]
    InvalidArg { index: usize, reason: String },
}

impl CommandSet {
    /// Parses and validates `WRIT_COMMANDS` JSON.
    pub fn parse(json: &str) -> Result<Self, CommandError> {
        let specs: BTreeMap<String, Spec> =
            serde_json::from_str(json).map_err(|e| CommandError::InvalidJson(e.to_string()))?;
        let mut set = Self::default();
        for (name, spec) in specs {
            let (argv, declared) = match spec {
                Spec::Argv(argv) => (argv, None),
                Spec::Declared { argv, evidence } => (argv, evidence),
            };
            validate_template(&name, &argv)?;
            let evidence = match declared {
                Some(raw) => Some(Evidence::pattern(&raw).map_err(|reason| {
                    CommandError::InvalidTemplate {
                        name: name.clone(),
                        reason,
                    }
                })?),
                None => Evidence::detect(&argv),
            };
            if let Some(evidence) = evidence {
                set.evidence.insert(name.clone(), evidence);
            }
            set.templates.insert(name, argv);
        }
        Ok(set)
    }

    /// What a pass of `name` must show besides exit 0; `None`: exit 0 is enough.
    pub fn evidence(&self, name: &str) -> Option<&Evidence> {
        self.evidence.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.templates.is_empty()
    }

    /// The program each command runs, by name: its template's first element, or, when that is
    /// `env`, the first element after `env`'s options and `NAME=value` assignments.
    pub fn programs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.templates.iter().filter_map(|(name, argv)| {
            let mut words = argv.iter().map(String::as_str);
            let first = words.next()?;
            let program = if first == "env" || first.ends_with("/env") {
                words.find(|w| !w.starts_with('-') && !w.contains('='))?
            } else {
                first
            };
            Some((name.as_str(), program))
        })
    }

    /// The configured names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.templates.keys().map(String::as_str)
    }

    /// The argv for `name` with `args` in place of `{args}`, every argument checked first.
    pub fn expand(&self, name: &str, args: &[String]) -> Result<Vec<String>, CommandError> {
        if self.templates.is_empty() {
            return Err(CommandError::NoneConfigured);
        }
        let template = self
            .templates
            .get(name)
            .ok_or_else(|| CommandError::Unknown {
                name: name.to_owned(),
                known: self.names().collect::<Vec<_>>().join(", "),
            })?;
        if args.len() > MAX_ARGS {
            return Err(CommandError::TooManyArgs { got: args.len() });
        }
        for (index, arg) in args.iter().enumerate() {
            validate_arg(arg).map_err(|reason| CommandError::InvalidArg { index, reason })?;
        }
        let takes_args = template.iter().any(|a| a == ARGS_PLACEHOLDER);
        if !takes_args && !args.is_empty() {
            return Err(CommandError::TakesNoArgs {
                name: name.to_owned(),
            });
        }
        let mut argv = Vec::with_capacity(template.len() + args.len());
        for element in template {
            if element == ARGS_PLACEHOLDER {
                argv.extend(args.iter().cloned());
            } else {
                argv.push(element.clone());
            }
        }
        Ok(argv)
    }
}

fn validate_template(name: &str, argv: &[String]) -> Result<(), CommandError> {
    let invalid = |reason: &str| CommandError::InvalidTemplate {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(invalid(
            "the name must be 1–64 characters of A–Z, a–z, 0–9, '-', '_', '.'",
        ));
    }
    let Some(program) = argv.first() else {
        return Err(invalid(
            "the argv is empty; the first element is the program",
        ));
    };
    if program == ARGS_PLACEHOLDER {
        return Err(invalid("the program cannot be {args}"));
    }
    let plain = !program.is_empty() && !program.contains('/');
    let absolute = program.starts_with('/') && !program.split('/').any(|c| c == "..");
    if !(plain || absolute) {
        return Err(invalid(
            "the program must be a plain name (found on PATH) or an absolute path",
        ));
    }
    if argv.iter().any(|a| a.chars().any(|c| c == '\0')) {
        return Err(invalid("an element contains a NUL byte"));
    }
    Ok(())
}

fn validate_arg(arg: &str) -> Result<(), String> {
    if arg.is_empty() {
        return Err("must not be empty".into());
    }
    if arg.len() > MAX_ARG_BYTES {
        return Err(format!("at most {MAX_ARG_BYTES} bytes, got {}", arg.len()));
    }
    // The same characters every path route refuses: a bidi control makes an argument read as
    // another in logs and in the audit record.
    if let Some((c, kind)) = arg
        .chars()
        .find_map(|c| writ_core::path::forbidden(c).map(|kind| (c, kind)))
    {
        return Err(format!(
            "contains {kind} U+{:04X}; control and bidirectional formatting characters are not allowed in arguments",
            u32::from(c)
        ));
    }
    if arg.starts_with('-') {
        return Err("must not start with '-' (it would be read as an option)".into());
    }
    let path = Path::new(arg);
    if path.is_absolute() {
        return Err("must be a relative path inside the sandbox, not an absolute path".into());
    }
    let mut depth: usize = 0;
    for component in path.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth = depth.checked_sub(1).ok_or_else(|| {
                    "must stay inside the sandbox ('..' leads out of it)".to_string()
                })?;
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("must be a relative path inside the sandbox".into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{"python": ["python3", "{args}"],
        "pytest": ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "{args}"],
        "node": ["node", "{args}"], "lint": ["/usr/bin/true"]}"#;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_known_command_expands_its_arguments_in_place() {
        let set = CommandSet::parse(EXAMPLE).unwrap();
        assert_eq!(
            set.expand("pytest", &args(&["tests/test_a.py", "./b.py"]))
                .unwrap(),
            args(&[
                "python3",
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/test_a.py",
                "./b.py"
            ])
        );
        assert_eq!(set.expand("lint", &[]).unwrap(), args(&["/usr/bin/true"]));
        assert_eq!(
            set.expand("python", &args(&["a/../b.py"])).unwrap(),
            args(&["python3", "a/../b.py"])
        );
    }

    #[test]
    fn an_unknown_command_lists_the_known_names() {
        let err = CommandSet::parse(EXAMPLE)
            .unwrap()
            .expand("bash", &[])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"command: unknown command "bash"; known commands: lint, node, pytest, python"#
        );
    }

    #[test]
    fn no_configured_commands_names_the_variable() {
        let err = CommandSet::default().expand("python", &[]).unwrap_err();
        assert_eq!(err, CommandError::NoneConfigured);
        assert!(err.to_string().contains("WRIT_COMMANDS"));
        assert!(
            CommandSet::parse("{}")
                .unwrap()
                .expand("python", &[])
                .is_err()
        );
    }

    #[test]
    fn each_bad_argument_is_refused_by_its_index() {
        let set = CommandSet::parse(EXAMPLE).unwrap();
        let cases: &[(&str, &str)] = &[
            ("/etc/passwd", "absolute"),
            ("../outside.py", "leads out"),
            ("a/../../outside.py", "leads out"),
            ("-c", "start with '-'"),
            ("--rootdir=/", "start with '-'"),
            ("a\0b", "control character U+0000"),
            ("a\nb", "control character U+000A"),
            ("a\u{202e}b.py", "bidirectional formatting character U+202E"),
            ("a\u{2066}b.py", "bidirectional formatting character U+2066"),
            ("a\u{200f}b.py", "bidirectional formatting character U+200F"),
            ("a\u{61c}b.py", "bidirectional formatting character U+061C"),
            ("a\u{85}b.py", "control character U+0085"),
            ("", "empty"),
        ];
        for (bad, why) in cases {
            let err = set.expand("python", &args(&["ok.py", bad])).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("args[1]: "), "{bad:?}: {text}");
            assert!(text.contains(why), "{bad:?}: {text}");
        }
        let long = "a".repeat(MAX_ARG_BYTES + 1);
        assert!(
            set.expand("python", &[long])
                .unwrap_err()
                .to_string()
                .starts_with("args[0]: at most 1024 bytes")
        );
        let many = vec!["a.py".to_owned(); MAX_ARGS + 1];
        assert_eq!(
            set.expand("python", &many).unwrap_err(),
            CommandError::TooManyArgs { got: MAX_ARGS + 1 }
        );
    }

    #[test]
    fn known_runners_need_their_report_and_a_command_may_declare_its_own() {
        let set = CommandSet::parse(
            r#"{"pytest": ["python3", "-m", "pytest", "{args}"], "python": ["python3", "{args}"],
                "check": {"argv": ["./check"], "evidence": "^all \\d+ good$"}}"#,
        );
        let err = set.unwrap_err();
        assert!(err.to_string().contains("plain name"), "{err}");
        let set = CommandSet::parse(
            r#"{"pytest": ["python3", "-m", "pytest", "{args}"], "python": ["python3", "{args}"],
                "check": {"argv": ["/usr/bin/check"], "evidence": "^all \\d+ good$"}}"#,
        )
        .unwrap();
        assert_eq!(set.evidence("pytest"), Some(&Evidence::Pytest));
        assert_eq!(set.evidence("python"), None);
        let check = set.evidence("check").unwrap();
        assert!(check.check("x\nall 3 good\n").is_ok());
        assert!(check.check("all good\n").is_err());
        assert_eq!(set.expand("check", &[]).unwrap(), args(&["/usr/bin/check"]));
    }

    #[test]
    fn arguments_to_a_command_without_placeholder_are_refused() {
        let set = CommandSet::parse(EXAMPLE).unwrap();
        assert_eq!(
            set.expand("lint", &args(&["a.py"])).unwrap_err(),
            CommandError::TakesNoArgs {
                name: "lint".into()
            }
        );
    }

    #[test]
    fn bad_templates_are_refused_at_parse_time() {
        for (json, why) in [
            (r#"{"x": []}"#, "argv is empty"),
            (r#"{"x": ["{args}"]}"#, "cannot be {args}"),
            (r#"{"x": ["./run.sh"]}"#, "plain name"),
            (r#"{"x": ["bin/python"]}"#, "plain name"),
            (r#"{"x": ["/usr/../bin/sh"]}"#, "plain name"),
            (r#"{"x": [""]}"#, "plain name"),
            (r#"{"": ["true"]}"#, "the name"),
            (r#"{"a b": ["true"]}"#, "the name"),
        ] {
            let err = CommandSet::parse(json).unwrap_err();
            assert!(
                matches!(err, CommandError::InvalidTemplate { .. }),
                "{json}: {err}"
            );
            assert!(err.to_string().contains(why), "{json}: {err}");
        }
        let err = CommandSet::parse(r#"{"x": {"argv": ["true"], "evidence": "("}}"#).unwrap_err();
        assert!(
            err.to_string().contains("not a valid regular expression"),
            "{err}"
        );
        for json in [
            "[]",
            r#"{"x": "python3"}"#,
            "not json",
            r#"{"x": {"evidence": "ok"}}"#,
        ] {
            assert!(
                matches!(
                    CommandSet::parse(json).unwrap_err(),
                    CommandError::InvalidJson(_)
                ),
                "{json}"
            );
        }
    }
}
