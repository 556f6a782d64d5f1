//! [`Op`]: one route's entry, and how it becomes the document's operation together with what the
//! route table and the handler's arguments say. The error answers are never listed by status:
//! an entry names the [`ErrorCode`]s its route answers, its body and its handler's extractors add
//! theirs, the route's access adds the auth layer's, and each is listed under its
//! status ([`ErrorCode::status`]), and under another where the entry says it is answered so too.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::inputs::Inputs;
use super::model::{Answer, AnyOf, JSON, MediaType, Operation, RequestBody, Response};
use crate::access::Access;
use crate::error::ErrorCode;

/// The document's default security: a key. An operation that says nothing needs one.
pub(super) const KEY_REQUIRED: [(&str, [&str; 0]); 1] = [("bearer", [])];

/// What the document says of one operation beyond the route table and the handler's arguments.
pub struct Op {
    id: &'static str,
    summary: &'static str,
    description: Option<&'static str>,
    body: Option<RequestBody>,
    answers: BTreeMap<String, Answer>,
    /// The codes this route answers at their own status; `moved`, those it also answers at
    /// another.
    faults: Vec<ErrorCode>,
    moved: Vec<(ErrorCode, u16)>,
    /// The schema of an error answer's body: writ's error body unless the route wraps it.
    error_body: Option<Value>,
}

impl Op {
    pub fn new(id: &'static str, summary: &'static str) -> Self {
        Self {
            id,
            summary,
            description: None,
            body: None,
            answers: BTreeMap::new(),
            faults: Vec::new(),
            moved: Vec::new(),
            error_body: None,
        }
    }

    pub fn description(mut self, text: &'static str) -> Self {
        self.description = Some(text);
        self
    }

    /// A required JSON body of this schema: refused as `invalid_body` when it is not that shape,
    /// `body_too_large` past the limit.
    pub fn json_body(self, schema: Value) -> Self {
        self.body(true, &[(JSON, schema)])
            .errors(&[ErrorCode::InvalidBody])
    }

    /// A JSON body of this schema that may be left out.
    pub fn optional_json_body(self, schema: Value) -> Self {
        self.body(false, &[(JSON, schema)])
            .errors(&[ErrorCode::InvalidBody])
    }

    /// A required body sent as it is, in any of these media types.
    pub fn raw_body(self, media: &[(&'static str, Value)]) -> Self {
        self.body(true, media)
    }

    fn body(mut self, required: bool, media: &[(&'static str, Value)]) -> Self {
        self.body = Some(RequestBody {
            required,
            content: media
                .iter()
                .map(|(m, schema)| {
                    (
                        *m,
                        MediaType {
                            schema: schema.clone(),
                        },
                    )
                })
                .collect(),
        });
        self.errors(&[ErrorCode::BodyTooLarge])
    }

    /// An answer with a JSON body of this schema.
    pub fn json(self, status: u16, description: &str, schema: Value) -> Self {
        self.answer(status, Response::new(description).json(schema))
    }

    pub fn answer(mut self, status: u16, response: Response) -> Self {
        self.answers
            .insert(status.to_string(), Answer::Inline(response));
        self
    }

    /// An answer described once in `components.responses` (`default` for any status).
    pub fn shared(mut self, status: &str, name: &str) -> Self {
        self.answers.insert(status.to_owned(), Answer::shared(name));
        self
    }

    /// The error codes this route answers, each at its own status.
    pub fn errors(mut self, codes: &[ErrorCode]) -> Self {
        self.faults.extend_from_slice(codes);
        self
    }

    /// Codes this route also answers at `status`, besides their own (a path with a forbidden
    /// character is 422 `invalid_path`: well-formed, but not a name writ makes).
    pub fn errors_at(mut self, status: u16, codes: &[ErrorCode]) -> Self {
        self.moved.extend(codes.iter().map(|c| (*c, status)));
        self
    }

    /// The schema of this route's error bodies, when it is not writ's error body.
    pub fn error_body(mut self, schema: Value) -> Self {
        self.error_body = Some(schema);
        self
    }

    /// The operation, with what the route table and the handler add: the scope in
    /// `x-writ-scope`, no security on open routes, the handler's parameters, and the error
    /// answers of the auth and rate layers, the cross-site guard, the extractors and the entry.
    pub(super) fn into_operation(
        mut self,
        method: &str,
        access: Access,
        inputs: Inputs<'_>,
    ) -> Operation {
        let scope = match access {
            Access::Open => None,
            Access::Scope(s) => Some(s.as_str()),
            Access::PerTool => Some("tool"),
        };
        // The auth and rate layers answer before the handler, with writ's own error body; a
        // scope the key lacks is the auth layer's answer only where the route names the scope.
        let mut layers = Vec::new();
        if scope.is_some() {
            layers.extend([ErrorCode::Unauthorized, ErrorCode::RateLimited]);
        }
        if matches!(access, Access::Scope(_)) {
            layers.push(ErrorCode::InsufficientScope);
        }
        // The edge refuses a browser's cross-site request to change anything.
        if !matches!(method, "GET" | "HEAD" | "OPTIONS") {
            layers.push(ErrorCode::CrossSite);
        }
        let mut own = std::mem::take(&mut self.faults);
        own.extend(inputs.faults.iter().copied());
        self.add_errors(&layers, &own, inputs.schemas);

        let security = if inputs.key_optional {
            Some(vec![
                BTreeMap::new(),
                BTreeMap::from([("bearer", Vec::new())]),
            ])
        } else if scope.is_none() {
            Some(Vec::new())
        } else {
            None
        };
        Operation {
            operation_id: self.id,
            summary: self.summary,
            description: self.description,
            scope,
            security,
            parameters: inputs.parameters,
            request_body: self.body,
            responses: self.answers,
        }
    }

    /// One answer per status among the codes, unless the entry wrote that status out: the shared
    /// answer where the status's one code is the auth or rate layer's, else one listing them.
    fn add_errors(&mut self, layers: &[ErrorCode], own: &[ErrorCode], s: &mut super::Schemas) {
        // Per status: the codes, and whether the layers, the route, or both answer them.
        let mut by_status: BTreeMap<u16, (BTreeSet<ErrorCode>, bool, bool)> = BTreeMap::new();
        for code in layers {
            let entry = by_status.entry(code.status().as_u16()).or_default();
            entry.0.insert(*code);
            entry.1 = true;
        }
        let moved = self.moved.iter().map(|(c, status)| (*c, *status));
        for (code, status) in own.iter().map(|c| (*c, c.status().as_u16())).chain(moved) {
            let entry = by_status.entry(status).or_default();
            entry.0.insert(code);
            entry.2 = true;
        }
        for (status, (codes, by_layers, by_route)) in by_status {
            let key = status.to_string();
            if self.answers.contains_key(&key) {
                continue;
            }
            let answer = match shared_answer(&codes) {
                Some(name) => Answer::shared(name),
                None => {
                    let body = self.error_schema(by_layers, by_route, s);
                    Answer::Inline(error_answer(status, &codes, body, s))
                }
            };
            self.answers.insert(key, answer);
        }
    }

    /// The layers answer with writ's error body; the route with its own where it has one.
    fn error_schema(&self, by_layers: bool, by_route: bool, s: &mut super::Schemas) -> Value {
        let writs = s.response::<crate::error::ErrorBody>();
        match &self.error_body {
            Some(own) if by_route && by_layers => to_value(&AnyOf {
                any_of: vec![own.clone(), writs],
            }),
            Some(own) if by_route => own.clone(),
            _ => writs,
        }
    }
}

/// An error answer listing its codes.
fn error_answer(
    status: u16,
    codes: &BTreeSet<ErrorCode>,
    body: Value,
    s: &mut super::Schemas,
) -> Response {
    let mut listed: Vec<String> = codes.iter().map(|c| format!("`{c}`")).collect();
    let last = listed.pop().unwrap_or_default();
    let codes = if listed.is_empty() {
        last
    } else {
        format!("{} or {last}", listed.join(", "))
    };
    let response = Response::new(format!(
        "{codes}; the body names the field at fault when there is one."
    ))
    .json(body);
    // Waiting helps with these, and writ says how long.
    if matches!(status, 429 | 503 | 507) {
        response.headers(s.headers::<crate::error::ErrorHeaders>())
    } else {
        response
    }
}

/// The shared answer of a status whose only code is the auth or rate layer's.
fn shared_answer(codes: &BTreeSet<ErrorCode>) -> Option<&'static str> {
    let mut only = codes.iter();
    match (only.next(), only.next()) {
        (Some(ErrorCode::Unauthorized), None) => Some("Unauthorized"),
        (Some(ErrorCode::InsufficientScope), None) => Some("Forbidden"),
        (Some(ErrorCode::RateLimited), None) => Some("TooManyRequests"),
        _ => None,
    }
}
fn to_value(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| panic!("a schema converts to JSON: {e}"))
}
