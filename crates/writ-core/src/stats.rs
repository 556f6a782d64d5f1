//! Which models earn their cost: per model (and, if asked, per language of the file), how many
//! candidates it gave, how many were viable, chosen and passed the tests, what they cost and how
//! long they took — counted from the audit log's operations (`GET /stats/models`, `writ stats`).
//!
//! A candidate is a model's answer for one file (repair rounds included); *viable* when it was
//! extracted and passed writ's checks; *chosen* when the selection picked it (the operation's
//! `chosen_model`: the file was written with it, or proposed for review); *passed validation* when the caller's tests (or generated ones)
//! passed on it. Failed operations count too: their candidates were paid for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::{CallRecord, Operation};
use crate::synthesis::routing::RoutingDecision;

/// One model's figures (for one language, when grouped by language).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelStats {
    pub model: String,
    /// The files' language (by extension), when grouped by language.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    pub candidates: u64,
    pub viable: u64,
    pub chosen: u64,
    /// Candidates the tests ran on.
    pub validated: u64,
    pub passed_validation: u64,
    /// Files it made that a reviewer applied whole (`options.review`), counted when the last
    /// of their hunks was decided.
    pub applied: u64,
    /// Files it made of which a reviewer applied some hunks and rejected the others.
    pub partially_applied: u64,
    /// Files it made that a reviewer rejected whole.
    pub rejected: u64,
    /// Calls that were not candidates: as the arbiter, a test writer, or asked about
    /// distinguishing inputs. Their cost and tokens are in the sums below.
    pub other_calls: u64,
    /// The provider's reported cost, summed (credits; OpenRouter: USD).
    pub cost: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Of the candidates' call latencies.
    pub latency_p50_ms: u64,
    pub latency_p95_ms: u64,
    /// What adaptive routing learns from (`WRIT_ROUTING`): its first answers to files that ran
    /// checks, and how many of them passed.
    pub routing_outcomes: u64,
    pub routing_passed: u64,
    /// Files whose routing asked it only after the first round failed (`later`), and files
    /// whose routing never asked it.
    pub routed_later: u64,
    pub routed_out: u64,
}

#[derive(Default)]
struct Tally {
    stats: Option<ModelStats>,
    latencies: Vec<u64>,
}

/// The figures of every model that gave a candidate in `operations`, most candidates first.
pub fn model_stats(operations: &[Operation], by_language: bool) -> Vec<ModelStats> {
    let mut tallies: BTreeMap<(String, Option<String>), Tally> = BTreeMap::new();
    for op in operations {
        let language = by_language.then(|| {
            writ_checks::Language::from_path(&op.filename)
                .name()
                .to_ascii_lowercase()
        });
        for c in &op.candidates {
            let tally = tally_of(&mut tallies, &c.model, &language);
            tally.latencies.push(c.latency_ms);
            let Some(s) = tally.stats.as_mut() else {
                continue;
            };
            s.candidates += 1;
            if c.ok && c.parsed != Some(false) && c.error_class.is_none() {
                s.viable += 1;
            }
            if let Some(v) = &c.validation {
                s.validated += 1;
                if v.passed {
                    s.passed_validation += 1;
                }
            }
            s.cost += c.cost.unwrap_or(0.0);
            s.prompt_tokens += c.prompt_tokens.unwrap_or(0);
            s.completion_tokens += c.completion_tokens.unwrap_or(0);
            s.cached_tokens += c.cached_tokens.unwrap_or(0);
        }
        for c in CallRecord::in_detail(op.detail.as_ref()) {
            let Some(s) = tally_of(&mut tallies, &c.model, &language).stats.as_mut() else {
                continue;
            };
            s.other_calls += 1;
            s.cost += c.cost.unwrap_or(0.0);
            s.prompt_tokens += c.prompt_tokens.unwrap_or(0);
            s.completion_tokens += c.completion_tokens.unwrap_or(0);
            s.cached_tokens += c.cached_tokens.unwrap_or(0);
        }
        for (model, _, passed, _) in crate::synthesis::routing::labels(op) {
            if let Some(s) = tally_of(&mut tallies, model, &language).stats.as_mut() {
                s.routing_outcomes += 1;
                s.routing_passed += u64::from(passed);
            }
        }
        if let Some(routing) = RoutingDecision::in_detail(op.detail.as_ref()) {
            for skipped in &routing.skipped {
                let asked = op.candidates.iter().any(|c| c.model == skipped.model);
                if let Some(s) = tally_of(&mut tallies, &skipped.model, &language)
                    .stats
                    .as_mut()
                {
                    if asked {
                        s.routed_later += 1;
                    } else {
                        s.routed_out += 1;
                    }
                }
            }
        }
        let review = op.detail.as_ref().and_then(|d| d.get("review"));
        if let Some(review) = review.filter(|r| r.get("proposal").is_some()) {
            // A reviewer's decision on content chosen (and counted) when it was proposed.
            let Some(model) = &op.chosen_model else {
                continue;
            };
            let outcome = review.get("outcome").and_then(|o| o.as_str());
            if let Some(s) = tally_of(&mut tallies, model, &language).stats.as_mut() {
                match outcome {
                    Some("applied") => s.applied += 1,
                    Some("partially_applied") => s.partially_applied += 1,
                    Some("rejected") => s.rejected += 1,
                    _ => {}
                }
            }
            continue;
        }
        if let Some(model) = &op.chosen_model
            && let Some(tally) = tallies.get_mut(&(model.clone(), language.clone()))
            && let Some(s) = tally.stats.as_mut()
        {
            s.chosen += 1;
        }
    }
    let mut out: Vec<ModelStats> = tallies
        .into_values()
        .filter_map(|mut t| {
            let mut s = t.stats?;
            t.latencies.sort_unstable();
            s.latency_p50_ms = percentile(&t.latencies, 50);
            s.latency_p95_ms = percentile(&t.latencies, 95);
            Some(s)
        })
        .collect();
    out.sort_by(|a, b| {
        b.candidates
            .cmp(&a.candidates)
            .then_with(|| a.model.cmp(&b.model))
            .then_with(|| a.language.cmp(&b.language))
    });
    out
}

/// `model`'s tally (for `language`), made empty on first use.
fn tally_of<'t>(
    tallies: &'t mut BTreeMap<(String, Option<String>), Tally>,
    model: &str,
    language: &Option<String>,
) -> &'t mut Tally {
    let tally = tallies
        .entry((model.to_string(), language.clone()))
        .or_default();
    tally.stats.get_or_insert_with(|| ModelStats {
        model: model.to_string(),
        language: language.clone(),
        candidates: 0,
        viable: 0,
        chosen: 0,
        validated: 0,
        passed_validation: 0,
        applied: 0,
        partially_applied: 0,
        rejected: 0,
        other_calls: 0,
        cost: 0.0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        latency_p50_ms: 0,
        latency_p95_ms: 0,
        routing_outcomes: 0,
        routing_passed: 0,
        routed_later: 0,
        routed_out: 0,
    });
    tally
}

/// The nearest-rank percentile of sorted `values` (0 when there are none).
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use uuid::Uuid;

    use super::*;
    use crate::audit::{
        CandidateRecord, FileKind, OperationKind, OperationStatus, ValidationRecord,
    };

    fn candidate(
        model: &str,
        ok: bool,
        latency_ms: u64,
        cost: f64,
        passed: Option<bool>,
    ) -> CandidateRecord {
        CandidateRecord {
            model: model.into(),
            ok,
            parsed: Some(ok),
            latency_ms,
            cost: Some(cost),
            prompt_tokens: Some(100),
            completion_tokens: Some(10),
            validation: passed.map(|passed| ValidationRecord {
                passed,
                command: "pytest".into(),
                exit_code: Some(if passed { 0 } else { 1 }),
                timed_out: false,
                duration_ms: 5,
                output_tail: String::new(),
                diagnostics: None,
            }),
            ..CandidateRecord::default()
        }
    }

    fn op(file: &str, chosen: Option<&str>, candidates: Vec<CandidateRecord>) -> Operation {
        Operation {
            id: Uuid::now_v7(),
            request_id: Uuid::now_v7(),
            created_at: Utc::now(),
            finished_at: None,
            filename: file.into(),
            kind: FileKind::Code,
            operation: OperationKind::Created,
            status: OperationStatus::Succeeded,
            chosen_model: chosen.map(str::to_owned),
            selection: None,
            arbiter_reason: None,
            candidates,
            previous_sha256: None,
            sha256: None,
            bytes: None,
            error: None,
            duration_ms: None,
            detail: None,
            workspace: "default".into(),
        }
    }

    #[test]
    fn each_model_counts_its_candidates_viable_chosen_validated_cost_and_latency() {
        let ops = vec![
            op(
                "a.py",
                Some("m1"),
                vec![
                    candidate("m1", true, 100, 0.01, Some(true)),
                    candidate("m2", false, 900, 0.02, None),
                ],
            ),
            op(
                "b.rs",
                Some("m2"),
                vec![
                    candidate("m1", true, 300, 0.01, Some(false)),
                    candidate("m2", true, 500, 0.02, Some(true)),
                ],
            ),
            op("c.py", None, vec![candidate("m1", true, 200, 0.01, None)]),
        ];

        let stats = model_stats(&ops, false);

        assert_eq!(stats.len(), 2);
        let m1 = &stats[0];
        assert_eq!(
            (m1.model.as_str(), m1.candidates, m1.viable, m1.chosen),
            ("m1", 3, 3, 1)
        );
        assert_eq!((m1.validated, m1.passed_validation), (2, 1));
        assert!((m1.cost - 0.03).abs() < 1e-9);
        assert_eq!((m1.prompt_tokens, m1.completion_tokens), (300, 30));
        assert_eq!((m1.latency_p50_ms, m1.latency_p95_ms), (200, 300));
        let m2 = &stats[1];
        assert_eq!((m2.candidates, m2.viable, m2.chosen), (2, 1, 1));
        assert_eq!((m2.latency_p50_ms, m2.latency_p95_ms), (500, 900));
    }

    #[test]
    fn calls_that_were_not_candidates_count_in_their_models_cost_and_tokens() {
        let mut with_arbiter = op(
            "a.py",
            Some("m1"),
            vec![
                candidate("m1", true, 100, 0.01, None),
                candidate("m2", true, 100, 0.02, None),
            ],
        );
        let call = |role, model: &str, cost| CallRecord {
            role,
            model: model.into(),
            latency_ms: 40,
            prompt_tokens: Some(1_000),
            completion_tokens: Some(20),
            cached_tokens: Some(800),
            cost: Some(cost),
            error: None,
        };
        with_arbiter.detail = Some(serde_json::json!({
            "calls": [
                call(crate::audit::CallRole::Arbiter, "judge", 0.5),
                call(crate::audit::CallRole::TestWriter, "m1", 0.25),
            ]
        }));

        let stats = model_stats(&[with_arbiter], false);

        let judge = stats
            .iter()
            .find(|s| s.model == "judge")
            .expect("arbiter row");
        assert_eq!((judge.candidates, judge.other_calls), (0, 1));
        assert!((judge.cost - 0.5).abs() < 1e-9);
        assert_eq!((judge.prompt_tokens, judge.cached_tokens), (1_000, 800));
        let m1 = stats.iter().find(|s| s.model == "m1").expect("m1 row");
        assert_eq!((m1.candidates, m1.other_calls, m1.chosen), (1, 1, 1));
        assert!((m1.cost - 0.26).abs() < 1e-9);
        assert_eq!(m1.prompt_tokens, 1_100);
        // Latency percentiles stay those of candidates: a verdict is not an answer.
        assert_eq!(m1.latency_p50_ms, 100);
    }

    #[test]
    fn reviewed_files_count_once_each_under_the_model_that_made_them() {
        let proposal = op(
            "a.py",
            Some("m1"),
            vec![candidate("m1", true, 100, 0.01, None)],
        );
        let decided = |outcome: Option<&str>, operation| {
            let mut d = op("a.py", Some("m1"), Vec::new());
            d.operation = operation;
            let mut review = serde_json::json!({"change_id": "c", "hunks": ["h1"], "of": 2, "proposal": proposal.id});
            if let Some(outcome) = outcome {
                review["outcome"] = outcome.into();
            }
            d.detail = Some(serde_json::json!({ "review": review }));
            d
        };
        let ops = vec![
            proposal.clone(),
            // A first part applied: nothing counted until every hunk is decided.
            decided(None, OperationKind::Updated),
            decided(Some("partially_applied"), OperationKind::Rejected),
            decided(Some("applied"), OperationKind::Created),
            decided(Some("rejected"), OperationKind::Rejected),
        ];

        let stats = model_stats(&ops, false);

        let m1 = &stats[0];
        assert_eq!(
            (m1.candidates, m1.chosen),
            (1, 1),
            "a decision is not a second choice"
        );
        assert_eq!((m1.applied, m1.partially_applied, m1.rejected), (1, 1, 1));
    }

    #[test]
    fn grouped_by_language_a_model_has_a_row_per_language() {
        let ops = vec![
            op(
                "a.py",
                Some("m1"),
                vec![candidate("m1", true, 100, 0.0, None)],
            ),
            op(
                "b.rs",
                Some("m1"),
                vec![candidate("m1", true, 100, 0.0, None)],
            ),
            op("c.py", None, vec![candidate("m1", true, 100, 0.0, None)]),
        ];

        let stats = model_stats(&ops, true);

        let rows: Vec<(Option<&str>, u64, u64)> = stats
            .iter()
            .map(|s| (s.language.as_deref(), s.candidates, s.chosen))
            .collect();
        assert_eq!(rows, [(Some("python"), 2, 1), (Some("rust"), 1, 1)]);
    }
}
