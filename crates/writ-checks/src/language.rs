//! The languages writ knows by name: which one a file path is written in,
//! what to call it in a prompt, and which fence tags a model may use for it.

/// The language of a file, guessed from its path.
///
/// `Other` covers every file writ has no specific knowledge of (Dockerfile,
/// Makefile, plain text, …): such files are still synthesised, just not parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    Python,
    Rust,
    JavaScript,
    TypeScript,
    Tsx,
    Json,
    Toml,
    Yaml,
    Go,
    Html,
    Css,
    Svg,
    Markdown,
    Shell,
    Sql,
    Other,
}

impl Language {
    /// Every language, `Other` last (for tests and listings).
    pub const ALL: [Language; 16] = [
        Language::Python,
        Language::Rust,
        Language::JavaScript,
        Language::TypeScript,
        Language::Tsx,
        Language::Json,
        Language::Toml,
        Language::Yaml,
        Language::Go,
        Language::Html,
        Language::Css,
        Language::Svg,
        Language::Markdown,
        Language::Shell,
        Language::Sql,
        Language::Other,
    ];

    /// The language of the file at `path`, from its extension (case-insensitive)
    /// or, for a few well-known extension-less names, from its file name.
    ///
    /// Both `/` and `\` separate directories, so a Windows-style path works too.
    pub fn from_path(path: &str) -> Language {
        let file_name = path.rsplit(['/', '\\']).next().unwrap_or(path);
        // Lowercased on the stack: the repository map asks this of thousands of paths a batch.
        let mut short = [0_u8; 64];
        let owned;
        let lower: &str = match short.get_mut(..file_name.len()) {
            Some(buf) => {
                buf.copy_from_slice(file_name.as_bytes());
                buf.make_ascii_lowercase();
                match std::str::from_utf8(buf) {
                    Ok(lower) => lower,
                    Err(_) => return Language::Other,
                }
            }
            None => {
                owned = file_name.to_ascii_lowercase();
                &owned
            }
        };
        match lower {
            // Lock and manifest files that are TOML without saying so.
            "cargo.lock" | "pipfile" | "poetry.lock" | "uv.lock" => return Language::Toml,
            "dockerfile" | "containerfile" | "makefile" | "gnumakefile" => return Language::Other,
            ".bashrc" | ".bash_profile" | ".profile" => return Language::Shell,
            _ => {}
        }
        // A leading dot is a hidden file's name, not an extension (`.gitignore`).
        let Some((stem, extension)) = lower.rsplit_once('.') else {
            return Language::Other;
        };
        if stem.is_empty() {
            return Language::Other;
        }
        match extension {
            "py" | "pyi" | "pyw" => Language::Python,
            "rs" => Language::Rust,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "json" | "geojson" | "webmanifest" => Language::Json,
            "toml" => Language::Toml,
            "yaml" | "yml" => Language::Yaml,
            "go" => Language::Go,
            "html" | "htm" | "xhtml" => Language::Html,
            "css" => Language::Css,
            "svg" => Language::Svg,
            "md" | "markdown" => Language::Markdown,
            "sh" | "bash" | "zsh" => Language::Shell,
            "sql" => Language::Sql,
            _ => Language::Other,
        }
    }

    /// The usual file extension, without the dot (`None` for `Other`).
    pub fn extension(self) -> Option<&'static str> {
        Some(match self {
            Language::Python => "py",
            Language::Rust => "rs",
            Language::JavaScript => "js",
            Language::TypeScript => "ts",
            Language::Tsx => "tsx",
            Language::Json => "json",
            Language::Toml => "toml",
            Language::Yaml => "yaml",
            Language::Go => "go",
            Language::Html => "html",
            Language::Css => "css",
            Language::Svg => "svg",
            Language::Markdown => "md",
            Language::Shell => "sh",
            Language::Sql => "sql",
            Language::Other => return None,
        })
    }

    /// The language's name as a person writes it, for prompts ("Write this
    /// file in Python").
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "Python",
            Language::Rust => "Rust",
            Language::JavaScript => "JavaScript",
            Language::TypeScript => "TypeScript",
            Language::Tsx => "TSX",
            Language::Json => "JSON",
            Language::Toml => "TOML",
            Language::Yaml => "YAML",
            Language::Go => "Go",
            Language::Html => "HTML",
            Language::Css => "CSS",
            Language::Svg => "SVG",
            Language::Markdown => "Markdown",
            Language::Shell => "Shell",
            Language::Sql => "SQL",
            Language::Other => "plain text",
        }
    }

    /// The fence info-string tags (lower case) that mark a code block as this
    /// language. The first is the one to ask for in a prompt; `Other` has none.
    pub fn fence_tags(self) -> &'static [&'static str] {
        match self {
            Language::Python => &["python", "py", "python3", "py3"],
            Language::Rust => &["rust", "rs"],
            Language::JavaScript => &["javascript", "js", "jsx", "mjs", "cjs", "node"],
            Language::TypeScript => &["typescript", "ts", "mts", "cts"],
            // Models often tag TSX as plain TypeScript.
            Language::Tsx => &["tsx", "typescriptreact", "typescript", "ts"],
            Language::Json => &["json"],
            Language::Toml => &["toml"],
            Language::Yaml => &["yaml", "yml"],
            Language::Go => &["go", "golang"],
            Language::Html => &["html", "htm", "xhtml"],
            // A model asked for an SVG file may well call it XML.
            Language::Svg => &["svg", "xml"],
            Language::Css => &["css"],
            Language::Markdown => &["markdown", "md"],
            Language::Shell => &["bash", "sh", "shell", "zsh"],
            Language::Sql => &["sql", "postgresql", "postgres", "sqlite", "mysql", "plsql"],
            Language::Other => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Language;

    #[test]
    fn extensions_map_to_their_language() {
        let cases = [
            ("src/app.py", Language::Python),
            ("stubs/x.pyi", Language::Python),
            ("src/main.rs", Language::Rust),
            ("web/a.mjs", Language::JavaScript),
            ("web/a.cjs", Language::JavaScript),
            ("web/App.jsx", Language::JavaScript),
            ("web/a.ts", Language::TypeScript),
            ("web/types.d.ts", Language::TypeScript),
            ("web/a.mts", Language::TypeScript),
            ("web/App.tsx", Language::Tsx),
            ("package.json", Language::Json),
            ("Cargo.toml", Language::Toml),
            ("Cargo.lock", Language::Toml),
            (".github/workflows/ci.yml", Language::Yaml),
            ("k8s/deploy.yaml", Language::Yaml),
            ("cmd/main.go", Language::Go),
            ("index.HTML", Language::Html),
            ("site.css", Language::Css),
            ("logo.svg", Language::Svg),
            ("README.md", Language::Markdown),
            ("scripts/run.sh", Language::Shell),
            ("db/001_init.sql", Language::Sql),
            ("Dockerfile", Language::Other),
            ("Makefile", Language::Other),
            (".gitignore", Language::Other),
            ("notes.txt", Language::Other),
            ("", Language::Other),
            ("dir.d/", Language::Other),
            ("C:\\repo\\main.rs", Language::Rust),
        ];
        for (path, expected) in cases {
            assert_eq!(Language::from_path(path), expected, "{path}");
        }
    }

    #[test]
    fn every_language_but_other_has_a_fence_tag_and_a_name() {
        for language in Language::ALL.into_iter().filter(|l| *l != Language::Other) {
            assert!(!language.fence_tags().is_empty(), "{language:?}");
            assert!(!language.name().is_empty(), "{language:?}");
        }
        assert!(Language::Other.fence_tags().is_empty());
    }
}
