//! The open runs of the continuation protocol and their rounds: starting a run in its own task,
//! gathering the host calls made together into one round, checking a continuation's results
//! against the round that asked for them, and delivering them to the waiting calls.
//!
//! Owns the runs table (run id → run, and `X-LibreChat-Code-Request-ID` → run id for
//! `/cancel`), each run's reaper, and the timing of a round. It must not speak the client's
//! wire (the handlers turn an [`Outcome`] into an answer and mint its token) nor decide what a
//! call does (`run::dispatch`; a call waits here as a [`PendingCall`]).

use crate::api::error::ResultsError;
use crate::api::workspace::{Held, SessionFiles, run_files};
use crate::identity::Principal;
use crate::render::Snapshot;
use crate::run::new_token;
use crate::run::{CallError, ExecRequest, ExecResult, Lang, PendingCall, Runner, Workspace};
use crate::util::{lock, now_ms};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// `tool_call_required` answers one run may give; the client throws on the 21st anyway
/// ("Exceeded maximum round trips (20)"), so the sidecar stops the run before that.
pub const MAX_ROUNDS: u32 = 20;
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

/// The open runs; cloneable handle.
#[derive(Clone, Default)]
pub struct Runs(Arc<Table>);

#[derive(Default)]
struct Table {
    runs: Mutex<HashMap<String, Arc<Run>>>,
    /// `X-LibreChat-Code-Request-ID` → run id, for `/cancel`; cleared with the run.
    requests: Mutex<HashMap<String, String>>,
}

/// One open run: its child runs in a spawned task; requests drive it round by round.
pub struct Run {
    pub id: String,
    pub session_id: String,
    /// Who started it ([`Principal::owner`]): only they continue or cancel it.
    pub owner: String,
    deadline: Instant,
    /// The deadline as Unix milliseconds, for tokens.
    pub expires_ms: u64,
    /// Cancelled when the run is over for the protocol: stops the child (if still running)
    /// and the reaper.
    stop: CancellationToken,
    pub driver: tokio::sync::Mutex<Driver>,
    request_ids: Mutex<Vec<String>>,
    /// The run's session, held until the run is over for the protocol.
    pub held: Mutex<Option<Held>>,
    /// What the sidecar tells the model before the run's stderr.
    pub notes: Vec<String>,
    /// The run's language: how the model is told to make calls together.
    pub lang: Lang,
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
            owner: String::new(),
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
            held: Mutex::new(None),
            notes: Vec::new(),
            lang: Lang::Python,
        };
        (run, host, done_tx)
    }
}

/// The part of a run one request at a time works on.
pub struct Driver {
    /// `tool_call_required` answers given so far; a token is valid for this round only.
    pub round: u32,
    /// The token of `round` was issued and not used yet.
    pub token_live: bool,
    calls: mpsc::Receiver<PendingCall>,
    done: oneshot::Receiver<ExecResult>,
    /// Calls given to the client, waiting for its results.
    pub waiting: Vec<PendingCall>,
}

impl Runs {
    pub fn get(&self, id: &str) -> Option<Arc<Run>> {
        lock(&self.0.runs).get(id).cloned()
    }

    /// The open run of `owner` a request id names (a request id is the client's choice: each
    /// owner's are their own).
    pub fn by_request(&self, owner: &str, request_id: &str) -> Option<Arc<Run>> {
        let run_id = lock(&self.0.requests)
            .get(&request_key(owner, request_id))
            .cloned();
        run_id.and_then(|id| self.get(&id))
    }

    /// No room for another run (`MAX_OPEN_RUNS`).
    pub fn full(&self) -> bool {
        lock(&self.0.runs).len() >= MAX_OPEN_RUNS
    }

    /// Ends a run for the protocol: stops its child and forgets it.
    pub fn finish(&self, run: &Run) {
        run.stop.cancel();
        // The session is free for its next run.
        drop(lock(&run.held).take());
        lock(&self.0.runs).remove(&run.id);
        let ids = std::mem::take(&mut *lock(&run.request_ids));
        let mut requests = lock(&self.0.requests);
        for id in ids {
            requests.remove(&id);
        }
    }

    /// Lets `/cancel` find `run` by the id of a request that drove it.
    pub fn remember_request(&self, run: &Run, request_id: &str) {
        let key = request_key(&run.owner, request_id);
        lock(&run.request_ids).push(key.clone());
        lock(&self.0.requests).insert(key, run.id.clone());
    }

    /// Starts the run in its own task (so it outlives the request that started it) and a
    /// reaper that frees it at its deadline if no client comes back for it.
    pub fn start(&self, runner: &Runner, s: Start) -> Arc<Run> {
        let deadline = Instant::now() + s.timeout;
        let (mut run, host, done_tx) = Run::new(
            new_token()[..24].to_string(),
            s.session_id,
            deadline,
            now_ms() + s.timeout.as_millis() as u64,
        );
        // save_file and a cut stream's whole output go into the session, as /mnt/data files.
        let files = s
            .held
            .as_ref()
            .map(|h| run_files(SessionFiles(h.session.clone()), runner));
        *lock(&run.held) = s.held;
        run.notes = s.notes;
        run.lang = s.lang;
        run.owner = s.principal.owner();
        let run = Arc::new(run);
        lock(&self.0.runs).insert(run.id.clone(), run.clone());
        let request = ExecRequest {
            reset: false,
            code: s.code,
            lang: s.lang,
            workspace: s.workspace,
            timeout: Some(s.timeout),
            snapshot: Some(s.snapshot),
            host: Some(host),
            asker: None,
            output: None,
            session: Some(run.session_id.clone()),
            user: s.principal.user().cloned(),
            live: false,
            files,
            traceparent: s.traceparent,
            cancel: None,
            quiet: false,
        };
        let (runner, stop) = (runner.clone(), run.stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                result = runner.exec(request) => { let _ = done_tx.send(result); }
                // Dropping the exec future kills the child and its process group.
                _ = stop.cancelled() => {}
            }
        });
        let (runs, reaped) = (self.clone(), run.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline + REAP_GRACE) => {
                    tracing::debug!(run = %reaped.id, "continuation run reaped at its deadline");
                }
                _ = reaped.stop.cancelled() => {}
            }
            runs.finish(&reaped);
        });
        run
    }
}

/// What a new run is.
pub struct Start {
    pub code: String,
    pub lang: Lang,
    pub workspace: Option<Workspace>,
    pub snapshot: Arc<Snapshot>,
    pub timeout: Duration,
    pub session_id: String,
    pub held: Option<Held>,
    /// What the sidecar tells the model before the run's stderr (input files that are gone).
    pub notes: Vec<String>,
    /// The request's W3C `traceparent`.
    pub traceparent: Option<String>,
    /// Who asked for the run.
    pub principal: Principal,
}

/// The key a request id is remembered under: the owner's own (an owner string holds no NUL).
fn request_key(owner: &str, request_id: &str) -> String {
    format!("{owner}\0{request_id}")
}

pub enum Outcome {
    Calls(Vec<PendingCall>),
    Done(ExecResult),
    Stopped,
}

/// Waits for the run's next answer: a batch of host calls, or its end.
pub async fn next_outcome(run: &Run, driver: &mut Driver) -> Outcome {
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

/// One entry of a continuation's `tool_results`.
#[derive(Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    #[serde(default)]
    result: Value,
    #[serde(default)]
    is_error: bool,
    error_message: Option<String>,
}

/// Every result must answer a call of this round, once.
pub fn check_results(waiting: &[PendingCall], results: &[ToolResult]) -> Result<(), ResultsError> {
    let known: HashSet<&str> = waiting.iter().map(|c| c.id.as_str()).collect();
    let mut seen = HashSet::new();
    let mut unknown = Vec::new();
    for r in results {
        if !known.contains(r.call_id.as_str()) {
            unknown.push(r.call_id.clone());
        } else if !seen.insert(r.call_id.as_str()) {
            return Err(ResultsError::Twice(r.call_id.clone()));
        }
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ResultsError::Unknown {
            unknown,
            expected: waiting.iter().map(|c| c.id.clone()).collect(),
        })
    }
}

/// Answers each waiting call; one the client left out fails with a `ToolError` naming it.
pub fn deliver(waiting: Vec<PendingCall>, results: Vec<ToolResult>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

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

    fn result(id: &str) -> ToolResult {
        ToolResult {
            call_id: id.into(),
            result: Value::Null,
            is_error: false,
            error_message: None,
        }
    }

    #[test]
    fn results_must_answer_the_round_once() {
        let waiting = [pending("a"), pending("b")];
        assert_eq!(check_results(&waiting, &[result("b")]), Ok(()));
        assert_eq!(
            check_results(&waiting, &[result("a"), result("a")]),
            Err(ResultsError::Twice("a".into()))
        );
        assert_eq!(
            check_results(&waiting, &[result("x"), result("a"), result("y")]),
            Err(ResultsError::Unknown {
                unknown: vec!["x".into(), "y".into()],
                expected: vec!["a".into(), "b".into()],
            })
        );
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
}
