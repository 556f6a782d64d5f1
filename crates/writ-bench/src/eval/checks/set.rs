//! The task set: the single-file tasks of [`crate::eval::tasks`] and the functions of
//! `eval/checks/functions.toml` with their mutants, every version's output on every input
//! computed by the machine's `python3` and `node`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{CheckTask, Lang};
use crate::eval::tasks;

#[derive(Debug, Deserialize)]
struct Functions {
    function: Vec<Function>,
}

#[derive(Debug, Deserialize)]
struct Function {
    name: String,
    description: String,
    python: String,
    javascript: String,
    inputs: Vec<Vec<Value>>,
}

fn camel(name: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in name.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn literal(v: &Value, lang: Lang) -> String {
    match (v, lang) {
        (Value::Bool(b), Lang::Python) => if *b { "True" } else { "False" }.into(),
        (Value::Null, Lang::Python) => "None".into(),
        (Value::Array(items), _) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| literal(i, lang))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (other, _) => other.to_string(),
    }
}

/// Text mutations that make subtly wrong versions.
const MUTATIONS: &[(&str, &str)] = &[
    ("<=", "<"),
    (">=", ">"),
    (" < ", " <= "),
    (" > ", " >= "),
    (" < ", " > "),
    (" > ", " < "),
    (" + 1", ""),
    (" - 1", ""),
    (" + ", " - "),
    (" - ", " + "),
    ("min", "max"),
    ("max", "min"),
    (" and ", " or "),
    ("&&", "||"),
    (" or ", " and "),
    ("||", "&&"),
    ("== 0", "== 1"),
    ("=== 0", "=== 1"),
    ("= 0", "= 1"),
    ("(0", "(1"),
    ("return -1", "return 0"),
    ("% 400", "% 40"),
    ("+= 1", "+= 2"),
    (" * ", " + "),
    ("% 10", "% 100"),
    (" not in ", " in "),
    ("[k:]", "[k + 1:]"),
    ("slice(k)", "slice(k + 1)"),
    ("if x in seen", "if x not in seen"),
    ("has(x)", "has(x + 1)"),
    ("len(w)", "len(w) - 1"),
    ("w.length", "w.length - 1"),
    ("split()", "split(\" \")"),
    ("+= x", "= x"),
    ("[:1]", "[:2]"),
    ("(0, 1)", "(0, 2)"),
];

fn mutants(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for &(from, to) in MUTATIONS {
        let mut start = 0;
        while let Some(at) = code[start..].find(from) {
            let at = start + at;
            let mut m = String::with_capacity(code.len());
            m.push_str(&code[..at]);
            m.push_str(to);
            m.push_str(&code[at + from.len()..]);
            if !out.contains(&m) && m != code {
                out.push(m);
            }
            start = at + from.len();
        }
    }
    out
}

const PY_RUNNER: &str = r#"
import json, signal, sys
job = json.load(open(sys.argv[1]))
def alarm(*_):
    raise TimeoutError()
signal.signal(signal.SIGALRM, alarm)
ns = {"__name__": "m"}
try:
    exec(job["version"], ns)
    row = []
    for inp in job["inputs"]:
        signal.alarm(1)
        try:
            v = eval(inp, dict(ns))
            r = repr(v)
            import ast
            ast.literal_eval(r)
            row.append(r)
        except (ValueError, SyntaxError):
            row.append("unrepresentable")
        except BaseException as e:
            row.append("raises " + type(e).__name__)
        finally:
            signal.alarm(0)
except BaseException as e:
    row = ["raises " + type(e).__name__ for _ in job["inputs"]]
print(json.dumps(row))
"#;

const JS_RUNNER: &str = r#"
const util = require('util');
const job = JSON.parse(require('fs').readFileSync(process.argv[2], 'utf8'));
const mod = { exports: {} };
let row;
try {
  new Function('module', 'exports', 'require', job.version)(mod, mod.exports, require);
  const names = Object.keys(mod.exports);
  const vals = names.map((n) => mod.exports[n]);
  row = job.inputs.map((inp) => {
    try { return util.inspect(new Function(...names, 'return ' + inp)(...vals), { depth: 6, breakLength: Infinity }); }
    catch (e) { return 'raises ' + (e && e.name ? e.name : 'Error'); }
  });
} catch (e) { row = job.inputs.map(() => 'raises ' + (e && e.name ? e.name : 'Error')); }
console.log(JSON.stringify(row));
"#;

/// Each version's output on every input, run by the machine's interpreter (one process a
/// version, bounded, so a mutant that loops costs one timeout).
async fn outputs_of(
    lang: Lang,
    versions: &[String],
    inputs: &[String],
) -> anyhow::Result<Vec<Vec<String>>> {
    let dir = tempfile::tempdir()?;
    let (program, runner) = match lang {
        Lang::Python => ("/usr/bin/python3", PY_RUNNER),
        Lang::JavaScript => ("node", JS_RUNNER),
    };
    let runner_path = dir.path().join("runner");
    std::fs::write(&runner_path, runner)?;
    let mut rows = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let job = dir.path().join(format!("job{i}.json"));
        std::fs::write(
            &job,
            serde_json::to_vec(&json!({"version": version, "inputs": inputs}))?,
        )?;
        let child = tokio::process::Command::new(program)
            .arg(&runner_path)
            .arg(&job)
            .kill_on_drop(true)
            .output();
        let row = match tokio::time::timeout(Duration::from_secs(3), child).await {
            Ok(Ok(out)) => serde_json::from_slice::<Vec<String>>(&out.stdout)
                .unwrap_or_else(|_| vec!["raises Crash".into(); inputs.len()]),
            _ => vec!["raises Timeout".into(); inputs.len()],
        };
        rows.push(row);
    }
    Ok(rows)
}

/// The task set; see the module docs.
pub async fn load(tasks_dir: &Path, functions: &Path) -> anyhow::Result<Vec<CheckTask>> {
    let mut all = Vec::new();
    for task in tasks::load(tasks_dir)? {
        if task.files.len() != 1 {
            continue;
        }
        let file = &task.files[0];
        let module = file.path.trim_end_matches(".py");
        let defined: BTreeSet<String> = file
            .correct
            .lines()
            .filter_map(|l| l.strip_prefix("def ").or_else(|| l.strip_prefix("class ")))
            .map(|l| {
                l.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect();
        let mut inputs: Vec<String> = Vec::new();
        for line in task.test.lines() {
            let Some(rest) = line.trim().strip_prefix("assert ") else {
                continue;
            };
            let Some((lhs, _)) = rest.split_once(" == ") else {
                continue;
            };
            let lhs = lhs.trim();
            let head: String = lhs
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if defined.contains(&head) && lhs.contains('(') && !inputs.contains(&lhs.to_string()) {
                inputs.push(lhs.to_string());
            }
        }
        let names: Vec<String> = defined
            .iter()
            .filter(|d| inputs.iter().any(|i| i.contains(d.as_str())))
            .cloned()
            .collect();
        if inputs.len() < 2 {
            continue;
        }
        let _ = module;
        let mut versions = vec![file.correct.clone()];
        versions.extend(file.wrong.iter().cloned());
        let outputs = outputs_of(Lang::Python, &versions, &inputs).await?;
        all.push(CheckTask {
            id: task.id.clone(),
            lang: Lang::Python,
            path: file.path.clone(),
            description: file.description.clone(),
            names,
            correct: file.correct.clone(),
            wrong: file.wrong.clone(),
            inputs,
            outputs,
        });
    }
    let text = std::fs::read_to_string(functions)
        .with_context(|| format!("reading {}", functions.display()))?;
    let parsed: Functions = toml::from_str(&text).context("parsing the functions")?;
    for (n, f) in parsed.function.iter().enumerate() {
        for lang in [Lang::Python, Lang::JavaScript] {
            let (name, code, path) = match lang {
                Lang::Python => (f.name.clone(), &f.python, format!("{}.py", f.name)),
                Lang::JavaScript => (camel(&f.name), &f.javascript, format!("{}.js", f.name)),
            };
            let inputs: Vec<String> = f
                .inputs
                .iter()
                .map(|args| {
                    format!(
                        "{name}({})",
                        args.iter()
                            .map(|a| literal(a, lang))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            let candidates = mutants(code);
            let mut versions = vec![code.clone()];
            versions.extend(candidates.iter().cloned());
            let outputs = outputs_of(lang, &versions, &inputs).await?;
            // Subtle first: differs on some inputs, agrees on others; then, if too few, one
            // that differs on every input. One per behaviour; rotated by the function so that
            // no one mutation always comes first.
            let mut picked: Vec<usize> = Vec::new();
            let m = candidates.len();
            for subtle in [true, false] {
                for j in 0..m {
                    let v = 1 + (j + n) % m;
                    let row = &outputs[v];
                    let differs = row.iter().zip(&outputs[0]).filter(|(a, b)| a != b).count();
                    let crashes = row.iter().all(|o| o.starts_with("raises"));
                    let same_as_picked = picked.iter().any(|&p| outputs[p] == *row);
                    let fits = if subtle {
                        differs > 0 && differs < inputs.len()
                    } else {
                        differs > 0
                    };
                    if fits && !crashes && !same_as_picked && picked.len() < 3 {
                        picked.push(v);
                    }
                }
                if picked.len() >= 2 {
                    break;
                }
            }
            if picked.len() < 2 {
                continue;
            }
            all.push(CheckTask {
                id: format!(
                    "{}_{}",
                    f.name,
                    if lang == Lang::Python { "py" } else { "js" }
                ),
                lang,
                path,
                description: f.description.replace(&f.name, &name),
                names: vec![name.clone()],
                correct: code.clone(),
                wrong: picked.iter().map(|&v| versions[v].clone()).collect(),
                inputs,
                outputs: std::iter::once(outputs[0].clone())
                    .chain(picked.iter().map(|&v| outputs[v].clone()))
                    .collect(),
            });
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_flip_one_operator_at_a_time() {
        let m = mutants("if x <= 1 and y > 0:\n    return x + 1\n");
        assert!(m.contains(&"if x < 1 and y > 0:\n    return x + 1\n".to_string()));
        assert!(m.contains(&"if x <= 1 or y > 0:\n    return x + 1\n".to_string()));
        assert!(m.contains(&"if x <= 1 and y > 0:\n    return x\n".to_string()));
        assert!(m.iter().all(|v| v.lines().count() == 2));
        assert_eq!(camel("count_in_range"), "countInRange");
        assert_eq!(
            literal(&json!([true, null, "a"]), Lang::Python),
            r#"[True, None, "a"]"#
        );
    }
}
