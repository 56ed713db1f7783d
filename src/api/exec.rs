//! `POST /v1/exec_code` and host tool protocol 2, "attached": the same request answers with the
//! run's JSON result, or with `Accept: text/event-stream` streams the run as server-sent events
//! while the caller answers its host tool calls on `POST /v1/exec/{exec_id}/results` (wire
//! format in docs/protocols.md). The JSON-or-stream choice is made here, in [`exec_code`].
//!
//! Owns the request body of `exec_code`, the open streams (exec id → the run's unanswered
//! calls), the event queue of each stream, and what a disconnect does: the stream's task owns
//! the run, so when the caller goes away the task ends and the run (child and process group) is
//! dropped with it. It must not decide what a call does (`run::dispatch` routes host calls
//! without a callback URL here, and `PTC_TOOL_TIMEOUT` still fails a call whose result never
//! comes).

use super::error::{ApiError, json_body};
use super::sse;
use super::workspace::{
    Held, RunArtifacts, SessionFiles, image_blocks, run_files, session_file_url,
};
use crate::render::Lang as Described;
use crate::run::{
    Approval, CallError, ExecRequest, ExecResult, Lang, PendingCall, Runner, host_error,
};
use crate::run::{FileStore, Files, RunFile};
use crate::run::{OutputChunk, new_token};
use crate::session::Sessions;
use crate::util::lock;
use crate::util::mime_of;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

/// The owner of the sessions `/v1/exec_code` runs in: the API key's holder, whose sessions
/// are apart from LibreChat's users' (`identity::Principal::owner`).
const OPERATOR: &str = "";

/// Largest `POST /v1/exec_code` body: code is text a model wrote, not a file upload.
pub const MAX_EXEC_BYTES: usize = 1 << 20;
/// Events handed to the HTTP body ahead of a slow reader. The rest wait in the stream's task,
/// which stays bounded without ever blocking the run: output past `PTC_MAX_OUTPUT_BYTES` per
/// stream is not forwarded, and each `tool_call` waits for its answer (64 in flight at most).
pub const EVENT_QUEUE: usize = 64;
/// Host calls of one run waiting to become `tool_call` events (the runner lets 64 of a run be
/// in flight at once).
const HOST_QUEUE: usize = 64;
/// Largest `/results` body: one round of tool results, each capped like a callback answer.
pub const MAX_RESULTS_BYTES: usize = 16 << 20;

type Reply = oneshot::Sender<Result<Value, CallError>>;

/// The open attached runs; cloneable handle.
#[derive(Clone, Default)]
struct Attached(Arc<Mutex<HashMap<String, Arc<Open>>>>);

/// One open stream: its calls waiting for a result, by call id.
#[derive(Default)]
struct Open {
    waiting: Mutex<HashMap<String, Reply>>,
}

/// The routes' state: the runner and the session store (absent when PTC is off) and the open
/// streams.
#[derive(Clone)]
struct Exec {
    runner: Option<Runner>,
    sessions: Option<Sessions>,
    /// The files of runs without a session.
    artifacts: Option<Sessions>,
    attached: Attached,
    /// The language of the `exec_code` description (`PTC_LANG`): a run's when it names none.
    described: Described,
}

/// `POST /v1/exec_code` and `POST /v1/exec/{exec_id}/results`.
pub fn router<S>(
    runner: Option<Runner>,
    sessions: Option<Sessions>,
    artifacts: Option<Sessions>,
    described: Described,
) -> Router<S> {
    Router::new()
        .route("/v1/exec_code", post(exec_code))
        .route("/v1/exec/{exec_id}/results", post(results))
        .with_state(Exec {
            runner,
            sessions,
            artifacts,
            attached: Attached::default(),
            described,
        })
}

/// The language a run that names none is in: the one the `exec_code` description is written
/// in (`PTC_LANG`), with its name.
pub fn default_lang(described: Described) -> (Lang, &'static str) {
    match described {
        Described::Python => (Lang::Python, "python"),
        Described::JavaScript => (Lang::JavaScript, "javascript"),
    }
}

#[derive(Deserialize)]
struct ExecBody {
    code: String,
    /// Milliseconds (DESIGN.md); capped by `PTC_TIMEOUT`.
    timeout_ms: Option<u64>,
    /// Seconds, as the `exec_code` tool's own input has it; `timeout_ms` wins when both are given.
    timeout: Option<u64>,
    /// `"python"`, `"bash"` (every PTC tool a bash function), `"javascript"` (`"js"`) or
    /// `"typescript"` (`"ts"`): node, every PTC tool an async function. None: the language of
    /// the description (`PTC_LANG`, Python by default).
    lang: Option<String>,
    /// A session: its files are the run's working directory, and Python's globals persist
    /// from one run of the session to the next.
    session_id: Option<String>,
    /// With `session_id`: a fresh interpreter for this run; the state of the session's earlier
    /// runs, and anything they left running, is dropped first (the files stay).
    #[serde(default)]
    reset: bool,
}

/// JSON, or with `Accept: text/event-stream` the attached protocol's event stream.
async fn exec_code(State(exec): State<Exec>, request: Request) -> Result<Response, ApiError> {
    let stream = wants_stream(request.headers());
    let traceparent = crate::trace::from_headers(request.headers());
    let door = exec.door()?;
    let body: ExecBody = json_body(
        request,
        MAX_EXEC_BYTES,
        r#"{"code": "...", "timeout_ms"?: N, "lang"?: "python" | "bash" | "javascript" | "typescript", "session_id"?: "...", "reset"?: bool}"#,
    )
    .await?;
    let lang = match body.lang.as_deref() {
        None => default_lang(exec.described).0,
        Some(name) => lang_named(name).ok_or_else(|| {
            ApiError::BadRequest(format!("lang {name:?} is not run here: use {LANGS}"))
        })?,
    };
    let timeout = match (body.timeout_ms, body.timeout) {
        (Some(0), _) | (None, Some(0)) => {
            return Err(ApiError::BadRequest("timeout_ms must be at least 1".into()));
        }
        (Some(ms), _) => Some(Duration::from_millis(ms)),
        (None, Some(s)) => Some(Duration::from_secs(s)),
        (None, None) => None,
    };
    let asked = Asked {
        code: body.code,
        lang,
        timeout,
        session_id: body.session_id,
        reset: body.reset,
        traceparent,
        snapshot: None,
    };
    let (request, held) = door.request(asked).await?;
    if stream {
        return Ok(exec.attached.stream(door.runner, request, held));
    }
    Ok(Json(door.finish(request, held).await).into_response())
}

/// The languages a door's refusal names.
pub const LANGS: &str = r#""python" (the default), "bash", "javascript" or "typescript""#;

/// The language `name` names, by any of the names the doors take (`py`, `js`, `ts` as
/// LibreChat's client sends them, `sh`); `None` for a language not run here.
pub fn lang_named(name: &str) -> Option<Lang> {
    match name {
        "python" | "py" | "python3" => Some(Lang::Python),
        "bash" | "sh" => Some(Lang::Bash),
        "javascript" | "js" => Some(Lang::JavaScript),
        "typescript" | "ts" => Some(Lang::TypeScript),
        _ => None,
    }
}

/// What one `exec_code` asks, whichever door it came through (`POST /v1/exec_code`, the MCP
/// front door).
#[derive(Debug, Default)]
pub struct Asked {
    pub code: String,
    pub lang: Lang,
    pub timeout: Option<Duration>,
    /// A session: its files are the run's working directory, and Python's globals persist.
    pub session_id: Option<String>,
    /// With `session_id`: a fresh interpreter for this run.
    pub reset: bool,
    /// The caller's W3C `traceparent`.
    pub traceparent: Option<String>,
    /// The catalog to run against instead of the sidecar's current one (its runs start cold).
    pub snapshot: Option<Arc<crate::render::Snapshot>>,
}

/// How a door runs `exec_code`: the runner, the session store and the artifacts store.
#[derive(Clone)]
pub struct ExecDoor {
    pub runner: Runner,
    pub sessions: Sessions,
    pub artifacts: Sessions,
}

impl Exec {
    /// The door, when PTC is on and the runner takes runs.
    fn door(&self) -> Result<ExecDoor, ApiError> {
        let disabled = ApiError::PtcDisabled(
            "PTC_ENABLED is false on this sidecar: every tool is direct and there is no exec_code",
        );
        let (Some(runner), Some(sessions), Some(artifacts)) =
            (&self.runner, &self.sessions, &self.artifacts)
        else {
            return Err(disabled);
        };
        runner.check_open()?;
        Ok(ExecDoor {
            runner: runner.clone(),
            sessions: sessions.clone(),
            artifacts: artifacts.clone(),
        })
    }
}

impl ExecDoor {
    /// The run's request and, for a session run, the session held for it (its previous run
    /// waited for, within this run's timeout); where its files go.
    pub async fn request(&self, asked: Asked) -> Result<(ExecRequest, Option<Held>), ApiError> {
        let runner = &self.runner;
        let mut request = ExecRequest {
            code: asked.code,
            lang: asked.lang,
            timeout: asked.timeout,
            traceparent: asked.traceparent,
            snapshot: asked.snapshot,
            ..ExecRequest::default()
        };
        let held = match asked.session_id {
            None => None,
            Some(id) => {
                let sessions = &self.sessions;
                Sessions::check_id(&id)?;
                // Waiting for the session's previous run counts against this run's timeout.
                let max = runner.config().timeout;
                let wait = asked.timeout.map_or(max, |t| t.min(max));
                let started = Instant::now();
                let (held, ()) =
                    Held::take(sessions, Some(&id), OPERATOR, wait, |_, _| Ok(())).await?;
                request.timeout = Some(wait.saturating_sub(started.elapsed()).max(MIN_RUN_TIME));
                request.workspace = Some(held.workspace(sessions));
                request.session = Some(id);
                request.live = true;
                request.reset = asked.reset;
                Some(held)
            }
        };
        request.files = Some(match &held {
            Some(held) => run_files(SessionFiles(held.session.clone()), runner),
            None => run_files(RunArtifacts::new(self.artifacts.clone()), runner),
        });
        Ok((request, held))
    }

    /// Runs `request` (from [`request`](Self::request)) to its result, with the files its run
    /// made and the images among them; the session is let go after.
    pub async fn finish(&self, request: ExecRequest, held: Option<Held>) -> ExecResult {
        let files = request.files.clone();
        let result = self.runner.exec(request).await;
        finish(result, held.as_ref(), files.as_deref()).await
    }
}

/// The least time a session run gets after waiting for the session: the wait was within its
/// timeout, and a run with nothing left could not even start.
const MIN_RUN_TIME: Duration = Duration::from_millis(100);

/// `result` with the files its run made or changed in its session (`held`), and the images
/// among its files as content blocks.
async fn finish(
    mut result: ExecResult,
    held: Option<&Held>,
    files: Option<&dyn FileStore>,
) -> ExecResult {
    if let Some(held) = held {
        let id = &held.session.id;
        for f in held.changed().await {
            if result.files.iter().any(|r| r.name == f.name) {
                continue; // saved by the sidecar for the run, listed already
            }
            result.files.push(RunFile {
                url: session_file_url(id, &f.name),
                mime: mime_of(&f.name).to_string(),
                size: f.size,
                name: f.name,
            });
        }
    }
    if let Some(store) = files
        && !result.files.is_empty()
    {
        result.content = image_blocks(store, &result.files);
    }
    result
}

/// The caller asked for a stream.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

impl Attached {
    /// Starts the run and answers with its event stream; `held`, the run's session, is let go
    /// when the run is over.
    fn stream(&self, runner: Runner, mut request: ExecRequest, held: Option<Held>) -> Response {
        let exec_id = format!("x{}", &new_token()[..24]);
        let (host, calls) = mpsc::channel(HOST_QUEUE);
        let (output, chunks) = mpsc::unbounded_channel();
        let (asker, asked) = mpsc::unbounded_channel();
        request.host = Some(host);
        request.output = Some(output);
        request.asker = Some(asker);
        let (events, stream) = mpsc::channel(EVENT_QUEUE);
        let open = Arc::new(Open::default());
        lock(&self.0).insert(exec_id.clone(), open.clone());
        let cap = runner.config().max_output_bytes;
        let pump = Pump {
            attached: self.clone(),
            exec_id,
            open,
            calls,
            chunks,
            asked,
            events,
            cap,
            files: request.files.clone(),
            held,
        };
        tokio::spawn(pump.run(runner, request));
        sse::response(ReceiverStream::new(stream))
    }
}

/// The task that owns one attached run and turns it into events.
struct Pump {
    attached: Attached,
    exec_id: String,
    open: Arc<Open>,
    calls: mpsc::Receiver<PendingCall>,
    chunks: mpsc::UnboundedReceiver<OutputChunk>,
    /// The run's calls waiting for a person: `approval_required`, answered at
    /// `POST /v1/approvals/{id}`.
    asked: mpsc::UnboundedReceiver<Approval>,
    events: mpsc::Sender<Result<Event, Infallible>>,
    /// Bytes of each stream forwarded as events (the result keeps its own capped copy).
    cap: usize,
    /// The run's session, held until the run is over.
    held: Option<Held>,
    /// Where the run's files went.
    files: Option<Files>,
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

impl Pump {
    async fn run(mut self, runner: Runner, request: ExecRequest) {
        let exec = runner.exec(request);
        tokio::pin!(exec);
        let mut queue = VecDeque::from([event("started", &json!({"exec_id": self.exec_id}))]);
        let (mut out_bytes, mut err_bytes) = (0usize, 0usize);
        let mut finished = false;
        loop {
            if finished && queue.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                // The caller went away: returning drops the run, which kills the child.
                _ = self.events.closed() => break,
                permit = self.events.reserve(), if !queue.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(e) = queue.pop_front() {
                            permit.send(Ok(e));
                        }
                    }
                    Err(_) => break,
                },
                Some(call) = self.calls.recv() => {
                    queue.push_back(event(
                        "tool_call",
                        &json!({"id": call.id, "tool": call.tool, "input": call.input}),
                    ));
                    lock(&self.open.waiting).insert(call.id, call.reply);
                }
                Some(chunk) = self.chunks.recv() => {
                    if let Some(e) = self.output(chunk, &mut out_bytes, &mut err_bytes) {
                        queue.push_back(e);
                    }
                }
                Some(approval) = self.asked.recv() => {
                    let data = serde_json::to_value(&approval).unwrap_or_default();
                    queue.push_back(event("approval_required", &data));
                }
                result = &mut exec, if !finished => {
                    // Output read before the run ended comes before `done`.
                    while let Ok(chunk) = self.chunks.try_recv() {
                        if let Some(e) = self.output(chunk, &mut out_bytes, &mut err_bytes) {
                            queue.push_back(e);
                        }
                    }
                    let result = finish(result, self.held.as_ref(), self.files.as_deref()).await;
                    self.held = None;
                    queue.push_back(done(&result));
                    finished = true;
                }
            }
        }
        lock(&self.attached.0).remove(&self.exec_id);
    }

    /// An output event, unless this stream already forwarded `cap` bytes.
    fn output(&self, chunk: OutputChunk, out: &mut usize, err: &mut usize) -> Option<Event> {
        let (name, text, sent) = match chunk {
            OutputChunk::Stdout(t) => ("stdout", t, out),
            OutputChunk::Stderr(t) => ("stderr", t, err),
        };
        if *sent >= self.cap {
            return None;
        }
        *sent += text.len();
        Some(event(name, &json!({"text": text})))
    }
}

fn done(result: &ExecResult) -> Event {
    event(
        "done",
        &serde_json::to_value(result).unwrap_or_else(|e| json!({"error": e.to_string()})),
    )
}

#[derive(Deserialize)]
struct ResultsBody {
    results: Vec<CallResult>,
}

#[derive(Deserialize)]
struct CallResult {
    id: String,
    #[serde(default)]
    result: Value,
    #[serde(default)]
    error: Option<Value>,
}

async fn results(
    State(exec): State<Exec>,
    Path(exec_id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let open = lock(&exec.attached.0)
        .get(&exec_id)
        .cloned()
        .ok_or_else(|| {
            ApiError::NotFound(format!("no open attached run {exec_id:?} (it may be over)"))
        })?;
    let body: ResultsBody = json_body(
        request,
        MAX_RESULTS_BYTES,
        r#"{"results": [{"id": "...", "result": ...} | {"id": "...", "error": "message"}]}"#,
    )
    .await?;
    let mut applied = Vec::new();
    let mut rejected = Vec::new();
    for r in body.results {
        let Some(reply) = lock(&open.waiting).remove(&r.id) else {
            rejected.push(json!({"id": r.id, "reason": "no call of this run waits for this id"}));
            continue;
        };
        let answer = match r.error {
            Some(Value::Null) | None => Ok(r.result),
            Some(error) => Err(host_error(error)),
        };
        if reply.send(answer).is_ok() {
            applied.push(r.id);
        } else {
            rejected.push(json!({"id": r.id, "reason": "the call is over (PTC_TOOL_TIMEOUT)"}));
        }
    }
    Ok(Json(json!({"applied": applied, "rejected": rejected})).into_response())
}
