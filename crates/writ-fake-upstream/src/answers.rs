//! The content a model "writes": the automatic code answer and the text of each content step.
//!
//! The automatic answer guesses the language from the prompt with a few keywords, so that a
//! benchmark of the whole pipeline gets code its syntax checks accept without a script.

use crate::script::Step;

/// What a content step produces: the assistant text and any image data URLs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    pub content: String,
    pub images: Vec<String>,
    /// It stopped at the token cap ([`Step::CutAtCap`]): `finish_reason` is `length`.
    pub cut_at_cap: bool,
}

impl Answer {
    pub fn finish_reason(&self) -> &'static str {
        if self.cut_at_cap { "length" } else { "stop" }
    }
}

/// The answer of a content step, or `None` for the steps that imitate failures.
pub fn answer_for(step: &Step, prompt: &str) -> Option<Answer> {
    let content = match step {
        Step::Auto => auto_answer(prompt),
        Step::Text { content } => content.clone(),
        Step::Code { lang, code, prose } => {
            let block = fenced(lang, code);
            if *prose {
                format!(
                    "Here is the implementation you asked for:\n\n{block}\nIt has no dependencies beyond the standard library."
                )
            } else {
                block
            }
        }
        Step::Verdict { choice, reason } => {
            serde_json::json!({ "choice": choice, "reason": reason }).to_string()
        }
        Step::Image { data_url, content } => {
            return Some(Answer {
                content: content.clone(),
                images: vec![data_url.clone()],
                cut_at_cap: false,
            });
        }
        Step::CutAtCap { content } => {
            return Some(Answer {
                content: content.clone(),
                images: Vec::new(),
                cut_at_cap: true,
            });
        }
        _ => return None,
    };
    Some(Answer {
        content,
        images: Vec::new(),
        cut_at_cap: false,
    })
}

fn fenced(lang: &str, code: &str) -> String {
    let code = code.strip_suffix('\n').unwrap_or(code);
    format!("```{lang}\n{code}\n```\n")
}

/// A fenced, syntactically valid snippet in the language the prompt mentions.
pub fn auto_answer(prompt: &str) -> String {
    let (lang, code) = match guess_language(prompt) {
        "rust" => (
            "rust",
            "fn main() {\n    println!(\"hello from the fake upstream\");\n}",
        ),
        "typescript" => (
            "typescript",
            "export function greet(name: string): string {\n  return `hello ${name}`;\n}",
        ),
        "javascript" => (
            "javascript",
            "export function greet(name) {\n  return `hello ${name}`;\n}",
        ),
        "go" => (
            "go",
            "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello from the fake upstream\")\n}",
        ),
        "json" => ("json", "{\n  \"hello\": \"from the fake upstream\"\n}"),
        "toml" => ("toml", "[package]\nname = \"fake\"\nversion = \"0.1.0\""),
        "yaml" => ("yaml", "hello: from the fake upstream"),
        "html" => (
            "html",
            "<!doctype html>\n<html><body><p>hello</p></body></html>",
        ),
        "css" => ("css", "body {\n  margin: 0;\n}"),
        _ => (
            "python",
            "def greet(name: str) -> str:\n    return f\"hello {name}\"\n\n\nif __name__ == \"__main__\":\n    print(greet(\"world\"))",
        ),
    };
    fenced(lang, code)
}

/// The first language named in the prompt (by name or file extension); python otherwise.
pub fn guess_language(prompt: &str) -> &'static str {
    const HINTS: &[(&str, &str)] = &[
        ("typescript", "typescript"),
        (".tsx", "typescript"),
        (".ts", "typescript"),
        ("javascript", "javascript"),
        (".js", "javascript"),
        ("rust", "rust"),
        (".rs", "rust"),
        ("golang", "go"),
        (".go", "go"),
        ("python", "python"),
        (".py", "python"),
        ("json", "json"),
        ("toml", "toml"),
        ("yaml", "yaml"),
        (".yml", "yaml"),
        ("html", "html"),
        (".css", "css"),
    ];
    let prompt = prompt.to_lowercase();
    HINTS
        .iter()
        .filter_map(|(needle, lang)| prompt.find(needle).map(|at| (at, *lang)))
        .min_by_key(|(at, _)| *at)
        .map_or("python", |(_, lang)| lang)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_language_is_guessed_from_the_prompt() {
        assert_eq!(
            guess_language("Write a Rust function that parses ints"),
            "rust"
        );
        assert_eq!(
            guess_language("create src/app.ts exporting greet"),
            "typescript"
        );
        assert_eq!(
            guess_language("a Go program printing hello"),
            "python",
            "bare 'go' is too common a word"
        );
        assert_eq!(guess_language("write main.go"), "go");
        assert_eq!(guess_language("sort a list"), "python");
    }

    #[test]
    fn the_auto_answer_is_a_fenced_block() {
        let answer = auto_answer("in rust please");
        assert!(
            answer.starts_with("```rust\n") && answer.ends_with("```\n"),
            "{answer}"
        );
    }

    #[test]
    fn prose_wraps_the_code_block() {
        let answer = answer_for(&Step::code_in_prose("python", "x = 1\n"), "").unwrap();
        assert!(answer.content.starts_with("Here is"));
        assert!(answer.content.contains("```python\nx = 1\n```\n"));
    }

    #[test]
    fn a_verdict_is_json_content() {
        let answer = answer_for(&Step::verdict(2, "fewer bugs"), "").unwrap();
        let v: serde_json::Value = serde_json::from_str(&answer.content).unwrap();
        assert_eq!(v, serde_json::json!({"choice": 2, "reason": "fewer bugs"}));
    }
}
