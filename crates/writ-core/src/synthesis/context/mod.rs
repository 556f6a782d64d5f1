//! What a candidate sees of the repository beyond the batch's own files and the files they
//! import: the files, folders and globs the caller names (`context`, checked before any model is
//! called), and the repository map — outlines of the files most related to the one being written,
//! ranked and fitted to a token budget.
//!
//! The map ranks the workspace's files (as a walk sees them: `.gitignore` and protected paths
//! honoured) by how they relate to the file: the modules it imports, the files that mention its
//! name (found with the workspace search), its tests, its folder, and the files whose definitions
//! share words with its description. Outlines are cached by content hash, so an unchanged file is
//! parsed once per process.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use writ_checks::Language;

use crate::content::{sha256_hex, truncate_chars};
use crate::path::RepoPath;
use crate::search::{SearchError, WalkedFile, content_key};
use crate::synthesis::batch::{Batch, BatchError, ContextEntry, ContextTarget, FileSpec};
use crate::synthesis::prompt::{ContextFile, MoreContext};
use crate::synthesis::stage::{BatchFile, Named, NamedContext, Present};
use crate::workspace::{Workspace, WorkspaceError};

mod map;

pub use map::repo_map;

/// Characters of named context in one prompt (≈ 15,000 tokens).
const MAX_NAMED_CHARS: usize = 60_000;
/// Characters of one named file shown whole; past it, its outline.
const MAX_NAMED_FILE_CHARS: usize = 12_000;
/// Files a folder's tree or a glob lists at most.
const MAX_LISTED_FILES: usize = 500;
/// Files a glob shows (whole or as outlines) at most; the rest are listed.
const MAX_GLOB_SHOWN: usize = 20;
/// Files of the workspace the map lists at most when it walks (without a current index).
const MAP_WALK_FILES: usize = 50_000;
/// Files the map's two searches look at at most.
const MAP_SEARCH_FILES: usize = 1_000_000;
/// Files whose outline the map computes at most (the best by path alone).
const MAP_CANDIDATES: usize = 150;
/// Files of the file's folder (per kind: its extension, the rest) and beneath its top folder the
/// index's look-ups add for the map: more than a budget can show as fillers
/// (`map::FILLER_SHARE`), so the description's words still choose among them.
const MAP_FILL: usize = 60;
/// Files larger than this never enter the map.
const MAP_MAX_FILE_BYTES: u64 = 512 * 1024;
/// Outlines kept in the process-wide cache before it starts over.
const OUTLINE_CACHE_ENTRIES: usize = 20_000;

/// Prompt tokens of a text, estimated at four characters a token (the usual figure for code and
/// English with the common tokenizers; no tokenizer is shipped).
pub fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// Finds every `context` entry on disk. A path that does not exist, is protected or leads
/// outside the workspace, and a glob that matches nothing, are refused naming the field.
pub(crate) async fn resolve_context(
    workspace: &dyn Workspace,
    batch: &Batch,
) -> Result<NamedContext, BatchError> {
    let mut named = NamedContext::default();
    for entry in batch.context() {
        named.batch.push(resolve(workspace, entry).await?);
    }
    for file in batch.files() {
        let mut list = Vec::new();
        for entry in &file.context {
            list.push(resolve(workspace, entry).await?);
        }
        named.files.push(list);
    }
    Ok(named)
}

async fn resolve(workspace: &dyn Workspace, entry: &ContextEntry) -> Result<Named, BatchError> {
    let refuse = |message: String| BatchError {
        field: entry.field.clone(),
        message,
    };
    match &entry.target {
        ContextTarget::Glob(pattern) => {
            let walk = workspace
                .walk(&RepoPath::root(), Some(pattern), MAX_LISTED_FILES)
                .await
                .map_err(|e| refuse(search_error(e)))?;
            if walk.files.is_empty() {
                return Err(refuse(format!(
                    "'{pattern}' matches no file of the workspace (ignored and protected files are never shown)"
                )));
            }
            Ok(Named::Glob {
                pattern: pattern.clone(),
                files: walk.files,
                truncated: walk.truncated,
            })
        }
        ContextTarget::Path(path) => {
            let folder = if path.is_root() {
                true
            } else {
                match workspace.check_target(path, false).await {
                    Ok(()) => false,
                    Err(WorkspaceError::IsDirectory { .. }) => true,
                    Err(WorkspaceError::Protected {
                        protected, reason, ..
                    }) => {
                        return Err(refuse(format!(
                            "'{path}' is protected ({protected}: {reason}); it is never shown to models"
                        )));
                    }
                    Err(WorkspaceError::ParentMissing { .. } | WorkspaceError::NotFound { .. }) => {
                        return Err(refuse(format!("'{path}' does not exist in the workspace")));
                    }
                    Err(e) => return Err(refuse(e.to_string())),
                }
            };
            if folder {
                let walk = workspace
                    .walk(path, None, MAX_LISTED_FILES)
                    .await
                    .map_err(|e| refuse(search_error(e)))?;
                return Ok(Named::Folder {
                    path: path.clone(),
                    files: walk.files,
                    truncated: walk.truncated,
                });
            }
            match workspace.read_head(path, 0).await {
                Ok(Some(_)) => Ok(Named::File(path.clone())),
                Ok(None) => Err(refuse(format!("'{path}' does not exist in the workspace"))),
                Err(e) => Err(refuse(e.to_string())),
            }
        }
    }
}

/// The named context of one file (the batch's entries, then its own) and its repository map,
/// each within its bound. `shown`: paths the prompt shows anyway, never repeated.
pub(crate) async fn more_context(
    workspace: &dyn Workspace,
    default_map_tokens: usize,
    batch: &Batch,
    batch_file: &BatchFile,
    present: &Present,
    shown: &[String],
) -> MoreContext {
    let mut more = MoreContext::default();
    // The batch's entries first and apart from what this file shows anyway: they open every
    // file's prompt, byte-identical, where a provider's prompt cache finds them.
    let mut seen: Vec<String> = batch.files().iter().map(|f| f.path.to_string()).collect();
    let mut budget = MAX_NAMED_CHARS;
    for entry in &present.named {
        show_entry(
            workspace,
            entry,
            &mut seen,
            &mut budget,
            &mut more.named,
            &mut more.trees,
        )
        .await;
    }
    seen.extend(shown.iter().cloned());
    for entry in &batch_file.named {
        show_entry(
            workspace,
            entry,
            &mut seen,
            &mut budget,
            &mut more.own,
            &mut more.own_trees,
        )
        .await;
    }
    let map_tokens = batch
        .options()
        .repo_map_tokens
        .unwrap_or(default_map_tokens);
    if map_tokens > 0 {
        (more.map, more.map_pending) = repo_map(
            workspace,
            &present.map,
            &present.files,
            batch,
            batch_file,
            &seen,
            map_tokens,
        )
        .await;
    }
    more
}

/// One named entry: files whole or as outlines into `files`, folders and large globs as trees
/// into `trees`.
async fn show_entry(
    workspace: &dyn Workspace,
    entry: &Named,
    seen: &mut Vec<String>,
    budget: &mut usize,
    files: &mut Vec<ContextFile>,
    trees: &mut Vec<(String, String)>,
) {
    match entry {
        Named::File(path) => {
            show_named(workspace, path, seen, budget, files).await;
        }
        Named::Folder {
            path,
            files: listed,
            truncated,
        } => {
            let what = if path.is_root() {
                "the workspace's files".to_owned()
            } else {
                format!(
                    "the folder {}/",
                    crate::synthesis::prompt::quote(path.as_str())
                )
            };
            let tree = tree(path, listed, *truncated);
            *budget = budget.saturating_sub(tree.len());
            trees.push((what, tree));
        }
        Named::Glob {
            pattern,
            files: matched,
            truncated,
        } => {
            for f in matched.iter().take(MAX_GLOB_SHOWN) {
                show_named(workspace, &f.path, seen, budget, files).await;
            }
            if matched.len() > MAX_GLOB_SHOWN {
                let tree = tree(&RepoPath::root(), matched, *truncated);
                *budget = budget.saturating_sub(tree.len());
                trees.push((format!("all the files matching `{pattern}`"), tree));
            }
        }
    }
}

/// One named file, whole up to its bound, then as an outline, within `budget`.
async fn show_named(
    workspace: &dyn Workspace,
    path: &RepoPath,
    seen: &mut Vec<String>,
    budget: &mut usize,
    out: &mut Vec<ContextFile>,
) {
    if *budget == 0 || seen.iter().any(|s| s == path.as_str()) {
        return;
    }
    let Ok(Some(bytes)) = workspace.read(path).await else {
        return;
    };
    let text = String::from_utf8_lossy(&bytes);
    let limit = MAX_NAMED_FILE_CHARS.min(*budget);
    let (text, outline) = if text.chars().count() <= limit {
        (text.into_owned(), false)
    } else {
        let outline = cached_outline(&bytes, path.as_str());
        (truncate_chars(&outline.text, limit).0.to_owned(), true)
    };
    *budget = budget.saturating_sub(text.chars().count());
    seen.push(path.to_string());
    out.push(ContextFile {
        path: path.to_string(),
        text,
        outline,
    });
}

/// The files of `dir` as an indented tree (paths relative to it), with a line saying when the
/// listing was cut.
fn tree(dir: &RepoPath, files: &[WalkedFile], truncated: bool) -> String {
    let mut out = String::new();
    let mut previous: Vec<&str> = Vec::new();
    let prefix = dir.as_str();
    for f in files {
        let rel = f
            .path
            .as_str()
            .strip_prefix(prefix)
            .map_or(f.path.as_str(), |r| r.trim_start_matches('/'));
        let parts: Vec<&str> = rel.split('/').collect();
        let (dirs, name) = parts.split_at(parts.len() - 1);
        let common = previous
            .iter()
            .zip(dirs)
            .take_while(|(a, b)| a == b)
            .count();
        for (depth, d) in dirs.iter().enumerate().skip(common) {
            out.push_str(&format!("{}{d}/\n", "  ".repeat(depth)));
        }
        out.push_str(&format!(
            "{}{} ({} bytes)\n",
            "  ".repeat(dirs.len()),
            name[0],
            f.size
        ));
        previous = dirs.to_vec();
    }
    if files.is_empty() {
        out.push_str("(no files)\n");
    }
    if truncated {
        out.push_str(&format!("… (listing cut at {} files)\n", files.len()));
    }
    out
}

fn search_error(e: SearchError) -> String {
    match e {
        SearchError::Glob(m) => format!("not a valid glob: {m}"),
        SearchError::Pattern(m) => m,
        SearchError::Workspace(e) => e.to_string(),
    }
}

static OUTLINES: LazyLock<Mutex<HashMap<OutlineKey, Arc<Outline>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// What the outline cache keeps an outline under: its language and the index's
/// [`content_key`] of the bytes, or their SHA-256 when no index gave a key.
#[derive(PartialEq, Eq, Hash)]
enum OutlineKey {
    Indexed(Language, u64),
    Sha256(Language, String),
}

/// A file's outline as the cache keeps it: its text and its lines' words for the map's scoring.
pub(crate) struct Outline {
    pub text: String,
    parts: map::LineParts,
}

/// The cached outline of each file whose content key the workspace's index gave, looked up
/// under one lock; `None` where the file must be read ([`outline_of`]).
fn indexed_outlines<'p>(
    paths: impl Iterator<Item = &'p RepoPath>,
    contents: &HashMap<String, u64>,
) -> Vec<Option<Arc<Outline>>> {
    let Ok(cache) = OUTLINES.lock() else {
        return paths.map(|_| None).collect();
    };
    paths
        .map(|path| {
            let key = contents.get(path.as_str())?;
            let language = Language::from_path(path.as_str());
            cache.get(&OutlineKey::Indexed(language, *key)).cloned()
        })
        .collect()
}

/// The outline of the file at `path`, read and outlined (and kept under both keys, so the
/// index's key finds it without a read next time). `None` when it cannot be read.
async fn outline_of(workspace: &dyn Workspace, path: &RepoPath) -> Option<Arc<Outline>> {
    let language = Language::from_path(path.as_str());
    let bytes = workspace.read(path).await.ok()??;
    let outline = cached_outline(&bytes, path.as_str());
    if let Ok(mut cache) = OUTLINES.lock() {
        cache.insert(
            OutlineKey::Indexed(language, content_key(&bytes)),
            outline.clone(),
        );
    }
    Some(outline)
}

/// The file's outline, from the cache when the same content (and extension) was outlined before.
fn cached_outline(bytes: &[u8], path: &str) -> Arc<Outline> {
    let language = Language::from_path(path);
    let key = OutlineKey::Sha256(language, sha256_hex(bytes));
    if let Ok(cache) = OUTLINES.lock()
        && let Some(hit) = cache.get(&key)
    {
        return hit.clone();
    }
    let text = writ_checks::outline(&String::from_utf8_lossy(bytes), language);
    let outline = Arc::new(Outline {
        parts: map::line_parts(&text),
        text,
    });
    if let Ok(mut cache) = OUTLINES.lock() {
        if cache.len() >= OUTLINE_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, outline.clone());
    }
    outline
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::map::*;
    use super::*;

    #[test]
    fn identifiers_split_into_words() {
        assert_eq!(split_identifier("apply_discount"), ["apply", "discount"]);
        assert_eq!(split_identifier("applyDiscount"), ["apply", "discount"]);
        assert_eq!(split_identifier("MAX_RETRIES"), ["max", "retries"]);
    }

    #[test]
    fn a_line_holding_several_description_words_outweighs_lines_holding_one_each() {
        let words = description_words("Normalize the invoice totals, then round them");
        let together = shared_words("def normalizeInvoice(x): ...\n", &words);
        let apart = shared_words("def normalize(x): ...\ndef INVOICE_ID = 3\n", &words);
        assert_eq!(together, 4, "two words on one line count as four");
        assert_eq!(apart, 2, "one word on each of two lines counts as two");
        // Repeats count once a line; short and absent words not at all.
        assert_eq!(
            shared_words("def invoice_invoice(the, a): ...\n", &words),
            1
        );
        assert_eq!(shared_words("class Ledger: ...\n", &words), 0);
    }

    #[test]
    fn import_lines_name_module_paths() {
        let code = "from shop.pricing import total\nimport os\nimport { a } from './util/money'\nmod db;\n";
        assert_eq!(imports_in(code), ["shop/pricing", "os", "util/money", "db"]);
    }

    #[test]
    fn a_tree_indents_folders_once() {
        let f = |p: &str| WalkedFile {
            path: RepoPath::parse(p).unwrap(),
            size: 1,
        };
        let t = tree(
            &RepoPath::parse_dir("src").unwrap(),
            &[f("src/a.py"), f("src/m/b.py"), f("src/m/c.py")],
            false,
        );
        assert_eq!(
            t,
            "a.py (1 bytes)\nm/\n  b.py (1 bytes)\n  c.py (1 bytes)\n"
        );
    }

    #[test]
    fn the_map_fits_its_budget_and_cuts_the_last_file_at_a_line() {
        let file = |p: &str, lines: usize| ContextFile {
            path: p.into(),
            text: (0..lines)
                .map(|i| format!("def function_{i}(a, b):\n"))
                .collect(),
            outline: true,
        };
        let fitted = fit(
            [file("a.py", 10), file("b.py", 200), file("c.py", 5)].into_iter(),
            300,
        );
        assert_eq!(fitted.len(), 2);
        let used: usize = fitted
            .iter()
            .map(|f| tokens(&f.text) + tokens(&f.path) + 12)
            .sum();
        assert!(used <= 300, "{used}");
        assert!(fitted[1].text.ends_with(':'), "cut at a line end");
    }
}
