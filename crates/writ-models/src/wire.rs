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
    messages: Messages<'a>,
    /// OpenAI routes calls with the same key to the same cache: the hash of the shared prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<String>,
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
            messages: Messages {
                messages: &req.messages,
                breakpoint: takes_cache_control(&req.model),
            },
            prompt_cache_key: takes_prompt_cache_key(&req.model)
                .then(|| prompt_cache_key(&req.messages))
                .flatten(),
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
        let text: usize = self.messages.messages.iter().map(|m| m.content.len()).sum();
        let mut body = Vec::with_capacity(text + text / 8 + 512);
        serde_json::to_writer(&mut body, self)?;
        Ok(body)
    }
}

/// Anthropic's models cache only up to an explicit `cache_control` breakpoint, also when
/// reached through OpenRouter (`anthropic/…`).
fn takes_cache_control(model: &str) -> bool {
    model.starts_with("anthropic/") || model.starts_with("claude")
}

/// OpenAI's models cache repeated prefixes by themselves; `prompt_cache_key` keeps the calls
/// that share one on the same cache.
fn takes_prompt_cache_key(model: &str) -> bool {
    model.starts_with("openai/") || model.starts_with("gpt-")
}

/// The messages up to the end of the last shared prefix, hashed: equal for every call whose
/// shared part is byte-identical. `None` when no message marks a shared prefix.
fn prompt_cache_key(messages: &[ChatMessage]) -> Option<String> {
    use sha2::{Digest as _, Sha256};
    let last = messages.iter().rposition(|m| m.shared_prefix.is_some())?;
    let mut hash = Sha256::new();
    for (i, m) in messages[..=last].iter().enumerate() {
        let text = if i == last {
            &m.content[..m.shared_prefix.unwrap_or(0)]
        } else {
            &m.content[..]
        };
        hash.update(serde_json::to_string(&m.role).unwrap_or_default());
        hash.update((text.len() as u64).to_le_bytes());
        hash.update(text);
    }
    let digest = hash.finalize();
    Some(format!("writ-{}", hex::encode(&digest[..12])))
}

/// The messages as sent: plain `{role, content}` objects, except that with `breakpoint` the
/// last message marking a shared prefix is split into two text parts, the first (the shared
/// part) carrying `cache_control`.
#[derive(Debug)]
struct Messages<'a> {
    messages: &'a [ChatMessage],
    breakpoint: bool,
}

impl Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        use serde_json::json;
        let marked = self
            .breakpoint
            .then(|| {
                self.messages
                    .iter()
                    .rposition(|m| m.shared_prefix.is_some())
            })
            .flatten();
        let mut seq = ser.serialize_seq(Some(self.messages.len()))?;
        for (i, m) in self.messages.iter().enumerate() {
            match (marked == Some(i), m.shared_prefix) {
                (true, Some(end)) => {
                    let (shared, rest) = m.content.split_at(end);
                    let mut parts = vec![json!({
                        "type": "text",
                        "text": shared,
                        "cache_control": {"type": "ephemeral"},
                    })];
                    if !rest.is_empty() {
                        parts.push(json!({"type": "text", "text": rest}));
                    }
                    seq.serialize_element(&json!({"role": m.role, "content": parts}))?;
                }
                _ => seq.serialize_element(m)?,
            }
        }
        seq.end()
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
    /// OpenAI and OpenRouter: `prompt_tokens_details.cached_tokens`.
    prompt_tokens_details: Option<WirePromptDetails>,
    /// Anthropic's own name for tokens read from its cache.
    cache_read_input_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct WirePromptDetails {
    cached_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(u.cache_read_input_tokens),
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
                cached_tokens: None,
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
    fn cached_tokens_are_read_from_either_name_providers_give_them() {
        let openai = br#"{"choices":[{"finish_reason":"stop","message":{"content":"x"}}],"usage":{"prompt_tokens":2000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1536}}}"#;
        let anthropic = br#"{"choices":[{"finish_reason":"stop","message":{"content":"x"}}],"usage":{"prompt_tokens":2000,"completion_tokens":5,"cache_read_input_tokens":1800}}"#;
        let h = HeaderMap::new();
        assert_eq!(
            parse_completion(openai, &h).unwrap().usage.cached_tokens,
            Some(1536)
        );
        assert_eq!(
            parse_completion(anthropic, &h).unwrap().usage.cached_tokens,
            Some(1800)
        );
    }

    fn shared_then_own(own: &str) -> Vec<ChatMessage> {
        let content = format!("SHARED CONTEXT\n{own}");
        vec![
            ChatMessage::system("instructions"),
            ChatMessage::user(content).with_shared_prefix("SHARED CONTEXT\n".len()),
        ]
    }

    #[test]
    fn an_anthropic_model_gets_a_cache_breakpoint_at_the_end_of_the_shared_part() {
        let req = ChatRequest {
            model: "anthropic/claude-sonnet-4".into(),
            messages: shared_then_own("write a.py"),
            ..ChatRequest::default()
        };
        let body = serde_json::to_value(WireRequest::new(&req, false)).unwrap();
        assert_eq!(
            body["messages"][0],
            serde_json::json!({"role": "system", "content": "instructions"})
        );
        assert_eq!(
            body["messages"][1]["content"],
            serde_json::json!([
                {"type": "text", "text": "SHARED CONTEXT\n", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "write a.py"},
            ])
        );
        assert!(body.get("prompt_cache_key").is_none());
    }

    #[test]
    fn an_openai_model_gets_one_cache_key_for_every_call_sharing_the_prefix() {
        let key = |model: &str, own: &str| {
            let req = ChatRequest {
                model: model.into(),
                messages: shared_then_own(own),
                ..ChatRequest::default()
            };
            serde_json::to_value(WireRequest::new(&req, false)).unwrap()["prompt_cache_key"].clone()
        };
        let a = key("openai/gpt-5", "write a.py");
        assert!(a.as_str().is_some_and(|k| k.starts_with("writ-")), "{a}");
        assert_eq!(a, key("openai/gpt-5", "write b.py"));
        assert!(key("other/model", "write a.py").is_null());
        let mut other = shared_then_own("write a.py");
        other[1] = ChatMessage::user("OTHER CONTEXT\nwrite a.py").with_shared_prefix(14);
        let req = ChatRequest {
            model: "openai/gpt-5".into(),
            messages: other,
            ..ChatRequest::default()
        };
        assert_ne!(
            serde_json::to_value(WireRequest::new(&req, false)).unwrap()["prompt_cache_key"],
            a
        );
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
