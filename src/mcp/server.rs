//! One MCP server's actor: the single task that owns its connection (the child process or the
//! HTTP session, and rmcp's client), starts it (each start, its tools listed, is
//! [`super::connect`]'s), passes calls to it, re-lists its tools when it says they changed,
//! notices when it goes away and starts it again with backoff. Calls that come while it
//! restarts wait for the start (when it is due before their deadline) and go first once it
//! serves.
//!
//! Everyone else holds a [`ServerHandle`] (a bounded sender). The actor never waits on a call:
//! each call runs in its own task on a clone of rmcp's `Peer`, so a slow tool holds up nothing
//! but itself. Must not leave a process behind: a stdio server runs in its own process group,
//! which is killed when the connection ends however it ends (see [`super::stdio`]). Must not leak
//! a secret: failure reasons (the log, `/healthz`) show URLs without userinfo or query.

use super::config::ServerSpec;
use super::connect::{ConnectError, Connection, Relist, connect, relist_tools};
use super::result::map_result;
use super::status::{Down, ServerStatus, StatusBoard};
use super::stdio::{STOP_GRACE, describe_exit, wait_child};
use super::{HubOptions, ServerState};
use crate::run::CallError;
use crate::util::redact_urls;
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, JsonObject, RequestMetaObject};
use rmcp::service::{Peer, QuitReason, RoleClient};
use serde_json::Value;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Calls queued for one server before callers wait: back-pressure instead of unbounded memory
/// when a script fires thousands of calls at a slow server.
pub const CALL_QUEUE: usize = 256;
/// First and longest wait before restarting a failed server: a crash loop costs little.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A server up this long, or that answered a call since it came up, counts as healthy again:
/// its next failure restarts it after [`BACKOFF_MIN`] instead of the grown backoff. (A server
/// that crashes on some calls but answers the others is worth restarting at once; one that
/// fails before it answers anything backs off.)
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// Calls held at once for a server that is restarting; more are answered `unavailable` at
/// once. As many as may queue in front of a serving one: a burst during a restart costs no
/// more memory than a burst during service.
pub const HELD_CALLS: usize = CALL_QUEUE;
/// A call on its way to the actor.
pub(crate) struct CallRequest {
    pub tool: String,
    pub args: JsonObject,
    /// The call's span, sent in `params._meta.traceparent` (and as a header over HTTP).
    pub traceparent: String,
    /// When the caller gives up; a restart due later is not worth waiting for.
    pub deadline: tokio::time::Instant,
    pub reply: oneshot::Sender<Result<Value, CallError>>,
}

/// The cloneable way to reach one server's actor.
#[derive(Clone)]
pub(crate) struct ServerHandle {
    pub calls: mpsc::Sender<CallRequest>,
}

/// The actor of one server.
pub(crate) struct Actor {
    spec: ServerSpec,
    options: HubOptions,
    calls: mpsc::Receiver<CallRequest>,
    board: StatusBoard,
    /// Set by the hub when it stops this actor for good (see `StatusBoard::update`).
    retired: Arc<AtomicBool>,
    /// Calls that came while the server was not serving and wait for its next start, in order.
    held: VecDeque<CallRequest>,
}

/// What a server that is not serving is doing, for the calls that come meanwhile.
#[derive(Debug, Clone, Copy)]
enum Pending {
    /// A start is under way: calls wait for it.
    Attempt,
    /// Waiting out the backoff: the next start begins then. A call waits when its deadline is
    /// later, and is answered `unavailable` at once otherwise.
    RetryAt(tokio::time::Instant),
}

/// Why the serving phase ended.
enum Ended {
    /// Shutdown, or every handle is gone: stop for good.
    Stop,
    /// The server went away; restart it. `answered`: it answered a call first.
    Down { reason: String, answered: bool },
}

impl Actor {
    pub(crate) fn new(
        spec: ServerSpec,
        options: HubOptions,
        board: StatusBoard,
        retired: Arc<AtomicBool>,
    ) -> (Actor, ServerHandle) {
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        (
            Actor {
                spec,
                options,
                calls: rx,
                board,
                retired,
                held: VecDeque::new(),
            },
            ServerHandle { calls: tx },
        )
    }

    fn name(&self) -> &str {
        &self.spec.name
    }

    fn set(&self, f: impl FnOnce(&mut ServerStatus)) {
        self.board.update(&self.spec.name, &self.retired, f);
    }

    pub(crate) async fn run(mut self) {
        let mut failures: u32 = 0;
        loop {
            self.set(|s| {
                s.state = match &s.state {
                    ServerState::Failed { reason, .. } => ServerState::Restarting {
                        attempt: failures,
                        last_error: reason.clone(),
                    },
                    _ => ServerState::Starting,
                };
                if let Some(down) = &mut s.down {
                    down.next_attempt_ms = None;
                }
            });
            let timeout = self.options.start_timeout;
            let (tools_tx, mut tools_rx) = mpsc::channel(1);
            let (spec, options) = (self.spec.clone(), self.options.clone());
            let connecting = async move {
                tokio::time::timeout(timeout, connect(&spec, &options, tools_tx)).await
            };
            let Some(started) = self.until(connecting, Pending::Attempt).await else {
                break;
            };
            // `died`: it was serving and went away (not a start that failed).
            let (reason, died) = match started {
                Err(_) => (ConnectError::Timeout(timeout).to_string(), false),
                Ok(Err(e)) => (e.to_string(), false),
                Ok(Ok(connection)) => {
                    let up_since = Instant::now();
                    match self.serve(connection, &mut tools_rx).await {
                        Ended::Stop => break,
                        Ended::Down { reason, answered } => {
                            if answered || up_since.elapsed() >= BACKOFF_RESET_AFTER {
                                failures = 0;
                            }
                            (reason, true)
                        }
                    }
                }
            };
            // The reason goes to the log and `/healthz`; an HTTP server's URL may carry a token.
            let reason = redact_urls(&reason);
            // The calls waited for this start, which failed: they learn why now rather than
            // after another backoff (none wait when the server went down while serving).
            for call in std::mem::take(&mut self.held) {
                let _ = call.reply.send(Err(CallError::Unavailable(format!(
                    "MCP server {:?} could not be started ({reason}), so {}__{} cannot run now",
                    self.spec.name, self.spec.name, call.tool
                ))));
            }
            failures = failures.saturating_add(1);
            let retry_in = backoff(failures);
            tracing::warn!(server = %self.name(), "MCP server failed: {reason}; next attempt in {retry_in:?}");
            self.set(|s| {
                s.settled = true;
                s.restarts = s.restarts.saturating_add(1);
                s.state = ServerState::Failed {
                    reason: reason.clone(),
                    retry_in,
                };
                Down::note(&mut s.down, &reason, died, retry_in);
            });
            let retry_at = tokio::time::Instant::now() + retry_in;
            let backoff = tokio::time::sleep_until(retry_at);
            if self
                .until(backoff, Pending::RetryAt(retry_at))
                .await
                .is_none()
            {
                break;
            }
        }
        self.set(|s| {
            s.settled = true;
            s.state = ServerState::Stopped;
        });
    }

    /// Awaits `work` while the server is not serving. A call that comes meanwhile waits for
    /// the next start when it is due before the call's deadline (a crashed server is back in a
    /// moment: the calls after the crash must not fail for it), and is answered `Unavailable`
    /// with the current state otherwise. `None` means stop (shutdown, or no handle left).
    async fn until<T>(&mut self, work: impl Future<Output = T>, pending: Pending) -> Option<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Some(out),
                () = self.options.shutdown.cancelled() => return None,
                call = self.calls.recv() => {
                    let call = call?;
                    let waits = match pending {
                        Pending::Attempt => true,
                        Pending::RetryAt(at) => call.deadline > at,
                    };
                    // Callers that gave up meanwhile leave room.
                    self.held.retain(|c| !c.reply.is_closed());
                    if waits && self.held.len() < HELD_CALLS {
                        self.held.push_back(call);
                        continue;
                    }
                    let state = self.board.state(&self.spec.name);
                    let _ = call.reply.send(Err(CallError::Unavailable(format!(
                        "MCP server {:?} is not ready ({state}), so {}__{} cannot run now",
                        self.spec.name, self.spec.name, call.tool
                    ))));
                }
            }
        }
    }

    /// The ready phase: passes calls on until the server goes away or we stop.
    async fn serve(&mut self, connection: Connection, tools_rx: &mut mpsc::Receiver<()>) -> Ended {
        let Connection {
            service,
            mut child,
            tools,
            problems,
        } = connection;
        let count = tools.len();
        self.set(|s| s.ready(tools, problems));
        tracing::info!(server = %self.name(), tools = count, "MCP server ready");
        let peer = service.peer().clone();
        let stop = service.cancellation_token();
        let mut closed = Box::pin(service.waiting());
        let (down_tx, mut down_rx) = mpsc::channel::<String>(1);
        let mut in_flight = JoinSet::new();
        let mut relist: Option<Relist> = None;
        let mut relist_again = false;
        let server: Arc<str> = Arc::from(self.spec.name.as_str());
        // The calls that waited for this start go first, in the order they came.
        for call in std::mem::take(&mut self.held) {
            if !call.reply.is_closed() {
                in_flight.spawn(run_call(
                    peer.clone(),
                    server.clone(),
                    call,
                    self.options.max_result_bytes,
                    down_tx.clone(),
                ));
            }
        }
        let mut answered = false;
        // Why the server went down, or `None` to stop.
        let down = loop {
            tokio::select! {
                () = self.options.shutdown.cancelled() => break None,
                call = self.calls.recv() => match call {
                    Some(call) => {
                        in_flight.spawn(run_call(peer.clone(), server.clone(), call, self.options.max_result_bytes, down_tx.clone()));
                    }
                    None => break None,
                },
                Some(joined) = in_flight.join_next(), if !in_flight.is_empty() => {
                    answered |= joined.unwrap_or(false);
                }
                quit = &mut closed => {
                    if let Some(c) = &child {
                        c.log_tail(self.name());
                    }
                    let why = match quit {
                        Ok(QuitReason::Closed) => String::new(),
                        other => format!(" ({other:?})"),
                    };
                    break Some(format!("the connection closed{why}"));
                }
                status = wait_child(&mut child) => {
                    if let Some(c) = &child {
                        c.log_tail(self.name());
                    }
                    break Some(format!("the server process exited ({})", describe_exit(status)));
                }
                Some(reason) = down_rx.recv() => break Some(reason),
                Some(()) = tools_rx.recv() => {
                    if relist.is_some() {
                        relist_again = true;
                    } else {
                        relist = Some(Box::pin(relist_tools(peer.clone(), self.spec.name.clone())));
                    }
                }
                listed = poll_some(&mut relist) => {
                    relist = None;
                    match listed {
                        Ok((tools, problems)) => {
                            tracing::info!(server = %self.name(), tools = tools.len(), "MCP server changed its tools");
                            self.set(|s| s.set_tools(tools, problems));
                        }
                        Err(e) => tracing::warn!(server = %self.name(), "re-listing tools failed, keeping the last list: {}", redact_urls(&e.to_string())),
                    }
                    if std::mem::take(&mut relist_again) {
                        relist = Some(Box::pin(relist_tools(peer.clone(), self.spec.name.clone())));
                    }
                }
            }
        };
        // In-flight calls end now; their callers get a clear error from the handle.
        in_flight.abort_all();
        stop.cancel();
        if let Some(mut c) = child.take() {
            // Closing stdin (the cancel above) lets a well-behaved server exit by itself.
            let _ = tokio::time::timeout(STOP_GRACE, c.process.wait()).await;
            drop(c);
        }
        match down {
            None => Ended::Stop,
            Some(reason) => Ended::Down { reason, answered },
        }
    }
}

/// Awaits the future when there is one; never resolves otherwise.
async fn poll_some<F: Future + Unpin>(f: &mut Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Exponential backoff: [`BACKOFF_MIN`] after the first failure, doubling up to [`BACKOFF_MAX`].
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    BACKOFF_MIN.saturating_mul(factor).min(BACKOFF_MAX)
}

/// One call on the server. Drops the rmcp call when the caller gives up (`PTC_TOOL_TIMEOUT`),
/// which sends `notifications/cancelled` to the server. Whether the server answered it (a
/// result or a JSON-RPC error: it was working).
async fn run_call(
    peer: Peer<RoleClient>,
    server: Arc<str>,
    call: CallRequest,
    max_result_bytes: usize,
    down: mpsc::Sender<String>,
) -> bool {
    let CallRequest {
        tool,
        args,
        traceparent,
        mut reply,
        // The caller's own timeout ends the call: dropping its receiver closes `reply`.
        deadline: _,
    } = call;
    let mut params = CallToolRequestParams::new(tool.clone()).with_arguments(args);
    let mut meta = RequestMetaObject::new();
    meta.set_traceparent(traceparent);
    params.meta = Some(meta);
    let outcome = tokio::select! {
        outcome = peer.call_tool(params) => outcome,
        () = reply.closed() => return false,
    };
    let answered = matches!(outcome, Ok(_) | Err(ServiceError::McpError(_)));
    let result = match outcome {
        Ok(result) => map_result(&server, &tool, result, max_result_bytes),
        Err(ServiceError::McpError(e)) => Err(CallError::Tool(format!(
            "MCP server {server:?} refused {server}__{tool}: {} (JSON-RPC error {})",
            e.message, e.code.0
        ))),
        Err(ServiceError::UnexpectedResponse) => Err(CallError::Tool(format!(
            "MCP server {server:?} answered {server}__{tool} with a malformed result \
             (not a valid tools/call result)"
        ))),
        Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
            let why = transport_failure(&e);
            let _ = down.try_send(format!("{why} during a call"));
            Err(CallError::Unavailable(format!(
                "MCP server {server:?} went away during the call to {server}__{tool} ({why}); \
                 it is being restarted"
            )))
        }
        Err(e) => Err(CallError::Tool(format!(
            "MCP server {server:?} failed {server}__{tool}: {}",
            redact_urls(&e.to_string())
        ))),
    };
    let _ = reply.send(result);
    answered
}

/// What broke, in a person's words: the innermost cause, not rmcp's type names.
fn transport_failure(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportClosed => "the connection closed".into(),
        other => {
            let mut cause: &dyn std::error::Error = other;
            while let Some(next) = cause.source() {
                cause = next;
            }
            format!("cannot reach it: {}", redact_urls(&cause.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Transport;

    /// Which outages the model is told of: a first start that failed, a death whose restart
    /// failed too; never a death alone, and the same text at every retry, even one that fails
    /// in other words.
    #[test]
    fn the_model_is_told_of_failed_starts_and_of_deaths_a_restart_did_not_mend() {
        let told = |down: &Option<Down>| {
            let status = ServerStatus {
                down: down.clone(),
                ..ServerStatus::new()
            };
            status.unavailable("gh").map(|u| u.error)
        };
        let wait = Duration::from_millis(500);
        let mut down = None;
        Down::note(&mut down, "cannot start \"gh\": not found", false, wait);
        let first = told(&down);
        assert_eq!(first.as_deref(), Some("cannot start \"gh\": not found"));
        let since = down.as_ref().unwrap().since_ms;
        Down::note(&mut down, "did not start within 20 s", false, wait);
        assert_eq!(told(&down), first, "a retry changes nothing the model sees");
        let d = down.as_ref().unwrap();
        assert_eq!(d.since_ms, since);
        assert!(d.next_attempt_ms.unwrap() >= since + 500);

        let mut down = None;
        Down::note(
            &mut down,
            "the server process exited (killed by signal 9)",
            true,
            wait,
        );
        assert_eq!(told(&down), None, "a death alone: the restart may mend it");
        Down::note(
            &mut down,
            "initialize failed: closed (exit status 3)",
            false,
            wait,
        );
        let said = Some(
            "died (the server process exited (killed by signal 9)); restart failed: \
             initialize failed: closed (exit status 3)"
                .to_string(),
        );
        assert_eq!(told(&down), said);
        Down::note(
            &mut down,
            "initialize failed: Broken pipe (exit status 3)",
            false,
            wait,
        );
        assert_eq!(told(&down), said);

        let mut status = ServerStatus {
            down: down.clone(),
            ..ServerStatus::new()
        };
        status.ready(Vec::new(), Vec::new());
        assert_eq!((status.down, status.state), (None, ServerState::Ready));
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let waits: Vec<u64> = (1..=10).map(|f| backoff(f).as_millis() as u64).collect();
        assert_eq!(
            waits,
            [
                500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000
            ]
        );
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    /// A server waiting out its backoff: a call whose deadline comes first is answered at once;
    /// a call with time to spare waits for the next start and, when that start fails too,
    /// learns why then (not at its own timeout). On the real clock: a paused one would run
    /// ahead while a start awaits the spawning thread, and time the start out.
    #[tokio::test]
    async fn calls_wait_for_a_restart_due_before_their_deadline() {
        /// What "at once" and "when the start failed" allow for on a loaded machine.
        const SLACK: Duration = Duration::from_millis(300);
        use crate::mcp::{Hub, HubOptions};
        use crate::run::McpCaller;
        use tokio::time::Instant;
        let command = "/nonexistent/ptc-test-server";
        let spec = ServerSpec {
            name: "ghost".into(),
            transport: Transport::Stdio {
                command: command.into(),
                args: vec![],
                env: Default::default(),
            },
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        let _stop = shutdown.clone().drop_guard();
        let hub = Hub::start(
            vec![spec],
            HubOptions::new(Duration::from_secs(20), shutdown),
        );
        hub.wait_started(Duration::from_secs(1)).await;
        let span = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cannot_start =
            format!("cannot start {command:?}: No such file or directory (os error 2)");

        let start = Instant::now();
        let soon = start + BACKOFF_MIN / 5;
        let answer = hub.call("ghost", "t", Value::Null, span, soon).await;
        assert_eq!(
            answer,
            Err(CallError::Unavailable(format!(
                "MCP server \"ghost\" is not ready (failed: {cannot_start}; next attempt in \
                 0.5 s), so ghost__t cannot run now"
            )))
        );
        assert!(
            start.elapsed() < SLACK,
            "answered at once, not {:?}",
            start.elapsed()
        );

        let later = start + Duration::from_secs(10);
        let answer = hub.call("ghost", "t", Value::Null, span, later).await;
        assert_eq!(
            answer,
            Err(CallError::Unavailable(format!(
                "MCP server \"ghost\" could not be started ({cannot_start}), so ghost__t cannot \
                 run now"
            )))
        );
        let waited = start.elapsed();
        assert!(
            // The backoff counts from the failed start, a moment before `start`.
            waited > BACKOFF_MIN - SLACK && waited < BACKOFF_MIN + SLACK,
            "answered when the next start failed ({BACKOFF_MIN:?} after the first), not {waited:?}"
        );
        assert_eq!(hub.status()["ghost"].restarts, 2);
    }
}
