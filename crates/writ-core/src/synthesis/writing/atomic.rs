//! An `atomic` batch: every file is generated first; if one failed nothing is written; if a
//! write fails, the files already written are put back as they were — each only if it still
//! holds what writ wrote.

use crate::audit::Selection;
use crate::files::{
    Provenance, RemoveOutcome, WriteMode, WriteSpec, recorded_remove, recorded_write,
};
use crate::synthesis::stage::{BatchFile, Produced};

use super::{Writer, Written, emit_outcome};

/// A file an atomic batch wrote, and how to put it back.
struct Undo<'a> {
    batch_file: &'a BatchFile,
    /// Its answer's place in the results.
    at: usize,
    /// The content before writ's write (`None`: the file did not exist).
    before: Option<Vec<u8>>,
    /// What writ wrote; the rollback touches the file only if it still holds this.
    sha256: String,
}

impl Writer<'_> {
    /// `atomic`: every file is generated first; if one failed nothing is written; if a write
    /// fails, the files already written are put back as they were.
    pub(crate) async fn write_atomically(
        &self,
        produced: Vec<(&BatchFile, Produced)>,
    ) -> Vec<Written> {
        let first_failure = produced
            .iter()
            .find_map(|(f, p)| p.chosen.as_ref().err().map(|e| (&f.spec, e.clone())));
        if let Some((failed, why)) = first_failure {
            let mut results = Vec::new();
            for (f, p) in produced {
                let error = match p.chosen {
                    Err(e) => e,
                    Ok(_) => format!(
                        "not written: the batch is atomic and files[{}] ('{}') failed: {why}",
                        failed.index, failed.path
                    ),
                };
                let failed = Produced {
                    chosen: Err(error),
                    candidates: p.candidates,
                    validation: p.validation,
                    existing: None,
                };
                results.push(self.finish_file(f, failed).await);
            }
            return results;
        }

        let mut results: Vec<Written> = Vec::new();
        let mut written: Vec<Undo<'_>> = Vec::new();
        let mut broke: Option<String> = None;
        for (f, p) in produced {
            if let Some(why) = &broke {
                let error =
                    format!("not written: the batch is atomic and an earlier write failed: {why}");
                let failed = Produced::failed(error, p.candidates);
                results.push(self.finish_file(f, failed).await);
                continue;
            }
            let mut done = self.write_file(f, p).await;
            match (&done.result.sha256, done.before.take()) {
                (Some(sha256), Some(before)) if done.result.success => written.push(Undo {
                    batch_file: f,
                    at: results.len(),
                    before,
                    sha256: sha256.clone(),
                }),
                _ => broke = Some(done.result.error.clone().unwrap_or_default()),
            }
            emit_outcome(self.sink, &done.result);
            results.push(done);
        }
        if let Some(why) = broke {
            for w in written.into_iter().rev() {
                let outcome = self.roll_back(&w, &why).await;
                if let Some(r) = results.get_mut(w.at).map(|done| &mut done.result) {
                    r.success = false;
                    r.error = Some(match outcome {
                        Ok(()) => format!(
                            "rolled back: the batch is atomic and a later write failed: {why}"
                        ),
                        Err(e) => format!(
                            "NOT rolled back: the batch is atomic and a later write failed ({why}), \
                             but putting this file back failed: {e}; it holds writ's new content or another writer's"
                        ),
                    });
                }
            }
        }
        results
    }

    /// Puts one file back as it was before this batch wrote it — only if it still holds what
    /// the batch wrote (another writer's later content is never overwritten or removed).
    async fn roll_back(&self, w: &Undo<'_>, why: &str) -> Result<(), String> {
        let prov = Provenance {
            selection: Some(Selection::Rollback),
            ..Provenance::default()
        };
        let outcome = match &w.before {
            Some(previous) => {
                let spec = WriteSpec {
                    path: w.batch_file.spec.path.clone(),
                    content: previous.clone(),
                    mode: WriteMode::Overwrite,
                    expected_sha256: Some(w.sha256.clone()),
                    create_dirs: false,
                };
                recorded_write(
                    self.store,
                    self.workspace,
                    self.request_id,
                    w.batch_file.spec.kind.into(),
                    spec,
                    prov,
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
            None => recorded_remove(
                self.store,
                self.workspace,
                self.request_id,
                w.batch_file.spec.kind.into(),
                &w.batch_file.spec.path,
                &w.sha256,
                &format!(
                    "rolled back (atomic batch; a later write failed: {why}): the file was removed"
                ),
                prov,
            )
            .await
            .map_err(|e| e.to_string())
            .and_then(|outcome| match outcome {
                RemoveOutcome::Removed => Ok(()),
                RemoveOutcome::Changed { actual } => Err(format!(
                    "'{}' changed since writ wrote it (sha256 {actual}); it was left as it is",
                    w.batch_file.spec.path
                )),
            }),
        };
        if let Err(e) = &outcome {
            tracing::error!(file = %w.batch_file.spec.path, error = %e, "rollback of an atomic batch failed");
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use uuid::Uuid;

    use super::*;
    use crate::audit::OperationKind;
    use crate::synthesis::doubles::{self, MemoryStore, MemoryWorkspace};
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::record::Recorded;

    #[tokio::test]
    async fn a_failed_write_puts_back_every_file_the_atomic_batch_wrote_before_it() {
        let batch = doubles::batch(&["a.py", "b.py", "c.py"]);
        let store = MemoryStore::default();
        // a.py exists and is replaced, b.py is created, c.py cannot be written.
        let workspace = MemoryWorkspace::default()
            .with_file("a.py", "old = 1\n")
            .failing_on("c.py");
        let writer = Writer {
            store: &store,
            workspace: &workspace,
            request_id: Uuid::now_v7(),
            batch: &batch,
            sink: &NoProgress,
            recorded: &Recorded::already(),
            outage_wait: Duration::ZERO,
            review: false,
        };
        let present = doubles::present(&batch);
        let produced = present
            .files
            .iter()
            .zip([
                doubles::chosen("a = 2\n"),
                doubles::chosen("b = 2\n"),
                doubles::chosen("c = 2\n"),
            ])
            .collect();

        let written = writer.write_atomically(produced).await;

        assert_eq!(workspace.content("a.py").as_deref(), Some("old = 1\n"));
        assert_eq!(workspace.content("b.py"), None);
        assert_eq!(workspace.content("c.py"), None);
        let errors: Vec<String> = written
            .iter()
            .map(|w| {
                assert!(!w.result.success, "{}", w.result.filename);
                w.result.error.clone().unwrap_or_default()
            })
            .collect();
        assert!(errors[0].starts_with("rolled back"), "{}", errors[0]);
        assert!(errors[1].starts_with("rolled back"), "{}", errors[1]);
        assert!(errors[2].contains("no space left"), "{}", errors[2]);
        // Each put-back is recorded as its own operation, after the write it undoes.
        let ops = store
            .operations
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default();
        let rollbacks: Vec<&str> = ops
            .iter()
            .filter(|op| op.selection == Some(Selection::Rollback))
            .map(|op| op.filename.as_str())
            .collect();
        assert_eq!(rollbacks, ["b.py", "a.py"], "undone last write first");
        assert!(
            ops.iter()
                .any(|op| op.filename == "a.py" && op.operation == OperationKind::Updated)
        );
    }
}
