//! Where settings come from: the environment, over an optional `writ.toml` whose keys are the
//! same names in lower case. The environment wins; an empty variable counts as unset.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::ConfigError;

/// A lookup by variable name over both layers.
pub type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The file's values (lower-case keys) and which file was read. `path` wins; else `WRIT_CONFIG`;
/// else `./writ.toml` when it exists.
pub(super) fn read_layers(
    path: Option<&Path>,
    env: &Get<'_>,
) -> Result<(HashMap<String, String>, Option<PathBuf>), ConfigError> {
    let chosen = path.map(Path::to_path_buf).or_else(|| {
        env("WRIT_CONFIG").map(PathBuf::from).or_else(|| {
            let default = PathBuf::from("writ.toml");
            default.exists().then_some(default)
        })
    });
    let Some(path) = chosen else {
        return Ok((HashMap::new(), None));
    };
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let mut values = HashMap::new();
    for (k, v) in table {
        let s = match v {
            toml::Value::String(s) => s,
            toml::Value::Array(items) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| i.to_string())
                })
                .collect::<Vec<_>>()
                .join(","),
            // A table (`[commands]`) is read as the JSON its variable would hold.
            toml::Value::Table(t) => serde_json::to_string(&t).unwrap_or_default(),
            other => other.to_string(),
        };
        values.insert(k.to_ascii_lowercase(), s);
    }
    Ok((values, Some(path)))
}

/// A whole number, or `default` when unset; a bad value names its variable.
pub fn parse_num(get: &Get<'_>, name: &'static str, default: usize) -> Result<usize, ConfigError> {
    match get(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
            name,
            message: format!("'{v}' is not a whole number"),
        }),
    }
}

/// A whole number of at least 1, or `default` when unset; 0 or a bad value names its variable.
pub fn parse_positive(
    get: &Get<'_>,
    name: &'static str,
    default: usize,
) -> Result<usize, ConfigError> {
    match parse_num(get, name, default)? {
        0 => Err(ConfigError::Invalid {
            name,
            message: "must be at least 1".into(),
        }),
        n => Ok(n),
    }
}

/// A comma-separated list, blanks dropped.
pub fn parse_list(get: &Get<'_>, name: &str) -> Vec<String> {
    get(name)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}
