//! Extractors whose rejections are API errors naming the offending field.

use axum::extract::FromRequestParts;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode, field_in};

/// `Query<T>` whose errors say which parameter is wrong.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(query_error(&rejection)),
        }
    }
}

fn query_error(rejection: &QueryRejection) -> ApiError {
    let text = rejection.body_text();
    let detail = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(&text)
        .to_string();
    let mut err = ApiError::new(
        ErrorCode::InvalidParameter,
        format!("invalid query parameter: {detail}"),
    );
    if let Some(field) = field_in(&detail) {
        err = err.with_field(field);
    }
    err
}

pub fn json_error(rejection: &JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the request body as JSON with Content-Type: application/json",
        ),
        JsonRejection::BytesRejection(b) => body_error(b, 0),
        other => {
            let text = other.body_text();
            let detail = text
                .strip_prefix("Failed to deserialize the JSON body into the target type: ")
                .or_else(|| text.strip_prefix("Failed to parse the request body as JSON: "))
                .unwrap_or(&text)
                .to_string();
            ApiError::invalid_body(detail)
        }
    }
}

/// A JSON body as `T`, with unknown keys refused by name: serde's path to the field at fault
/// (`files[0].colour`) becomes the error's `field`.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut json)
        .map_err(|e| ApiError::invalid_body(e.to_string()))?;
    json.end()
        .map_err(|e| ApiError::invalid_body(e.to_string()))?;
    Ok(value)
}

/// The body could not be read: over the size limit, or the connection failed.
pub fn body_error(rejection: &BytesRejection, limit: usize) -> ApiError {
    let text = rejection.body_text();
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        let limit_text = if limit > 0 {
            format!("{limit} bytes")
        } else {
            "the configured limit".to_string()
        };
        return ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("the request body is larger than {limit_text} (WRIT_MAX_BODY_BYTES)"),
        )
        .with_field("body");
    }
    ApiError::new(ErrorCode::InvalidBody, text)
        .with_status(StatusCode::BAD_REQUEST)
        .with_field("body")
}

#[cfg(test)]
mod tests {
    use crate::error::field_in;

    #[test]
    fn field_names_are_found_in_serde_messages() {
        assert_eq!(
            field_in("unknown field `colour`, expected one of `dir`").as_deref(),
            Some("colour")
        );
        assert_eq!(
            field_in("files[0]: unknown field `x`, expected `filename`").as_deref(),
            Some("files[0].x")
        );
        assert_eq!(field_in("invalid type: string").as_deref(), None);
        assert_eq!(
            field_in("sort: unknown field `sort`, expected one of `a`").as_deref(),
            Some("sort")
        );
    }
}
