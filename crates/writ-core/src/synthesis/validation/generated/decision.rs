//! The decision: from every candidate's results on the generated tests and probe inputs, the
//! candidate written — by agreement on the tests, then by behaviour on the probes, then by the
//! arbiter shown the inputs on which tied clusters disagree, and last by the arbiter among the
//! tied candidates only.

use std::time::Instant;

use super::{Checked, Decision, MAX_DISTINGUISHING_INPUTS, writers::shared_task};
use crate::audit::{
    CallRecord, CallRole, CheckGroup, DistinguishingInput, GeneratedCheckRecord, GeneratedChecks,
    GeneratedChecksStatus, Selection, ShownOutput,
};
use crate::model::{ChatMessage, ChatRequest};
use crate::synthesis::progress::Event;
use crate::synthesis::prompt;
use crate::synthesis::selection::{Selector, Viable};
use crate::synthesis::stage::FileCx;
use crate::synthesis::validation::FileTrials;
use crate::synthesis::validation::agreement::{
    CheckResults, Group, any_output, best_supported, clusters, disagreements, rank, usable_tests,
};

/// What the decision reads: the file, its candidates and their results.
pub(super) struct Evidence<'e, 'a> {
    pub selector: &'e Selector<'a>,
    pub cx: FileCx<'a>,
    pub f: &'e FileTrials<'a>,
    /// The trial of each candidate that may be chosen: result row `c < among.len()` is
    /// `among[c]`; the rows after them are voters.
    pub among: &'e [usize],
    pub results: CheckResults,
    /// Each row's run, in milliseconds.
    pub durations: Vec<u64>,
}

impl Evidence<'_, '_> {
    fn model_of(&self, c: usize) -> String {
        self.f.trials[self.among[c]].model.clone()
    }

    fn file(&self) -> String {
        self.cx.file().path.to_string()
    }
}

/// The decision on `evidence`, with `summary` (the tests as written) completed; see the
/// module docs.
pub(super) async fn decide(evidence: Evidence<'_, '_>, mut summary: GeneratedChecks) -> Checked {
    let e = &evidence;
    let results = &e.results;
    let usable = usable_tests(results);
    for (t, id) in results.tests.iter().enumerate() {
        if !usable.contains(&t) {
            summary.discarded.push(format!(
                "{id}: fails on every candidate for a name or import error"
            ));
        }
    }
    summary.tests = usable.iter().map(|&t| results.tests[t].clone()).collect();
    summary.probes = results.probes.len();
    e.cx.sink.emit(Event::ChecksGenerated {
        file: e.file(),
        models: summary.writers.len(),
        tests: usable.len(),
        discarded: summary.discarded.len(),
    });
    let (groups, tied) = rank(results, e.among.len(), &usable);
    summary.groups = groups
        .iter()
        .map(|g| CheckGroup {
            models: g.members.iter().map(|&c| e.model_of(c)).collect(),
            tests_passed: g.tests_passed,
            score: g.score,
        })
        .collect();
    let mut records = records(e, &usable, &groups);
    let agreement = |computed: Option<usize>, tied: usize| Event::AgreementComputed {
        file: e.file(),
        groups: groups.len(),
        tied,
        clusters: computed,
    };
    if usable.is_empty() && !any_output(results, &tied) {
        e.cx.sink.emit(agreement(None, tied.len()));
        return Checked::undecided(
            summary,
            GeneratedChecksStatus::NoUsableTests,
            "no generated test or probe input could be used".into(),
        )
        .with_records(records);
    }
    let agreed = Agreement::of(results, &groups, tied, &usable);

    // One candidate left by the tests.
    if let [only] = agreed.tied.as_slice() {
        e.cx.sink.emit(agreement(None, 1));
        let decision = Decision {
            trial: e.among[*only],
            selection: Selection::Agreement,
            reason: Some(agreed.reason(&groups, usable.len())),
        };
        return Checked::decided(summary, decision, records);
    }

    // Behaviour among those that remain: the largest cluster of equal outputs.
    let tied = &agreed.tied;
    let found = clusters(results, tied);
    for (k, cluster) in found.iter().enumerate() {
        for &c in cluster {
            records[c].1.cluster = Some(k);
        }
    }
    e.cx.sink.emit(agreement(Some(found.len()), tied.len()));
    let outputs = any_output(results, tied);
    let top = found.first().map_or(0, Vec::len);
    let mut largest: Vec<&Vec<usize>> = found.iter().filter(|c| c.len() == top).collect();
    if outputs && largest.len() == 1 {
        let by_tests = agreed.agreed && !agreed.by_behaviour;
        let decision = Decision {
            trial: e.among[largest[0][0]],
            selection: if by_tests {
                Selection::Agreement
            } else {
                Selection::Behaviour
            },
            reason: Some(if by_tests {
                agreed.reason(&groups, usable.len())
            } else {
                format!(
                    "{} of {} tied candidates behave the same on {} probe input(s)",
                    top,
                    tied.len(),
                    results.probes.len()
                )
            }),
        };
        return Checked::decided(summary, decision, records);
    }

    // Clusters of equal size: the one whose outputs most other candidates share.
    if outputs && largest.len() > 1 {
        let everyone: Vec<usize> = (0..results.outcomes.len()).collect();
        let supported = best_supported(results, &largest, &everyone);
        if let [winner] = supported.as_slice() {
            let decision = Decision {
                trial: e.among[*winner],
                selection: Selection::Behaviour,
                reason: Some(format!(
                    "{} tied behaviour clusters; on the {} probe input(s), its outputs are shared by the most other candidates",
                    largest.len(),
                    results.probes.len()
                )),
            };
            return Checked::decided(summary, decision, records);
        }
        largest.retain(|c| supported.contains(&c[0]));
    }

    // Distinguishing inputs between the tied clusters, champion against challenger.
    let mut champion = largest.first().map_or(tied[0], |c| c[0]);
    if outputs {
        let (verdict, shown) = distinguish(e, &found, &largest, champion).await;
        summary.distinguishing = shown;
        match verdict {
            Ok(winner) => {
                let decision = Decision {
                    trial: e.among[winner],
                    selection: Selection::Distinguished,
                    reason: Some(
                        "the arbiter, shown the inputs on which the tied candidates disagree, chose the same outputs in both orders".into(),
                    ),
                };
                return Checked::decided(summary, decision, records);
            }
            Err(last) => champion = last,
        }
    }

    // No consistent verdict: the arbiter among the tied candidates only.
    let shown: Vec<usize> = if outputs {
        largest.iter().map(|c| c[0]).collect()
    } else {
        tied.clone()
    };
    let viable: Vec<Viable<'_>> = shown
        .iter()
        .map(|&c| Viable {
            model: e.f.trials[e.among[c]].model.as_str(),
            code: e.f.trials[e.among[c]].code.as_str(),
        })
        .collect();
    let chosen = e.selector.arbitrate(e.cx, &e.f.generated, &viable).await;
    let trial = e
        .among
        .iter()
        .copied()
        .find(|&t| e.f.trials[t].code.as_bytes() == chosen.content.bytes())
        .unwrap_or(e.among[champion]);
    let decision = Decision {
        trial,
        selection: Selection::AgreementArbiter,
        reason: chosen.reason,
    };
    Checked::decided(summary, decision, records)
}

/// Each eligible candidate's record: the tests it passed and failed, its group, its run.
fn records(
    e: &Evidence<'_, '_>,
    usable: &[usize],
    groups: &[Group],
) -> Vec<(usize, GeneratedCheckRecord)> {
    (0..e.among.len())
        .map(|c| {
            let passed = e.results.passed(c, usable);
            let record = GeneratedCheckRecord {
                passed: passed.len(),
                failed: usable
                    .iter()
                    .filter(|t| !passed.contains(t))
                    .map(|&t| e.results.tests[t].clone())
                    .collect(),
                group: groups
                    .iter()
                    .position(|g| g.members.contains(&c))
                    .unwrap_or(0),
                cluster: None,
                duration_ms: e.durations.get(c).copied().unwrap_or(0),
            };
            (e.among[c], record)
        })
        .collect()
}

/// What agreement on the tests left.
struct Agreement {
    /// One best group among several: the tests decided, and only its members remain.
    agreed: bool,
    /// The tests alone do not separate the best group from another one that passes the same
    /// tests with other outputs: its size — behaviour — did.
    by_behaviour: bool,
    /// The candidates that remain: the best group's, or those of every group sharing the best
    /// score and consensus.
    tied: Vec<usize>,
}

impl Agreement {
    fn of(results: &CheckResults, groups: &[Group], tied: Vec<usize>, usable: &[usize]) -> Self {
        let best = groups.first().map(|g| (g.score, g.consensus));
        let top_groups = groups
            .iter()
            .filter(|g| Some((g.score, g.consensus)) == best)
            .count();
        let agreed =
            top_groups == 1 && best.is_some_and(|(score, _)| score > 0) && groups.len() > 1;
        let by_behaviour = agreed
            && groups[1..].iter().any(|g| {
                results.passed(g.members[0], usable) == results.passed(groups[0].members[0], usable)
            });
        let tied = if agreed {
            groups[0].members.clone()
        } else {
            tied
        };
        Agreement {
            agreed,
            by_behaviour,
            tied,
        }
    }

    fn reason(&self, groups: &[Group], usable: usize) -> String {
        format!(
            "passes {} of {} generated tests with {} other candidate(s); best of {} group(s)",
            groups[0].tests_passed,
            usable,
            groups[0].members.len() - 1,
            groups.len()
        ) + if groups.get(1).is_some_and(|g| g.score == groups[0].score) {
            " (equal score with another group; the tests it passes are shared by more candidates)"
        } else {
            ""
        }
    }
}

/// The arbiter shown, for each challenger cluster in turn, the inputs on which it and the
/// champion (at first `champion`) disagree: `Ok(winner)` when it answered the same in both orders every time,
/// else `Err` with the champion so far; and what it was shown.
async fn distinguish(
    e: &Evidence<'_, '_>,
    found: &[Vec<usize>],
    largest: &[&Vec<usize>],
    mut champion: usize,
) -> (Result<usize, usize>, Vec<DistinguishingInput>) {
    let mut decided = false;
    let mut all_shown = Vec::new();
    for challenger in largest.iter().skip(1).map(|c| c[0]) {
        let inputs = disagreements(&e.results, champion, challenger, MAX_DISTINGUISHING_INPUTS);
        if inputs.is_empty() {
            continue;
        }
        let pair = [champion, challenger];
        let shown: Vec<DistinguishingInput> = inputs
            .iter()
            .map(|&p| DistinguishingInput {
                input: e.results.probes[p].clone(),
                outputs: pair
                    .iter()
                    .map(|&c| ShownOutput {
                        models: found
                            .iter()
                            .find(|cluster| cluster.contains(&c))
                            .map(|cluster| cluster.iter().map(|&m| e.model_of(m)).collect())
                            .unwrap_or_default(),
                        output: output_of(&e.results, c, p),
                    })
                    .collect(),
            })
            .collect();
        e.cx.sink.emit(Event::ArbiterAskedInputs {
            file: e.file(),
            inputs: shown.len(),
        });
        let verdict = ask_both_orders(e.selector, e.cx, e.f, &shown).await;
        all_shown.extend(shown);
        match verdict {
            Some(winner) => {
                champion = pair[winner];
                decided = true;
            }
            None => return (Err(champion), all_shown),
        }
    }
    let verdict = if decided { Ok(champion) } else { Err(champion) };
    (verdict, all_shown)
}

/// The arbiter asked which cluster's outputs the description calls for, in both orders; the
/// index in the pair it chose both times, or `None` when it did not (or could not answer).
async fn ask_both_orders(
    selector: &Selector<'_>,
    cx: FileCx<'_>,
    f: &FileTrials<'_>,
    shown: &[DistinguishingInput],
) -> Option<usize> {
    let arbiter = selector.arbiter_model(&f.generated);
    let ask = |flipped: bool| {
        let req = ChatRequest {
            model: arbiter.clone(),
            messages: distinguishing_messages(cx, f, shown, flipped),
            temperature: Some(0.0),
            max_tokens: Some(1_000),
            response_format: Some(prompt::verdict_schema(2)),
            urgent: cx.batch.resumed(),
            purpose: CallRole::Distinguishing.into(),
            ..ChatRequest::default()
        };
        selector.models.chat(req)
    };
    let started = Instant::now();
    let (straight, flipped) = futures::future::join(ask(false), ask(true)).await;
    cx.upstream().add(started.elapsed());
    for answer in [&straight, &flipped] {
        cx.upstream().called(CallRecord::of(
            CallRole::Distinguishing,
            &arbiter,
            started.elapsed(),
            answer,
        ));
    }
    let choice = |answer: Result<crate::model::ChatResponse, crate::model::ModelError>| {
        answer
            .ok()
            .and_then(|r| writ_checks::parse_verdict(&r.content, 2))
            .map(|v| v.choice - 1)
    };
    match (choice(straight), choice(flipped).map(|c| 1 - c)) {
        (Some(a), Some(b)) if a == b => Some(a),
        _ => None,
    }
}

fn distinguishing_messages(
    cx: FileCx<'_>,
    f: &FileTrials<'_>,
    shown: &[DistinguishingInput],
    flipped: bool,
) -> Vec<ChatMessage> {
    // The task first: the calls for the batch's files share it (see `prompt::candidate_messages`).
    let mut p = shared_task(&cx);
    let shared = p.len();
    p.push_str(&format!(
        "The file {} ({}) must do this:\n{}\n\n",
        serde_json::json!(cx.file().path.as_str()),
        f.generated.language.name(),
        cx.file().description.trim()
    ));
    p.push_str("Two versions of it give different outputs on these inputs:\n\n");
    for input in shown {
        p.push_str(&format!("Input: `{}`\n", input.input));
        let mut outputs: Vec<&ShownOutput> = input.outputs.iter().collect();
        if flipped {
            outputs.reverse();
        }
        for (i, o) in outputs.iter().enumerate() {
            p.push_str(&format!("- Output {}: `{}`\n", i + 1, o.output));
        }
        p.push('\n');
    }
    p.push_str("Which outputs does the description call for? Answer only with {\"choice\": N, \"reason\": \"one or two sentences\"}, N being 1 or 2.");
    vec![
        ChatMessage::system(
            "You decide which of two behaviours a specification calls for. Work out the expected output of each input from the description alone.",
        ),
        ChatMessage::user(p).with_shared_prefix(shared),
    ]
}

fn output_of(r: &CheckResults, c: usize, p: usize) -> String {
    r.outputs
        .get(c)
        .and_then(|o| o.get(p))
        .and_then(|o| o.clone())
        .unwrap_or_else(|| "(no output)".into())
}
