//! The model layer as the core sees it: one chat call, typed, with a classified error.
//!
//! `writ-models` implements [`ModelClient`] for OpenRouter and any OpenAI-compatible endpoint;
//! tests drive it against the fake upstream in `writ-fake-upstream`.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// How many leading bytes of `content` are the same in every call of a batch to the same
    /// model (instructions, repository map, named context, current file): the end of the part a
    /// provider's prompt cache can serve. The model layer marks it where a provider needs a
    /// marker (Anthropic's `cache_control`) and keys the prompt on it (OpenAI's
    /// `prompt_cache_key`); never sent as a field of its own.
    #[serde(skip)]
    pub shared_prefix: Option<usize>,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
            shared_prefix: None,
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
            shared_prefix: None,
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
            shared_prefix: None,
        }
    }

    /// This message with its first `bytes` bytes marked as shared by the calls to a model
    /// (cut down to the content's length, and to a character boundary).
    #[must_use]
    pub fn with_shared_prefix(mut self, bytes: usize) -> Self {
        let mut end = bytes.min(self.content.len());
        while !self.content.is_char_boundary(end) {
            end -= 1;
        }
        self.shared_prefix = (end > 0).then_some(end);
        self
    }
}

/// What a model call is for, so a provider can size it: a whole file or a test file needs far
/// more completion tokens than a verdict. The calls that are not candidates are the `CallRole`s
/// of the audit record, under the same names (the audit record converts one into the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CallPurpose {
    /// A candidate's whole file.
    #[default]
    Candidate,
    /// A candidate sent back with its failure, answering the whole file again.
    Repair,
    /// The arbiter's verdict among whole candidates.
    Arbiter,
    /// A test file of generated checks.
    TestWriter,
    /// The arbiter's verdict on distinguishing inputs.
    Distinguishing,
    /// An image.
    Image,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
    /// An OpenAI `response_format` object, e.g. `{"type":"json_schema",...}` for the arbiter.
    pub response_format: Option<serde_json::Value>,
    /// `["image","text"]` for image generation.
    pub modalities: Option<Vec<String>>,
    /// Goes ahead of the calls already waiting for a concurrency slot (never of those holding
    /// one): a resumed batch's calls, whose caller has waited since before its replica died and
    /// would otherwise queue behind every batch the resuming replica admitted meanwhile.
    pub urgent: bool,
    /// What the call is for; the embedded provider sizes its token cap by it.
    pub purpose: CallPurpose,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Of `prompt_tokens`, those the provider served from its prompt cache (and bills at its
    /// cached price, already in `cost`).
    pub cached_tokens: Option<u64>,
    /// Provider-reported cost in credits (OpenRouter: USD).
    pub cost: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    pub content: String,
    /// Image data URLs (`data:image/png;base64,...`).
    pub images: Vec<String>,
    pub finish_reason: Option<String>,
    pub usage: Usage,
    pub generation_id: Option<String>,
    /// Wall time of the whole call, retries included.
    pub latency: Duration,
    /// Time to the first content byte of the successful attempt, when streamed.
    pub time_to_first_token: Option<Duration>,
    pub attempts: u32,
}

/// Why a model call failed. Retryable classes may succeed on another attempt; permanent ones never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    // retryable
    RequestTimeout,
    RateLimited,
    ServerError,
    Timeout,
    Network,
    MidStream,
    BadResponse,
    // permanent
    BadRequest,
    Unauthorized,
    PaymentRequired,
    Forbidden,
    NotFound,
    // decided by writ, not the provider
    CircuitOpen,
    DeadlineExceeded,
    Cancelled,
    /// The model answered, but no code could be extracted from its answer.
    NoCode,
    /// The image model answered, but not with an image writ could check and shape.
    BadImage,
    /// An edit of the answer did not apply to the file (no match, several matches, a block cut
    /// off).
    EditFailed,
    /// The answer put a placeholder ("rest of the code…", a bare `...`) where code was.
    Elided,
    /// The answer removed definitions the description does not ask to remove.
    RemovedDefinitions,
    /// The answer kept too few of the file's lines: it looks cut off.
    Shrunk,
    /// The answer stopped at its token cap (`finish_reason: length`) inside its code: the
    /// file's end is missing, however well what came before parses.
    Truncated,
    /// Not called: the key's or the workspace's budget was spent when the call was to start.
    BudgetExceeded,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestTimeout => "request_timeout",
            Self::RateLimited => "rate_limited",
            Self::ServerError => "server_error",
            Self::Timeout => "timeout",
            Self::Network => "network",
            Self::MidStream => "mid_stream",
            Self::BadResponse => "bad_response",
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::PaymentRequired => "payment_required",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::CircuitOpen => "circuit_open",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Cancelled => "cancelled",
            Self::NoCode => "no_code",
            Self::BadImage => "bad_image",
            Self::EditFailed => "edit_failed",
            Self::Elided => "elided",
            Self::RemovedDefinitions => "removed_definitions",
            Self::Shrunk => "shrunk",
            Self::Truncated => "truncated",
            Self::BudgetExceeded => "budget_exceeded",
        }
    }

    /// Whether another attempt at the same model may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RequestTimeout
                | Self::RateLimited
                | Self::ServerError
                | Self::Timeout
                | Self::Network
                | Self::MidStream
                | Self::BadResponse
        )
    }

    /// Whether the model (or the key) is unusable until someone changes configuration:
    /// the fallback pipeline skips such models.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            Self::BadRequest
                | Self::Unauthorized
                | Self::PaymentRequired
                | Self::Forbidden
                | Self::NotFound
        )
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("model '{model}' failed ({class}{}): {message}", status.map(|s| format!(", HTTP {s}")).unwrap_or_default())]
pub struct ModelError {
    pub model: String,
    pub class: ErrorClass,
    pub status: Option<u16>,
    /// The provider's own message, kept verbatim (secrets are never in it: we never echo the key).
    pub message: String,
    pub attempts: u32,
    pub latency: Duration,
}

/// Whether a provider can serve calls, for `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderReadiness {
    pub name: String,
    pub ready: bool,
    pub detail: String,
}

#[async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// One chat completion, retried as the client's policy allows. Dropping the future cancels
    /// the upstream HTTP request.
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError>;

    /// Whether the provider looks usable (e.g. not after a 401/402).
    fn readiness(&self) -> ProviderReadiness;
}
