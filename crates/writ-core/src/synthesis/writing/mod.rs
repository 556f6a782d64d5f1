//! Writing: a file's chosen content becomes one recorded write ([`crate::files`]: the audit
//! record before the file, the file atomically), or its failure is recorded; either way its
//! result and its `file_written` / `file_failed` event. An `atomic` batch writes all its files or
//! none: if one failed to generate nothing is written, and if a write fails the files already
//! written are put back — each only if it still holds what writ wrote, under its path lock, and
//! a rollback that could not be made is reported as such ([`atomic`]).

mod atomic;

use base64::Engine;
use uuid::Uuid;

use crate::audit::{AuditStore, AuditWrite, CandidateRecord, FileKind};
use crate::content::sha256_hex;
use crate::files::{
    DeferredWrite, GroupedWrite, Provenance, WriteMode, WriteSpec, record_failure,
    write_group_deferring_completion,
};
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::progress::{Event, ProgressSink};
use crate::synthesis::response::{FileResult, FileValidation, ImageInfo};
use crate::synthesis::stage::{Chosen, Content, NotRecorded, Produced};
use crate::workspace::Workspace;
use writ_checks::shape::Change;

/// One file's write as the batch sees it: its result, the content it replaced (for an atomic
/// rollback) and the completion of its record, which the batch commits with its closing records.
pub(crate) struct Written {
    pub result: FileResult,
    /// `Some` when the file was written: what it held before (`None`: it did not exist).
    before: Option<Option<Vec<u8>>>,
    pub completion: Option<AuditWrite>,
}

impl Written {
    /// A file that was not written (failed, or a dry run).
    fn only(result: FileResult) -> Self {
        Written {
            result,
            before: None,
            completion: None,
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
    pub store: &'a dyn AuditStore,
    pub workspace: &'a dyn Workspace,
    pub request_id: Uuid,
    pub batch: &'a Batch,
    pub sink: &'a dyn ProgressSink,
}

impl<'a> Writer<'a> {
    /// Writes one file's chosen content (or records its failure), emits its event and builds its
    /// result.
    async fn finish_file(&self, file: &FileSpec, produced: Produced) -> Written {
        let written = self.write_file(file, produced).await;
        emit_outcome(self.sink, &written.result);
        written
    }

    /// [`Self::finish_file`] for files ready together: their writes are one group
    /// ([`write_group_deferring_completion`]), so their pending records are one commit and
    /// their syncs one group. In the order given.
    pub(crate) async fn finish_files(&self, files: Vec<(&FileSpec, Produced)>) -> Vec<Written> {
        let written = self.write_files(files).await;
        for w in &written {
            emit_outcome(self.sink, &w.result);
        }
        written
    }

    /// The write itself; also returns the content the file held before, for an atomic rollback,
    /// and the completion of its record, for the batch's closing commit.
    async fn write_file(&self, file: &FileSpec, produced: Produced) -> Written {
        let mut written = self.write_files(vec![(file, produced)]).await;
        written.pop().unwrap_or_else(|| {
            Written::only(FileResult::failed(
                file.path.as_str(),
                file.kind.into(),
                "the write was lost",
                Vec::new(),
            ))
        })
    }

    /// The writes of `files`, in their order: failed files recorded, a dry run's described, the
    /// rest written as one group.
    async fn write_files(&self, files: Vec<(&FileSpec, Produced)>) -> Vec<Written> {
        let mut written: Vec<Option<Written>> = files.iter().map(|_| None).collect();
        let mut to_write: Vec<(usize, &FileSpec, ToWrite)> = Vec::new();
        let mut grouped: Vec<GroupedWrite> = Vec::new();
        for (i, (file, produced)) in files.into_iter().enumerate() {
            match self.to_write(file, produced).await {
                Ok((write, w)) => {
                    grouped.push(write);
                    to_write.push((i, file, w));
                }
                Err(done) => written[i] = Some(done),
            }
        }
        let outcomes = if grouped.is_empty() {
            Vec::new()
        } else {
            write_group_deferring_completion(self.store, self.workspace, self.request_id, grouped)
                .await
        };
        for ((i, file, w), outcome) in to_write.into_iter().zip(outcomes) {
            written[i] = Some(self.written(file, w, outcome).await);
        }
        written.into_iter().flatten().collect()
    }

    /// What `file`'s write will be, or (`Err`) its result if there is nothing to write: its
    /// failure, recorded, or a dry run's description.
    async fn to_write(
        &self,
        file: &FileSpec,
        produced: Produced,
    ) -> Result<(GroupedWrite, ToWrite), Written> {
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
                if !self.batch.options.dry_run {
                    let prov = Provenance {
                        candidates: result.candidates.clone(),
                        detail: with_generated_checks(None, result.validation.as_ref()),
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
        if self.batch.options.dry_run {
            let mut result = dry_run_result(file, chosen, candidates);
            result.validation = validation;
            result.change = change;
            return Err(Written::only(result));
        }
        let image = chosen.content.image().map(ImageInfo::from);
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
        let detail = with_generated_checks(detail, validation.as_ref());
        let provenance = Provenance {
            detail,
            chosen_model: Some(chosen.model.clone()),
            selection: Some(chosen.selection),
            arbiter_reason: chosen.reason.clone(),
            candidates: candidates.clone(),
        };
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
    async fn written(&self, file: &FileSpec, w: ToWrite, outcome: DeferredWrite) -> Written {
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
                };
                Written {
                    result,
                    before: Some(receipt.previous),
                    completion,
                }
            }
            Err(err) => {
                metrics::counter!("writ_writes_total", "kind" => kind.as_str(), "operation" => "failed")
                    .increment(1);
                let message = err.to_string();
                let mut result =
                    FileResult::failed(file.path.as_str(), kind, message.clone(), candidates);
                result.chosen_model = Some(chosen.model);
                result.selection = Some(chosen.selection);
                result.arbiter_reason = chosen.reason;
                result.validation = validation;
                // A refused write (If-Match, audit down) made no operation record of its own.
                if let Ok(id) = record_failure(
                    self.store,
                    self.request_id,
                    kind,
                    file.path.as_str(),
                    &message,
                    provenance,
                )
                .await
                {
                    result.operation_id = Some(id);
                }
                Written::only(result)
            }
        }
    }

    /// The batch's request was not recorded: no file is written and no failure recorded (a
    /// record needs its request); each file's result says why.
    pub(crate) fn not_written(
        &self,
        files: Vec<(&FileSpec, Produced)>,
        not: NotRecorded,
    ) -> Vec<Written> {
        files
            .into_iter()
            .map(|(file, produced)| {
                let mut result = FileResult::failed(
                    file.path.as_str(),
                    file.kind.into(),
                    not.to_string(),
                    produced.candidates,
                );
                result.validation = produced.validation;
                Written::only(result)
            })
            .collect()
    }
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
    }
}

/// The operation record's `detail` with the file's generated checks added, when they ran.
fn with_generated_checks(
    detail: Option<serde_json::Value>,
    validation: Option<&FileValidation>,
) -> Option<serde_json::Value> {
    let Some(checks) = validation
        .and_then(|v| v.generated_checks.as_ref())
        .and_then(|c| serde_json::to_value(c).ok())
    else {
        return detail;
    };
    let mut detail = match detail {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    detail.insert("generated_checks".into(), checks);
    Some(serde_json::Value::Object(detail))
}
