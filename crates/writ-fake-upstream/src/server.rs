//! The HTTP side of the fake: the chat-completions route, the admin routes, and the state
//! they share (scripts, recorded calls, in-flight counts).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Serialize;
use serde_json::Value;

use crate::respond::{Call, bad_request, into_response, plan};
use crate::script::{Latency, PromptRoute, Script, Step};

/// One request the fake received, for tests to assert on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedCall {
    pub model: String,
    /// When the request arrived (before any scripted latency).
    #[serde(skip)]
    pub at: Instant,
    /// `at`, relative to the start of the fake (what the admin endpoint shows).
    #[serde(rename = "at_ms", serialize_with = "as_millis")]
    pub since_start: Duration,
    pub body: Value,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
}

impl RecordedCall {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A script being played: the steps not yet used.
#[derive(Debug, Clone)]
struct Playing {
    queue: VecDeque<Step>,
    then: Step,
    latency: Option<Latency>,
    trickle: Option<Duration>,
}

impl From<Script> for Playing {
    fn from(s: Script) -> Self {
        Self {
            queue: s.steps.into(),
            then: s.then.unwrap_or(Step::Auto),
            latency: s.latency,
            trickle: s.trickle,
        }
    }
}

#[derive(Debug, Default)]
struct InFlight {
    total: usize,
    peak_total: usize,
    per_model: HashMap<String, usize>,
    peak_per_model: HashMap<String, usize>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    started: Instant,
    scripts: Mutex<HashMap<String, Playing>>,
    /// Keyed by model, then needle; checked in the order they were first set.
    routes: Mutex<Vec<(String, String, Playing)>>,
    default: Mutex<Script>,
    calls: Mutex<Vec<RecordedCall>>,
    in_flight: Mutex<InFlight>,
    next_id: AtomicU64,
    /// Per model, the latest prompts it was sent: its prompt cache.
    prefixes: Mutex<HashMap<String, VecDeque<Arc<str>>>>,
    /// Whether answers carry `usage.cost` (OpenRouter's do; a provider without it is priced by
    /// writ).
    pub(crate) report_cost: AtomicBool,
}

/// Prompts a model's cache remembers (the oldest is forgotten first).
const CACHED_PROMPTS: usize = 32;
/// A provider caches nothing shorter, and counts cached tokens in blocks of this size (OpenAI's
/// automatic caching: 1,024 tokens at least, then steps of 128).
const CACHE_MIN_TOKENS: u64 = 1024;
const CACHE_BLOCK_TOKENS: u64 = 128;

/// Locks without caring about poisoning: a panicking test thread must not hide the record
/// from the next assertion.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            scripts: Mutex::default(),
            routes: Mutex::default(),
            default: Mutex::default(),
            calls: Mutex::default(),
            in_flight: Mutex::default(),
            next_id: AtomicU64::new(1),
            prefixes: Mutex::default(),
            report_cost: AtomicBool::new(true),
        }
    }

    /// The tokens of `prompt` this model's cache serves (the longest prefix it shares with an
    /// earlier prompt to the same model, in whole blocks), and remembers the prompt.
    pub(crate) fn cached_tokens(&self, model: &str, prompt: &str) -> u64 {
        let mut all = lock(&self.prefixes);
        let seen = all.entry(model.to_owned()).or_default();
        let common = seen
            .iter()
            .map(|p| common_prefix_chars(p, prompt))
            .max()
            .unwrap_or(0);
        if seen.len() == CACHED_PROMPTS {
            seen.pop_front();
        }
        seen.push_back(Arc::from(prompt));
        let tokens = common as u64 / 4;
        if tokens < CACHE_MIN_TOKENS {
            return 0;
        }
        tokens - tokens % CACHE_BLOCK_TOKENS
    }

    pub(crate) fn script(&self, model: &str, script: Script) {
        lock(&self.scripts).insert(model.to_owned(), script.into());
    }

    pub(crate) fn route(&self, route: PromptRoute) {
        let mut routes = lock(&self.routes);
        let playing: Playing = route.script.into();
        match routes
            .iter_mut()
            .find(|(m, n, _)| *m == route.model && *n == route.prompt_contains)
        {
            Some(slot) => slot.2 = playing,
            None => routes.push((route.model, route.prompt_contains, playing)),
        }
    }

    pub(crate) fn set_default(&self, script: Script) {
        *lock(&self.default) = script;
    }

    pub(crate) fn calls(&self) -> Vec<RecordedCall> {
        lock(&self.calls).clone()
    }

    pub(crate) fn clear_calls(&self) {
        lock(&self.calls).clear();
    }

    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.in_flight).total
    }

    pub(crate) fn in_flight_for(&self, model: &str) -> usize {
        lock(&self.in_flight)
            .per_model
            .get(model)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn peak_in_flight(&self) -> usize {
        lock(&self.in_flight).peak_total
    }

    pub(crate) fn peak_in_flight_for(&self, model: &str) -> usize {
        lock(&self.in_flight)
            .peak_per_model
            .get(model)
            .copied()
            .unwrap_or(0)
    }

    /// The step for this call of `model`, with the script's latency and trickle: from the first
    /// route whose needle is in `first_prompt`, else the model's script. Unknown models start
    /// playing a copy of the default script.
    fn next_step(
        &self,
        model: &str,
        first_prompt: &str,
    ) -> (Step, Option<Latency>, Option<Duration>) {
        {
            let mut routes = lock(&self.routes);
            if let Some((_, _, playing)) = routes
                .iter_mut()
                .find(|(m, needle, _)| m == model && first_prompt.contains(needle.as_str()))
            {
                let step = playing
                    .queue
                    .pop_front()
                    .unwrap_or_else(|| playing.then.clone());
                return (step, playing.latency, playing.trickle);
            }
        }
        let mut scripts = lock(&self.scripts);
        let playing = scripts
            .entry(model.to_owned())
            .or_insert_with(|| lock(&self.default).clone().into());
        let step = playing
            .queue
            .pop_front()
            .unwrap_or_else(|| playing.then.clone());
        (step, playing.latency, playing.trickle)
    }

    fn record(&self, model: &str, at: Instant, body: Value, headers: &HeaderMap) {
        let headers = headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        lock(&self.calls).push(RecordedCall {
            model: model.to_owned(),
            at,
            since_start: at.duration_since(self.started),
            body,
            headers,
        });
    }
}

/// Counts a request as in flight until dropped: when the answer is complete, or when the
/// client hangs up and hyper drops the handler future or the body stream.
struct InFlightGuard {
    shared: Arc<Shared>,
    model: String,
}

impl InFlightGuard {
    fn enter(shared: Arc<Shared>, model: &str) -> Self {
        {
            let mut f = lock(&shared.in_flight);
            f.total += 1;
            f.peak_total = f.peak_total.max(f.total);
            let now = {
                let n = f.per_model.entry(model.to_owned()).or_default();
                *n += 1;
                *n
            };
            let peak = f.peak_per_model.entry(model.to_owned()).or_default();
            *peak = (*peak).max(now);
        }
        Self {
            shared,
            model: model.to_owned(),
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut f = lock(&self.shared.in_flight);
        f.total = f.total.saturating_sub(1);
        if let Some(n) = f.per_model.get_mut(&self.model) {
            *n = n.saturating_sub(1);
        }
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(list_models))
        .route("/_fake/script/{*model}", put(put_script))
        .route("/_fake/route", put(put_route))
        .route("/_fake/default", put(put_default))
        .route("/_fake/calls", get(get_calls).delete(delete_calls))
        .with_state(shared)
}

/// `POST /v1/chat/completions`: records the call, then plays the model's next step.
async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = Instant::now();
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("the request body is not JSON");
    };
    let Some(model) = body.get("model").and_then(Value::as_str).map(str::to_owned) else {
        return bad_request("`model` is required");
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let prompt = last_user_message(&body);
    let first_prompt = first_user_message(&body);
    let whole = whole_prompt(&body);
    let cached_tokens = shared.cached_tokens(&model, &whole);
    // The body moves into the call record instead of being copied: at the benchmark's ceiling
    // the fake answers thousands of calls a second on the machine writ is measured on.
    shared.record(&model, at, body, &headers);
    let guard = InFlightGuard::enter(shared.clone(), &model);

    let (mut step, latency, trickle) = shared.next_step(&model, &first_prompt);
    let call = Call {
        stream,
        prompt,
        prompt_tokens: whole.chars().count() as u64 / 4 + 1,
        cached_tokens,
        report_cost: shared.report_cost.load(Ordering::Relaxed),
        trickle,
        generation_id: format!(
            "gen-{}-fake{}",
            shared.next_id.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        ),
        model,
    };
    if let Some(latency) = latency {
        tokio::time::sleep(latency.sample()).await;
    }
    while let Step::Delayed {
        latency,
        step: inner,
    } = step
    {
        tokio::time::sleep(latency.sample()).await;
        step = *inner;
    }
    match plan(&step, &call) {
        Some(planned) => into_response(planned, guard),
        None => {
            // Hanging here keeps `guard` alive until the client gives up.
            std::future::pending::<()>().await;
            drop(guard);
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

fn last_user_message(body: &Value) -> String {
    user_message(body, true)
}

fn first_user_message(body: &Value) -> String {
    user_message(body, false)
}

fn common_prefix_chars(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// A message's text: a string, or the text parts of an array (the shape that carries
/// Anthropic's `cache_control`).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Every message's text in order, roles included: what a provider counts and caches.
fn whole_prompt(body: &Value) -> String {
    let mut out = String::new();
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(m.get("role").and_then(Value::as_str).unwrap_or_default());
        out.push('\n');
        out.push_str(&text_of(m.get("content")));
        out.push('\n');
    }
    out
}

fn user_message(body: &Value, last: bool) -> String {
    let is_user = |m: &&Value| m.get("role").and_then(Value::as_str) == Some("user");
    body.get("messages")
        .and_then(Value::as_array)
        .and_then(|msgs| {
            if last {
                msgs.iter().rev().find(is_user)
            } else {
                msgs.iter().find(is_user)
            }
        })
        .map(|m| text_of(m.get("content")))
        .unwrap_or_default()
}

/// `GET /v1/models`: the scripted models, in the OpenAI list shape.
async fn list_models(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let mut ids: Vec<String> = lock(&shared.scripts).keys().cloned().collect();
    ids.sort();
    let data: Vec<Value> = ids
        .into_iter()
        .map(|id| serde_json::json!({ "id": id, "object": "model" }))
        .collect();
    Json(serde_json::json!({ "object": "list", "data": data }))
}

/// `PUT /_fake/script/{model}`: replaces the model's script.
async fn put_script(
    State(shared): State<Arc<Shared>>,
    Path(model): Path<String>,
    Json(script): Json<Script>,
) -> StatusCode {
    shared.script(&model, script);
    StatusCode::NO_CONTENT
}

/// `PUT /_fake/route`: sets (or replaces) the script of one model and prompt needle.
async fn put_route(
    State(shared): State<Arc<Shared>>,
    Json(route): Json<PromptRoute>,
) -> StatusCode {
    shared.route(route);
    StatusCode::NO_CONTENT
}

/// `PUT /_fake/default`: replaces what models without a script answer.
async fn put_default(State(shared): State<Arc<Shared>>, Json(script): Json<Script>) -> StatusCode {
    shared.set_default(script);
    StatusCode::NO_CONTENT
}

/// `GET /_fake/calls`: every call so far; bearer tokens are masked because benchmark logs
/// get shared.
async fn get_calls(State(shared): State<Arc<Shared>>) -> Json<Vec<RecordedCall>> {
    let mut calls = shared.calls();
    for call in &mut calls {
        if let Some(auth) = call.headers.get_mut("authorization") {
            *auth = format!("<{} bytes, masked>", auth.len());
        }
    }
    Json(calls)
}

/// `DELETE /_fake/calls`: forgets the calls so far.
async fn delete_calls(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.clear_calls();
    StatusCode::NO_CONTENT
}
