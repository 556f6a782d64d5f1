//! The model table (`[[models]]`): which entry a model id falls under, and what a call costs at
//! an entry's prices. The configuration reads it to say which provider serves a model and
//! whether it has a price; the `RoutingClient` reads the same table to
//! send and price each call, so the two cannot disagree.

use writ_core::model::Usage;

use crate::model_id::{LOCAL_PREFIX, is_local};

/// An entry's `id`: a model id, or a prefix ending in `*` (`"openai/*"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelPattern {
    Exact(String),
    Prefix(String),
}

impl ModelPattern {
    /// `Err` says what is wrong, for the caller to name the entry.
    pub fn parse(id: &str) -> Result<Self, String> {
        let id = id.trim();
        if id.is_empty() {
            return Err("id must not be empty".into());
        }
        match id.strip_suffix('*') {
            Some(prefix) if !prefix.contains('*') => Ok(Self::Prefix(prefix.to_owned())),
            _ if id.contains('*') => Err(format!(
                "id '{id}': `*` may only end an id, as in \"openai/*\""
            )),
            _ => Ok(Self::Exact(id.to_owned())),
        }
    }

    /// How closely `id` falls under this pattern; `None` when it does not. The id itself beats
    /// the id without its sampling settings (`local/qwen2.5-coder-1.5b` for
    /// `local/qwen2.5-coder-1.5b@t0.8,s1`), which beats every prefix; a longer prefix beats a
    /// shorter one.
    fn rank(&self, id: &str) -> Option<usize> {
        match self {
            Self::Exact(exact) if exact == id => Some(usize::MAX),
            Self::Exact(exact) => id
                .split_once('@')
                .is_some_and(|(base, _)| base == exact)
                .then_some(usize::MAX - 1),
            Self::Prefix(prefix) => id.starts_with(prefix.as_str()).then_some(prefix.len()),
        }
    }

    /// Whether every id this pattern can match is an embedded (`local/…`) one.
    pub fn is_local(&self) -> bool {
        match self {
            Self::Exact(id) => is_local(id),
            Self::Prefix(prefix) => prefix.starts_with(LOCAL_PREFIX),
        }
    }
}

impl std::fmt::Display for ModelPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(id) => f.write_str(id),
            Self::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// Prices per million tokens, in the provider's billing currency (what budgets count in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Prompt tokens served from the provider's cache; `None`: billed as `input`.
    pub cached_input: Option<f64>,
}

impl Price {
    /// What a call with `usage` cost; `None` when the provider counted no tokens at all.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        if usage.prompt_tokens.is_none() && usage.completion_tokens.is_none() {
            return None;
        }
        let prompt = usage.prompt_tokens.unwrap_or(0);
        let cached = usage.cached_tokens.unwrap_or(0).min(prompt);
        let completion = usage.completion_tokens.unwrap_or(0);
        let micro = (prompt - cached) as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + completion as f64 * self.output;
        Some(micro / 1_000_000.0)
    }
}

/// Entries by pattern, each id under its closest one.
#[derive(Debug, Clone)]
pub struct ModelTable<T> {
    entries: Vec<(ModelPattern, T)>,
}

impl<T> Default for ModelTable<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<T> ModelTable<T> {
    pub fn new(entries: Vec<(ModelPattern, T)>) -> Self {
        Self { entries }
    }

    /// The entry `id` falls under. An embedded (`local/…`) id is always served by the embedded
    /// engine, so it falls only under entries that name no provider (`names_provider` false):
    /// a `"*"` that sends everything else to a vLLM server does not take it away.
    pub fn entry_for(&self, id: &str, names_provider: impl Fn(&T) -> bool) -> Option<&T> {
        let local = is_local(id);
        self.entries
            .iter()
            .filter(|(_, entry)| !(local && names_provider(entry)))
            .filter_map(|(pattern, entry)| pattern.rank(id).map(|rank| (rank, entry)))
            // The first of equals: the configuration refuses two entries with one id.
            .fold(
                None,
                |best: Option<(usize, &T)>, (rank, entry)| match best {
                    Some((best_rank, _)) if best_rank >= rank => best,
                    _ => Some((rank, entry)),
                },
            )
            .map(|(_, entry)| entry)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ModelPattern, &T)> {
        self.entries.iter().map(|(p, e)| (p, e))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(ids: &[&str]) -> ModelTable<(String, bool)> {
        ModelTable::new(
            ids.iter()
                .map(|id| {
                    let remote = !id.starts_with("local/");
                    (ModelPattern::parse(id).unwrap(), (id.to_string(), remote))
                })
                .collect(),
        )
    }

    fn entry(t: &ModelTable<(String, bool)>, id: &str) -> Option<String> {
        t.entry_for(id, |(_, remote)| *remote)
            .map(|(p, _)| p.clone())
    }

    #[test]
    fn the_exact_id_beats_a_prefix_and_a_longer_prefix_a_shorter_one() {
        let t = table(&["*", "openai/*", "openai/gpt-4*", "openai/gpt-4.1"]);
        assert_eq!(
            entry(&t, "openai/gpt-4.1").as_deref(),
            Some("openai/gpt-4.1")
        );
        assert_eq!(entry(&t, "openai/gpt-4o").as_deref(), Some("openai/gpt-4*"));
        assert_eq!(entry(&t, "openai/o3").as_deref(), Some("openai/*"));
        assert_eq!(entry(&t, "mistral/x").as_deref(), Some("*"));
        assert_eq!(entry(&table(&["openai/*"]), "anthropic/x"), None);
    }

    #[test]
    fn an_embedded_id_falls_only_under_entries_that_name_no_provider() {
        let t = table(&["*", "local/smollm2-135m"]);
        assert_eq!(
            entry(&t, "local/smollm2-135m@t0.8,s1").as_deref(),
            Some("local/smollm2-135m"),
            "its sampling settings do not make it another model"
        );
        assert_eq!(
            entry(&t, "local/gemma-3-270m"),
            None,
            "`*` names a provider"
        );
    }

    #[test]
    fn a_star_may_only_end_an_id() {
        assert_eq!(
            ModelPattern::parse("openai/*"),
            Ok(ModelPattern::Prefix("openai/".into()))
        );
        assert!(ModelPattern::parse("*/gpt").is_err());
        assert!(ModelPattern::parse("a**").is_err());
        assert!(ModelPattern::parse(" ").is_err());
        assert_eq!(
            ModelPattern::parse("openai/*").unwrap().to_string(),
            "openai/*"
        );
    }

    #[test]
    fn a_call_costs_its_uncached_cached_and_completion_tokens_at_their_prices() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cached_input: Some(0.3),
        };
        let usage = Usage {
            prompt_tokens: Some(1_000),
            completion_tokens: Some(200),
            cached_tokens: Some(400),
            cost: None,
        };
        let want = (600.0 * 3.0 + 400.0 * 0.3 + 200.0 * 15.0) / 1e6;
        assert!((price.cost(&usage).unwrap() - want).abs() < 1e-12);
        let uncached = Price {
            cached_input: None,
            ..price
        };
        let want = (1_000.0 * 3.0 + 200.0 * 15.0) / 1e6;
        assert!((uncached.cost(&usage).unwrap() - want).abs() < 1e-12);
        assert_eq!(price.cost(&Usage::default()), None);
    }
}
