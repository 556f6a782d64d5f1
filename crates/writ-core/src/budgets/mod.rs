//! What a key or a workspace may spend: a [`Budget`] per day and per month, in cost (the provider's
//! billing currency, USD on OpenRouter) and/or tokens, and the [`Spend`] it is checked against —
//! read from the spend ledger ([`SpendLedger`], in `ledger`), to which every model call a batch
//! makes is added when it is made, whatever becomes of the batch (a dry run, a failure, a
//! cancellation, a file never written). Every replica adds to the same store.
//!
//! A batch that would start past a limit is refused when it is admitted, before any model is
//! called ([`BudgetExceeded`]); and every model call asks again before it is made
//! ([`BatchBudgets::exceeded`]), so once a limit is reached no further call starts. Calls already
//! in flight when it is reached still finish and count: concurrent batches overshoot a limit by
//! at most what those calls spend.

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use serde::{Deserialize, Serialize};

mod ledger;

pub use ledger::{BatchBudgets, SpendEntry, SpendHolder, SpendLedger, windows};

/// One key's limits. Every limit is optional; a budget with none limits nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Most cost per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_cost: Option<f64>,
    /// Most tokens (prompt and completion) per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_tokens: Option<u64>,
    /// Most cost per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_cost: Option<f64>,
    /// Most tokens per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_tokens: Option<u64>,
}

impl Budget {
    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }

    /// Refuses a negative or non-finite cost limit, naming it.
    pub fn validate(&self) -> Result<(), String> {
        for (name, cost) in [
            ("daily_cost", self.daily_cost),
            ("monthly_cost", self.monthly_cost),
        ] {
            if let Some(c) = cost
                && !(c.is_finite() && c >= 0.0)
            {
                return Err(format!("{name} must be a number of at least 0, not {c}"));
            }
        }
        Ok(())
    }
}

/// What was spent in a window: the model calls counted in it, their tokens and their cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub cost: f64,
    pub tokens: u64,
    pub calls: u64,
}

/// A budget's window: the UTC day or the UTC calendar month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    /// When the window holding `now` began and when it resets.
    pub fn window(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let day = Utc
            .with_ymd_and_hms(now.year(), now.month(), now.day(), 0, 0, 0)
            .single()
            .unwrap_or(now);
        match self {
            Period::Day => (day, day + Duration::days(1)),
            Period::Month => {
                let start = day - Duration::days(i64::from(now.day()) - 1);
                let (y, m) = if now.month() == 12 {
                    (now.year() + 1, 1)
                } else {
                    (now.year(), now.month() + 1)
                };
                let end = Utc
                    .with_ymd_and_hms(y, m, 1, 0, 0, 0)
                    .single()
                    .unwrap_or(start + Duration::days(31));
                (start, end)
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }
}

/// A window's spend beside its limits, as `GET /keys/{id}/spend` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct WindowSpend {
    pub period: Period,
    pub since: DateTime<Utc>,
    pub resets_at: DateTime<Utc>,
    pub cost: f64,
    pub tokens: u64,
    /// The model calls counted (made, whatever became of them).
    pub calls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_limit: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_limit: Option<u64>,
}

/// Whose budget a limit is: the API key's or the workspace's the batch is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetHolder {
    Key,
    Workspace,
}

/// Which limit a batch was refused for, with what was spent and when it resets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BudgetExceeded {
    /// `key` or `workspace`: whose budget is spent.
    pub budget: BudgetHolder,
    pub period: Period,
    /// `cost` or `tokens`.
    pub limit_kind: &'static str,
    pub limit: f64,
    pub spent: f64,
    pub resets_at: DateTime<Utc>,
}

impl std::fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "this {}'s {} budget of {} {} is spent ({} spent); it resets at {}",
            match self.budget {
                BudgetHolder::Key => "API key",
                BudgetHolder::Workspace => "workspace",
            },
            match self.period {
                Period::Day => "daily",
                Period::Month => "monthly",
            },
            self.limit,
            self.limit_kind,
            self.spent,
            self.resets_at.to_rfc3339()
        )
    }
}

impl WindowSpend {
    pub fn new(period: Period, now: DateTime<Utc>, spend: Spend, budget: &Budget) -> Self {
        let (since, resets_at) = period.window(now);
        let (cost_limit, tokens_limit) = match period {
            Period::Day => (budget.daily_cost, budget.daily_tokens),
            Period::Month => (budget.monthly_cost, budget.monthly_tokens),
        };
        WindowSpend {
            period,
            since,
            resets_at,
            cost: spend.cost,
            tokens: spend.tokens,
            calls: spend.calls,
            cost_limit,
            tokens_limit,
        }
    }

    /// The first limit this window has reached: a batch may start only below every limit.
    /// `budget` says whose limits these are.
    pub fn exceeded(&self, budget: BudgetHolder) -> Option<BudgetExceeded> {
        let refuse = |limit_kind, limit: f64, spent: f64| BudgetExceeded {
            budget,
            period: self.period,
            limit_kind,
            limit,
            spent,
            resets_at: self.resets_at,
        };
        if let Some(limit) = self.cost_limit
            && self.cost >= limit
        {
            return Some(refuse("cost", limit, self.cost));
        }
        if let Some(limit) = self.tokens_limit
            && self.tokens >= limit
        {
            return Some(refuse("tokens", limit as f64, self.tokens as f64));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_day_and_a_month_are_utc_calendar_windows() {
        let now = at("2026-12-31T22:10:00Z");
        assert_eq!(
            Period::Day.window(now),
            (at("2026-12-31T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            Period::Month.window(now),
            (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_window_at_its_limit_refuses_and_names_the_limit() {
        let budget = Budget {
            daily_tokens: Some(100),
            monthly_cost: Some(1.0),
            ..Budget::default()
        };
        let now = at("2026-11-26T10:00:00Z");
        let below = Spend {
            cost: 0.5,
            tokens: 99,
            calls: 3,
        };
        assert_eq!(
            WindowSpend::new(Period::Day, now, below, &budget).exceeded(BudgetHolder::Key),
            None
        );
        let at_limit = Spend {
            cost: 0.5,
            tokens: 100,
            calls: 4,
        };
        let refused = WindowSpend::new(Period::Day, now, at_limit, &budget)
            .exceeded(BudgetHolder::Key)
            .unwrap();
        assert_eq!(refused.limit_kind, "tokens");
        assert_eq!(refused.resets_at, at("2026-11-27T00:00:00Z"));
        assert!(
            refused
                .to_string()
                .contains("this API key's daily budget of 100 tokens")
        );
        let refused = WindowSpend::new(Period::Day, now, at_limit, &budget)
            .exceeded(BudgetHolder::Workspace)
            .unwrap();
        assert!(
            refused
                .to_string()
                .contains("this workspace's daily budget of 100 tokens"),
            "{refused}"
        );
    }
}
