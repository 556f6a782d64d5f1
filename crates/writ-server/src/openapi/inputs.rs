//! What a handler's arguments say of its operation. Every argument type of a route's handler
//! implements [`Input`]: the extractors that read the request (`Path<T>`, [`ApiQuery<T>`],
//! [`ApiHeaders<T>`]) describe their parameters from `T`'s schema, and what they refuse; the
//! others (state, the caller, the raw body) describe nothing. The route table takes each
//! handler's [`Documented::inputs`], so the parameters in the document are the ones the handler
//! reads — a handler cannot read a parameter the document does not list, and a handler that
//! takes an extractor with no `Input` does not compile.

use axum::body::Bytes;
use axum::extract::{Extension, Path, Request, State};
use schemars::JsonSchema;

use super::Schemas;
use super::model::{Location, Parameter};
use crate::error::ErrorCode;
use crate::extract::ApiQuery;
use crate::headers::ApiHeaders;

/// What the arguments of one handler said, gathered for its operation.
pub struct Inputs<'a> {
    pub(super) schemas: &'a mut Schemas,
    /// The `{name}`s of the route's path, in order.
    pub(super) path_names: Vec<String>,
    pub(super) parameters: Vec<Parameter>,
    /// The error codes the extractors answer on their own.
    pub(super) faults: Vec<ErrorCode>,
    /// The handler reads a key where the route asks for none ([`crate::headers::PresentedKey`]).
    pub(super) key_optional: bool,
    /// Which route, for the generator's panics.
    pub(super) route: String,
}

/// How an argument of a handler shows in the document; nothing by default.
pub trait Input {
    fn describe(_inputs: &mut Inputs<'_>) {}
}

/// A handler whose every argument is an [`Input`]: `inputs` describes them all, in order.
pub trait Documented<Args> {
    fn inputs(inputs: &mut Inputs<'_>);
}

macro_rules! documented {
    ($($arg:ident),*) => {
        impl<F, Fut, $($arg,)*> Documented<($($arg,)*)> for F
        where
            F: FnOnce($($arg,)*) -> Fut,
            $($arg: Input,)*
        {
            fn inputs(_inputs: &mut Inputs<'_>) {
                $($arg::describe(_inputs);)*
            }
        }
    };
}

documented!();
documented!(A1);
documented!(A1, A2);
documented!(A1, A2, A3);
documented!(A1, A2, A3, A4);
documented!(A1, A2, A3, A4, A5);
documented!(A1, A2, A3, A4, A5, A6);
documented!(A1, A2, A3, A4, A5, A6, A7);
documented!(A1, A2, A3, A4, A5, A6, A7, A8);

impl<T> Input for State<T> {}
impl<T> Input for Extension<T> {}
impl<T> Input for Option<Extension<T>> {}
impl Input for crate::access::AuditedCaller {}
impl Input for crate::access::Viewer {}
// A raw body is described by the route's entry (its media types), which knows what it holds.
impl Input for Bytes {}
impl<E> Input for Result<Bytes, E> {}
// Handed on whole (to the route inside a workspace, to MCP): the entry describes it.
impl Input for Request {}

impl Input for crate::headers::PresentedKey {
    fn describe(inputs: &mut Inputs<'_>) {
        inputs.key_optional = true;
    }
}

/// A struct's fields are the path's parameters by name; a single value is its one parameter.
impl<T: JsonSchema> Input for Path<T> {
    fn describe(inputs: &mut Inputs<'_>) {
        let fields = inputs.schemas.parameters::<T>(Location::Path);
        let params = match fields {
            Some(fields) => fields,
            None => {
                let [name] = inputs.path_names.as_slice() else {
                    panic!(
                        "{}: a path of several parameters is read into a struct naming them",
                        inputs.route
                    );
                };
                vec![Parameter {
                    name: name.clone(),
                    location: Location::Path,
                    required: true,
                    description: None,
                    schema: inputs.schemas.inline::<T>(),
                }]
            }
        };
        for p in &params {
            assert!(
                inputs.path_names.contains(&p.name),
                "{}: the handler reads a path parameter `{}` the route does not have",
                inputs.route,
                p.name
            );
        }
        inputs.parameters.extend(params);
    }
}

impl<T: JsonSchema> Input for ApiQuery<T> {
    fn describe(inputs: &mut Inputs<'_>) {
        let params = inputs
            .schemas
            .parameters::<T>(Location::Query)
            .unwrap_or_else(|| panic!("{}: query parameters come from a struct", inputs.route));
        inputs.parameters.extend(params);
        inputs.faults.push(ErrorCode::InvalidParameter);
    }
}

impl<T: JsonSchema> Input for ApiHeaders<T> {
    fn describe(inputs: &mut Inputs<'_>) {
        let params = inputs
            .schemas
            .parameters::<T>(Location::Header)
            .unwrap_or_else(|| panic!("{}: header parameters come from a struct", inputs.route));
        inputs.parameters.extend(params);
        inputs.faults.push(ErrorCode::InvalidHeader);
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize, JsonSchema)]
    struct Thing {
        /// Which thing.
        #[expect(dead_code, reason = "read for its schema")]
        id: String,
    }

    #[derive(Deserialize, JsonSchema)]
    struct Query {
        /// How many.
        #[expect(dead_code, reason = "read for its schema")]
        limit: Option<u32>,
        /// What to look for.
        #[expect(dead_code, reason = "read for its schema")]
        pattern: String,
    }

    #[derive(Deserialize, JsonSchema)]
    struct Sent {
        /// The digest the thing must have.
        #[serde(rename = "if-match")]
        #[expect(dead_code, reason = "read for its schema")]
        if_match: Option<String>,
    }

    async fn handler(
        _: State<()>,
        _: Path<Thing>,
        _: ApiQuery<Query>,
        _: ApiHeaders<Sent>,
        _: Result<Bytes, std::convert::Infallible>,
    ) {
    }

    async fn by_name(_: Path<String>) {}

    fn described<A, H: Documented<A>>(_: H, path: &str) -> (Vec<Parameter>, Vec<ErrorCode>) {
        let mut schemas = Schemas::new();
        let mut inputs = Inputs {
            schemas: &mut schemas,
            path_names: super::super::path_names(path),
            parameters: Vec::new(),
            faults: Vec::new(),
            key_optional: false,
            route: format!("GET {path}"),
        };
        H::inputs(&mut inputs);
        (inputs.parameters, inputs.faults)
    }

    #[test]
    fn the_parameters_are_the_fields_of_the_types_the_handler_reads() {
        let (params, faults) = described(handler, "/things/{id}");
        let listed: Vec<(&str, Location, bool, Option<&str>)> = params
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.location,
                    p.required,
                    p.description.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("id", Location::Path, true, Some("Which thing.")),
                ("limit", Location::Query, false, Some("How many.")),
                ("pattern", Location::Query, true, Some("What to look for.")),
                (
                    "if-match",
                    Location::Header,
                    false,
                    Some("The digest the thing must have.")
                ),
            ]
        );
        assert_eq!(
            faults,
            [ErrorCode::InvalidParameter, ErrorCode::InvalidHeader]
        );
    }

    #[test]
    fn a_single_path_value_takes_the_route_s_name() {
        let (params, _) = described(by_name, "/files/{path}");
        assert_eq!(params.len(), 1);
        assert_eq!(params[0].name, "path");
        assert_eq!(params[0].schema["type"], "string");
    }

    #[test]
    #[should_panic(expected = "the route does not have")]
    fn a_path_parameter_the_route_lacks_is_refused() {
        described(handler, "/things/{name}");
    }
}
