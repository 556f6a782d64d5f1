//! Whether a file is the model its id names: its GGUF header's `general.name` must be the
//! model's (else the file is refused), and its SHA-256 is compared with the pinned one (a file
//! that names the model but is not the pinned build — another quantization, a re-conversion —
//! is served, flagged as unpinned wherever the model is reported).
//!
//! Hashing a gigabyte takes seconds, so a verified hash is stamped beside the file
//! (`<file>.sha256`, with the size and modification time it was taken at) and trusted while
//! those stay the same.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::catalogue::LocalModel;
use crate::gguf;

/// What a file that names the model is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The pinned file, byte for byte.
    Pinned,
    /// It names the model, but its bytes are not the pinned file's.
    Unpinned { sha256: String },
    /// It names the model; its hash was not taken (asked not to, and no stamp).
    Unhashed,
}

impl Identity {
    /// In words, for readiness, `writ check` and `writ models list`.
    pub fn describe(&self) -> String {
        match self {
            Identity::Pinned => "sha256 pinned".into(),
            Identity::Unpinned { sha256 } => format!(
                "NOT the pinned file (sha256 {}…): served under its name because its header names it, unverified",
                &sha256[..12.min(sha256.len())]
            ),
            Identity::Unhashed => "header checked, sha256 not yet checked".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "{path} is not {id}: its GGUF header names {found}, and {id} is \"{expected}\"; \
         writ serves no file under a name it is not"
    )]
    NotTheModel {
        id: String,
        path: String,
        found: String,
        expected: String,
    },
    #[error("{0}")]
    Gguf(#[from] gguf::GgufError),
    #[error("reading {path} to hash it: {source}")]
    Hash {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Whether to hash a file with no valid stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hashing {
    /// Hash it (and stamp the result): before serving it.
    Always,
    /// Only read a stamp: for reports that must stay quick.
    StampOnly,
}

/// Checks that `path` is `model`.
pub fn check(model: &LocalModel, path: &Path, hashing: Hashing) -> Result<Identity, IdentityError> {
    let header = gguf::read_header(path)?;
    if header.name.as_deref() != Some(model.general_name) {
        return Err(IdentityError::NotTheModel {
            id: model.id(),
            path: path.display().to_string(),
            found: header
                .name
                .map_or_else(|| "no model".to_string(), |n| format!("\"{n}\"")),
            expected: model.general_name.to_string(),
        });
    }
    let sha256 = match (stamped(path), hashing) {
        (Some(sha), _) => sha,
        (None, Hashing::StampOnly) => return Ok(Identity::Unhashed),
        (None, Hashing::Always) => {
            let sha = sha256_file(path)?;
            stamp(path, &sha);
            sha
        }
    };
    Ok(if sha256 == model.sha256 {
        Identity::Pinned
    } else {
        Identity::Unpinned { sha256 }
    })
}

fn stamp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    path.with_file_name(name)
}

/// The size and modification time the stamp is valid for.
fn fingerprint(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!("{} {}", meta.len(), modified.as_nanos()))
}

/// Records `sha256` as the hash of the file at `path` as it is now. Best effort: a file in a
/// read-only place is hashed again next time.
pub fn stamp(path: &Path, sha256: &str) {
    if let Some(fp) = fingerprint(path) {
        let _ = std::fs::write(stamp_path(path), format!("{sha256} {fp}\n"));
    }
}

/// The stamped hash, when the file is still as it was stamped.
fn stamped(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(stamp_path(path)).ok()?;
    let (sha, fp) = text.trim().split_once(' ')?;
    (Some(fp.to_string()) == fingerprint(path)).then(|| sha.to_string())
}

/// The file's SHA-256, in hex, read a megabyte at a time.
pub fn sha256_file(path: &Path) -> Result<String, IdentityError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let hash_error = |source| IdentityError::Hash {
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(hash_error)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(hash_error)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{GEMMA3_270M, QWEN25_CODER_1_5B};
    use crate::gguf::tests::{Value, header_bytes};

    fn file_naming(dir: &Path, name: &'static str) -> PathBuf {
        let path = dir.join("model.gguf");
        std::fs::write(&path, header_bytes(&[("general.name", Value::Str(name))])).unwrap();
        path
    }

    #[test]
    fn a_file_whose_header_names_another_model_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_naming(dir.path(), "Smollm2 135M 8k Lc100K Mix1 Ep2");
        let err = check(&QWEN25_CODER_1_5B, &path, Hashing::Always).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("local/qwen2.5-coder-1.5b"), "{message}");
        assert!(message.contains("\"Smollm2 135M"), "{message}");
        assert!(
            message.contains("Qwen2.5 Coder 1.5B Instruct GGUF"),
            "{message}"
        );
    }

    #[test]
    fn a_file_that_names_the_model_but_is_not_the_pinned_one_is_flagged_and_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_naming(dir.path(), "Gemma 3 270m");
        assert_eq!(
            check(&GEMMA3_270M, &path, Hashing::StampOnly).unwrap(),
            Identity::Unhashed
        );
        let identity = check(&GEMMA3_270M, &path, Hashing::Always).unwrap();
        let Identity::Unpinned { sha256 } = &identity else {
            panic!("{identity:?}")
        };
        assert_eq!(*sha256, sha256_file(&path).unwrap());
        assert!(identity.describe().contains("NOT the pinned file"));
        assert_eq!(
            check(&GEMMA3_270M, &path, Hashing::StampOnly).unwrap(),
            identity,
            "the stamp answers without hashing again"
        );
    }

    #[test]
    fn a_stamp_is_not_trusted_once_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_naming(dir.path(), "Gemma 3 270m");
        std::fs::write(stamp_path(&path), format!("{} 1 2\n", GEMMA3_270M.sha256)).unwrap();
        assert_eq!(
            check(&GEMMA3_270M, &path, Hashing::StampOnly).unwrap(),
            Identity::Unhashed,
            "a stamp of another size and time says nothing"
        );
        stamp(&path, GEMMA3_270M.sha256);
        assert_eq!(
            check(&GEMMA3_270M, &path, Hashing::StampOnly).unwrap(),
            Identity::Pinned
        );
        std::fs::write(
            &path,
            header_bytes(&[
                ("general.name", Value::Str("Gemma 3 270m")),
                ("x", Value::U32(1)),
            ]),
        )
        .unwrap();
        assert!(matches!(
            check(&GEMMA3_270M, &path, Hashing::Always).unwrap(),
            Identity::Unpinned { .. }
        ));
    }
}
