//! Agreement: what the generated checks say about a file's candidates, as pure functions over
//! their results ([`CheckResults`]), so the choice can be tested without a sandbox or a model.
//!
//! - [`usable_tests`]: a test that fails on every candidate for a name or import error (or
//!   that no candidate reached) was written against names that do not exist; it is dropped, not
//!   held against anyone.
//! - [`rank`]: dual agreement — candidates grouped by the set of tests they pass and their
//!   outputs on the probe inputs (two candidates that fail the same tests in different ways do
//!   not agree), each group scored (candidates in it) × (tests it passes); the candidates of the
//!   best-scoring groups.
//!   Groups with equal scores are separated by consensus: on each test, how many candidates
//!   end it as the group does (pass or fail). A subtle bug is rarely shared, so the correct
//!   behaviour is the one other candidates share, while a wrong assertion that happens to
//!   match one candidate's bug is passed by that candidate alone.
//! - [`clusters`]: behaviour — candidates whose outputs on every probe input are identical form
//!   one cluster, largest first.
//! - [`disagreements`]: the probe inputs on which two candidates' outputs differ.

use std::collections::{BTreeMap, BTreeSet};

/// How one test ended on one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TestOutcome {
    Passed,
    /// Failed for a name or import error: the test speaks of a name the candidate lacks.
    NameError,
    Failed,
}

/// The generated checks' results on a file's candidates: `outcomes[c][t]` (absent: the test
/// did not run on that candidate) and `outputs[c][p]` for each probe input.
#[derive(Debug, Clone, Default)]
pub(crate) struct CheckResults {
    pub tests: Vec<String>,
    pub probes: Vec<String>,
    pub outcomes: Vec<Vec<Option<TestOutcome>>>,
    pub outputs: Vec<Vec<Option<String>>>,
}

impl CheckResults {
    /// The tests candidate `c` passed, among `usable`.
    pub fn passed(&self, c: usize, usable: &[usize]) -> BTreeSet<usize> {
        usable
            .iter()
            .copied()
            .filter(|&t| self.outcomes[c].get(t) == Some(&Some(TestOutcome::Passed)))
            .collect()
    }
}

/// The tests that say something: not failing on every candidate for a name or import error.
pub(crate) fn usable_tests(r: &CheckResults) -> Vec<usize> {
    (0..r.tests.len())
        .filter(|&t| {
            r.outcomes.iter().any(|o| {
                matches!(
                    o.get(t),
                    Some(Some(TestOutcome::Passed | TestOutcome::Failed))
                )
            })
        })
        .collect()
}

/// Candidates that pass the same set of tests with the same outputs, and that group's score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// Candidate indices, in model-list order.
    pub members: Vec<usize>,
    pub tests_passed: usize,
    /// (candidates in the group) × (tests it passes).
    pub score: usize,
    /// Σ over the usable tests of the candidates (of any group) whose outcome on the test,
    /// passed or not, is the group's: separates groups with equal scores.
    pub consensus: usize,
}

/// The groups by score, then consensus (best first; otherwise by their first member), and the
/// candidates of every group that shares the best score and consensus. The first `candidates`
/// of `r` may be chosen and are grouped; the rest (candidates that failed the caller's own
/// tests) only count in the consensus: with two candidates left, each end of a test is shared by
/// one of them, so only a third candidate's results can say which behaviour is the common one.
///
/// A group is the candidates that pass the same tests *and* give the same output on every
/// probe input. CodeT counts candidates passing the same tests as agreeing, which holds for
/// the tests they pass; but two candidates failing the same tests may fail them differently
/// (each its own bug on the same inputs), and counting them as two votes for one behaviour
/// lets two different wrong programs outvote a correct one that passes more tests.
pub(crate) fn rank(
    r: &CheckResults,
    candidates: usize,
    usable: &[usize],
) -> (Vec<Group>, Vec<usize>) {
    let answered: Vec<usize> = (0..r.probes.len())
        .filter(|&p| (0..candidates).any(|c| output(r, c, p).is_some()))
        .collect();
    // (the tests passed, the outputs on the probes) → the candidates.
    type Key<'r> = (BTreeSet<usize>, Vec<Option<&'r str>>);
    let mut by_set: BTreeMap<Key<'_>, Vec<usize>> = BTreeMap::new();
    for c in 0..candidates {
        let behaviour = answered.iter().map(|&p| output(r, c, p)).collect();
        by_set
            .entry((r.passed(c, usable), behaviour))
            .or_default()
            .push(c);
    }
    let passes = |c: usize, t: usize| r.outcomes[c].get(t) == Some(&Some(TestOutcome::Passed));
    // For each test, the candidates (voters too) whose outcome (passed or not) is the group's.
    let voters = r.outcomes.len().max(candidates);
    let consensus = |set: &BTreeSet<usize>| -> usize {
        usable
            .iter()
            .map(|&t| {
                (0..voters)
                    .filter(|&c| passes(c, t) == set.contains(&t))
                    .count()
            })
            .sum()
    };
    let mut groups: Vec<Group> = by_set
        .into_iter()
        .map(|((set, _), members)| Group {
            score: members.len() * set.len(),
            tests_passed: set.len(),
            consensus: consensus(&set),
            members,
        })
        .collect();
    groups.sort_by(|a, b| {
        (b.score, b.consensus)
            .cmp(&(a.score, a.consensus))
            .then(a.members[0].cmp(&b.members[0]))
    });
    let best = groups.first().map(|g| (g.score, g.consensus));
    let mut tied: Vec<usize> = groups
        .iter()
        .filter(|g| Some((g.score, g.consensus)) == best)
        .flat_map(|g| g.members.iter().copied())
        .collect();
    tied.sort_unstable();
    (groups, tied)
}

/// `among` split by their outputs on the probe inputs, largest cluster first (equal sizes by
/// their first member). Probes no candidate of `among` answered are ignored.
pub(crate) fn clusters(r: &CheckResults, among: &[usize]) -> Vec<Vec<usize>> {
    let answered: Vec<usize> = (0..r.probes.len())
        .filter(|&p| among.iter().any(|&c| output(r, c, p).is_some()))
        .collect();
    let mut by_behaviour: BTreeMap<Vec<Option<&str>>, Vec<usize>> = BTreeMap::new();
    for &c in among {
        let key = answered.iter().map(|&p| output(r, c, p)).collect();
        by_behaviour.entry(key).or_default().push(c);
    }
    let mut out: Vec<Vec<usize>> = by_behaviour.into_values().collect();
    out.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].cmp(&b[0])));
    out
}

/// Clusters of equal size separated by soft MBR-exec: for each cluster, summed over the probe
/// inputs, how many of `all` (its own members aside) give its output. A subtle bug is rarely
/// shared, so on each input the correct output is the one most other candidates give, while
/// a buggy candidate stands alone where its bug shows. The clusters (by their first member)
/// with the highest support, in the order given.
pub(crate) fn best_supported(
    r: &CheckResults,
    clusters: &[&Vec<usize>],
    all: &[usize],
) -> Vec<usize> {
    let support = |cluster: &Vec<usize>| -> usize {
        let rep = cluster[0];
        (0..r.probes.len())
            .filter_map(|p| output(r, rep, p).map(|o| (p, o)))
            .map(|(p, o)| {
                all.iter()
                    .filter(|&&c| !cluster.contains(&c) && output(r, c, p) == Some(o))
                    .count()
            })
            .sum()
    };
    let scored: Vec<(usize, usize)> = clusters.iter().map(|c| (c[0], support(c))).collect();
    let best = scored.iter().map(|&(_, s)| s).max().unwrap_or(0);
    scored
        .into_iter()
        .filter(|&(_, s)| s == best)
        .map(|(c, _)| c)
        .collect()
}

/// Whether any probe input has an output from `among`.
pub(crate) fn any_output(r: &CheckResults, among: &[usize]) -> bool {
    (0..r.probes.len()).any(|p| among.iter().any(|&c| output(r, c, p).is_some()))
}

/// The probe inputs (at most `max`) on which candidates `a` and `b` answer differently.
pub(crate) fn disagreements(r: &CheckResults, a: usize, b: usize, max: usize) -> Vec<usize> {
    (0..r.probes.len())
        .filter(|&p| output(r, a, p) != output(r, b, p))
        .take(max)
        .collect()
}

fn output(r: &CheckResults, c: usize, p: usize) -> Option<&str> {
    r.outputs
        .get(c)
        .and_then(|o| o.get(p))
        .and_then(|o| o.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestOutcome::{Failed, NameError, Passed};

    fn results(outcomes: Vec<Vec<TestOutcome>>, outputs: Vec<Vec<&str>>) -> CheckResults {
        let tests = outcomes.first().map_or(0, Vec::len);
        let probes = outputs.first().map_or(0, Vec::len);
        CheckResults {
            tests: (0..tests).map(|t| format!("t{t}")).collect(),
            probes: (0..probes).map(|p| format!("f({p})")).collect(),
            outcomes: outcomes
                .into_iter()
                .map(|o| o.into_iter().map(Some).collect())
                .collect(),
            outputs: outputs
                .into_iter()
                .map(|o| o.into_iter().map(|s| Some(s.to_string())).collect())
                .collect(),
        }
    }

    #[test]
    fn a_test_that_fails_everywhere_for_a_name_error_is_dropped_and_one_wrong_assertion_is_kept() {
        let r = results(
            vec![
                vec![Passed, NameError, Failed],
                vec![Failed, NameError, Failed],
            ],
            vec![],
        );
        assert_eq!(usable_tests(&r), vec![0, 2]);
    }

    #[test]
    fn groups_are_scored_by_members_times_tests_passed_and_the_best_group_wins() {
        // Two candidates agree on passing tests 0 and 1 (score 2 × 2 = 4); the third passes
        // three tests alone (score 3), one of them a wrong assertion that matches its bug.
        let r = results(
            vec![
                vec![Passed, Passed, Failed, Failed],
                vec![Passed, Passed, Passed, Passed],
                vec![Passed, Passed, Failed, Failed],
            ],
            vec![],
        );
        let usable = usable_tests(&r);
        let (groups, tied) = rank(&r, 3, &usable);
        assert_eq!(groups[0].members, vec![0, 2]);
        assert_eq!(groups[0].score, 4);
        assert_eq!(groups[1].score, 4);
        assert_eq!(
            tied,
            vec![0, 2],
            "equal scores: the group whose tests are shared by more candidates"
        );
        let r = results(
            vec![
                vec![Passed, Failed, Passed],
                vec![Passed, Passed, Passed],
                vec![Failed, Failed, Passed],
            ],
            vec![],
        );
        let (groups, tied) = rank(&r, 3, &usable_tests(&r));
        assert_eq!(groups[0].members, vec![1]);
        assert_eq!(tied, vec![1]);
    }

    #[test]
    fn equal_scores_go_to_the_candidate_whose_passed_tests_others_share() {
        // Candidate 0 is correct; 1 has a bug on inputs 2 and 3, 2 a bug on input 4. Test 3
        // is a wrong assertion expecting 1's answer. 0 and 1 each pass four tests; on tests 2
        // and 3, 2 ends as 0 does, and nobody as 1 does.
        let r = results(
            vec![
                vec![Passed, Passed, Passed, Failed, Passed],
                vec![Passed, Passed, Failed, Passed, Passed],
                vec![Passed, Passed, Passed, Failed, Failed],
            ],
            vec![],
        );
        let (groups, tied) = rank(&r, 3, &usable_tests(&r));
        assert_eq!((groups[0].score, groups[1].score), (4, 4));
        assert!(groups[0].consensus > groups[1].consensus);
        assert_eq!(tied, vec![0]);
        // Nothing to separate them: still a tie.
        let r = results(vec![vec![Passed, Failed], vec![Failed, Passed]], vec![]);
        assert_eq!(rank(&r, 2, &usable_tests(&r)).1, vec![0, 1]);
    }

    #[test]
    fn a_candidate_that_failed_the_callers_tests_votes_but_is_never_chosen() {
        // 0 and 1 passed the caller's tests and pass one generated test each; 2 failed the
        // caller's tests (it is not grouped) but ends tests 0 and 1 as 0 does.
        let r = results(
            vec![
                vec![Passed, Failed],
                vec![Failed, Passed],
                vec![Passed, Failed],
            ],
            vec![],
        );
        let (groups, tied) = rank(&r, 2, &usable_tests(&r));
        assert_eq!(groups.len(), 2, "the voter forms no group");
        assert_eq!(tied, vec![0]);
        // A voter that passes every test is chosen by nobody, however it scores.
        let r = results(
            vec![
                vec![Passed, Failed],
                vec![Failed, Passed],
                vec![Passed, Passed],
            ],
            vec![],
        );
        let (groups, tied) = rank(&r, 2, &usable_tests(&r));
        assert!(groups.iter().all(|g| !g.members.contains(&2)));
        assert_eq!(tied, vec![0, 1]);
    }

    #[test]
    fn candidates_failing_the_same_tests_with_different_outputs_are_not_one_group() {
        // 0 is correct and passes three tests; 1 and 2 each fail tests 1 and 2, with different
        // wrong outputs on input 1: two different programs, not two votes for one.
        let r = results(
            vec![
                vec![Passed, Passed, Failed, Passed],
                vec![Passed, Failed, Failed, Passed],
                vec![Passed, Failed, Failed, Passed],
            ],
            vec![vec!["1", "2"], vec!["1", "5"], vec!["1", "7"]],
        );
        let (groups, tied) = rank(&r, 3, &usable_tests(&r));
        assert_eq!(groups.len(), 3);
        assert_eq!(tied, vec![0]);
        // The same failures with the same outputs are one behaviour, and outvote it.
        let r = results(
            vec![
                vec![Passed, Passed, Failed, Passed],
                vec![Passed, Failed, Failed, Passed],
                vec![Passed, Failed, Failed, Passed],
            ],
            vec![vec!["1", "2"], vec!["1", "5"], vec!["1", "5"]],
        );
        let (groups, tied) = rank(&r, 3, &usable_tests(&r));
        assert_eq!(groups[0].members, vec![1, 2]);
        assert_eq!(tied, vec![1, 2]);
    }

    #[test]
    fn identical_outputs_form_one_cluster_and_the_largest_comes_first() {
        let r = results(vec![], vec![vec!["1", "2"], vec!["1", "3"], vec!["1", "3"]]);
        assert_eq!(clusters(&r, &[0, 1, 2]), vec![vec![1, 2], vec![0]]);
        assert_eq!(disagreements(&r, 0, 1, 3), vec![1]);
        assert_eq!(clusters(&r, &[0]), vec![vec![0]]);
    }

    #[test]
    fn clusters_of_one_are_separated_by_how_many_others_share_their_outputs_input_by_input() {
        // 0 is correct; 1 is wrong on input 1, 2 on input 2: each wrong output stands alone.
        let r = results(
            vec![],
            vec![
                vec!["1", "2", "3"],
                vec!["1", "9", "3"],
                vec!["1", "2", "7"],
            ],
        );
        let found = clusters(&r, &[0, 1, 2]);
        assert_eq!(found.len(), 3);
        let refs: Vec<&Vec<usize>> = found.iter().collect();
        assert_eq!(best_supported(&r, &refs, &[0, 1, 2]), vec![0]);
        // Only 1 and 2 tied, but 0 still votes: 1 shares input 2 with 0, 2 shares input 1.
        let two: Vec<Vec<usize>> = vec![vec![1], vec![2]];
        let refs: Vec<&Vec<usize>> = two.iter().collect();
        assert_eq!(best_supported(&r, &refs, &[0, 1, 2]), vec![1, 2]);
    }
}
