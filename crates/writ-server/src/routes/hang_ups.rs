//! The one place that makes a mutating request immune to its client hanging up (as tensorzero's
//! gateway does): the handler of every `POST`, `PUT`, `PATCH` and `DELETE` runs in a task of its
//! own, so a dropped connection cannot cancel it between an audit record and the file it
//! describes. A handler that should stop when nobody waits any more (`POST /run`) reads
//! [`HungUp`].

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::ApiError;

/// Cancelled when the request's client is gone before its answer (on every route, so a handler
/// can always extract it).
#[derive(Clone)]
pub struct HungUp(pub CancellationToken);

/// Runs the route's handler in its own task when the request may change something.
pub async fn immune_to_hang_ups(mut req: Request, next: Next) -> Response {
    let hung_up = CancellationToken::new();
    req.extensions_mut().insert(HungUp(hung_up.clone()));
    if !mutates(req.method()) {
        return next.run(req).await;
    }
    // Dropped with this future: when the server drops it because the client hung up, the
    // handler, which runs on, is told.
    let _tell_on_hang_up = hung_up.drop_guard();
    let handler = tokio::spawn(next.run(req).in_current_span());
    handler
        .await
        .unwrap_or_else(|e| ApiError::internal(e).into_response())
}

fn mutates(method: &Method) -> bool {
    [Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(method)
}
