//! `[[models]]` in writ.toml, or `WRIT_MODEL_PROVIDERS` (a JSON array of the same objects): each
//! model id's provider — base URL, the variable holding its key, extra headers — and its prices
//! per million tokens. An id no entry names goes to the default provider (`OPENROUTER_BASE_URL`
//! with `OPENROUTER_API_KEY`), a `local/…` id to the embedded engine; an entry may price either.
//! Also `WRIT_UNPRICED_MODELS`: what becomes of a model whose provider reports no cost and that
//! has no price.
//!
//! Keys never go in the file: an entry names the variable (`api_key_env`), read from the
//! environment only, into a [`SecretString`].

use reqwest::header::{HeaderName, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};
use writ_local::{ModelPattern, ModelTable, Price};

use super::ConfigError;
use super::source::Get;

/// The variable `[[models]]` is read into.
pub const VARIABLE: &str = "WRIT_MODEL_PROVIDERS";

/// One remote provider: one client is made for each.
#[derive(Debug, Clone)]
pub struct Provider {
    /// API root, without a trailing `/`.
    pub base_url: String,
    /// The variable holding the key; `None`: no key is sent.
    pub key_var: Option<String>,
    /// `Debug` shows `[REDACTED]`.
    pub key: Option<SecretString>,
    /// Sorted by name, so that two entries naming the same headers share a client.
    pub headers: writ_models::ExtraHeaders,
    /// Whether calls without a key cannot succeed: OpenRouter itself, or an entry that names a
    /// key variable (a server that needs none is given none).
    pub key_required: bool,
}

impl Provider {
    /// OpenRouter puts each call's cost in its usage; other providers do not.
    pub fn reports_cost(&self) -> bool {
        is_openrouter(&self.base_url)
    }

    pub fn key_missing(&self) -> bool {
        self.key_required
            && self
                .key
                .as_ref()
                .is_none_or(|k| k.expose_secret().trim().is_empty())
    }

    /// Whether it is the same endpoint with the same credentials and headers.
    fn same_as(&self, other: &Provider) -> bool {
        self.base_url == other.base_url
            && self.key_var == other.key_var
            && self.headers == other.headers
    }
}

/// Whether `base_url` is OpenRouter's own API.
pub fn is_openrouter(base_url: &str) -> bool {
    reqwest::Url::parse(base_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|host| host == "openrouter.ai" || host.ends_with(".openrouter.ai"))
}

/// One `[[models]]` entry once read.
#[derive(Debug, Clone, Copy)]
pub struct ModelEntry {
    /// Which of [`Providers::remotes`]; `None`: the embedded engine (a `local/…` id).
    pub remote: Option<usize>,
    pub price: Option<Price>,
}

/// Every remote provider and which ids go to each.
#[derive(Debug, Clone)]
pub struct Providers {
    /// The first is the default provider.
    pub remotes: Vec<Provider>,
    pub models: ModelTable<ModelEntry>,
}

/// `WRIT_UNPRICED_MODELS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpriced {
    /// Counted by tokens only: their calls carry no cost, so token budgets bind and cost
    /// budgets do not see them.
    Tokens,
    /// Start-up fails naming each.
    Refuse,
}

impl Unpriced {
    pub(super) fn load(get: &Get<'_>) -> Result<Self, ConfigError> {
        match get("WRIT_UNPRICED_MODELS").as_deref().map(str::trim) {
            None | Some("tokens") => Ok(Self::Tokens),
            Some("refuse") => Ok(Self::Refuse),
            Some(other) => Err(ConfigError::Invalid {
                name: "WRIT_UNPRICED_MODELS",
                message: format!("'{other}' must be tokens or refuse"),
            }),
        }
    }
}

impl Providers {
    /// Reads `WRIT_MODEL_PROVIDERS` (or `[[models]]`) over `default`; the keys of the entries
    /// from `secrets`, the environment alone.
    pub(super) fn load(
        get: &Get<'_>,
        secrets: &Get<'_>,
        default: Provider,
    ) -> Result<Self, ConfigError> {
        let mut providers = Self {
            remotes: vec![default],
            models: ModelTable::default(),
        };
        let Some(raw) = get(VARIABLE) else {
            return Ok(providers);
        };
        let invalid = |message: String| ConfigError::Invalid {
            name: VARIABLE,
            message,
        };
        let items = match serde_json::from_str(&raw) {
            Ok(Value::Array(items)) => items,
            _ => {
                return Err(invalid(
                    "must be a JSON array of objects (in writ.toml, [[models]] tables)".into(),
                ));
            }
        };
        let mut entries: Vec<(ModelPattern, ModelEntry)> = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let at = |message: String| invalid(format!("[[models]] #{}: {message}", i + 1));
            let Value::Object(fields) = item else {
                return Err(at("must be a table (a JSON object)".into()));
            };
            let raw = RawEntry::read(fields).map_err(at)?;
            let (pattern, provider, price) = raw.check(secrets).map_err(at)?;
            if let Some(earlier) = entries.iter().position(|(p, _)| *p == pattern) {
                return Err(at(format!(
                    "id '{pattern}' is given by #{} already",
                    earlier + 1
                )));
            }
            let remote = match (pattern.is_local(), provider) {
                (true, _) => None,
                (false, None) => Some(0),
                (false, Some(provider)) => Some(providers.add(provider)),
            };
            entries.push((pattern, ModelEntry { remote, price }));
        }
        providers.models = ModelTable::new(entries);
        Ok(providers)
    }

    /// Its index; one client serves every entry naming the same provider.
    fn add(&mut self, provider: Provider) -> usize {
        match self.remotes.iter().position(|p| p.same_as(&provider)) {
            Some(i) => i,
            None => {
                self.remotes.push(provider);
                self.remotes.len() - 1
            }
        }
    }

    fn entry(&self, id: &str) -> Option<&ModelEntry> {
        self.models.entry_for(id, |e| e.remote.is_some())
    }

    /// The remote provider `id` goes to; `None` for an embedded id.
    pub fn remote_of(&self, id: &str) -> Option<usize> {
        if writ_local::is_local(id) {
            return None;
        }
        Some(self.entry(id).and_then(|e| e.remote).unwrap_or(0))
    }

    pub fn price_of(&self, id: &str) -> Option<Price> {
        self.entry(id).and_then(|e| e.price)
    }

    /// Whether a call for `id` carries its cost: its provider reports it, or writ prices it.
    pub fn costed(&self, id: &str) -> bool {
        self.price_of(id).is_some()
            || self
                .remote_of(id)
                .is_some_and(|i| self.remotes[i].reports_cost())
    }

    /// Where `id` goes, in words.
    pub fn describe(&self, id: &str) -> String {
        match self.remote_of(id) {
            Some(i) => self.remotes[i].base_url.clone(),
            None => "the embedded engine".into(),
        }
    }
}

/// An entry's fields as written, each checked for its type.
#[derive(Default)]
struct RawEntry {
    id: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    headers: Option<Vec<(String, String)>>,
    input_price: Option<f64>,
    output_price: Option<f64>,
    cached_input_price: Option<f64>,
}

const FIELDS: &str =
    "id, base_url, api_key_env, headers, input_price, output_price, cached_input_price";

impl RawEntry {
    fn read(fields: Map<String, Value>) -> Result<Self, String> {
        let mut raw = Self::default();
        for (field, value) in fields {
            let text = |value: Value| match value {
                Value::String(s) => Ok(s),
                _ => Err(format!("{field} must be a string")),
            };
            let price = |value: &Value| match value.as_f64() {
                Some(p) if p.is_finite() && p >= 0.0 => Ok(p),
                _ => Err(format!(
                    "{field} must be a number of at least 0 (per million tokens)"
                )),
            };
            match field.as_str() {
                "id" => raw.id = Some(text(value)?),
                "base_url" => raw.base_url = Some(text(value)?),
                "api_key_env" => raw.api_key_env = Some(text(value)?),
                "input_price" => raw.input_price = Some(price(&value)?),
                "output_price" => raw.output_price = Some(price(&value)?),
                "cached_input_price" => raw.cached_input_price = Some(price(&value)?),
                "headers" => {
                    let Value::Object(headers) = value else {
                        return Err("headers must be a table of names and string values".into());
                    };
                    raw.headers = Some(
                        headers
                            .into_iter()
                            .map(|(name, value)| match value {
                                Value::String(v) => Ok((name, v)),
                                _ => Err(format!("headers.{name} must be a string")),
                            })
                            .collect::<Result<_, _>>()?,
                    );
                }
                "api_key" | "key" => {
                    return Err(format!(
                        "`{field}`: a key never goes in the configuration; put it in an environment variable and name that variable in api_key_env"
                    ));
                }
                other => return Err(format!("unknown field `{other}` (the fields: {FIELDS})")),
            }
        }
        Ok(raw)
    }

    /// The entry's pattern, its provider (`None`: the default one, or the embedded engine) and
    /// its price.
    fn check(
        self,
        secrets: &Get<'_>,
    ) -> Result<(ModelPattern, Option<Provider>, Option<Price>), String> {
        let id = self.id.ok_or("id is missing")?;
        let pattern = ModelPattern::parse(&id)?;
        let price = match (self.input_price, self.output_price, self.cached_input_price) {
            (Some(input), Some(output), cached_input) => Some(Price {
                input,
                output,
                cached_input,
            }),
            (None, None, None) => None,
            (None, None, Some(_)) => {
                return Err("cached_input_price needs input_price and output_price".into());
            }
            _ => {
                return Err(
                    "input_price and output_price go together: give both, or neither".into(),
                );
            }
        };
        if pattern.is_local() {
            if let ModelPattern::Exact(id) = &pattern
                && writ_local::catalogue::find(id).is_none()
            {
                return Err(format!(
                    "'{id}' is not a model writ embeds ({})",
                    writ_local::catalogue::names()
                ));
            }
            for (field, given) in [
                ("base_url", self.base_url.is_some()),
                ("api_key_env", self.api_key_env.is_some()),
                ("headers", self.headers.is_some()),
            ] {
                if given {
                    return Err(format!(
                        "{field} must be absent: a local/… id is served by the embedded engine (an entry for it gives only a price)"
                    ));
                }
            }
            if price.is_none() {
                return Err(
                    "a local/… entry gives a price: input_price and output_price are missing"
                        .into(),
                );
            }
            return Ok((pattern, None, price));
        }
        let Some(base_url) = self.base_url else {
            for (field, given) in [
                ("api_key_env", self.api_key_env.is_some()),
                ("headers", self.headers.is_some()),
            ] {
                if given {
                    return Err(format!(
                        "{field} needs base_url (without one the model goes to the default provider, OPENROUTER_BASE_URL with OPENROUTER_API_KEY)"
                    ));
                }
            }
            if price.is_none() {
                return Err(
                    "gives neither base_url nor a price (input_price and output_price), so it changes nothing"
                        .into(),
                );
            }
            return Ok((pattern, None, price));
        };
        let base_url = check_base_url(&base_url)?;
        let key_var = self.api_key_env.map(check_key_var).transpose()?;
        let key = key_var
            .as_deref()
            .and_then(secrets)
            .filter(|k| !k.trim().is_empty())
            .map(SecretString::from);
        let mut headers = self.headers.unwrap_or_default();
        for (name, value) in &headers {
            check_header(name, value)?;
        }
        headers.sort();
        let key_required = key_var.is_some() || is_openrouter(&base_url);
        let provider = Provider {
            base_url,
            key_var,
            key,
            headers: writ_models::ExtraHeaders(headers),
            key_required,
        };
        Ok((pattern, Some(provider), price))
    }
}

/// An http(s) URL without credentials in it, without its trailing `/`.
fn check_base_url(raw: &str) -> Result<String, String> {
    let raw = raw.trim().trim_end_matches('/');
    // The value is not repeated: a URL that does not parse may still hold a password.
    let url = reqwest::Url::parse(raw).map_err(|_| "base_url must be an http(s) URL")?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "base_url must be an http(s) URL, not {}:",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "base_url must not carry credentials: put the key in an environment variable and name it in api_key_env"
                .into(),
        );
    }
    Ok(raw.to_owned())
}

/// The name of an environment variable, never a key.
fn check_key_var(name: String) -> Result<String, String> {
    let name = name.trim().to_owned();
    let is_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if is_name {
        Ok(name)
    } else {
        // Not repeated: this may be the key itself, written where its variable's name goes.
        Err("api_key_env must name the environment variable that holds the key (letters, digits and _), not hold the key".into())
    }
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("headers: '{name}' is not an HTTP header name"))?;
    if header == reqwest::header::AUTHORIZATION {
        return Err(
            "headers may not set Authorization: name the key's variable in api_key_env".into(),
        );
    }
    HeaderValue::from_str(value)
        .map_err(|_| format!("headers.{name}: the value cannot go into an HTTP header"))?;
    Ok(())
}

#[cfg(test)]
mod tests;
