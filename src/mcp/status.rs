//! Each server's status as the hub keeps it: where it is ([`ServerState`]), the tools it listed
//! last, and its outage ([`Down`]) while it is not running; and the [`StatusBoard`] every
//! actor writes its own entry of, which moves `tools_changed` when a tool list changes or
//! whether the model is told a server is not running ([`ServerStatus::unavailable`]).
//!
//! Plain data and its rules; starting, restarting and calling servers is [`super::server`]'s.

use super::BACKOFF_MAX;
use crate::catalog::Unavailable;
use crate::catalog::source::{Problem, ToolDef};
use crate::util::now_ms;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Where one server is.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerState {
    /// First attempt under way.
    Starting,
    Ready,
    /// The last attempt failed, or the server went away; the next one starts after `retry_in`.
    Failed {
        reason: String,
        retry_in: Duration,
    },
    /// Starting again after a failure.
    Restarting {
        attempt: u32,
        last_error: String,
    },
    /// The hub has stopped.
    Stopped,
}

impl ServerState {
    pub fn name(&self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Failed { .. } => "failed",
            ServerState::Restarting { .. } => "restarting",
            ServerState::Stopped => "stopped",
        }
    }
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerState::Failed { reason, retry_in } => write!(
                f,
                "failed: {reason}; next attempt in {:.1} s",
                retry_in.as_secs_f64()
            ),
            ServerState::Restarting {
                attempt,
                last_error,
            } => write!(f, "restarting (attempt {attempt}) after: {last_error}"),
            other => f.write_str(other.name()),
        }
    }
}

/// A server's outage: from the failed start or the death that began it until it is ready again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    /// When it began, in milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// How it went away, when it was running before this outage; `None`: it has not run since
    /// it was configured.
    pub died: Option<String>,
    /// Why the first start of this outage failed: what the model is told. Later failures keep
    /// it (`/healthz`'s `error` has the latest): the same fault may read differently from one
    /// attempt to the next (a child that exits before or while it is written to), and the
    /// description must not change at each retry. `None` until a start has failed.
    pub start_error: Option<String>,
    /// When the next start begins, in milliseconds since the Unix epoch; `None` while one is
    /// under way.
    pub next_attempt_ms: Option<u64>,
}

impl Down {
    /// Records a failed start, or the death of a serving server (`died`): a death begins a new
    /// outage; a failed start begins one or goes on with it.
    pub(super) fn note(down: &mut Option<Down>, reason: &str, died: bool, retry_in: Duration) {
        let now = now_ms();
        let next_attempt_ms = Some(now.saturating_add(retry_in.as_millis() as u64));
        match down {
            Some(d) if !died => {
                d.start_error.get_or_insert_with(|| reason.to_string());
                d.next_attempt_ms = next_attempt_ms;
            }
            _ => {
                *down = Some(Down {
                    since_ms: now,
                    died: died.then(|| reason.to_string()),
                    start_error: (!died).then(|| reason.to_string()),
                    next_attempt_ms,
                });
            }
        }
    }
}

/// One server as the hub sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    pub state: ServerState,
    /// The tools it listed last (kept while it restarts).
    pub tools: Arc<Vec<ToolDef>>,
    /// What was wrong with single tools of that list.
    pub problems: Arc<Vec<Problem>>,
    /// Times it failed or went away.
    pub restarts: u32,
    /// The first attempt has finished, one way or the other.
    pub settled: bool,
    /// The outage it is in; `None` while it runs (or before its first attempt ends).
    pub down: Option<Down>,
}

impl ServerStatus {
    pub(super) fn new() -> ServerStatus {
        ServerStatus {
            state: ServerState::Starting,
            tools: Arc::default(),
            problems: Arc::default(),
            restarts: 0,
            settled: false,
            down: None,
        }
    }

    /// The server as the model is told of it, when it is told (see the module docs): a start
    /// failed since it was configured, or since it died. Depends on what failed only, never
    /// on the time or the attempt, so retries leave it as it is.
    pub fn unavailable(&self, server: &str) -> Option<Unavailable> {
        let down = self.down.as_ref()?;
        let failed = down.start_error.as_ref()?;
        let error = match &down.died {
            None => failed.clone(),
            Some(died) => format!("died ({died}); restart failed: {failed}"),
        };
        Some(Unavailable::new(server, &error, BACKOFF_MAX))
    }

    /// It serves (again): its tools as listed now, and no outage.
    pub(super) fn ready(&mut self, tools: Vec<ToolDef>, problems: Vec<Problem>) {
        self.settled = true;
        self.state = ServerState::Ready;
        self.down = None;
        self.set_tools(tools, problems);
    }

    /// Replaces the tool list only when it differs, so `tools_changed` moves on real changes.
    pub(super) fn set_tools(&mut self, tools: Vec<ToolDef>, problems: Vec<Problem>) {
        if *self.tools != tools || *self.problems != problems {
            self.tools = Arc::new(tools);
            self.problems = Arc::new(problems);
        }
    }
}

/// Every server's status, shared by the actors (each writes only its own entry).
#[derive(Clone)]
pub(crate) struct StatusBoard {
    pub(super) status: Arc<watch::Sender<BTreeMap<String, ServerStatus>>>,
    pub(super) tools_changed: Arc<watch::Sender<u64>>,
}

impl StatusBoard {
    /// Applies `f` to `server`'s entry, unless `retired` is set: an actor the hub has stopped
    /// (removed, or replaced by one with a new spec) must not write over its successor's entry.
    /// The flag is read under the board's lock, and [`Hub::reconfigure`] sets it before it
    /// replaces the entry, so a late write of a stopped actor is either overwritten or skipped.
    pub(super) fn update(
        &self,
        server: &str,
        retired: &AtomicBool,
        f: impl FnOnce(&mut ServerStatus),
    ) {
        let mut tools_changed = false;
        self.status.send_modify(|all| {
            if retired.load(Ordering::SeqCst) {
                return;
            }
            if let Some(s) = all.get_mut(server) {
                let before = (s.tools.clone(), s.unavailable(server));
                f(s);
                tools_changed =
                    !Arc::ptr_eq(&before.0, &s.tools) || before.1 != s.unavailable(server);
            }
        });
        if tools_changed {
            self.tools_changed.send_modify(|n| *n += 1);
        }
    }

    pub(super) fn bump_tools_changed(&self) {
        self.tools_changed.send_modify(|n| *n += 1);
    }

    pub(super) fn state(&self, server: &str) -> ServerState {
        self.status
            .borrow()
            .get(server)
            .map(|s| s.state.clone())
            .unwrap_or(ServerState::Stopped)
    }
}
