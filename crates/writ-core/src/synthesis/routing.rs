//! Adaptive routing (`WRIT_ROUTING=adaptive`, `options.fanout.routing`): which of a code file's
//! candidate models are asked first, learned from writ's own outcomes in the audit log.
//!
//! The label is what production says of a candidate, not a benchmark's: whether it passed the
//! checks of its file (the caller's tests, else the generated checks). A candidate of a file
//! that ran no checks says nothing and is not counted, so routing never learns from the
//! arbiter's taste. Outcomes are read from the store for each batch, so every replica routes
//! alike, and only each model's newest outcomes count (a window), so a model whose quality
//! drops is noticed within that many files.
//!
//! Each model's pass rate for the file's language and kind (created or updated) is a Beta
//! posterior; a Thompson sample of it orders the models (by cost per passing candidate when
//! every model's cost is known), and models are asked in that order until the chance that at
//! least one passes reaches the target. A model with too little evidence is always asked (it is
//! being learned), and any other model is asked anyway with a small probability (the
//! exploration floor), so a model that improved is noticed. The models not asked first are
//! asked when the first ones fail their checks; without checks nothing would tell, so they are
//! skipped, and the fallback model still answers when no candidate is usable.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::audit::{CandidateRecord, FileKind, Operation, OperationKind};
use crate::model::ErrorClass;

/// Whether a batch's candidate models are routed (`WRIT_ROUTING`, `options.fanout.routing`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Every candidate model is asked (`options.fanout.first_round` aside).
    #[default]
    Off,
    /// The models to ask first are chosen from recorded outcomes.
    Adaptive,
}

impl Routing {
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "off" => Some(Routing::Off),
            "adaptive" => Some(Routing::Adaptive),
            _ => None,
        }
    }
}

/// How adaptive routing decides (`WRIT_ROUTING_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutingPolicy {
    /// The server's default for batches that do not say (`WRIT_ROUTING`).
    pub mode: Routing,
    /// The chance that at least one first-round model passes that routing aims for
    /// (`WRIT_ROUTING_TARGET`).
    pub target: f64,
    /// Outcomes a model needs before it may be left out (`WRIT_ROUTING_MIN_EVIDENCE`).
    pub min_evidence: u32,
    /// The chance that a model routing would leave out is asked anyway (`WRIT_ROUTING_EXPLORE`).
    pub explore: f64,
    /// Each model's newest outcomes counted, per language and kind (`WRIT_ROUTING_WINDOW`).
    pub window: usize,
}

impl Default for RoutingPolicy {
    fn default() -> Self {
        RoutingPolicy {
            mode: Routing::Off,
            target: 0.8,
            min_evidence: 8,
            explore: 0.05,
            window: 40,
        }
    }
}

/// Most operations read from the store for one batch's routing (newest first).
pub const MAX_OPERATIONS: u32 = 2_000;
/// How far back routing looks.
pub const LOOKBACK_DAYS: i64 = 30;

/// What a file's routing is keyed on: its language (by extension) and whether it was created or
/// changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cell {
    pub language: String,
    pub kind: OperationKind,
}

impl Cell {
    pub fn of(path: &str, exists: bool) -> Self {
        Cell {
            language: writ_checks::Language::from_path(path)
                .name()
                .to_ascii_lowercase(),
            kind: if exists {
                OperationKind::Updated
            } else {
                OperationKind::Created
            },
        }
    }
}

/// One model's outcomes in one scope, newest first, at most the window's.
#[derive(Debug, Clone, Default)]
struct Trials {
    passed: Vec<bool>,
    cost: Vec<Option<f64>>,
}

/// The recorded outcomes routing decides from.
#[derive(Debug, Clone, Default)]
pub struct Outcomes {
    window: usize,
    exact: HashMap<(String, Cell), Trials>,
    by_language: HashMap<(String, String), Trials>,
    overall: HashMap<String, Trials>,
    /// Every recorded candidate's cost, checked or not: the sum and how many, per model.
    costs: HashMap<String, (f64, u32)>,
}

/// Where a model's evidence came from: its file's language and kind, else the language, else
/// every file, whichever first has enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    LanguageAndKind,
    Language,
    All,
}

/// A model's evidence: outcomes counted, how many passed, and the mean cost of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evidence {
    pub trials: u32,
    pub passed: u32,
    pub mean_cost: Option<f64>,
}

impl Outcomes {
    /// The outcomes of `operations` (newest first), each model's newest `window` per scope.
    pub fn from_operations(operations: &[Operation], window: usize) -> Self {
        let mut out = Outcomes {
            window: window.max(1),
            ..Outcomes::default()
        };
        for op in operations {
            for (model, cell, passed, cost) in labels(op) {
                out.add(model, &cell, passed, cost);
            }
            for c in &op.candidates {
                if let Some(cost) = c.cost {
                    let sum = out.costs.entry(c.model.clone()).or_default();
                    sum.0 += cost;
                    sum.1 += 1;
                }
            }
        }
        out
    }

    fn add(&mut self, model: &str, cell: &Cell, passed: bool, cost: Option<f64>) {
        let window = self.window;
        let push = |t: &mut Trials| {
            if t.passed.len() < window {
                t.passed.push(passed);
                t.cost.push(cost);
            }
        };
        push(
            self.exact
                .entry((model.to_string(), cell.clone()))
                .or_default(),
        );
        push(
            self.by_language
                .entry((model.to_string(), cell.language.clone()))
                .or_default(),
        );
        push(self.overall.entry(model.to_string()).or_default());
    }

    /// The mean cost of `model`'s recorded candidates (of any file), when some had a cost.
    pub fn mean_cost(&self, model: &str) -> Option<f64> {
        self.costs
            .get(model)
            .filter(|(_, n)| *n > 0)
            .map(|(sum, n)| sum / f64::from(*n))
    }

    /// `model`'s evidence for `cell`, from the narrowest scope with at least `enough` outcomes
    /// (else the widest with any).
    pub fn evidence(&self, model: &str, cell: &Cell, enough: u32) -> (Evidence, Scope) {
        let scopes = [
            (
                self.exact.get(&(model.to_string(), cell.clone())),
                Scope::LanguageAndKind,
            ),
            (
                self.by_language
                    .get(&(model.to_string(), cell.language.clone())),
                Scope::Language,
            ),
            (self.overall.get(model), Scope::All),
        ];
        let mut widest = (Evidence::default(), Scope::LanguageAndKind);
        for (trials, scope) in scopes {
            let Some(t) = trials else { continue };
            let e = summarise(t);
            if e.trials >= enough {
                return (e, scope);
            }
            if e.trials > widest.0.trials {
                widest = (e, scope);
            }
        }
        widest
    }
}

/// What the candidates of one operation say of their models: for a checked code file, each
/// first answer's model, the file's cell, whether it passed, and its cost.
pub fn labels(op: &Operation) -> impl Iterator<Item = (&str, Cell, bool, Option<f64>)> {
    let kind = match op.operation {
        OperationKind::Created => OperationKind::Created,
        OperationKind::Updated | OperationKind::Unchanged => OperationKind::Updated,
        // A failed or proposed file's candidates were still checked; whether the file existed
        // shows in the answers' form, or in what it held before.
        _ if op.candidates.iter().any(|c| c.answer_form.is_some()) => OperationKind::Updated,
        _ if op.previous_sha256.is_some() => OperationKind::Updated,
        _ => OperationKind::Created,
    };
    let cell = Cell {
        language: writ_checks::Language::from_path(&op.filename)
            .name()
            .to_ascii_lowercase(),
        kind,
    };
    let checked = op.kind == FileKind::Code
        && op
            .candidates
            .iter()
            .any(|c| c.validation.is_some() || c.generated_checks.is_some());
    let candidates = if checked { &op.candidates[..] } else { &[] };
    candidates.iter().filter_map(move |c| {
        label(c).map(|passed| (c.model.as_str(), cell.clone(), passed, c.cost))
    })
}

fn summarise(t: &Trials) -> Evidence {
    let costs: Vec<f64> = t.cost.iter().flatten().copied().collect();
    Evidence {
        trials: t.passed.len() as u32,
        passed: t.passed.iter().filter(|p| **p).count() as u32,
        mean_cost: (!costs.is_empty() && costs.len() == t.cost.len())
            .then(|| costs.iter().sum::<f64>() / costs.len() as f64),
    }
}

/// What a candidate of a checked file says of its model: passed its checks or not; `None` when
/// it says nothing (stopped before it answered, or a later round's repair).
fn label(c: &CandidateRecord) -> Option<bool> {
    if c.round.is_some_and(|r| r > 0) || c.error_class == Some(ErrorClass::Cancelled) {
        return None;
    }
    if let Some(v) = &c.validation {
        return Some(v.passed);
    }
    if let Some(g) = &c.generated_checks {
        return Some(g.failed.is_empty() && g.passed > 0);
    }
    // Checked file, no result for this candidate: not usable (no code, cut, refused) is a
    // failure; a usable one the checks never ran on says nothing.
    let usable = c.ok && c.parsed != Some(false) && c.error_class.is_none();
    (!usable).then_some(false)
}

/// Why a model was not asked with the first round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedModel {
    pub model: String,
    /// `later`: asked only if the first round fails its checks; `skipped`: not asked at all
    /// (the batch has no checks to tell a failure).
    pub until: SkipUntil,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkipUntil {
    Later,
    Skipped,
}

/// One model's figures as routing saw them for the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelScore {
    pub model: String,
    pub scope: Scope,
    /// Outcomes counted (candidates of checked files) and how many passed.
    pub trials: u32,
    pub passed: u32,
    /// The posterior mean pass rate, (passed + 1) / (trials + 2).
    pub rate: f64,
    /// This file's Thompson sample of the pass rate, which ordered the models.
    pub sampled: f64,
    /// Mean cost of one of its candidates, when every one counted had a cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_call: Option<f64>,
}

/// A code file's routing: who was asked first, who only if they fail, who not at all, and why
/// (`results[i].routing`, and the operation's `detail.routing`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoutingDecision {
    pub asked: Vec<String>,
    /// Asked only when no first-round candidate passes the file's checks.
    pub later: Vec<String>,
    pub skipped: Vec<SkippedModel>,
    /// Every model's figures, in the order routing ranked them.
    pub scores: Vec<ModelScore>,
}

impl RoutingDecision {
    /// The models this file's operation lists as left out (for `/stats/models`).
    pub fn in_detail(detail: Option<&serde_json::Value>) -> Option<RoutingDecision> {
        detail
            .and_then(|d| d.get("routing"))
            .and_then(|r| serde_json::from_value(r.clone()).ok())
    }
}

/// What tells routing that a first-round candidate passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileChecks {
    /// Nothing: the models left out are not asked at all.
    None,
    /// The generated checks, which pass a candidate when it agrees with another: at least two
    /// models are asked first.
    Generated,
    /// The caller's tests.
    Callers,
}

/// The routing of one code file over `models` (the configured order breaks ties). `uniform`
/// draws from [0, 1).
pub fn plan(
    models: &[String],
    cell: &Cell,
    outcomes: &Outcomes,
    policy: &RoutingPolicy,
    checks: FileChecks,
    uniform: &mut dyn FnMut() -> f64,
) -> RoutingDecision {
    let checked = checks != FileChecks::None;
    let mut scores: Vec<(usize, ModelScore)> = models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (e, scope) = outcomes.evidence(m, cell, policy.min_evidence);
            let failed = e.trials - e.passed;
            let score = ModelScore {
                model: m.clone(),
                scope,
                trials: e.trials,
                passed: e.passed,
                rate: (e.passed as f64 + 1.0) / (e.trials as f64 + 2.0),
                sampled: beta_sample(e.passed + 1, failed + 1, uniform),
                cost_per_call: e.mean_cost,
            };
            (i, score)
        })
        .collect();
    let by_cost = scores
        .iter()
        .all(|(_, s)| s.cost_per_call.is_some_and(|c| c > 0.0));
    let key = |s: &ModelScore| {
        if by_cost {
            // Cost per passing candidate: lower is better.
            s.cost_per_call.unwrap_or(f64::MAX) / s.sampled.max(1e-6)
        } else {
            -s.sampled
        }
    };
    scores.sort_by(|(ia, a), (ib, b)| key(a).total_cmp(&key(b)).then(ia.cmp(ib)));
    let scores: Vec<ModelScore> = scores.into_iter().map(|(_, s)| s).collect();

    let mut asked = Vec::new();
    let mut reasons: Vec<(String, String)> = Vec::new();
    let mut none_pass = 1.0;
    let mut confident = false;
    for s in &scores {
        let proven = s.trials >= policy.min_evidence;
        if !proven {
            asked.push(s.model.clone());
            continue;
        }
        if confident {
            if uniform() < policy.explore {
                asked.push(s.model.clone());
            } else {
                reasons.push((
                    s.model.clone(),
                    format!(
                        "the models asked first pass with a chance of {:.0}% (target {:.0}%); this one passed the checks on {} of its last {} {}",
                        100.0 * (1.0 - none_pass),
                        100.0 * policy.target,
                        s.passed,
                        s.trials,
                        scope_words(s.scope, cell),
                    ),
                ));
            }
            continue;
        }
        asked.push(s.model.clone());
        none_pass *= 1.0 - s.rate;
        confident = 1.0 - none_pass >= policy.target;
    }
    let at_least = if checks == FileChecks::Generated {
        2
    } else {
        1
    };
    for s in &scores {
        if asked.len() >= at_least {
            break;
        }
        if !asked.contains(&s.model) {
            asked.push(s.model.clone());
            reasons.retain(|(m, _)| m != &s.model);
        }
    }
    let (later, skipped) = reasons.into_iter().fold(
        (Vec::new(), Vec::new()),
        |(mut later, mut skipped), (model, reason)| {
            let until = if checked {
                later.push(model.clone());
                SkipUntil::Later
            } else {
                SkipUntil::Skipped
            };
            skipped.push(SkippedModel {
                model,
                until,
                reason,
            });
            (later, skipped)
        },
    );
    // The configured order among those asked and those waiting, so the answer's candidates
    // read as configured.
    let in_order = |among: &[String]| -> Vec<String> {
        models
            .iter()
            .filter(|m| among.contains(m))
            .cloned()
            .collect()
    };
    let asked = in_order(&asked);
    let later = in_order(&later);
    RoutingDecision {
        asked,
        later,
        skipped,
        scores,
    }
}

fn scope_words(scope: Scope, cell: &Cell) -> String {
    let kind = match cell.kind {
        OperationKind::Updated => "changed",
        _ => "new",
    };
    match scope {
        Scope::LanguageAndKind => format!("{kind} {} files", cell.language),
        Scope::Language => format!("{} files", cell.language),
        Scope::All => "files".to_string(),
    }
}

/// A draw from Beta(a, b) for whole a, b ≥ 1: the a-th smallest of a + b − 1 uniform draws.
/// Exact, and small enough here (a + b is at most the window plus two).
fn beta_sample(a: u32, b: u32, uniform: &mut dyn FnMut() -> f64) -> f64 {
    let n = (a + b - 1) as usize;
    let mut draws: Vec<f64> = (0..n).map(|_| uniform()).collect();
    draws.sort_by(f64::total_cmp);
    draws[(a - 1) as usize]
}

#[cfg(test)]
mod tests;
