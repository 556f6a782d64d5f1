//! The reference suites of the `apply_patch` format (`tests/data/apply_patch`, see its
//! `SOURCE.md`) replayed through `POST /edits`: each case's input files in an emptied REPO_DIR,
//! its patch sent, and the answer's outcome and every file of REPO_DIR afterwards compared byte
//! for byte with what the case expects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use writ_tests::{Backend, TestApp, spawn_app};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    source: String,
    applies: bool,
    /// Why writ ends differently from the reference; its files are then in `writ_expected/`.
    #[serde(default)]
    differs: Option<String>,
}

/// Every file beneath `root` (none if it is absent), by path relative to it.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn reset_repo(app: &TestApp, input: &BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(&app.repo_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    for (name, bytes) in input {
        let path = app.repo_dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

fn shown(files: &BTreeMap<String, Vec<u8>>) -> String {
    files
        .iter()
        .map(|(k, v)| format!("{k}: {:?}", String::from_utf8_lossy(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/apply_patch");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

async fn every_reference_patch_case_ends_as_expected_byte_for_byte(backend: Backend) {
    let app = spawn_app(backend).await;
    let cases = cases();
    assert!(cases.len() >= 50, "the case data is missing: {cases:?}");
    let mut failures = Vec::new();
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let case: Case =
            toml::from_str(&std::fs::read_to_string(dir.join("case.toml")).unwrap()).unwrap();
        assert!(!case.source.is_empty(), "{name}: no source");
        reset_repo(&app, &files(&dir.join("input")));
        let patch = std::fs::read_to_string(dir.join("patch.txt")).unwrap();
        let r = app
            .client
            .post(app.url("/edits"))
            .json(&json!({ "patch": patch }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        if (status == 200) != case.applies {
            failures.push(format!(
                "{name}: expected it to {}, got {status}: {body}",
                if case.applies { "apply" } else { "be refused" }
            ));
        }
        let expected = files(&dir.join(if case.differs.is_some() {
            "writ_expected"
        } else {
            "expected"
        }));
        let actual = files(&app.repo_dir);
        if actual != expected {
            failures.push(format!(
                "{name}: REPO_DIR holds [{}], expected [{}] (answer {status}: {body})",
                shown(&actual),
                shown(&expected)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} reference cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    app.stop().await;
}

mod sqlite {
    #[tokio::test]
    async fn every_reference_patch_case_ends_as_expected_byte_for_byte() {
        super::every_reference_patch_case_ends_as_expected_byte_for_byte(
            writ_tests::Backend::Sqlite,
        )
        .await;
    }
}
