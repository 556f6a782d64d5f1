//! JavaScript's readings: exports, imports (`require` and `import`), `node:test` cases, and the
//! calls under test.

use std::collections::BTreeSet;

use tree_sitter::{Node, QueryCursor, StreamingIterator as _};

use super::queries::{Reading, reading};
use super::{Import, Source, TestCase, enclosing_function, identifiers};

/// What the module exports: `module.exports = { a, b: c }`, `module.exports = a`,
/// `module.exports.a = …`, `exports.a = …`, `export function a`, `export { a, b as c }`.
pub(super) fn exports(source: &Source<'_>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let root = source.root();
    let mut cursor = root.walk();
    for statement in root.named_children(&mut cursor) {
        match statement.kind() {
            "expression_statement" => {
                let Some(assignment) = statement
                    .named_child(0)
                    .filter(|n| n.kind() == "assignment_expression")
                else {
                    continue;
                };
                let (Some(left), Some(right)) = (
                    assignment.child_by_field_name("left"),
                    assignment.child_by_field_name("right"),
                ) else {
                    continue;
                };
                let target = source.text(left);
                if target == "module.exports" {
                    match right.kind() {
                        "object" => out.extend(object_keys(source, right)),
                        "identifier" => {
                            out.insert(source.text(right).to_string());
                        }
                        _ => {}
                    }
                } else if let Some(name) = target
                    .strip_prefix("module.exports.")
                    .or_else(|| target.strip_prefix("exports."))
                {
                    out.insert(name.to_string());
                }
            }
            "export_statement" => {
                if let Some(declaration) = statement.child_by_field_name("declaration") {
                    out.extend(declared(source, declaration));
                }
                let mut inner = statement.walk();
                for clause in statement
                    .named_children(&mut inner)
                    .filter(|c| c.kind() == "export_clause")
                {
                    let mut specifiers = clause.walk();
                    for specifier in clause.named_children(&mut specifiers) {
                        let shown = specifier
                            .child_by_field_name("alias")
                            .or_else(|| specifier.child_by_field_name("name"));
                        out.extend(shown.map(|n| source.text(n).to_string()));
                    }
                }
            }
            _ => {}
        }
    }
    out.retain(|n| n != "default");
    out
}

fn object_keys(source: &Source<'_>, object: Node<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = object.walk();
    for member in object.named_children(&mut cursor) {
        let key = match member.kind() {
            "shorthand_property_identifier" => Some(member),
            "pair" | "method_definition" => member
                .child_by_field_name("key")
                .or_else(|| member.child_by_field_name("name")),
            _ => None,
        };
        out.extend(key.map(|k| unquoted(source.text(k)).to_string()));
    }
    out
}

/// The names a declaration binds (`function a`, `class A`, `const a = …, b = …`).
fn declared(source: &Source<'_>, declaration: Node<'_>) -> Vec<String> {
    match declaration.kind() {
        "lexical_declaration" | "variable_declaration" => {
            let mut cursor = declaration.walk();
            declaration
                .named_children(&mut cursor)
                .filter_map(|d| d.child_by_field_name("name"))
                .filter(|n| n.kind() == "identifier")
                .map(|n| source.text(n).to_string())
                .collect()
        }
        _ => declaration
            .child_by_field_name("name")
            .map(|n| source.text(n).to_string())
            .into_iter()
            .collect(),
    }
}

fn unquoted(text: &str) -> &str {
    text.trim_matches(|c| matches!(c, '\'' | '"' | '`'))
}

pub(super) fn imports(source: &Source<'_>) -> Vec<Import> {
    let Some(query) = reading(Reading::JavaScriptImports) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, source.root(), source.code.as_bytes());
    while let Some(m) = matches.next() {
        let mut statement = None;
        let mut module = None;
        let mut function = "require";
        for capture in m.captures() {
            match query.capture_names()[capture.index as usize] {
                "module" => module = Some(capture.node),
                "function" => function = source.text(capture.node),
                _ => statement = Some(capture.node),
            }
        }
        let (Some(statement), Some(module)) = (statement, module) else {
            continue;
        };
        if function != "require" {
            continue;
        }
        let mut import = Import {
            module: unquoted(source.text(module)).to_string(),
            names: Vec::new(),
            binding: None,
            wildcard: false,
            range: statement.byte_range(),
            module_range: module.byte_range(),
        };
        if statement.kind() == "import_statement" {
            bind_import_clause(source, statement, &mut import);
        } else if let Some(declarator) = statement
            .parent()
            .filter(|p| p.kind() == "variable_declarator")
        {
            if let Some(whole) = declarator.parent() {
                import.range = whole.byte_range();
            }
            bind_pattern(source, declarator.child_by_field_name("name"), &mut import);
        }
        out.push(import);
    }
    out.sort_by_key(|i| i.range.start);
    out
}

/// `const x = require(…)` binds the module; `const { a, b: c } = require(…)` takes names.
fn bind_pattern(source: &Source<'_>, pattern: Option<Node<'_>>, import: &mut Import) {
    let Some(pattern) = pattern else { return };
    match pattern.kind() {
        "identifier" => import.binding = Some(source.text(pattern).to_string()),
        "object_pattern" => {
            let mut cursor = pattern.walk();
            for part in pattern.named_children(&mut cursor) {
                match part.kind() {
                    "shorthand_property_identifier_pattern" => {
                        import.names.push((source.text(part).to_string(), None));
                    }
                    "pair_pattern" => {
                        let key = part.child_by_field_name("key").map(|k| source.text(k));
                        let value = part.child_by_field_name("value").map(|v| source.text(v));
                        if let Some(key) = key {
                            import
                                .names
                                .push((key.to_string(), value.map(str::to_string)));
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// `import x from …`, `import * as x from …`, `import { a, b as c } from …`.
fn bind_import_clause(source: &Source<'_>, statement: Node<'_>, import: &mut Import) {
    let mut cursor = statement.walk();
    let Some(clause) = statement
        .named_children(&mut cursor)
        .find(|c| c.kind() == "import_clause")
    else {
        return;
    };
    let mut parts = clause.walk();
    for part in clause.named_children(&mut parts) {
        match part.kind() {
            "identifier" => import.binding = Some(source.text(part).to_string()),
            "namespace_import" => {
                let mut inner = part.walk();
                import.binding = part
                    .named_children(&mut inner)
                    .find(|n| n.kind() == "identifier")
                    .map(|n| source.text(n).to_string());
            }
            "named_imports" => {
                let mut inner = part.walk();
                for specifier in part.named_children(&mut inner) {
                    let name = specifier
                        .child_by_field_name("name")
                        .map(|n| source.text(n));
                    let alias = specifier
                        .child_by_field_name("alias")
                        .map(|n| source.text(n).to_string());
                    if let Some(name) = name {
                        import.names.push((name.to_string(), alias));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every `test('name', …)` and `it('name', …)` call, at any depth (inside `describe` too).
pub(super) fn test_cases(source: &Source<'_>) -> Vec<TestCase> {
    let mut out = Vec::new();
    calls(source, |call, callee, first| {
        if callee.kind() == "identifier"
            && matches!(source.text(callee), "test" | "it")
            && matches!(first.kind(), "string" | "template_string")
        {
            out.push(TestCase {
                id: unquoted(source.text(first)).to_string(),
                range: call.byte_range(),
                mark_at: callee.end_byte(),
            });
        }
    });
    out
}

/// Each call with its callee and its first argument, in order.
fn calls<'t>(source: &'t Source<'_>, mut found: impl FnMut(Node<'t>, Node<'t>, Node<'t>)) {
    let Some(query) = reading(Reading::JavaScriptCalls) else {
        return;
    };
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, source.root(), source.code.as_bytes());
    while let Some(m) = matches.next() {
        let mut call = None;
        let mut callee = None;
        let mut first = None;
        for capture in m.captures() {
            match query.capture_names()[capture.index as usize] {
                "callee" => callee = Some(capture.node),
                "checked" => first = Some(capture.node),
                _ => call = Some(capture.node),
            }
        }
        if let (Some(call), Some(callee), Some(first)) = (call, callee, first) {
            found(call, callee, first);
        }
    }
}

pub(super) fn probe_inputs(source: &Source<'_>, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if names.is_empty() {
        calls(source, |_, callee, first| {
            let checks_equality = matches!(
                source.text(callee),
                "assert.strictEqual"
                    | "assert.deepStrictEqual"
                    | "assert.equal"
                    | "assert.deepEqual"
            );
            if checks_equality && source.text(first).contains('(') {
                out.push((first.start_byte(), source.text(first).to_string()));
            }
        });
    } else {
        let mut stack = vec![source.root()];
        while let Some(node) = stack.pop() {
            if node.kind() == "call_expression" && calls_a_name(source, node, names) {
                if evaluable(source, node) {
                    out.push((node.start_byte(), source.text(node).to_string()));
                }
                continue;
            }
            let mut cursor = node.walk();
            stack.extend(node.named_children(&mut cursor));
        }
    }
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

fn calls_a_name(source: &Source<'_>, call: Node<'_>, names: &[String]) -> bool {
    let Some(function) = call.child_by_field_name("function") else {
        return false;
    };
    let name = match function.kind() {
        "identifier" => source.text(function),
        "member_expression"
            if function
                .child_by_field_name("object")
                .is_some_and(|o| o.kind() == "identifier") =>
        {
            function
                .child_by_field_name("property")
                .map_or("", |p| source.text(p))
        }
        _ => return false,
    };
    names.iter().any(|n| n == name)
}

fn evaluable(source: &Source<'_>, call: Node<'_>) -> bool {
    let mut used = BTreeSet::new();
    if let Some(arguments) = call.child_by_field_name("arguments") {
        identifiers(source, arguments, &mut used);
    }
    let mut function = enclosing_function(call);
    // Every function around the call may bind what it uses (`describe(() => { const x … })`).
    while let Some(f) = function {
        let mut bound = BTreeSet::new();
        if let Some(parameters) = f
            .child_by_field_name("parameters")
            .or_else(|| f.child_by_field_name("parameter"))
        {
            identifiers(source, parameters, &mut bound);
        }
        let mut stack: Vec<Node<'_>> = f.child_by_field_name("body").into_iter().collect();
        while let Some(node) = stack.pop() {
            match node.kind() {
                "variable_declarator" => {
                    if let Some(name) = node.child_by_field_name("name") {
                        identifiers(source, name, &mut bound);
                    }
                }
                "for_in_statement" => {
                    if let Some(left) = node.child_by_field_name("left") {
                        identifiers(source, left, &mut bound);
                    }
                }
                _ => {}
            }
            let mut cursor = node.walk();
            stack.extend(node.named_children(&mut cursor));
        }
        if !used.is_disjoint(&bound) {
            return false;
        }
        function = enclosing_function(f);
    }
    true
}
