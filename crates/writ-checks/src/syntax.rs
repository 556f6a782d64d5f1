//! Whether a candidate's code parses, for the languages writ has a parser
//! for. A candidate that does not parse ranks below those that do.
//!
//! | language | parser | why |
//! |---|---|---|
//! | Python, Rust, JavaScript, TypeScript, TSX, Go, HTML, CSS | tree-sitter grammar | one tolerant-but-honest parser per language; a tree with an ERROR or MISSING node fails |
//! | JSON | `serde_json` | strict RFC 8259 (no comments, no trailing commas), already a dependency |
//! | TOML | `toml` | the reference parser for the spec, also rejects duplicate keys |
//! | YAML | `yaml_serde` | libyaml semantics, every document of a stream, duplicate keys rejected; tree-sitter-yaml accepts more |
//! | SVG | `roxmltree` | well-formed XML whose root is `<svg>` in the SVG namespace |
//! | Markdown, Shell, SQL, other | none | `None`: no opinion |
//!
//! Shell has no parser on purpose: the bash grammar is ~10 MB of C, a heavy
//! build for a check that rarely separates candidates. The tree-sitter JSON,
//! TOML and YAML grammars are not used because the serde parsers above are
//! stricter and already compiled for the rest of writ.
//!
//! Hostile input is bounded: code over [`MAX_PARSE_BYTES`] is not parsed, and
//! a tree-sitter parse that runs past [`PARSE_TIME_LIMIT`] is abandoned; both
//! give `None`; so does YAML nested more than 128 brackets deep, which
//! libyaml handles in quadratic time. JSON and YAML parsers refuse more than
//! 128 levels of nesting.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde::Deserialize as _;
use serde::de::IgnoredAny;

use crate::language::Language;

/// Code longer than this (in bytes) is not parsed: `syntax_ok` gives `None`.
pub const MAX_PARSE_BYTES: usize = 2 * 1024 * 1024;

/// A tree-sitter parse still running after this long is abandoned.
pub const PARSE_TIME_LIMIT: Duration = Duration::from_secs(2);

const SVG_NAMESPACE: &str = "http://www.w3.org/2000/svg";

/// Whether `code` parses as `lang`: `Some(true)` or `Some(false)` where writ
/// has a parser for the language, `None` where it has none, and for code too
/// large or too slow to parse.
pub fn syntax_ok(code: &str, lang: Language) -> Option<bool> {
    if code.len() > MAX_PARSE_BYTES {
        return None;
    }
    match lang {
        Language::Python
        | Language::Rust
        | Language::JavaScript
        | Language::TypeScript
        | Language::Tsx
        | Language::Go => grammar(lang).and_then(|g| tree_sitter_ok(code, g)),
        Language::Html => tree_sitter_ok(code, tree_sitter_html::LANGUAGE.into()),
        Language::Css => tree_sitter_ok(code, tree_sitter_css::LANGUAGE.into()),
        Language::Json => Some(serde_json::from_str::<IgnoredAny>(code).is_ok()),
        Language::Toml => Some(code.parse::<toml::Table>().is_ok()),
        Language::Yaml => yaml_ok(code),
        Language::Svg => Some(svg_ok(code)),
        Language::Markdown | Language::Shell | Language::Sql | Language::Other => None,
    }
}

/// The tree-sitter grammar writ has for `lang`, if any.
pub(crate) fn grammar(lang: Language) -> Option<tree_sitter::Language> {
    Some(match lang {
        Language::Python => tree_sitter_python::LANGUAGE.into(),
        Language::Rust => tree_sitter_rust::LANGUAGE.into(),
        Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
        Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
        Language::Go => tree_sitter_go::LANGUAGE.into(),
        _ => return None,
    })
}

/// Parses `code` within [`PARSE_TIME_LIMIT`]; `None` past it or on an ABI mismatch.
pub(crate) fn parse_bounded(
    code: &str,
    language: tree_sitter::Language,
) -> Option<tree_sitter::Tree> {
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&language).ok()?;
    let deadline = Instant::now() + PARSE_TIME_LIMIT;
    let mut progress = |_: &tree_sitter::ParseState| {
        if Instant::now() > deadline {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let options = tree_sitter::ParseOptions::new().progress_callback(&mut progress);
    let bytes = code.as_bytes();
    parser.parse_with_options(
        &mut |offset, _| bytes.get(offset..).unwrap_or_default(),
        None,
        Some(options),
    )
}

/// Parse with a fresh parser (cheap next to the parse itself, and a parser
/// halted by the time limit would otherwise need resetting). An ABI mismatch
/// between grammar and library, or the time limit, means no opinion.
fn tree_sitter_ok(code: &str, language: tree_sitter::Language) -> Option<bool> {
    let tree = parse_bounded(code, language)?;
    Some(!tree.root_node().has_error())
}

/// Deeper flow nesting than this is not parsed: libyaml's time grows with the
/// square of it (200,000 levels take minutes), and `yaml_serde` refuses more
/// than 128 levels anyway.
const MAX_YAML_FLOW_DEPTH: usize = 128;

fn yaml_ok(code: &str) -> Option<bool> {
    // Brackets in strings and comments count too, so a deep count is "no
    // opinion" rather than a failure.
    if max_bracket_depth(code) > MAX_YAML_FLOW_DEPTH {
        return None;
    }
    // Each document of a `---`-separated stream must parse. A stream that
    // failed to load keeps yielding the failure, so stopping at the first
    // error also ends the loop.
    for document in yaml_serde::Deserializer::from_str(code) {
        if yaml_serde::Value::deserialize(document).is_err() {
            return Some(false);
        }
    }
    Some(true)
}

fn max_bracket_depth(code: &str) -> usize {
    let mut depth = 0_usize;
    let mut deepest = 0;
    for byte in code.bytes() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn svg_ok(code: &str) -> bool {
    // Many SVG files carry a DOCTYPE; roxmltree guards against entity
    // expansion bombs itself, and the node limit bounds memory.
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        nodes_limit: 1_000_000,
        ..roxmltree::ParsingOptions::default()
    };
    let Ok(document) = roxmltree::Document::parse_with_options(code, options) else {
        return false;
    };
    let root = document.root_element().tag_name();
    // Without the namespace a browser shows a standalone .svg as XML source.
    root.name() == "svg" && root.namespace() == Some(SVG_NAMESPACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tree_sitter_grammar_loads() {
        for lang in [
            Language::Python,
            Language::Rust,
            Language::JavaScript,
            Language::TypeScript,
            Language::Tsx,
            Language::Go,
            Language::Html,
            Language::Css,
        ] {
            assert!(syntax_ok("", lang).is_some(), "{lang:?}");
        }
    }

    #[test]
    fn languages_without_a_parser_have_no_opinion() {
        for lang in [
            Language::Markdown,
            Language::Shell,
            Language::Sql,
            Language::Other,
        ] {
            assert_eq!(syntax_ok("anything at all", lang), None);
        }
    }

    #[test]
    fn code_over_the_size_limit_is_not_parsed() {
        let huge = "x = 1\n".repeat(MAX_PARSE_BYTES / 6 + 1);
        assert_eq!(syntax_ok(&huge, Language::Python), None);
    }

    #[test]
    fn deep_nesting_fails_without_overflowing_the_stack() {
        let depth = 200_000;
        let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        for lang in [
            Language::Json,
            Language::Yaml,
            Language::JavaScript,
            Language::Python,
        ] {
            // Only that it returns: the verdict on such input does not matter.
            let _ = syntax_ok(&arrays, lang);
        }
        let _ = syntax_ok(&format!("a = {arrays}"), Language::Toml);
        let tables = format!("a = {}{}", "{b = ".repeat(depth), "}".repeat(depth));
        let _ = syntax_ok(&tables, Language::Toml);
        let mappings = format!("{}{}", "{a: ".repeat(depth), "}".repeat(depth));
        assert_eq!(syntax_ok(&mappings, Language::Yaml), None);
        let _ = syntax_ok(&format!("{{\"a\": {arrays}}}"), Language::Json);
        let blocks = format!("fn f() {}{}", "{".repeat(depth), "}".repeat(depth));
        let _ = syntax_ok(&blocks, Language::Rust);
        let elements = format!(
            "<svg xmlns=\"{SVG_NAMESPACE}\">{}{}</svg>",
            "<g>".repeat(depth),
            "</g>".repeat(depth)
        );
        let _ = syntax_ok(&elements, Language::Svg);
    }

    #[test]
    fn a_multi_document_yaml_stream_is_checked_document_by_document() {
        assert_eq!(syntax_ok("a: 1\n---\nb: 2\n", Language::Yaml), Some(true));
        assert_eq!(syntax_ok("a: 1\n---\nb: [2\n", Language::Yaml), Some(false));
    }

    #[test]
    fn duplicate_keys_fail_in_toml_and_yaml() {
        assert_eq!(syntax_ok("a = 1\na = 2\n", Language::Toml), Some(false));
        assert_eq!(syntax_ok("a: 1\na: 2\n", Language::Yaml), Some(false));
    }
}
