//! `POST /write_codebase`: the HTTP translation of the synthesis core.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use writ_core::content::sha256_hex;
use writ_core::synthesis::{Batch, Submission, SubmitError, WriteCodebaseRequest};

use crate::error::{ApiError, store_error};
use crate::extract::{body_error, json_error};
use crate::state::AppState;
use crate::telemetry::RequestId;

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Write up to five files, each chosen among several models' candidates.
pub async fn write_codebase(
    State(state): State<AppState>,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| body_error(&e, state.settings.max_body_bytes))?;
    let Json(req) = Json::<WriteCodebaseRequest>::from_bytes(&body).map_err(|e| json_error(&e))?;
    let batch = Batch::parse(req).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            e.message,
        )
        .with_field(e.field)
    })?;
    let idempotency_key = idempotency_key(&headers)?;

    let Some(synthesizer) = state.synthesizer.clone() else {
        return Err(unavailable(
            "no model provider could be set up; see the server log and `writ check`",
        ));
    };
    let no_models = batch.options.models.is_none() && state.settings.code_list.is_empty();
    if no_models {
        return Err(unavailable(
            "no candidate models are configured: set CODE_LIST (or send options.models)",
        ));
    }
    if state.settings.provider_key_missing() {
        return Err(unavailable(
            "OPENROUTER_API_KEY is not set, and the models are served by OpenRouter",
        ));
    }

    let submission = Submission {
        request_id,
        caller: None,
        idempotency_key,
        body_sha256: sha256_hex(&body),
        batch,
    };
    // Its own task: a client that hangs up must not cancel a batch half-way; it completes, is
    // recorded, and can be fetched later by idempotency key or from /operations.
    let task = tokio::spawn(async move {
        synthesizer
            .submit(submission, &writ_core::synthesis::NoProgress)
            .await
    });
    let (body, replayed) = task
        .await
        .map_err(ApiError::internal)?
        .map_err(submit_error)?;
    let mut resp = (StatusCode::OK, Json(body)).into_response();
    if replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = v.to_str().map(str::trim).unwrap_or("");
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(ApiError::bad_request(
            "invalid_header",
            format!(
                "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters"
            ),
        )
        .with_field("Idempotency-Key"));
    }
    Ok(Some(key.to_string()))
}

fn unavailable(message: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "models_unavailable",
        message,
    )
}

fn submit_error(err: SubmitError) -> ApiError {
    match err {
        SubmitError::Invalid(e) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            e.message,
        )
        .with_field(e.field),
        SubmitError::IdempotencyConflict => ApiError::new(
            StatusCode::CONFLICT,
            "idempotency_conflict",
            err.to_string(),
        )
        .with_field("Idempotency-Key"),
        SubmitError::InProgress => {
            let mut e = ApiError::new(
                StatusCode::CONFLICT,
                "idempotency_in_progress",
                err.to_string(),
            )
            .with_field("Idempotency-Key");
            e.retry_after_secs = Some(5);
            e
        }
        SubmitError::Audit(store) => store_error(store),
    }
}
