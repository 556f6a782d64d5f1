//! Reading source code, once, with tree-sitter: what a file defines, which of its names are
//! public, what it imports, the tests it holds and the calls its assertions check. Every part of
//! writ that needs to know such a thing asks here, so a definition is recognised the same way
//! by the repository map, the checks on an update and the generated checks.
//!
//! - [`Source::parse`] parses once (bounded as [`crate::syntax`] bounds every parse); the
//!   readings are queries over that one tree ([`queries`]).
//! - [`Source::definitions`]: functions, classes, methods, types, module constants, with their
//!   qualified names (`Class.method`); what a function keeps local is its own and not listed.
//! - [`Source::public_names`]: what another file may import — the top-level public functions
//!   and classes (Python), or what the module exports (JavaScript), or its top-level
//!   declarations when it exports nothing explicitly.
//! - [`Source::imports`]: the modules imported and the names taken from each.
//! - [`Source::test_cases`]: the tests a runner would collect: pytest's `test…` functions and
//!   the `test…` methods of `Test…` and `unittest.TestCase` classes; `node:test`'s
//!   `test('…')` / `it('…')`.
//! - [`Source::probe_inputs`]: the calls of the names under test that a test file's checks
//!   make, as expressions that can be evaluated alone.
//! - [`Source::complete_prefix`]: what of a file cut off mid-way is whole.
//! - [`line_definition`]: the name one line of a search result defines.
//! - [`doctest_examples`]: a description's `>>> call` examples and the outputs it gives.
//!
//! Languages without a grammar have no source reading: `Source::parse` gives `None`, and
//! [`line_definition`] falls back to the keywords that open definitions in most languages.

mod javascript;
mod python;
mod queries;

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use tree_sitter::{Node, QueryCursor, StreamingIterator as _, Tree};

use crate::language::Language;
use crate::syntax::{MAX_PARSE_BYTES, grammar, parse_bounded};

/// Source code parsed once; the readings below are queries over its tree.
pub struct Source<'c> {
    code: &'c str,
    language: Language,
    tree: Tree,
}

/// What a definition defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefinitionKind {
    /// A function or a method.
    Function,
    /// A class, or a trait (which holds methods the way a class does).
    Class,
    /// A struct, enum, interface or type alias.
    Type,
    /// A name bound once at module level (`MAX_RETRIES = 3`), or a Rust `const`/`static`.
    Constant,
    /// A JavaScript `const`/`let`/`var` binding.
    Variable,
    /// A Rust `mod` or a TypeScript namespace.
    Module,
}

/// One definition of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    /// With the names of the classes, traits, impls and modules around it (`Stack.pop`).
    pub qualified: String,
    pub kind: DefinitionKind,
    /// Not inside another definition (a class, an impl, a module).
    pub top_level: bool,
    /// The whole definition, its decorators included.
    pub range: Range<usize>,
}

/// One import of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// As written: `calc`, `pkg.calc`, `.calc`, `'../calc.js'` (without its quotes).
    pub module: String,
    /// The names taken from it, with the local name each is bound to when it differs.
    pub names: Vec<(String, Option<String>)>,
    /// The local name the module itself is bound to (`import calc`, `import calc as c`,
    /// `const calc = require(…)`); `None` where only names are taken from it.
    pub binding: Option<String>,
    /// `from calc import *`.
    pub wildcard: bool,
    /// The whole import statement.
    pub range: Range<usize>,
    /// The module as written in it (quotes included for JavaScript).
    pub module_range: Range<usize>,
}

/// One test case a runner would collect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestCase {
    /// As the runner names it after the file: `test_add`, `TestCalc::test_add` (pytest), or the
    /// name given to `test('…')` (node).
    pub id: String,
    /// The whole test (its decorators included), or the whole `test(…)` call.
    pub range: Range<usize>,
    /// Python: where the test's definition line begins, for a decorator; JavaScript: the end
    /// of the callee (`test`), for `.skip`.
    pub mark_at: usize,
}

impl<'c> Source<'c> {
    /// `None` without a grammar for `language`, for code over [`MAX_PARSE_BYTES`], or for a
    /// parse past the time limit.
    pub fn parse(code: &'c str, language: Language) -> Option<Self> {
        if code.len() > MAX_PARSE_BYTES {
            return None;
        }
        let tree = parse_bounded(code, grammar(language)?)?;
        Some(Source {
            code,
            language,
            tree,
        })
    }

    pub fn code(&self) -> &'c str {
        self.code
    }

    pub fn language(&self) -> Language {
        self.language
    }

    /// Whether the parse found an error or a missing token anywhere.
    pub fn has_errors(&self) -> bool {
        self.tree.root_node().has_error()
    }

    fn root(&self) -> Node<'_> {
        self.tree.root_node()
    }

    fn text(&self, node: Node<'_>) -> &'c str {
        self.code.get(node.byte_range()).unwrap_or_default()
    }

    /// Every definition outside a function's body, in order.
    pub fn definitions(&self) -> Vec<Definition> {
        let Some(query) = queries::definitions(self.language) else {
            return Vec::new();
        };
        // (node, kind, name); `None` for an impl, which only names what is inside it.
        let mut found: Vec<(Node<'_>, Option<DefinitionKind>, &str)> = Vec::new();
        let mut cursor = QueryCursor::new();
        let mut matches = cursor.matches(query, self.root(), self.code.as_bytes());
        while let Some(m) = matches.next() {
            let mut whole = None;
            let mut name = None;
            for capture in m.captures() {
                match query.capture_names()[capture.index as usize] {
                    "name" => name = Some(self.text(capture.node)),
                    kind => whole = Some((capture.node, kind_of(kind))),
                }
            }
            if let (Some((node, kind)), Some(name)) = (whole, name) {
                found.push((node, kind, name));
            }
        }
        found.sort_by_key(|(node, ..)| (node.start_byte(), std::cmp::Reverse(node.end_byte())));
        let at: HashMap<usize, usize> = found
            .iter()
            .enumerate()
            .map(|(i, (node, ..))| (node.id(), i))
            .collect();
        let mut out = Vec::new();
        'definitions: for &(node, kind, name) in &found {
            let Some(kind) = kind else { continue };
            let mut outer: Vec<&str> = Vec::new();
            let mut parent = node.parent();
            while let Some(p) = parent {
                if let Some(&i) = at.get(&p.id()) {
                    match found[i].1 {
                        Some(DefinitionKind::Function | DefinitionKind::Variable) => {
                            continue 'definitions;
                        }
                        _ => outer.push(found[i].2),
                    }
                }
                parent = p.parent();
            }
            outer.reverse();
            outer.push(name);
            out.push(Definition {
                name: name.to_string(),
                qualified: outer.join("."),
                kind,
                top_level: outer.len() == 1,
                range: self.decorated(node).byte_range(),
            });
        }
        out
    }

    /// `node` with its decorators: Python's `decorated_definition` around it, when there is one.
    fn decorated<'t>(&self, node: Node<'t>) -> Node<'t> {
        match node.parent() {
            Some(p) if p.kind() == "decorated_definition" => p,
            _ => node,
        }
    }

    /// What another file may import from this one, sorted; see the module docs.
    pub fn public_names(&self) -> BTreeSet<String> {
        let exported = match self.language {
            Language::JavaScript | Language::TypeScript | Language::Tsx => {
                javascript::exports(self)
            }
            _ => BTreeSet::new(),
        };
        if !exported.is_empty() {
            return exported;
        }
        self.definitions()
            .into_iter()
            .filter(|d| d.top_level && !d.name.starts_with('_'))
            .filter(|d| match self.language {
                Language::Python => {
                    matches!(d.kind, DefinitionKind::Function | DefinitionKind::Class)
                }
                _ => d.kind != DefinitionKind::Module,
            })
            .map(|d| d.name)
            .collect()
    }

    /// Every import, in order.
    pub fn imports(&self) -> Vec<Import> {
        match self.language {
            Language::Python => python::imports(self),
            Language::JavaScript => javascript::imports(self),
            _ => Vec::new(),
        }
    }

    /// The tests a runner would collect from this file, in order.
    pub fn test_cases(&self) -> Vec<TestCase> {
        match self.language {
            Language::Python => python::test_cases(self),
            Language::JavaScript => javascript::test_cases(self),
            _ => Vec::new(),
        }
    }

    /// The calls of `names` (the names under test) that the file's tests make, as written,
    /// in order and each once: the outermost such call in each statement, when its arguments
    /// use nothing the test defines locally (so it can be evaluated with the file's imports
    /// alone). With no `names`, the checked side of each equality assertion that holds a call.
    pub fn probe_inputs(&self, names: &[String]) -> Vec<String> {
        let mut out = match self.language {
            Language::Python => python::probe_inputs(self, names),
            Language::JavaScript => javascript::probe_inputs(self, names),
            _ => Vec::new(),
        };
        let mut seen = BTreeSet::new();
        out.retain(|p| seen.insert(p.clone()));
        out
    }

    /// Python: the statements at module level that only evaluate an expression (a call, a
    /// stray shell line such as `pytest -v tests.py` that happens to parse), which run when the
    /// file is imported; assignments and the module's docstring are not among them.
    pub fn bare_expressions(&self) -> Vec<Range<usize>> {
        if self.language != Language::Python {
            return Vec::new();
        }
        let root = self.root();
        let mut cursor = root.walk();
        root.named_children(&mut cursor)
            .filter(|s| s.kind() == "expression_statement")
            .filter(|s| {
                s.named_child(0).is_some_and(|e| {
                    !matches!(
                        e.kind(),
                        "assignment" | "augmented_assignment" | "string" | "concatenated_string"
                    )
                })
            })
            .map(|s| s.byte_range())
            .collect()
    }

    /// The names the file reads, anywhere (identifiers), for telling which names it uses.
    pub fn names_used(&self) -> BTreeSet<&'c str> {
        let mut out = BTreeSet::new();
        identifiers(self, self.root(), &mut out);
        out
    }

    /// The attributes the file reads of `binding` (`calc.add` → `add`), e.g. of a module it
    /// imports whole.
    pub fn attributes_of(&self, binding: &str) -> BTreeSet<&'c str> {
        let (kind, object, attribute) = match self.language {
            Language::Python => ("attribute", "object", "attribute"),
            _ => ("member_expression", "object", "property"),
        };
        let mut out = BTreeSet::new();
        let mut stack = vec![self.root()];
        while let Some(node) = stack.pop() {
            if node.kind() == kind
                && node
                    .child_by_field_name(object)
                    .is_some_and(|o| self.text(o) == binding)
                && let Some(a) = node.child_by_field_name(attribute)
            {
                out.insert(self.text(a));
            }
            let mut cursor = node.walk();
            stack.extend(node.named_children(&mut cursor));
        }
        out
    }

    /// Where the file replaces a name of another module at run time, and which name: an
    /// assignment to an attribute (`calc.add = …`), `setattr(calc, "add", …)` and
    /// `monkeypatch.setattr(calc, "add", …)`, `patch("calc.add")`, `patch.object(calc, "add")`,
    /// `jest.spyOn(calc, 'add')`. A test that does so tests its replacement, not the module.
    pub fn replaced_names(&self) -> Vec<(usize, &'c str)> {
        let (assignment, attribute, property, call, arguments) = match self.language {
            Language::Python => ("assignment", "attribute", "attribute", "call", "arguments"),
            _ => (
                "assignment_expression",
                "member_expression",
                "property",
                "call_expression",
                "arguments",
            ),
        };
        let mut out = Vec::new();
        let mut stack = vec![self.root()];
        while let Some(node) = stack.pop() {
            let kind = node.kind();
            if kind == assignment
                && let Some(left) = node.child_by_field_name("left")
                && left.kind() == attribute
                && let Some(name) = left.child_by_field_name(property)
            {
                out.push((node.start_byte(), self.text(name)));
            } else if kind == call
                && let Some(callee) = node.child_by_field_name("function")
                && let Some(args) = node.child_by_field_name(arguments)
            {
                let callee = self.text(callee);
                let replaces = ["setattr", "patch", "patch.object", "spyOn"]
                    .iter()
                    .any(|f| callee == *f || callee.ends_with(&format!(".{f}")));
                if replaces {
                    let mut cursor = args.walk();
                    for arg in args.named_children(&mut cursor) {
                        if matches!(arg.kind(), "string" | "template_string") {
                            let text = self
                                .text(arg)
                                .trim_matches(|c| matches!(c, '\'' | '"' | '`'));
                            let name = text.rsplit('.').next().unwrap_or(text);
                            out.push((node.start_byte(), name));
                        }
                    }
                }
            }
            let mut cursor = node.walk();
            stack.extend(node.named_children(&mut cursor));
        }
        out.sort();
        out
    }

    /// The whole of a file cut off mid-way (an answer stopped at its token cap): its top-level
    /// statements up to the first one the parse found broken, when what remains parses. `None`
    /// when the file has no error (nothing to cut) or nothing before the break is whole.
    pub fn complete_prefix(&self) -> Option<&'c str> {
        if !self.has_errors() {
            return None;
        }
        let root = self.root();
        let mut end = 0;
        let mut cursor = root.walk();
        for child in root.children(&mut cursor) {
            if child.has_error() || child.is_error() || child.is_missing() {
                break;
            }
            end = child.end_byte();
        }
        let prefix = self.code.get(..end)?;
        let whole = Source::parse(prefix, self.language)?;
        (!prefix.trim().is_empty() && !whole.has_errors()).then_some(prefix)
    }
}

fn kind_of(capture: &str) -> Option<DefinitionKind> {
    Some(match capture {
        "function" => DefinitionKind::Function,
        "class" => DefinitionKind::Class,
        "type" => DefinitionKind::Type,
        "constant" => DefinitionKind::Constant,
        "variable" => DefinitionKind::Variable,
        "module" => DefinitionKind::Module,
        _ => return None,
    })
}

/// The qualified names of `code`'s definitions, sorted and distinct; `None` without a grammar
/// for the language, or for code too large to parse.
pub fn definition_names(code: &str, language: Language) -> Option<Vec<String>> {
    let source = Source::parse(code, language)?;
    // A module-level assignment in Python is a rebinding as often as a definition (a constant
    // renamed, a flag reset): what a change may not lose are the functions and classes.
    let mut names: Vec<String> = source
        .definitions()
        .into_iter()
        .filter(|d| !(language == Language::Python && d.kind == DefinitionKind::Constant))
        .map(|d| d.qualified)
        .collect();
    names.sort();
    names.dedup();
    Some(names)
}

/// The top-level public names every one of `codes` defines, sorted; see
/// [`Source::public_names`]. A code that does not parse at all counts as defining nothing.
pub fn shared_public_names(codes: &[&str], language: Language) -> Vec<String> {
    let mut shared: Option<BTreeSet<String>> = None;
    for code in codes {
        let names = Source::parse(code, language)
            .map(|s| s.public_names())
            .unwrap_or_default();
        shared = Some(match shared {
            None => names,
            Some(s) => s.intersection(&names).cloned().collect(),
        });
    }
    shared.unwrap_or_default().into_iter().collect()
}

/// Keywords that open a definition in the languages writ has no grammar for (Ruby's `def`,
/// Java's `class`, Swift's `func`, …).
const DEFINING: &[&str] = &[
    "def",
    "class",
    "fn",
    "function",
    "func",
    "const",
    "let",
    "var",
    "static",
    "struct",
    "enum",
    "trait",
    "type",
    "interface",
];

/// The name `line` (one line of a file in `language`, as a search found it) defines: a
/// function, class, type or binding whose definition opens on it, or a module constant
/// written in capitals (`MAX_RETRIES = 3`; a binding such as `total = f()` defines nothing
/// worth naming). Read with the language's grammar where writ has one, else by the keyword
/// that opens the line (after `export`, `pub`, `async`).
pub fn line_definition(line: &str, language: Language) -> Option<&str> {
    let line = line.trim();
    if queries::definitions(language).is_none() {
        return keyword_definition(line);
    }
    let fragment = closed(line, language);
    let source = Source::parse(&fragment, language)?;
    let found = source
        .definitions()
        .into_iter()
        .find(|d| d.top_level && d.range.start < line.len())?;
    let capitals = found
        .name
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if found.kind == DefinitionKind::Constant && language == Language::Python && !capitals {
        return None;
    }
    let at = line.find(found.name.as_str())?;
    line.get(at..at + found.name.len())
}

/// `line` made a whole statement, as a definition opening on it would be: its open brackets
/// closed, and a Python block given a body.
fn closed(line: &str, language: Language) -> String {
    let mut open: Vec<char> = Vec::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in line.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' | '`' => quote = Some(c),
                '(' => open.push(')'),
                '[' => open.push(']'),
                '{' => open.push('}'),
                ')' | ']' | '}' => {
                    open.pop();
                }
                _ => {}
            },
        }
    }
    let mut out = line.to_string();
    if language == Language::Python && line.ends_with(':') {
        out.push_str(" ...");
    }
    out.extend(open.iter().rev());
    out
}

fn keyword_definition(line: &str) -> Option<&str> {
    let identifier_end = |s: &str| {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    if line.starts_with(|c: char| c.is_ascii_uppercase()) {
        let (name, rest) = line.split_at(identifier_end(line));
        if name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && rest.trim_start().starts_with([':', '='])
        {
            return Some(name);
        }
    }
    let mut rest = line;
    for _ in 0..4 {
        let (word, after) = rest.split_at(identifier_end(rest));
        let after = if word == "pub" && after.starts_with('(') {
            &after[after.find(')')? + 1..]
        } else {
            after
        };
        if !after.starts_with(char::is_whitespace) {
            return None;
        }
        rest = after.trim_start();
        match word {
            "export" | "pub" | "async" | "public" | "private" | "protected" => {}
            w if DEFINING.contains(&w) => {
                let name = &rest[..identifier_end(rest)];
                return (!name.is_empty()).then_some(name);
            }
            _ => return None,
        }
    }
    None
}

/// One `>>>` example of a description: the call, and the output written under it (`None`
/// when the next line is blank or another example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub input: String,
    pub output: Option<String>,
}

/// The description's doctest examples (`>>> call` and the line under it), in order; a
/// continuation (`... more`) joins its example's input.
pub fn doctest_examples(description: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut open = false;
    for line in description.lines() {
        let t = line.trim();
        if let Some(input) = t.strip_prefix(">>> ") {
            let input = input.trim();
            open = !input.is_empty();
            if open {
                out.push(Example {
                    input: input.to_string(),
                    output: None,
                });
            }
        } else if let Some(more) = t.strip_prefix("... ").filter(|_| open) {
            if let Some(last) = out.last_mut() {
                last.input.push('\n');
                last.input.push_str(more);
            }
        } else {
            if open
                && !t.is_empty()
                && let Some(last) = out.last_mut()
                && last.output.is_none()
            {
                last.output = Some(t.to_string());
            }
            open = false;
        }
    }
    out
}

/// The names `node`'s subtree reads (identifiers), for telling whether an expression can be
/// evaluated outside the function it sits in.
fn identifiers<'c>(source: &Source<'c>, node: Node<'_>, out: &mut BTreeSet<&'c str>) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if matches!(
            n.kind(),
            "identifier" | "shorthand_property_identifier_pattern"
        ) {
            out.insert(source.text(n));
        }
        let mut cursor = n.walk();
        stack.extend(n.named_children(&mut cursor));
    }
}

/// The innermost function (or method, or arrow function) around `node`.
fn enclosing_function(node: Node<'_>) -> Option<Node<'_>> {
    let mut parent = node.parent();
    while let Some(p) = parent {
        if matches!(
            p.kind(),
            "function_definition"
                | "function_declaration"
                | "function_expression"
                | "arrow_function"
                | "method_definition"
                | "generator_function_declaration"
        ) {
            return Some(p);
        }
        parent = p.parent();
    }
    None
}

#[cfg(test)]
mod tests;
