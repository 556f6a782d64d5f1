//! The task set: one TOML file per task under `crates/writ-bench/eval/tasks/`, read and checked
//! here, and what each model answers for each file in each configuration.
//!
//! A task has one to three Python files, each with a correct implementation and two or three
//! subtly wrong ones, and one test script (plain `python3`, asserts) that imports the files from
//! the repository root. The files are data, so that a task is added without touching Rust.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

/// The candidate models every batch of the eval asks, in order; the first is "a single call".
pub const MODELS: [&str; 3] = ["eval-alpha", "eval-beta", "eval-gamma"];
/// The arbiter: always answers `{"choice": 1}` (biased to the first position it is shown).
pub const ARBITER: &str = "eval-judge";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// The file's stem; set after reading.
    #[serde(skip)]
    pub id: String,
    /// What the files together are for (sent as the batch's `task_description`).
    #[serde(default)]
    pub description: Option<String>,
    pub files: Vec<TaskFile>,
    /// The check: a python3 script with asserts, run from the repository root.
    pub test: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    pub path: String,
    pub description: String,
    pub correct: String,
    pub wrong: Vec<String>,
}

impl Task {
    /// Where the task's test lives in the repository under test.
    pub fn test_path(&self) -> String {
        format!("tests/test_{}.py", self.id)
    }

    /// Where the correct candidate of file `f` stands among [`MODELS`]: it moves with the task
    /// and the file, so that the first model is right for about a third of the files.
    pub fn correct_position(&self, index: usize, f: usize) -> usize {
        (index + f) % MODELS.len()
    }

    /// What each model answers first for file `f` when one candidate is correct.
    pub fn candidates(&self, index: usize, f: usize) -> Vec<&str> {
        let file = &self.files[f];
        let p = self.correct_position(index, f);
        let mut wrong = file.wrong.iter();
        (0..MODELS.len())
            .map(|k| {
                if k == p {
                    file.correct.as_str()
                } else {
                    wrong.next().map_or(file.correct.as_str(), String::as_str)
                }
            })
            .collect()
    }

    /// For the repair configuration: every model's first answer is wrong (distinct while there
    /// are enough wrong versions), and this model answers the correct file once shown the
    /// failure. It is always one whose candidate is distinct, so it is asked to repair.
    pub fn repairer(&self, index: usize, f: usize) -> usize {
        (index + f) % self.files[f].wrong.len().min(MODELS.len())
    }

    pub fn all_wrong(&self, f: usize) -> Vec<&str> {
        let wrong = &self.files[f].wrong;
        (0..MODELS.len())
            .map(|k| wrong[k % wrong.len()].as_str())
            .collect()
    }
}

/// Every `*.toml` under `dir`, sorted by name, checked: 1–3 files, 2–3 wrong versions each, all
/// versions distinct, paths unique across the set (one repository holds every task).
pub fn load(dir: &Path) -> anyhow::Result<Vec<Task>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the task directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    let mut tasks = Vec::new();
    let mut seen = BTreeSet::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let mut task: Task =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        task.id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("a task file name that is UTF-8")?
            .to_string();
        check(&task).with_context(|| format!("task {}", path.display()))?;
        for f in &task.files {
            if !seen.insert(f.path.clone()) {
                bail!("{}: the path {} is used by another task", task.id, f.path);
            }
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        bail!("no *.toml task in {}", dir.display());
    }
    Ok(tasks)
}

fn check(task: &Task) -> anyhow::Result<()> {
    if task.files.is_empty() || task.files.len() > 3 {
        bail!("files: 1 to 3, got {}", task.files.len());
    }
    for f in &task.files {
        if !(2..=3).contains(&f.wrong.len()) {
            bail!("{}: wrong: 2 or 3 versions, got {}", f.path, f.wrong.len());
        }
        if f.path.contains('/') || !f.path.ends_with(".py") {
            bail!("{}: path: a .py file at the repository root", f.path);
        }
        let mut versions: Vec<&str> = f.wrong.iter().map(String::as_str).collect();
        versions.push(&f.correct);
        let distinct: BTreeSet<String> = versions.iter().map(|v| normalise(v)).collect();
        if distinct.len() != versions.len() {
            bail!("{}: two versions are the same", f.path);
        }
    }
    Ok(())
}

/// What a comparison ignores: trailing whitespace on lines and at the end.
pub fn normalise(code: &str) -> String {
    let lines: Vec<&str> = code.lines().map(str::trim_end).collect();
    lines.join("\n").trim_end().to_string()
}

/// The task directory of this source tree.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("eval/tasks")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::process::Command;

    use super::*;

    const PYTHON: &str = "/usr/bin/python3";

    /// Runs the task's test in a fresh directory holding `files`; true when it exits 0.
    fn passes(task: &Task, files: &[(&str, &str)]) -> bool {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        let test = dir.path().join(task.test_path());
        std::fs::write(&test, &task.test).unwrap();
        for (path, code) in files {
            std::fs::write(dir.path().join(path), code).unwrap();
        }
        let out = Command::new(PYTHON)
            .arg(&test)
            .current_dir(dir.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .expect("/usr/bin/python3 (Debian's python3 package)");
        out.status.success()
    }

    #[test]
    fn every_correct_version_passes_its_test_and_every_wrong_one_fails_it() {
        let tasks = load(&default_dir()).unwrap();
        assert!(tasks.len() >= 44, "{} tasks", tasks.len());
        let multi = tasks.iter().filter(|t| t.files.len() > 1).count();
        assert!(multi >= 4, "{multi} multi-file tasks");
        let mut problems = Vec::new();
        for task in &tasks {
            let correct: Vec<(&str, &str)> = task
                .files
                .iter()
                .map(|f| (f.path.as_str(), f.correct.as_str()))
                .collect();
            if !passes(task, &correct) {
                problems.push(format!("{}: the correct files fail the test", task.id));
            }
            for (i, f) in task.files.iter().enumerate() {
                for (w, wrong) in f.wrong.iter().enumerate() {
                    let mut files = correct.clone();
                    files[i] = (f.path.as_str(), wrong.as_str());
                    if passes(task, &files) {
                        problems.push(format!(
                            "{}: wrong[{w}] of {} passes the test",
                            task.id, f.path
                        ));
                    }
                }
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn the_first_model_holds_the_correct_file_about_a_third_of_the_time() {
        let tasks = load(&default_dir()).unwrap();
        let (mut first, mut all) = (0, 0);
        for (i, task) in tasks.iter().enumerate() {
            for f in 0..task.files.len() {
                let c = task.candidates(i, f);
                assert_eq!(c.iter().filter(|&&x| x == task.files[f].correct).count(), 1);
                assert_eq!(c.iter().collect::<BTreeSet<_>>().len(), MODELS.len());
                first += usize::from(c[0] == task.files[f].correct);
                all += 1;
                let r = task.repairer(i, f);
                let wrong = task.all_wrong(f);
                assert!(
                    !wrong[..r].contains(&wrong[r]),
                    "the repairer's candidate is the first of its kind"
                );
            }
        }
        let share = first as f64 / all as f64;
        assert!((0.25..=0.42).contains(&share), "{first}/{all}");
    }
}
