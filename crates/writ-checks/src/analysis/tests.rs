use super::*;

fn parse(code: &str, language: Language) -> Source<'_> {
    Source::parse(code, language).unwrap()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn python_definitions_are_qualified_and_a_functions_insides_are_its_own() {
    let code = "import os\n\nMAX = 3\n\n@cache\ndef add(a, b):\n    def inner():\n        pass\n    total = a + b\n    return total\n\nclass Stack:\n    size = 0\n    def push(self, x):\n        pass\n    class Node:\n        def link(self):\n            pass\n";
    let source = parse(code, Language::Python);
    let defs = source.definitions();
    let qualified: Vec<&str> = defs.iter().map(|d| d.qualified.as_str()).collect();
    assert_eq!(
        qualified,
        [
            "MAX",
            "add",
            "Stack",
            "Stack.push",
            "Stack.Node",
            "Stack.Node.link"
        ]
    );
    let add = &defs[1];
    assert!(add.top_level);
    assert_eq!(
        &code[add.range.clone()][..6],
        "@cache",
        "decorators belong to it"
    );
    assert!(!defs[3].top_level);
    assert_eq!(
        source.public_names().into_iter().collect::<Vec<_>>(),
        ["Stack", "add"]
    );
}

#[test]
fn javascript_public_names_are_its_exports_or_else_its_top_level_declarations() {
    let exported = "function add(a, b) { return a + b; }\nfunction helper() {}\nmodule.exports = { add, sub: minus, mul(a, b) { return a * b; } };\nmodule.exports.div = (a, b) => a / b;\n";
    assert_eq!(
        parse(exported, Language::JavaScript)
            .public_names()
            .into_iter()
            .collect::<Vec<_>>(),
        ["add", "div", "mul", "sub"]
    );
    let es = "export function add(a, b) { return a + b; }\nconst x = 1, y = 2;\nexport { x, y as why };\nexport default add;\n";
    assert_eq!(
        parse(es, Language::JavaScript)
            .public_names()
            .into_iter()
            .collect::<Vec<_>>(),
        ["add", "why", "x"]
    );
    let plain = "const add = (a, b) => { const local = a; return local + b; };\nclass Calc {\n  run() {}\n}\nfunction _private() {}\n";
    assert_eq!(
        parse(plain, Language::JavaScript)
            .public_names()
            .into_iter()
            .collect::<Vec<_>>(),
        ["Calc", "add"]
    );
}

#[test]
fn shared_public_names_are_those_every_candidate_defines() {
    let a = "import os\n\ndef clamp(x, lo, hi):\n    pass\n\ndef _helper():\n    pass\n\nclass Range:\n    def inner(self): pass\n";
    let b =
        "def clamp(x, lo, hi):\n    return x\n\nclass Range:\n    pass\n\ndef extra():\n    pass\n";
    assert_eq!(
        shared_public_names(&[a, b], Language::Python),
        ["Range", "clamp"]
    );
}

#[test]
fn python_imports_name_their_module_and_what_they_bind() {
    let code = "import os.path\nimport numpy as np\nfrom solution import add, sub as minus\nfrom .calc import *\n";
    let imports = parse(code, Language::Python).imports();
    let seen: Vec<(&str, Option<&str>, usize, bool)> = imports
        .iter()
        .map(|i| {
            (
                i.module.as_str(),
                i.binding.as_deref(),
                i.names.len(),
                i.wildcard,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("os.path", Some("os"), 0, false),
            ("numpy", Some("np"), 0, false),
            ("solution", None, 2, false),
            (".calc", None, 0, true),
        ]
    );
    assert_eq!(
        imports[2].names,
        [
            ("add".to_string(), None),
            ("sub".into(), Some("minus".into()))
        ]
    );
    assert_eq!(&code[imports[2].module_range.clone()], "solution");
}

#[test]
fn javascript_imports_are_requires_and_import_statements() {
    let code = "const test = require('node:test');\nconst { add, sub: minus } = require('../calc.js');\nconst calc = require(\"../calc\");\nimport { mul as times } from './m.js';\nimport * as all from './all.js';\n";
    let imports = parse(code, Language::JavaScript).imports();
    let modules: Vec<&str> = imports.iter().map(|i| i.module.as_str()).collect();
    assert_eq!(
        modules,
        ["node:test", "../calc.js", "../calc", "./m.js", "./all.js"]
    );
    assert_eq!(
        imports[1].names,
        [
            ("add".to_string(), None),
            ("sub".into(), Some("minus".into()))
        ]
    );
    assert_eq!(imports[2].binding.as_deref(), Some("calc"));
    assert_eq!(
        imports[3].names,
        [("mul".to_string(), Some("times".into()))]
    );
    assert_eq!(imports[4].binding.as_deref(), Some("all"));
    assert_eq!(
        &code[imports[1].range.clone()],
        "const { add, sub: minus } = require('../calc.js');"
    );
}

#[test]
fn pytest_collects_test_functions_and_the_test_methods_of_test_classes() {
    let code = "import unittest\n\ndef helper():\n    pass\n\ndef test_a():\n    assert 1\n\n@pytest.mark.slow\ndef test_b():\n    pass\n\nclass TestCalc:\n    def test_c(self):\n        pass\n    def check(self):\n        pass\n\nclass Cases(unittest.TestCase):\n    def test_d(self):\n        self.assertEqual(1, 1)\n\nclass Other:\n    def test_e(self):\n        pass\n";
    let source = parse(code, Language::Python);
    let cases = source.test_cases();
    let ids: Vec<&str> = cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["test_a", "test_b", "TestCalc::test_c", "Cases::test_d"]
    );
    assert!(code[cases[1].mark_at..].starts_with("@pytest.mark.slow"));
    assert!(code[cases[2].mark_at..].starts_with("    def test_c"));
}

#[test]
fn node_test_cases_are_named_by_their_first_argument_at_any_depth() {
    let code = "const test = require('node:test');\ntest('adds', () => {});\ndescribe('calc', () => {\n  it(\"subtracts\", () => {});\n  it(`multiplies`, () => {});\n});\nlatest('not a test', () => {});\n";
    let cases = parse(code, Language::JavaScript).test_cases();
    let ids: Vec<&str> = cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["adds", "subtracts", "multiplies"]);
    assert_eq!(
        &code[..cases[0].mark_at].lines().last().unwrap_or(""),
        &"test"
    );
}

#[test]
fn probe_inputs_are_the_outermost_calls_under_test_that_need_no_local() {
    let code = "import pytest\nfrom calc import clamp\n\nLIMIT = 10\n\ndef test_a():\n    assert clamp(5, 0, LIMIT) == 5\n    assert abs(clamp(1.5, 0, 2) - 1.5) < 1e-6\n    assert not clamp(0, 0, 0)\n    with pytest.raises(ValueError):\n        clamp(1, 5, 2)\n\ndef test_b():\n    x = 3\n    assert clamp(x, 0, 1) == 1\n    assert clamp(clamp(4, 0, 3), 0, 2) == 2\n\nclass TestC(unittest.TestCase):\n    def test_c(self):\n        self.assertEqual(clamp(9, 0, 5), 5)\n        self.assertEqual(clamp(self.value, 0, 5), 5)\n";
    let source = parse(code, Language::Python);
    assert_eq!(
        source.probe_inputs(&strings(&["clamp"])),
        [
            "clamp(5, 0, LIMIT)",
            "clamp(1.5, 0, 2)",
            "clamp(0, 0, 0)",
            "clamp(1, 5, 2)",
            "clamp(clamp(4, 0, 3), 0, 2)",
            "clamp(9, 0, 5)",
        ]
    );
    // Without the names: the checked side of each equality.
    let py = "def test_a():\n    assert clamp(5, 0, 10) == 5\n    assert clamp(1, 2, 3) == 2, 'low'\n    assert x == 1\n    assert parse('a==b') != 3\n    self.assertEqual(clamp(1, 1, 1), 1)\n";
    assert_eq!(
        parse(py, Language::Python).probe_inputs(&[]),
        ["clamp(5, 0, 10)", "clamp(1, 2, 3)", "clamp(1, 1, 1)"]
    );
}

#[test]
fn javascript_probe_inputs_are_the_calls_under_test_outside_locals() {
    let code = "const { add, split } = require('../calc.js');\ntest('a', () => {\n  const n = 4;\n  assert.strictEqual(add(1, [2, 3]), 6);\n  assert.deepStrictEqual(split('a,b'), ['a', 'b']);\n  assert.strictEqual(add(n, 1), 5);\n});\n";
    let source = parse(code, Language::JavaScript);
    assert_eq!(
        source.probe_inputs(&strings(&["add", "split"])),
        ["add(1, [2, 3])", "split('a,b')"]
    );
    assert_eq!(
        source.probe_inputs(&[]),
        ["add(1, [2, 3])", "split('a,b')", "add(n, 1)"]
    );
}

#[test]
fn a_file_cut_mid_test_keeps_its_whole_tests() {
    let code = "from calc import add\n\ndef test_a():\n    assert add(1, 2) == 3\n\ndef test_b():\n    assert add(2, 2) == 4\n\ndef test_c():\n    assert add(1, ";
    let source = parse(code, Language::Python);
    let prefix = source.complete_prefix().unwrap();
    assert!(prefix.ends_with("assert add(2, 2) == 4"), "{prefix}");
    assert_eq!(parse(prefix, Language::Python).test_cases().len(), 2);
    assert_eq!(
        parse("def test_a():\n    pass\n", Language::Python).complete_prefix(),
        None,
        "nothing to cut"
    );
    assert_eq!(
        parse("def test_a(:\n", Language::Python).complete_prefix(),
        None
    );
}

#[test]
fn a_line_names_what_it_defines_and_a_use_names_nothing() {
    use Language::{JavaScript, Other, Python, Rust};
    for (line, language, name) in [
        ("def apply_discount(order):", Python, Some("apply_discount")),
        (
            "    async def fetch_tariffs():",
            Python,
            Some("fetch_tariffs"),
        ),
        (
            "class TariffSchedule(Base):",
            Python,
            Some("TariffSchedule"),
        ),
        (
            "pub(crate) fn parse_order(s: &str) {",
            Rust,
            Some("parse_order"),
        ),
        ("pub async fn load() {", Rust, Some("load")),
        (
            "export const maxRetries = 3;",
            JavaScript,
            Some("maxRetries"),
        ),
        (
            "export function computeTariff(x) {",
            JavaScript,
            Some("computeTariff"),
        ),
        ("MAX_DISCOUNT = 0.5", Python, Some("MAX_DISCOUNT")),
        ("TIMEOUT: int = 5", Python, Some("TIMEOUT")),
        ("    total = apply_discount(order)", Python, None),
        ("# def apply_discount is below", Python, None),
        ("return TariffSchedule()", Python, None),
        ("Tariff = load()", Python, None),
        ("MAX_DISCOUNT + 1", Python, None),
        ("def", Python, None),
        ("define_tariff(x)", Python, None),
        ("def tariff_for(order)", Other, Some("tariff_for")),
        ("  tariff_for(order)", Other, None),
    ] {
        assert_eq!(line_definition(line, language), name, "{line}");
    }
}

#[test]
fn doctest_examples_are_the_calls_and_the_outputs_under_them() {
    let description = "Clamps.\n    >>> clamp(5, 0, 1)\n    1\n    >>> clamp(\n    ... 0, 1, 2)\n    1\n    >>> print('x')\n\n    >>> \n";
    assert_eq!(
        doctest_examples(description),
        [
            Example {
                input: "clamp(5, 0, 1)".into(),
                output: Some("1".into())
            },
            Example {
                input: "clamp(\n0, 1, 2)".into(),
                output: Some("1".into())
            },
            Example {
                input: "print('x')".into(),
                output: None
            },
        ]
    );
}

#[test]
fn rust_impl_methods_and_go_functions_are_definitions_too() {
    let rust = "struct S;\nimpl S {\n    fn a(&self) {}\n    fn b(&self) {}\n}\nfn free() {}\nmod m {\n    pub fn inner() {}\n}\n";
    assert_eq!(
        definition_names(rust, Language::Rust).unwrap(),
        ["S", "S.a", "S.b", "free", "m", "m.inner"]
    );
    let go = "package m\n\nfunc A() {}\n\ntype T struct{}\n\nfunc (t T) M() {}\n";
    assert_eq!(definition_names(go, Language::Go).unwrap(), ["A", "M", "T"]);
    assert_eq!(definition_names("x", Language::Markdown), None);
}

#[test]
fn bare_expressions_are_the_statements_run_at_import_that_bind_nothing() {
    let code = "\"\"\"Tests.\"\"\"\nimport pytest\nLIMIT = 3\n\ndef test_a():\n    assert True\n\ntest_a()\npytest -v .writ-checks/test_a.py\nif __name__ == '__main__':\n    pytest.main()\n";
    let source = parse(code, Language::Python);
    let found: Vec<&str> = source
        .bare_expressions()
        .into_iter()
        .map(|r| &code[r])
        .collect();
    assert_eq!(found, ["test_a()", "pytest -v .writ-checks/test_a.py"]);
}
