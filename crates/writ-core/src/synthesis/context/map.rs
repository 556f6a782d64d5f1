//! The repository map: the workspace's files ranked by how they relate to the file being written
//! (its imports, the files that import it — the workspace index's import graph —, the files that
//! mention it, its tests, its folder, definitions named with the description's words), outlined,
//! and fitted to a token budget.

use super::*;
use futures::future::join_all;

use crate::search::{Freshness, MapQuery, SearchError, SearchQuery, SearchResults, module_names};
use crate::synthesis::stage::MapShared;

/// The modules `run`'s file and its batch import (its own import lines as they are before the
/// batch).
fn imported_by(batch: &Batch, batch_file: &BatchFile) -> Vec<String> {
    let current = batch_file.current.as_deref().map(String::from_utf8_lossy);
    imported_modules(batch, &batch_file.spec, current.as_deref())
}

/// What the map of `file` asks of the index and of the search, given what it imports.
fn ask_for(batch: &Batch, file: &FileSpec, imported: Vec<String>) -> (MapQuery, Vec<SearchQuery>) {
    let query = MapQuery {
        path: file.path.clone(),
        modules: imported,
        exclude: batch.files().iter().map(|f| f.path.clone()).collect(),
        fill: MAP_FILL,
    };
    let words = description_words(&file.description);
    (query, MapSearches::new(file, &words).queries())
}

/// The repository map of `run`'s file: the outlines of the workspace's files most related to
/// it, best first, within `max_tokens`, and how many changes the workspace's index was still
/// applying when it answered (the map does not wait for them). `seen`: paths the prompt shows
/// anyway, left out; `shared`: the batch's look-ups, made by its first file's map for all of
/// `runs` (the batch's files), each answer left in its file's record.
pub async fn repo_map(
    workspace: &dyn Workspace,
    shared: &MapShared,
    batch_files: &[BatchFile],
    batch: &Batch,
    batch_file: &BatchFile,
    seen: &[String],
    max_tokens: usize,
) -> (Vec<ContextFile>, u64) {
    let file = &batch_file.spec;
    let imported = imported_by(batch, batch_file);
    let words = description_words(&file.description);
    let searches = MapSearches::new(file, &words);
    // From the index: the files that may rank, found by look-ups, and the two searches, for every
    // file of the batch at once; without one (or before it is current), the walk, once a batch,
    // and the searches.
    let looked_up = *shared
        .looked_up
        .get_or_init(|| async {
            let asks: Vec<(MapQuery, Vec<SearchQuery>)> = batch_files
                .iter()
                .map(|r| ask_for(batch, &r.spec, imported_by(batch, r)))
                .collect();
            let Some(answers) = workspace.map_lookups(asks).await else {
                return false;
            };
            for (r, answer) in batch_files.iter().zip(answers) {
                *r.map_lookup
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(answer);
            }
            true
        })
        .await;
    let mine = looked_up
        .then(|| {
            batch_file
                .map_lookup
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        })
        .flatten();
    let mut pending = 0;
    let (files, importers, contents, found) = match mine {
        Some((found, results)) => {
            if !found.extensions.iter().any(|(ext, n)| {
                *n > 0 && Language::from_path(&format!("f.{ext}")) != Language::Other
            }) {
                return (Vec::new(), 0);
            }
            pending = found.pending;
            (found.files, found.importers, found.contents, results)
        }
        None => {
            let walked = shared
                .walk
                .get_or_init(|| async {
                    workspace
                        .walk(&RepoPath::root(), None, MAP_WALK_FILES)
                        .await
                        .ok()
                })
                .await;
            let Some(walk) = walked else {
                return (Vec::new(), 0);
            };
            // A workspace with nothing to outline (a new project, or only the batch's own
            // files) costs one walk: no search, no read.
            let outlinable = walk.files.iter().any(|f| {
                Language::from_path(f.path.as_str()) != Language::Other
                    && !batch.files().iter().any(|b| b.path == f.path)
            });
            if !outlinable {
                return (Vec::new(), 0);
            }
            let importers = workspace.importers(&file.path).await.unwrap_or_default();
            // The searches each take a blocking thread: they run side by side.
            let results =
                join_all(searches.queries().into_iter().map(|q| workspace.search(q))).await;
            (walk.files.clone(), importers, HashMap::new(), results)
        }
    };
    let (mentions, definitions) = searches.read(found);
    let importers: HashMap<String, usize> = importers
        .into_iter()
        .map(|(p, n)| (p.as_str().to_owned(), n))
        .collect();
    let files = with_found(files, [&mentions, &definitions, &importers]);
    let ranked = rank(file, &files, &imported, &mentions, &definitions, &importers);
    let ranked: Vec<(i64, RepoPath)> = ranked
        .into_iter()
        .filter(|(_, path)| !seen.iter().any(|s| s == path.as_str()))
        .take(MAP_CANDIDATES)
        .collect();
    let cached = super::indexed_outlines(ranked.iter().map(|(_, path)| path), &contents);
    let mut scored: Vec<(i64, RepoPath, std::sync::Arc<super::Outline>)> = Vec::new();
    for ((score, path), cached) in ranked.into_iter().zip(cached) {
        let outline = match cached {
            Some(outline) => outline,
            None => match super::outline_of(workspace, &path).await {
                Some(outline) => outline,
                None => continue,
            },
        };
        if outline.text.trim().is_empty() {
            continue;
        }
        let shared = outline.parts.shared_words(&words);
        scored.push((score + 2 * shared.min(10) as i64, path, outline));
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
    // Only the outlines that fit are copied out of the cache.
    let map = fit(
        without_excess_filler(scored, max_tokens).map(|(_, path, outline)| ContextFile {
            path: path.to_string(),
            text: at_most(&outline.text, max_tokens / ONE_FILE_SHARE),
            outline: true,
        }),
        max_tokens,
    );
    let pending = if map.is_empty() { 0 } else { pending };
    (map, pending)
}

/// A file the map ranks only by where it lives (beneath the file's top folder, in its language)
/// and whose definitions share no word with the description: it shows the project's layout and
/// conventions, not code the file needs, so such files take at most this share of the budget.
const FILLER_SHARE: usize = 4;
/// The highest score a filler file can have ([`rank`]: top folder 1, language 1).
const FILLER_SCORE: i64 = 2;

/// The scored outlines, best first, with the filler past [`FILLER_SHARE`] of `max_tokens` left
/// out (fillers rank last, so what is left is a prefix).
fn without_excess_filler(
    scored: Vec<(i64, RepoPath, std::sync::Arc<super::Outline>)>,
    max_tokens: usize,
) -> impl Iterator<Item = (i64, RepoPath, std::sync::Arc<super::Outline>)> {
    let mut filler_left = max_tokens / FILLER_SHARE;
    scored
        .into_iter()
        .take_while(move |(score, path, outline)| {
            if *score > FILLER_SCORE {
                return true;
            }
            let shown = tokens(&outline.text).min(max_tokens / ONE_FILE_SHARE);
            let cost = shown + tokens(path.as_str()) + 12;
            match filler_left.checked_sub(cost) {
                Some(left) => {
                    filler_left = left;
                    true
                }
                None => false,
            }
        })
}

/// No one file's outline takes more than this share of the map: a file of thousands of
/// definitions would otherwise be the whole map, and the files after it would not be shown.
const ONE_FILE_SHARE: usize = 4;

/// `outline`, or its first lines within `max_tokens` and a line saying how many more there are.
fn at_most(outline: &str, max_tokens: usize) -> String {
    if tokens(outline) <= max_tokens {
        return outline.to_owned();
    }
    let cut = truncate_chars(outline, max_tokens.saturating_sub(8) * 4).0;
    let kept = cut.rfind('\n').map_or("", |i| &cut[..=i]);
    let more = outline[kept.len()..].lines().count();
    format!("{kept}… {more} more lines of definitions\n")
}

/// Lines the mentions search may read.
const MENTION_MATCHES: usize = 500;

/// The map's two searches of a file's language: the lines that mention the file's module name,
/// and the lines that may define something named with a word of the description (with those
/// words, lowercased, to tell which do).
struct MapSearches<'f> {
    file: &'f FileSpec,
    mention: Option<String>,
    definition: Option<(String, Vec<String>)>,
}

impl<'f> MapSearches<'f> {
    fn new(file: &'f FileSpec, words: &[String]) -> Self {
        let searchable = file.path.extension().is_some();
        MapSearches {
            file,
            mention: mentions_pattern(file).filter(|_| searchable),
            definition: definitions_pattern(words).filter(|_| searchable),
        }
    }

    /// The queries, mentions first; [`MapSearches::read`] takes their results in this order.
    fn queries(&self) -> Vec<SearchQuery> {
        let mention = self
            .mention
            .as_ref()
            .and_then(|p| line_search(self.file, p.clone(), MENTION_MATCHES));
        let definition = self
            .definition
            .as_ref()
            .and_then(|(p, _)| line_search(self.file, p.clone(), DEFINITION_SEARCH_MATCHES));
        mention.into_iter().chain(definition).collect()
    }

    /// The files mentioning the module (with how many lines do) and the files defining the
    /// description's names (with how many definitions), from the results of
    /// [`MapSearches::queries`]; a search that failed finds nothing.
    fn read(
        &self,
        results: Vec<Result<SearchResults, SearchError>>,
    ) -> (HashMap<String, usize>, HashMap<String, usize>) {
        let mut results = results
            .into_iter()
            .map(|r| r.map(|r| r.matches).unwrap_or_default());
        let mut mentions = HashMap::new();
        if self.mention.is_some() {
            for m in results.next().unwrap_or_default() {
                *mentions.entry(m.path).or_insert(0) += 1;
            }
        }
        let mut defined = HashMap::new();
        if let Some((_, lowered)) = &self.definition {
            for m in results.next().unwrap_or_default() {
                let language = Language::from_path(&m.path);
                if writ_checks::analysis::line_definition(&m.line, language).is_some_and(|name| {
                    let name = name.to_ascii_lowercase();
                    lowered.iter().any(|w| name.contains(w.as_str()))
                }) {
                    *defined.entry(m.path).or_insert(0) += 1;
                }
            }
        }
        (mentions, defined)
    }
}

/// A search of the workspace's files of `file`'s language for `pattern`, at most `max_matches`
/// lines; `None` for a file without an extension.
fn line_search(file: &FileSpec, pattern: String, max_matches: usize) -> Option<SearchQuery> {
    let ext = file.path.extension()?;
    Some(SearchQuery {
        pattern,
        regex: true,
        ignore_case: false,
        dir: RepoPath::root(),
        glob: Some(format!("*.{ext}")),
        context_lines: 0,
        max_matches,
        // With the index, files ruled out cost nothing: the whole workspace is searched (the
        // time limit bounds a search that walks the tree).
        max_files: MAP_SEARCH_FILES,
        max_file_bytes: MAP_MAX_FILE_BYTES,
        time_limit: Duration::from_secs(2),
        freshness: Freshness::AsIndexed,
        keep_compiled: true,
    })
}

/// The pattern of the lines that mention the file's module name (the map counts them, per
/// file); `None` for a name too short or not a plain identifier.
fn mentions_pattern(file: &FileSpec) -> Option<String> {
    let stem = stem(&file.path);
    if stem.len() < 3 || !stem.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    // ASCII word boundaries where the name is ASCII: a pattern without Unicode classes compiles
    // and runs in a fraction of the time, and identifiers are ASCII almost everywhere.
    Some(if stem.is_ascii() {
        format!(r"(?-u:\b){stem}(?-u:\b)")
    } else {
        format!(r"\b{stem}\b")
    })
}

/// The pattern of the lines that may define something named with a word of the description
/// (`def apply_discount`, `MAX_RETRIES =`, `fn parse_order`), and those words, lowercased: the
/// helpers and constants a description uses without naming their module. Which of the lines
/// found define something is told line by line ([`MapSearches::read`]).
fn definitions_pattern(words: &[String]) -> Option<(String, Vec<String>)> {
    let mut words: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| w.len() >= 5 && w.chars().all(|c| c.is_ascii_alphanumeric()))
        .filter(|w| !COMMON_WORDS.contains(w))
        .collect();
    words.sort_by_key(|w| std::cmp::Reverse(w.len()));
    words.truncate(16);
    if words.is_empty() {
        return None;
    }
    // The search finds the words as plain literals, in the cases identifiers write them
    // (`apply_discount`, `ApplyDiscount`, `MAX_DISCOUNT`). One regex for the whole shape,
    // case-insensitive, costs the regex engine 5–15 ms to compile (it builds a full DFA) for
    // every file of every batch; literals compile in microseconds.
    let mut variants: Vec<String> = words
        .iter()
        .flat_map(|w| {
            [
                w.to_ascii_lowercase(),
                w.to_ascii_uppercase(),
                capitalized(w),
            ]
        })
        .collect();
    variants.sort();
    variants.dedup();
    let lowered = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    Some((format!("(?-u){}", variants.join("|")), lowered))
}

/// Lines the definitions search may read: uses of the words count against it too.
const DEFINITION_SEARCH_MATCHES: usize = 2_000;

fn capitalized(word: &str) -> String {
    let lower = word.to_ascii_lowercase();
    let mut chars = lower.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Words of descriptions that name no particular thing.
pub(super) const COMMON_WORDS: &[&str] = &[
    "about", "after", "again", "class", "every", "file", "first", "function", "given", "module",
    "other", "return", "returns", "should", "their", "there", "these", "those", "value", "values",
    "where", "which", "while", "with", "write", "using", "import", "imports",
];

/// The modules the file, its batch and its current content import (`a.b` → `a/b`).
pub(super) fn imported_modules(
    batch: &Batch,
    file: &FileSpec,
    current: Option<&str>,
) -> Vec<String> {
    let mut modules: Vec<String> = file
        .internal_imports
        .iter()
        .chain(batch.files().iter().flat_map(|f| &f.internal_imports))
        .map(|i| i.trim().replace('.', "/"))
        .chain(current.map(imports_in).unwrap_or_default())
        .filter(|m| !m.is_empty())
        .collect();
    modules.sort();
    modules.dedup();
    modules
}

/// `files` and every file a search or the import graph found that is not among them: the
/// searches read only files within the map's size bound, and what they found is ranked whether
/// or not the index's look-ups had it.
fn with_found(mut files: Vec<WalkedFile>, found: [&HashMap<String, usize>; 3]) -> Vec<WalkedFile> {
    if found.iter().all(|m| m.is_empty()) {
        return files;
    }
    let mut added = Vec::new();
    let mut known: std::collections::HashSet<&str> =
        files.iter().map(|f| f.path.as_str()).collect();
    for path in found.iter().flat_map(|m| m.keys()) {
        if known.insert(path.as_str())
            && let Ok(path) = RepoPath::parse_nonempty(path)
        {
            added.push(WalkedFile { path, size: 0 });
        }
    }
    files.extend(added);
    files
}

/// The workspace's files ranked for `file` by path alone, best first (score > 0 only).
pub(super) fn rank(
    file: &FileSpec,
    files: &[WalkedFile],
    imported: &[String],
    mentions: &HashMap<String, usize>,
    definitions: &HashMap<String, usize>,
    importers: &HashMap<String, usize>,
) -> Vec<(i64, RepoPath)> {
    let language = Language::from_path(file.path.as_str());
    let own_stem = stem(&file.path);
    let folder = file.path.parent();
    let own_stem = own_stem.to_ascii_lowercase();
    let top = file.path.components().next().unwrap_or_default().to_owned();
    let mut ranked: Vec<(i64, RepoPath)> = files
        .iter()
        .filter(|f| f.path != file.path && f.size <= MAP_MAX_FILE_BYTES)
        .filter_map(|f| {
            let path = f.path.as_str();
            let its_language = Language::from_path(path);
            if its_language == Language::Other {
                return None;
            }
            let mut score = 0_i64;
            if imported.iter().any(|i| module_names(i, path)) {
                score += 8;
            }
            let name = f.path.file_name();
            if own_stem.len() >= 2
                && contains_ignoring_case(name, "test")
                && contains_ignoring_case(name, &own_stem)
            {
                score += 6;
            }
            // Its users: the files whose import lines name it (the index's import graph), the
            // more lines the closer.
            if let Some(n) = importers.get(path) {
                score += 6 + (*n as i64).min(3);
            }
            if let Some(n) = mentions.get(path) {
                score += 4 + (*n as i64).min(3);
            }
            if let Some(n) = definitions.get(path) {
                score += 3 * (*n as i64).min(3);
            }
            if f.path.parent() == folder {
                score += 3;
            } else if !top.is_empty() && f.path.components().next() == Some(top.as_str()) {
                score += 1;
            }
            if its_language == language {
                score += 1;
            }
            (score > 1).then(|| (score, f.path.clone()))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ranked
}

/// Whether `haystack` holds `needle` (lowercase ASCII), whatever the case of its ASCII letters.
fn contains_ignoring_case(haystack: &str, needle: &str) -> bool {
    needle.is_empty()
        || haystack
            .as_bytes()
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The outlines, in order, that fit in `max_tokens` (the last one cut to fit, at a line).
pub(super) fn fit(files: impl Iterator<Item = ContextFile>, max_tokens: usize) -> Vec<ContextFile> {
    // Each file also costs its heading and fence, about 12 tokens.
    let mut left = max_tokens;
    let mut out = Vec::new();
    for mut f in files {
        let cost = tokens(&f.text) + tokens(&f.path) + 12;
        if cost <= left {
            left -= cost;
            out.push(f);
            continue;
        }
        let room = left.saturating_sub(tokens(&f.path) + 12) * 4;
        if room >= 200 {
            let cut = truncate_chars(&f.text, room).0;
            let at_line = cut.rfind('\n').map_or(cut, |i| &cut[..i]);
            f.text = at_line.to_owned();
            out.push(f);
        }
        break;
    }
    out
}

pub(super) use crate::search::imports_in;

/// A file's name without its extension.
pub(super) fn stem(path: &RepoPath) -> String {
    let name = path.file_name();
    name.rsplit_once('.').map_or(name, |(s, _)| s).to_owned()
}

/// The description's words worth matching against definitions (four letters or more).
pub(super) fn description_words(description: &str) -> Vec<String> {
    let mut words: Vec<String> = description
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 4)
        .map(str::to_lowercase)
        .collect();
    words.sort();
    words.dedup();
    words
}

/// How much the outline's definitions share words with the description: per line, the square of
/// the distinct description words it holds, so `normalize_invoice` outranks two lines holding
/// `normalize` and `invoice` apart when the description says "normalize the invoice".
#[cfg(test)]
pub(super) fn shared_words(outline: &str, words: &[String]) -> usize {
    line_parts(outline).shared_words(words)
}

/// Each line's identifier parts of four characters or more, lowercased, sorted and distinct: what
/// [`shared_words`] compares with a description's words. Kept with the outline in the cache, so
/// a map scoring 150 outlines for each file of each batch splits each outline once.
#[derive(Debug, Default)]
pub(super) struct LineParts(Vec<Box<[Box<str>]>>);

pub(super) fn line_parts(outline: &str) -> LineParts {
    let mut part = String::new();
    LineParts(
        outline
            .lines()
            .map(|line| {
                let mut parts: Vec<Box<str>> = Vec::new();
                for ident in line.split(|c: char| !c.is_alphanumeric() && c != '_') {
                    each_part(ident, &mut part, |p| {
                        if p.len() >= 4 {
                            parts.push(p.into());
                        }
                    });
                }
                parts.sort_unstable();
                parts.dedup();
                parts.into_boxed_slice()
            })
            .filter(|parts| !parts.is_empty())
            .collect(),
    )
}

impl LineParts {
    /// Σ over the lines of (distinct description words on the line)²; `words` sorted.
    pub(super) fn shared_words(&self, words: &[String]) -> usize {
        self.0
            .iter()
            .map(|parts| {
                let hits = parts
                    .iter()
                    .filter(|p| words.binary_search_by(|w| w.as_str().cmp(p)).is_ok())
                    .count();
                hits * hits
            })
            .sum()
    }
}

/// `apply_discount` / `applyDiscount` → `apply`, `discount`.
#[cfg(test)]
pub(super) fn split_identifier(ident: &str) -> Vec<String> {
    let mut parts = Vec::new();
    each_part(ident, &mut String::new(), |p| parts.push(p.to_owned()));
    parts
}

/// Calls `found` with each lowercased part of `ident` (see [`split_identifier`]), built in `part`.
fn each_part(ident: &str, part: &mut String, mut found: impl FnMut(&str)) {
    part.clear();
    let mut after_lower = false;
    for c in ident.chars() {
        if (c == '_' || (c.is_uppercase() && after_lower)) && !part.is_empty() {
            found(part);
            part.clear();
        }
        after_lower = c.is_lowercase() || c.is_ascii_digit();
        if c != '_' {
            part.extend(c.to_lowercase());
        }
    }
    if !part.is_empty() {
        found(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_searched_in_the_cases_identifiers_write_them() {
        assert_eq!(capitalized("tariff"), "Tariff");
        assert_eq!(capitalized("TARIFF"), "Tariff");
        assert_eq!(capitalized(""), "");
    }
}
