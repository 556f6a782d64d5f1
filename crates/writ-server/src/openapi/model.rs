//! The objects of an OpenAPI 3.0 document that the generator builds, as types: an operation,
//! its parameters, body and answers. Schemas inside them are the ones schemars derives
//! ([`super::Schemas`]); nothing here is written as JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// What the document says of one operation (`paths.<path>.<method>`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    pub operation_id: &'static str,
    pub summary: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<&'static str>,
    /// The scope a key needs (writ's extension).
    #[serde(rename = "x-writ-scope", skip_serializing_if = "Option::is_none")]
    pub scope: Option<&'static str>,
    /// Absent: the document's own (a key). `[]`: open. `[{}, {bearer: []}]`: a key is optional.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security: Option<Vec<BTreeMap<&'static str, Vec<String>>>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<Parameter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_body: Option<RequestBody>,
    pub responses: BTreeMap<String, Answer>,
}

/// Where a parameter is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Location {
    Path,
    Query,
    Header,
}

#[derive(Debug, Serialize)]
pub struct Parameter {
    pub name: String,
    #[serde(rename = "in")]
    pub location: Location,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub schema: Value,
}

#[derive(Debug, Serialize)]
pub struct RequestBody {
    pub required: bool,
    pub content: BTreeMap<&'static str, MediaType>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MediaType {
    pub schema: Value,
}

/// One answer of an operation: written out, or a reference to one of `components.responses`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Answer {
    Shared {
        #[serde(rename = "$ref")]
        reference: String,
    },
    Inline(Response),
}

impl Answer {
    /// `components.responses.<name>`.
    pub fn shared(name: &str) -> Self {
        Answer::Shared {
            reference: format!("#/components/responses/{name}"),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Response {
    pub description: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Header>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub content: BTreeMap<&'static str, MediaType>,
}

impl Response {
    pub fn new(description: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            headers: BTreeMap::new(),
            content: BTreeMap::new(),
        }
    }

    /// A body of `media` shaped as `schema`.
    pub fn content(mut self, media: &'static str, schema: Value) -> Self {
        self.content.insert(media, MediaType { schema });
        self
    }

    pub fn json(self, schema: Value) -> Self {
        self.content(JSON, schema)
    }

    /// The headers an answer carries, as [`super::Schemas::headers`] reads them from a type.
    pub fn headers(mut self, headers: BTreeMap<String, Header>) -> Self {
        self.headers.extend(headers);
        self
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Header {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    pub schema: Value,
}

pub const JSON: &str = "application/json";

/// `info`.
#[derive(Debug, Serialize)]
pub struct Info {
    pub title: &'static str,
    pub version: &'static str,
    pub description: &'static str,
}

/// `components.securitySchemes.<name>`: an HTTP scheme.
#[derive(Debug, Serialize)]
pub struct SecurityScheme {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub scheme: &'static str,
    pub description: &'static str,
}

/// A schema that is any of several (a tool-call refusal is also a valid error body).
#[derive(Debug, Serialize)]
pub struct AnyOf {
    #[serde(rename = "anyOf")]
    pub any_of: Vec<Value>,
}
