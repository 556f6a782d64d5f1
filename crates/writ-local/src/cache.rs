//! An answer cache for evaluations (`WRIT_LOCAL_ANSWER_CACHE`): the embedded engine is
//! deterministic for one model file, prompt, sampling settings, seed and cap, so an answer
//! computed once may be replayed. An eval that compares several ways of choosing among the same
//! samples then pays for each sample once, and its rows are a paired comparison.
//!
//! Two files in the cache directory: `answers.jsonl` (one computed answer a line, read at start)
//! and `access.jsonl` (every call, hit or not, with the answer's original latency and tokens), so
//! an eval can say what each batch would have cost without the cache.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One computed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAnswer {
    pub key: String,
    pub model: String,
    pub content: String,
    pub finish_reason: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// How long it took to compute, queue wait excluded.
    pub latency_ms: u64,
}

/// A line of `access.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Access {
    pub key: String,
    pub model: String,
    pub purpose: String,
    pub hit: bool,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: u64,
}

pub struct AnswerCache {
    dir: PathBuf,
    answers: Mutex<HashMap<String, CachedAnswer>>,
}

impl AnswerCache {
    /// Opens (or makes) the cache in `dir`; lines that do not parse (a run killed mid-write) are
    /// skipped.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut answers = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(dir.join("answers.jsonl")) {
            for line in text.lines() {
                if let Ok(a) = serde_json::from_str::<CachedAnswer>(line) {
                    answers.insert(a.key.clone(), a);
                }
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            answers: Mutex::new(answers),
        })
    }

    /// The key of everything that decides an answer.
    pub fn key(parts: &serde_json::Value) -> String {
        hex::encode(Sha256::digest(parts.to_string().as_bytes()))
    }

    pub fn get(&self, key: &str) -> Option<CachedAnswer> {
        self.answers.lock().ok()?.get(key).cloned()
    }

    /// Keeps a computed answer. Best effort: an eval without its cache only pays again.
    pub fn put(&self, answer: &CachedAnswer) {
        if let Ok(mut answers) = self.answers.lock() {
            append(&self.dir.join("answers.jsonl"), answer);
            answers.insert(answer.key.clone(), answer.clone());
        }
    }

    pub fn record(&self, access: &Access) {
        append(&self.dir.join("access.jsonl"), access);
    }
}

fn append(path: &Path, value: &impl Serialize) {
    let Ok(mut line) = serde_json::to_string(value) else {
        return;
    };
    line.push('\n');
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "the answer cache could not be written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_kept_is_found_again_by_a_new_cache_over_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let cache = AnswerCache::open(dir.path()).unwrap();
        let key = AnswerCache::key(&serde_json::json!({"model": "local/x", "prompt": "p"}));
        assert_ne!(
            key,
            AnswerCache::key(&serde_json::json!({"model": "local/x", "prompt": "q"}))
        );
        assert_eq!(cache.get(&key), None);
        let answer = CachedAnswer {
            key: key.clone(),
            model: "local/x".into(),
            content: "def f():\n    return 1\n".into(),
            finish_reason: "stop".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            latency_ms: 700,
        };
        cache.put(&answer);
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("answers.jsonl"))
            .unwrap()
            .write_all(b"{\"key\": \"cut")
            .unwrap();
        let reopened = AnswerCache::open(dir.path()).unwrap();
        assert_eq!(reopened.get(&key), Some(answer));
    }
}
