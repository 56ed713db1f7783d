//! What every handler of the control API can reach: the running sidecar's shared state.
//!
//! Owns the shape of that state, not its making (`app` builds it at start-up and hands it to
//! [`super::router`]); nothing here does I/O.

use crate::config::Config;
use crate::events::Events;
use crate::mcp::Hub;
use crate::metrics::Metrics;
use crate::reload::ReloadStatus;
use crate::render::Snapshot;
use crate::run::{Native, Runner};
use crate::session::Sessions;
use std::sync::Arc;
use tokio::sync::watch;

/// Shared state of the running sidecar.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Present when PTC is on.
    pub runner: Option<Runner>,
    /// A runtime's tool calls (`POST /v1/tools/call`), with PTC on or off.
    pub native: Native,
    /// Where runs keep their files across requests; present with the runner.
    pub sessions: Option<Sessions>,
    /// The files of runs without a session (`save_file`, a cut stream's whole output), one
    /// folder per run, kept for `PTC_ARTIFACT_TTL`; present with the runner.
    pub artifacts: Option<Sessions>,
    /// Present when `PTC_MCP_CONFIG` is set.
    pub mcp: Option<Hub>,
    /// Every run and call, to Redis (with `REDIS_URL`) and to `GET /v1/events`.
    pub events: Events,
    /// The last hot reload's outcome.
    pub reload: Arc<std::sync::Mutex<ReloadStatus>>,
    /// What `GET /metrics` shows.
    pub metrics: Metrics,
    /// What `GET /v1/dashboard/state` shows, started by its first request.
    pub board: super::LazyBoard,
}

impl AppState {
    pub fn current(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }
}
