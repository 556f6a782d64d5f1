//! The spend ledger: what each model call of a batch spent, added to its key's and its
//! workspace's spend of the UTC day it was made in, and the check a call makes before it starts.
//!
//! A call is counted in two steps: when it is made (the call itself, and its prompt tokens as
//! estimated), and when it ends (the tokens the provider reported in place of the estimate, and the
//! cost). A call cut off before it ends — a straggler dropped, a batch past its deadline — keeps
//! its estimate, which is what a provider bills for a prompt it read.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{Budget, BudgetExceeded, BudgetHolder, Degraded, Period, Spend, WindowSpend};
use crate::store::StoreError;

/// Whose spend: an API key's (by id) or a workspace's (by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendHolder<'a> {
    Key(&'a str),
    Workspace(&'a str),
}

/// One addition to the ledger: a call made, or what a call made earlier spent.
#[derive(Debug, Clone, PartialEq)]
pub struct SpendEntry {
    /// When the call was made; its UTC day is the row it counts in, settling included.
    pub at: DateTime<Utc>,
    /// The key that made the batch (`None` with auth off: no key's spend).
    pub caller: Option<String>,
    pub workspace: String,
    /// 1 when a call is made, 0 when what it spent is settled.
    pub calls: u64,
    /// Tokens to add: negative when a call settles below its estimate.
    pub tokens: i64,
    pub cost: f64,
}

/// The budgets set on keys and workspaces (set through [`crate::keys::KeyStore`] and
/// [`crate::workspace_registry::WorkspaceStore`]), as admission and a batch's calls read them.
#[async_trait]
pub trait BudgetStore: Send + Sync {
    /// The key's budget; empty when it has none. What it spent is the ledger's.
    async fn key_budget(&self, id: &str) -> Result<Budget, StoreError>;
    /// The workspace's budget; empty when it has none. What it spent is the ledger's.
    async fn workspace_budget(&self, name: &str) -> Result<Budget, StoreError>;
}

/// Where spend is kept: one store every replica shares, so that a budget holds across them and
/// across restarts.
#[async_trait]
pub trait SpendLedger: Send + Sync {
    /// Adds `entry` to the spend of its key and its workspace for its day.
    async fn record_spend(&self, entry: &SpendEntry) -> Result<(), StoreError>;
    /// What `holder` spent in the UTC days from the one holding `since` on.
    async fn spent(
        &self,
        holder: SpendHolder<'_>,
        since: DateTime<Utc>,
    ) -> Result<Spend, StoreError>;
}

/// Whose spend a batch's calls count in, and the budgets that bound them, read when the batch is
/// admitted (a budget changed while it runs applies to the next batch).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchBudgets {
    pub caller: Option<String>,
    pub workspace: String,
    /// The key's budget (empty with auth off).
    pub key: Budget,
    /// The workspace's budget, whoever's key runs the batch.
    pub in_workspace: Budget,
}

impl BatchBudgets {
    /// Whether either budget limits anything: if not, no call needs to ask the ledger first.
    pub fn limits_anything(&self) -> bool {
        !(self.key.is_empty() && self.in_workspace.is_empty())
    }

    /// The first limit already reached at `now`: the key's (day, then month), then the
    /// workspace's. A call may start only below every limit.
    pub async fn exceeded(
        &self,
        ledger: &dyn SpendLedger,
        now: DateTime<Utc>,
    ) -> Result<Option<BudgetExceeded>, StoreError> {
        for (holder, budget, whose) in self.holders() {
            let Some(holder) = holder.filter(|_| !budget.is_empty()) else {
                continue;
            };
            for window in windows(ledger, holder, budget, now).await? {
                if let Some(refused) = window.exceeded(whose) {
                    return Ok(Some(refused));
                }
            }
        }
        Ok(None)
    }

    /// Each budget with whose spend it bounds, the key's first (none with auth off).
    fn holders(&self) -> [(Option<SpendHolder<'_>>, &Budget, BudgetHolder); 2] {
        [
            (
                self.caller.as_deref().map(SpendHolder::Key),
                &self.key,
                BudgetHolder::Key,
            ),
            (
                Some(SpendHolder::Workspace(&self.workspace)),
                &self.in_workspace,
                BudgetHolder::Workspace,
            ),
        ]
    }

    /// How the batch degrades (`on_limit: degrade`), when a degrading budget's spend reached
    /// its `degrade_at` share of a limit: the most degraded of the key's and the workspace's.
    pub async fn degraded(
        &self,
        ledger: &dyn SpendLedger,
        now: DateTime<Utc>,
    ) -> Result<Option<Degraded>, StoreError> {
        let mut worst: Option<Degraded> = None;
        for (holder, budget, whose) in self.holders() {
            let Some(holder) = holder.filter(|_| budget.degrades_from().is_some()) else {
                continue;
            };
            for window in windows(ledger, holder, budget, now).await? {
                if let Some(d) = Degraded::of(&window, budget, whose) {
                    worst = Some(match worst {
                        Some(w) => w.worse(d),
                        None => d,
                    });
                }
            }
        }
        Ok(worst)
    }
}

/// The day's and the month's window of `budget`, with what `holder` spent in each.
pub async fn windows(
    ledger: &dyn SpendLedger,
    holder: SpendHolder<'_>,
    budget: &Budget,
    now: DateTime<Utc>,
) -> Result<[WindowSpend; 2], StoreError> {
    let mut out =
        [Period::Day, Period::Month].map(|p| WindowSpend::new(p, now, Spend::default(), budget));
    for window in &mut out {
        let spend = ledger.spent(holder, window.since).await?;
        *window = WindowSpend::new(window.period, now, spend, budget);
    }
    Ok(out)
}
