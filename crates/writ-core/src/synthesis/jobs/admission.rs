//! Admission: the one way a batch comes to run, for every surface (HTTP, MCP, function calling,
//! the CLI). Every refusal happens here, before any model is called or anything written, in one
//! order:
//!
//! 1. parse — the body, with unknown keys refused, into a [`Batch`];
//! 2. replay — a repeated `Idempotency-Key` answers what its first try answered, before anything
//!    is checked or taken (a retry never holds a second slot, nor is refused for a limit its
//!    first try passed);
//! 3. scope and models — what the surface knows of the caller's scopes and of its providers
//!    ([`AdmissionPorts::scope_and_models`]);
//! 4. claims — none of the paths the batch writes claimed by another workspace of its
//!    repository, where the batch respects claims ([`AdmissionPorts::claims`]);
//! 5. budgets — the key's, then the workspace's, read from the store once, and whether the batch
//!    degrades near a limit;
//! 6. targets — the models as the core knows them, the files on disk and each `expected_sha256`,
//!    the validation commands, each file's record ([`super::stage::BatchFile`]);
//! 7. slot — one of the caller's (and the workspace's) batches in flight, taken last and refused
//!    at once rather than queued ([`AdmissionPorts::slot`]).
//!
//! [`Admitted`] is the only way into [`Jobs::start`]. A batch another replica resumes
//! ([`super::resume`]) was admitted by the replica that accepted it: it goes through steps 6 again
//! (`Synthesizer::check_resumed`; this replica's models may differ), and every model call asks
//! the budgets again; its slot is its job's, held in the store.

use async_trait::async_trait;
use chrono::Utc;
use uuid::Uuid;

use super::{Jobs, Prepared};
use crate::budgets::{BatchBudgets, BudgetExceeded, BudgetHolder};
use crate::content::sha256_hex;
use crate::keys::Scope;
use crate::synthesis::batch::{Batch, WriteCodebaseRequest};
use crate::synthesis::spending::budgets_of;
use crate::synthesis::stage::Synthesizer;
use crate::synthesis::submission::{Begun, Submission, SubmitError};

/// One `write_codebase` call as a surface received it.
pub struct BatchRequest<'a> {
    pub request_id: Uuid,
    pub caller: Option<String>,
    /// The key's scope that allowed the batch, when auth is on.
    pub scope: Option<Scope>,
    pub idempotency_key: Option<String>,
    /// The workspace the call was made in.
    pub workspace: String,
    /// The request as JSON, hashed for idempotency and parsed with unknown keys refused.
    pub body: &'a [u8],
}

/// Why the core refused a batch; a surface turns it into its own refusal
/// ([`AdmissionPorts::Refusal`]).
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// The body is not JSON, or not a `write_codebase` request (serde's message, with the path
    /// of the field at fault).
    #[error("{0}")]
    Body(String),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// A limit of the key's or the workspace's budget is spent for its day or month.
    #[error("{exceeded}")]
    Budget {
        exceeded: BudgetExceeded,
        /// The workspace, when it is the workspace's budget that is spent.
        workspace: Option<String>,
    },
}

/// What admission asks of the surface: what depends on its deployment (the caller's scopes, the
/// providers it set up, the repositories its workspaces share) and the slots that bound a
/// caller's batches in flight.
#[async_trait]
pub trait AdmissionPorts: Send + Sync {
    /// The surface's refusal (the server's is an HTTP error with its status).
    type Refusal: From<AdmitError> + Send;
    /// What a slot holds until the batch ends.
    type Permit: Send + 'static;

    /// Step 3: the scopes the batch needs beside `write` (`run` for `options.validation`) and
    /// the providers of the models it names.
    fn scope_and_models(&self, sub: &Submission) -> Result<(), Self::Refusal>;

    /// Step 4: refused when the batch respects claims and another workspace claimed a path it
    /// writes.
    async fn claims(&self, sub: &Submission) -> Result<(), Self::Refusal>;

    /// Step 7: one of the caller's batch slots, or the refusal (with when to retry).
    async fn slot(&self, sub: &Submission) -> Result<Self::Permit, Self::Refusal>;
}

/// A batch that passed every step of admission, holding its slot: what [`Jobs::start`] takes.
pub struct Admitted<P> {
    pub(crate) submission: Submission,
    pub(crate) prepared: Prepared,
    pub(crate) permit: P,
}

impl<P> Admitted<P> {
    pub fn submission(&self) -> &Submission {
        &self.submission
    }
}

impl Jobs {
    /// Admits one batch in the order of this module: its stored answer for a repeated
    /// `Idempotency-Key`, else the batch with its slot, or the first refusal.
    pub async fn admit<P: AdmissionPorts>(
        &self,
        request: BatchRequest<'_>,
        ports: &P,
    ) -> Result<Begun<Admitted<P::Permit>>, P::Refusal> {
        // 1. parse
        let batch = parse_request(request.body)?;
        let submission = Submission {
            request_id: request.request_id,
            caller: request.caller,
            scope: request.scope,
            idempotency_key: request.idempotency_key,
            body_sha256: sha256_hex(request.body),
            body: std::str::from_utf8(request.body).ok().map(str::to_owned),
            batch,
            workspace: request.workspace,
        };
        // 2. replay
        if let Some(done) = self.replay(&submission).await.map_err(AdmitError::from)? {
            return Ok(Begun::Replayed(done));
        }
        // 3. scope and models
        ports.scope_and_models(&submission)?;
        // 4. claims
        ports.claims(&submission).await?;
        // 5. budgets
        let synthesizer = self
            .synthesizer_of(&submission)
            .await
            .map_err(AdmitError::from)?;
        let budgets = within_budgets(synthesizer.as_ref(), &submission).await?;
        // 6. targets
        let prepared = self
            .admit_targets(synthesizer, &submission, budgets)
            .await
            .map_err(AdmitError::from)?;
        // 7. slot
        let permit = ports.slot(&submission).await?;
        Ok(Begun::Fresh(Admitted {
            submission,
            prepared,
            permit,
        }))
    }
}

/// Step 1: the body as a validated batch, unknown keys refused, each refusal naming its field.
/// A surface that cannot run batches at all still refuses a bad body first, with this.
pub fn parse_request(body: &[u8]) -> Result<Batch, AdmitError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let request: WriteCodebaseRequest =
        serde_path_to_error::deserialize(&mut json).map_err(|e| AdmitError::Body(e.to_string()))?;
    json.end().map_err(|e| AdmitError::Body(e.to_string()))?;
    Ok(Batch::parse(request).map_err(SubmitError::Invalid)?)
}

/// Step 5: the budgets the batch's calls count against, read once, refused when a limit is spent
/// (the key's budget is checked first). A repeated `Idempotency-Key` never gets here: it was
/// answered by the replay, whatever was spent since.
async fn within_budgets(
    synthesizer: &Synthesizer,
    sub: &Submission,
) -> Result<BatchBudgets, AdmitError> {
    let store = synthesizer.store.as_ref();
    let budgets = budgets_of(store, sub).await.map_err(SubmitError::Audit)?;
    if !budgets.limits_anything() {
        return Ok(budgets);
    }
    match budgets
        .exceeded(store, Utc::now())
        .await
        .map_err(SubmitError::Audit)?
    {
        Some(exceeded) => Err(AdmitError::Budget {
            exceeded,
            workspace: (exceeded.budget == BudgetHolder::Workspace).then(|| sub.workspace.clone()),
        }),
        None => Ok(budgets),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::synthesis::doubles::{self, MemoryWorkspace};
    use crate::synthesis::jobs::EventHub;

    /// Ports that note which of them admission asked, in order, and refuse at one of them.
    #[derive(Default)]
    struct Noting {
        asked: Mutex<Vec<&'static str>>,
        refuse_at: Option<&'static str>,
    }

    #[derive(Debug, PartialEq)]
    enum Refused {
        Core(String),
        Port(&'static str),
    }

    impl From<AdmitError> for Refused {
        fn from(e: AdmitError) -> Self {
            Refused::Core(e.to_string())
        }
    }

    impl Noting {
        fn refusing_at(step: &'static str) -> Self {
            Noting {
                refuse_at: Some(step),
                ..Noting::default()
            }
        }
        fn ask(&self, step: &'static str) -> Result<(), Refused> {
            self.asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(step);
            match self.refuse_at {
                Some(at) if at == step => Err(Refused::Port(step)),
                _ => Ok(()),
            }
        }
        fn asked(&self) -> Vec<&'static str> {
            self.asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        }
    }

    #[async_trait]
    impl AdmissionPorts for Noting {
        type Refusal = Refused;
        type Permit = ();
        fn scope_and_models(&self, _: &Submission) -> Result<(), Refused> {
            self.ask("scope_and_models")
        }
        async fn claims(&self, _: &Submission) -> Result<(), Refused> {
            self.ask("claims")
        }
        async fn slot(&self, _: &Submission) -> Result<(), Refused> {
            self.ask("slot")
        }
    }

    fn jobs(workspace: MemoryWorkspace) -> Jobs {
        Jobs::new(
            Arc::new(doubles::synthesizer(workspace)),
            EventHub::default(),
        )
    }

    async fn admit(jobs: &Jobs, body: serde_json::Value, ports: &Noting) -> Result<(), Refused> {
        let body = body.to_string();
        let request = BatchRequest {
            request_id: Uuid::now_v7(),
            caller: None,
            scope: None,
            idempotency_key: None,
            workspace: crate::workspace_registry::WorkspaceName::DEFAULT.to_owned(),
            body: body.as_bytes(),
        };
        match jobs.admit(request, ports).await? {
            Begun::Fresh(admitted) => {
                assert_eq!(admitted.submission().batch.files().len(), 1);
                Ok(())
            }
            Begun::Replayed(_) => panic!("no key was given, so nothing is replayed"),
        }
    }

    fn one_file(extra: serde_json::Value) -> serde_json::Value {
        let mut file = serde_json::json!({"filename": "a.py", "code_description": "d"});
        if let (Some(file), Some(extra)) = (file.as_object_mut(), extra.as_object()) {
            file.extend(extra.clone());
        }
        serde_json::json!({"command": "write_codebase", "files": [file]})
    }

    #[tokio::test]
    async fn a_sound_batch_passes_every_step_in_order_and_takes_its_slot_last() {
        let jobs = jobs(MemoryWorkspace::default());
        let ports = Noting::default();
        assert_eq!(
            admit(&jobs, one_file(serde_json::json!({})), &ports).await,
            Ok(())
        );
        assert_eq!(ports.asked(), ["scope_and_models", "claims", "slot"]);
    }

    #[tokio::test]
    async fn a_bad_body_is_refused_naming_its_field_before_any_port_is_asked() {
        let jobs = jobs(MemoryWorkspace::default());
        let ports = Noting::default();
        let refused = admit(&jobs, one_file(serde_json::json!({"colour": 1})), &ports).await;
        match refused {
            Err(Refused::Core(why)) => assert!(why.contains("colour"), "{why}"),
            other => panic!("refused for its body: {other:?}"),
        }
        assert!(ports.asked().is_empty());
    }

    #[tokio::test]
    async fn a_refusal_at_one_step_asks_none_after_it() {
        let jobs = jobs(MemoryWorkspace::default());
        let ports = Noting::refusing_at("claims");
        let refused = admit(&jobs, one_file(serde_json::json!({})), &ports).await;
        assert_eq!(refused, Err(Refused::Port("claims")));
        assert_eq!(ports.asked(), ["scope_and_models", "claims"]);
    }

    #[tokio::test]
    async fn a_stale_target_is_refused_after_the_claims_and_before_the_slot_is_taken() {
        let jobs = jobs(MemoryWorkspace::default().with_file("a.py", "x = 1\n"));
        let ports = Noting::default();
        let stale = serde_json::json!({"expected_sha256": "0".repeat(64)});
        match admit(&jobs, one_file(stale), &ports).await {
            Err(Refused::Core(why)) => assert!(why.contains("changed"), "{why}"),
            other => panic!("refused as stale: {other:?}"),
        }
        assert_eq!(ports.asked(), ["scope_and_models", "claims"]);
    }
}
