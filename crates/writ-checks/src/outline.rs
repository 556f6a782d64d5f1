//! An outline of a source file: the first line of each top-level definition (and of each
//! definition directly inside a top-level class or impl), in order. Shown to models in place of
//! a repository file too large to show whole, so they still write against its real API.

use crate::language::Language;
use crate::syntax::{MAX_PARSE_BYTES, grammar, parse_bounded};

/// Node kinds whose children are definitions worth listing too (methods).
const CONTAINERS: &[&str] = &[
    "class_definition",
    "decorated_definition",
    "class_declaration",
    "class",
    "impl_item",
    "trait_item",
    "block",
    "class_body",
    "declaration_list",
];

/// The outline of `code`, one line per definition; without a grammar for the language (or for
/// code too large to parse), the lines that start at column 0 and are not blank or comments.
pub fn outline(code: &str, lang: Language) -> String {
    let tree = match grammar(lang) {
        Some(g) if code.len() <= MAX_PARSE_BYTES => parse_bounded(code, g),
        _ => None,
    };
    let Some(tree) = tree else {
        return code
            .lines()
            .filter(|l| {
                !l.is_empty()
                    && !l.starts_with(char::is_whitespace)
                    && !l.starts_with('#')
                    && !l.starts_with("//")
            })
            .collect::<Vec<_>>()
            .join("\n");
    };
    let mut lines: Vec<String> = Vec::new();
    let root = tree.root_node();
    let mut cursor = root.walk();
    for node in root.named_children(&mut cursor) {
        push_first_line(code, node, 0, &mut lines);
        let mut inner = node.walk();
        for child in node.named_children(&mut inner) {
            if CONTAINERS.contains(&child.kind()) || CONTAINERS.contains(&node.kind()) {
                let mut deeper = child.walk();
                let members: Vec<_> = if CONTAINERS.contains(&child.kind()) {
                    child.named_children(&mut deeper).collect()
                } else {
                    vec![child]
                };
                for m in members {
                    if m.kind().contains("definition")
                        || m.kind().contains("declaration")
                        || m.kind().ends_with("_item")
                        || m.kind() == "method_definition"
                    {
                        push_first_line(code, m, 1, &mut lines);
                    }
                }
            }
        }
    }
    lines.dedup();
    lines.join("\n")
}

fn push_first_line(code: &str, node: tree_sitter::Node<'_>, depth: usize, out: &mut Vec<String>) {
    let text = code.get(node.start_byte()..node.end_byte()).unwrap_or("");
    let Some(first) = text
        .lines()
        .map(str::trim_end)
        .find(|l| !l.trim().is_empty())
    else {
        return;
    };
    if first.trim_start().starts_with('#') && depth == 0 && node.kind() == "comment" {
        return;
    }
    let indent = "    ".repeat(depth);
    out.push(format!("{indent}{}", first.trim_start()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_outline_lists_functions_classes_and_methods_not_bodies() {
        let code = "import os\n\nX = 1\n\ndef add(a, b):\n    return a + b\n\nclass Stack:\n    def push(self, x):\n        self.items.append(x)\n\n    def pop(self):\n        return self.items.pop()\n";
        let o = outline(code, Language::Python);
        assert!(o.contains("def add(a, b):"), "{o}");
        assert!(o.contains("class Stack:"), "{o}");
        assert!(o.contains("    def push(self, x):"), "{o}");
        assert!(!o.contains("return a + b"), "{o}");
        assert!(!o.contains("append"), "{o}");
    }

    #[test]
    fn without_a_grammar_the_outline_is_the_unindented_lines() {
        let o = outline("# c\nSELECT 1;\n  indented\n", Language::Sql);
        assert_eq!(o, "SELECT 1;");
    }
}
