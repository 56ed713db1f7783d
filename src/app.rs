//! Wiring: starts a sidecar's parts in order (the MCP servers, the first catalog snapshot, the
//! event publisher, the runner, the reloader) and serves the control API.
//!
//! Owns the order of startup and shutdown, the runner's settings derived from the
//! configuration, and the runtime directory it makes. It holds no logic of its own: reading the
//! sources belongs to [`sources`], reloading to [`reload`], the routes to [`api`](crate::api).
//! Nothing in the library imports this module (only `main`, tests and benchmarks do), so every
//! part it starts can be used alone.
//!
//! `serve` binds the control API's [`Listener`] and serves it ([`run`]).

mod serve;

pub use serve::{Listener, REQUESTS_GRACE, run};

use crate::api::AppState;
use crate::catalog::source::SourceError;
use crate::config::{Config, LimitRules, LimitsError, LimitsSource, SandboxMode, SandboxUser};
use crate::embed::{Embeddings, ModelError};
use crate::events::{DEFAULT_HOLD, Events, EventsConfig, EventsError, Observer};
use crate::mcp::{Hub, McpConfigError};
use crate::metrics::Metrics;
use crate::otel::{Otel, OtelError};
use crate::reload::{ReloadStatus, Reloader, WatchError};
use crate::render::Snapshot;
use crate::run::{
    Approvals, Backends, CallLimits, Limiter, Limits, McpCaller, Native, PythonError, Runner,
    RunnerConfig, SCRATCH_DIR, SandboxSettings, ScratchQuota, ShapesConfig, resolve_python,
};
use crate::sandbox;
use crate::session::{SessionConfig, Sessions};
use crate::sources::{self, SavedCatalog};
use crate::util::{private_dir, redact_urls};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// After the shutdown grace, how long the runs that were stopped get to give their results
/// (their processes are killed at once; this is their output read and their answer made).
pub const STOPPED_RUNS_WAIT: Duration = Duration::from_secs(2);
/// Name of the runtime directory made under the temp directory when `PTC_RUNTIME_DIR` is
/// unset (a random suffix follows).
pub const RUNTIME_DIR_PREFIX: &str = "ptc-sidecar";

/// Tool calls one run may make: enough for real batch work, a stop for a runaway loop.
pub const MAX_CALLS_PER_RUN: usize = 10_000;
/// Tool calls of one run in flight at once: bounds what one script can load onto backends.
pub const MAX_IN_FLIGHT_PER_RUN: usize = 64;
/// Open files of a child.
pub const CHILD_MAX_OPEN_FILES: u64 = 256;
/// CPU seconds a child gets beyond `PTC_TIMEOUT` before the kernel stops it.
pub const CHILD_CPU_GRACE_SECS: u64 = 5;

/// Why a sidecar did not start. Each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    McpConfig(#[from] McpConfigError),
    #[error(transparent)]
    Tools(sources::ToolFileError),
    #[error(transparent)]
    Events(#[from] EventsError),
    /// `PTC_PYTHON` is not a usable interpreter.
    #[error(transparent)]
    Python(#[from] PythonError),
    #[error("cannot make a runtime directory in {} (TMPDIR): {source}", .parent.display())]
    RuntimeDir {
        parent: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the runner: {0}")]
    Runner(#[source] std::io::Error),
    /// A session or artifact store cannot be opened (its error names the folder).
    #[error("{named_by}: {source}")]
    Sessions {
        /// The variable that places the store.
        named_by: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Reload(#[from] WatchError),
    #[error(transparent)]
    SearchModel(#[from] ModelError),
    #[error("PTC_TOOL_LIMITS: {0}")]
    Limits(#[from] LimitsError),
    #[error(transparent)]
    Otel(#[from] OtelError),
}

/// [`StartError::Tools`] for an error reading the sources of `config` and `saved` (startup,
/// and the `tools` command, which reads them alone).
pub fn tools_error(config: &Config, saved: &[SavedCatalog], source: SourceError) -> StartError {
    StartError::Tools(sources::named(config, saved, source))
}

/// The runner's settings from the configuration, with the resolved interpreter and the
/// runtime directory in use.
pub fn runner_config(config: &Config, python: PathBuf, runtime_dir: PathBuf) -> RunnerConfig {
    RunnerConfig {
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
            // No one file may pass the scratch quota (EFBIG); the watch sees the rest.
            file_size: config.scratch_max_mb << 20,
            open_files: CHILD_MAX_OPEN_FILES,
            processes: sandbox::DEFAULT_MAX_PROCESSES,
        },
        path_env: config.path_env.clone(),
        allow_subprocess: config.allow_subprocess,
        sandbox: SandboxSettings {
            mode: match config.sandbox {
                SandboxMode::Strict => sandbox::Mode::Strict,
                SandboxMode::BestEffort => sandbox::Mode::BestEffort,
                SandboxMode::Off => sandbox::Mode::Off,
            },
            user: match &config.sandbox_user {
                SandboxUser::Default => Some(sandbox::DEFAULT_USER.to_string()),
                SandboxUser::Name(name) => Some(name.clone()),
                SandboxUser::Uid(uid) => Some(uid.to_string()),
                SandboxUser::Sidecar => None,
            },
            user_is_default: config.sandbox_user == SandboxUser::Default,
            fallback_python: config.python_fallback.clone(),
            read_paths: config.sandbox_read_paths.clone(),
            uids: config.sandbox_uids,
            uids_is_default: config.sandbox_uids_is_default,
            subordinate: sandbox::subordinate::outcome(),
        },
        scratch_quota: ScratchQuota {
            max_bytes: config.scratch_max_mb << 20,
            max_files: config.scratch_max_files,
        },
        max_sessions: config.max_sessions,
        // An interpreter must not outlive its session's folder (removed after PTC_SESSION_TTL).
        session_idle_ttl: config.session_idle_ttl.min(config.session_ttl),
        shapes: ShapesConfig {
            learn: config.learn_shapes,
            agent: config.agent_id.clone(),
            state_dir: config.state_dir.clone(),
        },
    }
}

/// A directory this sidecar made, removed with everything in it when dropped.
struct OwnedDir(PathBuf);

impl Drop for OwnedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A started sidecar: its state, and the token that stops everything it started.
pub struct Sidecar {
    pub state: AppState,
    pub shutdown: CancellationToken,
    /// Sends a new snapshot (reload).
    pub snapshots: watch::Sender<Arc<Snapshot>>,
    /// The OTLP span exporter, with `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otel: Option<Arc<Otel>>,
    /// What of the runtime directory is this process's: all of it when we made it, else (a
    /// `PTC_RUNTIME_DIR`) its scratch directories' directory; dropped after the shutdown token
    /// is cancelled.
    _owned: Option<OwnedDir>,
}

impl Sidecar {
    /// Starts, in this order, the hub (the MCP servers), the first snapshot, the event
    /// publisher, with PTC on the runner (IPC bridge, warm pool) and its stores, and the
    /// events' observers (metrics, OTLP); builds the [`AppState`] of them and starts the
    /// reloader on it. A failure stops whatever had started.
    pub async fn start(config: Config, saved: &[SavedCatalog]) -> Result<Sidecar, StartError> {
        let shutdown = CancellationToken::new();
        // Cancels everything started so far if a later step fails.
        let started = shutdown.clone().drop_guard();
        let mcp = start_hub(&config, &shutdown).await?;
        let (snapshots, snapshot) = watch::channel(first_snapshot(&config, saved, mcp.as_ref())?);
        let events = start_events(&config, &shutdown)?;
        let backends = backends(&config, &events, &mcp)?;
        // A runtime's calls (POST /v1/tools/call) share the runs' approvals, limits and
        // servers, with PTC on or off.
        let limits = CallLimits {
            max_calls: MAX_CALLS_PER_RUN,
            max_in_flight: MAX_IN_FLIGHT_PER_RUN,
        };
        let native = Native::new(backends.clone(), snapshot.clone(), limits);
        let running = if config.enabled {
            start_runner(&config, &snapshot, backends, &shutdown).await?
        } else {
            Running::default()
        };
        let (metrics, otel) = observe_events(&config, &events, running.runner.as_ref())?;
        let state = AppState {
            config: Arc::new(config),
            snapshot,
            runner: running.runner,
            native,
            sessions: running.sessions,
            artifacts: running.artifacts,
            mcp,
            events,
            reload: Arc::new(std::sync::Mutex::new(ReloadStatus::default())),
            metrics,
            board: Default::default(),
        };
        start_reloader(&state, saved, &snapshots, &shutdown)?;
        started.disarm();
        Ok(Sidecar {
            state,
            shutdown,
            snapshots,
            otel,
            _owned: running.owned,
        })
    }
}

/// The MCP servers of `PTC_MCP_CONFIG`, each started (or failing) once, their states logged.
async fn start_hub(
    config: &Config,
    shutdown: &CancellationToken,
) -> Result<Option<Hub>, StartError> {
    let mcp = sources::start_mcp(config, shutdown.child_token()).await?;
    for line in mcp.iter().flat_map(Hub::status_lines) {
        tracing::info!("{line}");
    }
    Ok(mcp)
}

/// The first catalog snapshot (from the tool files, the saved catalogs and the hub's servers),
/// logged.
fn first_snapshot(
    config: &Config,
    saved: &[SavedCatalog],
    mcp: Option<&Hub>,
) -> Result<Arc<Snapshot>, StartError> {
    let snapshot = Arc::new(
        sources::first_snapshot(config, saved, mcp).map_err(|e| tools_error(config, saved, e))?,
    );
    sources::log_report(&snapshot);
    Ok(snapshot)
}

/// The event publisher (its Redis writer with `REDIS_URL`).
fn start_events(config: &Config, shutdown: &CancellationToken) -> Result<Events, StartError> {
    Ok(Events::start(
        EventsConfig {
            agent_id: config.agent_id.clone(),
            redis_url: config.redis_url.clone(),
            stream_maxlen: config.events_stream_maxlen,
            bodies: config.events_bodies,
            hold: DEFAULT_HOLD,
        },
        shutdown.child_token(),
    )?)
}

/// What starts with PTC on: the runner and the stores of its runs' files, in the runtime
/// directory (each `None` with PTC off).
#[derive(Default)]
struct Running {
    runner: Option<Runner>,
    sessions: Option<Sessions>,
    artifacts: Option<Sessions>,
    /// What of the runtime directory is this process's to remove.
    owned: Option<OwnedDir>,
}

/// What every tool call goes to, a run's or a runtime's: the MCP servers, the approvals
/// (`PTC_APPROVE_*`), the limits per tool (`PTC_TOOL_LIMITS`), the events.
fn backends(config: &Config, events: &Events, mcp: &Option<Hub>) -> Result<Backends, StartError> {
    let mut backends = Backends::new(config.tool_timeout);
    backends.events = events.clone();
    backends.mcp = mcp.clone().map(|hub| Arc::new(hub) as Arc<dyn McpCaller>);
    backends.approvals = Approvals::new(&config.control, events.clone());
    backends.limiter = Arc::new(Limiter::new(match &config.control.tool_limits {
        None => LimitRules::default(),
        Some(LimitsSource::Inline(rules)) => rules.clone(),
        Some(LimitsSource::File(path)) => LimitRules::read(path)?,
    }));
    Ok(backends)
}

/// The interpreter, the runtime directory, the runner on the first snapshot (its calls on
/// `backends`, with the search model), and the session and artifact stores with their
/// sweepers.
async fn start_runner(
    config: &Config,
    snapshot: &watch::Receiver<Arc<Snapshot>>,
    mut backends: Backends,
    shutdown: &CancellationToken,
) -> Result<Running, StartError> {
    let python = resolve_python(&config.python).await?;
    let (dir, owned) = runtime_dir(config)?;
    if let Some(model) = &config.search_model {
        let embeddings =
            Embeddings::load(model, config.state_dir.as_deref(), shutdown.child_token()).await?;
        embeddings.follow(snapshot.clone());
        backends.embeddings = Some(embeddings);
    }
    let rc = runner_config(config, python, dir.clone());
    let runner = Runner::start(rc, snapshot.clone(), backends, shutdown.child_token())
        .await
        .map_err(StartError::Runner)?;
    let sessions = Sessions::new(SessionConfig {
        root: config
            .session_dir
            .clone()
            .unwrap_or_else(|| dir.join("sessions")),
        ttl: config.session_ttl,
        max_bytes: config.session_max_mb << 20,
        max_files: config.session_max_files,
        owner: runner.run_user(),
        uids: runner
            .run_uids()
            .map(|u| u as Arc<dyn crate::session::SessionUids>),
        max_total_bytes: None,
    })
    .map_err(|source| StartError::Sessions {
        named_by: match config.session_dir {
            Some(_) => "PTC_SESSION_DIR",
            None => "PTC_RUNTIME_DIR (the sessions' folder in it; PTC_SESSION_DIR places them)",
        },
        source,
    })?;
    sessions.spawn_sweeper(shutdown.child_token());
    // The files of runs without a session: written by the sidecar only, never by a run. A
    // run's folder is bounded by what the run may keep (PTC_SCRATCH_MAX_MB, `run_files`) and
    // the store by PTC_ARTIFACT_MAX_MB, not by a session's quota.
    let artifacts = Sessions::new(SessionConfig {
        root: dir.join("artifacts"),
        ttl: config.artifact_ttl,
        max_bytes: u64::MAX,
        max_files: config.session_max_files,
        owner: None,
        uids: None,
        max_total_bytes: Some(config.artifact_max_mb << 20),
    })
    .map_err(|source| StartError::Sessions {
        named_by: "PTC_RUNTIME_DIR (the artifacts' folder in it)",
        source,
    })?;
    artifacts.spawn_sweeper(shutdown.child_token());
    Ok(Running {
        runner: Some(runner),
        sessions: Some(sessions),
        artifacts: Some(artifacts),
        owned: Some(owned),
    })
}

/// The runtime directory in use, and what of it is this process's to remove.
fn runtime_dir(config: &Config) -> Result<(PathBuf, OwnedDir), StartError> {
    match &config.runtime_dir {
        Some(dir) => {
            // The scratch directories are ours alone, and gone when we are: those an earlier
            // process left (killed, it could not remove them) go now, ours at the exit. A
            // child removes its own off the async workers, which a runtime shutting down no
            // longer does: at SIGTERM with 20 sessions' interpreters live, 19 or 20 of the 22
            // scratch directories (with the warm children's) stayed.
            let scratch = dir.join(SCRATCH_DIR);
            let _ = std::fs::remove_dir_all(&scratch);
            Ok((dir.clone(), OwnedDir(scratch)))
        }
        None => {
            let dir = private_dir(&config.temp_dir, RUNTIME_DIR_PREFIX).map_err(|source| {
                StartError::RuntimeDir {
                    parent: config.temp_dir.clone(),
                    source,
                }
            })?;
            Ok((dir.clone(), OwnedDir(dir)))
        }
    }
}

/// The metrics (always made, fed with `PTC_METRICS`) and the OTLP exporter (with
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) as the observers of every event.
fn observe_events(
    config: &Config,
    events: &Events,
    runner: Option<&Runner>,
) -> Result<(Metrics, Option<Arc<Otel>>), StartError> {
    let metrics = Metrics::new(&sandbox_labels(runner));
    let mut observers: Vec<Arc<dyn Observer>> = Vec::new();
    if config.metrics {
        observers.push(Arc::new(metrics.clone()));
    }
    let otel = match &config.otel_endpoint {
        Some(endpoint) => {
            let otel = Arc::new(Otel::start(endpoint, &config.otel_service)?);
            observers.push(otel.clone());
            tracing::info!(endpoint = %redact_urls(endpoint), "exporting spans over OTLP");
            Some(otel)
        }
        None => None,
    };
    events.observe_with(Arc::new(observers));
    Ok((metrics, otel))
}

/// The labels of `ptc_sandbox_info`: how the runner confines runs, or `ptc-off`.
fn sandbox_labels(runner: Option<&Runner>) -> Vec<(&'static str, String)> {
    match runner {
        Some(r) => {
            let s = r.sandbox_status();
            vec![
                ("mode", s.mode.as_str().to_string()),
                ("landlock", s.landlock.clone()),
                ("seccomp", s.seccomp.to_string()),
                ("uid", s.uid.clone()),
                ("namespaces", s.namespaces.join(",")),
                ("subprocess", s.subprocess.to_string()),
                ("missing", s.missing.len().to_string()),
            ]
        }
        None => vec![("mode", "ptc-off".to_string())],
    }
}

/// The reloader: watches the tool files and the hub, and sends each new snapshot on
/// `snapshots`; it writes its outcome to the state's `reload` and emits on its events.
fn start_reloader(
    state: &AppState,
    saved: &[SavedCatalog],
    snapshots: &watch::Sender<Arc<Snapshot>>,
    shutdown: &CancellationToken,
) -> Result<(), StartError> {
    Reloader {
        config: state.config.clone(),
        saved: saved.to_vec(),
        mcp: state.mcp.clone(),
        snapshots: snapshots.clone(),
        events: state.events.clone(),
        status: state.reload.clone(),
        // The runs' and the runtimes' calls share it.
        limiter: Some(state.native.limiter().clone()),
    }
    .spawn(shutdown.child_token())?;
    Ok(())
}

impl Sidecar {
    /// Writes the sessions' last uses to their records (what the sweeper had not written yet),
    /// sends the events still held to Redis (within [`events::FLUSH_AT_EXIT`]) and the spans
    /// still queued for OTLP (bounded by the exporter's own timeout), off the async workers:
    /// call it once serving has stopped and the shutdown token is cancelled.
    ///
    /// [`events::FLUSH_AT_EXIT`]: crate::events::FLUSH_AT_EXIT
    pub async fn flush(&self) {
        self.shutdown.cancel();
        for store in [&self.state.sessions, &self.state.artifacts] {
            if let Some(store) = store.clone() {
                let _ = tokio::task::spawn_blocking(move || store.record_uses()).await;
            }
        }
        self.state.events.written().await;
        if let Some(otel) = self.otel.clone() {
            let _ = tokio::task::spawn_blocking(move || otel.shutdown()).await;
        }
    }
}

/// The first half of a graceful shutdown (SIGTERM, SIGINT): the runner takes no new runs (the
/// control API answers 503 `shutting_down`, `/healthz` says `shutting_down`), the runs going
/// on get `grace` to finish, then those still going are stopped (their process groups killed)
/// and get [`STOPPED_RUNS_WAIT`] to give their results. The API keeps serving meanwhile: a
/// run's host tool results and continuations still arrive. `stop_now` ends the grace early
/// (a second signal). Then cancel the shutdown token: the server, MCP servers, fork servers
/// and warm children stop, and [`Sidecar::flush`] sends the last events.
pub async fn drain(state: &AppState, grace: Duration, stop_now: impl std::future::Future) {
    // A runtime's call waiting for a person is denied as a run's is (with PTC on, the runner's
    // close does the same on the same approvals).
    state
        .native
        .approvals()
        .close(crate::run::runner::SHUTTING_DOWN_APPROVAL);
    let Some(runner) = &state.runner else {
        return;
    };
    runner.close();
    let running = runner.running();
    tracing::info!(
        running,
        "shutting down: no new runs; the running ones get up to {} s (PTC_SHUTDOWN_GRACE)",
        grace.as_secs()
    );
    tokio::select! {
        _ = tokio::time::timeout(grace, runner.finished()) => {}
        _ = stop_now => {}
    }
    let left = runner.running();
    if left == 0 {
        return;
    }
    tracing::warn!(left, "stopping the runs still going");
    runner.stop_runs();
    if tokio::time::timeout(STOPPED_RUNS_WAIT, runner.finished())
        .await
        .is_err()
    {
        tracing::warn!(
            left = runner.running(),
            "runs still had no result {STOPPED_RUNS_WAIT:?} after they were stopped"
        );
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // Before the fields drop: children stop before their runtime directory goes.
        self.shutdown.cancel();
    }
}

/// A session holds a uid of the sandbox's range for its whole life: the session store asks
/// for one through its own trait (it imports nothing of the sandbox).
impl crate::session::SessionUids for sandbox::Uids {
    fn lease(&self) -> std::io::Result<u32> {
        self.take().map_err(std::io::Error::other)
    }

    fn hold(&self, uid: u32) -> bool {
        sandbox::Uids::hold(self, uid)
    }

    fn release(&self, uid: u32) {
        sandbox::Uids::release(self, uid)
    }
}
