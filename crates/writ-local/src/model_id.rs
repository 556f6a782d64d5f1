//! Local model ids: `local/<name>` with optional sampling settings after `@`
//! (`local/qwen2.5-coder-1.5b@t0.7,s2`), so one embedded model can be listed several times in
//! `CODE_LIST` and give distinct candidates. The names are those of [`crate::catalogue`].

/// The prefix that routes a model id to the embedded provider; no OpenRouter id starts with it.
pub const LOCAL_PREFIX: &str = "local/";

/// The model writ serves when nothing else is configured: small, fetched on first use.
pub const DEFAULT_MODEL: &str = "local/smollm2-135m";

/// Whether `model` is served by the embedded provider.
pub fn is_local(model: &str) -> bool {
    model.starts_with(LOCAL_PREFIX)
}

/// A parsed local model id.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalModelId {
    /// The id without its `@…` settings, e.g. `local/smollm2-135m`.
    pub base: String,
    /// Overrides the request's temperature: that is what makes two listings of one model differ.
    pub temperature: Option<f32>,
    /// Overrides the request's seed.
    pub seed: Option<u64>,
}

impl LocalModelId {
    /// Parses `local/<name>[@t<temperature>][,s<seed>]`; the error names the offending part.
    pub fn parse(model: &str) -> Result<Self, String> {
        if !is_local(model) {
            return Err(format!("'{model}' is not a local model id (local/…)"));
        }
        let (base, settings) = match model.split_once('@') {
            Some((b, s)) => (b, Some(s)),
            None => (model, None),
        };
        let mut id = LocalModelId {
            base: base.to_string(),
            temperature: None,
            seed: None,
        };
        for part in settings.into_iter().flat_map(|s| s.split(',')) {
            let part = part.trim();
            if let Some(t) = part.strip_prefix('t') {
                let t: f32 = t
                    .parse()
                    .ok()
                    .filter(|t: &f32| (0.0..=2.0).contains(t))
                    .ok_or_else(|| {
                        format!("'{model}': temperature '{t}' must be a number from 0 to 2")
                    })?;
                id.temperature = Some(t);
            } else if let Some(s) = part.strip_prefix('s') {
                id.seed = Some(
                    s.parse()
                        .map_err(|_| format!("'{model}': seed '{s}' must be a whole number"))?,
                );
            } else {
                return Err(format!(
                    "'{model}': unknown setting '{part}' (use t<temperature> and s<seed>, e.g. @t0.7,s2)"
                ));
            }
        }
        Ok(id)
    }
}

/// The candidates writ uses when nothing else is configured: one embedded model, three sampling
/// settings, so fan-out, de-duplication and the arbiter all have something to work with.
pub fn default_candidates() -> Vec<String> {
    ["@t0.2,s1", "@t0.6,s2", "@t0.9,s3"]
        .iter()
        .map(|s| format!("{DEFAULT_MODEL}{s}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_id_has_no_settings() {
        let id = LocalModelId::parse("local/smollm2-135m").unwrap();
        assert_eq!(id.base, DEFAULT_MODEL);
        assert_eq!((id.temperature, id.seed), (None, None));
    }

    #[test]
    fn temperature_and_seed_follow_the_at_sign() {
        let id = LocalModelId::parse("local/smollm2-135m@t0.7,s42").unwrap();
        assert_eq!(id.base, DEFAULT_MODEL);
        assert_eq!(id.temperature, Some(0.7));
        assert_eq!(id.seed, Some(42));
    }

    #[test]
    fn a_bad_setting_is_named() {
        let err = LocalModelId::parse("local/smollm2-135m@t9").unwrap_err();
        assert!(err.contains("temperature '9'"), "{err}");
        let err = LocalModelId::parse("local/smollm2-135m@x1").unwrap_err();
        assert!(err.contains("unknown setting 'x1'"), "{err}");
        assert!(LocalModelId::parse("openai/gpt-4.1").is_err());
    }

    #[test]
    fn the_default_candidates_are_distinct_local_ids() {
        let c = default_candidates();
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|m| is_local(m)));
        let temps: Vec<_> = c
            .iter()
            .map(|m| LocalModelId::parse(m).unwrap().temperature)
            .collect();
        assert_eq!(temps, vec![Some(0.2), Some(0.6), Some(0.9)]);
    }
}
