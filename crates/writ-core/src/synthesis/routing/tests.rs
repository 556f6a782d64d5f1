use chrono::Utc;
use uuid::Uuid;

use super::*;
use crate::audit::{
    CandidateRecord, FileKind, GeneratedCheckRecord, Operation, OperationKind, OperationStatus,
    ValidationRecord,
};

/// A seeded uniform source (SplitMix64), so every decision below is reproducible.
fn seeded(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn tested(model: &str, passed: bool) -> CandidateRecord {
    CandidateRecord {
        model: model.into(),
        ok: true,
        parsed: Some(true),
        cost: Some(0.01),
        validation: Some(ValidationRecord {
            passed,
            command: "pytest".into(),
            exit_code: Some(i32::from(!passed)),
            timed_out: false,
            duration_ms: 5,
            output_tail: String::new(),
            diagnostics: None,
        }),
        ..CandidateRecord::default()
    }
}

fn op(file: &str, candidates: Vec<CandidateRecord>) -> Operation {
    Operation {
        id: Uuid::now_v7(),
        request_id: Uuid::now_v7(),
        created_at: Utc::now(),
        finished_at: None,
        filename: file.into(),
        kind: FileKind::Code,
        operation: OperationKind::Created,
        status: OperationStatus::Succeeded,
        chosen_model: None,
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

/// `n` checked files of `file`'s kind on which each model passed at its own rate, the passes
/// spread evenly.
fn history(file: &str, n: usize, rates: &[(&str, f64)]) -> Vec<Operation> {
    (0..n)
        .map(|i| {
            op(
                file,
                rates
                    .iter()
                    .map(|(m, rate)| {
                        let passed = ((i as f64 + 0.5) * rate).floor()
                            < (((i + 1) as f64 + 0.5) * rate).floor()
                            || *rate >= 1.0;
                        tested(m, passed)
                    })
                    .collect(),
            )
        })
        .collect()
}

fn models(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn policy() -> RoutingPolicy {
    RoutingPolicy {
        mode: Routing::Adaptive,
        explore: 0.0,
        target: 0.85,
        ..RoutingPolicy::default()
    }
}

#[test]
fn with_no_outcomes_every_model_is_asked_since_each_is_being_learned() {
    let d = plan(
        &models(&["a", "b", "c"]),
        &Cell::of("x.py", false),
        &Outcomes::default(),
        &policy(),
        FileChecks::Callers,
        &mut seeded(1),
    );
    assert_eq!(d.asked, models(&["a", "b", "c"]));
    assert!(d.later.is_empty() && d.skipped.is_empty());
    assert!(d.scores.iter().all(|s| s.trials == 0 && s.rate == 0.5));
}

#[test]
fn a_model_that_passes_reliably_is_asked_alone_and_the_others_wait_for_its_failure() {
    let ops = history(
        "x.py",
        30,
        &[("cheap", 0.3), ("strong", 0.97), ("middling", 0.5)],
    );
    let outcomes = Outcomes::from_operations(&ops, 40);
    let all = models(&["cheap", "strong", "middling"]);
    for seed in 0..20 {
        let d = plan(
            &all,
            &Cell::of("y.py", false),
            &outcomes,
            &policy(),
            FileChecks::Callers,
            &mut seeded(seed),
        );
        assert_eq!(d.asked, models(&["strong"]), "seed {seed}: {d:?}");
        assert_eq!(d.later.len(), 2);
        assert!(d.skipped.iter().all(|s| s.until == SkipUntil::Later));
        assert!(
            d.skipped[0].reason.contains("new python files"),
            "{}",
            d.skipped[0].reason
        );
    }
    // Without checks nothing would tell a failure: the others are not asked at all.
    let d = plan(
        &all,
        &Cell::of("y.py", false),
        &outcomes,
        &policy(),
        FileChecks::None,
        &mut seeded(3),
    );
    assert!(d.later.is_empty());
    assert_eq!(d.skipped.len(), 2);
    assert!(d.skipped.iter().all(|s| s.until == SkipUntil::Skipped));
}

#[test]
fn where_candidates_often_fail_more_models_are_asked() {
    let ops = history("x.py", 30, &[("a", 0.5), ("b", 0.45), ("c", 0.4)]);
    let outcomes = Outcomes::from_operations(&ops, 40);
    let d = plan(
        &models(&["a", "b", "c"]),
        &Cell::of("x.py", false),
        &outcomes,
        &policy(),
        FileChecks::Callers,
        &mut seeded(9),
    );
    // Three models at about 45% each reach 1 − 0.55³ ≈ 83% < 85%: all are asked.
    assert_eq!(d.asked.len(), 3, "{d:?}");
}

#[test]
fn each_language_is_routed_to_the_model_that_passes_in_it() {
    let mut ops = history("p.py", 20, &[("py", 0.95), ("js", 0.3)]);
    ops.extend(history("p.js", 20, &[("py", 0.3), ("js", 0.95)]));
    let outcomes = Outcomes::from_operations(&ops, 40);
    let all = models(&["py", "js"]);
    let py = plan(
        &all,
        &Cell::of("q.py", false),
        &outcomes,
        &policy(),
        FileChecks::Callers,
        &mut seeded(5),
    );
    let js = plan(
        &all,
        &Cell::of("q.js", false),
        &outcomes,
        &policy(),
        FileChecks::Callers,
        &mut seeded(5),
    );
    assert_eq!((py.asked, js.asked), (models(&["py"]), models(&["js"])));
    assert_eq!(py.scores[0].scope, Scope::LanguageAndKind);
}

#[test]
fn a_model_whose_quality_drops_is_no_longer_trusted_alone_once_the_window_holds_the_drop() {
    // Newest first: the newest 25 outcomes failed, the 40 before passed.
    let mut ops = history("x.py", 25, &[("star", 0.0), ("backup", 0.8)]);
    ops.extend(history("x.py", 40, &[("star", 1.0), ("backup", 0.8)]));
    let outcomes = Outcomes::from_operations(&ops, 40);
    let d = plan(
        &models(&["star", "backup"]),
        &Cell::of("x.py", false),
        &outcomes,
        &policy(),
        FileChecks::Callers,
        &mut seeded(2),
    );
    let star = d.scores.iter().find(|s| s.model == "star").unwrap();
    assert_eq!((star.trials, star.passed), (40, 15));
    assert!(d.asked.contains(&"backup".to_string()), "{d:?}");
}

#[test]
fn a_model_left_out_is_still_asked_at_the_exploration_floor() {
    let ops = history("x.py", 30, &[("strong", 1.0), ("other", 0.2)]);
    let outcomes = Outcomes::from_operations(&ops, 40);
    let all = models(&["strong", "other"]);
    let explored = |explore: f64| {
        let mut uniform = seeded(11);
        (0..1000)
            .filter(|_| {
                plan(
                    &all,
                    &Cell::of("x.py", false),
                    &outcomes,
                    &RoutingPolicy {
                        explore,
                        ..policy()
                    },
                    FileChecks::Callers,
                    &mut uniform,
                )
                .asked
                .contains(&"other".to_string())
            })
            .count()
    };
    assert_eq!(explored(0.0), 0);
    let at_ten_percent = explored(0.1);
    assert!((60..=140).contains(&at_ten_percent), "{at_ten_percent}");
}

#[test]
fn with_every_cost_known_the_cheaper_model_per_passing_candidate_goes_first() {
    let mut ops = history("x.py", 30, &[("pricey", 0.95), ("thrifty", 0.9)]);
    for o in &mut ops {
        for c in &mut o.candidates {
            c.cost = Some(if c.model == "pricey" { 0.5 } else { 0.01 });
        }
    }
    let outcomes = Outcomes::from_operations(&ops, 40);
    let d = plan(
        &models(&["pricey", "thrifty"]),
        &Cell::of("x.py", false),
        &outcomes,
        &policy(),
        FileChecks::Callers,
        &mut seeded(4),
    );
    assert_eq!(d.scores[0].model, "thrifty");
    assert_eq!(d.asked, models(&["thrifty"]), "{d:?}");
}

#[test]
fn only_first_answers_of_checked_files_count_and_cancelled_calls_say_nothing() {
    let unchecked = op(
        "a.py",
        vec![CandidateRecord {
            model: "m".into(),
            ok: true,
            ..CandidateRecord::default()
        }],
    );
    let cancelled = CandidateRecord {
        model: "m".into(),
        error_class: Some(ErrorClass::Cancelled),
        ..CandidateRecord::default()
    };
    let repair = CandidateRecord {
        round: Some(1),
        ..tested("m", true)
    };
    let no_code = CandidateRecord {
        model: "m".into(),
        ok: false,
        error_class: Some(ErrorClass::BadResponse),
        ..CandidateRecord::default()
    };
    let generated = CandidateRecord {
        model: "g".into(),
        generated_checks: Some(GeneratedCheckRecord {
            passed: 3,
            failed: vec![],
            group: 0,
            cluster: None,
            duration_ms: 1,
        }),
        ..CandidateRecord::default()
    };
    let never_run = CandidateRecord {
        model: "m".into(),
        ok: true,
        parsed: Some(true),
        ..CandidateRecord::default()
    };
    let ops = vec![
        unchecked,
        op(
            "b.py",
            vec![
                tested("m", false),
                cancelled,
                repair,
                no_code,
                generated,
                never_run,
            ],
        ),
    ];
    let outcomes = Outcomes::from_operations(&ops, 40);
    let cell = Cell::of("b.py", false);
    let (m, _) = outcomes.evidence("m", &cell, 1);
    assert_eq!((m.trials, m.passed), (2, 0));
    let (g, _) = outcomes.evidence("g", &cell, 1);
    assert_eq!((g.trials, g.passed), (1, 1));
}

#[test]
fn the_window_keeps_each_models_newest_outcomes() {
    let mut ops = history("x.py", 5, &[("m", 1.0)]);
    ops.extend(history("x.py", 50, &[("m", 0.0)]));
    let outcomes = Outcomes::from_operations(&ops, 10);
    let (e, _) = outcomes.evidence("m", &Cell::of("x.py", false), 1);
    assert_eq!((e.trials, e.passed), (10, 5));
}

#[test]
fn thin_evidence_for_the_files_kind_falls_back_to_the_language_then_every_file() {
    let ops = history("x.py", 12, &[("m", 1.0)]);
    let outcomes = Outcomes::from_operations(&ops, 40);
    let (_, scope) = outcomes.evidence("m", &Cell::of("y.py", true), 8);
    assert_eq!(scope, Scope::Language);
    let (e, scope) = outcomes.evidence("m", &Cell::of("y.rs", false), 8);
    assert_eq!((scope, e.trials), (Scope::All, 12));
}

#[test]
fn beta_samples_centre_on_the_posterior_mean() {
    let mut uniform = seeded(7);
    let n = 4000;
    let mean = (0..n).map(|_| beta_sample(9, 3, &mut uniform)).sum::<f64>() / n as f64;
    assert!((mean - 0.75).abs() < 0.02, "{mean}");
}

#[test]
fn with_only_generated_checks_two_models_are_asked_first_so_they_can_agree() {
    let ops = history(
        "x.py",
        30,
        &[("strong", 1.0), ("second", 0.5), ("third", 0.2)],
    );
    let outcomes = Outcomes::from_operations(&ops, 40);
    let d = plan(
        &models(&["strong", "second", "third"]),
        &Cell::of("x.py", false),
        &outcomes,
        &policy(),
        FileChecks::Generated,
        &mut seeded(8),
    );
    assert_eq!(d.asked.len(), 2, "{d:?}");
    assert!(d.asked.contains(&"strong".to_string()));
    assert_eq!(d.later.len(), 1);
}
