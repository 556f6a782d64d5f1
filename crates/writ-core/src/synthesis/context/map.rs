//! The repository map: the workspace's files ranked by how they relate to the file being written
//! (its imports, the files that import it — the workspace index's import graph —, the files that
//! mention it, its tests, its folder, definitions named with the description's words), outlined,
//! and fitted to a token budget.

use super::*;
use futures::future::join_all;

use crate::search::{Freshness, MapQuery, SearchError, SearchQuery, SearchResults, module_names};

/// The repository map of `file`: the outlines of the workspace's files most related to it, best
/// first, within `max_tokens`, and how many changes the workspace's index was still applying when
/// it answered (the map does not wait for them). `seen`: paths the prompt shows anyway, left out.
pub async fn repo_map(
    workspace: &dyn Workspace,
    map_walk: &MapWalk,
    batch: &Batch,
    file: &FileSpec,
    seen: &[String],
    current: Option<&str>,
    max_tokens: usize,
) -> (Vec<ContextFile>, u64) {
    let imported = imported_modules(batch, file, current);
    let query = MapQuery {
        path: file.path.clone(),
        modules: imported.clone(),
        exclude: batch.files().iter().map(|f| f.path.clone()).collect(),
        fill: MAP_CANDIDATES,
    };
    let words = description_words(&file.description);
    let searches = MapSearches::new(file, &words);
    // From the index: the files that may rank, found by look-ups, and the two searches, in one
    // go; without one (or before it is current), the walk, once a batch, and the searches.
    let mut pending = 0;
    let (files, importers, contents, found) =
        match workspace.map_lookups(&query, searches.queries()).await {
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
                let walked = map_walk
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
    let mut scored: Vec<(i64, RepoPath, std::sync::Arc<super::Outline>)> = Vec::new();
    for (score, path) in ranked.into_iter().take(MAP_CANDIDATES) {
        if seen.iter().any(|s| s == path.as_str()) {
            continue;
        }
        let Some(outline) = outline_of(workspace, &path, contents.get(path.as_str())).await else {
            continue;
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
        scored.into_iter().map(|(_, path, outline)| ContextFile {
            path: path.to_string(),
            text: outline.text.clone(),
            outline: true,
        }),
        max_tokens,
    );
    let pending = if map.is_empty() { 0 } else { pending };
    (map, pending)
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
                if defined_name(&m.line).is_some_and(|name| {
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

/// Keywords that begin a definition, in the languages writ outlines.
const DEFINING: &[&str] = &[
    "def",
    "class",
    "fn",
    "function",
    "func",
    "const",
    "let",
    "var",
    "static",
    "struct",
    "enum",
    "trait",
    "type",
    "interface",
];

/// The name a line defines: `def name`, `class Name`, `pub fn name`, `export const name`, … (after
/// optional `export`, `pub`/`pub(...)` and `async`), or a constant written in capitals at the
/// start of a line (`MAX_RETRIES = 3`, `TIMEOUT: int = 5`).
fn defined_name(line: &str) -> Option<&str> {
    if line.starts_with(|c: char| c.is_ascii_uppercase()) {
        let (name, rest) = line.split_at(identifier_end(line));
        if name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && rest.trim_start().starts_with([':', '='])
        {
            return Some(name);
        }
    }
    let mut rest = line.trim_start();
    // `export`, `pub` (or `pub(crate)`) and `async` may come before the keyword.
    for _ in 0..4 {
        let (word, after) = rest.split_at(identifier_end(rest));
        let after = if word == "pub" && after.starts_with('(') {
            &after[after.find(')')? + 1..]
        } else {
            after
        };
        if !after.starts_with(char::is_whitespace) {
            return None;
        }
        rest = after.trim_start();
        match word {
            "export" | "pub" | "async" => {}
            w if DEFINING.contains(&w) => {
                let name = &rest[..identifier_end(rest)];
                return (!name.is_empty()).then_some(name);
            }
            _ => return None,
        }
    }
    None
}

fn identifier_end(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
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
    let mut known: std::collections::HashSet<String> =
        files.iter().map(|f| f.path.as_str().to_owned()).collect();
    for path in found.iter().flat_map(|m| m.keys()) {
        if known.insert(path.clone())
            && let Ok(path) = RepoPath::parse_nonempty(path)
        {
            files.push(WalkedFile { path, size: 0 });
        }
    }
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
    let top = file.path.components().next().unwrap_or_default().to_owned();
    let mut ranked: Vec<(i64, RepoPath)> = files
        .iter()
        .filter(|f| f.path != file.path && f.size <= MAP_MAX_FILE_BYTES)
        .filter(|f| Language::from_path(f.path.as_str()) != Language::Other)
        .filter_map(|f| {
            let path = f.path.as_str();
            let mut score = 0_i64;
            if imported.iter().any(|i| module_names(i, path)) {
                score += 8;
            }
            let name = f.path.file_name().to_ascii_lowercase();
            if own_stem.len() >= 2
                && name.contains("test")
                && name.contains(&own_stem.to_ascii_lowercase())
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
            if Language::from_path(path) == language {
                score += 1;
            }
            (score > 1).then(|| (score, f.path.clone()))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ranked
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
    fn a_definition_line_names_what_it_defines_and_a_use_names_nothing() {
        for (line, name) in [
            ("def apply_discount(order):", Some("apply_discount")),
            ("    async def fetch_tariffs():", Some("fetch_tariffs")),
            ("class TariffSchedule(Base):", Some("TariffSchedule")),
            ("pub(crate) fn parse_order(s: &str) {", Some("parse_order")),
            ("pub async fn load() {", Some("load")),
            ("export const maxRetries = 3;", Some("maxRetries")),
            ("export function computeTariff(x) {", Some("computeTariff")),
            ("MAX_DISCOUNT = 0.5", Some("MAX_DISCOUNT")),
            ("TIMEOUT: int = 5", Some("TIMEOUT")),
            ("    total = apply_discount(order)", None),
            ("# def apply_discount is below", None),
            ("return TariffSchedule()", None),
            ("Tariff = load()", None),
            ("MAX_DISCOUNT + 1", None),
            ("def", None),
            ("define_tariff(x)", None),
        ] {
            assert_eq!(defined_name(line), name, "{line}");
        }
    }

    #[test]
    fn words_are_searched_in_the_cases_identifiers_write_them() {
        assert_eq!(capitalized("tariff"), "Tariff");
        assert_eq!(capitalized("TARIFF"), "Tariff");
        assert_eq!(capitalized(""), "");
    }
}
