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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use tokio::sync::Notify;
    use tower::ServiceExt;

    use super::*;

    /// A handler that has started, then waits for `release` before it records that it finished;
    /// and whether it saw its caller hang up first.
    #[derive(Clone, Default)]
    struct Probe {
        started: Arc<Notify>,
        release: Arc<Notify>,
        finished: Arc<AtomicBool>,
        saw_hang_up: Arc<AtomicBool>,
    }

    fn app(probe: Probe) -> Router {
        let handler = move |axum::Extension(HungUp(hung_up)): axum::Extension<HungUp>| {
            let probe = probe.clone();
            async move {
                probe.started.notify_one();
                probe.release.notified().await;
                probe
                    .saw_hang_up
                    .store(hung_up.is_cancelled(), Ordering::SeqCst);
                probe.finished.store(true, Ordering::SeqCst);
            }
        };
        Router::new()
            .route("/change", post(handler.clone()))
            .route("/look", get(handler))
            .route_layer(axum::middleware::from_fn(immune_to_hang_ups))
    }

    /// Sends a request, drops it once its handler has started (the client hangs up), lets the
    /// handler go on, and says whether it finished.
    async fn hang_up_during(method: &str, path: &str) -> Probe {
        let probe = Probe::default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let call = app(probe.clone()).oneshot(request);
        tokio::select! {
            _ = call => panic!("the handler cannot answer before it is released"),
            () = probe.started.notified() => {}
        }
        probe.release.notify_one();
        for _ in 0..100 {
            if probe.finished.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        probe
    }

    #[tokio::test]
    async fn a_mutating_handler_finishes_after_its_client_hangs_up_and_is_told() {
        let probe = hang_up_during("POST", "/change").await;
        assert!(probe.finished.load(Ordering::SeqCst));
        assert!(probe.saw_hang_up.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_read_stops_with_its_client() {
        let probe = hang_up_during("GET", "/look").await;
        assert!(!probe.finished.load(Ordering::SeqCst));
    }
}
