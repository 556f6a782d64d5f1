//! Trigram filters: each indexed file's bit set of the trigrams its text holds, and what any
//! match of a search's pattern must hold ([`Need`]), so a file whose filter lacks it is ruled
//! out without being read.

use regex_syntax::hir::{Class, Hir, HirKind};
use writ_core::search::SearchQuery;

/// A trigram's key: its three bytes, ASCII-lowercased.
fn trigram(a: u8, b: u8, c: u8) -> u32 {
    (u32::from(a.to_ascii_lowercase()) << 16)
        | (u32::from(b.to_ascii_lowercase()) << 8)
        | u32::from(c.to_ascii_lowercase())
}

/// Bits set per trigram: three probes at eight bits per distinct trigram make a false "maybe"
/// about 3 % per trigram (one probe: 12 %), for the same memory.
const PROBES: u64 = 3;

/// The bits of `gram` in a filter of `words` 64-bit words (a power of two), as (word, mask).
fn bits(gram: u32, words: usize) -> impl Iterator<Item = (usize, u64)> {
    let size = (words * 64) as u64;
    let h = u64::from(gram).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // Two halves of one hash, combined (Kirsch–Mitzenmacher): as good as independent hashes.
    let (a, b) = (h >> 32, (h & 0xFFFF_FFFF) | 1);
    (0..PROBES).map(move |i| {
        let at = a.wrapping_add(i.wrapping_mul(b)) & (size - 1);
        ((at / 64) as usize, 1 << (at % 64))
    })
}

/// The filter of a file's bytes; `None` when the searcher may not see them as they are (binary
/// data, or a byte-order mark it would transcode).
pub(crate) fn filter_of(bytes: &[u8]) -> Option<Box<[u64]>> {
    if bytes.contains(&0) || bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return None;
    }
    let mut grams: Vec<u32> = bytes
        .windows(3)
        .map(|w| trigram(w[0], w[1], w[2]))
        .collect();
    grams.sort_unstable();
    grams.dedup();
    let words = (grams.len() * 8).div_ceil(64).max(1).next_power_of_two();
    let mut filter = vec![0_u64; words].into_boxed_slice();
    for g in grams {
        for (word, mask) in bits(g, words) {
            filter[word] |= mask;
        }
    }
    Some(filter)
}

/// What any match of a pattern holds, as trigrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing known: every file may match.
    Anything,
    /// Every one of these trigrams.
    All(Vec<u32>),
    And(Vec<Need>),
    Or(Vec<Need>),
}

impl Need {
    /// What a match of the query holds, read from the pattern as the searcher parses it.
    pub fn of(query: &SearchQuery) -> Need {
        let pattern = if query.regex {
            query.pattern.clone()
        } else {
            regex_syntax::escape(&query.pattern)
        };
        match regex_syntax::ParserBuilder::new()
            .case_insensitive(query.ignore_case)
            .build()
            .parse(&pattern)
        {
            Ok(hir) => Need::of_hir(&hir).simplified(),
            Err(_) => Need::Anything,
        }
    }

    fn of_hir(hir: &Hir) -> Need {
        match hir.kind() {
            HirKind::Literal(lit) => Need::of_text(&lit.0),
            HirKind::Capture(c) => Need::of_hir(&c.sub),
            HirKind::Repetition(r) if r.min >= 1 => Need::of_hir(&r.sub),
            HirKind::Concat(subs) => {
                let mut needs = Vec::new();
                let mut run: Vec<u8> = Vec::new();
                for sub in subs {
                    match literal_bytes(sub) {
                        Some(bytes) => run.extend_from_slice(&bytes),
                        None => {
                            needs.push(Need::of_text(&std::mem::take(&mut run)));
                            needs.push(Need::of_hir(sub));
                        }
                    }
                }
                needs.push(Need::of_text(&run));
                Need::And(needs)
            }
            HirKind::Alternation(subs) => Need::Or(subs.iter().map(Need::of_hir).collect()),
            _ => Need::Anything,
        }
    }

    fn of_text(text: &[u8]) -> Need {
        if text.len() < 3 {
            return Need::Anything;
        }
        let mut grams: Vec<u32> = text.windows(3).map(|w| trigram(w[0], w[1], w[2])).collect();
        grams.sort_unstable();
        grams.dedup();
        Need::All(grams)
    }

    fn simplified(self) -> Need {
        match self {
            Need::And(needs) => {
                let needs: Vec<Need> = needs
                    .into_iter()
                    .map(Need::simplified)
                    .filter(|n| *n != Need::Anything)
                    .collect();
                match needs.len() {
                    0 => Need::Anything,
                    1 => needs.into_iter().next().unwrap_or(Need::Anything),
                    _ => Need::And(needs),
                }
            }
            Need::Or(needs) => {
                // Trigrams are kept in one case, so `apply|Apply|APPLY` are one branch: a file
                // the first rules out is not probed twice more.
                let mut unique: Vec<Need> = Vec::with_capacity(needs.len());
                for need in needs.into_iter().map(Need::simplified) {
                    if !unique.contains(&need) {
                        unique.push(need);
                    }
                }
                let needs = unique;
                if needs.is_empty() || needs.contains(&Need::Anything) {
                    Need::Anything
                } else {
                    Need::Or(needs)
                }
            }
            other => other,
        }
    }

    pub(crate) fn holds(&self, filter: &[u64]) -> bool {
        match self {
            Need::Anything => true,
            Need::All(grams) => grams
                .iter()
                .all(|g| bits(*g, filter.len()).all(|(word, mask)| filter[word] & mask != 0)),
            Need::And(needs) => needs.iter().all(|n| n.holds(filter)),
            Need::Or(needs) => needs.iter().any(|n| n.holds(filter)),
        }
    }
}

/// The bytes `hir` matches when it matches exactly one text up to ASCII case (a literal, or a
/// class such as `[aA]` that case-insensitivity makes of one); `None` otherwise.
fn literal_bytes(hir: &Hir) -> Option<Vec<u8>> {
    match hir.kind() {
        HirKind::Literal(lit) => Some(lit.0.to_vec()),
        HirKind::Class(Class::Unicode(class)) => {
            let mut chars = Vec::new();
            for range in class.ranges() {
                for c in range.start()..=range.end() {
                    chars.push(c);
                    if chars.len() > 2 {
                        return None;
                    }
                }
            }
            one_ascii(chars.into_iter().map(u32::from))
        }
        HirKind::Class(Class::Bytes(class)) => {
            let mut bytes = Vec::new();
            for range in class.ranges() {
                for b in range.start()..=range.end() {
                    bytes.push(b);
                    if bytes.len() > 2 {
                        return None;
                    }
                }
            }
            one_ascii(bytes.into_iter().map(u32::from))
        }
        _ => None,
    }
}

/// The one ASCII byte that every code point of `points` is, up to case.
fn one_ascii(points: impl Iterator<Item = u32>) -> Option<Vec<u8>> {
    let mut one: Option<u8> = None;
    for p in points {
        let b = u8::try_from(p).ok().filter(u8::is_ascii)?;
        let lower = b.to_ascii_lowercase();
        if one.is_some_and(|o| o != lower) {
            return None;
        }
        one = Some(lower);
    }
    one.map(|b| vec![b])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;
    use writ_core::RepoPath;
    use writ_core::search::Freshness;

    fn query(pattern: &str, regex: bool, ignore_case: bool) -> SearchQuery {
        SearchQuery {
            pattern: pattern.into(),
            regex,
            ignore_case,
            dir: RepoPath::root(),
            glob: None,
            context_lines: 0,
            max_matches: 100,
            max_files: 100,
            max_file_bytes: 1 << 20,
            time_limit: Duration::from_secs(5),
            freshness: Freshness::Current,
            keep_compiled: false,
        }
    }

    fn may_match(pattern: &str, regex: bool, ignore_case: bool, text: &str) -> bool {
        let filter = filter_of(text.as_bytes()).unwrap();
        Need::of(&query(pattern, regex, ignore_case)).holds(&filter)
    }

    #[test]
    fn a_literal_needs_its_trigrams_and_case_folding_keeps_them() {
        assert!(may_match(
            "apply_discount",
            false,
            false,
            "def apply_discount(x):"
        ));
        assert!(may_match("APPLY", false, true, "def apply_discount(x):"));
        assert!(!may_match(
            "apply_discount",
            false,
            false,
            "def something_else_entirely(x):"
        ));
    }

    #[test]
    fn an_alternation_needs_one_branch_and_an_optional_part_nothing() {
        assert_eq!(
            Need::of(&query("(foo|ba)x", true, false)),
            Need::Anything,
            "a branch too short to need a trigram lets every file through"
        );
        assert!(may_match(
            r"\bdef (parse|merge)_\w+",
            true,
            false,
            "def merge_all()"
        ));
        assert!(!may_match(
            r"\bdef (parse|merge)_\w+",
            true,
            false,
            "def split_all()"
        ));
        assert_eq!(Need::of(&query("(abc)?", true, false)), Need::Anything);
    }

    #[test]
    fn branches_that_differ_only_in_case_are_one_branch() {
        let need = Need::of(&query("(?-u)tariff|Tariff|TARIFF|levy|LEVY", true, false));
        let Need::Or(branches) = &need else {
            panic!("an alternation: {need:?}");
        };
        assert_eq!(branches.len(), 2, "{need:?}");
        assert!(may_match(
            "(?-u)tariff|Tariff|TARIFF",
            true,
            false,
            "class TariffTable:"
        ));
        assert!(!may_match(
            "(?-u)tariff|Tariff|TARIFF",
            true,
            false,
            "class Schedule:"
        ));
    }

    #[test]
    fn a_case_insensitive_class_that_may_be_another_letter_breaks_the_run() {
        // `k` also matches the Kelvin sign: the run stops there.
        assert_eq!(
            Need::of(&query("kabc", true, true)),
            Need::All(vec![trigram(b'a', b'b', b'c')])
        );
    }

    #[test]
    fn binary_files_and_byte_order_marks_are_never_ruled_out() {
        assert!(filter_of(b"ab\0cd").is_none());
        assert!(filter_of(&[0xFF, 0xFE, b'a', 0]).is_none());
        assert!(filter_of(b"plain text").is_some());
    }
}
