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

pub use ledger::{BatchBudgets, BudgetStore, SpendEntry, SpendHolder, SpendLedger, windows};

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
    /// What happens near a limit: `refuse` (the default) runs batches as usual until a limit
    /// is reached, then answers 402; `degrade` asks fewer, then cheaper, models from
    /// `degrade_at` of a limit on, and says so in the answer — at the limit it answers 402 too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_limit: Option<OnLimit>,
    /// With `on_limit: degrade`: the share of a limit from which batches degrade (above 0,
    /// below 1; default 0.8). Halfway from there to the limit, they ask only the cheapest model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degrade_at: Option<f64>,
}

/// What a budget does near its limits.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnLimit {
    #[default]
    Refuse,
    Degrade,
}

impl OnLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            OnLimit::Refuse => "refuse",
            OnLimit::Degrade => "degrade",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "refuse" => Some(OnLimit::Refuse),
            "degrade" => Some(OnLimit::Degrade),
            _ => None,
        }
    }
}

/// `degrade_at` when a degrading budget does not say.
pub const DEFAULT_DEGRADE_AT: f64 = 0.8;

impl Budget {
    /// Whether it limits nothing (`on_limit` alone changes nothing).
    pub fn is_empty(&self) -> bool {
        self.daily_cost.is_none()
            && self.daily_tokens.is_none()
            && self.monthly_cost.is_none()
            && self.monthly_tokens.is_none()
    }

    /// The share of a limit from which batches degrade, for a degrading budget.
    pub fn degrades_from(&self) -> Option<f64> {
        (self.on_limit == Some(OnLimit::Degrade))
            .then(|| self.degrade_at.unwrap_or(DEFAULT_DEGRADE_AT))
    }

    /// Refuses a negative or non-finite cost limit, or a `degrade_at` that is not a share,
    /// naming it.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(at) = self.degrade_at {
            if !(at.is_finite() && at > 0.0 && at < 1.0) {
                return Err(format!(
                    "degrade_at must be a share above 0 and below 1, not {at}"
                ));
            }
            if self.on_limit != Some(OnLimit::Degrade) {
                return Err("degrade_at needs on_limit: \"degrade\"".into());
            }
        }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

/// What a batch gives up near a degrading budget's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DegradeLevel {
    /// From `degrade_at` of a limit: each code file asks one model (routing's first choice,
    /// else the first candidate model), and no second round.
    FewerModels,
    /// From halfway between `degrade_at` and the limit: each code file asks only the cheapest
    /// candidate model (by its recorded cost per candidate).
    CheapestModel,
}

/// A batch that ran degraded (`on_limit: degrade`), and why (the answer's `degraded`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Degraded {
    pub level: DegradeLevel,
    /// Whose budget: `key` or `workspace`.
    pub budget: BudgetHolder,
    pub period: Period,
    /// `cost` or `tokens`.
    pub limit_kind: String,
    pub limit: f64,
    pub spent: f64,
    pub degrade_at: f64,
    /// At `cheapest_model`: the model every code file of the batch asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub message: String,
}

impl Degraded {
    /// The degradation a window calls for, when its budget degrades and a limit's share spent
    /// reached `degrade_at`; the limit nearest to being spent decides.
    pub fn of(window: &WindowSpend, budget: &Budget, holder: BudgetHolder) -> Option<Degraded> {
        let at = budget.degrades_from()?;
        let shares = [
            window.cost_limit.map(|l| ("cost", l, window.cost)),
            window
                .tokens_limit
                .map(|l| ("tokens", l as f64, window.tokens as f64)),
        ];
        let (kind, limit, spent) = shares
            .into_iter()
            .flatten()
            .filter(|(_, limit, _)| *limit > 0.0)
            .max_by(|a, b| (a.2 / a.1).total_cmp(&(b.2 / b.1)))?;
        let share = spent / limit;
        if share < at {
            return None;
        }
        let level = if share >= at + (1.0 - at) / 2.0 {
            DegradeLevel::CheapestModel
        } else {
            DegradeLevel::FewerModels
        };
        Some(Degraded {
            level,
            budget: holder,
            period: window.period,
            limit_kind: kind.to_string(),
            limit,
            spent,
            degrade_at: at,
            model: None,
            message: format!(
                "{:.0}% of this {}'s {} budget of {limit} {kind} is spent ({spent} spent; degrading from {:.0}%): {}",
                100.0 * share,
                match holder {
                    BudgetHolder::Key => "API key",
                    BudgetHolder::Workspace => "workspace",
                },
                match window.period {
                    Period::Day => "daily",
                    Period::Month => "monthly",
                },
                100.0 * at,
                match level {
                    DegradeLevel::FewerModels => "each file asks one model, with no second round",
                    DegradeLevel::CheapestModel => "each file asks only the cheapest model",
                },
            ),
        })
    }

    /// The more degraded of two.
    pub fn worse(self, other: Degraded) -> Degraded {
        if other.level == DegradeLevel::CheapestModel && self.level == DegradeLevel::FewerModels {
            other
        } else {
            self
        }
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
    #[test]
    fn a_degrading_budget_degrades_from_its_share_and_more_from_halfway_to_the_limit() {
        let now = at("2026-11-26T10:00:00Z");
        let budget = Budget {
            daily_tokens: Some(1000),
            daily_cost: Some(1.0),
            on_limit: Some(OnLimit::Degrade),
            degrade_at: Some(0.6),
            ..Budget::default()
        };
        let level = |tokens: u64, cost: f64| {
            let spend = Spend {
                cost,
                tokens,
                calls: 1,
            };
            Degraded::of(
                &WindowSpend::new(Period::Day, now, spend, &budget),
                &budget,
                BudgetHolder::Key,
            )
            .map(|d| (d.level, d.limit_kind))
        };
        assert_eq!(level(599, 0.1), None);
        assert_eq!(
            level(600, 0.1),
            Some((DegradeLevel::FewerModels, "tokens".to_string()))
        );
        // The limit nearest to being spent decides: the cost here.
        assert_eq!(
            level(100, 0.85),
            Some((DegradeLevel::CheapestModel, "cost".to_string()))
        );
        // A budget that refuses never degrades, however near its limit.
        let refusing = Budget {
            on_limit: None,
            degrade_at: None,
            ..budget
        };
        let spend = Spend {
            cost: 0.99,
            tokens: 999,
            calls: 1,
        };
        assert_eq!(
            Degraded::of(
                &WindowSpend::new(Period::Day, now, spend, &refusing),
                &refusing,
                BudgetHolder::Key
            ),
            None
        );
        assert!(
            Budget {
                degrade_at: Some(0.5),
                ..refusing
            }
            .validate()
            .is_err()
        );
        assert!(
            Budget {
                degrade_at: Some(1.0),
                ..budget
            }
            .validate()
            .is_err()
        );
        assert!(budget.validate().is_ok());
    }
}
