//! Every model call a batch makes counted in its key's and its workspace's spend when it is made,
//! and none started once a budget is spent: [`Metered`], a [`ModelClient`] over the synthesizer's,
//! made for each run of a batch ([`Synthesizer::metered`]), so that every stage's calls — the
//! candidates, the arbiter, test writers, repairs, images — go through it without knowing.
//!
//! Each call is added to the ledger twice: before it starts (the call, and its prompt tokens as
//! estimated), and when it ends (the provider's figures in place of the estimate, and the cost).
//! The second addition runs in a task of its own, so a batch dropped meanwhile does not lose it.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;

use crate::budgets::{BatchBudgets, SpendEntry, SpendLedger};
use crate::model::{
    ChatRequest, ChatResponse, ErrorClass, ModelClient, ModelError, ProviderReadiness,
};
use crate::synthesis::context::tokens;
use crate::synthesis::stage::Synthesizer;

/// The synthesizer's model client, metered for one batch.
pub(crate) struct Metered {
    inner: Arc<dyn ModelClient>,
    ledger: Arc<dyn SpendLedger>,
    budgets: BatchBudgets,
}

impl Synthesizer {
    /// This synthesizer, its model calls counted against `budgets` (and refused once one of
    /// them is spent).
    pub(crate) fn metered(&self, budgets: BatchBudgets) -> Synthesizer {
        let ledger: Arc<dyn SpendLedger> = self.store.clone();
        Synthesizer {
            models: Arc::new(Metered {
                inner: self.models.clone(),
                ledger,
                budgets,
            }),
            store: self.store.clone(),
            workspace: self.workspace.clone(),
            config: self.config.clone(),
            commands: self.commands.clone(),
            committer: self.committer.clone(),
            overlaps: self.overlaps.clone(),
        }
    }
}

impl Metered {
    fn refused(&self, model: &str, message: String) -> ModelError {
        ModelError {
            model: model.to_owned(),
            class: ErrorClass::BudgetExceeded,
            status: None,
            message,
            attempts: 0,
            latency: std::time::Duration::ZERO,
        }
    }

    fn entry(&self, at: chrono::DateTime<Utc>, calls: u64, tokens: i64, cost: f64) -> SpendEntry {
        SpendEntry {
            at,
            caller: self.budgets.caller.clone(),
            workspace: self.budgets.workspace.clone(),
            calls,
            tokens,
            cost,
        }
    }
}

/// The prompt tokens of `req` as estimated before the provider says.
fn estimated_prompt_tokens(req: &ChatRequest) -> i64 {
    let estimate: usize = req.messages.iter().map(|m| tokens(&m.content)).sum();
    i64::try_from(estimate).unwrap_or(i64::MAX)
}

/// The budgets a batch's calls count against: its key's (none with auth off) and its
/// workspace's.
pub(crate) async fn budgets_of(
    store: &dyn crate::audit::SynthesisStore,
    sub: &crate::synthesis::submission::Submission,
) -> Result<BatchBudgets, crate::store::StoreError> {
    let key = match &sub.caller {
        Some(caller) => store.key_budget(caller).await?,
        None => crate::budgets::Budget::default(),
    };
    Ok(BatchBudgets {
        caller: sub.caller.clone(),
        workspace: sub.workspace.clone(),
        key,
        in_workspace: store.workspace_budget(&sub.workspace).await?,
    })
}

#[async_trait]
impl ModelClient for Metered {
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        let at = Utc::now();
        let bounded = self.budgets.limits_anything();
        if bounded {
            match self.budgets.exceeded(self.ledger.as_ref(), at).await {
                Ok(None) => {}
                Ok(Some(spent)) => return Err(self.refused(&req.model, spent.to_string())),
                // A limit that cannot be checked is not waved through.
                Err(e) => {
                    return Err(self.refused(
                        &req.model,
                        format!("the budget could not be checked, so no model was called: {e}"),
                    ));
                }
            }
        }
        let estimate = estimated_prompt_tokens(&req);
        if let Err(e) = self
            .ledger
            .record_spend(&self.entry(at, 1, estimate, 0.0))
            .await
        {
            if bounded {
                return Err(self.refused(
                    &req.model,
                    format!(
                        "the call could not be counted against the budget, so it was not made: {e}"
                    ),
                ));
            }
            tracing::warn!(error = %e, model = %req.model, "a model call could not be counted in the spend ledger");
        }
        let model = req.model.clone();
        let answer = self.inner.chat(req).await;
        let (tokens, cost) = match &answer {
            Ok(r) => {
                let reported =
                    r.usage.prompt_tokens.unwrap_or(0) + r.usage.completion_tokens.unwrap_or(0);
                let reported = i64::try_from(reported).unwrap_or(i64::MAX);
                let cost = r
                    .usage
                    .cost
                    .filter(|c| c.is_finite() && *c > 0.0)
                    .unwrap_or(0.0);
                // A provider that reports no usage leaves the estimate standing.
                let tokens =
                    if r.usage.prompt_tokens.is_some() || r.usage.completion_tokens.is_some() {
                        reported - estimate
                    } else {
                        0
                    };
                (tokens, cost)
            }
            // A failed call keeps its estimate: the provider may have read the prompt.
            Err(_) => (0, 0.0),
        };
        if tokens != 0 || cost > 0.0 {
            let settle = self.entry(at, 0, tokens, cost);
            let ledger = self.ledger.clone();
            let recorded = tokio::spawn(async move { ledger.record_spend(&settle).await });
            match recorded.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, model = %model, "what a model call spent could not be added to the spend ledger");
                }
                Err(e) => tracing::warn!(error = %e, "the spend ledger's task ended early"),
            }
        }
        answer
    }

    fn readiness(&self) -> ProviderReadiness {
        self.inner.readiness()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budgets::{Budget, SpendHolder};
    use crate::synthesis::doubles::{Answer, MemoryStore, ScriptedModels};

    const CODE: &str = "def f():\n    return 1\n";

    /// What the scripted models report for [`CODE`]: 10 prompt tokens, 22 / 4 + 1 completion.
    const REPORTED: u64 = 10 + 6;

    fn answering() -> ScriptedModels {
        ScriptedModels::default().with("m", vec![Answer::after(0, CODE)])
    }

    fn metered(store: Arc<MemoryStore>, models: ScriptedModels, key: Budget) -> Metered {
        Metered {
            inner: Arc::new(models),
            ledger: store,
            budgets: BatchBudgets {
                caller: Some("k1".into()),
                workspace: "team".into(),
                key,
                in_workspace: Budget::default(),
            },
        }
    }

    fn ask(model: &str) -> ChatRequest {
        ChatRequest {
            model: model.into(),
            messages: vec![crate::model::ChatMessage::user("x".repeat(400))],
            ..ChatRequest::default()
        }
    }

    #[tokio::test]
    async fn a_call_counts_when_it_is_made_and_settles_to_what_the_provider_reported() {
        let store = Arc::new(MemoryStore::default());
        let m = metered(store.clone(), answering(), Budget::default());

        m.chat(ask("m")).await.unwrap();

        let entries = store.spend.lock().unwrap().clone();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(
            (entries[0].calls, entries[0].tokens),
            (1, 100),
            "the estimate, at once"
        );
        let since = Utc::now() - chrono::Duration::days(1);
        for holder in [SpendHolder::Key("k1"), SpendHolder::Workspace("team")] {
            let spent = store.spent(holder, since).await.unwrap();
            assert_eq!(spent.calls, 1);
            assert_eq!(spent.tokens, REPORTED, "{holder:?}");
        }
    }

    #[tokio::test]
    async fn a_failed_call_still_counts_its_prompt() {
        let store = Arc::new(MemoryStore::default());
        let m = metered(store.clone(), ScriptedModels::default(), Budget::default());

        assert!(m.chat(ask("unscripted")).await.is_err());

        let spent = store
            .spent(
                SpendHolder::Key("k1"),
                Utc::now() - chrono::Duration::days(1),
            )
            .await
            .unwrap();
        assert_eq!((spent.calls, spent.tokens), (1, 100));
    }

    #[tokio::test]
    async fn a_call_cut_off_midway_keeps_its_estimate() {
        let store = Arc::new(MemoryStore::default());
        let slow = ScriptedModels::default().with("m", vec![Answer::after(60_000, CODE)]);
        let m = metered(store.clone(), slow, Budget::default());

        let cut =
            tokio::time::timeout(std::time::Duration::from_millis(50), m.chat(ask("m"))).await;

        assert!(cut.is_err());
        let spent = store
            .spent(
                SpendHolder::Workspace("team"),
                Utc::now() - chrono::Duration::days(1),
            )
            .await
            .unwrap();
        assert_eq!((spent.calls, spent.tokens), (1, 100));
    }

    #[tokio::test]
    async fn once_a_budget_is_spent_no_call_starts_and_none_is_counted() {
        let store = Arc::new(MemoryStore::default());
        let budget = Budget {
            daily_tokens: Some(1),
            ..Budget::default()
        };
        let m = metered(store.clone(), answering(), budget);
        m.chat(ask("m")).await.unwrap();

        let refused = m.chat(ask("m")).await.unwrap_err();

        assert_eq!(refused.class, ErrorClass::BudgetExceeded);
        assert!(
            refused
                .message
                .contains("API key's daily budget of 1 tokens"),
            "{refused}"
        );
        assert_eq!(
            store.spend.lock().unwrap().len(),
            2,
            "the refused call is not counted"
        );
    }

    #[tokio::test]
    async fn with_a_budget_a_ledger_that_cannot_be_reached_refuses_the_call() {
        let store = Arc::new(MemoryStore::default());
        store
            .unreachable
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let bounded = metered(
            store.clone(),
            answering(),
            Budget {
                daily_cost: Some(1.0),
                ..Budget::default()
            },
        );
        assert_eq!(
            bounded.chat(ask("m")).await.unwrap_err().class,
            ErrorClass::BudgetExceeded
        );
        let unbounded = metered(store, answering(), Budget::default());
        assert!(
            unbounded.chat(ask("m")).await.is_ok(),
            "no budget: the call goes ahead"
        );
    }
}
