//! The docs against the code: the generated parts of every doc are what the code makes now
//! (`scripts/docs` rewrites them), every setting the code reads is declared and so in
//! docs/configuration.md, and every setting a doc names exists.

use std::path::{Path, PathBuf};

use writ_server::config::declared::{self, Group};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Markdown a reader meets: README, the top-level docs and docs/.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "EVALS.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    files.extend(in_docs);
    files
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_generated_parts_of_the_docs_are_what_the_code_makes() {
    let rewrite = std::env::var("WRIT_DOCS_WRITE").as_deref() == Ok("1");
    let mut stale = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let made =
            writ_server::docs::splice(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if made != text {
            if rewrite {
                std::fs::write(&file, &made).unwrap();
            } else {
                stale.push(file.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "generated parts differ from the code in {stale:?}: run scripts/docs"
    );
}

#[test]
fn configuration_md_shows_every_group_of_settings() {
    let text = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    for group in Group::ALL {
        assert!(
            text.contains(&format!("<!-- settings: {} -->", group.key())),
            "docs/configuration.md has no table of {:?}",
            group
        );
    }
    for setting in declared::SETTINGS {
        assert!(
            text.contains(&format!("`{}`", setting.name)),
            "{} is not in docs/configuration.md",
            setting.name
        );
    }
}

/// Names that look like writ's settings: the prefixes every setting of writ's own has.
fn setting_like() -> regex::Regex {
    regex::Regex::new(r"\b((?:WRIT|WRITE_SESSION|OPENROUTER|OTEL|CODE)_[A-Z0-9_]*[A-Z0-9])(_?\*)?")
        .unwrap()
}

/// Whether `name` (or, for a `PREFIX_*` wildcard, some setting under it) is declared.
fn is_declared(name: &str, wildcard: bool) -> bool {
    if wildcard {
        declared::SETTINGS.iter().any(|s| s.name.starts_with(name))
    } else {
        declared::find(name).is_some()
    }
}

/// The variables of the tests and scripts, listed in docs/testing.md.
fn test_variables() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("docs/testing.md")).unwrap();
    let section = text
        .split("## Variables of the tests, benchmarks and scripts")
        .nth(1)
        .expect("docs/testing.md lists the tests' variables");
    setting_like()
        .captures_iter(section)
        .map(|c| c[1].to_string())
        .collect()
}

#[test]
fn every_setting_the_product_code_names_or_reads_is_declared() {
    // writ's own crates; writ-bench and writ-fake-upstream are tools with variables of their
    // own (docs/testing.md), and tests are not the product.
    let crates = [
        "writ-server",
        "writ-core",
        "writ-models",
        "writ-local",
        "writ-sandbox",
        "writ-store",
        "writ-workspace",
        "writ-git",
        "writ-checks",
    ];
    let env_read =
        regex::Regex::new(r#"env::var(?:_os)?\(\s*"([^"]+)"|\benv\s*=\s*"([^"]+)""#).unwrap();
    let for_tests = test_variables();
    let mut undeclared = Vec::new();
    for krate in crates {
        let mut files = Vec::new();
        rust_files(&repo().join("crates").join(krate).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // A module's own unit tests, at its end, may name what they like.
            let text = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for c in setting_like().captures_iter(text) {
                if !is_declared(&c[1], c.get(2).is_some()) && !for_tests.contains(&c[1].to_string())
                {
                    undeclared.push(format!("{} in {}", &c[0], file.display()));
                }
            }
            for c in env_read.captures_iter(text) {
                let name = c.get(1).or(c.get(2)).unwrap().as_str();
                if declared::find(name).is_none() && !for_tests.contains(&name.to_string()) {
                    undeclared.push(format!("{name} (read) in {}", file.display()));
                }
            }
        }
    }
    assert!(
        undeclared.is_empty(),
        "not declared in crates/writ-server/src/config/declared.rs: {undeclared:#?}"
    );
}

#[test]
fn every_setting_a_doc_names_exists() {
    let for_tests = test_variables();
    let mut unknown = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for c in setting_like().captures_iter(&text) {
            if !is_declared(&c[1], c.get(2).is_some()) && !for_tests.contains(&c[1].to_string()) {
                unknown.push(format!("{} in {}", &c[0], file.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "named in the docs but neither a setting (config/declared.rs) nor a test variable (docs/testing.md): {unknown:#?}"
    );
}

/// The fenced blocks of `text`: (line of the opening fence, its info string, its body).
/// The second part is the first line where a fence with an info string (```` ```sh ````) shows
/// inside an open block, or where a block never closes: a block left open above it.
fn fenced_blocks(text: &str) -> (Vec<(usize, String, String)>, Option<usize>) {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    let mut left_open = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        // An opening fence may carry an info string; a closing one is the backticks alone, so
        // "```sh" inside an open block is content, as a Markdown reader takes it.
        let opens = trimmed.starts_with("```");
        let closes = opens && trimmed.trim_start_matches('`').is_empty();
        match (&mut open, opens, closes) {
            (None, true, _) => open = Some((n + 1, trimmed[3..].trim().to_string(), String::new())),
            (Some(_), _, true) => blocks.extend(open.take()),
            (Some((_, _, body)), opens, false) => {
                if opens {
                    left_open.get_or_insert(n + 1);
                }
                body.push_str(line);
                body.push('\n');
            }
            (None, false, _) => {}
        }
    }
    (blocks, left_open.or(open.map(|(line, _, _)| line)))
}

#[test]
fn every_fenced_block_of_the_docs_closes() {
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let (_, unclosed) = fenced_blocks(&text);
        assert_eq!(
            unclosed,
            None,
            "{}: a block above this line never closes, so what follows shows as code",
            file.display()
        );
    }
}

#[test]
fn every_json_answer_the_readme_shows_is_json() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let (blocks, _) = fenced_blocks(&text);
    let json: Vec<_> = blocks
        .iter()
        .filter(|(_, info, _)| info == "json")
        .collect();
    assert!(!json.is_empty());
    for (line, _, body) in json {
        serde_json::from_str::<serde_json::Value>(body)
            .unwrap_or_else(|e| panic!("README.md, the block at line {line}: {e}"));
    }
}

#[test]
fn api_md_lists_every_route_under_what_a_key_needs() {
    let text = std::fs::read_to_string(repo().join("docs/api.md")).unwrap();
    for access in ["open", "read", "write", "run", "admin", "per-tool"] {
        assert!(
            text.contains(&format!("<!-- routes: {access} -->")),
            "docs/api.md has no table of the {access} routes"
        );
    }
    for route in writ_server::routes::api_routes() {
        let row = format!("| `{} {}` |", route.method, route.openapi_path());
        assert!(
            text.contains(&row),
            "docs/api.md lacks {row}: run scripts/docs"
        );
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every link from README.md and docs/ to a file of the repository points at a file that exists,
/// and a `#fragment` at a heading that file has: a newcomer following one lands somewhere.
#[test]
fn every_link_in_the_readme_and_docs_reaches_a_file_and_a_heading_that_exist() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut pages = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        // Links inside code blocks are code, not links.
        let prose: String = text.split("```").step_by(2).collect::<Vec<_>>().join("\n");
        for c in link.captures_iter(&prose) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if fragment.is_empty() || path.is_dir() {
                continue;
            }
            let Ok(linked) = std::fs::read_to_string(&path) else {
                continue;
            };
            let anchors: Vec<String> = linked
                .lines()
                .filter(|l| l.starts_with('#'))
                .map(|l| anchor_of(l.trim_start_matches('#')))
                .collect();
            if !anchors.iter().any(|a| a == fragment) {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}
