//! One attempt: one HTTP request to `/chat/completions` and its answer read under the
//! per-call, first-byte and idle timeouts.
//!
//! Nothing here is spawned: the request lives inside the caller's future, so dropping that
//! future drops the connection and the upstream sees the client go away.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use reqwest::{Response, Url};
use tokio::time::{Instant, timeout, timeout_at};
use writ_core::model::{ChatResponse, ErrorClass};

use crate::classify::AttemptError;
use crate::sse::{SseEvent, SseParser};
use crate::wire::{StreamAssembly, parse_completion};

/// Error bodies beyond this are cut: we keep the provider's message, not its HTML page.
const MAX_ERROR_BODY: usize = 64 * 1024;

#[derive(Debug)]
pub(crate) struct Transport {
    pub http: reqwest::Client,
    pub endpoint: Url,
    /// Authorization (marked sensitive) and attribution headers.
    pub headers: HeaderMap,
    pub stream: bool,
    pub call_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Transport {
    /// Sends `body` (a serialized request) once and reads the answer.
    pub async fn attempt(&self, body: Bytes) -> Result<ChatResponse, AttemptError> {
        let start = Instant::now();
        match timeout(self.call_timeout, self.exchange(body, start)).await {
            Ok(result) => result,
            Err(_) => Err(AttemptError::new(
                ErrorClass::Timeout,
                format!(
                    "no complete answer within the call timeout ({} ms)",
                    self.call_timeout.as_millis()
                ),
            )),
        }
    }

    async fn exchange(&self, body: Bytes, start: Instant) -> Result<ChatResponse, AttemptError> {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .body(body);
        // The provider joins the trace this call is a span of (W3C Trace Context).
        if let Some(context) = writ_core::trace_context::current() {
            request = request.header("traceparent", context.traceparent);
            if let Some(state) = context.tracestate {
                request = request.header("tracestate", state);
            }
        }
        let mut response = if self.stream {
            timeout_at(start + self.first_byte_timeout, request.send())
                .await
                .map_err(|_| self.first_byte_elapsed())?
        } else {
            request.send().await
        }
        .map_err(AttemptError::transport)?;

        let status = response.status();
        let headers = response.headers().clone();
        if !status.is_success() {
            let body = self.read_error_body(&mut response).await;
            return Err(AttemptError::from_status(status.as_u16(), &headers, &body));
        }
        let is_sse = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"));
        if is_sse {
            self.read_stream(response, start).await
        } else {
            // Asked to stream but answered with plain JSON: an error object, or a server that
            // ignores `stream`. Either way the whole body is the answer.
            let mut body = Vec::new();
            let mut reader = ChunkReader::new(self, start);
            while let Some(chunk) = reader.next(&mut response).await? {
                body.extend_from_slice(&chunk);
            }
            parse_completion(&body, &headers)
        }
    }

    async fn read_stream(
        &self,
        mut response: Response,
        start: Instant,
    ) -> Result<ChatResponse, AttemptError> {
        let mut parser = SseParser::default();
        let mut assembly = StreamAssembly::default();
        let mut reader = ChunkReader::new(self, start);
        loop {
            let chunk = reader.next(&mut response).await?;
            let events = match &chunk {
                Some(bytes) => parser.push(bytes),
                None => parser.finish(),
            };
            for event in events {
                match event {
                    SseEvent::Comment(comment) => {
                        tracing::trace!(comment, "SSE comment (keep-alive)")
                    }
                    SseEvent::Data(data) => {
                        assembly.push(&data, start.elapsed())?;
                        if assembly.done {
                            return assembly.finish();
                        }
                    }
                }
            }
            if chunk.is_none() {
                return assembly.finish();
            }
        }
    }

    async fn read_error_body(&self, response: &mut Response) -> Vec<u8> {
        let mut body = Vec::new();
        // The status already says what happened; a body that is slow or broken only loses us
        // the provider's wording, so read errors end the read instead of failing the attempt.
        while body.len() < MAX_ERROR_BODY {
            match timeout(self.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(MAX_ERROR_BODY);
        body
    }

    fn first_byte_elapsed(&self) -> AttemptError {
        AttemptError::new(
            ErrorClass::Timeout,
            format!(
                "no first byte within the first-byte timeout ({} ms)",
                self.first_byte_timeout.as_millis()
            ),
        )
    }
}

/// Reads body chunks under the streaming timeouts: the first chunk must come before
/// `start + first_byte_timeout`, each later one within `idle_timeout` of the previous. Without
/// streaming only the call timeout (around the whole attempt) applies.
struct ChunkReader<'a> {
    transport: &'a Transport,
    deadline: Option<Instant>,
    /// A chunk has arrived, so the deadline is now an idle one.
    idle: bool,
    ended: bool,
}

impl<'a> ChunkReader<'a> {
    fn new(transport: &'a Transport, start: Instant) -> Self {
        let deadline = transport
            .stream
            .then(|| start + transport.first_byte_timeout);
        Self {
            transport,
            deadline,
            idle: false,
            ended: false,
        }
    }

    async fn next(&mut self, response: &mut Response) -> Result<Option<Bytes>, AttemptError> {
        if self.ended {
            return Ok(None);
        }
        let chunk = match self.deadline {
            Some(deadline) => timeout_at(deadline, response.chunk())
                .await
                .map_err(|_| self.elapsed())?,
            None => response.chunk().await,
        }
        .map_err(AttemptError::transport)?;
        match &chunk {
            Some(_) if self.transport.stream => {
                self.idle = true;
                self.deadline = Some(Instant::now() + self.transport.idle_timeout);
            }
            Some(_) => {}
            None => self.ended = true,
        }
        Ok(chunk)
    }

    fn elapsed(&self) -> AttemptError {
        if self.idle {
            AttemptError::new(
                ErrorClass::Timeout,
                format!(
                    "the stream went silent for longer than the idle timeout ({} ms)",
                    self.transport.idle_timeout.as_millis()
                ),
            )
        } else {
            self.transport.first_byte_elapsed()
        }
    }
}
