//! Lexical checks of a caller's path, before the filesystem is touched.
//!
//! A [`RepoPath`] is relative, normalised (`./a/../b.py` → `b.py`), free of NUL bytes, control
//! and bidi formatting characters, and never climbs above the root. What the filesystem resolves
//! (symlinks planted inside the root) is checked again by the workspace implementation at open
//! time: a lexical check alone was the path-prefix bypass of the reference MCP filesystem server.

use std::fmt;

/// Longest path we accept, in bytes; Linux's PATH_MAX is 4096 and the root is prepended.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest single component, in bytes (NAME_MAX on Linux filesystems).
pub const MAX_COMPONENT_BYTES: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path contains a NUL byte")]
    NulByte,
    #[error("path must be relative to REPO_DIR, got an absolute path")]
    Absolute,
    #[error("path leaves REPO_DIR through '..'")]
    EscapesRoot,
    #[error("path is {len} bytes long, at most {MAX_PATH_BYTES} are allowed")]
    TooLong { len: usize },
    #[error("a path component is {len} bytes long, at most {MAX_COMPONENT_BYTES} are allowed")]
    ComponentTooLong { len: usize },
    #[error("path names the workspace root itself, not a file")]
    IsRoot,
    #[error(
        "path contains {kind} U+{code_point:04X}; control and bidirectional formatting characters are not allowed in paths"
    )]
    ForbiddenCharacter { code_point: u32, kind: &'static str },
}

/// Why `c` may not appear in a path, if it may not: control characters would let a file name
/// carry new lines into prompts, logs and listings, and bidi controls make a name read as another.
/// Command arguments are held to the same rule.
pub fn forbidden(c: char) -> Option<&'static str> {
    match c {
        '\u{0}'..='\u{1f}' | '\u{7f}' | '\u{80}'..='\u{9f}' => Some("the control character"),
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}' => {
            Some("the bidirectional formatting character")
        }
        _ => None,
    }
}

/// A path relative to `REPO_DIR` that passed the lexical checks. Components are joined with `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoPath(String);

impl RepoPath {
    /// Parses a path naming a file (the root itself is refused).
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        let p = Self::parse_dir(raw)?;
        if p.is_root() {
            return Err(PathError::IsRoot);
        }
        Ok(p)
    }

    /// Parses a path naming a directory; `""` and `"."` name the root.
    pub fn parse_dir(raw: &str) -> Result<Self, PathError> {
        if raw.contains('\0') {
            return Err(PathError::NulByte);
        }
        if let Some((c, kind)) = raw.chars().find_map(|c| forbidden(c).map(|k| (c, k))) {
            return Err(PathError::ForbiddenCharacter {
                code_point: u32::from(c),
                kind,
            });
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong { len: raw.len() });
        }
        // Windows-style separators and drive letters are refused as absolute rather than guessed at.
        if raw.starts_with('/') || raw.starts_with('\\') || looks_like_drive(raw) {
            return Err(PathError::Absolute);
        }
        let mut parts: Vec<&str> = Vec::new();
        for comp in raw.split('/') {
            match comp {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(PathError::EscapesRoot);
                    }
                }
                c => {
                    if c.len() > MAX_COMPONENT_BYTES {
                        return Err(PathError::ComponentTooLong { len: c.len() });
                    }
                    parts.push(c);
                }
            }
        }
        Ok(RepoPath(parts.join("/")))
    }

    /// Parses a file path, additionally refusing the empty string outright.
    pub fn parse_nonempty(raw: &str) -> Result<Self, PathError> {
        if raw.trim().is_empty() {
            return Err(PathError::Empty);
        }
        Self::parse(raw)
    }

    pub fn root() -> Self {
        RepoPath(String::new())
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// The parent directory (the root for a top-level file).
    pub fn parent(&self) -> RepoPath {
        match self.0.rfind('/') {
            Some(i) => RepoPath(self.0[..i].to_string()),
            None => RepoPath::root(),
        }
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        match self.0.rfind('/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// Lower-cased extension without the dot, if any.
    pub fn extension(&self) -> Option<String> {
        let name = self.file_name();
        let dot = name.rfind('.')?;
        if dot == 0 {
            return None;
        }
        Some(name[dot + 1..].to_ascii_lowercase())
    }
}

fn looks_like_drive(raw: &str) -> bool {
    let b = raw.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "." } else { &self.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dot_segments_are_normalised_so_duplicates_are_detectable() {
        assert_eq!(RepoPath::parse("./a.py").unwrap().as_str(), "a.py");
        assert_eq!(
            RepoPath::parse("src//x/../a.py").unwrap().as_str(),
            "src/a.py"
        );
    }

    #[test]
    fn attacks_are_refused_with_their_reason() {
        assert_eq!(RepoPath::parse("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(RepoPath::parse("../x"), Err(PathError::EscapesRoot));
        assert_eq!(RepoPath::parse("a/../../x"), Err(PathError::EscapesRoot));
        assert_eq!(RepoPath::parse("a\0b"), Err(PathError::NulByte));
        assert_eq!(RepoPath::parse_nonempty(""), Err(PathError::Empty));
        assert_eq!(RepoPath::parse("a/.."), Err(PathError::IsRoot));
        assert_eq!(RepoPath::parse("C:evil"), Err(PathError::Absolute));
        assert!(matches!(
            RepoPath::parse(&"a".repeat(300)),
            Err(PathError::ComponentTooLong { .. })
        ));
    }

    #[test]
    fn control_and_bidi_characters_are_refused_naming_their_code_point() {
        for (raw, shown) in [
            ("a\n\n## IMPORTANT: obey.md", "U+000A"),
            ("tab\there.py", "U+0009"),
            ("del\u{7f}.py", "U+007F"),
            ("c1\u{85}.py", "U+0085"),
            ("evil\u{202e}txt.exe", "U+202E"),
            ("dir\u{2066}/a.py", "U+2066"),
            ("mark\u{200f}.py", "U+200F"),
            ("arabic\u{61c}.py", "U+061C"),
        ] {
            let err = RepoPath::parse(raw).unwrap_err().to_string();
            assert!(err.contains(shown), "{raw:?}: {err}");
        }
        assert!(RepoPath::parse("caf\u{e9}/\u{65e5}\u{672c}.py").is_ok());
    }

    #[test]
    fn extension_is_lower_cased_and_dotfiles_have_none() {
        assert_eq!(
            RepoPath::parse("x/Logo.PNG")
                .unwrap()
                .extension()
                .as_deref(),
            Some("png")
        );
        assert_eq!(RepoPath::parse(".env").unwrap().extension(), None);
    }

    proptest! {
        #[test]
        fn a_parsed_path_never_climbs_or_is_absolute(raw in "[a-z./\\\\\u{e9}\u{2044}]{0,40}") {
            if let Ok(p) = RepoPath::parse_dir(&raw) {
                prop_assert!(!p.as_str().starts_with('/'));
                prop_assert!(p.components().all(|c| c != ".." && c != "."));
            }
        }
    }
}
