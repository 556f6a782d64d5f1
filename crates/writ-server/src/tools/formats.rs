//! The tool registry as each provider's function declarations (`GET /tools?format=`).
//!
//! OpenAI and Anthropic take JSON Schema as it is. Gemini takes a subset (an OpenAPI 3.0
//! schema object): no `$ref`/`$defs`, no `additionalProperties`, no `const`/`oneOf`, one `type`
//! per schema with `nullable` for "or null", and only a few `format`s; [`gemini_schema`]
//! rewrites to it and drops the rest.

use serde_json::{Map, Value, json};

use super::ToolSpec;

/// Whose function declarations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    OpenAi,
    Anthropic,
    Gemini,
}

impl Format {
    pub const NAMES: [&'static str; 3] = ["openai", "anthropic", "gemini"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            "gemini" => Some(Self::Gemini),
            _ => None,
        }
    }
}

/// `tools` (the ones the server offers), declared for `format`.
pub fn declarations(
    format: Format,
    tools: impl Iterator<Item = &'static ToolSpec>,
) -> Declarations {
    let object = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    match format {
        Format::OpenAi => Declarations::List(
            tools
                .map(|t| {
                    object(json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.input_schema()}}))
                })
                .collect(),
        ),
        Format::Anthropic => Declarations::List(
            tools
                .map(|t| {
                    object(json!({"name": t.name, "description": t.description, "input_schema": t.input_schema()}))
                })
                .collect(),
        ),
        Format::Gemini => Declarations::Gemini {
            function_declarations: tools
                .map(|t| {
                    object(json!({"name": t.name, "description": t.description,
                        "parameters": gemini_schema(&t.input_schema())}))
                })
                .collect(),
        },
    }
}

/// `GET /tools`'s answer: a list for OpenAI and Anthropic, an object for Gemini.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Declarations {
    List(Vec<Map<String, Value>>),
    Gemini {
        #[serde(rename = "functionDeclarations")]
        function_declarations: Vec<Map<String, Value>>,
    },
}

/// Keys Gemini's schema object accepts and that mean the same as in JSON Schema.
const GEMINI_KEPT: [&str; 10] = [
    "description",
    "enum",
    "required",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "nullable",
];
/// The `format`s Gemini knows; others (schemars' `uint32`, …) are dropped.
const GEMINI_FORMATS: [&str; 5] = ["int32", "int64", "float", "double", "date-time"];

/// Rewrites a JSON Schema (subschemas already inlined) into Gemini's subset.
pub fn gemini_schema(schema: &Value) -> Value {
    let Some(map) = schema.as_object() else {
        // `true` (anything): the closest Gemini has is an object with no properties described.
        return json!({"type": "object"});
    };
    let mut out = Map::new();
    match map.get("type") {
        Some(Value::String(t)) if t != "null" => {
            out.insert("type".into(), json!(t));
        }
        Some(Value::Array(types)) => {
            let real: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
            if real.len() < types.len() {
                out.insert("nullable".into(), json!(true));
            }
            match real.as_slice() {
                [one] => {
                    out.insert("type".into(), (*one).clone());
                }
                several => {
                    out.insert(
                        "anyOf".into(),
                        Value::Array(several.iter().map(|t| json!({"type": t})).collect()),
                    );
                }
            }
        }
        _ => {}
    }
    for (key, value) in map {
        match key.as_str() {
            k if GEMINI_KEPT.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            "format" if value.as_str().is_some_and(|f| GEMINI_FORMATS.contains(&f)) => {
                out.insert(key.clone(), value.clone());
            }
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "properties" => {
                let props: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), gemini_schema(v)))
                    .collect();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" => {
                out.insert(key.clone(), gemini_schema(value));
            }
            "anyOf" | "oneOf" => merge_alternatives(&mut out, value),
            _ => {}
        }
    }
    // Gemini's enums are strings only; a `null` among them becomes `nullable`.
    if let Some(Value::Array(values)) = out.get_mut("enum")
        && values.iter().any(Value::is_null)
    {
        values.retain(|v| !v.is_null());
        out.insert("nullable".into(), json!(true));
    }
    Value::Object(out)
}

/// `anyOf: [X, {type: null}]` (how an `Option` is written) becomes X with `nullable`; other
/// alternatives stay as Gemini's `anyOf`.
fn merge_alternatives(out: &mut Map<String, Value>, alternatives: &Value) {
    let all = alternatives.as_array().cloned().unwrap_or_default();
    let real: Vec<&Value> = all.iter().filter(|s| s["type"] != "null").collect();
    if real.len() < all.len() {
        out.insert("nullable".into(), json!(true));
    }
    match real.as_slice() {
        [one] => {
            if let Value::Object(inner) = gemini_schema(one) {
                for (k, v) in inner {
                    // The outer schema's own description wins over the inner type's.
                    out.entry(k).or_insert(v);
                }
            }
        }
        several => {
            out.insert(
                "anyOf".into(),
                Value::Array(several.iter().map(|s| gemini_schema(s)).collect()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn an_option_becomes_nullable_and_refs_and_extras_go() {
        let s = json!({"type": "object", "additionalProperties": false,
        "properties": {
            "a": {"type": ["string", "null"], "default": null, "description": "d"},
            "b": {"anyOf": [{"type": "object", "properties": {"w": {"type": "integer", "format": "uint32", "minimum": 0}}}, {"type": "null"}]},
            "c": {"const": "x", "type": "string"},
            "d": {"anyOf": [{"type": "string", "enum": ["all"]}, {"type": "integer"}]}
        }});
        let g = gemini_schema(&s);
        assert_eq!(
            g,
            json!({"type": "object", "properties": {
                "a": {"type": "string", "nullable": true, "description": "d"},
                "b": {"type": "object", "nullable": true, "properties": {"w": {"type": "integer", "minimum": 0}}},
                "c": {"type": "string", "enum": ["x"]},
                "d": {"anyOf": [{"type": "string", "enum": ["all"]}, {"type": "integer"}]}
            }})
        );
    }
}
