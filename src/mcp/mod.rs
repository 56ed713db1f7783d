//! The MCP backend: the servers of `PTC_MCP_CONFIG` as tool backends.
//!
//! Owns the [`Hub`]: one actor per server ([`server`]) that starts it (stdio child or streamable
//! HTTP session, through rmcp), restarts it with backoff when it fails, lists its tools and
//! passes calls on. The hub is what dispatch calls ([`McpCaller`]) and what `/healthz` and
//! `ptc-sidecar tools` read. It must not build catalogs: it publishes each server's tools, and
//! `sources` turns them into a catalog. It must not read the environment: a stdio server gets
//! the `PATH` and `HOME` of [`HubOptions`], which come from the configuration.
//!
//! # Observing tool changes (for hot reload)
//!
//! [`Hub::tools_changed`] is a `watch` whose value goes up each time any server's tool list
//! changes: when a server first comes up, when it comes back after a restart with a different
//! list, and after `notifications/tools/list_changed` (the actor re-lists that server). A
//! reloader does `while rx.changed().await.is_ok() { let (servers, problems) =
//! hub.catalog_servers(); /* rebuild */ }`. A server that goes down keeps its last list, so the
//! catalog does not flap while it restarts. A call made meanwhile waits for the restart when it
//! is due before the call's deadline (`PTC_TOOL_TIMEOUT`) and fails as `unavailable` when that
//! start fails; a call that would outwait its deadline is `unavailable` at once.
//!
//! # Servers that are not running (for the description)
//!
//! Each server's status keeps its outage ([`Down`]: since when, how it died, why its first
//! start failed, the next attempt). [`Hub::unavailable`] gives the ones the model is told of: a
//! server whose start failed before it ever ran (since it was configured), and one that died
//! and whose restart failed too. A server back at its first restart is never named, so a crash
//! costs no catalog change; and what the model is told is the outage's first failed start, not
//! the latest, so the description stays byte-identical while the retries go on. `tools_changed`
//! also moves when that list changes, so the reloader rebuilds the catalog.
//!
//! # Reconfiguring (for hot reload of `PTC_MCP_CONFIG`)
//!
//! [`Hub::reconfigure`] takes the servers the file lists now: new names start, missing names
//! stop (their actor ends, which kills the process group) and leave the status, and a changed
//! spec restarts its server; an unchanged server keeps its actor and process. Every clone of
//! the hub sees the new set, so dispatch and `/healthz` follow at once.

pub mod config;
mod connect;
mod http;
pub mod result;
mod server;
mod status;
mod stdio;

pub use config::{
    McpConfigError, ServerError, ServerNameError, ServerSpec, ShapeError, Transport,
    check_server_name,
};
pub use connect::{ConnectError, ListError, MAX_TOOL_PAGES, MAX_TOOLS};
pub use server::{BACKOFF_MAX, BACKOFF_MIN, CALL_QUEUE, backoff};
pub use status::{Down, ServerState, ServerStatus};

use crate::catalog::source::Problem;
use crate::catalog::{ServerTools, Unavailable};
use crate::config::{Config, DEFAULT_PATH};
use crate::run::CallError;
use crate::run::McpCaller;
use serde_json::{Value, json};
use server::{Actor, CallRequest, ServerHandle};
use status::StatusBoard;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// Default bound on starting one server (spawn or connect, initialize, list tools):
/// a server that hangs at start cannot hold up the sidecar or the other servers.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest tool result handed to code: a tool result is data for a script, not a download.
pub const MAX_RESULT_BYTES: usize = 8 << 20;
/// Bound on connecting to a streamable HTTP server: an unroutable address fails fast.
pub const HTTP_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the hub.
#[derive(Clone)]
pub struct HubOptions {
    pub start_timeout: Duration,
    pub max_result_bytes: usize,
    /// Client for streamable HTTP servers.
    pub http: reqwest::Client,
    /// Cancelled to stop every server.
    pub shutdown: CancellationToken,
    /// `PATH` of a stdio server (and where its command is looked up).
    pub path_env: String,
    /// `HOME` of a stdio server; unset when `None`.
    pub home: Option<PathBuf>,
}

impl HubOptions {
    /// Defaults, with [`DEFAULT_PATH`] and no `HOME` for stdio servers.
    pub fn new(start_timeout: Duration, shutdown: CancellationToken) -> HubOptions {
        let http = reqwest::Client::builder()
            .connect_timeout(HTTP_CONNECT_TIMEOUT)
            .build()
            // Building a client without custom TLS roots does not fail.
            .unwrap_or_default();
        HubOptions {
            start_timeout,
            max_result_bytes: MAX_RESULT_BYTES,
            http,
            shutdown,
            path_env: DEFAULT_PATH.to_string(),
            home: None,
        }
    }

    /// The configured start timeout, and the sidecar's `PATH` and `HOME` for stdio servers.
    pub fn from_config(config: &Config, shutdown: CancellationToken) -> HubOptions {
        HubOptions {
            path_env: config.path_env.clone(),
            home: config.home.clone(),
            ..HubOptions::new(config.mcp_start_timeout, shutdown)
        }
    }
}

/// The running MCP servers. Cloning is cheap; the servers stop when the last clone is dropped
/// or the shutdown token is cancelled.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Behind a lock because [`Hub::reconfigure`] changes the set; every clone sees it. Held
    /// only to look up or swap handles, never across an await.
    servers: RwLock<BTreeMap<String, Running>>,
    board: StatusBoard,
    /// What new actors start with (`shutdown` is the hub's own stop token).
    options: HubOptions,
    stop: CancellationToken,
}

/// One server's actor as the hub holds it.
struct Running {
    spec: ServerSpec,
    handle: ServerHandle,
    /// Ends this actor alone (a child of the hub's stop token).
    stop: CancellationToken,
    /// Set when the hub stops this actor, so it no longer writes its status.
    retired: Arc<AtomicBool>,
}

impl Running {
    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        self.stop.cancel();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What [`Hub::reconfigure`] did, by server name (each list sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconfigured {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    /// Their spec changed: stopped, and started again with the new one.
    pub restarted: Vec<String>,
}

impl Reconfigured {
    pub fn is_empty(&self) -> bool {
        self.started.is_empty() && self.stopped.is_empty() && self.restarted.is_empty()
    }
}

impl Hub {
    /// Starts every server at once, each in its own actor task; returns without waiting.
    pub fn start(specs: Vec<ServerSpec>, options: HubOptions) -> Hub {
        let stop = options.shutdown.child_token();
        let options = HubOptions {
            shutdown: stop.clone(),
            ..options
        };
        let initial = specs
            .iter()
            .map(|s| (s.name.clone(), ServerStatus::new()))
            .collect();
        let board = StatusBoard {
            status: Arc::new(watch::channel(initial).0),
            tools_changed: Arc::new(watch::channel(0).0),
        };
        let servers = specs
            .into_iter()
            .map(|spec| (spec.name.clone(), spawn_actor(spec, &options, &board)))
            .collect();
        Hub {
            inner: Arc::new(Inner {
                servers: RwLock::new(servers),
                board,
                options,
                stop,
            }),
        }
    }

    /// Makes the running set match `specs`: starts new names, stops names no longer listed,
    /// restarts servers whose spec changed, and leaves the others alone. Returns at once (a new
    /// server's first round can be awaited with [`Hub::wait_started`]). Moves
    /// [`Hub::tools_changed`] when anything changed, so the catalog is rebuilt.
    pub fn reconfigure(&self, specs: Vec<ServerSpec>) -> Reconfigured {
        let mut done = Reconfigured::default();
        let mut servers = self
            .inner
            .servers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let wanted: BTreeMap<String, ServerSpec> =
            specs.into_iter().map(|s| (s.name.clone(), s)).collect();
        let gone: Vec<String> = servers
            .keys()
            .filter(|name| !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(old) = servers.remove(&name) {
                old.retire();
            }
            done.stopped.push(name);
        }
        let mut to_start = Vec::new();
        for (name, spec) in wanted {
            match servers.get(&name) {
                Some(running) if running.spec == spec => {}
                Some(running) => {
                    running.retire();
                    done.restarted.push(name);
                    to_start.push(spec);
                }
                None => {
                    done.started.push(name);
                    to_start.push(spec);
                }
            }
        }
        if done.is_empty() {
            return done;
        }
        // The retired actors were flagged above, so none of them writes after this.
        self.inner.board.status.send_modify(|all| {
            for name in &done.stopped {
                all.remove(name);
            }
            for spec in &to_start {
                all.insert(spec.name.clone(), ServerStatus::new());
            }
        });
        for spec in to_start {
            let name = spec.name.clone();
            let running = spawn_actor(spec, &self.inner.options, &self.inner.board);
            servers.insert(name, running);
        }
        drop(servers);
        self.inner.board.bump_tools_changed();
        done
    }

    /// Reads `path` and starts its servers.
    pub fn from_file(path: &std::path::Path, options: HubOptions) -> Result<Hub, McpConfigError> {
        Ok(Hub::start(config::read(path)?, options))
    }

    /// Waits until every server has finished its first attempt, or `bound` has passed.
    pub async fn wait_started(&self, bound: Duration) {
        let mut rx = self.inner.board.status.subscribe();
        let _ =
            tokio::time::timeout(bound, rx.wait_for(|all| all.values().all(|s| s.settled))).await;
    }

    /// The bound on one server's start.
    pub fn start_timeout(&self) -> Duration {
        self.inner.options.start_timeout
    }

    /// Whether `server` is in the current set.
    fn has(&self, server: &str) -> bool {
        self.inner
            .servers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(server)
    }

    /// Every server's status, by name.
    pub fn status(&self) -> BTreeMap<String, ServerStatus> {
        self.inner.board.status.borrow().clone()
    }

    /// Goes up each time any server's tool list changes, or whether the model is told it is
    /// not running (see the module docs).
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.inner.board.tools_changed.subscribe()
    }

    /// The servers' current tools for a catalog, and their problems. A server that has never
    /// listed its tools is left out, with a problem saying why.
    pub fn catalog_servers(&self) -> (Vec<ServerTools>, Vec<Problem>) {
        let mut servers = Vec::new();
        let mut problems = Vec::new();
        for (name, status) in self.inner.board.status.borrow().iter() {
            problems.extend(status.problems.iter().cloned());
            if status.state != ServerState::Ready && status.tools.is_empty() {
                problems.push(Problem {
                    origin: format!("mcp server {name}"),
                    index: None,
                    tool: None,
                    message: format!("its tools are missing ({})", status.state),
                    skipped: false,
                });
                continue;
            }
            servers.push(ServerTools {
                server: name.clone(),
                tools: status.tools.as_ref().clone(),
            });
        }
        (servers, problems)
    }

    /// The servers the model is told are not running (see the module docs), by name.
    pub fn unavailable(&self) -> Vec<Unavailable> {
        self.inner
            .board
            .status
            .borrow()
            .iter()
            .filter_map(|(name, s)| s.unavailable(name))
            .collect()
    }

    /// `/healthz`'s view: each server's state, tool count, restarts and error; `unavailable`
    /// when the description names it as not running, and its outage's times.
    pub fn health(&self) -> Value {
        let servers: serde_json::Map<String, Value> = self
            .status()
            .into_iter()
            .map(|(name, s)| {
                let mut entry = json!({
                    "state": s.state.name(),
                    "tools": s.tools.len(),
                    "restarts": s.restarts,
                });
                if s.unavailable(&name).is_some() {
                    entry["unavailable"] = json!(true);
                }
                if let Some(down) = &s.down {
                    entry["down_since_ms"] = json!(down.since_ms);
                    if let Some(died) = &down.died {
                        entry["died"] = json!(died);
                    }
                    if let Some(at) = down.next_attempt_ms {
                        entry["next_attempt_ms"] = json!(at);
                    }
                }
                match &s.state {
                    // The actor redacts reasons (URLs may carry a token) before they get here.
                    ServerState::Failed { reason, retry_in } => {
                        entry["error"] = json!(reason);
                        entry["retry_in_ms"] = json!(retry_in.as_millis() as u64);
                    }
                    ServerState::Restarting {
                        attempt,
                        last_error,
                    } => {
                        entry["error"] = json!(last_error);
                        entry["attempt"] = json!(attempt);
                    }
                    _ => {}
                }
                (name, entry)
            })
            .collect();
        Value::Object(servers)
    }

    /// One line per server for a person (`ptc-sidecar tools`).
    pub fn status_lines(&self) -> Vec<String> {
        self.status()
            .iter()
            .map(|(name, s)| format!("mcp server {name}: {} ({} tools)", s.state, s.tools.len()))
            .collect()
    }
}

impl McpCaller for Hub {
    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        args: Value,
        traceparent: &'a str,
        deadline: tokio::time::Instant,
    ) -> Pin<Box<dyn Future<Output = Result<Value, CallError>> + Send + 'a>> {
        Box::pin(async move {
            let handle = self
                .inner
                .servers
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(server)
                .map(|r| r.handle.clone());
            let Some(handle) = handle else {
                return Err(CallError::Unavailable(format!(
                    "MCP server {server:?} is not running: it is not in PTC_MCP_CONFIG \
                     (its tools come from a saved catalog, or it was just removed)"
                )));
            };
            let args = match args {
                Value::Object(map) => map,
                Value::Null => serde_json::Map::new(),
                _ => {
                    return Err(CallError::Input(format!(
                        "{server}__{tool}: arguments must be keyword arguments (a JSON object)"
                    )));
                }
            };
            let (reply, answer) = oneshot::channel();
            let request = CallRequest {
                tool: tool.to_string(),
                args,
                traceparent: traceparent.to_string(),
                deadline,
                reply,
            };
            if let Err(mpsc::error::SendError(_)) = handle.calls.send(request).await {
                return Err(CallError::Unavailable(format!(
                    "MCP server {server:?} is stopped"
                )));
            }
            answer.await.unwrap_or_else(|_| {
                if !self.has(server) {
                    return Err(CallError::Unavailable(format!(
                        "MCP server {server:?} was removed from PTC_MCP_CONFIG during the call \
                         to {server}__{tool}"
                    )));
                }
                Err(CallError::Unavailable(format!(
                    "MCP server {server:?} went away during the call to {server}__{tool}; \
                     it is being restarted"
                )))
            })
        })
    }
}

/// Starts one server's actor with its own stop token, under the hub's.
fn spawn_actor(spec: ServerSpec, options: &HubOptions, board: &StatusBoard) -> Running {
    let stop = options.shutdown.child_token();
    let retired = Arc::new(AtomicBool::new(false));
    let options = HubOptions {
        shutdown: stop.clone(),
        ..options.clone()
    };
    let (actor, handle) = Actor::new(spec.clone(), options, board.clone(), retired.clone());
    tokio::spawn(actor.run());
    Running {
        spec,
        handle,
        stop,
        retired,
    }
}
