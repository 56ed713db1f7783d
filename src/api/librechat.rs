//! Host tool protocol 3, "continuation": the wire contract of the LibreChat agents client
//! (`@librechat/agents` 3.9.x, see docs/protocols.md).
//!
//! Owns `POST /exec/programmatic` (first request and continuations), `POST /exec` (code without
//! tools) and `POST /exec/programmatic/cancel`; the continuation tokens (HMAC-SHA256 with a
//! random key per server, bound to run, round and session, expiring at the run's deadline,
//! single-use); and the paused runs between rounds. A run is one live python child: its host
//! tool calls wait as [`PendingCall`]s while the client runs the tools, so nothing is replayed.
//!
//! It must not decide what a call does (that is `run::dispatch`) nor how code runs (the
//! runner): it turns the request's `tools` into a per-request catalog and hands the run to the
//! runner with `ExecRequest { snapshot, host }`.

use super::{error, json_body, require_key};
use crate::app::AppState;
use crate::catalog::source::parse_tool_list;
use crate::catalog::{Catalog, CatalogInput, Policy};
use crate::render::Snapshot;
use crate::run::runner::new_token;
use crate::run::{CallError, ExecRequest, ExecResult, ExecStatus, PendingCall, Runner};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Largest request body: a continuation carries every tool result of a round (a callback's
/// single result is capped at 16 MiB too, `run::dispatch::MAX_CALLBACK_BYTES`).
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// `tool_call_required` answers one run may give; the client throws on the 21st anyway
/// ("Exceeded maximum round trips (20)"), so the sidecar stops the run before that.
pub const MAX_ROUNDS: u32 = 20;
/// Bounds of the request's `timeout` (ms), as the client's schema has them.
pub const MIN_TIMEOUT_MS: u64 = 1_000;
pub const MAX_TIMEOUT_MS: u64 = 300_000;
/// After a pending call arrives, how long the round waits for a sibling before answering.
/// Calls under `asyncio.gather` leave the child in one event-loop tick but reach the sidecar
/// as separate IPC requests microseconds to a few milliseconds apart; answering on the first
/// would return one call per round, costing a round trip each and the 20-round budget.
/// 20 ms leaves room for a child descheduled on a busy machine, and costs each round 20 ms.
pub const GATHER_QUIET: Duration = Duration::from_millis(20);
/// The longest a round keeps collecting siblings, however steadily they trickle in.
pub const GATHER_CAP: Duration = Duration::from_millis(250);
/// Most calls returned in one round (the runner lets 64 of a run be in flight at once).
pub const MAX_BATCH: usize = 64;
/// Pending calls queued between the code and the round that returns them.
const HOST_QUEUE: usize = MAX_BATCH;
/// A paused run's state lives this long past its deadline (the runner has killed the child at
/// the deadline), so a continuation arriving just late still gets "the run is over".
pub const REAP_GRACE: Duration = Duration::from_secs(2);
/// Runs that may be open (running or paused) at once: each holds a child and its state.
pub const MAX_OPEN_RUNS: usize = 256;
/// The header the client puts on each `/exec/programmatic` request; `/cancel` names it.
pub const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";
/// Longest request id remembered (the client sends a UUID).
const MAX_REQUEST_ID_CHARS: usize = 128;
/// Largest `/cancel` body: `{"request_id": "<uuid>"}`.
const MAX_CANCEL_BYTES: usize = 1024;

/// The `error` strings the client shows the model (every other string is hidden).
const ERR_FAILED: &str = "Execution failed or timed out";
const ERR_TIME: &str = "Time limit exceeded";

type HmacSha256 = Hmac<Sha256>;

/// The continuation protocol's router; its routes require `PTC_API_KEY` when one is set.
pub fn router<S>(app: AppState) -> Router<S> {
    let empty = Arc::new(Snapshot::new(Catalog::build(
        CatalogInput::default(),
        &request_policy(),
        1,
    )));
    let lc = Lc(Arc::new(Inner {
        app: app.clone(),
        tokens: Tokens::random(),
        empty,
        runs: Mutex::new(HashMap::new()),
        requests: Mutex::new(HashMap::new()),
    }));
    Router::new()
        .route("/exec/programmatic", post(programmatic))
        .route("/exec/programmatic/cancel", post(cancel))
        .route("/exec", post(plain))
        .layer(middleware::from_fn_with_state(app, require_key))
        .with_state(lc)
}

/// Request tools are the host's own choice (LibreChat already applied `allowed_callers`):
/// every one is a PTC tool, none direct, and the sidecar's allow/deny/read-only policy, which
/// is about its own catalog, does not apply.
fn request_policy() -> Policy {
    Policy {
        ptc_enabled: true,
        ..Policy::default()
    }
}

#[derive(Clone)]
struct Lc(Arc<Inner>);

struct Inner {
    app: AppState,
    tokens: Tokens,
    /// The catalog of `/exec` runs: no tools.
    empty: Arc<Snapshot>,
    runs: Mutex<HashMap<String, Arc<Run>>>,
    /// `X-LibreChat-Code-Request-ID` → run id, for `/cancel`; cleared with the run.
    requests: Mutex<HashMap<String, String>>,
}

/// One open run: its child runs in a spawned task; requests drive it round by round.
struct Run {
    id: String,
    session_id: String,
    deadline: Instant,
    /// The deadline as Unix milliseconds, for tokens.
    expires_ms: u64,
    /// Cancelled when the run is over for the protocol: stops the child (if still running)
    /// and the reaper.
    stop: CancellationToken,
    driver: tokio::sync::Mutex<Driver>,
    request_ids: Mutex<Vec<String>>,
}

impl Run {
    /// A run in round 0 with its channels: where its host calls are sent, and where its
    /// result is delivered.
    fn new(
        id: String,
        session_id: String,
        deadline: Instant,
        expires_ms: u64,
    ) -> (Run, mpsc::Sender<PendingCall>, oneshot::Sender<ExecResult>) {
        let (host, calls) = mpsc::channel(HOST_QUEUE);
        let (done_tx, done) = oneshot::channel();
        let run = Run {
            id,
            session_id,
            deadline,
            expires_ms,
            stop: CancellationToken::new(),
            driver: tokio::sync::Mutex::new(Driver {
                round: 0,
                token_live: false,
                calls,
                done,
                waiting: Vec::new(),
            }),
            request_ids: Mutex::new(Vec::new()),
        };
        (run, host, done_tx)
    }
}

/// The part of a run one request at a time works on.
struct Driver {
    /// `tool_call_required` answers given so far; a token is valid for this round only.
    round: u32,
    /// The token of `round` was issued and not used yet.
    token_live: bool,
    calls: mpsc::Receiver<PendingCall>,
    done: oneshot::Receiver<ExecResult>,
    /// Calls given to the client, waiting for its results.
    waiting: Vec<PendingCall>,
}

/// What a continuation token says; signed, so the client cannot change it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
struct Claims {
    run: String,
    round: u32,
    session: String,
    /// Unix milliseconds.
    exp: u64,
}

#[derive(Debug, PartialEq, thiserror::Error)]
enum TokenError {
    #[error("the continuation token is not one this sidecar issued (malformed or forged)")]
    Invalid,
    #[error("the continuation token expired at its run's deadline")]
    Expired,
}

/// Mints and checks continuation tokens: `hex(claims JSON) "." hex(HMAC-SHA256(key, claims
/// JSON))`. Pure apart from the key; the clock is passed in.
struct Tokens {
    key: [u8; 32],
}

impl Tokens {
    /// A fresh random key: tokens die with the process that issued them.
    fn random() -> Tokens {
        let mut key = [0u8; 32];
        rand::fill(&mut key);
        Tokens { key }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length; a 32-byte one cannot be refused.
        <HmacSha256 as KeyInit>::new_from_slice(&self.key).expect("HMAC accepts any key length")
    }

    fn mint(&self, claims: &Claims) -> String {
        // Serializing a struct of strings and integers cannot fail.
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&payload);
        format!("{}.{}", hex(&payload), hex(&mac.finalize().into_bytes()))
    }

    fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, TokenError> {
        let (payload, tag) = token.split_once('.').ok_or(TokenError::Invalid)?;
        let (payload, tag) = (
            unhex(payload).ok_or(TokenError::Invalid)?,
            unhex(tag).ok_or(TokenError::Invalid)?,
        );
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&tag).map_err(|_| TokenError::Invalid)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::Invalid)?;
        if now_ms >= claims.exp {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

impl Lc {
    fn run(&self, id: &str) -> Option<Arc<Run>> {
        lock(&self.0.runs).get(id).cloned()
    }

    /// Ends a run for the protocol: stops its child and forgets it.
    fn finish(&self, run: &Run) {
        run.stop.cancel();
        lock(&self.0.runs).remove(&run.id);
        let ids = std::mem::take(&mut *lock(&run.request_ids));
        let mut requests = lock(&self.0.requests);
        for id in ids {
            requests.remove(&id);
        }
    }

    fn remember_request(&self, run: &Run, headers: &HeaderMap) {
        let Some(id) = headers
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID_CHARS)
        else {
            return;
        };
        lock(&run.request_ids).push(id.to_string());
        lock(&self.0.requests).insert(id.to_string(), run.id.clone());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A JSON error the client maps by HTTP status (its own text is never shown to the model).
fn reject(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    error(status, kind, message)
}

/// `status: "error"` with a string the client shows and the reason in `stderr` (the only
/// text of an error the model reads).
fn failed(error: &str, stderr: impl Into<String>) -> Response {
    Json(json!({"status": "error", "error": error, "stderr": stderr.into(), "stdout": ""}))
        .into_response()
}

fn ptc_disabled() -> Response {
    error(
        StatusCode::CONFLICT,
        "ptc_disabled",
        "PTC_ENABLED is false on this sidecar: there is no code execution",
    )
}

/// Any `lang` but Python is a permanent capability mismatch, which the client tells the model
/// not to retry.
fn check_lang(lang: Option<&str>) -> Option<Response> {
    match lang {
        None | Some("py" | "python" | "python3") => None,
        Some(other) => Some(
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({
                    "error": "unsupported_capability",
                    "message": format!("ptc-sidecar runs Python only, not {other:?}"),
                })),
            )
                .into_response(),
        ),
    }
}

/// The request's `timeout` (ms) clamped to [1 s, 300 s] and to `PTC_TIMEOUT`.
fn run_timeout(requested_ms: Option<u64>, ceiling: Duration) -> Duration {
    requested_ms
        .map(|ms| Duration::from_millis(ms.clamp(MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)))
        .map_or(ceiling, |t| t.min(ceiling))
}

fn session_or_new(session_id: Option<String>) -> String {
    session_id
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("ptc-{}", &new_token()[..24]))
}

#[derive(Deserialize)]
struct FirstBody {
    code: String,
    #[serde(default)]
    tools: Option<Value>,
    timeout: Option<u64>,
    session_id: Option<String>,
    lang: Option<String>,
}

#[derive(Deserialize)]
struct ContinueBody {
    continuation_token: String,
    #[serde(default)]
    tool_results: Vec<ToolResult>,
    /// Not sent by the LibreChat client; when a caller does send it, it must match.
    session_id: Option<String>,
}

#[derive(Deserialize)]
struct ToolResult {
    call_id: String,
    #[serde(default)]
    result: Value,
    #[serde(default)]
    is_error: bool,
    error_message: Option<String>,
}

const FIRST_SHAPE: &str = r#"{"code": "...", "tools": [...], "timeout"?: ms, "session_id"?: "..."} or {"continuation_token": "...", "tool_results": [...]}"#;

async fn programmatic(State(lc): State<Lc>, request: Request) -> Response {
    let Some(runner) = lc.0.app.runner.clone() else {
        return ptc_disabled();
    };
    let headers = request.headers().clone();
    let body: Value = match json_body(request, MAX_BODY_BYTES, FIRST_SHAPE).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    if body.get("continuation_token").is_some() {
        match serde_json::from_value::<ContinueBody>(body) {
            Ok(b) => continuation(lc, b, &headers).await,
            Err(e) => reject(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("expected {FIRST_SHAPE}: {e}"),
            ),
        }
    } else {
        match serde_json::from_value::<FirstBody>(body) {
            Ok(b) => first(lc, runner, b, &headers).await,
            Err(e) => reject(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("expected {FIRST_SHAPE}: {e}"),
            ),
        }
    }
}

async fn first(lc: Lc, runner: Runner, body: FirstBody, headers: &HeaderMap) -> Response {
    if let Some(response) = check_lang(body.lang.as_deref()) {
        return response;
    }
    if body.code.trim().is_empty() {
        return reject(StatusCode::BAD_REQUEST, "bad_request", "\"code\" is empty");
    }
    let tools = body.tools.unwrap_or_else(|| json!([]));
    let (defs, problems) = match parse_tool_list("request tools", &tools) {
        Ok(parsed) => parsed,
        Err(message) => return reject(StatusCode::BAD_REQUEST, "bad_request", message),
    };
    for p in problems.iter().filter(|p| p.skipped) {
        tracing::warn!("continuation request: {p}");
    }
    let snapshot = Arc::new(Snapshot::new(Catalog::build(
        CatalogInput {
            host_tools: defs,
            problems,
            ..CatalogInput::default()
        },
        &request_policy(),
        1,
    )));
    if lock(&lc.0.runs).len() >= MAX_OPEN_RUNS {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            Json(json!({"error": "rate_limited", "retry_after_seconds": 1})),
        )
            .into_response();
    }
    let timeout = run_timeout(body.timeout, runner.config().timeout);
    let run = start(
        &lc,
        &runner,
        Start {
            code: body.code,
            snapshot,
            timeout,
            session_id: session_or_new(body.session_id),
        },
    );
    lc.remember_request(&run, headers);
    let mut driver = run.driver.lock().await;
    advance(&lc, &run, &mut driver).await
}

struct Start {
    code: String,
    snapshot: Arc<Snapshot>,
    timeout: Duration,
    session_id: String,
}

/// Starts the run in its own task (so it outlives the request that started it) and a reaper
/// that frees it at its deadline if no client comes back for it.
fn start(lc: &Lc, runner: &Runner, s: Start) -> Arc<Run> {
    let deadline = Instant::now() + s.timeout;
    let (run, host, done_tx) = Run::new(
        new_token()[..24].to_string(),
        s.session_id.clone(),
        deadline,
        now_ms() + s.timeout.as_millis() as u64,
    );
    let run = Arc::new(run);
    lock(&lc.0.runs).insert(run.id.clone(), run.clone());
    let request = ExecRequest {
        code: s.code,
        timeout: Some(s.timeout),
        session_id: Some(s.session_id),
        snapshot: Some(s.snapshot),
        host: Some(host),
        output: None,
    };
    let (runner, stop) = (runner.clone(), run.stop.clone());
    tokio::spawn(async move {
        tokio::select! {
            result = runner.exec(request) => { let _ = done_tx.send(result); }
            // Dropping the exec future kills the child and its process group.
            _ = stop.cancelled() => {}
        }
    });
    let (lc2, reaped) = (lc.clone(), run.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline + REAP_GRACE) => {
                tracing::debug!(run = %reaped.id, "continuation run reaped at its deadline");
            }
            _ = reaped.stop.cancelled() => {}
        }
        lc2.finish(&reaped);
    });
    run
}

enum Outcome {
    Calls(Vec<PendingCall>),
    Done(ExecResult),
    Stopped,
}

/// Waits for the run's next answer: a batch of host calls, or its end.
async fn next_outcome(run: &Run, driver: &mut Driver) -> Outcome {
    let first = tokio::select! {
        biased;
        _ = run.stop.cancelled() => return Outcome::Stopped,
        Some(call) = driver.calls.recv() => call,
        result = &mut driver.done => return result.map_or(Outcome::Stopped, Outcome::Done),
        // The runner stops the child at the deadline; this only guards against a lost answer.
        _ = tokio::time::sleep_until(run.deadline + REAP_GRACE) => return Outcome::Stopped,
    };
    let mut batch = vec![first];
    let cap = Instant::now() + GATHER_CAP;
    while batch.len() < MAX_BATCH {
        let until = (Instant::now() + GATHER_QUIET).min(cap);
        match tokio::time::timeout_at(until, driver.calls.recv()).await {
            Ok(Some(call)) => batch.push(call),
            _ => break,
        }
    }
    Outcome::Calls(batch)
}

/// Drives the run to its next answer and says it in the client's terms.
async fn advance(lc: &Lc, run: &Run, driver: &mut Driver) -> Response {
    match next_outcome(run, driver).await {
        Outcome::Calls(batch) => {
            if driver.round >= MAX_ROUNDS {
                let names: Vec<&str> = batch.iter().map(|c| c.tool.as_str()).collect();
                lc.finish(run);
                return failed(
                    ERR_FAILED,
                    format!(
                        "ptc-sidecar: the code needed more than {MAX_ROUNDS} round trips of tool \
                         calls (the next were {}) and was stopped. Start independent calls \
                         together with asyncio.gather so they share one round trip.",
                        names.join(", ")
                    ),
                );
            }
            driver.round += 1;
            driver.token_live = true;
            let token = lc.0.tokens.mint(&Claims {
                run: run.id.clone(),
                round: driver.round,
                session: run.session_id.clone(),
                exp: run.expires_ms,
            });
            let tool_calls: Vec<Value> = batch
                .iter()
                .map(|c| json!({"id": c.id, "name": c.tool, "input": c.input}))
                .collect();
            driver.waiting = batch;
            Json(json!({
                "status": "tool_call_required",
                "continuation_token": token,
                "session_id": run.session_id,
                "tool_calls": tool_calls,
            }))
            .into_response()
        }
        Outcome::Done(result) => {
            lc.finish(run);
            answer(result, &run.session_id)
        }
        Outcome::Stopped => {
            lc.finish(run);
            failed(
                ERR_FAILED,
                "ptc-sidecar: the run was stopped (cancelled, or past its deadline)",
            )
        }
    }
}

/// A finished run as the client reads it: `completed`, or `error` with the traceback in stderr.
fn answer(result: ExecResult, session_id: &str) -> Response {
    match result.status {
        ExecStatus::Ok => Json(json!({
            "status": "completed",
            "stdout": result.stdout,
            "stderr": result.stderr,
            "session_id": session_id,
            "files": [],
        }))
        .into_response(),
        status => {
            let error = match (status, result.exit_code) {
                (ExecStatus::Timeout, _) => ERR_TIME.to_string(),
                // Shown to the model as "Execution exited with code N".
                (_, Some(code)) if (-9999..=9999).contains(&code) => {
                    format!("Sandbox exited with code {code}")
                }
                _ => ERR_FAILED.to_string(),
            };
            // The model reads only stderr of an error: what the code printed first goes too.
            let stderr = if result.stdout.is_empty() {
                result.stderr
            } else {
                format!(
                    "{}\n(stdout before the error)\n{}",
                    result.stderr.trim_end(),
                    result.stdout
                )
            };
            Json(json!({
                "status": "error",
                "error": error,
                "stdout": result.stdout,
                "stderr": stderr,
                "session_id": session_id,
            }))
            .into_response()
        }
    }
}

async fn continuation(lc: Lc, body: ContinueBody, headers: &HeaderMap) -> Response {
    let claims = match lc.0.tokens.verify(&body.continuation_token, now_ms()) {
        Ok(c) => c,
        Err(e @ TokenError::Invalid) => {
            return reject(StatusCode::FORBIDDEN, "invalid_token", e.to_string());
        }
        Err(e @ TokenError::Expired) => {
            return failed(
                ERR_TIME,
                format!("ptc-sidecar: {e}; the run is over. Run the code again."),
            );
        }
    };
    let Some(run) = lc.run(&claims.run) else {
        return failed(
            ERR_FAILED,
            "ptc-sidecar: the run of this continuation token is over (it finished, was \
             cancelled, or its token was already used for its last round). Run the code again.",
        );
    };
    if claims.session != run.session_id
        || body
            .session_id
            .as_ref()
            .is_some_and(|s| *s != run.session_id)
    {
        return reject(
            StatusCode::FORBIDDEN,
            "invalid_token",
            "the continuation token belongs to another session",
        );
    }
    // A request holding the driver is already continuing this run: this token is used.
    let Ok(mut driver) = run.driver.try_lock() else {
        return reject(
            StatusCode::CONFLICT,
            "token_used",
            "this continuation token was already used (each works once)",
        );
    };
    if !driver.token_live || claims.round != driver.round {
        return reject(
            StatusCode::CONFLICT,
            "token_used",
            "this continuation token was already used (each works once)",
        );
    }
    if let Err(message) = check_results(&driver.waiting, &body.tool_results) {
        // The token stays valid: a corrected request may follow.
        return reject(StatusCode::BAD_REQUEST, "bad_request", message);
    }
    driver.token_live = false;
    lc.remember_request(&run, headers);
    deliver(std::mem::take(&mut driver.waiting), body.tool_results);
    advance(&lc, &run, &mut driver).await
}

/// Every result must answer a call of this round, once.
fn check_results(waiting: &[PendingCall], results: &[ToolResult]) -> Result<(), String> {
    let known: HashSet<&str> = waiting.iter().map(|c| c.id.as_str()).collect();
    let mut seen = HashSet::new();
    let mut unknown = Vec::new();
    for r in results {
        if !known.contains(r.call_id.as_str()) {
            unknown.push(r.call_id.as_str());
        } else if !seen.insert(r.call_id.as_str()) {
            return Err(format!("call_id {:?} is answered twice", r.call_id));
        }
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        let expected: Vec<&str> = waiting.iter().map(|c| c.id.as_str()).collect();
        Err(format!(
            "tool_results name call ids this round did not ask for: {}; it asked for: {}",
            unknown.join(", "),
            expected.join(", ")
        ))
    }
}

/// Answers each waiting call; one the client left out fails with a `ToolError` naming it.
fn deliver(waiting: Vec<PendingCall>, results: Vec<ToolResult>) {
    let mut by_id: HashMap<String, ToolResult> = results
        .into_iter()
        .map(|r| (r.call_id.clone(), r))
        .collect();
    for call in waiting {
        let answer = match by_id.remove(&call.id) {
            Some(r) if r.is_error => Err(CallError::Tool(
                r.error_message
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "Tool execution failed".into()),
            )),
            Some(r) => Ok(decoded(r.result)),
            None => Err(CallError::Tool(format!(
                "{}: the client sent no result for call {} in its continuation",
                call.tool, call.id
            ))),
        };
        // The code may have stopped waiting (timeout); nothing to tell then.
        let _ = call.reply.send(answer);
    }
}

/// A result that is a string holding a JSON object or array, decoded. LangChain tools mostly
/// return strings and the client sends them as they are, while its prompt promises the model
/// "Tool results are decoded Python values (dict/list/str)"; other strings stay strings.
fn decoded(result: Value) -> Value {
    match &result {
        Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
            match serde_json::from_str::<Value>(s) {
                Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
                _ => result,
            }
        }
        _ => result,
    }
}

#[derive(Deserialize)]
struct CancelBody {
    request_id: String,
}

async fn cancel(State(lc): State<Lc>, request: Request) -> Response {
    let body: CancelBody =
        match json_body(request, MAX_CANCEL_BYTES, r#"{"request_id": "..."}"#).await {
            Ok(b) => b,
            Err(response) => return response,
        };
    let run_id = lock(&lc.0.requests).get(&body.request_id).cloned();
    match run_id.and_then(|id| lc.run(&id)) {
        Some(run) => {
            lc.finish(&run);
            Json(json!({"status": "cancelled", "request_id": body.request_id})).into_response()
        }
        None => reject(
            StatusCode::NOT_FOUND,
            "not_found",
            "no open run has a request with this id (it may be over)",
        ),
    }
}

#[derive(Deserialize)]
struct PlainBody {
    code: String,
    lang: Option<String>,
    timeout: Option<u64>,
    session_id: Option<String>,
}

/// `POST /exec`: code that calls no tools. The client wraps Python in `async def
/// __user_main__(): ... asyncio.run(__user_main__())`, which cannot run inside our event loop
/// (top-level await is already on), so the wrapper is taken off again.
async fn plain(State(lc): State<Lc>, request: Request) -> Response {
    let Some(runner) = lc.0.app.runner.clone() else {
        return ptc_disabled();
    };
    let body: PlainBody = match json_body(
        request,
        MAX_BODY_BYTES,
        r#"{"lang": "py", "code": "...", "timeout"?: ms}"#,
    )
    .await
    {
        Ok(b) => b,
        Err(response) => return response,
    };
    if let Some(response) = check_lang(body.lang.as_deref()) {
        return response;
    }
    let session_id = session_or_new(body.session_id);
    let result = runner
        .exec(ExecRequest {
            code: unwrap_plain(&body.code).unwrap_or(body.code),
            timeout: Some(run_timeout(body.timeout, runner.config().timeout)),
            session_id: Some(session_id.clone()),
            snapshot: Some(lc.0.empty.clone()),
            ..ExecRequest::default()
        })
        .await;
    answer(result, &session_id)
}

const WRAP_HEAD: &str = "async def __user_main__():\n    \"\"\"Auto-generated wrapper for user code to support top-level await\"\"\"\n";
const WRAP_TAIL: &str =
    "\nif __name__ == \"__main__\":\n    import asyncio\n    asyncio.run(__user_main__())\n";

/// The user's code inside the client's `wrapPythonForPlainExecution`, or `None` when the code
/// is not wrapped exactly that way.
pub fn unwrap_plain(code: &str) -> Option<String> {
    let inner = code.strip_prefix(WRAP_HEAD)?.strip_suffix(WRAP_TAIL)?;
    let inner = inner.strip_suffix('\n').unwrap_or(inner);
    let lines: Option<Vec<&str>> = inner
        .split('\n')
        .map(|line| {
            if line.is_empty() {
                Some(line)
            } else {
                line.strip_prefix("    ")
            }
        })
        .collect();
    Some(lines?.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// What the client's `wrapPythonForPlainExecution` makes of `code`.
    fn wrap(code: &str) -> String {
        let body: Vec<String> = code
            .split('\n')
            .map(|l| {
                if l.trim().is_empty() {
                    String::new()
                } else {
                    format!("    {l}")
                }
            })
            .collect();
        format!("{WRAP_HEAD}{}\n{WRAP_TAIL}", body.join("\n"))
    }

    #[test]
    fn unwraps_the_clients_wrapper() {
        let code = "x = 1\nif x:\n    print('a\\n')\n\nawait asyncio.sleep(0)";
        assert_eq!(unwrap_plain(&wrap(code)), Some(format!("{code}\n")));
        assert_eq!(unwrap_plain("print(1)\n"), None);
    }

    #[test]
    fn timeouts_are_clamped() {
        let ceiling = Duration::from_secs(120);
        assert_eq!(run_timeout(Some(5), ceiling), Duration::from_millis(1000));
        assert_eq!(run_timeout(Some(15_000), ceiling), Duration::from_secs(15));
        assert_eq!(run_timeout(Some(10_000_000), ceiling), ceiling);
        assert_eq!(
            run_timeout(Some(10_000_000), Duration::from_secs(900)),
            Duration::from_secs(300)
        );
        assert_eq!(run_timeout(None, ceiling), ceiling);
    }

    #[test]
    fn tokens_are_signed_expire_and_die_with_their_key() {
        let tokens = Tokens::random();
        let claims = Claims {
            run: "r1".into(),
            round: 3,
            session: "s".into(),
            exp: 1_000,
        };
        let token = tokens.mint(&claims);
        assert_eq!(tokens.verify(&token, 999), Ok(claims.clone()));
        assert_eq!(tokens.verify(&token, 1_000), Err(TokenError::Expired));
        assert_eq!(Tokens::random().verify(&token, 0), Err(TokenError::Invalid));
        let mut changed = claims.clone();
        changed.round = 4;
        let (_, tag) = token.split_once('.').unwrap();
        let (forged, _) = tokens
            .mint(&changed)
            .split_once('.')
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .unwrap();
        assert_eq!(
            tokens.verify(&format!("{forged}.{tag}"), 0),
            Err(TokenError::Invalid)
        );
        for junk in ["", ".", "zz.zz", "abc", "00.00"] {
            assert_eq!(tokens.verify(junk, 0), Err(TokenError::Invalid), "{junk:?}");
        }
    }

    fn test_run(
        deadline: Instant,
    ) -> (Run, mpsc::Sender<PendingCall>, oneshot::Sender<ExecResult>) {
        Run::new("r".into(), "s".into(), deadline, 0)
    }

    fn pending(id: &str) -> PendingCall {
        PendingCall {
            id: id.into(),
            tool: "t".into(),
            input: json!({}),
            reply: oneshot::channel().0,
        }
    }

    fn ids(outcome: Outcome) -> Vec<String> {
        match outcome {
            Outcome::Calls(batch) => batch.into_iter().map(|c| c.id).collect(),
            Outcome::Done(_) => vec!["done".into()],
            Outcome::Stopped => vec!["stopped".into()],
        }
    }

    /// Calls closer than the quiet window share a round; a later one starts the next.
    #[tokio::test(start_paused = true)]
    async fn rounds_gather_calls_within_the_quiet_window() {
        let (run, host, _done) = test_run(Instant::now() + Duration::from_secs(60));
        tokio::spawn(async move {
            let step = GATHER_QUIET / 2;
            for id in ["a", "b", "c"] {
                host.send(pending(id)).await.unwrap();
                tokio::time::sleep(step).await;
            }
            tokio::time::sleep(GATHER_QUIET * 2).await;
            host.send(pending("d")).await.unwrap();
            // A steady trickle is cut at the cap.
            loop {
                if host.send(pending("e")).await.is_err() {
                    return;
                }
                tokio::time::sleep(step).await;
            }
        });
        let mut driver = run.driver.lock().await;
        assert_eq!(ids(next_outcome(&run, &mut driver).await), ["a", "b", "c"]);
        let batch = ids(next_outcome(&run, &mut driver).await);
        assert_eq!(batch[0], "d");
        // d, then one "e" per half window until the cap: about 2 * CAP / QUIET calls.
        let most = 1 + (2 * GATHER_CAP.as_millis() / GATHER_QUIET.as_millis()) as usize;
        assert!(batch.len() > 2 && batch.len() <= most, "{}", batch.len());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_or_finished_run_ends_the_wait() {
        let (run, _host, done) = test_run(Instant::now() + Duration::from_secs(60));
        let mut driver = run.driver.lock().await;
        drop(done);
        assert_eq!(ids(next_outcome(&run, &mut driver).await), ["stopped"]);

        let (run, _host, _done) = test_run(Instant::now() + Duration::from_secs(1));
        let mut driver = run.driver.lock().await;
        // Nothing ever answers: the deadline (plus grace) ends the wait.
        assert_eq!(ids(next_outcome(&run, &mut driver).await), ["stopped"]);
    }

    #[test]
    fn json_looking_strings_are_decoded() {
        assert_eq!(decoded(json!("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(decoded(json!(" [1, 2]")), json!([1, 2]));
        assert_eq!(decoded(json!("{not json")), json!("{not json"));
        assert_eq!(decoded(json!("42")), json!("42"));
        assert_eq!(decoded(json!("plain")), json!("plain"));
        assert_eq!(decoded(json!({"x": "{}"})), json!({"x": "{}"}));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
