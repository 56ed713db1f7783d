//! The calls handle: the live runs by bearer token and what one tool call of a run does on the
//! way to its backend (per-run limits, lookup, argument check, the `tool_call.*` events, the
//! call record). The IPC server holds this handle, not the runner.
//!
//! Owns the runs table: a token is valid exactly while its [`Registration`] lives. It must not
//! start or stop processes, and must not know which protocol a call arrived by.

use super::approval::{ApprovalShares, Approvals, Asker, Asking, WaitingArgs};
use super::budget;
use super::clock::RunClock;
use super::dispatch::{self, Backends, CallError, PendingCall};
use super::files::{FileError, Files, RunFile};
use super::limits::{Admitted, Limiter, RunCounts};
use super::prepare::Prepared;
use super::shapes::{ChosenWords, Shapes};
use crate::catalog::{Catalog, Origin, Tool};
use crate::embed::Embeddings;
use crate::events::{Event, Events};
use crate::render::Snapshot;
use crate::trace::SpanContext;
use crate::util::{hex, lock, ms};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{Semaphore, mpsc};

/// The clock of a run made without a deadline (the runner sets the real one).
const UNBOUNDED: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// One tool call of a run, as the result lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub id: String,
    pub tool: String,
    pub ok: bool,
    pub duration_ms: f64,
}

/// Bounds on one run's tool calls.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// Calls in all: a runaway loop stops with `limit`.
    pub max_calls: usize,
    /// Calls in flight at once.
    pub max_in_flight: usize,
}

/// A live run as its tool calls see it.
pub struct RunCtx {
    pub id: String,
    /// The session the run belongs to, for its events.
    pub session: Option<String>,
    /// The LibreChat user the run is for, for its events.
    pub user: Option<Arc<crate::identity::User>>,
    /// Who made the run's calls when not its own code: a runtime's call (`run::native`), by
    /// `runtime` or the provider's caller (`code_execution_20260120`, `program`) and its id;
    /// put on the calls' events.
    pub caller: Option<(String, Option<String>)>,
    /// Where `save_file` stores; `None`: it is not available to this run.
    pub files: Option<Files>,
    /// What `save_file` stored, in order.
    saved: Mutex<Vec<RunFile>>,
    /// The run's span: each call is a child of it.
    pub span: SpanContext,
    /// The catalog the run started with: calls are looked up and routed in it.
    pub snapshot: Arc<Snapshot>,
    prepared: Arc<Prepared>,
    host: Option<mpsc::Sender<PendingCall>>,
    /// The run's time limit, standing still while a call waits for a person.
    pub clock: RunClock,
    /// Where the run's own door hears of its calls waiting for a person (attached stream,
    /// MCP front door).
    pub asker: Option<Asker>,
    /// The run's calls per tool (`max_per_run`).
    per_tool: RunCounts,
    /// What the run holds of the approval table and of the bytes waiting there.
    approval_shares: ApprovalShares,
    /// The run's `save_file` bodies written at once ([`budget::SAVES_CEILING`]), and what it
    /// holds of the threads that write them.
    pub saves: Semaphore,
    pub save_threads: budget::Account,
    calls: Mutex<Vec<CallRecord>>,
    started_calls: AtomicUsize,
    in_flight: Semaphore,
    max_calls: usize,
}

impl RunCtx {
    pub fn new(
        id: String,
        snapshot: Arc<Snapshot>,
        prepared: Arc<Prepared>,
        host: Option<mpsc::Sender<PendingCall>>,
        limits: CallLimits,
    ) -> RunCtx {
        RunCtx {
            id,
            session: None,
            user: None,
            caller: None,
            files: None,
            saved: Mutex::new(Vec::new()),
            span: SpanContext::for_run(None),
            snapshot,
            prepared,
            host,
            clock: RunClock::new(tokio::time::Instant::now() + UNBOUNDED, UNBOUNDED),
            asker: None,
            per_tool: RunCounts::default(),
            approval_shares: ApprovalShares::default(),
            saves: Semaphore::new(budget::SAVES_CEILING as usize),
            save_threads: budget::Account::default(),
            calls: Mutex::new(Vec::new()),
            started_calls: AtomicUsize::new(0),
            in_flight: Semaphore::new(limits.max_in_flight.max(1)),
            max_calls: limits.max_calls,
        }
    }

    /// The files `save_file` stored so far; a name saved twice is listed once, as last saved.
    pub fn saved(&self) -> Vec<RunFile> {
        lock(&self.saved).clone()
    }

    /// Stores what `body` reads as `name` in the run's files, within their quotas (blocking:
    /// call it off the async workers). A save that fails leaves no file.
    pub fn save(&self, name: &str, body: &mut dyn std::io::Read) -> Result<RunFile, FileError> {
        let files = self.files.as_ref().ok_or(FileError::NoStore)?;
        let info = super::files::save(files.as_ref(), name, body)?;
        let mut saved = lock(&self.saved);
        saved.retain(|f| f.name != info.name);
        saved.push(info.clone());
        Ok(info)
    }

    /// Counts one more of the run's calls (`max_calls`: tool calls and searches alike), or
    /// refuses it with `limit` when the run has made them all.
    pub fn count_call(&self, what: &str) -> Result<usize, CallError> {
        let n = self.started_calls.fetch_add(1, Ordering::Relaxed);
        if n >= self.max_calls {
            budget::refused(budget::Resource::Calls);
            return Err(CallError::Limit(format!(
                "{what}: this run already made {} tool calls and searches, its limit; batch the \
                 work into fewer calls",
                self.max_calls
            )));
        }
        Ok(n)
    }

    /// The calls made so far, in the order they finished.
    pub fn calls(&self) -> Vec<CallRecord> {
        lock(&self.calls).clone()
    }
}

/// A cloneable handle to the live runs and the backends their calls go to.
#[derive(Clone)]
pub struct Calls {
    inner: Arc<Inner>,
}

struct Inner {
    backends: Backends,
    runs: Mutex<HashMap<String, Arc<RunCtx>>>,
    /// The result shapes learned from the calls of every run.
    shapes: Shapes,
}

impl Calls {
    /// How long a run's calls may wait for people in all: the run's clock stands still that
    /// long at most (`PTC_APPROVAL_TIMEOUT`).
    pub fn approval_budget(&self) -> std::time::Duration {
        self.inner.backends.approvals.timeout()
    }

    pub fn new(backends: Backends, shapes: Shapes) -> Calls {
        Calls {
            inner: Arc::new(Inner {
                backends,
                runs: Mutex::new(HashMap::new()),
                shapes,
            }),
        }
    }

    /// What the calls taught about the results of tools without an output schema.
    pub fn shapes(&self) -> &Shapes {
        &self.inner.shapes
    }

    /// The search model, when `PTC_SEARCH_MODEL` names one.
    pub fn embeddings(&self) -> Option<&Embeddings> {
        self.inner.backends.embeddings.as_ref()
    }

    /// The calls waiting for a person, and the rules that make them wait.
    pub fn approvals(&self) -> &Approvals {
        &self.inner.backends.approvals
    }

    /// The limits per tool.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.inner.backends.limiter
    }

    /// Where runs and calls are reported.
    pub fn events(&self) -> &Events {
        &self.inner.backends.events
    }

    /// Makes a run reachable by a new token, until the registration is dropped.
    pub fn register(&self, run: Arc<RunCtx>) -> Registration {
        let token = new_token();
        lock(&self.inner.runs).insert(token.clone(), run);
        Registration {
            calls: self.clone(),
            token,
        }
    }

    /// The live run a token belongs to.
    pub fn run_for_token(&self, token: &str) -> Option<Arc<RunCtx>> {
        lock(&self.inner.runs).get(token).cloned()
    }

    /// Number of live runs.
    pub fn live_runs(&self) -> usize {
        lock(&self.inner.runs).len()
    }

    /// One tool call of a run: limits, lookup, argument check, backend.
    pub async fn call(&self, run: &RunCtx, tool: &str, args: Value) -> Result<Value, CallError> {
        let from_code = Arrival {
            lookup: dispatch::lookup,
            span: None,
        };
        self.call_as(run, tool, args, from_code).await
    }

    /// [`Calls::call`] of a call that did not come from the run's code (a runtime's:
    /// `run::native`): the same steps, with the tool looked up and the call's span made as
    /// `arrival` says.
    pub async fn call_as(
        &self,
        run: &RunCtx,
        tool: &str,
        args: Value,
        arrival: Arrival,
    ) -> Result<Value, CallError> {
        let n = run.count_call(tool)?;
        let id = format!("{}-{n}", run.id);
        let span = arrival.span.unwrap_or_else(|| run.span.child());
        let events = self.events();
        let catalog = &run.snapshot.catalog;
        let found = match (arrival.lookup)(catalog, tool)
            .and_then(|t| dispatch::check_args(&run.prepared.validators, t, &args).map(|()| t))
        {
            Ok(found) => found,
            Err(e) => {
                // Refused before dispatch: one event says what the code tried.
                let mut refused = call_event("tool_call.finished", run, &span, &id, tool);
                refused.ok = Some(false);
                refused.error = Some(e.to_json());
                events.emit(refused);
                return Err(e);
            }
        };
        let source = match found.origin {
            Origin::Mcp { .. } => "mcp",
            Origin::Host => "host",
        };
        events.emit(started_event(
            run,
            &span,
            &id,
            found,
            source,
            &args,
            events.bodies(),
        ));
        let chose = self.chosen_words(found, &args);

        let started = Instant::now();
        // A call refused on its way (a limit, a person) ends like one its backend failed.
        let (through, args) = self.let_through(run, &id, &span, found, args).await;
        let (result, queued_ms) = match through {
            Err(e) => (Err(e), None),
            Ok(through) => {
                let result = match run.in_flight.acquire().await {
                    Err(_) => Err(CallError::Unavailable("the run is over".into())),
                    Ok(_permit) => {
                        let backends = &self.inner.backends;
                        let (host, tp) = (run.host.as_ref(), span.traceparent());
                        let deadline = through.deadline;
                        dispatch::route(backends, catalog, host, &id, found, args, &tp, deadline)
                            .await
                    }
                };
                (result, through.queued())
            }
        };
        let duration_ms = ms(started.elapsed());

        let mut finished = call_event("tool_call.finished", run, &span, &id, &found.name);
        finished.source = Some(source);
        finished.ok = Some(result.is_ok());
        finished.duration_ms = Some(duration_ms);
        finished.queued_ms = queued_ms;
        match &result {
            Ok(value) => {
                self.learn(&found.name, chose.as_ref(), value);
                finished.result_bytes = Some(json_len(value));
                if events.bodies() {
                    finished.result = Some(value.clone());
                }
            }
            Err(e) => finished.error = Some(e.to_json()),
        }
        events.emit(finished);

        lock(&run.calls).push(CallRecord {
            id,
            tool: found.name.clone(),
            ok: result.is_ok(),
            duration_ms,
        });
        result
    }

    /// What stands between a checked call and its backend: the run's `max_per_run` of the
    /// tool, a person's approval (the run's clock standing still meanwhile), then the tool's
    /// turn under its limits across runs, within the call's deadline (`PTC_TOOL_TIMEOUT` from
    /// when the person answered). Gives the arguments back: while a person is asked, the call
    /// holds them as JSON only (a parsed value of megabytes is many times their size).
    async fn let_through(
        &self,
        run: &RunCtx,
        id: &str,
        span: &SpanContext,
        tool: &Tool,
        args: Value,
    ) -> (Result<LetThrough, CallError>, Value) {
        let backends = &self.inner.backends;
        let counters = backends.limiter.counters(&tool.name);
        if let Some(max) = counters.as_ref().and_then(|c| c.limit.max_per_run)
            && let Err(e) = run.per_tool.count(&tool.python_name, max)
        {
            return (Err(e.into()), args);
        }
        let args = if backends.approvals.needs(tool) {
            let Some(waiting) = WaitingArgs::of(&args) else {
                let e = CallError::Input(format!(
                    "the arguments of {} are not JSON",
                    tool.python_name
                ));
                return (Err(e), args);
            };
            drop(args);
            // What is left of the run's share of waiting for people, taken before the clock
            // stops: the wait is bounded by it, and none left denies the call at once.
            let within = run.clock.pause_left();
            let _still = run.clock.pause();
            let asking = Asking {
                run: &run.id,
                call: id,
                session: run.session.as_deref(),
                span,
                asker: run.asker.as_ref(),
                within,
                budget: run.clock.budget(),
                shares: &run.approval_shares,
            };
            let asked = backends.approvals.ask(asking, tool, &waiting).await;
            let args = waiting.value();
            if let Err(e) = asked {
                return (Err(e.into()), args);
            }
            args
        } else {
            args
        };
        let deadline = tokio::time::Instant::now() + backends.tool_timeout;
        let admitted = match counters {
            Some(counters) => match counters.admit(&tool.python_name, &run.id, deadline).await {
                Ok(admitted) => Some(admitted),
                Err(e) => return (Err(e.into()), args),
            },
            None => None,
        };
        (Ok(LetThrough { deadline, admitted }), args)
    }

    /// The words a call's arguments chose, taken before they go to the backend, when its
    /// result may teach a shape (a tool without an output schema, learning on); a result that
    /// records one of them as a key teaches nothing (the echo rule, `shapes/echo.rs`).
    fn chosen_words(&self, tool: &Tool, args: &Value) -> Option<ChosenWords> {
        (tool.output_schema.is_none() && self.inner.shapes.learning())
            .then(|| ChosenWords::of(args, &tool.input_schema))
    }

    /// Learns from a result whose call's words were taken, and writes the table off the async
    /// workers when it changed.
    fn learn(&self, tool: &str, chose: Option<&ChosenWords>, value: &Value) {
        if let Some(chose) = chose
            && self.inner.shapes.record(tool, chose, value)
        {
            let shapes = self.inner.shapes.clone();
            tokio::task::spawn_blocking(move || shapes.save());
        }
    }
}

/// How a call is looked up: [`dispatch::lookup`] for a run's code (PTC tools only).
pub type Lookup = for<'c> fn(&'c Catalog, &str) -> Result<&'c Tool, CallError>;

/// Where a call came from, as [`Calls::call_as`] needs it.
pub struct Arrival {
    /// How the tool is found by the name the call gives.
    pub lookup: Lookup,
    /// The call's own span; `None`: a child of the run's.
    pub span: Option<SpanContext>,
}

/// The `tool_call.started` of a call on its way to `source`.
fn started_event(
    run: &RunCtx,
    span: &SpanContext,
    id: &str,
    tool: &Tool,
    source: &'static str,
    args: &Value,
    bodies: bool,
) -> Event {
    let mut e = call_event("tool_call.started", run, span, id, &tool.name);
    e.source = Some(source);
    e.args_bytes = Some(json_len(args));
    if bodies {
        e.args = Some(args.clone());
    }
    e
}

/// An event of one call of a run: its ids, its span and the tool it named.
fn call_event(kind: &'static str, run: &RunCtx, span: &SpanContext, id: &str, tool: &str) -> Event {
    let mut e = Event::new(kind);
    e.exec_id = Some(run.id.clone());
    e.session_id = run.session.clone();
    e.for_user(run.user.as_deref());
    e.in_span(span);
    if let Some((caller, caller_id)) = &run.caller {
        e.caller = Some(caller.clone());
        e.caller_id.clone_from(caller_id);
    }
    e.call_id = Some(id.to_string());
    e.tool = Some(tool.to_string());
    e
}

/// A call let through: when it must be answered by, and its place under the tool's limits.
struct LetThrough {
    deadline: tokio::time::Instant,
    admitted: Option<Admitted>,
}

impl LetThrough {
    /// How long it waited for its turn, when it waited at all.
    fn queued(&self) -> Option<f64> {
        self.admitted
            .as_ref()
            .map(|a| a.waited)
            .filter(|w| w.as_micros() >= 100)
            .map(ms)
    }
}

/// Keeps a run's token valid exactly as long as this value lives.
pub struct Registration {
    calls: Calls,
    token: String,
}

impl Registration {
    /// The run's bearer token for the IPC server.
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.calls.inner.runs).remove(&self.token);
    }
}

/// 256 random bits, hex.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    hex(&bytes)
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map(|v| v.len()).unwrap_or(0)
}
