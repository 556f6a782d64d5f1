//! Turning a [`Step`] into HTTP: OpenRouter-shaped JSON completions, SSE streams, and errors.
//!
//! A response body is first planned as a list of [`Frame`]s (bytes, pauses, a dropped
//! connection, silence) so that every failure mode is one small list rather than a hand-written
//! stream.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::answers::{Answer, answer_for};
use crate::script::Step;

/// What the handler knows about the call being answered.
pub(crate) struct Call {
    pub model: String,
    pub prompt: String,
    /// Every message counted, as a provider bills them.
    pub prompt_tokens: u64,
    /// Of `prompt_tokens`, those this model's prompt cache served.
    pub cached_tokens: u64,
    /// Whether the usage carries `cost`, as OpenRouter's does (vLLM's, OpenAI's do not).
    pub report_cost: bool,
    pub stream: bool,
    pub trickle: Option<Duration>,
    pub generation_id: String,
}

/// One piece of a planned response body.
#[derive(Debug)]
pub(crate) enum Frame {
    Data(String),
    Pause(Duration),
    /// The connection drops here (the client sees a truncated body).
    Drop,
    /// Nothing more is ever sent, but the connection stays open.
    Silence,
}

/// The response to send, before the body is turned into a stream.
pub(crate) struct Planned {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub headers: Vec<(header::HeaderName, String)>,
    /// Announced length, when it must differ from what is sent (a truncated body).
    pub content_length: Option<usize>,
    pub frames: Vec<Frame>,
}

pub(crate) const KEEP_ALIVE: &str = ": OPENROUTER PROCESSING\n\n";
const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

/// Plans the answer to `call`. `None` means never answer ([`Step::Hang`], or a stall without
/// streaming); [`Step::Delayed`] must be unwrapped by the caller, which owns the clock.
pub(crate) fn plan(step: &Step, call: &Call) -> Option<Planned> {
    if let Some(answer) = answer_for(step, &call.prompt) {
        return Some(if call.stream {
            sse(stream_frames(call, &answer, None))
        } else {
            json_ok(completion(call, &answer))
        });
    }
    let planned = match step {
        Step::Status {
            status,
            body,
            retry_after,
        } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = body.clone().unwrap_or_else(|| {
                error_body(
                    status.as_u16(),
                    &canned_message(status.as_u16(), &call.model),
                )
                .to_string()
            });
            Planned {
                status,
                content_type: JSON,
                headers: retry_after
                    .iter()
                    .map(|v| (header::RETRY_AFTER, v.clone()))
                    .collect(),
                content_length: None,
                frames: vec![Frame::Data(body)],
            }
        }
        Step::ErrorIn200 { code, message } => json_ok(error_body(*code, message)),
        Step::Malformed if call.stream => sse(vec![
            Frame::Data(KEEP_ALIVE.to_owned()),
            Frame::Data(format!(
                "data: {{\"id\": \"{}\", \"choices\": [{{\"delta\": \n\n",
                call.generation_id
            )),
            Frame::Data("data: [DONE]\n\n".to_owned()),
        ]),
        Step::Malformed => Planned {
            frames: vec![Frame::Data(format!(
                "{{\"id\": \"{}\", \"choices\": [{{\"message\": {{\"content\": ",
                call.generation_id
            ))],
            ..json_ok(Value::Null)
        },
        Step::Truncated if call.stream => {
            let mut frames = stream_frames(call, &auto(call), None);
            frames.truncate(3);
            // The pause lets hyper flush what was sent, so the client sees a body cut short
            // rather than no answer at all.
            frames.extend([Frame::Pause(Duration::from_millis(20)), Frame::Drop]);
            sse(frames)
        }
        Step::Truncated => {
            let full = completion(call, &auto(call)).to_string();
            let half = full[..full.len() / 2].to_owned();
            Planned {
                content_length: Some(full.len()),
                frames: vec![
                    Frame::Data(half),
                    Frame::Pause(Duration::from_millis(20)),
                    Frame::Drop,
                ],
                ..json_ok(Value::Null)
            }
        }
        Step::Empty => Planned {
            frames: Vec::new(),
            ..(if call.stream {
                sse(Vec::new())
            } else {
                json_ok(Value::Null)
            })
        },
        Step::StreamMidError {
            after_chunks,
            message,
        } if call.stream => {
            let error = json!({
                "id": call.generation_id,
                "object": "chat.completion.chunk",
                "created": now_secs(),
                "model": call.model,
                "provider": "Fake",
                "error": { "code": "server_error", "message": message },
                "choices": [{ "index": 0, "delta": { "content": "" }, "finish_reason": "error", "native_finish_reason": "error" }],
            });
            sse(stream_frames(
                call,
                &auto(call),
                Some((*after_chunks, Frame::Data(format!("data: {error}\n\n")))),
            ))
        }
        Step::StreamMidError { message, .. } => json_ok(error_body(502, message)),
        Step::Stall { after_chunks } if call.stream => sse(stream_frames(
            call,
            &auto(call),
            Some((*after_chunks, Frame::Silence)),
        )),
        Step::Stall { .. } | Step::Hang => return None,
        // Content steps were answered above; `Delayed` is unwrapped by the caller.
        Step::Auto
        | Step::Text { .. }
        | Step::Code { .. }
        | Step::Verdict { .. }
        | Step::Image { .. }
        | Step::CutAtCap { .. }
        | Step::Delayed { .. } => {
            json_ok(error_body(500, "the fake upstream cannot plan this step"))
        }
    };
    Some(planned)
}

fn auto(call: &Call) -> Answer {
    answer_for(&Step::Auto, &call.prompt).unwrap_or_default()
}

fn json_ok(body: Value) -> Planned {
    Planned {
        status: StatusCode::OK,
        content_type: JSON,
        headers: Vec::new(),
        content_length: None,
        frames: vec![Frame::Data(body.to_string())],
    }
}

fn sse(frames: Vec<Frame>) -> Planned {
    Planned {
        status: StatusCode::OK,
        content_type: SSE,
        headers: Vec::new(),
        content_length: None,
        frames,
    }
}

/// `{"error": {"code", "message", "metadata"}}`, the shape OpenRouter uses for every error.
pub(crate) fn error_body(code: u16, message: &str) -> Value {
    json!({ "error": { "code": code, "message": message, "metadata": {} } })
}

/// What OpenRouter says for each status, so that logs in tests look like production logs.
fn canned_message(status: u16, model: &str) -> String {
    match status {
        400 => "Invalid request: messages must be a non-empty array".to_owned(),
        401 => "No auth credentials found".to_owned(),
        402 => {
            "Insufficient credits. Add more using https://openrouter.ai/settings/credits".to_owned()
        }
        403 => "Your input was flagged by moderation".to_owned(),
        404 => format!("No endpoints found for {model}."),
        408 => "Request timed out".to_owned(),
        429 => format!("{model} is temporarily rate-limited upstream. Please retry shortly."),
        502 => "Provider returned error".to_owned(),
        503 => "No available model provider that meets your routing requirements".to_owned(),
        504 => "Gateway timeout".to_owned(),
        _ => format!("Fake upstream error {status}"),
    }
}

fn usage(call: &Call, answer: &Answer) -> Value {
    let prompt_tokens = call.prompt_tokens;
    let cached = call.cached_tokens.min(prompt_tokens);
    let completion_tokens =
        ((answer.content.chars().count() + answer.images.len() * 1000) / 4 + 1) as u64;
    // Prices of a mid-range model: $1 per million prompt tokens, a tenth of that for those read
    // from the prompt cache, $2 per million completion tokens.
    let cost =
        ((prompt_tokens - cached) as f64 + 0.1 * cached as f64 + 2.0 * completion_tokens as f64)
            / 1_000_000.0;
    let mut usage = json!({
        "prompt_tokens": prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    if call.report_cost {
        usage["cost"] = json!(cost);
        usage["is_byok"] = json!(false);
    }
    usage
}

fn images(answer: &Answer) -> Value {
    answer
        .images
        .iter()
        .map(|url| json!({ "type": "image_url", "image_url": { "url": url } }))
        .collect()
}

/// A non-streamed `chat.completion`, as OpenRouter returns it.
fn completion(call: &Call, answer: &Answer) -> Value {
    let mut message = json!({ "role": "assistant", "content": answer.content, "refusal": null, "reasoning": null });
    if !answer.images.is_empty() {
        message["images"] = images(answer);
    }
    json!({
        "id": call.generation_id,
        "provider": "Fake",
        "model": call.model,
        "object": "chat.completion",
        "created": now_secs(),
        "choices": [{ "logprobs": null, "finish_reason": answer.finish_reason(), "native_finish_reason": answer.finish_reason(), "index": 0, "message": message }],
        "usage": usage(call, answer),
    })
}

fn chunk(call: &Call, delta: Value, finish_reason: Option<&str>) -> Frame {
    let chunk = json!({
        "id": call.generation_id,
        "provider": "Fake",
        "model": call.model,
        "object": "chat.completion.chunk",
        "created": now_secs(),
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason, "native_finish_reason": finish_reason, "logprobs": null }],
    });
    Frame::Data(format!("data: {chunk}\n\n"))
}

/// The SSE frames of a streamed answer: a keep-alive comment, content deltas (with keep-alives
/// and pauses between them when trickling), the finish chunk, a usage chunk with empty
/// `choices` (as OpenRouter sends last), and `[DONE]`. With `cut`, the stream ends after that
/// many content chunks with the given frame instead.
fn stream_frames(call: &Call, answer: &Answer, cut: Option<(usize, Frame)>) -> Vec<Frame> {
    let mut frames = vec![Frame::Data(KEEP_ALIVE.to_owned())];
    let pieces = split_content(&answer.content, 16);
    for (i, piece) in pieces.iter().enumerate() {
        if let Some((after, _)) = &cut
            && i == *after
        {
            break;
        }
        if let Some(pause) = call.trickle {
            frames.push(Frame::Pause(pause));
            if i % 4 == 3 {
                frames.push(Frame::Data(KEEP_ALIVE.to_owned()));
            }
        }
        frames.push(chunk(
            call,
            json!({ "role": "assistant", "content": piece }),
            None,
        ));
    }
    if let Some((_, last)) = cut {
        frames.push(last);
        return frames;
    }
    if !answer.images.is_empty() {
        frames.push(chunk(
            call,
            json!({ "role": "assistant", "content": null, "images": images(answer) }),
            None,
        ));
    }
    frames.push(chunk(
        call,
        json!({ "role": "assistant", "content": "" }),
        Some(answer.finish_reason()),
    ));
    let usage_chunk = json!({
        "id": call.generation_id,
        "provider": "Fake",
        "model": call.model,
        "object": "chat.completion.chunk",
        "created": now_secs(),
        "choices": [],
        "usage": usage(call, answer),
    });
    frames.push(Frame::Data(format!("data: {usage_chunk}\n\n")));
    frames.push(Frame::Data("data: [DONE]\n\n".to_owned()));
    frames
}

/// Splits on character boundaries into pieces of at most `max_chars`.
fn split_content(content: &str, max_chars: usize) -> Vec<String> {
    let chars: Vec<char> = content.chars().collect();
    chars
        .chunks(max_chars.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Builds the axum response; `guard` lives as long as the body, so that a streamed answer
/// counts as in flight until its last byte (or until the client hangs up).
pub(crate) fn into_response<G: Send + 'static>(planned: Planned, guard: G) -> Response {
    let Planned {
        status,
        content_type,
        headers,
        content_length,
        frames,
    } = planned;
    let body = futures::stream::unfold(
        (frames.into_iter(), Some(guard)),
        |(mut frames, guard)| async move {
            loop {
                match frames.next()? {
                    Frame::Data(data) => {
                        return Some((Ok::<_, std::io::Error>(Bytes::from(data)), (frames, guard)));
                    }
                    Frame::Pause(pause) => tokio::time::sleep(pause).await,
                    Frame::Drop => {
                        return Some((
                            Err(std::io::Error::other("fake upstream drops the connection")),
                            (frames, guard),
                        ));
                    }
                    Frame::Silence => std::future::pending::<()>().await,
                }
            }
        },
    );
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if content_type == SSE {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if let Some(len) = content_length {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            h.insert(name, value);
        }
    }
    response
}

/// A JSON error answer for requests the fake cannot even read.
pub(crate) fn bad_request(message: &str) -> Response {
    into_response(
        Planned {
            status: StatusCode::BAD_REQUEST,
            ..json_ok(error_body(400, message))
        },
        (),
    )
}
