//! The workspace's files, as the direct file routes and the file tools ask for them: a
//! directory's listing, a file's content (text cut at a character limit, or the raw bytes), and
//! raw-body writes checked (path, encoding, expected SHA-256) and recorded through
//! [`writ_core::direct`].

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;
use writ_core::audit::OperationKind;
use writ_core::content::{invalid_utf8_sequences, numbered_preview, sha256_hex, truncate_chars};
use writ_core::direct;
use writ_core::files::{WriteMode, WriteSpec};
use writ_core::keys::Scope;
use writ_core::workspace::DirEntry;
use writ_core::{RepoPath, Workspace};

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode, path_error, workspace_error, write_error};
use crate::state::AppState;

/// Lines of the numbered preview returned for an update.
const PREVIEW_LINES: usize = 40;
/// Invalid UTF-8 sequences listed in a 422 answer.
const MAX_INVALID_REPORTED: usize = 20;

/// The query of `GET /files`, and the input of the `list_files` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Directory relative to the workspace root; empty or absent for the root.
    #[serde(default)]
    pub dir: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Listing {
    pub dir: String,
    pub entries: Vec<DirEntry>,
}

/// The listing behind `GET /files` and the `list_files` tool.
pub async fn list_dir(workspace: &dyn Workspace, params: ListParams) -> Result<Listing, ApiError> {
    let raw = params.dir.unwrap_or_default();
    let dir = RepoPath::parse_dir(&raw).map_err(|e| path_error(&e, "dir"))?;
    let entries = workspace
        .list(&dir)
        .await
        .map_err(|e| workspace_error(e, "dir"))?;
    Ok(Listing {
        dir: dir.to_string(),
        entries,
    })
}

/// A file as read for `GET /files/{path}` and the `read_file` tool. A file longer than what can
/// be returned is read no further (its head only): then there is no hash and no character count.
#[derive(Debug)]
pub struct FileRead {
    pub path: String,
    /// The SHA-256 of the whole file (`None` when only its head was read).
    pub sha256: Option<String>,
    pub size_bytes: u64,
    pub content: FileContent,
}

#[derive(Debug)]
pub enum FileContent {
    /// UTF-8 text, cut at the character limit with a marker saying so.
    Text {
        shown: String,
        /// `None` when only the file's head was read.
        total_chars: Option<usize>,
        truncated: bool,
    },
    /// Not UTF-8: the bytes as they are (the head only, for a long file).
    Binary(Vec<u8>),
}

/// Reads a file, cutting text at `max_chars` (default `WRIT_READ_DEFAULT_CHARS`).
pub async fn read(
    workspace: &dyn Workspace,
    settings: &Settings,
    raw: &str,
    max_chars: Option<usize>,
) -> Result<FileRead, ApiError> {
    let path = RepoPath::parse_nonempty(raw).map_err(|e| path_error(&e, "path"))?;
    let limit = max_chars.unwrap_or(settings.read_default_chars);
    if limit == 0 || limit > settings.read_max_chars {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!(
                "max_chars must be between 1 and {}, got {limit}",
                settings.read_max_chars
            ),
        )
        .with_field("max_chars"));
    }
    // A character is at most four bytes, so this many hold `limit` characters whatever they are;
    // a file longer than that is read no further than what can be returned.
    let (bytes, size) = workspace
        .read_head(&path, limit.saturating_mul(4))
        .await
        .map_err(|e| workspace_error(e, "path"))?
        .ok_or_else(|| ApiError::not_found(format!("'{path}' does not exist")))?;
    let max = settings.read_max_chars;
    if (bytes.len() as u64) < size {
        return Ok(head_only(&path, bytes, size, limit, max));
    }
    let sha256 = Some(sha256_hex(&bytes));
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Ok(FileRead {
            path: path.to_string(),
            sha256,
            size_bytes: size,
            content: FileContent::Binary(bytes),
        });
    };
    let total_chars = text.chars().count();
    let (shown, cut) = truncate_chars(text, limit);
    let mut shown = shown.to_string();
    if cut {
        shown.push_str(&format!(
            "\n[writ: '{path}' truncated at {limit} of {total_chars} characters ({size} bytes); \
             ask with ?max_chars= up to {max} for more]\n"
        ));
    }
    Ok(FileRead {
        path: path.to_string(),
        sha256,
        size_bytes: size,
        content: FileContent::Text {
            shown,
            total_chars: Some(total_chars),
            truncated: cut,
        },
    })
}

/// A file of which only the head was read: cut at `limit` characters (or, for bytes that are not
/// UTF-8, at the head's end). Without the whole file there is no hash to give as ETag and no
/// character count; a caller who needs them asks for more characters.
fn head_only(path: &RepoPath, head: Vec<u8>, size: u64, limit: usize, max: usize) -> FileRead {
    // The head may end inside a character: that cut is not an encoding error.
    let text = match std::str::from_utf8(&head) {
        Ok(text) => Some(text),
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    let content = match text {
        None => FileContent::Binary(head),
        Some(text) => {
            let (shown, _) = truncate_chars(text, limit);
            FileContent::Text {
                shown: format!(
                    "{shown}\n[writ: '{path}' truncated at {limit} characters ({size} bytes in all); ask with \
                     ?max_chars= up to {max} for more]\n"
                ),
                total_chars: None,
                truncated: true,
            }
        }
    };
    FileRead {
        path: path.to_string(),
        sha256: None,
        size_bytes: size,
        content,
    }
}
/// What a raw body that is not UTF-8 gets.
#[derive(
    Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum InvalidUtf8Policy {
    /// Answered 422, listing each invalid byte sequence.
    #[default]
    Reject,
    /// Each invalid sequence becomes U+FFFD.
    Replace,
}

/// The query of `PUT /files/{path}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// `create` fails with 409 if the file exists.
    #[serde(default)]
    pub mode: WriteMode,
    /// `reject` answers 422 listing each invalid byte sequence; `replace` substitutes U+FFFD.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8Policy,
    /// Create missing parent directories (otherwise 409).
    #[serde(default)]
    pub create_dirs: bool,
    /// Commit the write, where the workspace is a git repository (docs/history.md). Absent: as
    /// the workspace is set (its git_commit, else WRIT_GIT_COMMIT).
    #[serde(default)]
    pub commit: Option<bool>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct WriteAnswer {
    pub path: String,
    /// A direct write that fails answers an error, never `failed`.
    #[schemars(extend("enum" = ["created", "updated", "unchanged"]))]
    pub operation: String,
    pub bytes: usize,
    pub characters: usize,
    pub sha256: String,
    pub previous_sha256: Option<String>,
    pub operation_id: Uuid,
    pub request_id: Uuid,
    /// `cat -n`-style view of the start of the file, for updates.
    pub preview: Option<String>,
    /// When the workspace is a git checkout: another workspace of its repository, or the
    /// branch it goes back to, changed this path too since they share a base.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<writ_core::overlaps::Overlap>,
}

/// One direct write, as `PUT /files/{path}` and the `write_file` tool ask for it.
pub struct FileWrite {
    /// Recorded on the request row: which surface asked.
    pub route: &'static str,
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the write, when auth is on.
    pub scope: Option<Scope>,
    pub path: String,
    pub params: WriteParams,
    pub expected_sha256: Option<String>,
    pub body: Vec<u8>,
}

/// A direct write's answer.
pub struct FileWritten {
    /// The file did not exist before (201 over HTTP, 200 otherwise).
    pub created: bool,
    pub answer: WriteAnswer,
}

/// Checks and performs a recorded direct write.
pub async fn write(state: &AppState, w: FileWrite) -> Result<FileWritten, ApiError> {
    let FileWrite {
        route,
        request_id,
        caller,
        scope,
        path: raw,
        params,
        expected_sha256,
        body,
    } = w;
    let path = RepoPath::parse_nonempty(&raw).map_err(|e| path_error(&e, "path"))?;
    if state.settings.respect_claims {
        crate::service::workspaces::refuse_claimed(
            &state.workspaces,
            state.workspace.name(),
            &[(path.as_str(), "path")],
            caller.as_deref(),
        )
        .await?;
    }

    let content: Vec<u8> = match std::str::from_utf8(&body) {
        Ok(_) => body,
        Err(_) if params.on_invalid_utf8 == InvalidUtf8Policy::Replace => {
            String::from_utf8_lossy(&body).into_owned().into_bytes()
        }
        Err(_) => {
            let invalid = invalid_utf8_sequences(&body, MAX_INVALID_REPORTED);
            let offsets: Vec<String> = invalid.iter().map(|i| i.offset.to_string()).collect();
            return Err(ApiError::new(
                ErrorCode::InvalidUtf8,
                format!(
                    "the body is not valid UTF-8 (invalid bytes at offsets {}); fix the encoding or pass on_invalid_utf8=replace",
                    offsets.join(", ")
                ),
            )
            .with_field("body")
            .with_details(json!({ "invalid": invalid })));
        }
    };

    let spec = WriteSpec {
        path: path.clone(),
        content,
        mode: params.mode,
        expected_sha256,
        create_dirs: params.create_dirs,
    };
    write_recorded(
        state,
        route,
        request_id,
        (caller, scope),
        spec,
        params.commit,
    )
    .await
}

async fn write_recorded(
    state: &AppState,
    route: &'static str,
    request_id: Uuid,
    (caller, scope): (Option<String>, Option<Scope>),
    spec: WriteSpec,
    commit: Option<bool>,
) -> Result<FileWritten, ApiError> {
    let path = spec.path.clone();
    let author = caller.clone();
    let author_key = caller.clone();
    let write = direct::DirectWrite {
        request_id,
        caller,
        scope,
        route: route.to_string(),
        spec,
    };
    let receipt = direct::write(state.store.as_ref(), state.workspace.as_ref(), write)
        .await
        .map_err(|e| write_error(e, "path"))?;
    super::git::commit_request(
        state,
        commit,
        writ_core::commits::RequestCommit {
            request_id,
            caller: author,
            subject: format!("Write {path}"),
            body: String::new(),
            trailers: Vec::new(),
            files: super::git::file(path.as_str(), Some(receipt.sha256.clone()), "direct")
                .into_iter()
                .collect(),
        },
    )
    .await;
    let overlaps = crate::service::workspaces::overlaps_written(
        state,
        &[path.to_string()],
        author_key.as_deref(),
    )
    .await;
    let text = String::from_utf8_lossy(&receipt.content);
    let answer = WriteAnswer {
        overlaps,
        path: path.to_string(),
        operation: receipt.operation.as_str().to_string(),
        bytes: receipt.bytes,
        characters: text.chars().count(),
        sha256: receipt.sha256.clone(),
        previous_sha256: receipt.previous_sha256.clone(),
        operation_id: receipt.operation_id,
        request_id,
        preview: (receipt.operation == OperationKind::Updated)
            .then(|| numbered_preview(&text, PREVIEW_LINES)),
    };
    Ok(FileWritten {
        created: receipt.operation == OperationKind::Created,
        answer,
    })
}

/// The expected SHA-256 of a conditional write (`If-Match`, with or without quotes).
pub fn parse_expected_sha256(value: &str) -> Result<String, ApiError> {
    let raw = value
        .trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_ascii_lowercase();
    if raw.len() != 64 || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::new(
            ErrorCode::InvalidHeader,
            format!("If-Match must be the file's SHA-256 as 64 hex digits, got '{raw}'"),
        )
        .with_field("If-Match"));
    }
    Ok(raw)
}
