//! One entry per route of the route table: what the document says of an operation that the
//! table, the handler's arguments and the types do not (its summary, body, answers and the error
//! codes it answers), and the parts of the document that belong to no route. A new route needs
//! an entry in [`operation`]; a new field of a derived type, or a new parameter its handler
//! reads, needs nothing here.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use writ_core::budgets::Budget;
use writ_core::changes::{AppliedChange, ApplyChange, ChangeView, RejectChange, RejectedChange};
use writ_core::edits::{EditsRequest, EditsResponse};
use writ_core::execution::RunOutcome;
use writ_core::history::{RestoreOptions, RestoreResponse, UndoOptions, UndoResponse};
use writ_core::search::SearchResults;
use writ_core::sessions::{BeginSession, SessionView};
use writ_core::synthesis::BatchResponse;
use writ_core::synthesis::batch::WriteCodebaseRequest;

use super::model::{Info, Response, SecurityScheme};
use super::{Op, Schemas};
use crate::error::ErrorCode::*;
use crate::error::{ErrorBody, ErrorHeaders};
use crate::routes::changes::ChangeEventFrame;
use crate::routes::files::{ReadHeaders, WrittenHeaders};
use crate::routes::jobs::{EventFrame, JobList, JobView};
use crate::routes::synthesis::{AcceptedHeaders, BatchAnswerHeaders};
use crate::routes::tools::{ToolCall, ToolCallAnswer, ToolCallError};
use crate::routes::workspaces::WorkspaceList;
use crate::routes::write_sessions::Corrections;
use crate::service::changes::ChangeList;
use crate::service::files::{Listing, WriteAnswer};
use crate::service::operations::{OperationsPage, RecordedOperation};
use crate::service::run::RunRequest;
use crate::service::spend::KeySpend;
use crate::service::stats::ModelStatsPage;
use crate::service::synthesis::AcceptedBatch;
use crate::service::workspaces::{
    ClaimList, ClaimView, CreateWorkspace, DeletedWorkspace, MakeClaim, MergeWorkspace,
    MergedWorkspace, OverlapList, RebaseWorkspace, RebasedWorkspace, ReleasedClaims, WorkspaceInfo,
};
use crate::tools::formats::Declarations;

/// Bytes sent or answered as they are.
#[derive(schemars::JsonSchema)]
#[schemars(inline, extend("format" = "binary"))]
#[expect(dead_code, reason = "described, never made")]
struct Binary(String);

/// The entry of the route `method path` (axum's path syntax, as in the route table).
pub(super) fn operation(method: &str, path: &str, s: &mut Schemas) -> Option<Op> {
    Some(match (method, path) {
        ("GET", "/") => Op::new("dashboard", "The web dashboard (one HTML page; it reads the API below with the key typed into it).")
            .answer(200, Response::new("The page.").content("text/html", s.inline::<String>())),
        ("GET", "/healthz") => Op::new("healthz", "The process is alive.")
            .json(200, "Alive.", s.response::<crate::routes::meta::Health>()),
        ("GET", "/readyz") => Op::new("readyz", "Readiness, one entry per check; 503 when a check that writes need fails.")
            .json(200, "Ready.", s.response::<crate::readiness::ReadinessBody>())
            .json(503, "Not ready.", s.response::<crate::readiness::ReadinessBody>()),
        ("GET", "/metrics") => Op::new("metrics", "Prometheus text exposition.")
            .answer(200, Response::new("Metrics.").content("text/plain", s.inline::<String>())),
        ("GET", "/openapi.yaml") => Op::new("openapi", "This document.")
            .answer(200, Response::new("The OpenAPI document (YAML).").content("application/yaml", s.inline::<Map<String, Value>>())),
        ("GET", "/files") => Op::new("listFiles", "List the entries of a directory of the workspace.")
            .json(200, "The entries, sorted by name.", s.response::<Listing>())
            .errors(&[InvalidPath, NotFound, NotADirectory, ProtectedPath])
            .errors_at(422, &[InvalidPath]),
        ("GET", "/files/{*path}") => Op::new("readFile", "Read a file, cut at max_chars characters with a marker saying so.")
            .answer(200, Response::new(concat!(
                "The content. Text is returned as text/plain (with a final `[writ: … truncated …]` line when\n",
                "cut); bytes that are not UTF-8 as application/octet-stream.\n",
            ))
            .content("text/plain", s.inline::<String>())
            .content("application/octet-stream", s.inline::<Binary>())
            .headers(s.headers::<ReadHeaders>()))
            .errors(&[InvalidPath, NotFound, NotAFile, ProtectedPath])
            .errors_at(422, &[InvalidPath]),
        ("GET", "/search") => Op::new("searchFiles", "Search the workspace's files for a literal string or a regular expression.")
            .description(concat!(
                "Matching lines with their path, line number and `context_lines` lines around each. Files\n",
                "ignored by `.gitignore`/`.ignore`, `.git`, protected paths (writ's own files,\n",
                "WRIT_PROTECTED_PATHS), binary files, files over 2 MiB and whatever a symlink leads to are not\n",
                "searched. A search stops at `max_matches` lines, 100,000 files or 5 seconds and says which in\n",
                "`stopped`; that is an answer, not an error. A `dir` inside a protected path is 403\n",
                "`protected_path`. Also the `search_files` tool.\n",
            ))
            .json(200, "The matching lines, in path order.", s.response::<SearchResults>())
            .errors(&[InvalidPath, NotFound, NotADirectory, ProtectedPath])
            .errors_at(422, &[InvalidPath, InvalidParameter]),
        ("PUT", "/files/{*path}") => Op::new("putFile", "Write a file from the raw request body, recording it in the audit log first.")
            .raw_body(&[("text/plain", s.inline::<String>()), ("application/octet-stream", s.inline::<Binary>())])
            .answer(200, Response::new("Updated (or unchanged).").json(s.response::<WriteAnswer>()).headers(s.headers::<WrittenHeaders>()))
            .answer(201, Response::new("Created.").json(s.response::<WriteAnswer>()).headers(s.headers::<WrittenHeaders>()))
            .errors(&[InvalidPath, ProtectedPath, NotFound, AlreadyExists, ParentMissing, NotAFile, NotADirectory, PreconditionFailed, Claimed, FileTooLarge, InvalidUtf8, AuditUnavailable, NoSpace])
            .errors_at(422, &[InvalidPath]),
        ("POST", "/write_codebase") => Op::new("writeCodebase", "Write up to five files, each chosen among several models' candidates.")
            .description(concat!(
                "For each code file every candidate model (CODE_LIST or options.models) is asked at once; the\n",
                "candidates are extracted, normalised and parsed; one distinct viable candidate is taken as is,\n",
                "several go to the arbiter (CODE_MODEL), none to the fallback models. Refusals (4xx) happen before\n",
                "any model is called and before anything is written. HTTP 200 whenever the batch was accepted:\n",
                "per-file outcomes are in `results`. A file that exists is changed, never rewritten from a cut:\n",
                "the models see its whole content and answer with SEARCH/REPLACE edits (or a whole file), and a\n",
                "candidate that elides code, removes definitions the description does not name, or keeps less\n",
                "than 60 % of the lines is not viable. A file larger than WRIT_MAX_SHOWN_FILE_CHARS, or not\n",
                "UTF-8, is refused with 422 naming files[i].filename (change it with POST /edits instead).\n",
                "Each update's result carries `change` (lines added and removed, the unified diff). A code file\n",
                "that no longer holds its `expected_sha256` refuses the whole batch with 412 naming\n",
                "files[i].expected_sha256, as POST /edits does; a file that changes while the batch runs fails\n",
                "alone, in its result. A key, or the workspace the batch is in, that has spent a limit of\n",
                "its budget this UTC day or month is answered 402 `budget_exceeded` and nothing is called\n",
                "(`field` names the limit; `details` holds budget (`key` or `workspace`), workspace, period,\n",
                "limit_kind, limit, spent, resets_at).\n",
                "With `options.respect_claims` (or, when it is absent, WRIT_RESPECT_CLAIMS), a batch one of\n",
                "whose files another workspace of the same repository has claimed (`/workspaces/{name}/claims`)\n",
                "is answered 409 `claimed` naming files[i].filename, the claim, when it expires and, when the\n",
                "key may use it, the workspace holding it (`details.claims`); nothing is called or written.\n",
            ))
            .json_body(s.request::<WriteCodebaseRequest>())
            .answer(200, Response::new("The batch ran; see each file's result.").json(s.response::<BatchResponse>()).headers(s.headers::<BatchAnswerHeaders>()))
            .answer(202, Response::new("Accepted to run in the background (`Prefer: respond-async` or `options.async`); follow it at `Location`.").json(s.response::<AcceptedBatch>()).headers(s.headers::<AcceptedHeaders>()))
            .errors(&[InvalidRequest, BudgetExceeded, IdempotencyConflict, IdempotencyInProgress, PreconditionFailed, Claimed, TooManyBatches, ModelsUnavailable, CommandsUnavailable, AuditUnavailable]),
        ("POST", "/edits") => Op::new("postEdits", "Apply str_replace edits or an apply_patch patch to up to five files (changes, additions, deletions, moves), all or nothing.")
            .description(concat!(
                "Every file is read and every edit applied in memory first: an edit's old text must match its\n",
                "file exactly once (fallbacks: ignoring trailing whitespace and indentation, then also reading\n",
                "typographic dashes, quotes and spaces as ASCII; reported as edit_fallback). If any edit does\n",
                "not apply, nothing is written and the 422 `edit_failed` names the file and the edit\n",
                "(details.path, details.edit) and shows the closest lines. With validation, the configured\n",
                "checks run on a scratch copy with the edits applied (422 `validation_failed` with the output\n",
                "tail; nothing written; a request that deletes or moves files cannot be validated). Then the\n",
                "files are written as one recorded group, each only over the content the edits were made from\n",
                "(412 otherwise), and the deleted files and the sources of moves are removed, each only if it\n",
                "still holds what was read; if anything is refused, what was done is put back. A deletion is\n",
                "an operation `deleted` whose kept content is what the file held. A move never replaces a\n",
                "file (422 if its destination exists). Lines the edits do not touch keep their bytes: line\n",
                "endings, BOM and final newline stay the file's own; a replaced line keeps its own ending.\n",
                "Each file's answer and operation record carry the unified diff.\n",
            ))
            .json_body(s.request::<EditsRequest>())
            .json(200, "Every file was changed (or, with dry_run, would be).", s.response::<EditsResponse>())
            .errors(&[InvalidRequest, InvalidPath, ProtectedPath, NotFound, AlreadyExists, NotAFile, EditFailed, ValidationFailed, PreconditionFailed, Claimed, FileTooLarge, CommandsUnavailable, AuditUnavailable, NoSpace])
            .errors_at(422, &[InvalidPath]),
        ("POST", "/run") => Op::new("runCommand", "Run a configured command in the sandbox on a scratch of the workspace.")
            .description(concat!(
                "The command (a name from WRIT_COMMANDS) runs inside the sandbox: no network, nothing of the host\n",
                "but system directories (read-only), limits on time, CPU, memory, processes, output and what it\n",
                "writes (WRIT_RUN_SCRATCH_MB, WRIT_RUN_SCRATCH_FILES), on a scratch of REPO_DIR that is thrown away\n",
                "afterwards (a copy-on-write overlay where the machine allows it, else a bounded copy) — REPO_DIR\n",
                "itself never changes. Arguments follow the rules of paths (no control or bidirectional formatting\n",
                "characters; 422 naming `args[i]`). Recorded in the audit log as an operation of kind `run`. A\n",
                "failing command is a normal 200 answer with its exit code; 503 when no commands are configured,\n",
                "the sandbox cannot start here, the run queue is full (code `run_queue_full`, WRIT_RUN_QUEUE, with\n",
                "`Retry-After`) or REPO_DIR is over the copy bound (code `repository_too_large`, naming\n",
                "WRIT_RUN_COPY_MAX_MB or WRIT_RUN_COPY_MAX_FILES); 429 `too_many_runs` with `Retry-After` when the\n",
                "key has WRIT_RUN_MAX_PER_KEY runs in flight. A run whose caller hangs up is stopped and recorded\n",
                "as failed.\n",
            ))
            .json_body(s.request::<RunRequest>())
            .json(200, "The command ran (whatever its exit code).", s.response::<RunOutcome>())
            .errors(&[InvalidRequest, TooManyRuns, CommandsUnavailable, RunQueueFull, RepositoryTooLarge, AuditUnavailable]),
        ("POST", "/write_sessions") => Op::new("beginWriteSession", "Begin a write session for one target file; the content follows as raw chunks.")
            .description(concat!(
                "For content the caller already has or that its model streams as plain text: no JSON around it.\n",
                "The target is checked at once (sandbox path rules, protected paths, parent directory; `create` on an\n",
                "existing file is 409). Then send the content to /write_sessions/{id}/content in raw chunks and end it\n",
                "with a line that is exactly DONE, or POST /write_sessions/{id}/finish. Sessions belong to the key\n",
                "that began them, survive a restart, and expire after WRITE_SESSION_TTL_SECS without activity (recorded\n",
                "in the audit log). At most WRITE_SESSION_MAX_OPEN open sessions per caller (429 beyond).\n",
            ))
            .json_body(s.request::<BeginSession>())
            .json(201, "The session, awaiting content.", s.response::<SessionView>())
            .errors(&[InvalidRequest, InvalidPath, ProtectedPath, AlreadyExists, ParentMissing, NotAFile, Claimed, TooManyWriteSessions, AuditUnavailable])
            .errors_at(422, &[InvalidPath]),
        ("GET", "/write_sessions/{id}") => Op::new("getWriteSession", "A write session's state, counters and, once done, its write's receipt.")
            .description(concat!(
                "`awaiting_done_or_more_content` means no chunk came for WRITE_SESSION_IDLE_MS: `message` then holds\n",
                "the text to relay to the model. `needs_corrections` lists the invalid UTF-8 sequences by byte offset.\n",
            ))
            .json(200, "The session.", s.response::<SessionView>())
            .errors(&[NotFound, AuditUnavailable]),
        ("POST", "/write_sessions/{id}/content") => Op::new("appendWriteSessionContent", "Append a raw chunk of content to a write session.")
            .description(concat!(
                "The body is the chunk itself, never JSON, in any content type; chunks may split anywhere, even inside\n",
                "a UTF-8 character (the bytes are kept and checked only at finalisation). A chunk after which the\n",
                "content ends with a line that is exactly DONE finalises the session; that line is not written. A\n",
                "chunk above WRITE_SESSION_MAX_CHUNK_BYTES, or one that would take the session above\n",
                "WRITE_SESSION_MAX_BYTES, is 413 and is not kept. Content for a session that is done is 409.\n",
            ))
            .raw_body(&[("*/*", s.inline::<Binary>())])
            .json(200, "The session after the chunk (`done` with its receipt when the chunk ended it with DONE).", s.response::<SessionView>())
            .errors(&[NotFound, SessionState, TooLarge, ProtectedPath, PreconditionFailed, AlreadyExists, ParentMissing, Claimed, FileTooLarge, InvalidUtf8, AuditUnavailable, NoSpace]),
        ("POST", "/write_sessions/{id}/finish") => Op::new("finishWriteSession", "Finalise a write session without a DONE line.")
            .description(concat!(
                "Checks the content as UTF-8 and writes the file through the same recorded write as PUT /files (the\n",
                "audit record before the answer), or moves the session to `needs_corrections`. Finishing a session\n",
                "that is done answers the same receipt again; nothing is written twice.\n",
            ))
            .json(200, "The session, `done` with its receipt or `needs_corrections`.", s.response::<SessionView>())
            .errors(&[NotFound, SessionState, ProtectedPath, PreconditionFailed, AlreadyExists, ParentMissing, Claimed, FileTooLarge, AuditUnavailable, NoSpace]),
        ("POST", "/write_sessions/{id}/corrections") => Op::new("correctWriteSession", "Correct the invalid UTF-8 sequences a finalisation found, then finalise again.")
            .description(concat!(
                "Each correction replaces the invalid sequence starting at `offset` (as the session listed it) with\n",
                "`replacement`. After three rounds, whatever is still invalid becomes U+FFFD and the file is written.\n",
            ))
            .json_body(s.request::<Corrections>())
            .json(200, "The session, `done` with its receipt or `needs_corrections` again.", s.response::<SessionView>())
            .errors(&[InvalidRequest, NotFound, SessionState, ProtectedPath, PreconditionFailed, AlreadyExists, ParentMissing, Claimed, FileTooLarge, AuditUnavailable, NoSpace]),
        ("GET", "/jobs") => Op::new("listJobs", "Recent batches (jobs), newest first.")
            .description(concat!(
                "The key's own jobs; every key's with the `admin` scope (or while auth is off). Only in\n",
                "the workspaces the key may use; under `/workspaces/{name}/jobs`, only that workspace's.\n",
            ))
            .json(200, "The jobs, without their response bodies.", s.response::<JobList>())
            .errors(&[AuditUnavailable]),
        ("GET", "/jobs/{id}") => Op::new("getJob", "One batch's state and, once done, the same body the synchronous call returns.")
            .json(200, "The job.", s.response::<JobView>())
            .errors(&[InvalidParameter, NotFound, AuditUnavailable]),
        ("GET", "/jobs/{id}/events") => Op::new("jobEvents", "Server-Sent Events of one batch, one per progress event.")
            .description(concat!(
                "Each event has an `id` (1, 2, 3, … per job) and JSON `data` with a `type` field equal to the\n",
                "event name. `Last-Event-ID` replays what came after that id. The stream ends after `done`.\n",
                "Works for synchronous batches too (the job id is the request id). Another key's job is 404\n",
                "unless the key holds the `admin` scope.\n",
            ))
            .answer(200, Response::new("The event stream.").content("text/event-stream", s.inline::<EventFrame>()))
            .errors(&[InvalidParameter, NotFound, AuditUnavailable]),
        ("GET", "/operations") => Op::new("listOperations", "List operations of the audit log, newest first.")
            .description(concat!(
                "The key's own operations; every key's with the `admin` scope (or while auth is off). Only\n",
                "in the workspaces the key may use; under `/workspaces/{name}/operations`, only that\n",
                "workspace's.\n",
            ))
            .json(200, "One page.", s.response::<OperationsPage>())
            .errors(&[InvalidCursor, AuditUnavailable]),
        ("GET", "/operations/{id}") => Op::new("getOperation", "One operation with the content it wrote.")
            .description("Another key's operation is 404 unless the key holds the `admin` scope.")
            .json(200, "The operation.", s.response::<RecordedOperation>())
            .errors(&[InvalidParameter, NotFound, AuditUnavailable]),
        ("POST", "/operations/{id}/restore") => Op::new("restoreOperation", "Write the content an operation wrote back to its path.")
            .description(concat!(
                "Recorded as a new request (its operation's `detail.restore_of` names the operation\n",
                "restored), so a restore is undone like any request. With `expected_sha256` (the file's\n",
                "current SHA-256, `absent` if it must not exist) a file changed meanwhile is refused with 412\n",
                "`precondition_failed`. An operation that wrote no content (a deletion, a failure) is 422;\n",
                "one whose content the history retention already dropped is 410 `history_expired`.\n",
            ))
            .optional_json_body(s.request::<RestoreOptions>())
            .json(200, "The content was written back.", s.response::<RestoreResponse>())
            .errors(&[InvalidParameter, InvalidRequest, NotFound, Conflict, HistoryExpired, PreconditionFailed, ProtectedPath, AuditUnavailable, NoSpace]),
        ("POST", "/requests/{id}/undo") => Op::new("undoRequest", "Put every file a request wrote back as it was before it.")
            .description(concat!(
                "Updated files get their previous bytes back exactly (line endings, BOM, final newline),\n",
                "created files are removed, deleted files (and the sources of moves) come back. All or\n",
                "nothing: if one file cannot be written, what was already put back is taken back. Recorded\n",
                "as a new request (each operation's `detail.undo_of` names the request undone) that can be\n",
                "undone in turn (redo). A file changed since the request (its content is neither what the\n",
                "request left nor what it found) refuses the undo with 409 `changed_since` naming each such\n",
                "file in `details.files`, unless `force`: then the answer marks the later changes replaced\n",
                "(`replaced_later_change`). A request that wrote nothing, or whose files are all back as\n",
                "they were, answers 200 with an empty `files`. A content the history retention dropped is\n",
                "410 `history_expired` naming the files. Another key's request is 404 unless the key holds\n",
                "`admin`. See docs/history.md.\n",
            ))
            .optional_json_body(s.request::<UndoOptions>())
            .json(200, "The request was undone (or, with dry_run, would be).", s.response::<UndoResponse>())
            .errors(&[InvalidParameter, InvalidRequest, NotFound, ChangedSince, Conflict, HistoryExpired, PreconditionFailed, ProtectedPath, AuditUnavailable, NoSpace]),
        ("GET", "/changes") => Op::new("listChanges", "Change sets of this workspace held for review, newest first.")
            .description(concat!(
                "By default those with hunks still open and time left (`state=open`); `state=all` lists\n",
                "every one. A key sees the change sets it proposed; an admin key (or auth off) every one;\n",
                "under `/workspaces/{name}/changes`, that workspace's. Each is shown as `GET /changes/{id}`\n",
                "shows it. Also the `list_changes` tool. See docs/review.md.\n",
            ))
            .json(200, "The change sets.", s.response::<ChangeList>())
            .errors(&[AuditUnavailable]),
        ("GET", "/changes/{id}") => Op::new("getChange", "One change set: its state, files, hunks, why each file was chosen and the checks' evidence.")
            .description(concat!(
                "`state` is `open`, `applied`, `partially_applied`, `rejected`, `expired` (its time,\n",
                "WRIT_REVIEW_TTL, ran out with hunks open) or `stale` (a file with open hunks holds neither\n",
                "what the change was made from nor what an apply of it wrote: applying needs `rebase`). Each\n",
                "file gives its base's SHA-256, what it holds now, and its hunks with stable ids and their\n",
                "state. An unknown id and another key's change set answer the same 404. Also the\n",
                "`show_change` tool.\n",
            ))
            .json(200, "The change set.", s.response::<ChangeView>())
            .errors(&[NotFound, AuditUnavailable]),
        ("GET", "/changes/{id}/events") => Op::new("changeEvents", "Server-Sent Events of one change set: its proposal, then each apply and rejection.")
            .description(concat!(
                "`change_proposed` first (event 1), then one event per decision (`change_applied`,\n",
                "`change_rejected`), each with the change set's state after it. `Last-Event-ID` replays what\n",
                "came after that id. The stream ends once nothing more can be decided: every hunk decided,\n",
                "or the change set expired.\n",
            ))
            .answer(200, Response::new("The event stream.").content("text/event-stream", s.inline::<ChangeEventFrame>()))
            .errors(&[NotFound, AuditUnavailable]),
        ("POST", "/changes/{id}/apply") => Op::new("applyChange", "Apply a change set's hunks, all or nothing, after re-checking each file's base.")
            .description(concat!(
                "Applies the hunks named (`hunks`, by path), every open hunk of the files named (`files`),\n",
                "or, with neither, every open hunk. A file must still hold what the change was made from,\n",
                "or what an earlier apply of this change set wrote; one that changed since is refused with\n",
                "409 `changed_since` naming it in `details.files`, nothing written. With `rebase: true` the\n",
                "hunks are merged into what it holds now (three-way: its changes kept); a hunk whose lines\n",
                "were changed too is 409 `merge_conflict` listing those hunks in `details.files`. Applying\n",
                "part of a file's hunks writes exactly those. Every file is written or none; recorded as a\n",
                "request of its own (`request_id`: undo it to take the apply back), committed when git\n",
                "commit is on. Of two applies at once, exactly one lands: the other is 409\n",
                "`already_applied`. A hunk already decided is 409 `already_applied`/`already_rejected`, an\n",
                "unknown hunk id 422 `unknown_hunk` naming it, an expired change set 410 `change_expired`.\n",
                "Also the `apply_change` tool.\n",
            ))
            .optional_json_body(s.request::<ApplyChange>())
            .json(200, "The hunks were written.", s.response::<AppliedChange>())
            .errors(&[InvalidBody, InvalidRequest, UnknownHunk, NotFound, AlreadyApplied, AlreadyRejected, ChangedSince, MergeConflict, Conflict, PreconditionFailed, ChangeExpired, BodyTooLarge, FileTooLarge, ProtectedPath, AuditUnavailable, NoSpace]),
        ("POST", "/changes/{id}/reject") => Op::new("rejectChange", "Reject a change set's hunks; nothing is written.")
            .description(concat!(
                "Rejects the hunks named, every open hunk of the files named, or with neither every open\n",
                "hunk. Each file is recorded as an operation `rejected` with the model that made its content\n",
                "and the comment; `GET /stats/models` counts it. Refusals as for apply. Also the\n",
                "`reject_change` tool.\n",
            ))
            .optional_json_body(s.request::<RejectChange>())
            .json(200, "The hunks were rejected.", s.response::<RejectedChange>())
            .errors(&[InvalidBody, InvalidRequest, UnknownHunk, NotFound, AlreadyApplied, AlreadyRejected, Conflict, ChangeExpired, BodyTooLarge, AuditUnavailable]),
        ("GET", "/stats/models") => Op::new("modelStats", "Each model's candidates, viable, chosen, passed validation, cost, tokens and latency over a window of the audit log.")
            .description(concat!(
                "Counted from the operations of the window (failed ones too: their candidates were paid for).\n",
                "A key sees the figures of its own requests; an admin key (or auth off) all of them. At most\n",
                "20,000 operations are read; a window with more is counted from its newest and says\n",
                "`truncated`.\n",
            ))
            .json(200, "The window and each model's figures, most candidates first.", s.response::<ModelStatsPage>())
            .errors(&[AuditUnavailable]),
        ("GET", "/keys/{id}/spend") => Op::new("getKeySpend", "What a key spent this UTC day and month, beside its budget.")
            .description(concat!(
                "Spend is the cost and tokens (prompt and completion) of every model call the key's batches\n",
                "made in the window, counted when each call was made, whatever became of its batch. Another\n",
                "key's spend is 404 unless the key holds `admin`.\n",
            ))
            .json(200, "The key's budget and spend.", s.response::<KeySpend>())
            .errors(&[NotFound, AuditUnavailable]),
        ("PUT", "/keys/{id}/budget") => Op::new("putKeyBudget", "Set (or, with `{}`, remove) what a key may spend per UTC day and month.")
            .description(concat!(
                "A batch whose key has reached any limit in the current window is refused with 402\n",
                "`budget_exceeded` before any model is called; a running batch starts no further model call\n",
                "once a limit is reached (its calls in flight finish and count).\n",
            ))
            .json_body(s.request::<Budget>())
            .json(200, "The key's budget as set, and its spend.", s.response::<KeySpend>())
            .errors(&[InvalidRequest, NotFound, AuditUnavailable]),
        ("POST", "/workspaces") => Op::new("createWorkspace", "Make a named workspace (empty, from a directory, or a git worktree on a new branch).")
            .description(concat!(
                "Needs `WRIT_WORKSPACES_DIR` (refused 409 naming it when unset): an empty workspace and a\n",
                "worktree are made at `<WRIT_WORKSPACES_DIR>/<name>`; a `directory` source is a directory\n",
                "already beneath it. A `git_worktree` source makes the branch `branch` at `from` (default\n",
                "`HEAD`) in `repository` (a workspace's name, or a path relative to\n",
                "`WRIT_WORKSPACES_DIR`) and checks it out there. The workspace is recorded in the store, so\n",
                "every replica serves it. Nothing is made when a step is refused.\n",
            ))
            .json_body(s.request::<CreateWorkspace>())
            .json(201, "The workspace made.", s.response::<WorkspaceInfo>())
            .errors(&[InvalidRequest, AlreadyExists, Conflict, AuditUnavailable]),
        ("GET", "/workspaces") => Op::new("listWorkspaces", "Every workspace the key may use, `default` (REPO_DIR) first, then by name.")
            .json(200, "The workspaces.", s.response::<WorkspaceList>())
            .errors(&[AuditUnavailable]),
        ("GET", "/workspaces/{name}") => Op::new("getWorkspace", "One workspace, with its budget and what its batches spent this UTC day and month.")
            .json(200, "The workspace.", s.response::<WorkspaceInfo>())
            .errors(&[NotFound, AuditUnavailable]),
        ("PUT", "/workspaces/{name}/budget") => Op::new("putWorkspaceBudget", "Set (or, with `{}`, remove) what the batches in a workspace may spend per UTC day and month.")
            .description(concat!(
                "Whoever's key runs them: a batch in a workspace that has reached any limit in the current
",
                "window is refused with 402 `budget_exceeded` (`details.budget`: `workspace`) before any
",
                "model is called, as a key past its own budget is; a running batch starts no further model
",
                "call. Spend is every model call made in the workspace, kept in the store, so it holds across
",
                "replicas.
",
            ))
            .json_body(s.request::<Budget>())
            .json(200, "The workspace, with its budget as set and its spend.", s.response::<WorkspaceInfo>())
            .errors(&[InvalidRequest, NotFound, AuditUnavailable]),
        ("POST", "/workspaces/{name}/merge") => Op::new("mergeWorkspace", "Merge a git-worktree workspace's branch into another branch of its repository.")
            .description(concat!(
                "A fast-forward when `into` has not moved since the branch left it, else one merge commit with\n",
                "both as parents. When `into` is the branch checked out in the repository, its working tree\n",
                "follows through a safe checkout. Files both sides changed in ways that do not combine answer\n",
                "409 `conflict` with each file and its conflicting hunks (details.files) and neither branch\n",
                "moves. A merge that moved `into` is recorded in the audit log (its request_id). Only a\n",
                "git_worktree workspace has a branch to merge (422 naming `name`); an unknown `into` is 422\n",
                "naming `into`. When the workspace's newest rebase left the branch where it is and the checks\n",
                "it re-ran failed, the merge is refused with 409 `checks_failed` (details.checks) unless\n",
                "`force` is true.\n",
            ))
            .json_body(s.request::<MergeWorkspace>())
            .json(200, "Merged (or already up to date).", s.response::<MergedWorkspace>())
            .errors(&[InvalidRequest, NotFound, Conflict, ChecksFailed, AuditUnavailable]),
        ("POST", "/workspaces/{name}/rebase") => Op::new("rebaseWorkspace", "Replay a git-worktree workspace's branch on its target's tip, and re-run the checks of the files it touched.")
            .description(concat!(
                "The branch's own commits are replayed, in order, on the tip of `onto` (absent: the branch\n",
                "the workspace was made from), without touching any working tree until every commit applies.\n",
                "A conflict answers 409 `conflict` with each file and its hunks (details.files) and nothing\n",
                "moves; so do uncommitted changes in the workspace. After a clean rebase the worktree follows,\n",
                "and the checks recorded by the batches that last wrote each touched file are re-run in the\n",
                "sandbox on a scratch copy: their commands (`options.validation.commands`, in `checks`) and the\n",
                "generated tests they kept (in `generated`); `checks_passed` says whether all still pass. The\n",
                "rebase is recorded as a request; `POST /requests/{id}/undo` puts the branch back while no\n",
                "commit was made on it since. A merge of a branch whose newest rebase failed its checks is\n",
                "refused (409 `checks_failed`) unless forced. Needs `write`; a key bound to workspaces\n",
                "reaches only its own, and a branch of a workspace it may not use answers as none.\n",
            ))
            .json_body(s.request::<RebaseWorkspace>())
            .json(200, "Rebased (or already up to date), with the checks re-run.", s.response::<RebasedWorkspace>())
            .errors(&[InvalidRequest, NotFound, Conflict, AuditUnavailable]),
        ("GET", "/workspaces/{name}/overlaps") => Op::new("getWorkspaceOverlaps", "The paths a workspace changed that another workspace of its repository, or its target branch, changed too.")
            .description(concat!(
                "Every path the workspace changed (committed on its branch since its target, or written by\n",
                "a request since it was made) that another live workspace of the same repository, or the\n",
                "branch it goes back to, changed since they share a base: with their newest commit, or the\n",
                "request that wrote their uncommitted change. A workspace the key may not use is reported\n",
                "without its name or branch. A batch's answer carries the same for the paths it wrote\n",
                "(`overlaps`), and its job's stream an `overlap` event each.\n",
            ))
            .json(200, "The overlaps, oldest change first per path.", s.response::<OverlapList>())
            .errors(&[NotFound, AuditUnavailable]),
        ("DELETE", "/workspaces/{name}") => Op::new("deleteWorkspace", "Forget a workspace; its files are kept.")
            .description(concat!(
                "The workspace is no longer served (404 inside it from then on). Its files are never\n",
                "removed; for a git worktree, git's record of the worktree is pruned and its branch is\n",
                "kept. `default` cannot be deleted (409). Nor can a workspace while jobs run in it (on any\n",
                "replica): 409, the message naming the job ids, `details.running_jobs` listing them.\n",
            ))
            .json(200, "What was done.", s.response::<DeletedWorkspace>())
            .errors(&[NotFound, Conflict, AuditUnavailable]),
        ("POST", "/workspaces/{name}/claims") => Op::new("claimPaths", "Claim paths of the workspace's repository for a while: an advisory lease the other workspaces of that repository see.")
            .description(concat!(
                "`paths` are globs relative to the repository's root (`src/**/*.py`, `a.py`; `*` stays within\n",
                "a directory, `**` crosses them), 1 to 100; `ttl_secs` 1 to 604800 (default 3600). The\n",
                "repository of a git_worktree workspace is the one it was made from; any other workspace\n",
                "(`default` among them) is its own. Every workspace of the repository sees the claim in\n",
                "`GET /workspaces/{name}/claims`, on every replica, until it is released or expires. A\n",
                "write another workspace makes into a claimed path is refused 409 `claimed` when it\n",
                "respects claims (a batch's `options.respect_claims`, else WRIT_RESPECT_CLAIMS); otherwise\n",
                "it goes ahead. Bad input is 422 naming the field (`paths`, `paths[i]`, `ttl_secs`) and the\n",
                "limit, and nothing is claimed; a workspace holding 100 live claims is refused 409.\n",
            ))
            .json_body(s.request::<MakeClaim>())
            .json(201, "The claim made.", s.response::<ClaimView>())
            .errors(&[InvalidRequest, NotFound, Conflict, AuditUnavailable]),
        ("GET", "/workspaces/{name}/claims") => Op::new("listClaims", "The live claims of every workspace of the workspace's repository, its own included.")
            .description(concat!(
                "Oldest first; `own` marks the workspace's own. A claim of a workspace the key may not use\n",
                "is shown without its workspace and without the key that made it.\n",
            ))
            .json(200, "The live claims.", s.response::<ClaimList>())
            .errors(&[NotFound, AuditUnavailable]),
        ("DELETE", "/workspaces/{name}/claims") => Op::new("releaseClaims", "Release every claim the workspace holds.")
            .json(200, "How many live claims were released.", s.response::<ReleasedClaims>())
            .errors(&[NotFound, AuditUnavailable]),
        ("DELETE", "/workspaces/{name}/claims/{id}") => Op::new("releaseClaim", "Release one of the workspace's claims.")
            .description("Only the workspace holding a claim releases it: another workspace's claim, or one released or expired, is 404.\n")
            .json(200, "Released (`released`: 1).", s.response::<ReleasedClaims>())
            .errors(&[NotFound, AuditUnavailable]),
        ("GET", "/workspaces/{name}/{*rest}") => Op::new("getInWorkspace", "`GET /files`, `/files/{path}`, `/search`, `/jobs`, `/jobs/{id}`, `/jobs/{id}/events`, `/operations`, `/operations/{id}` or `/write_sessions/{id}`, in the workspace `name`.")
            .description(concat!(
                "Answers as the route `/{rest}` does, with every path relative to the workspace's root\n",
                "and confined beneath it. The scope of the route inside is required (403 otherwise). A\n",
                "workspace that does not exist, or that the key may not use, answers 404. The listings\n",
                "(jobs, operations) show that workspace's records only, and a job, event stream,\n",
                "operation or write session of another workspace answers 404. The routes not served\n",
                "inside a workspace (`/tools`, `/mcp`, `/stats`, `/keys`, `/metrics`) answer 404.\n",
            ))
            .answer(200, Response::new("As the route inside.").json(s.inline::<Value>()))
            .errors(&[NotFound, InsufficientScope]),
        ("PUT", "/workspaces/{name}/{*rest}") => Op::new("putInWorkspace", "`PUT /files/{path}` in the workspace `name`.")
            .raw_body(&[("application/octet-stream", s.inline::<Binary>())])
            .answer(200, Response::new("As the route inside.").json(s.inline::<Value>()))
            .answer(201, Response::new("As the route inside.").json(s.inline::<Value>()))
            .errors(&[NotFound, InsufficientScope]),
        ("POST", "/workspaces/{name}/{*rest}") => Op::new("postInWorkspace", "`POST /edits`, `/write_codebase`, `/run`, `/write_sessions` (and its content, finish and corrections), `/operations/{id}/restore` or `/requests/{id}/undo`, in the workspace `name`.")
            .description(concat!(
                "A batch accepted here runs in the workspace: its context, repository map and search read\n",
                "that workspace only, it writes there only, and its job (`location`:\n",
                "`/workspaces/{name}/jobs/{id}`) is resumed there by any replica. A run's sandbox sees that\n",
                "workspace only. A write session is found only in the workspace it was begun in; an undo or\n",
                "restore only of a request or operation made in it.\n",
            ))
            .raw_body(&[("application/json", s.inline::<Map<String, Value>>())])
            .answer(200, Response::new("As the route inside.").json(s.inline::<Value>()))
            .answer(201, Response::new("As the route inside.").json(s.inline::<Value>()))
            .answer(202, Response::new("As the route inside (an async batch).").json(s.inline::<Value>()))
            .errors(&[NotFound, InsufficientScope]),
        ("GET", "/tools") => Op::new("listTools", "The tools agents call, as a provider's function declarations.")
            .description(concat!(
                "The same tools as MCP (`/mcp`, `writ mcp`): write_codebase, list_files, read_file, search_files, write_file,\n",
                "list_operations, get_operation. Their input schemas are generated from the request types the\n",
                "HTTP API parses. `openai`: `[{\"type\": \"function\", \"function\": {\"name\", \"description\",\n",
                "\"parameters\"}}]`; `anthropic`: `[{\"name\", \"description\", \"input_schema\"}]`; `gemini`:\n",
                "`{\"functionDeclarations\": [{\"name\", \"description\", \"parameters\"}]}` in Gemini's schema subset\n",
                "(no `$ref`, no `additionalProperties`, `nullable` for optional values).\n",
            ))
            .json(200, "The declarations (an array for openai and anthropic, an object for gemini).", s.response::<Declarations>()),
        ("POST", "/tools/call") => Op::new("callTool", "Run one tool call as a provider returned it.")
            .description(concat!(
                "Runs the call through the same dispatcher as MCP. `arguments` may be an object or a string\n",
                "holding one (as OpenAI returns it); `input` (Anthropic) and `args` (Gemini) are accepted too.\n",
                "A string that is not complete JSON (a streamed call cut short) is refused with 422 naming where\n",
                "it broke off and what was expected, and nothing is done. Every answer, error or not, carries\n",
                "`content`: the text to hand back to the model as the tool's result. Errors are the HTTP API's\n",
                "own (same code, message, field and status).\n",
            ))
            .json_body(s.request::<ToolCall>())
            .json(200, "The tool ran.", s.response::<ToolCallAnswer>())
            .error_body(s.response::<ToolCallError>())
            .errors(&[InvalidArguments, InvalidRequest, InvalidParameter, InvalidPath, InsufficientScope, NotFound, AlreadyExists, ParentMissing, NotAFile, NotADirectory, Cancelled, IdempotencyConflict, PreconditionFailed, Claimed, FileTooLarge, InvalidUtf8, ProtectedPath, BudgetExceeded, TooManyBatches, ModelsUnavailable, AuditUnavailable, NoSpace])
            .errors_at(422, &[InvalidPath]),
        ("POST", "/mcp") => Op::new("mcpPost", "MCP over streamable HTTP (JSON-RPC messages from the client).")
            .description(concat!(
                "The Model Context Protocol's streamable HTTP transport, served by the official Rust SDK (rmcp)\n",
                "with the same tools as `/tools`. Behind the same API keys and limits as every route. Without\n",
                "API keys and on a loopback address only loopback `Host` headers are accepted. A session belongs\n",
                "to the key that opened it: a request naming another key's `Mcp-Session-Id` is 404.\n",
            ))
            .answer(202, Response::new("A notification or response was accepted (no body)."))
            .shared("default", "Mcp"),
        ("GET", "/mcp") => Op::new("mcpGet", "MCP over streamable HTTP (the server's message stream of a session).")
            .answer(202, Response::new("A notification or response was accepted (no body)."))
            .shared("default", "Mcp"),
        ("DELETE", "/mcp") => Op::new("mcpDelete", "MCP over streamable HTTP (ends a session).")
            .answer(202, Response::new("A notification or response was accepted (no body)."))
            .shared("default", "Mcp"),
        _ => return None,
    })
}

pub(super) fn info() -> Info {
    Info {
        title: "writ",
        version: env!("CARGO_PKG_VERSION"),
        description: "Multi-model code synthesis service. Direct file routes read and write files under the\nsandboxed REPO_DIR (content travels as the raw body, never inside JSON); every write is\nrecorded in the audit log before it is acknowledged.\n\nEvery route may answer 421 `host_not_allowed` while no API key exists and the Host is not a\nloopback name or in WRIT_ALLOWED_HOSTS; while the audit store has not answered for\nWRIT_AUTH_FAIL_CLOSED_AFTER_SECS without keys, every route but the probes answers 503\n`auth_unavailable`.\n",
    }
}

pub(super) fn bearer() -> SecurityScheme {
    SecurityScheme {
        kind: "http",
        scheme: "bearer",
        description: "An API key `writ_<id>_<secret>`; required only when keys are configured. Each key holds\nscopes (see the `Scope` schema), set when it is issued (`writ keys create --scopes\nread,write`; the default is `read,write`) or in its `WRIT_API_KEYS` entry\n(`id:sha256hex:read+write`). Each operation names the scope it requires in\n`x-writ-scope`: `read` for every GET, `write` for `PUT /files/{path}` and\n`POST /write_codebase`, `run` for `POST /run`. On `/tools/call` and `/mcp` the tool called\ndecides: `read_file`, `list_files`, `search_files`, `list_operations`, `get_operation` need `read`;\n`write_file` and `write_codebase` need `write`. `admin` is required to manage workspaces\n(`/workspaces`) and budgets; it also widens what a key sees: jobs, job events and operations are the key's own unless it holds `admin`\n(keys themselves are managed with `writ keys` on the database). A key may be bound to workspaces\n(`writ keys create --workspace NAME`): any other workspace, `default`'s routes included,\nanswers it 404 as one that does not exist. A key issued\nbefore scopes existed (or an entry without scopes) holds `read,write,run`. A key without\nthe scope is answered 403 `insufficient_scope` (over MCP: a tool result with `isError`).\n",
    }
}

/// The answers of the auth and rate layers, which many operations share, and MCP's.
pub(super) fn shared_responses(s: &mut Schemas) -> BTreeMap<&'static str, Response> {
    BTreeMap::from([
        (
            "Unauthorized",
            Response::new("`unauthorized`: no valid API key (missing, malformed, unknown, revoked); `WWW-Authenticate` says Bearer.")
                .json(s.response::<ErrorBody>())
                .headers(s.headers::<Challenge>()),
        ),
        (
            "TooManyRequests",
            Response::new("`rate_limited`: this key's rate (WRIT_RATE_LIMIT_PER_MIN) is used up; `Retry-After` says when to retry.")
                .json(s.response::<ErrorBody>())
                .headers(s.headers::<ErrorHeaders>()),
        ),
        (
            "Forbidden",
            Response::new("`insufficient_scope`: the API key lacks the scope this operation requires; the message and `details` name the scope needed and the scopes the key holds, never the key.")
                .json(s.response::<crate::access::InsufficientScopeBody>()),
        ),
        (
            "Mcp",
            Response::new("A JSON-RPC answer or an SSE stream as the MCP specification describes, or the transport's refusal (writ's error body, code `mcp_transport`).")
                .json(s.inline::<Value>())
                .content("text/event-stream", s.inline::<String>()),
        ),
    ])
}

/// The headers of a 401.
#[derive(schemars::JsonSchema)]
#[expect(
    dead_code,
    reason = "described, never made: the auth layer writes the header"
)]
struct Challenge {
    /// `Bearer realm="writ"` (RFC 6750).
    #[schemars(rename = "www-authenticate")]
    www_authenticate: String,
}

/// Schemas no operation names but that the answers' bodies hold.
pub(super) fn shared_schemas(s: &mut Schemas) {
    // Named by the error bodies.
    s.response::<crate::error::ErrorCode>();
    // The shape of each file in a 409 `changed_since`'s `details.files`.
    s.response::<writ_core::history::ChangedFile>();
}
