//! Rejecting a change set's hunks: nothing is written; each file's rejection is recorded with
//! the model that made it, so the model statistics count whose code is turned down.

use super::*;

impl Changes<'_> {
    /// Rejects the hunks `req` names (all open ones by default), recorded per file with the
    /// model that made the content.
    pub async fn reject(
        &self,
        who: &Reviewer,
        id: &str,
        req: RejectChange,
    ) -> Result<RejectedChange, ChangeError> {
        let started = Instant::now();
        check_comment(req.comment.as_deref())?;
        for _ in 0..DECISION_ATTEMPTS {
            let set = self.load(who, id).await?;
            Self::still_open(&set)?;
            let chosen = select(&set, &req.files, &req.hunks)?;
            let seq = set.decisions.len() as i64 + 1;
            let now = Utc::now();
            let mut after = set.clone();
            after.decisions.push(Decision {
                seq,
                kind: DecisionKind::Rejected,
                request_id: who.request_id,
                at: now,
                caller: who.caller.clone(),
                comment: req.comment.clone(),
                files: Vec::new(),
            });
            let mut ops = Vec::with_capacity(chosen.len());
            for c in &chosen {
                let file = &set.files[c.file];
                if let Some(d) = after.decisions.last_mut() {
                    d.files.push(DecidedFile {
                        path: file.path.clone(),
                        hunks: c.hunks.clone(),
                        sha256: None,
                        operation_id: None,
                        rebased: false,
                    });
                }
            }
            for (c, decided) in chosen.iter().zip(0..) {
                let file = &set.files[c.file];
                let provenance =
                    decided_provenance(&after, file, &c.hunks, false, req.comment.as_deref(), now);
                let op = Operation {
                    id: Uuid::now_v7(),
                    request_id: who.request_id,
                    created_at: now,
                    finished_at: Some(now),
                    filename: file.path.clone(),
                    kind: file.kind,
                    operation: OperationKind::Rejected,
                    status: OperationStatus::Succeeded,
                    chosen_model: provenance.chosen_model,
                    selection: provenance.selection,
                    arbiter_reason: provenance.arbiter_reason,
                    candidates: Vec::new(),
                    previous_sha256: file.base_sha256.clone(),
                    sha256: Some(file.sha256.clone()),
                    bytes: Some(file.bytes as i64),
                    error: None,
                    duration_ms: Some(0),
                    detail: provenance.detail,
                    workspace: self.workspace.name().to_owned(),
                };
                if let Some(f) = after
                    .decisions
                    .last_mut()
                    .and_then(|d| d.files.get_mut(decided))
                {
                    f.operation_id = Some(op.id);
                }
                ops.push(op);
            }
            let Some(decision) = after.decisions.last().cloned() else {
                continue;
            };
            let state = after.state(now);
            let undecided = after.undecided();
            let answer = RejectedChange {
                change_id: set.id,
                request_id: who.request_id,
                state,
                files: decision
                    .files
                    .iter()
                    .map(|f| RejectedFile {
                        path: f.path.clone(),
                        hunks: f.hunks.clone(),
                        operation_id: f.operation_id.unwrap_or_default(),
                    })
                    .collect(),
                open_hunks: undecided,
            };
            let event = Event::ChangeRejected {
                change_id: set.id,
                request_id: who.request_id,
                state,
                files: decision.files.clone(),
                comment: decision.comment.clone(),
            };
            let mut writes = vec![AuditWrite::InsertRequest(self.new_request(who))];
            writes.extend(
                ops.into_iter()
                    .map(|operation| AuditWrite::InsertOperation {
                        operation,
                        content: None,
                    }),
            );
            writes.push(AuditWrite::DecideChange {
                change_id: set.id,
                decision,
                state,
                undecided,
            });
            writes.push(AuditWrite::AppendEvents(vec![change_event(
                set.id,
                seq + 1,
                &event,
            )]));
            writes.push(AuditWrite::FinishRequest {
                id: who.request_id,
                status: RequestStatus::Success,
                duration_ms: started.elapsed().as_millis() as i64,
                response: serde_json::to_value(&answer).ok(),
            });
            match self.store.commit(writes).await {
                Ok(()) => return Ok(answer),
                // Another decision took this number: read again and see.
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ChangeError::Busy(id.to_string()))
    }
}
