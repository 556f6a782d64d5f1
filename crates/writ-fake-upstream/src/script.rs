//! What the fake answers: per-model [`Script`]s made of [`Step`]s, with optional [`Latency`].
//!
//! Everything here is plain data with serde derives so that the same scripts can be written in
//! Rust (tests) or in a JSON file handed to the binary (benchmarks). Durations are milliseconds
//! in JSON (`*_ms` fields) because that is what a person editing a bench script writes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The answers one model gives: `steps` are consumed one per call, then `then` answers every
/// later call (the automatic code answer when absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Script {
    pub steps: Vec<Step>,
    pub then: Option<Step>,
    /// Delay before answering, applied to every call of this model (a step can add its own).
    pub latency: Option<Latency>,
    /// Pause between SSE chunks, to imitate a slow token stream.
    #[serde(rename = "trickle_ms", with = "opt_millis")]
    pub trickle: Option<Duration>,
}

impl Script {
    /// The same step for every call.
    pub fn always(step: Step) -> Self {
        Self {
            then: Some(step),
            ..Self::default()
        }
    }

    /// These steps in order, then the automatic answer.
    pub fn steps(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
            ..Self::default()
        }
    }

    /// `times` answers with HTTP `status`, then `step` for every later call.
    pub fn fail_then(times: usize, status: u16, step: Step) -> Self {
        Self {
            steps: vec![Step::status(status); times],
            then: Some(step),
            ..Self::default()
        }
    }

    /// What to answer once `steps` are used up.
    #[must_use]
    pub fn then(mut self, step: Step) -> Self {
        self.then = Some(step);
        self
    }

    #[must_use]
    pub fn with_latency(mut self, latency: Latency) -> Self {
        self.latency = Some(latency);
        self
    }

    #[must_use]
    pub fn with_trickle(mut self, between_chunks: Duration) -> Self {
        self.trickle = Some(between_chunks);
        self
    }
}

/// One answer. Content steps (`auto`, `text`, `code`, `verdict`, `image`) answer as a JSON
/// chat completion, or as an SSE stream when the request has `"stream": true`; the others
/// imitate the ways real providers fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A fenced code block in the language the prompt seems to ask for (python if unsure).
    Auto,
    Text {
        content: String,
    },
    /// A fenced block; with `prose`, wrapped in a sentence before and after as chatty models do.
    Code {
        lang: String,
        code: String,
        #[serde(default)]
        prose: bool,
    },
    /// JSON content `{"choice": ..., "reason": ...}`, as an arbiter answers.
    Verdict {
        choice: serde_json::Value,
        reason: String,
    },
    /// An image in `message.images[]` (a data URL), with optional text content.
    Image {
        data_url: String,
        #[serde(default)]
        content: String,
    },
    /// An HTTP error. `body` defaults to an OpenRouter-shaped `{"error": {...}}`.
    Status {
        status: u16,
        #[serde(default)]
        body: Option<String>,
        #[serde(default)]
        retry_after: Option<String>,
    },
    /// HTTP 200 whose body is `{"error": {"code", "message"}}`, as OpenRouter sometimes answers.
    #[serde(rename = "error_in_200")]
    ErrorIn200 {
        code: u16,
        message: String,
    },
    /// Text that stopped at the model's token cap: `finish_reason: "length"`, as a provider
    /// answers when `max_tokens` ran out mid-answer.
    CutAtCap {
        content: String,
    },
    /// HTTP 200 with a body (or SSE data) that is not valid JSON.
    Malformed,
    /// The connection drops partway through the body.
    Truncated,
    /// HTTP 200 with an empty body.
    Empty,
    /// Streams `after_chunks` content chunks, then an SSE error event (non-streaming: an error
    /// inside a 200, code 502).
    StreamMidError {
        after_chunks: usize,
        message: String,
    },
    /// Streams `after_chunks` content chunks, then goes silent with the connection open.
    Stall {
        after_chunks: usize,
    },
    /// Never answers: not even headers.
    Hang,
    /// `step`, answered after an extra delay.
    Delayed {
        latency: Latency,
        step: Box<Step>,
    },
}

impl Step {
    pub fn text(content: impl Into<String>) -> Self {
        Self::Text {
            content: content.into(),
        }
    }

    /// `content`, stopped at the token cap (`finish_reason: "length"`).
    pub fn cut_at_cap(content: impl Into<String>) -> Self {
        Self::CutAtCap {
            content: content.into(),
        }
    }

    pub fn code(lang: impl Into<String>, code: impl Into<String>) -> Self {
        Self::Code {
            lang: lang.into(),
            code: code.into(),
            prose: false,
        }
    }

    pub fn code_in_prose(lang: impl Into<String>, code: impl Into<String>) -> Self {
        Self::Code {
            lang: lang.into(),
            code: code.into(),
            prose: true,
        }
    }

    pub fn verdict(choice: impl Into<serde_json::Value>, reason: impl Into<String>) -> Self {
        Self::Verdict {
            choice: choice.into(),
            reason: reason.into(),
        }
    }

    pub fn image(data_url: impl Into<String>) -> Self {
        Self::Image {
            data_url: data_url.into(),
            content: String::new(),
        }
    }

    pub fn status(status: u16) -> Self {
        Self::Status {
            status,
            body: None,
            retry_after: None,
        }
    }

    /// An HTTP error with a `Retry-After` header, verbatim (seconds or an HTTP date).
    pub fn status_with_retry_after(status: u16, retry_after: impl Into<String>) -> Self {
        Self::Status {
            status,
            body: None,
            retry_after: Some(retry_after.into()),
        }
    }

    /// An HTTP error with this exact body.
    pub fn status_with_body(status: u16, body: impl Into<String>) -> Self {
        Self::Status {
            status,
            body: Some(body.into()),
            retry_after: None,
        }
    }

    pub fn error_in_200(code: u16, message: impl Into<String>) -> Self {
        Self::ErrorIn200 {
            code,
            message: message.into(),
        }
    }

    pub fn stream_mid_error(after_chunks: usize, message: impl Into<String>) -> Self {
        Self::StreamMidError {
            after_chunks,
            message: message.into(),
        }
    }

    /// This step, answered after `latency`.
    #[must_use]
    pub fn after(self, latency: Latency) -> Self {
        Self::Delayed {
            latency,
            step: Box::new(self),
        }
    }
}

/// How long the fake waits before answering.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Latency {
    Fixed {
        #[serde(rename = "ms", with = "millis")]
        delay: Duration,
    },
    /// Lognormal with this median and 99th percentile: most calls are quick, a few are very
    /// slow, as with real providers.
    HeavyTail {
        #[serde(rename = "median_ms", with = "millis")]
        median: Duration,
        #[serde(rename = "p99_ms", with = "millis")]
        p99: Duration,
    },
}

impl Latency {
    pub fn fixed(delay: Duration) -> Self {
        Self::Fixed { delay }
    }

    pub fn heavy_tail(median: Duration, p99: Duration) -> Self {
        Self::HeavyTail { median, p99 }
    }

    /// One delay drawn from this distribution.
    pub fn sample(&self) -> Duration {
        match *self {
            Self::Fixed { delay } => delay,
            Self::HeavyTail { median, p99 } => {
                // z of the 99th percentile of the standard normal distribution.
                const Z99: f64 = 2.326_347_874;
                let median_s = median.as_secs_f64().max(1e-6);
                let sigma = (p99.as_secs_f64().max(median_s) / median_s).ln() / Z99;
                let secs = median_s * (sigma * standard_normal()).exp();
                // A bound keeps a pathological draw from stalling a benchmark forever.
                Duration::from_secs_f64(secs.min(p99.as_secs_f64() * 10.0))
            }
        }
    }
}

/// Box–Muller: two uniforms make one standard normal draw.
fn standard_normal() -> f64 {
    let u1: f64 = rand::random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rand::random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// A script for the calls of one model whose first user message contains `prompt_contains`.
///
/// A batch of several files asks each model once per file, concurrently, so a model's plain
/// script cannot say which answer goes to which file; a route can (its needle is e.g. the
/// prompt's opening line naming the file). Repair prompts keep the first user message, so a
/// route also answers the repairs of its file. Each route plays its own steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptRoute {
    pub model: String,
    pub prompt_contains: String,
    pub script: Script,
}

/// The JSON file the binary reads: scripts per model, routes by prompt, and what unknown models
/// answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptFile {
    pub models: BTreeMap<String, Script>,
    pub routes: Vec<PromptRoute>,
    pub default: Option<Script>,
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::millis::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|ms| ms.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_file_reads_from_json_with_millisecond_fields() {
        let json = r#"{
            "models": {
                "flaky": {
                    "steps": [{"kind": "status", "status": 503, "retry_after": "1"}],
                    "then": {"kind": "code", "lang": "rust", "code": "fn main() {}"},
                    "latency": {"kind": "heavy_tail", "median_ms": 200, "p99_ms": 3000},
                    "trickle_ms": 20
                },
                "judge": {"then": {"kind": "verdict", "choice": 1, "reason": "shorter"}}
            },
            "default": {"then": {"kind": "auto"}}
        }"#;
        let file: ScriptFile = serde_json::from_str(json).unwrap();
        let flaky = &file.models["flaky"];
        assert_eq!(flaky.steps, vec![Step::status_with_retry_after(503, "1")]);
        assert_eq!(flaky.trickle, Some(Duration::from_millis(20)));
        assert_eq!(
            flaky.latency,
            Some(Latency::heavy_tail(
                Duration::from_millis(200),
                Duration::from_secs(3)
            ))
        );
        assert_eq!(file.models["judge"].then, Some(Step::verdict(1, "shorter")));
        let again: ScriptFile =
            serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(again, file);
    }

    #[test]
    fn the_example_bench_script_parses() {
        let file: ScriptFile =
            serde_json::from_str(include_str!("../bench-script.example.json")).unwrap();
        assert_eq!(file.models.len(), 5);
        assert!(file.default.is_some());
    }

    #[test]
    fn an_unknown_step_kind_is_rejected() {
        assert!(serde_json::from_str::<Step>(r#"{"kind": "teapot"}"#).is_err());
    }

    #[test]
    fn heavy_tail_latency_has_the_asked_median_and_a_long_tail() {
        let latency = Latency::heavy_tail(Duration::from_millis(100), Duration::from_millis(1000));
        let mut samples: Vec<Duration> = (0..4000).map(|_| latency.sample()).collect();
        samples.sort();
        let median = samples[samples.len() / 2];
        let p99 = samples[samples.len() * 99 / 100];
        assert!(
            (70..=140).contains(&median.as_millis()),
            "median {median:?}"
        );
        assert!((500..=2000).contains(&p99.as_millis()), "p99 {p99:?}");
    }
}
