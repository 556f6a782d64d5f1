//! Python's readings: imports, pytest's and unittest's test cases, and the calls under test.

use std::collections::BTreeSet;

use tree_sitter::{Node, QueryCursor, StreamingIterator as _};

use super::queries::{Reading, reading};
use super::{Import, Source, TestCase, enclosing_function, identifiers};

pub(super) fn imports(source: &Source<'_>) -> Vec<Import> {
    let Some(query) = reading(Reading::PythonImports) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, source.root(), source.code.as_bytes());
    while let Some(m) = matches.next() {
        let mut statement = None;
        let mut module = None;
        let mut alias = None;
        let mut from = false;
        for capture in m.captures() {
            match query.capture_names()[capture.index as usize] {
                "module" => module = Some(capture.node),
                "alias" => alias = Some(source.text(capture.node).to_string()),
                "import_from" => {
                    statement = Some(capture.node);
                    from = true;
                }
                _ => statement = Some(capture.node),
            }
        }
        let (Some(statement), Some(module)) = (statement, module) else {
            continue;
        };
        let mut import = Import {
            module: source.text(module).to_string(),
            names: Vec::new(),
            binding: None,
            wildcard: false,
            range: statement.byte_range(),
            module_range: module.byte_range(),
        };
        if from {
            let mut cursor = statement.walk();
            for name in statement.children_by_field_name("name", &mut cursor) {
                import.names.push(match name.kind() {
                    "aliased_import" => (
                        field_text(source, name, "name"),
                        Some(field_text(source, name, "alias")),
                    ),
                    _ => (source.text(name).to_string(), None),
                });
            }
            let mut cursor = statement.walk();
            import.wildcard = statement
                .named_children(&mut cursor)
                .any(|c| c.kind() == "wildcard_import");
        } else {
            // `import a.b` binds `a`; `import a.b as c` binds `c`.
            import.binding = Some(alias.unwrap_or_else(|| {
                import
                    .module
                    .split('.')
                    .next()
                    .unwrap_or_default()
                    .to_string()
            }));
        }
        out.push(import);
    }
    out.sort_by_key(|i| i.range.start);
    out
}

fn field_text(source: &Source<'_>, node: Node<'_>, field: &str) -> String {
    node.child_by_field_name(field)
        .map(|n| source.text(n).to_string())
        .unwrap_or_default()
}

/// The definition inside a `decorated_definition`, or the node itself.
fn undecorated(node: Node<'_>) -> Node<'_> {
    if node.kind() == "decorated_definition" {
        node.child_by_field_name("definition").unwrap_or(node)
    } else {
        node
    }
}

/// pytest's collection: `test…` functions at the top, and the `test…` methods of top-level
/// classes named `Test…` or deriving from a `…TestCase`.
pub(super) fn test_cases(source: &Source<'_>) -> Vec<TestCase> {
    let mut out = Vec::new();
    let root = source.root();
    let mut cursor = root.walk();
    for outer in root.named_children(&mut cursor) {
        let node = undecorated(outer);
        let name = field_text(source, node, "name");
        match node.kind() {
            "function_definition" if name.starts_with("test") => {
                out.push(case(source, name, outer));
            }
            "class_definition" => {
                let bases = node
                    .child_by_field_name("superclasses")
                    .map_or("", |b| source.text(b));
                if !(name.starts_with("Test") || bases.contains("TestCase")) {
                    continue;
                }
                let Some(body) = node.child_by_field_name("body") else {
                    continue;
                };
                let mut inner = body.walk();
                for member in body.named_children(&mut inner) {
                    let method = undecorated(member);
                    let method_name = field_text(source, method, "name");
                    if method.kind() == "function_definition" && method_name.starts_with("test") {
                        out.push(case(source, format!("{name}::{method_name}"), member));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn case(source: &Source<'_>, id: String, node: Node<'_>) -> TestCase {
    let start = node.start_byte();
    let line_start = source.code[..start].rfind('\n').map_or(0, |i| i + 1);
    TestCase {
        id,
        range: node.byte_range(),
        mark_at: line_start,
    }
}

pub(super) fn probe_inputs(source: &Source<'_>, names: &[String]) -> Vec<String> {
    if names.is_empty() {
        return checked_sides(source);
    }
    let mut out = Vec::new();
    let mut stack = vec![source.root()];
    while let Some(node) = stack.pop() {
        if node.kind() == "call" && calls_a_name(source, node, names) {
            if evaluable(source, node) {
                out.push((node.start_byte(), source.text(node).to_string()));
            }
            // The outermost call of a name under test is the input; calls inside it are
            // part of it.
            continue;
        }
        let mut cursor = node.walk();
        stack.extend(node.named_children(&mut cursor));
    }
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// Whether `call` calls one of `names`, directly (`f(…)`) or through a module (`m.f(…)`).
fn calls_a_name(source: &Source<'_>, call: Node<'_>, names: &[String]) -> bool {
    let Some(function) = call.child_by_field_name("function") else {
        return false;
    };
    let name = match function.kind() {
        "identifier" => source.text(function),
        "attribute"
            if function
                .child_by_field_name("object")
                .is_some_and(|o| o.kind() == "identifier" && source.text(o) != "self") =>
        {
            function
                .child_by_field_name("attribute")
                .map_or("", |a| source.text(a))
        }
        _ => return false,
    };
    names.iter().any(|n| n == name)
}

/// Whether `call` uses nothing bound inside the function around it (a parameter, a local), so
/// it can be evaluated with the test module's names alone.
fn evaluable(source: &Source<'_>, call: Node<'_>) -> bool {
    let Some(function) = enclosing_function(call) else {
        return true;
    };
    let mut used = BTreeSet::new();
    if let Some(arguments) = call.child_by_field_name("arguments") {
        identifiers(source, arguments, &mut used);
    }
    let locals = locals(source, function);
    used.is_disjoint(&locals)
}

/// The names a function binds: its parameters and what it assigns, loops over or opens.
fn locals<'c>(source: &Source<'c>, function: Node<'_>) -> BTreeSet<&'c str> {
    let mut out = BTreeSet::new();
    if let Some(parameters) = function.child_by_field_name("parameters") {
        identifiers(source, parameters, &mut out);
    }
    let mut stack = function
        .child_by_field_name("body")
        .into_iter()
        .collect::<Vec<_>>();
    while let Some(node) = stack.pop() {
        let bound = match node.kind() {
            "assignment" | "augmented_assignment" | "for_statement" => {
                node.child_by_field_name("left")
            }
            "as_pattern" => node.child_by_field_name("alias"),
            "named_expression" => node.child_by_field_name("name"),
            "function_definition" | "class_definition" => node.child_by_field_name("name"),
            _ => None,
        };
        if let Some(bound) = bound {
            identifiers(source, bound, &mut out);
        }
        let mut cursor = node.walk();
        stack.extend(node.named_children(&mut cursor));
    }
    out
}

/// Without names: the left side of each `assert … == …` and the first argument of each
/// `self.assertEqual(…)`, when it holds a call.
fn checked_sides(source: &Source<'_>) -> Vec<String> {
    let Some(query) = reading(Reading::PythonAssertions) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, source.root(), source.code.as_bytes());
    while let Some(m) = matches.next() {
        let mut checked = None;
        let mut method = "";
        let mut is_assert = false;
        for capture in m.captures() {
            match query.capture_names()[capture.index as usize] {
                "checked" => checked = Some(capture.node),
                "method" => method = source.text(capture.node),
                "assert" => is_assert = true,
                _ => {}
            }
        }
        let Some(checked) = checked else { continue };
        let side = if is_assert {
            (checked.kind() == "comparison_operator" && equality(source, checked))
                .then(|| checked.named_child(0))
                .flatten()
        } else {
            matches!(method, "assertEqual" | "assertEquals").then_some(checked)
        };
        if let Some(side) = side.filter(|s| source.text(*s).contains('(')) {
            out.push((side.start_byte(), source.text(side).to_string()));
        }
    }
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// Whether a comparison is one `a == b`.
fn equality(source: &Source<'_>, comparison: Node<'_>) -> bool {
    let mut cursor = comparison.walk();
    let operators: Vec<&str> = comparison
        .children_by_field_name("operators", &mut cursor)
        .map(|o| source.text(o))
        .collect();
    operators == ["=="]
}
