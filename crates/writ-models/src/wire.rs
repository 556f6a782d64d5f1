//! The OpenAI-compatible wire format: the request body we send, and the completion (or stream
//! of chunks) we read back into a [`ChatResponse`].
//!
//! Parsing is lenient about what we do not use (providers add fields freely) and strict about
//! what we do: an answer without `choices` is a bad response, an `error` object is an error
//! even inside a 200 or a stream.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use writ_core::model::{ChatMessage, ChatRequest, ChatResponse, ErrorClass, Usage};

use crate::classify::AttemptError;

#[derive(Debug, Serialize)]
pub(crate) struct WireRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    modalities: Option<&'a [String]>,
    stream: bool,
    /// OpenRouter always reports usage; OpenAI, vLLM and llama.cpp only when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> WireRequest<'a> {
    pub fn new(req: &'a ChatRequest, stream: bool) -> Self {
        Self {
            model: &req.model,
            messages: &req.messages,
            temperature: req.temperature,
            max_tokens: req.max_tokens,
            seed: req.seed,
            response_format: req.response_format.as_ref(),
            modalities: req.modalities.as_deref(),
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }

    /// The request as JSON bytes, in a buffer sized once: a prompt is several kilobytes (the
    /// arbiter's carries every candidate), and growing the buffer by doubling copied it again
    /// at each step, on every call of a fan-out.
    pub fn to_body(&self) -> serde_json::Result<Vec<u8>> {
        // Text plus a margin for escapes (newlines and quotes in code), the other fields and the
        // envelope; a schema-constrained arbiter's `response_format` adds its own size.
        let text: usize = self.messages.iter().map(|m| m.content.len()).sum();
        let mut body = Vec::with_capacity(text + text / 8 + 512);
        serde_json::to_writer(&mut body, self)?;
        Ok(body)
    }
}

/// A completion or a stream chunk: the same shape, `message` in one, `delta` in the other.
#[derive(Debug, Default, Deserialize)]
struct WireResponse {
    id: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    message: Option<WireMessage>,
    delta: Option<WireMessage>,
    finish_reason: Option<String>,
    /// Some providers put a mid-stream error on the choice instead of the chunk.
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireMessage {
    content: Option<String>,
    images: Option<Vec<WireImage>>,
}

#[derive(Debug, Deserialize)]
struct WireImage {
    image_url: WireImageUrl,
}

#[derive(Debug, Deserialize)]
struct WireImageUrl {
    url: String,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    cost: Option<f64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cost: u.cost,
        }
    }
}

fn image_urls(images: Option<Vec<WireImage>>) -> impl Iterator<Item = String> {
    images.into_iter().flatten().map(|i| i.image_url.url)
}

/// A whole (non-streamed) JSON answer from a 2xx response.
pub(crate) fn parse_completion(
    body: &[u8],
    headers: &HeaderMap,
) -> Result<ChatResponse, AttemptError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(AttemptError::new(
            ErrorClass::BadResponse,
            "empty body in a 2xx answer",
        ));
    }
    let wire: WireResponse = serde_json::from_slice(body).map_err(|e| {
        AttemptError::new(
            ErrorClass::BadResponse,
            format!("malformed JSON in a 2xx answer: {e}"),
        )
    })?;
    if let Some(error) = &wire.error {
        return Err(AttemptError::error_in_body(error, headers));
    }
    let Some(choice) = wire.choices.and_then(|c| c.into_iter().next()) else {
        return Err(AttemptError::new(
            ErrorClass::BadResponse,
            "the answer has no choices",
        ));
    };
    if let Some(error) = &choice.error {
        return Err(AttemptError::error_in_body(error, headers));
    }
    let message = choice.message.unwrap_or_default();
    Ok(ChatResponse {
        content: message.content.unwrap_or_default(),
        images: image_urls(message.images).collect(),
        finish_reason: choice.finish_reason,
        usage: wire.usage.map(Usage::from).unwrap_or_default(),
        generation_id: wire.id,
        ..ChatResponse::default()
    })
}

/// A streamed answer being put together chunk by chunk.
#[derive(Debug, Default)]
pub(crate) struct StreamAssembly {
    response: ChatResponse,
    /// `[DONE]` arrived: the stream is complete even if the connection lingers.
    pub done: bool,
    chunks: usize,
}

impl StreamAssembly {
    /// Takes one SSE `data` payload; `since_start` is the attempt's age, for time to first
    /// token.
    pub fn push(&mut self, data: &str, since_start: Duration) -> Result<(), AttemptError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: WireResponse = serde_json::from_str(data).map_err(|e| {
            AttemptError::new(
                ErrorClass::BadResponse,
                format!("malformed JSON in stream chunk {}: {e}", self.chunks + 1),
            )
        })?;
        self.chunks += 1;
        if let Some(error) = chunk.error.as_ref().or_else(|| {
            chunk
                .choices
                .iter()
                .flatten()
                .find_map(|c| c.error.as_ref())
        }) {
            return Err(self.mid_stream(error));
        }
        if self.response.generation_id.is_none() {
            self.response.generation_id = chunk.id;
        }
        if let Some(usage) = chunk.usage {
            self.response.usage = usage.into();
        }
        for choice in chunk.choices.into_iter().flatten() {
            if choice.finish_reason.as_deref() == Some("error") {
                return Err(self.mid_stream(&Value::String(
                    "the stream ended with finish_reason \"error\"".into(),
                )));
            }
            if let Some(delta) = choice.delta.or(choice.message) {
                let text = delta.content.unwrap_or_default();
                let before = self.response.content.len() + self.response.images.len();
                self.response.content.push_str(&text);
                self.response.images.extend(image_urls(delta.images));
                if self.response.time_to_first_token.is_none()
                    && self.response.content.len() + self.response.images.len() > before
                {
                    self.response.time_to_first_token = Some(since_start);
                }
            }
            if choice.finish_reason.is_some() {
                self.response.finish_reason = choice.finish_reason;
            }
        }
        Ok(())
    }

    fn mid_stream(&self, error: &Value) -> AttemptError {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_owned);
        AttemptError::new(
            ErrorClass::MidStream,
            format!(
                "error event after {} chunks ({} bytes of content): {message}",
                self.chunks.saturating_sub(1),
                self.response.content.len()
            ),
        )
    }

    /// The answer, once the stream has ended; a stream that stopped before `[DONE]` or a
    /// finish reason was cut off.
    pub fn finish(self) -> Result<ChatResponse, AttemptError> {
        if !self.done && self.response.finish_reason.is_none() {
            let what = if self.chunks == 0 {
                "the stream ended before any data"
            } else {
                "the stream ended before [DONE] or a finish reason (truncated)"
            };
            return Err(AttemptError::new(
                ErrorClass::BadResponse,
                format!("{what} after {} chunks", self.chunks),
            ));
        }
        Ok(self.response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_with_images_usage_and_id_parses() {
        let body = br#"{"id":"gen-1","choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"hi","images":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8,"cost":0.0004}}"#;
        let r = parse_completion(body, &HeaderMap::new()).unwrap();
        assert_eq!(r.content, "hi");
        assert_eq!(r.images, vec!["data:image/png;base64,AA==".to_owned()]);
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            r.usage,
            Usage {
                prompt_tokens: Some(3),
                completion_tokens: Some(5),
                cost: Some(0.0004)
            }
        );
        assert_eq!(r.generation_id.as_deref(), Some("gen-1"));
    }

    #[test]
    fn null_content_is_empty_text() {
        let body = br#"{"id":"x","choices":[{"finish_reason":"stop","message":{"content":null,"images":null}}]}"#;
        assert_eq!(
            parse_completion(body, &HeaderMap::new()).unwrap().content,
            ""
        );
    }

    #[test]
    fn no_choices_is_a_bad_response() {
        let e = parse_completion(br#"{"id":"x","choices":[]}"#, &HeaderMap::new()).unwrap_err();
        assert_eq!(e.class, ErrorClass::BadResponse);
    }

    #[test]
    fn a_stream_assembles_content_usage_and_first_token_time() {
        let mut s = StreamAssembly::default();
        let t = Duration::from_millis;
        s.push(
            r#"{"id":"gen-9","choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            t(1),
        )
        .unwrap();
        s.push(
            r#"{"id":"gen-9","choices":[{"delta":{"content":"Hel"}}]}"#,
            t(5),
        )
        .unwrap();
        s.push(
            r#"{"id":"gen-9","choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            t(9),
        )
        .unwrap();
        s.push(r#"{"id":"gen-9","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"cost":0.5}}"#, t(10)).unwrap();
        s.push("[DONE]", t(11)).unwrap();
        let r = s.finish().unwrap();
        assert_eq!(r.content, "Hello");
        assert_eq!(r.time_to_first_token, Some(t(5)));
        assert_eq!(r.usage.cost, Some(0.5));
        assert_eq!(r.generation_id.as_deref(), Some("gen-9"));
    }

    #[test]
    fn an_error_chunk_is_a_mid_stream_error() {
        let mut s = StreamAssembly::default();
        s.push(
            r#"{"choices":[{"delta":{"content":"par"}}]}"#,
            Duration::ZERO,
        )
        .unwrap();
        let e = s
            .push(r#"{"error":{"code":"server_error","message":"provider disconnected"},"choices":[{"delta":{"content":""},"finish_reason":"error"}]}"#, Duration::ZERO)
            .unwrap_err();
        assert_eq!(e.class, ErrorClass::MidStream);
        assert!(e.message.contains("provider disconnected"), "{}", e.message);
    }

    #[test]
    fn a_stream_without_done_or_finish_reason_is_truncated() {
        let mut s = StreamAssembly::default();
        s.push(
            r#"{"choices":[{"delta":{"content":"par"}}]}"#,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(s.finish().unwrap_err().class, ErrorClass::BadResponse);
    }

    #[test]
    fn the_request_body_carries_only_what_is_set() {
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")],
            response_format: Some(serde_json::json!({"type": "json_schema"})),
            ..ChatRequest::default()
        };
        let body = serde_json::to_value(WireRequest::new(&req, true)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema"},
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }
}
