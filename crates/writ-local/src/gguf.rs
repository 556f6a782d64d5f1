//! What a GGUF file says it is, read from its header alone (a few kilobytes past the vocabulary,
//! never the weights): its `general.name`, architecture, context length and chat template. writ
//! reads it before llama.cpp loads a file, so a file given for one model id that is another
//! model is refused by name, and `writ models list` and `writ check` can say what is on disk
//! without the engine.
//!
//! Written here rather than taken from a crate: the GGUF readers on crates.io either map the whole
//! file (a gigabyte for one string) or are unmaintained, and the header is a simple
//! little-endian key-value list.

use std::io::{BufReader, Read};
use std::path::Path;

/// The header fields writ uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufHeader {
    /// `general.name`, e.g. `Qwen2.5 Coder 1.5B Instruct GGUF`.
    pub name: Option<String>,
    /// `general.architecture`, e.g. `qwen2`, `gemma3`, `llama`.
    pub architecture: Option<String>,
    /// `general.file_type` (15 is Q4_K_M).
    pub file_type: Option<u32>,
    /// `<architecture>.context_length`: the context the model was trained for.
    pub context_length: Option<u64>,
    /// Whether `tokenizer.chat_template` is present (Gemma 3's GGUF has none).
    pub has_chat_template: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{0} is not a GGUF file (its first bytes are not 'GGUF')")]
    NotGguf(String),
    #[error("{path}: GGUF version {version} is not one writ reads (2 or 3)")]
    Version { path: String, version: u32 },
    #[error("{path}: the GGUF header is malformed: {why}")]
    Malformed { path: String, why: String },
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Longest key or string value read into memory; a longer one is a corrupt header (chat
/// templates are a few kilobytes).
const MAX_STRING: u64 = 1 << 20;
/// Most metadata entries in a header (real ones have a few dozen).
const MAX_ENTRIES: u64 = 100_000;

/// Reads the header of the GGUF file at `path`.
pub fn read_header(path: &Path) -> Result<GgufHeader, GgufError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| GgufError::Io {
        path: shown.clone(),
        source,
    })?;
    let mut r = Reader {
        inner: BufReader::with_capacity(1 << 16, file),
        path: shown.clone(),
    };
    let mut magic = [0u8; 4];
    r.fill(&mut magic)
        .map_err(|_| GgufError::NotGguf(shown.clone()))?;
    if &magic != b"GGUF" {
        return Err(GgufError::NotGguf(shown));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Version {
            path: shown,
            version,
        });
    }
    let _tensors = r.u64()?;
    let entries = r.u64()?;
    if entries > MAX_ENTRIES {
        return Err(r.malformed(format!("{entries} metadata entries")));
    }
    let mut header = GgufHeader::default();
    let mut context_lengths: Vec<(String, u64)> = Vec::new();
    for _ in 0..entries {
        let key = r.string()?;
        let kind = r.u32()?;
        match (key.as_str(), kind) {
            ("general.name", STRING) => header.name = Some(r.string()?),
            ("general.architecture", STRING) => header.architecture = Some(r.string()?),
            ("general.file_type", UINT32) => header.file_type = Some(r.u32()?),
            ("tokenizer.chat_template", STRING) => {
                r.skip_value(kind)?;
                header.has_chat_template = true;
            }
            (k, UINT32 | UINT64) if k.ends_with(".context_length") => {
                let n = if kind == UINT32 {
                    u64::from(r.u32()?)
                } else {
                    r.u64()?
                };
                context_lengths.push((k.trim_end_matches(".context_length").to_string(), n));
            }
            _ => r.skip_value(kind)?,
        }
    }
    header.context_length = context_lengths
        .into_iter()
        .find(|(arch, _)| Some(arch) == header.architecture.as_ref())
        .map(|(_, n)| n);
    Ok(header)
}

const UINT32: u32 = 4;
const STRING: u32 = 8;
const ARRAY: u32 = 9;
const UINT64: u32 = 10;

/// The size in bytes of a fixed-size GGUF value type.
fn fixed_size(kind: u32) -> Option<u64> {
    match kind {
        0 | 1 | 7 => Some(1), // u8, i8, bool
        2 | 3 => Some(2),     // u16, i16
        4..=6 => Some(4),     // u32, i32, f32
        10..=12 => Some(8),   // u64, i64, f64
        _ => None,
    }
}

struct Reader {
    inner: BufReader<std::fs::File>,
    path: String,
}

impl Reader {
    fn malformed(&self, why: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.clone(),
            why,
        }
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        self.inner.read_exact(buf).map_err(|source| GgufError::Io {
            path: self.path.clone(),
            source,
        })
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let len = self.u64()?;
        if len > MAX_STRING {
            return Err(self.malformed(format!("a string of {len} bytes")));
        }
        let mut b = vec![0u8; len as usize];
        self.fill(&mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        let copied = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink()).map_err(
            |source| GgufError::Io {
                path: self.path.clone(),
                source,
            },
        )?;
        if copied < n {
            return Err(self.malformed("the header ends early".into()));
        }
        Ok(())
    }

    fn skip_value(&mut self, kind: u32) -> Result<(), GgufError> {
        if let Some(n) = fixed_size(kind) {
            return self.skip(n);
        }
        match kind {
            STRING => {
                let len = self.u64()?;
                self.skip(len)
            }
            ARRAY => {
                let item = self.u32()?;
                let count = self.u64()?;
                match fixed_size(item) {
                    Some(n) => self.skip(n.saturating_mul(count)),
                    None if item == STRING => {
                        for _ in 0..count {
                            let len = self.u64()?;
                            self.skip(len)?;
                        }
                        Ok(())
                    }
                    None => Err(self.malformed(format!("an array of value type {item}"))),
                }
            }
            other => Err(self.malformed(format!("value type {other}"))),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A GGUF header of the given entries, as llama.cpp's writer lays it out.
    pub(crate) fn header_bytes(entries: &[(&str, Value)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend((entries.len() as u64).to_le_bytes());
        let string = |b: &mut Vec<u8>, s: &str| {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        };
        for (key, value) in entries {
            string(&mut b, key);
            match value {
                Value::Str(s) => {
                    b.extend(STRING.to_le_bytes());
                    string(&mut b, s);
                }
                Value::U32(n) => {
                    b.extend(UINT32.to_le_bytes());
                    b.extend(n.to_le_bytes());
                }
                Value::Strings(items) => {
                    b.extend(ARRAY.to_le_bytes());
                    b.extend(STRING.to_le_bytes());
                    b.extend((items.len() as u64).to_le_bytes());
                    for s in items {
                        string(&mut b, s);
                    }
                }
                Value::F32s(items) => {
                    b.extend(ARRAY.to_le_bytes());
                    b.extend(6u32.to_le_bytes());
                    b.extend((items.len() as u64).to_le_bytes());
                    for f in items {
                        b.extend(f.to_le_bytes());
                    }
                }
            }
        }
        b
    }

    pub(crate) enum Value {
        Str(&'static str),
        U32(u32),
        Strings(Vec<&'static str>),
        F32s(Vec<f32>),
    }

    #[test]
    fn the_name_architecture_and_context_are_read_past_arrays_of_any_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(
            &path,
            header_bytes(&[
                ("general.architecture", Value::Str("qwen2")),
                (
                    "tokenizer.ggml.tokens",
                    Value::Strings(vec!["!", "\"", "#"]),
                ),
                ("tokenizer.ggml.scores", Value::F32s(vec![0.5, -1.0])),
                (
                    "general.name",
                    Value::Str("Qwen2.5 Coder 1.5B Instruct GGUF"),
                ),
                ("qwen2.context_length", Value::U32(32768)),
                ("llama.context_length", Value::U32(8)),
                ("general.file_type", Value::U32(15)),
                (
                    "tokenizer.chat_template",
                    Value::Str("{% for m in messages %}"),
                ),
            ]),
        )
        .unwrap();
        let h = read_header(&path).unwrap();
        assert_eq!(h.name.as_deref(), Some("Qwen2.5 Coder 1.5B Instruct GGUF"));
        assert_eq!(h.architecture.as_deref(), Some("qwen2"));
        assert_eq!(h.context_length, Some(32768), "the architecture's own");
        assert_eq!(h.file_type, Some(15));
        assert!(h.has_chat_template);
    }

    #[test]
    fn a_file_that_is_not_gguf_or_ends_inside_its_header_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        std::fs::write(&path, b"not a model at all").unwrap();
        let err = read_header(&path).unwrap_err();
        assert!(matches!(err, GgufError::NotGguf(_)), "{err}");
        let mut cut = header_bytes(&[("general.name", Value::Str("Gemma 3 270m"))]);
        cut.truncate(cut.len() - 3);
        std::fs::write(&path, cut).unwrap();
        assert!(read_header(&path).is_err());
    }
}
