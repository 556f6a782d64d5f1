//! A model that has fallen into a loop — the same line, or the same few lines, over and over —
//! only stops at its token cap. On CPU that is minutes of output nobody can use, and from a
//! provider it is tokens paid for: the 1.5B coder model, asked for tests, has written a
//! `parametrize` list of one repeated row until its 2,048 tokens ran out, ten minutes at a few
//! tokens a second (`tests/data/looping/`). Once the tail of an answer is one block of lines
//! repeated many times, the embedded engine stops generating: the answer is cut, as at the cap,
//! and judged as any cut answer is (a cut candidate is refused, a cut test file keeps its whole
//! tests). A provider's stream is not cut here: writ does not yet refuse a provider's candidate
//! cut short, so cutting one could write a cut file.

/// The fewest repeats of a block, and the fewest lines they must span, that count as a loop: far
/// more than any table in real code repeats one row verbatim.
const MIN_REPEATS: usize = 12;
const MIN_LINES: usize = 24;
/// The longest block (in lines) looked for.
const MAX_PERIOD: usize = 4;

/// Whether `text` ends in a loop: its last complete lines are one block of up to four lines,
/// not all blank, repeated at least [`MIN_REPEATS`] times over at least [`MIN_LINES`] lines.
pub fn looping(text: &[u8]) -> bool {
    let text = String::from_utf8_lossy(text);
    // Only complete lines: the one being written may yet differ.
    let Some(end) = text.rfind('\n') else {
        return false;
    };
    let lines: Vec<&str> = text[..end].lines().map(str::trim_end).collect();
    (1..=MAX_PERIOD).any(|period| {
        let need = period * MIN_REPEATS.max(MIN_LINES.div_ceil(period));
        if lines.len() < need {
            return false;
        }
        let tail = &lines[lines.len() - need..];
        let block = &tail[..period];
        block.iter().any(|l| !l.trim().is_empty()) && tail.chunks(period).all(|c| c == block)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first line count at which `text`, written line by line, is seen looping.
    fn seen_at(text: &str) -> Option<usize> {
        let mut written = String::new();
        for (i, line) in text.lines().enumerate() {
            written.push_str(line);
            written.push('\n');
            if looping(written.as_bytes()) {
                return Some(i + 1);
            }
        }
        None
    }

    #[test]
    fn the_real_test_writers_loops_are_stopped_soon_after_they_start() {
        for (name, text) in [
            (
                "how_many_times_0",
                include_str!("../tests/data/looping/how_many_times_0.py"),
            ),
            (
                "how_many_times_1",
                include_str!("../tests/data/looping/how_many_times_1.py"),
            ),
        ] {
            let total = text.lines().count();
            let at = seen_at(text).unwrap_or_else(|| panic!("{name}: no loop seen"));
            // The distinct rows come before the loop, and are kept.
            let first_repeat = text
                .lines()
                .position(|l| {
                    l.contains("(\"aaaaa\", \"aa\", 3)") || l.contains("(\"bb\", \"bb\", 2)")
                })
                .unwrap();
            assert!(at > first_repeat + 20, "{name}: stopped at {at}");
            assert!(at < total / 3, "{name}: stopped at {at} of {total} lines");
        }
    }

    #[test]
    fn code_with_similar_or_blank_lines_is_not_a_loop() {
        let asserts: String = (0..60)
            .map(|i| format!("    assert add({i}, 1) == {}\n", i + 1))
            .collect();
        assert!(!looping(asserts.as_bytes()));
        let blank = format!("x = 1\n{}", "\n".repeat(80));
        assert!(!looping(blank.as_bytes()));
        // A short run of one row is a table, not a loop.
        let table = format!("ROWS = [\n{}]\n", "    (0, 0),\n".repeat(10));
        assert!(!looping(table.as_bytes()));
        // Two alternating lines repeated on and on are.
        let pair = "    a()\n    b()\n".repeat(20);
        assert!(looping(pair.as_bytes()));
        // The line being written does not count until it ends.
        let unfinished = format!("{}    x", "    y = 1\n".repeat(23));
        assert!(!looping(unfinished.as_bytes()));
    }
}
