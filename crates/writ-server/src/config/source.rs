//! Where settings come from: the environment, over an optional `writ.toml` whose keys are the
//! declared settings' file keys (the variable's name in lower case, [`declared`]). The
//! environment wins; an empty variable counts as unset. A key the declaration does not know, or
//! a value of the wrong type, stops start-up naming the key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::ConfigError;
use super::declared::{self, InFile, Kind, Setting};

/// A lookup by variable name over both layers.
pub type Get<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// What `writ.toml` gave, by variable name, and which file was read.
#[derive(Debug, Default)]
pub struct FileLayer {
    values: HashMap<&'static str, String>,
    pub path: Option<PathBuf>,
}

impl FileLayer {
    /// The value the file gave `name`, as its variable would hold it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Reads `path`; else `WRIT_CONFIG`; else `./writ.toml` when it exists; else nothing.
    pub fn read(path: Option<&Path>, env: &Get<'_>) -> Result<Self, ConfigError> {
        let chosen = path.map(Path::to_path_buf).or_else(|| {
            env("WRIT_CONFIG")
                .filter(|p| !p.trim().is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    let default = PathBuf::from("writ.toml");
                    default.exists().then_some(default)
                })
        });
        let Some(path) = chosen else {
            return Ok(Self::default());
        };
        let refuse = |message: String| ConfigError::File {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| refuse(e.to_string()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| refuse(e.to_string()))?;
        let mut values = HashMap::new();
        for (key, value) in table {
            let setting = declared::find_in_file(&key).ok_or_else(|| refuse(unknown_key(&key)))?;
            let value = as_variable(setting, value).map_err(|expected| {
                refuse(format!(
                    "`{key}` must be {expected} ({}: {})",
                    setting.name,
                    setting.kind.describe()
                ))
            })?;
            values.insert(setting.name, value);
        }
        Ok(Self {
            values,
            path: Some(path),
        })
    }
}

/// Why `key` is not a `writ.toml` key, and what to write instead.
fn unknown_key(key: &str) -> String {
    let upper = key.to_ascii_uppercase();
    match declared::find(&upper) {
        Some(setting) => match setting.in_file {
            InFile::No(why) => format!(
                "`{key}` cannot be given in writ.toml ({why}): set {} in the environment",
                setting.name
            ),
            InFile::Key(file_key) => format!("`{key}` is written `{file_key}` in writ.toml"),
            InFile::Lower => format!(
                "`{key}` is written `{}` in writ.toml (the variable's name in lower case)",
                upper.to_ascii_lowercase()
            ),
        },
        None => format!(
            "`{key}` is not a setting writ knows (docs/configuration.md lists every one; a key is the variable's name in lower case)"
        ),
    }
}

/// A TOML value as the variable would hold it; `Err` says what the setting expects.
fn as_variable(setting: &Setting, value: toml::Value) -> Result<String, &'static str> {
    use toml::Value as V;
    match (setting.kind, value) {
        (_, V::String(s)) => Ok(s),
        (Kind::Switch, V::Boolean(b)) => Ok(b.to_string()),
        (Kind::Whole, V::Integer(n)) if n >= 0 => Ok(n.to_string()),
        (Kind::Whole, _) => Err("a whole number"),
        (Kind::Decimal, V::Integer(n)) => Ok(n.to_string()),
        (Kind::Decimal, V::Float(f)) => Ok(f.to_string()),
        (Kind::List, V::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                V::String(s) => Ok(s),
                _ => Err("an array of strings"),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|items| items.join(",")),
        // A table is read as the JSON object its variable would hold.
        (Kind::Json, V::Table(table)) => {
            serde_json::to_string(&table).map_err(|_| "a table of strings and arrays")
        }
        // An array of tables (`[[models]]`) is read as the JSON array its variable would hold.
        (Kind::Tables, V::Array(items)) if items.iter().all(V::is_table) => {
            serde_json::to_string(&items).map_err(|_| "an array of tables")
        }
        (Kind::Switch, _) => Err("true or false"),
        (Kind::List, _) => Err("an array of strings"),
        (Kind::Json, _) => Err("a table"),
        (Kind::Tables, _) => Err("an array of tables"),
        _ => Err("a string"),
    }
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

/// `true`/`1`/`on` or `false`/`0`/`off`, or `default` when unset; anything else names its
/// variable.
pub fn parse_switch(get: &Get<'_>, name: &'static str, default: bool) -> Result<bool, ConfigError> {
    match get(name).as_deref().map(str::trim) {
        None => Ok(default),
        Some(v)
            if ["true", "1", "on"]
                .iter()
                .any(|w| v.eq_ignore_ascii_case(w)) =>
        {
            Ok(true)
        }
        Some(v)
            if ["false", "0", "off"]
                .iter()
                .any(|w| v.eq_ignore_ascii_case(w)) =>
        {
            Ok(false)
        }
        Some(other) => Err(ConfigError::Invalid {
            name,
            message: format!("'{other}' is not true or false (1 or 0, on or off)"),
        }),
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
