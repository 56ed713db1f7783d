//! Wiring: reads the configured sources into a catalog snapshot, and runs the control API.
//!
//! Owns the current [`Snapshot`] (catalog plus its rendering) behind a watch channel: readers
//! take an `Arc` of the snapshot they started with; a reload sends a new one.

use crate::api;
use crate::catalog::source::{self, Problem, SourceError};
use crate::catalog::{Catalog, CatalogInput, Policy, ServerTools};
use crate::config::{Config, Listen};
use crate::events::{DEFAULT_HOLD, Events, EventsConfig};
use crate::mcp::{Hub, HubOptions, McpConfigError};
use crate::reload::{ReloadStatus, Reloader};
pub use crate::render::Snapshot;
use crate::run::child::{self, Limits};
use crate::run::dispatch::McpCaller;
use crate::run::{Backends, Runner, RunnerConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long in-flight requests get to finish once shutdown starts.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A saved MCP `tools/list` result standing in for a server (`--mcp-catalog NAME=FILE`).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedCatalog {
    pub server: String,
    pub path: PathBuf,
}

impl std::str::FromStr for SavedCatalog {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (server, path) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not NAME=FILE (e.g. github=corpus/github.json)"))?;
        check_server_name(server)?;
        if path.is_empty() {
            return Err(format!("{s:?} names no file after '='"));
        }
        Ok(SavedCatalog {
            server: server.to_string(),
            path: PathBuf::from(path),
        })
    }
}

impl SavedCatalog {
    /// Every `NAME.json` in a directory as server NAME, by name (the corpus layout).
    pub fn all_in(dir: &std::path::Path) -> std::io::Result<Vec<SavedCatalog>> {
        let mut saved: Vec<SavedCatalog> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter_map(|path| {
                let server = path.file_stem()?.to_string_lossy().into_owned();
                Some(SavedCatalog { server, path })
            })
            .collect();
        saved.sort_by(|a, b| a.server.cmp(&b.server));
        Ok(saved)
    }
}

pub use crate::mcp::check_server_name;

/// Reads the host manifest and any saved MCP catalogs.
pub fn load_input(config: &Config, saved: &[SavedCatalog]) -> Result<CatalogInput, SourceError> {
    let mut input = CatalogInput::default();
    if let Some(path) = &config.tools_file {
        let (manifest, problems) = source::read_manifest(path)?;
        input.host_tools = manifest.tools;
        input.callback = manifest.callback;
        input.problems.extend(problems);
    }
    for s in saved {
        let (tools, problems) = source::read_saved_tool_list(&s.path)?;
        input.problems.extend(problems);
        input.servers.push(ServerTools {
            server: s.server.clone(),
            tools,
        });
    }
    Ok(input)
}

/// Builds the first snapshot from the configuration.
pub fn initial_snapshot(config: &Config, saved: &[SavedCatalog]) -> Result<Snapshot, SourceError> {
    snapshot_with_mcp(config, saved, None)
}

/// The first snapshot with the running MCP servers' tools. A live server replaces a saved
/// catalog of the same name once it has listed its tools.
pub fn snapshot_with_mcp(
    config: &Config,
    saved: &[SavedCatalog],
    hub: Option<&Hub>,
) -> Result<Snapshot, SourceError> {
    let input = load_input(config, saved)?;
    Ok(Snapshot::new(build_catalog(config, input, hub, 1)))
}

/// Builds a catalog from the read sources and the running MCP servers' tools (a live server
/// replaces a saved catalog of the same name). Startup and hot reload both build this way.
pub fn build_catalog(
    config: &Config,
    mut input: CatalogInput,
    hub: Option<&Hub>,
    version: u64,
) -> Catalog {
    if let Some(hub) = hub {
        let (servers, problems) = hub.catalog_servers();
        input
            .servers
            .retain(|s| !servers.iter().any(|live| live.server == s.server));
        input.servers.extend(servers);
        input.problems.extend(problems);
    }
    Catalog::build(input, &Policy::from(config), version)
}

/// Starts the servers of `PTC_MCP_CONFIG` (when set) and waits for their first attempt, at
/// most the start timeout plus [`MCP_STARTUP_SLACK`].
pub async fn start_mcp(
    config: &Config,
    shutdown: CancellationToken,
) -> Result<Option<Hub>, McpConfigError> {
    let Some(path) = &config.mcp_config else {
        return Ok(None);
    };
    let hub = Hub::from_file(path, HubOptions::new(config.mcp_start_timeout, shutdown))?;
    hub.wait_started(config.mcp_start_timeout + MCP_STARTUP_SLACK)
        .await;
    Ok(Some(hub))
}

/// Beyond the start timeout, how long startup waits for the MCP servers' first round: each
/// actor reports within its own timeout, so this only covers scheduling.
pub const MCP_STARTUP_SLACK: Duration = Duration::from_secs(1);

/// Logs what a person should know about a snapshot.
pub fn log_report(snapshot: &Snapshot) {
    for line in snapshot.catalog.report() {
        tracing::warn!("{line}");
    }
    for note in &snapshot.rendered.notes {
        tracing::info!("{note}");
    }
}

/// Shared state of the running sidecar.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Present when PTC is on.
    pub runner: Option<Runner>,
    /// Present when `PTC_MCP_CONFIG` is set.
    pub mcp: Option<Hub>,
    /// Every run and call, to Redis (with `REDIS_URL`) and to `GET /v1/events`.
    pub events: Events,
    /// The last hot reload's outcome.
    pub reload: Arc<std::sync::Mutex<ReloadStatus>>,
}

/// Tool calls one run may make: enough for real batch work, a stop for a runaway loop.
pub const MAX_CALLS_PER_RUN: usize = 10_000;
/// Tool calls of one run in flight at once: bounds what one script can load onto backends.
pub const MAX_IN_FLIGHT_PER_RUN: usize = 64;
/// Largest file a child may write.
pub const CHILD_MAX_FILE_BYTES: u64 = 256 << 20;
/// Open files of a child.
pub const CHILD_MAX_OPEN_FILES: u64 = 256;
/// CPU seconds a child gets beyond `PTC_TIMEOUT` before the kernel stops it.
pub const CHILD_CPU_GRACE_SECS: u64 = 5;

/// The runner's settings from the configuration; resolves the interpreter (once).
pub async fn runner_config(config: &Config) -> Result<RunnerConfig, String> {
    let python = child::resolve_python(&config.python).await?;
    let runtime_dir = config.runtime_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ptc-sidecar-{}", std::process::id()))
    });
    Ok(RunnerConfig {
        python,
        timeout: config.timeout,
        tool_timeout: config.tool_timeout,
        max_output_bytes: config.max_output_bytes,
        runtime_dir,
        warm_workers: config.warm_workers,
        max_runs: config.max_runs,
        max_calls_per_run: MAX_CALLS_PER_RUN,
        max_in_flight_per_run: MAX_IN_FLIGHT_PER_RUN,
        limits: Limits {
            address_space: config.memory_mb << 20,
            cpu_secs: config.timeout.as_secs() + CHILD_CPU_GRACE_SECS,
            file_size: CHILD_MAX_FILE_BYTES,
            open_files: CHILD_MAX_OPEN_FILES,
        },
        path_env: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        allow_subprocess: config.allow_subprocess,
    })
}

/// A started sidecar: its state, and the token that stops everything it started.
pub struct Sidecar {
    pub state: AppState,
    pub shutdown: CancellationToken,
    /// Sends a new snapshot (reload).
    pub snapshots: watch::Sender<Arc<Snapshot>>,
    owned_runtime_dir: Option<PathBuf>,
}

impl Sidecar {
    /// Loads the catalog and, with PTC on, starts the runner (IPC bridge, warm pool).
    pub async fn start(config: Config, saved: &[SavedCatalog]) -> anyhow::Result<Sidecar> {
        let shutdown = CancellationToken::new();
        let mcp = start_mcp(&config, shutdown.child_token()).await?;
        for line in mcp.iter().flat_map(Hub::status_lines) {
            tracing::info!("{line}");
        }
        let snapshot = Arc::new(snapshot_with_mcp(&config, saved, mcp.as_ref())?);
        log_report(&snapshot);
        let (tx, rx) = watch::channel(snapshot);
        let events = Events::start(
            EventsConfig {
                agent_id: config.agent_id.clone(),
                redis_url: config.redis_url.clone(),
                stream_maxlen: config.events_stream_maxlen,
                bodies: config.events_bodies,
                hold: DEFAULT_HOLD,
            },
            shutdown.child_token(),
        )
        .map_err(anyhow::Error::msg)?;
        let mut owned_runtime_dir = None;
        let runner = if config.enabled {
            let rc = runner_config(&config).await.map_err(anyhow::Error::msg)?;
            if config.runtime_dir.is_none() {
                owned_runtime_dir = Some(rc.runtime_dir.clone());
            }
            let mut backends = Backends::new(config.tool_timeout);
            backends.events = events.clone();
            backends.mcp = mcp.clone().map(|hub| Arc::new(hub) as Arc<dyn McpCaller>);
            Some(Runner::start(rc, rx.clone(), backends, shutdown.child_token()).await?)
        } else {
            None
        };
        let config = Arc::new(config);
        let reload = Arc::new(std::sync::Mutex::new(ReloadStatus::default()));
        Reloader {
            config: config.clone(),
            saved: saved.to_vec(),
            mcp: mcp.clone(),
            snapshots: tx.clone(),
            events: events.clone(),
            status: reload.clone(),
        }
        .spawn(shutdown.child_token())
        .map_err(anyhow::Error::msg)?;
        Ok(Sidecar {
            state: AppState {
                config,
                snapshot: rx,
                runner,
                mcp,
                events,
                reload,
            },
            shutdown,
            snapshots: tx,
            owned_runtime_dir,
        })
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(dir) = self.owned_runtime_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl AppState {
    pub fn current(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }
}

/// A bound control-API listener.
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listener {
    pub async fn bind(listen: &Listen) -> std::io::Result<Listener> {
        Ok(match listen {
            Listen::Tcp(addr) => Listener::Tcp(tokio::net::TcpListener::bind(addr).await?),
            Listen::Unix(path) => {
                // A stale socket from a previous run would make bind fail.
                if path.exists() {
                    std::fs::remove_file(path)?;
                }
                Listener::Unix(tokio::net::UnixListener::bind(path)?)
            }
        })
    }

    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
                .unwrap_or_default(),
        }
    }
}

/// Serves the control API on `listener` until `shutdown` is cancelled, then lets in-flight
/// requests finish for at most [`SHUTDOWN_GRACE`].
pub async fn run(
    listener: Listener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = api::router(state);
    let graceful = {
        let shutdown = shutdown.clone();
        async move { shutdown.cancelled().await }
    };
    let serve = async {
        match listener {
            Listener::Tcp(l) => {
                axum::serve(l, router)
                    .with_graceful_shutdown(graceful)
                    .await
            }
            Listener::Unix(l) => {
                axum::serve(l, router)
                    .with_graceful_shutdown(graceful)
                    .await
            }
        }
    };
    tokio::select! {
        result = serve => result,
        _ = async { shutdown.cancelled().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("in-flight requests did not finish within {SHUTDOWN_GRACE:?}; stopping");
            Ok(())
        }
    }
}

/// Problems as strings, for responses.
pub fn problem_lines(problems: &[Problem]) -> Vec<String> {
    problems.iter().map(ToString::to_string).collect()
}
