//! The tree-sitter queries the analysis reads source with, one set per grammar, compiled once.
//!
//! Capture names: a definition is captured whole as `@function`, `@class`, `@type`,
//! `@constant`, `@variable`, `@module` or `@impl`, with its name as `@name`.

use std::sync::LazyLock;

use tree_sitter::Query;

use crate::language::Language;
use crate::syntax::grammar;

const PYTHON_DEFINITIONS: &str = r#"
(function_definition name: (identifier) @name) @function
(class_definition name: (identifier) @name) @class
(module (expression_statement (assignment left: (identifier) @name) @constant))
"#;

const JAVASCRIPT_DEFINITIONS: &str = r#"
(function_declaration name: (identifier) @name) @function
(generator_function_declaration name: (identifier) @name) @function
(class_declaration name: (_) @name) @class
(method_definition name: (_) @name) @function
(variable_declarator name: (identifier) @name) @variable
"#;

/// TypeScript and TSX: JavaScript's definitions and the type-level ones.
const TYPESCRIPT_DEFINITIONS: &str = r#"
(function_declaration name: (identifier) @name) @function
(generator_function_declaration name: (identifier) @name) @function
(class_declaration name: (_) @name) @class
(abstract_class_declaration name: (_) @name) @class
(method_definition name: (_) @name) @function
(variable_declarator name: (identifier) @name) @variable
(interface_declaration name: (_) @name) @type
(type_alias_declaration name: (_) @name) @type
(enum_declaration name: (_) @name) @type
(internal_module name: (_) @name) @module
"#;

const RUST_DEFINITIONS: &str = r#"
(function_item name: (identifier) @name) @function
(function_signature_item name: (identifier) @name) @function
(struct_item name: (_) @name) @type
(enum_item name: (_) @name) @type
(union_item name: (_) @name) @type
(type_item name: (_) @name) @type
(trait_item name: (_) @name) @class
(const_item name: (_) @name) @constant
(static_item name: (_) @name) @constant
(mod_item name: (_) @name) @module
(macro_definition name: (_) @name) @function
(impl_item type: (_) @name) @impl
"#;

const GO_DEFINITIONS: &str = r#"
(function_declaration name: (identifier) @name) @function
(method_declaration name: (field_identifier) @name) @function
(type_spec name: (type_identifier) @name) @type
"#;

/// A grammar's compiled definitions query; `None` without a grammar for the language (or, never
/// expected, a query the grammar refuses, which the tests below would catch).
pub(super) fn definitions(language: Language) -> Option<&'static Query> {
    static PYTHON: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::Python, PYTHON_DEFINITIONS));
    static JAVASCRIPT: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::JavaScript, JAVASCRIPT_DEFINITIONS));
    static TYPESCRIPT: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::TypeScript, TYPESCRIPT_DEFINITIONS));
    static TSX: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::Tsx, TYPESCRIPT_DEFINITIONS));
    static RUST: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::Rust, RUST_DEFINITIONS));
    static GO: LazyLock<Option<Query>> = LazyLock::new(|| compile(Language::Go, GO_DEFINITIONS));
    match language {
        Language::Python => PYTHON.as_ref(),
        Language::JavaScript => JAVASCRIPT.as_ref(),
        Language::TypeScript => TYPESCRIPT.as_ref(),
        Language::Tsx => TSX.as_ref(),
        Language::Rust => RUST.as_ref(),
        Language::Go => GO.as_ref(),
        _ => None,
    }
}

/// Python's imports: `import a.b [as c]` and `from a.b import x [as y], *`.
const PYTHON_IMPORTS: &str = r#"
(import_statement name: (dotted_name) @module) @import
(import_statement name: (aliased_import name: (dotted_name) @module alias: (identifier) @alias)) @import
(import_from_statement module_name: (_) @module) @import_from
"#;

/// Python's assertions and the calls that may be unittest's `self.assert…(…)`.
const PYTHON_ASSERTIONS: &str = r#"
(assert_statement . (_) @checked) @assert
(call function: (attribute object: (identifier) @object attribute: (identifier) @method) arguments: (argument_list . (_) @checked)) @call
"#;

/// JavaScript's `require('…')` and `import … from '…'`.
const JAVASCRIPT_IMPORTS: &str = r#"
(call_expression function: (identifier) @function arguments: (arguments . (string) @module)) @require
(import_statement source: (string) @module) @import
"#;

/// JavaScript's calls with their callee and first argument (`assert.strictEqual(x, …)`,
/// `test('name', …)`).
const JAVASCRIPT_CALLS: &str = r#"
(call_expression function: (_) @callee arguments: (arguments . (_) @checked)) @call
"#;

/// The readings other than definitions, each a query for one grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    PythonImports,
    PythonAssertions,
    JavaScriptImports,
    JavaScriptCalls,
}

/// `reading`'s compiled query, kept for the life of the process.
pub(super) fn reading(reading: Reading) -> Option<&'static Query> {
    static PYTHON_IMPORTS_Q: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::Python, PYTHON_IMPORTS));
    static PYTHON_ASSERTIONS_Q: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::Python, PYTHON_ASSERTIONS));
    static JAVASCRIPT_IMPORTS_Q: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::JavaScript, JAVASCRIPT_IMPORTS));
    static JAVASCRIPT_CALLS_Q: LazyLock<Option<Query>> =
        LazyLock::new(|| compile(Language::JavaScript, JAVASCRIPT_CALLS));
    match reading {
        Reading::PythonImports => PYTHON_IMPORTS_Q.as_ref(),
        Reading::PythonAssertions => PYTHON_ASSERTIONS_Q.as_ref(),
        Reading::JavaScriptImports => JAVASCRIPT_IMPORTS_Q.as_ref(),
        Reading::JavaScriptCalls => JAVASCRIPT_CALLS_Q.as_ref(),
    }
}

fn compile(language: Language, text: &str) -> Option<Query> {
    Query::new(&grammar(language)?, text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_compiles_for_its_grammar() {
        for language in [
            Language::Python,
            Language::JavaScript,
            Language::TypeScript,
            Language::Tsx,
            Language::Rust,
            Language::Go,
        ] {
            assert!(definitions(language).is_some(), "{language:?}");
        }
        for r in [
            Reading::PythonImports,
            Reading::PythonAssertions,
            Reading::JavaScriptImports,
            Reading::JavaScriptCalls,
        ] {
            assert!(reading(r).is_some(), "{r:?}");
        }
    }
}
