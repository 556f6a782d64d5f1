//! Resuming a job another replica was running: the batch's records read and settled, the files
//! already written kept, the rest run, and one answer merged and stored; and failing a job that
//! cannot be resumed, with an answer of its own.

use super::*;
use crate::commits::CommitFile;
use crate::synthesis::stage::EarlierAttempts;

/// The one answer of a resumed batch: the files earlier attempts wrote, and this run's, in the
/// batch's order; its duration counted from when the batch was accepted.
pub(super) fn merge_resumed(resumed: &Resumed, latest: BatchResponse) -> BatchResponse {
    let mut results = resumed.written.clone();
    for result in latest.results {
        let at = resumed
            .order
            .iter()
            .position(|f| *f == result.filename)
            .unwrap_or(usize::MAX);
        results.push((at, result));
    }
    results.sort_by_key(|(at, _)| *at);
    let duration = (Utc::now() - resumed.created_at).num_milliseconds().max(0) as u64;
    let mut merged = BatchResponse::assemble(
        latest.request_id,
        latest.write_path,
        results.into_iter().map(|(_, r)| r).collect(),
        duration,
    );
    merged.upstream = latest.upstream;
    merged.commit = latest.commit;
    merged
}

/// A written file's result as its succeeded operation records it.
pub(super) fn written_result(op: &Operation) -> FileResult {
    FileResult {
        filename: op.filename.clone(),
        kind: op.kind,
        success: true,
        operation: Some(op.operation),
        bytes: op.bytes.map(|b| b.max(0) as usize),
        sha256: op.sha256.clone(),
        chosen_model: op.chosen_model.clone(),
        selection: op.selection,
        arbiter_reason: op.arbiter_reason.clone(),
        candidates: op.candidates.clone(),
        operation_id: Some(op.id),
        error: None,
        image: op
            .detail
            .as_ref()
            .and_then(|d| d.get("image"))
            .and_then(|d| serde_json::from_value::<ImageInfo>(d.clone()).ok()),
        content: None,
        validation: None,
        prompt_tokens_by_part: None,
        routing: crate::synthesis::routing::RoutingDecision::in_detail(op.detail.as_ref()),
        calls: CallRecord::in_detail(op.detail.as_ref()),
        formatted: op
            .detail
            .as_ref()
            .and_then(|d| d.get("formatted"))
            .and_then(|d| serde_json::from_value(d.clone()).ok()),
        change: op
            .detail
            .as_ref()
            .and_then(|d| d.get("change"))
            .and_then(|d| serde_json::from_value(d.clone()).ok()),
        proposal: None,
    }
}

/// Why a claimed job cannot be resumed now.
pub(super) enum NotResumed {
    /// It never can (its request is missing or no longer valid): it ends `failed`.
    Never(String),
    /// The store is away: the lease is handed back and a later claim tries again.
    NotNow(String),
}

/// What a claimed job still has to do, from its records: the batch's pending operations are
/// settled against the disk first (the dead replica may have published them), then every file
/// with a succeeded operation is kept as written.
pub(super) async fn plan_resume(
    synthesizer: &Synthesizer,
    claimed: &ClaimedJob,
) -> Result<(Submission, Present, Resumed, i64), NotResumed> {
    let job = &claimed.job;
    let Some(body) = &claimed.request else {
        return Err(NotResumed::Never(
            "its request was recorded without its body, so it cannot be resumed".into(),
        ));
    };
    let request: WriteCodebaseRequest = serde_json::from_str(body)
        .map_err(|e| NotResumed::Never(format!("its recorded request cannot be read: {e}")))?;
    let batch = Batch::parse(request)
        .map_err(|e| NotResumed::Never(format!("its recorded request is not valid now: {e}")))?;
    let store = synthesizer.store.as_ref();
    let not_now = |e: StoreError| NotResumed::NotNow(e.to_string());
    let record = store
        .get_request(job.id)
        .await
        .map_err(not_now)?
        .ok_or_else(|| NotResumed::Never("its request record is missing".into()))?;
    let ops = batch_operations(store, job.id).await.map_err(not_now)?;
    let mut written: HashMap<String, Operation> = HashMap::new();
    for mut op in ops {
        if op.status == OperationStatus::Pending {
            match crate::files::settle_pending(store, synthesizer.workspace.as_ref(), &op)
                .await
                .map_err(not_now)?
            {
                Some(status) => op.status = status,
                None => continue,
            }
        }
        if op.status == OperationStatus::Succeeded {
            written.insert(op.filename.clone(), op);
        }
    }
    let order: Vec<String> = batch.files().iter().map(|f| f.path.to_string()).collect();
    let kept: Vec<(usize, FileResult)> = batch
        .files()
        .iter()
        .enumerate()
        .filter_map(|(at, file)| Some((at, written_result(written.get(file.path.as_str())?))))
        .collect();
    let sub = Submission {
        request_id: job.id,
        caller: record.caller,
        scope: record.scope,
        idempotency_key: record.idempotency_key,
        body_sha256: record.body_sha256.unwrap_or_default(),
        body: Some(body.clone()),
        batch: batch.without(|path| written.contains_key(path.as_str())),
        workspace: job.workspace.clone(),
    };
    let mut present = synthesizer
        .check_resumed(&sub)
        .await
        .map_err(|e| NotResumed::Never(format!("its files cannot be written now: {e}")))?;
    if !kept.is_empty() {
        present.earlier = Some(EarlierAttempts {
            files: kept
                .iter()
                .filter_map(|(at, r)| {
                    Some(CommitFile {
                        path: batch.files().get(*at)?.path.clone(),
                        sha256: r.sha256.clone(),
                        model: r.chosen_model.clone(),
                        selection: r.selection.map(|s| s.as_str().to_string()),
                    })
                })
                .collect(),
            batch: batch.clone(),
        });
    }
    let last_seq = store
        .job_events(job.id, 0, u32::MAX)
        .await
        .map_err(not_now)?
        .last()
        .map(|e| e.seq)
        .unwrap_or(0);
    let resumed = Resumed {
        written: kept,
        order,
        created_at: job.created_at,
    };
    Ok((sub, present, resumed, last_seq))
}

/// Every operation recorded for one batch (a batch has a handful of files, each written at most
/// a few times across its runs).
pub(super) async fn batch_operations(
    store: &dyn SynthesisStore,
    request: Uuid,
) -> Result<Vec<Operation>, StoreError> {
    let filter = OperationFilter {
        request_id: Some(request),
        ..OperationFilter::default()
    };
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_operations(&filter, cursor.as_ref(), 100).await?;
        all.extend(page.operations);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(all),
        }
    }
}

/// Resumes one claimed job on this replica, or ends it `failed` when it was claimed too often
/// or can never be resumed.
pub(super) async fn resume(
    synthesizer: Arc<Synthesizer>,
    events: EventQueue,
    running: Arc<Running>,
    hub: EventHub,
    owner: Arc<str>,
    claimed: ClaimedJob,
) {
    let job_id = claimed.job.id;
    if claimed.attempts > MAX_RESUMES {
        let reason = format!(
            "interrupted: its replica stopped {} times before it finished{}",
            claimed.attempts,
            claimed
                .job
                .error
                .as_deref()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        );
        fail_claimed(&synthesizer, &hub, &claimed, &reason).await;
        return;
    }
    let (sub, present, resumed, last_seq) = match plan_resume(&synthesizer, &claimed).await {
        Ok(plan) => plan,
        Err(NotResumed::Never(why)) => {
            fail_claimed(&synthesizer, &hub, &claimed, &format!("not resumed: {why}")).await;
            return;
        }
        Err(NotResumed::NotNow(why)) => {
            tracing::warn!(job = %job_id, reason = %why, "could not resume a job now; handing it back");
            let _ = synthesizer
                .store
                .release_lease(job_id, &owner, Some(&format!("not resumed: {why}")))
                .await;
            return;
        }
    };
    let budgets = match crate::synthesis::spending::budgets_of(synthesizer.store.as_ref(), &sub)
        .await
    {
        Ok(budgets) => budgets,
        Err(e) => {
            tracing::warn!(job = %job_id, error = %e, "could not read the budgets of a job to resume; handing it back");
            let _ = synthesizer
                .store
                .release_lease(job_id, &owner, Some(&format!("not resumed: {e}")))
                .await;
            return;
        }
    };
    let (guard, stop) = running.enter(job_id);
    let ctx = JobContext {
        lease: Some(LeaseHold::new(
            synthesizer.store.clone(),
            job_id,
            owner.clone(),
        )),
        owner: Some(owner),
        stop,
        first_seq: last_seq,
        resumed: Some(resumed),
        budgets,
        _running: guard,
    };
    match run_job(
        &synthesizer,
        events,
        &sub,
        present,
        Recorded::already(),
        ctx,
    )
    .await
    {
        Ok(done) => {
            tracing::info!(job = %job_id, status = done.response.status.as_str(), "resumed job done")
        }
        Err(stopped) => {
            tracing::warn!(job = %job_id, ?stopped, "resumed job stopped before its end")
        }
    }
}

/// Ends a claimed job `failed` with `reason`. Its answer is still stored once, so a caller
/// retrying with its `Idempotency-Key` gets it: the files earlier attempts wrote, and the others
/// failed with the reason.
pub(super) async fn fail_claimed(
    synthesizer: &Synthesizer,
    hub: &EventHub,
    claimed: &ClaimedJob,
    reason: &str,
) {
    let store = synthesizer.store.as_ref();
    let job = &claimed.job;
    let write_path = synthesizer.workspace.root().display().to_string();
    let response = failed_answer(store, job, write_path, reason).await;
    let closed = store
        .commit(record::closing(
            job.id,
            &response,
            JobEnd::Failed(reason),
            Vec::new(),
        ))
        .await;
    if let Err(e) = closed {
        tracing::error!(job = %job.id, error = %e, "could not fail a job that cannot be resumed");
        return;
    }
    announce_failed(store, hub, job.id, reason).await;
    tracing::warn!(job = %job.id, reason, "failed a job that could not be resumed");
}

/// The answer of a job that ends `failed`: the files its runs wrote (as their records say), the
/// others failed with `reason`. Stored like any answer, so a repeat of its `Idempotency-Key`
/// gets it.
pub(super) async fn failed_answer(
    store: &dyn SynthesisStore,
    job: &crate::jobs::Job,
    write_path: String,
    reason: &str,
) -> BatchResponse {
    let ops = batch_operations(store, job.id).await.unwrap_or_default();
    let results: Vec<FileResult> = job
        .files
        .iter()
        .map(|file| {
            let mine = ops.iter().filter(|op| op.filename == *file);
            match mine
                .clone()
                .find(|op| op.status == OperationStatus::Succeeded)
            {
                Some(op) => written_result(op),
                None => FileResult::failed(
                    file,
                    mine.map(|op| op.kind).next().unwrap_or(FileKind::Code),
                    reason,
                    Vec::new(),
                ),
            }
        })
        .collect();
    let duration = (Utc::now() - job.created_at).num_milliseconds().max(0) as u64;
    BatchResponse::assemble(job.id, write_path, results, duration)
}

/// The final `done` event of a failed job, after its last stored one, so every stream following
/// it ends.
pub(super) async fn announce_failed(
    store: &dyn SynthesisStore,
    hub: &EventHub,
    job: Uuid,
    reason: &str,
) {
    let last = store
        .job_events(job, 0, u32::MAX)
        .await
        .map(|e| e.last().map(|e| e.seq).unwrap_or(0))
        .unwrap_or(0);
    let event = JobEvent {
        job_id: job,
        seq: last + 1,
        created_at: Utc::now(),
        name: DONE.to_string(),
        data: serde_json::json!({"type": "done", "status": "failed", "error": reason}),
    };
    let _ = store.append_job_event(&event).await;
    hub.notify(job);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_an_earlier_run_wrote_reports_its_change_from_its_record() {
        let change = writ_checks::shape::Change::between("a.py", "x = 1\n", "x = 2\n", 1_000);
        let op = Operation {
            id: Uuid::now_v7(),
            request_id: Uuid::now_v7(),
            created_at: Utc::now(),
            finished_at: None,
            filename: "a.py".into(),
            kind: FileKind::Code,
            operation: crate::audit::OperationKind::Updated,
            status: crate::audit::OperationStatus::Succeeded,
            chosen_model: Some("m".into()),
            selection: None,
            arbiter_reason: None,
            candidates: Vec::new(),
            previous_sha256: None,
            sha256: None,
            bytes: Some(6),
            error: None,
            duration_ms: None,
            detail: Some(serde_json::json!({ "change": change })),
            workspace: "default".into(),
        };
        let result = written_result(&op);
        assert_eq!(result.change, Some(change));
        assert_eq!(result.image, None);
    }

    #[test]
    fn a_resumed_answer_puts_every_file_back_in_the_batch_order_and_counts_from_acceptance() {
        let ok = |name: &str| {
            let mut r = FileResult::failed(name, FileKind::Code, "x", Vec::new());
            r.success = true;
            r.error = None;
            r
        };
        let resumed = Resumed {
            written: vec![(0, ok("a.py")), (2, ok("c.py"))],
            order: vec!["a.py".into(), "b.py".into(), "c.py".into(), "d.py".into()],
            created_at: Utc::now() - chrono::Duration::seconds(30),
        };
        let latest = BatchResponse::assemble(
            Uuid::now_v7(),
            "/repo".into(),
            vec![
                FileResult::failed("d.py", FileKind::Code, "no candidate", Vec::new()),
                ok("b.py"),
            ],
            5,
        );

        let merged = merge_resumed(&resumed, latest);

        let names: Vec<&str> = merged.results.iter().map(|r| r.filename.as_str()).collect();
        assert_eq!(names, ["a.py", "b.py", "c.py", "d.py"]);
        assert_eq!((merged.total_files, merged.succeeded), (4, 3));
        assert_eq!(merged.status, crate::audit::RequestStatus::PartialSuccess);
        assert!(
            merged.duration_ms >= 30_000,
            "the caller waited since the batch was accepted: {}",
            merged.duration_ms
        );
    }
}

#[cfg(test)]
mod remaining {
    use std::sync::Arc;

    use super::*;
    use crate::synthesis::doubles::{self, Answer, MemoryStore, MemoryWorkspace, ScriptedModels};
    use crate::synthesis::progress::NoProgress;
    use crate::synthesis::record::Recorded;
    use crate::synthesis::stage::SynthesisConfig;

    /// Three files, each naming a context file of its own whose text says whose it is.
    fn batch_with_own_context() -> Batch {
        let files: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|f| {
                serde_json::json!({
                    "filename": format!("{f}.py"),
                    "code_description": "does things",
                    "context": [format!("notes/{f}.md")],
                })
            })
            .collect();
        doubles::parse(serde_json::json!({"command": "write_codebase", "files": files}))
    }

    #[tokio::test]
    async fn a_resumed_batch_refuses_naming_the_files_place_in_the_callers_request() {
        // a.py was written by the attempt that died; b.py holds no longer what the caller
        // expected, and c.py names a context file that is gone.
        let synthesizer = doubles::synthesizer(
            MemoryWorkspace::default()
                .with_file("b.py", "b = 2\n")
                .with_file("notes/c.md", "c\n"),
        );
        let whole = |c_context: &str| {
            doubles::parse(serde_json::json!({"command": "write_codebase", "files": [
                {"filename": "a.py", "code_description": "d"},
                {"filename": "b.py", "code_description": "d",
                 "expected_sha256": crate::content::sha256_hex(b"b = 1\n")},
                {"filename": "c.py", "code_description": "d", "context": [c_context]}]}))
        };
        let left = whole("notes/c.md").without(|path| path.as_str() == "a.py");
        match synthesizer.check_resumed(&doubles::submission(left)).await {
            Err(crate::synthesis::SubmitError::Stale { field, path, .. }) => {
                assert_eq!(
                    (field.as_str(), path.as_str()),
                    ("files[1].expected_sha256", "b.py")
                );
            }
            other => panic!("refused as stale: {:?}", other.err()),
        }

        let left = whole("notes/gone.md")
            .without(|path| path.as_str() == "a.py" || path.as_str() == "b.py");
        match synthesizer.check_resumed(&doubles::submission(left)).await {
            Err(crate::synthesis::SubmitError::Invalid(e)) => {
                assert_eq!(e.field, "files[2].context[0]");
            }
            other => panic!("refused naming the context: {:?}", other.err()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_batch_shows_each_remaining_file_its_own_named_context_and_tokens() {
        // b's notes are short and c's long, so their token counts cannot be mistaken for each
        // other.
        let workspace = MemoryWorkspace::default()
            .with_file("notes/a.md", "NOTES-FOR-A\n")
            .with_file("notes/b.md", "NOTES-FOR-B\n")
            .with_file("notes/c.md", &"NOTES-FOR-C\n".repeat(200));
        let models = Arc::new(
            ScriptedModels::default()
                .with("alpha", vec![Answer::after(5, "```python\nx = 1\n```")]),
        );
        let synthesizer = Synthesizer::new(
            models.clone(),
            Arc::new(MemoryStore::default()),
            Arc::new(workspace),
            SynthesisConfig {
                candidates: vec!["alpha".into()],
                ..SynthesisConfig::default()
            },
        );
        let batch = batch_with_own_context().without(|path| path.as_str() == "a.py");
        let names: Vec<&str> = batch.files().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["b.py", "c.py"]);
        assert!(batch.resumed());
        let sub = doubles::submission(batch);
        let present = match synthesizer.check_resumed(&sub).await {
            Ok(present) => present,
            Err(e) => panic!("the remaining batch is admitted: {e}"),
        };
        let (submitted, _) = synthesizer
            .execute(&sub, present, &NoProgress, &Recorded::already())
            .await;

        for (file, own, others) in [
            ("b.py", "NOTES-FOR-B", ["NOTES-FOR-A", "NOTES-FOR-C"]),
            ("c.py", "NOTES-FOR-C", ["NOTES-FOR-A", "NOTES-FOR-B"]),
        ] {
            let prompts: Vec<String> = models
                .requests_to("alpha")
                .into_iter()
                .map(|r| {
                    r.messages
                        .into_iter()
                        .map(|m| m.content)
                        .collect::<String>()
                })
                .filter(|p| p.contains(&format!("Write the file \"{file}\"")))
                .collect();
            assert!(!prompts.is_empty(), "{file} was asked for");
            for prompt in &prompts {
                assert!(
                    prompt.contains(own),
                    "{file}'s prompt shows its own context"
                );
                for other in others {
                    assert!(!prompt.contains(other), "{file}'s prompt shows {other}");
                }
            }
        }
        let tokens = |file: &str| {
            submitted
                .response
                .results
                .iter()
                .find(|r| r.filename == file)
                .and_then(|r| r.prompt_tokens_by_part.clone())
                .map(|t| t.named_context)
        };
        let (b, c) = (tokens("b.py"), tokens("c.py"));
        assert!(
            matches!((b, c), (Some(b), Some(c)) if b > 0 && c > 10 * b),
            "each file reports its own context's tokens: b {b:?}, c {c:?}"
        );
    }

    /// Records each commit it is asked for.
    #[derive(Default)]
    struct Commits(std::sync::Mutex<Vec<crate::commits::RequestCommit>>);

    #[async_trait::async_trait]
    impl crate::commits::Committer for Commits {
        fn commits_by_default(&self) -> bool {
            true
        }
        async fn commit(
            &self,
            commit: &crate::commits::RequestCommit,
        ) -> Result<Option<String>, String> {
            self.0
                .lock()
                .map_err(|e| e.to_string())?
                .push(commit.clone());
            Ok(Some("c0ffee".into()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_batch_is_one_commit_of_the_files_every_run_wrote() {
        // a.py was written by the run that stopped; b.py and c.py are this run's.
        let workspace = MemoryWorkspace::default()
            .with_file("notes/a.md", "")
            .with_file("notes/b.md", "")
            .with_file("notes/c.md", "")
            .with_file("a.py", "a = 1\n");
        let models = Arc::new(
            ScriptedModels::default()
                .with("alpha", vec![Answer::after(5, "```python\nx = 1\n```")]),
        );
        let commits = Arc::new(Commits::default());
        let synthesizer = Synthesizer::new(
            models,
            Arc::new(MemoryStore::default()),
            Arc::new(workspace),
            SynthesisConfig {
                candidates: vec!["alpha".into()],
                ..SynthesisConfig::default()
            },
        )
        .with_committer(Some(commits.clone()));
        let whole = batch_with_own_context();
        let sub = doubles::submission(whole.without(|path| path.as_str() == "a.py"));
        let mut present = match synthesizer.check_resumed(&sub).await {
            Ok(present) => present,
            Err(e) => panic!("the remaining batch is admitted: {e}"),
        };
        present.earlier = Some(EarlierAttempts {
            batch: whole,
            files: vec![CommitFile {
                path: crate::path::RepoPath::parse("a.py").unwrap(),
                sha256: Some(crate::content::sha256_hex(b"a = 1\n")),
                model: Some("alpha".into()),
                selection: Some("single_candidate".into()),
            }],
        });

        let (submitted, _) = synthesizer
            .execute(&sub, present, &NoProgress, &Recorded::already())
            .await;

        let made = commits.0.lock().unwrap().clone();
        assert_eq!(made.len(), 1, "one commit for the request");
        let paths: Vec<&str> = made[0].files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["a.py", "b.py", "c.py"],
            "the earlier attempt's file too"
        );
        assert!(
            made[0].body.contains("- a.py: does things"),
            "the message describes every file: {}",
            made[0].body
        );
        assert_eq!(submitted.response.commit.as_deref(), Some("c0ffee"));
    }
}
