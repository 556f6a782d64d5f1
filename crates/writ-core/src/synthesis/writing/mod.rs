//! Writing: a file's chosen content becomes one recorded write ([`crate::files`]: the audit
//! record before the file, the file atomically), or its failure is recorded; either way its
//! result and its `file_written` / `file_failed` event. An `atomic` batch writes all its files or
//! none: if one failed to generate nothing is written, and if a write fails the files already
//! written are put back — each only if it still holds what writ wrote, under its path lock, and
//! a rollback that could not be made is reported as such ([`atomic`]).

mod atomic;
mod review;

use base64::Engine;
use uuid::Uuid;

use std::time::Duration;

use crate::audit::{AuditWrite, CallRecord, CandidateRecord, FileKind, SynthesisStore};
use crate::changes::ProposedFile;
use crate::content::sha256_hex;
use crate::files::{
    DeferredWrite, FailedWrite, GroupedWrite, Provenance, WriteError, WriteMode, WriteSpec,
    record_failure, write_group_deferring_completion,
};
use crate::store::StoreError;
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::outage::OutageWait;
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::record::{NotRecorded, Recorded};
use crate::synthesis::response::{FileResult, FileValidation, ImageInfo};
use crate::synthesis::stage::BatchFile;
use crate::synthesis::stage::{Chosen, Content, Produced};
use crate::workspace::Workspace;
use writ_checks::shape::Change;

/// One file's write as the batch sees it: its result, the content it replaced (for an atomic
/// rollback) and the completion of its record, which the batch commits with its closing records.
pub(crate) struct Written {
    pub result: FileResult,
    /// `Some` when the file was written: what it held before (`None`: it did not exist).
    before: Option<Option<Vec<u8>>>,
    pub completion: Option<AuditWrite>,
    /// Its chosen content, when the batch proposes for review instead of writing.
    proposed: Option<ProposedFile>,
}

impl Written {
    /// A file that was not written (failed, or a dry run).
    fn only(result: FileResult) -> Self {
        Written {
            result,
            before: None,
            completion: None,
            proposed: None,
        }
    }
}

/// A file's chosen content on its way to being written, and what its result will say.
struct ToWrite {
    /// What the write's record carries, for the record of its failure if it is refused.
    provenance: Provenance,
    chosen: Chosen,
    candidates: Vec<CandidateRecord>,
    validation: Option<FileValidation>,
    image: Option<ImageInfo>,
    /// What a change of an existing file did.
    change: Option<Change>,
}

/// The writing stage of one batch: where its files go (the store for their records, the
/// workspace for their content), under which request, and where their events go.
pub(crate) struct Writer<'a> {
    pub store: &'a dyn SynthesisStore,
    pub workspace: &'a dyn Workspace,
    pub request_id: Uuid,
    pub batch: &'a Batch,
    pub sink: &'a dyn ProgressSink,
    /// The batch's records and lease, which each write waits for, and where a write that gave
    /// up on an unreachable store says so.
    pub recorded: &'a Recorded,
    /// How long a write waits out an unreachable store (`WRIT_STORE_OUTAGE_WAIT`).
    pub outage_wait: Duration,
    /// Propose the files for review instead of writing them (`options.review`, `WRIT_REVIEW`).
    pub review: bool,
}

impl<'a> Writer<'a> {
    /// Writes one file's chosen content (or records its failure), emits its event and builds its
    /// result.
    async fn finish_file(&self, batch_file: &BatchFile, produced: Produced) -> Written {
        let written = self.write_file(batch_file, produced).await;
        emit_outcome(self.sink, &written.result);
        written
    }

    /// [`Self::finish_file`] for files ready together: their writes are one group
    /// ([`write_group_deferring_completion`]), so their pending records are one commit and
    /// their syncs one group. In the order given.
    pub(crate) async fn finish_files(&self, files: Vec<(&BatchFile, Produced)>) -> Vec<Written> {
        let written = self.write_files(files).await;
        // A proposed file is announced with its change set (`change_proposed`).
        for w in written.iter().filter(|w| w.proposed.is_none()) {
            emit_outcome(self.sink, &w.result);
        }
        written
    }

    /// The generated tests each written file kept (`options.validation.keep_tests`), each one
    /// more recorded write of the batch, made only after its file was written (a dry run
    /// writes none). Their completions, for the batch's closing commit.
    pub(crate) async fn write_kept_tests(&self, written: &mut [Written]) -> Vec<AuditWrite> {
        let mut completions = Vec::new();
        for w in written.iter_mut() {
            let proposed = w.result.operation == Some(crate::audit::OperationKind::Proposed);
            let file_written = w.result.success && w.result.operation_id.is_some() && !proposed;
            let of = w.result.filename.clone();
            let Some(kept) = w
                .result
                .validation
                .as_mut()
                .and_then(|v| v.kept_tests.as_mut())
            else {
                continue;
            };
            let Some(content) = kept.content.take() else {
                continue;
            };
            if self.batch.options().dry_run {
                continue;
            }
            if proposed {
                kept.error = Some(format!(
                    "{of} was proposed for review, not written, so its tests were not kept"
                ));
                continue;
            }
            if !file_written {
                kept.error = Some(format!("{of} was not written, so its tests were not kept"));
                continue;
            }
            let path = match crate::path::RepoPath::parse(&kept.path) {
                Ok(p) => p,
                Err(e) => {
                    kept.error = Some(e.to_string());
                    continue;
                }
            };
            if let Err(e) = self.recorded.lease_held().await {
                kept.error = Some(e.to_string());
                continue;
            }
            let spec = WriteSpec {
                path,
                content: content.into_bytes(),
                mode: WriteMode::Overwrite,
                expected_sha256: None,
                create_dirs: true,
            };
            let provenance = Provenance {
                chosen_model: kept.model.clone(),
                detail: Some(serde_json::json!({"kept_tests_of": of})),
                ..Provenance::default()
            };
            match crate::files::write_deferring_completion(
                self.store,
                self.workspace,
                self.request_id,
                FileKind::Code,
                spec,
                provenance,
            )
            .await
            {
                Ok((receipt, completion)) => {
                    kept.operation_id = Some(receipt.operation_id);
                    completions.extend(completion);
                }
                Err(failed) => kept.error = Some(failed.error.to_string()),
            }
        }
        completions
    }

    /// The write itself; also returns the content the file held before, for an atomic rollback,
    /// and the completion of its record, for the batch's closing commit.
    async fn write_file(&self, batch_file: &BatchFile, produced: Produced) -> Written {
        let mut written = self.write_files(vec![(batch_file, produced)]).await;
        written.pop().unwrap_or_else(|| {
            Written::only(FileResult::failed(
                batch_file.spec.path.as_str(),
                batch_file.spec.kind.into(),
                "the write was lost",
                Vec::new(),
            ))
        })
    }

    /// The writes of `files`, in their order: failed files recorded, a dry run's described, the
    /// rest written as one group.
    async fn write_files(&self, files: Vec<(&BatchFile, Produced)>) -> Vec<Written> {
        let mut written: Vec<Option<Written>> = files.iter().map(|_| None).collect();
        let mut to_write: Vec<(usize, &BatchFile, ToWrite)> = Vec::new();
        let mut grouped: Vec<GroupedWrite> = Vec::new();
        for (i, (batch_file, produced)) in files.into_iter().enumerate() {
            match self.to_write(batch_file, produced).await {
                Ok((write, w)) => {
                    grouped.push(write);
                    to_write.push((i, batch_file, w));
                }
                Err(mut done) => {
                    with_upstream(&mut done.result, batch_file);
                    written[i] = Some(done);
                }
            }
        }
        let outcomes = if grouped.is_empty() {
            Vec::new()
        } else {
            self.write_group(grouped).await
        };
        for ((i, batch_file, w), outcome) in to_write.into_iter().zip(outcomes) {
            let mut done = self.written(batch_file, w, outcome).await;
            with_upstream(&mut done.result, batch_file);
            written[i] = Some(done);
        }
        written.into_iter().flatten().collect()
    }

    /// One group of writes ([`write_group_deferring_completion`]). Those the store could not
    /// record, or whose shared lock dropped with the store's connection, are tried again, anew
    /// (locked, read, recorded, staged), with backoff through an outage of up to the outage
    /// wait; every try waits until the job's lease is known held. Past the wait the batch gives
    /// up ([`Recorded::give_up`]) and they stay unwritten.
    async fn write_group(&self, grouped: Vec<GroupedWrite>) -> Vec<DeferredWrite> {
        let mut outcomes: Vec<Option<DeferredWrite>> = grouped.iter().map(|_| None).collect();
        let mut left: Vec<(usize, GroupedWrite)> = grouped.into_iter().enumerate().collect();
        let mut wait: Option<OutageWait> = None;
        loop {
            let tried: Vec<DeferredWrite> = match self.recorded.lease_held().await {
                Ok(()) => {
                    let writes = left.iter().map(|(_, w)| w.clone()).collect();
                    write_group_deferring_completion(
                        self.store,
                        self.workspace,
                        self.request_id,
                        writes,
                    )
                    .await
                }
                Err(e) => left
                    .iter()
                    .map(|_| Err(WriteError::AuditUnavailable(e.clone()).into()))
                    .collect(),
            };
            let mut again = Vec::new();
            let mut why = String::new();
            for ((i, write), outcome) in left.into_iter().zip(tried) {
                match outcome {
                    Err(FailedWrite {
                        error: WriteError::AuditUnavailable(StoreError::Unavailable(e)),
                        ..
                    }) => {
                        why = e;
                        again.push((i, write));
                    }
                    Err(FailedWrite {
                        error: e @ WriteError::LockLost { .. },
                        ..
                    }) => {
                        why = e.to_string();
                        again.push((i, write));
                    }
                    outcome => outcomes[i] = Some(outcome),
                }
            }
            if again.is_empty() {
                break;
            }
            let wait = wait.get_or_insert_with(|| OutageWait::start(self.outage_wait));
            if !wait.pause(&why).await {
                let gave_up = StoreError::Unavailable(why);
                self.recorded.give_up(gave_up.clone());
                for (i, _) in again {
                    outcomes[i] = Some(Err(WriteError::AuditUnavailable(gave_up.clone()).into()));
                }
                break;
            }
            left = again;
        }
        outcomes.into_iter().flatten().collect()
    }

    /// What `file`'s write will be, or (`Err`) its result if there is nothing to write: its
    /// failure, recorded, or a dry run's description.
    async fn to_write(
        &self,
        batch_file: &BatchFile,
        produced: Produced,
    ) -> Result<(GroupedWrite, ToWrite), Written> {
        let file = &batch_file.spec;
        let Produced {
            chosen,
            candidates,
            validation,
            existing,
        } = produced;
        let chosen = match chosen {
            Ok(c) => c,
            Err(error) => {
                let mut result = FileResult::failed(
                    file.path.as_str(),
                    file.kind.into(),
                    error.clone(),
                    candidates,
                );
                result.validation = validation;
                // After an outage outlasted the wait, the record of the failure cannot be made
                // either, and each try would wait out the pool's timeout.
                if !self.batch.options().dry_run && self.recorded.gave_up().is_none() {
                    let prov = Provenance {
                        candidates: result.candidates.clone(),
                        detail: with_detail(
                            with_calls(
                                with_generated_checks(None, result.validation.as_ref()),
                                &batch_file.upstream.calls(),
                            ),
                            "routing",
                            batch_file.upstream.routing(),
                        ),
                        ..Provenance::default()
                    };
                    match record_failure(
                        self.store,
                        self.request_id,
                        file.kind.into(),
                        file.path.as_str(),
                        &error,
                        prov,
                    )
                    .await
                    {
                        Ok(id) => result.operation_id = Some(id),
                        Err(e) => tracing::warn!(error = %e, "could not record a failed file"),
                    }
                }
                return Err(Written::only(result));
            }
        };
        // A change is written in the file's own shape, and only over the content it was made
        // from: a file changed by someone else since the batch read it is not overwritten.
        let (chosen, change, expected_sha256) = match (&existing, chosen.content) {
            (Some(e), Content::Code(code)) => {
                let change = e.change(file.path.as_str(), &code);
                let rendered = e.render(&code);
                let chosen = Chosen {
                    content: Content::Code(rendered),
                    ..chosen
                };
                let expected = file
                    .expected_sha256
                    .clone()
                    .or_else(|| Some(sha256_hex(e.original.as_bytes())));
                (chosen, Some(change), expected)
            }
            (_, content) => (
                Chosen { content, ..chosen },
                None,
                file.expected_sha256.clone(),
            ),
        };
        if self.batch.options().dry_run {
            let mut result = dry_run_result(file, chosen, candidates);
            result.validation = validation;
            result.change = change;
            return Err(Written::only(result));
        }
        let image = chosen.content.image().map(ImageInfo::from);
        let review = self.review.then(|| {
            let base = existing.as_ref().map(|e| e.original.clone().into_bytes());
            (base, validation.clone())
        });
        let spec = WriteSpec {
            path: file.path.clone(),
            content: chosen.content.bytes().to_vec(),
            mode: WriteMode::Overwrite,
            expected_sha256,
            create_dirs: true,
        };
        let detail = match (&image, &change) {
            (Some(info), _) => serde_json::to_value(info)
                .ok()
                .map(|info| serde_json::json!({ "image": info })),
            (None, Some(change)) => serde_json::to_value(change)
                .ok()
                .map(|change| serde_json::json!({ "change": change })),
            (None, None) => None,
        };
        let detail = with_calls(
            with_generated_checks(detail, validation.as_ref()),
            &batch_file.upstream.calls(),
        );
        let detail = with_detail(detail, "formatted", chosen.formatted.as_ref());
        let detail = with_detail(detail, "routing", batch_file.upstream.routing());
        let provenance = Provenance {
            detail,
            chosen_model: Some(chosen.model.clone()),
            selection: Some(chosen.selection),
            arbiter_reason: chosen.reason.clone(),
            candidates: candidates.clone(),
        };
        if let Some((base, validation)) = review {
            return Err(self.proposal(
                file, chosen, candidates, validation, image, change, base, provenance,
            ));
        }
        let write = GroupedWrite {
            kind: file.kind.into(),
            spec,
            provenance: provenance.clone(),
        };
        Ok((
            write,
            ToWrite {
                provenance,
                chosen,
                candidates,
                validation,
                image,
                change,
            },
        ))
    }

    /// The result of a write made (or refused).
    async fn written(&self, batch_file: &BatchFile, w: ToWrite, outcome: DeferredWrite) -> Written {
        let file = &batch_file.spec;
        let ToWrite {
            provenance,
            chosen,
            candidates,
            validation,
            image,
            change,
        } = w;
        let kind = FileKind::from(file.kind);
        match outcome {
            Ok((receipt, completion)) => {
                metrics::counter!("writ_writes_total", "kind" => kind.as_str(), "operation" => receipt.operation.as_str()).increment(1);
                let result = FileResult {
                    filename: file.path.to_string(),
                    kind,
                    success: true,
                    operation: Some(receipt.operation),
                    bytes: Some(receipt.bytes),
                    sha256: Some(receipt.sha256),
                    chosen_model: Some(chosen.model),
                    selection: Some(chosen.selection),
                    arbiter_reason: chosen.reason,
                    candidates,
                    operation_id: Some(receipt.operation_id),
                    error: None,
                    image,
                    content: None,
                    validation,
                    change,
                    prompt_tokens_by_part: None,
                    routing: None,
                    calls: Vec::new(),
                    formatted: chosen.formatted,
                    proposal: None,
                };
                Written {
                    result,
                    before: Some(receipt.previous),
                    completion,
                    proposed: None,
                }
            }
            Err(FailedWrite {
                error,
                operation_id,
            }) => {
                metrics::counter!("writ_writes_total", "kind" => kind.as_str(), "operation" => "failed")
                    .increment(1);
                let message = error.to_string();
                let mut result =
                    FileResult::failed(file.path.as_str(), kind, message.clone(), candidates);
                result.chosen_model = Some(chosen.model);
                result.selection = Some(chosen.selection);
                result.arbiter_reason = chosen.reason;
                result.validation = validation;
                result.formatted = chosen.formatted;
                result.operation_id = match operation_id {
                    // Its pending record was completed as failed where the write failed.
                    Some(id) => Some(id),
                    // After an outage outlasted the wait, no record can be made either.
                    None if self.recorded.gave_up().is_some() => None,
                    // A refused write (If-Match, audit down) made no operation record of its own.
                    None => record_failure(
                        self.store,
                        self.request_id,
                        kind,
                        file.path.as_str(),
                        &message,
                        provenance,
                    )
                    .await
                    .ok(),
                };
                Written::only(result)
            }
        }
    }

    /// The batch's request was not recorded: no file is written and no failure recorded (a
    /// record needs its request); each file's result says why.
    pub(crate) fn not_written(
        &self,
        files: Vec<(&BatchFile, Produced)>,
        not: NotRecorded,
    ) -> Vec<Written> {
        files
            .into_iter()
            .map(|(batch_file, produced)| {
                let mut result = FileResult::failed(
                    batch_file.spec.path.as_str(),
                    batch_file.spec.kind.into(),
                    not.to_string(),
                    produced.candidates,
                );
                result.validation = produced.validation;
                Written::only(result)
            })
            .collect()
    }
}

/// The calls made for the file that were not candidates (arbiter, test writers), and how
/// adaptive routing chose its models, with its result and operation.
fn with_upstream(result: &mut FileResult, batch_file: &BatchFile) {
    result.calls = batch_file.upstream.calls();
    result.routing = batch_file.upstream.routing();
}

fn emit_outcome(sink: &dyn ProgressSink, result: &FileResult) {
    sink.emit(match (&result.error, result.success) {
        (None, true) => Event::FileWritten {
            file: result.filename.clone(),
            operation: result
                .operation
                .map(|o| o.as_str().to_string())
                .unwrap_or_else(|| "dry_run".into()),
            bytes: result.bytes.unwrap_or(0),
            sha256: result.sha256.clone().unwrap_or_default(),
        },
        (error, _) => Event::FileFailed {
            file: result.filename.clone(),
            error: error.clone().unwrap_or_default(),
        },
    });
}

/// `dry_run`: the chosen content in the answer (an image as a data URL), nothing written.
fn dry_run_result(file: &FileSpec, chosen: Chosen, candidates: Vec<CandidateRecord>) -> FileResult {
    let bytes = chosen.content.bytes();
    FileResult {
        filename: file.path.to_string(),
        kind: file.kind.into(),
        success: true,
        operation: None,
        bytes: Some(bytes.len()),
        sha256: Some(sha256_hex(bytes)),
        image: chosen.content.image().map(ImageInfo::from),
        content: Some(match &chosen.content {
            Content::Image(img) => format!(
                "data:image/{};base64,{}",
                img.format.as_str(),
                base64::engine::general_purpose::STANDARD.encode(&img.bytes)
            ),
            Content::Code(code) => code.clone(),
        }),
        chosen_model: Some(chosen.model),
        selection: Some(chosen.selection),
        arbiter_reason: chosen.reason,
        candidates,
        operation_id: None,
        change: None,
        error: None,
        validation: None,
        prompt_tokens_by_part: None,
        routing: None,
        calls: Vec::new(),
        formatted: chosen.formatted,
        proposal: None,
    }
}

/// The operation record's `detail` with the file's generated checks added, when they ran.
fn with_generated_checks(
    detail: Option<serde_json::Value>,
    validation: Option<&FileValidation>,
) -> Option<serde_json::Value> {
    let checks = validation.and_then(|v| v.generated_checks.as_ref());
    with_detail(detail, "generated_checks", checks)
}

/// The operation record's `detail` with the calls that were not candidates, when there were.
fn with_calls(
    detail: Option<serde_json::Value>,
    calls: &[CallRecord],
) -> Option<serde_json::Value> {
    with_detail(detail, "calls", (!calls.is_empty()).then_some(calls))
}

fn with_detail<T: serde::Serialize>(
    detail: Option<serde_json::Value>,
    key: &str,
    value: Option<T>,
) -> Option<serde_json::Value> {
    let Some(value) = value.and_then(|v| serde_json::to_value(v).ok()) else {
        return detail;
    };
    let mut detail = match detail {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    detail.insert(key.into(), value);
    Some(serde_json::Value::Object(detail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{OperationKind, OperationStatus};
    use crate::synthesis::doubles::{self, MemoryStore, MemoryWorkspace};
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::record::Recorded;

    /// A writer behind a request already recorded, which waits out no outage.
    fn writer<'a>(
        store: &'a MemoryStore,
        workspace: &'a MemoryWorkspace,
        batch: &'a Batch,
        recorded: &'a Recorded,
    ) -> Writer<'a> {
        Writer {
            store,
            workspace,
            request_id: Uuid::now_v7(),
            batch,
            sink: &NoProgress,
            recorded,
            outage_wait: Duration::ZERO,
            review: false,
        }
    }

    fn operations(store: &MemoryStore) -> Vec<crate::audit::Operation> {
        store
            .operations
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn files_ready_together_are_written_and_each_recorded_before_it_is_completed() {
        let b = doubles::batch(&["a.py", "b.py", "c.py"]);
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default()
            .with_file("b.py", "b = 1\n")
            .failing_on("c.py");
        let recorded = Recorded::already();
        let writer = writer(&store, &workspace, &b, &recorded);
        let present = doubles::present(&b);
        let files = present.files.iter().zip([
            doubles::chosen("a = 1\n"),
            doubles::chosen("b = 2\n"),
            doubles::chosen("c = 1\n"),
        ]);

        let written = writer.finish_files(files.collect()).await;

        let outcomes: Vec<(bool, Option<OperationKind>)> = written
            .iter()
            .map(|w| (w.result.success, w.result.operation))
            .collect();
        assert_eq!(
            outcomes,
            [
                (true, Some(OperationKind::Created)),
                (true, Some(OperationKind::Updated)),
                (false, None)
            ]
        );
        assert_eq!(workspace.content("a.py").as_deref(), Some("a = 1\n"));
        assert_eq!(workspace.content("b.py").as_deref(), Some("b = 2\n"));
        assert_eq!(workspace.content("c.py"), None);
        assert_eq!(
            written[0].result.sha256.as_deref(),
            Some(sha256_hex(b"a = 1\n").as_str())
        );
        // The written files' records are pending until the batch's closing commit, which takes
        // their completions; the failed file's record is final already.
        let ops = operations(&store);
        let status = |name: &str| {
            ops.iter()
                .filter(|op| op.filename == name)
                .map(|op| op.status)
                .collect::<Vec<_>>()
        };
        assert_eq!(status("a.py"), [OperationStatus::Pending]);
        assert_eq!(status("b.py"), [OperationStatus::Pending]);
        assert_eq!(status("c.py"), [OperationStatus::Failed]);
        assert!(written[0].completion.is_some() && written[1].completion.is_some());
        assert!(written[2].completion.is_none());
        let b_op = ops.iter().find(|op| op.filename == "b.py");
        assert_eq!(
            b_op.and_then(|op| op.previous_sha256.clone()),
            Some(sha256_hex(b"b = 1\n")),
            "an update records what it replaced"
        );
    }

    #[tokio::test]
    async fn a_file_without_a_chosen_candidate_is_recorded_as_failed_and_nothing_is_written() {
        let b = doubles::batch(&["a.py"]);
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default();
        let recorded = Recorded::already();
        let writer = writer(&store, &workspace, &b, &recorded);
        let failed = Produced::failed("no candidate was viable", Vec::new());
        let present = doubles::present(&b);

        let written = writer.finish_files(vec![(&present.files[0], failed)]).await;

        assert!(!written[0].result.success);
        assert_eq!(
            written[0].result.error.as_deref(),
            Some("no candidate was viable")
        );
        assert_eq!(workspace.content("a.py"), None);
        let ops = operations(&store);
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].status, OperationStatus::Failed);
        assert_eq!(ops[0].error.as_deref(), Some("no candidate was viable"));
    }

    #[tokio::test]
    async fn a_dry_run_answers_the_content_and_neither_writes_nor_records() {
        let b = doubles::parse(serde_json::json!({"command": "write_codebase",
            "files": [{"filename": "a.py", "code_description": "d"}],
            "options": {"dry_run": true}}));
        let store = MemoryStore::default();
        let workspace = MemoryWorkspace::default();
        let recorded = Recorded::already();
        let writer = writer(&store, &workspace, &b, &recorded);
        let present = doubles::present(&b);

        let written = writer
            .finish_files(vec![(&present.files[0], doubles::chosen("a = 1\n"))])
            .await;

        assert!(written[0].result.success);
        assert_eq!(written[0].result.content.as_deref(), Some("a = 1\n"));
        assert_eq!(workspace.content("a.py"), None);
        assert!(operations(&store).is_empty());
    }
}
