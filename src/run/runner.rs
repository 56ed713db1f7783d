//! The runner: one `exec_code` run from code to result, and the start of everything runs need.
//!
//! Owns a run's lifecycle: a run slot, the catalog's preparation, registering the run with the
//! calls handle, the job, the child from the pool, the deadline, the output and the
//! `exec.started` / `exec.finished` events. A run keeps the snapshot it started with. It must not
//! know how a tool call is dispatched (`calls`), how a child is made (`pool`) or how output is
//! read (`output`).

use super::bash;
use super::calls::new_token;
use super::calls::{CallLimits, CallRecord, Calls, RunCtx};
use super::child::{self, Limits, SpawnSpec};
use super::confine::{self, SandboxSettings};
use super::dispatch::{Backends, PendingCall};
use super::files::{Files, RunFile};
use super::ipc;
use super::live::{Interpreters, Live, Lost};
use super::output::{self, Capture, Captured, OutputChunk};
use super::pool::{self, Pool};
use super::prepare::{Preparations, Prepared};
use super::scratch::{self, ScratchQuota};
use super::shapes::Shapes;
use crate::events::{Event, Events};
use crate::render::Snapshot;
use crate::sandbox::{Mode, Sandbox, Status};
use crate::trace::SpanContext;
use crate::util::ms;
use serde::Serialize;
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a run that asks to start after [`Runner::close`] is told (the control API answers 503
/// with [`ShuttingDown`] before it gets here; this is for any other way in).
pub const CLOSED_MESSAGE: &str =
    "ptc-sidecar is shutting down and takes no new runs; send the run to another instance";

/// What a run stopped by [`Runner::stop_runs`] says on its stderr.
pub const STOPPED_MESSAGE: &str =
    "stopped: the sidecar is shutting down and the run did not finish within PTC_SHUTDOWN_GRACE";

/// The runner takes no new runs: the sidecar is shutting down (SIGTERM or SIGINT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{CLOSED_MESSAGE}")]
pub struct ShuttingDown;

/// Extra seconds the SDK waits for a `/call` answer beyond `PTC_TOOL_TIMEOUT`, so the sidecar's
/// own timeout (with its clear message) fires first.
pub const CALL_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// The directory of the runtime directory where every child's scratch directory is made.
pub const SCRATCH_DIR: &str = "runs";

/// Everything the runner needs, validated.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub python: PathBuf,
    /// Default and ceiling of one run (`PTC_TIMEOUT`).
    pub timeout: Duration,
    pub tool_timeout: Duration,
    pub max_output_bytes: usize,
    /// Where SDK directories and scratch directories go.
    pub runtime_dir: PathBuf,
    /// Pre-started interpreters kept ready; 0 starts every run cold.
    pub warm_workers: usize,
    /// Runs at once; more wait for a slot within their own deadline.
    pub max_runs: usize,
    /// Tool calls one run may make: a runaway loop stops with `limit`.
    pub max_calls_per_run: usize,
    /// Tool calls of one run in flight at once.
    pub max_in_flight_per_run: usize,
    pub limits: Limits,
    pub path_env: String,
    /// Let code start processes (off: seccomp refuses fork/exec; the SDK says why).
    pub allow_subprocess: bool,
    /// How runs are confined (docs/SECURITY.md).
    pub sandbox: SandboxSettings,
    /// What a run may keep in its scratch directory; a run past it is stopped.
    pub scratch_quota: ScratchQuota,
    /// Live session interpreters at once (`PTC_MAX_SESSIONS`); one more stops the least
    /// recently used.
    pub max_sessions: usize,
    /// A live session interpreter idle this long is stopped (`PTC_SESSION_IDLE_TTL`).
    pub session_idle_ttl: Duration,
    /// Where learned result shapes are kept across restarts (`PTC_STATE_DIR`); `None`: in
    /// memory only.
    pub state_dir: Option<PathBuf>,
}

/// The language of a run's code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lang {
    /// Python with the SDK: tools are async functions (the default).
    #[default]
    Python,
    /// Bash: tools are bash functions ([`bash`]); the code may start processes.
    Bash,
}

/// The path LibreChat's client tells the model its files are under. A run cannot have a
/// directory there of its own without a mount namespace, so the literal path in its code is
/// rewritten to its data directory, and the data directory's path in its output back to it.
pub const MODEL_DATA_DIR: &str = "/mnt/data";

/// A run's data directory: a session's files, there before the run and kept after it.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub dir: PathBuf,
    /// What the directory may hold; a run past it is stopped, as for its scratch quota.
    pub quota: ScratchQuota,
}

/// One request to run code.
#[derive(Debug, Default)]
pub struct ExecRequest {
    pub code: String,
    pub lang: Lang,
    /// The run's data directory, when it belongs to a session: its cwd, writable, and
    /// `LIBRECHAT_CODE_DATA_DIR`; `/mnt/data` in the code names it ([`MODEL_DATA_DIR`]).
    pub workspace: Option<Workspace>,
    /// The session the run belongs to (its events name it).
    pub session: Option<String>,
    /// Run Python code on the session's live interpreter (with a `session` and a
    /// `workspace`): the globals of its earlier runs are there ([`live`](super::live)).
    pub live: bool,
    /// Capped by `PTC_TIMEOUT`.
    pub timeout: Option<Duration>,
    /// Run against this catalog instead of the sidecar's current one (a protocol that sends its
    /// tools with each request). Prepared once per distinct content; such runs start cold.
    pub snapshot: Option<Arc<Snapshot>>,
    /// Where host tool calls go when the catalog has no callback (attached protocols).
    pub host: Option<mpsc::Sender<PendingCall>>,
    /// Receives output chunks as they come (attached protocol).
    pub output: Option<mpsc::UnboundedSender<OutputChunk>>,
    /// Where the run's files go (`save_file`, a cut stream's whole output); without it
    /// `save_file` says it is not available and a cut stream is only cut.
    pub files: Option<Files>,
    /// The caller's W3C `traceparent`: the run is a span of that trace (else of a new one).
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecStatus {
    Ok,
    Error,
    Timeout,
}

/// What a run gives back (DESIGN.md "Running code").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecResult {
    pub status: ExecStatus,
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
    pub tool_calls: Vec<CallRecord>,
    pub truncated: bool,
    /// A session run: what became of the state of the session's earlier runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionState>,
    /// Files the run made: in its session's workspace, saved with `save_file`, and the full
    /// output of a stream that was cut.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<RunFile>,
    /// Content blocks for the model beside the text: the images among `files` (filled by the
    /// API, which can read them back).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<serde_json::Value>,
}

/// What a session run says about the session's state (its globals).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionState {
    pub id: String,
    pub state: StateChange,
    /// Why the state is gone (`reset`: before this run; `ended`: with this run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Lost>,
    /// Runs of the current interpreter, this one included (1: a new interpreter).
    pub run: u64,
}

/// What became of a session's state with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StateChange {
    /// The session's first run: a new interpreter.
    New,
    /// The globals of the earlier runs were there.
    Kept,
    /// The earlier runs' state was gone before this run (`reason`); a new interpreter ran it.
    Reset,
    /// The run ended the interpreter (`reason`); the next run starts a new one.
    Ended,
}

/// A cloneable handle to the runner.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: RunnerConfig,
    calls: Calls,
    preparations: Arc<Preparations>,
    pool: Arc<Pool>,
    /// One permit per run at once (`max_runs`).
    slots: Semaphore,
    ipc_addr: SocketAddr,
    sandbox: Arc<Sandbox>,
    /// Numbers the runs (`r0`, `r1`, ...).
    counter: AtomicU64,
    /// The sessions' live interpreters.
    live: Interpreters,
    /// Runs waiting for a slot now.
    queued: std::sync::atomic::AtomicUsize,
    /// Every run from `exec` to its result: closed at shutdown, then waited for.
    runs: TaskTracker,
    /// Stops the runs still going when the shutdown grace is over.
    stop: CancellationToken,
}

impl Runner {
    /// Starts the IPC server on `127.0.0.1:0` and the warm pool; both stop with `shutdown`.
    pub async fn start(
        cfg: RunnerConfig,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        backends: Backends,
        shutdown: CancellationToken,
    ) -> std::io::Result<Runner> {
        std::fs::create_dir_all(&cfg.runtime_dir)?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let ipc_addr = listener.local_addr()?;
        let calls = Calls::new(backends, Shapes::load(cfg.state_dir.clone()));
        tokio::spawn(ipc::serve(listener, calls.clone(), shutdown.clone()));

        let (sandbox, filters) = confine::setup(
            &cfg.sandbox,
            &cfg.python,
            cfg.allow_subprocess,
            &cfg.runtime_dir,
            ipc_addr.port(),
        )
        .await
        .map_err(std::io::Error::other)?;
        if sandbox.status().missing.is_empty() || sandbox.status().mode == Mode::Off {
            tracing::info!("{}", sandbox.status());
        } else {
            tracing::warn!("{}", sandbox.status());
        }
        let spec = SpawnSpec {
            python: cfg.python.clone(),
            scratch_root: cfg.runtime_dir.join(SCRATCH_DIR),
            path_env: cfg.path_env.clone(),
            limits: cfg.limits,
            sandbox: Arc::new(sandbox),
            filters,
        };
        let sandbox = spec.sandbox.clone();
        let pool = Arc::new(Pool::new(spec, cfg.warm_workers));
        let preparations = Arc::new(Preparations::new(
            cfg.runtime_dir.clone(),
            cfg.python.clone(),
            snapshots.clone(),
        ));
        if cfg.warm_workers > 0 {
            tokio::spawn(pool::refill(
                Arc::downgrade(&pool),
                preparations.clone(),
                snapshots,
                shutdown.clone(),
            ));
        }
        let live = Interpreters::new(cfg.max_sessions, cfg.session_idle_ttl);
        tokio::spawn(live.clone().sweep(shutdown.clone()));
        let stopping = pool.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            stopping.clear();
        });
        Ok(Runner {
            inner: Arc::new(Inner {
                slots: Semaphore::new(cfg.max_runs.max(1)),
                cfg,
                calls,
                preparations,
                pool,
                ipc_addr,
                sandbox,
                counter: AtomicU64::new(0),
                live,
                queued: std::sync::atomic::AtomicUsize::new(0),
                runs: TaskTracker::new(),
                stop: CancellationToken::new(),
            }),
        })
    }

    pub fn ipc_addr(&self) -> SocketAddr {
        self.inner.ipc_addr
    }

    /// The uid and gid code runs as, when the sidecar switches users: whom the files it writes
    /// for runs (a session's) must belong to.
    pub fn run_user(&self) -> Option<(u32, u32)> {
        self.inner.sandbox.run_as().map(|u| (u.uid, u.gid))
    }

    /// What the sandbox applies to every run, and what it cannot (for `/healthz`).
    pub fn sandbox_status(&self) -> &Status {
        self.inner.sandbox.status()
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.inner.cfg
    }

    /// Number of live runs.
    pub fn live_runs(&self) -> usize {
        self.inner.calls.live_runs()
    }

    /// Runs waiting for one of the `max_runs` slots.
    pub fn queued_runs(&self) -> usize {
        self.inner.queued.load(Ordering::Relaxed)
    }

    /// Pre-started interpreters ready for a run.
    pub fn warm_workers(&self) -> usize {
        self.inner.pool.ready()
    }

    /// The sessions' live interpreters.
    pub fn sessions(&self) -> &Interpreters {
        &self.inner.live
    }

    /// Takes no new runs from now on (shutdown): `exec` answers with [`CLOSED_MESSAGE`] and
    /// [`Runner::check_open`] with [`ShuttingDown`]. Runs already started go on.
    pub fn close(&self) {
        self.inner.runs.close();
    }

    /// `Err(ShuttingDown)` once [`Runner::close`] was called: how the control API refuses a new
    /// run before it reads the request.
    pub fn check_open(&self) -> Result<(), ShuttingDown> {
        match self.inner.runs.is_closed() {
            true => Err(ShuttingDown),
            false => Ok(()),
        }
    }

    /// Runs started and not finished (each from `exec` to its result, waiting for a slot
    /// included).
    pub fn running(&self) -> usize {
        self.inner.runs.len()
    }

    /// Resolves once the runner is closed and every run has its result.
    pub async fn finished(&self) {
        self.inner.runs.wait().await;
    }

    /// Stops every run still going (its process group killed, status `error` with
    /// [`STOPPED_MESSAGE`]) and every one waiting for a slot: the shutdown grace is over.
    pub fn stop_runs(&self) {
        self.inner.stop.cancel();
    }

    /// Runs code to completion, timeout or error. Never panics on the code's behalf and leaves
    /// no process behind, even if this future is dropped. Reports `exec.started` and
    /// `exec.finished` (also when the future is dropped: `cancelled`).
    pub async fn exec(&self, req: ExecRequest) -> ExecResult {
        // Counted from here to its result, so that shutdown waits for its `exec.finished`.
        let _running = self.inner.runs.token();
        let id = format!("r{}", self.inner.counter.fetch_add(1, Ordering::Relaxed));
        let events = self.inner.calls.events();
        let span = SpanContext::for_run(req.traceparent.as_deref());
        let mut started = Event::new("exec.started");
        started.in_span(&span);
        started.exec_id = Some(id.clone());
        started.session_id = req.session.clone();
        started.code_bytes = Some(req.code.len());
        events.emit(started);
        let session = req.session.clone();
        let mut guard = FinishGuard {
            events,
            exec_id: &id,
            span: &span,
            session: session.as_deref(),
            started: Instant::now(),
            done: false,
        };
        let result = self.exec_inner(req, &id, &span).await;
        guard.finish(&result);
        result
    }

    async fn exec_inner(&self, req: ExecRequest, id: &str, span: &SpanContext) -> ExecResult {
        let started = Instant::now();
        let cfg = &self.inner.cfg;
        let timeout = req.timeout.map_or(cfg.timeout, |t| t.min(cfg.timeout));
        let deadline = tokio::time::Instant::now() + timeout;
        let fail = |status: ExecStatus, stderr: String| ExecResult {
            status,
            stdout: String::new(),
            stderr,
            exit_code: None,
            duration_ms: ms(started.elapsed()),
            tool_calls: Vec::new(),
            truncated: false,
            session: None,
            files: Vec::new(),
            content: Vec::new(),
        };

        if self.inner.runs.is_closed() {
            return fail(ExecStatus::Error, CLOSED_MESSAGE.to_string());
        }
        if req.lang == Lang::Bash && req.code.len() > bash::MAX_CODE_BYTES {
            return fail(
                ExecStatus::Error,
                format!(
                    "ptc-sidecar: bash code is limited to {} bytes (one argument of bash -c), \
                     this is {}; write long scripts to a file in a first run and run the file",
                    bash::MAX_CODE_BYTES,
                    req.code.len()
                ),
            );
        }
        let waiting = Waiting::on(&self.inner.queued);
        let stop = &self.inner.stop;
        let slot = tokio::select! {
            slot = tokio::time::timeout_at(deadline, self.inner.slots.acquire()) => slot,
            _ = stop.cancelled() => {
                return fail(ExecStatus::Error, format!("{STOPPED_MESSAGE}; it was waiting for a run slot"));
            }
        };
        drop(waiting);
        let Ok(Ok(_slot)) = slot else {
            return fail(
                ExecStatus::Timeout,
                format!(
                    "the run waited {:.1} s for one of the {} run slots and timed out before starting",
                    timeout.as_secs_f64(),
                    cfg.max_runs
                ),
            );
        };
        // The current catalog's runs may take warm children; a request's own catalog starts cold.
        let warm = req.snapshot.is_none();
        let preparations = &self.inner.preparations;
        let prepared = async {
            match req.snapshot {
                Some(s) => preparations.of(&s).await.map(|p| (s, p)),
                None => preparations.current().await,
            }
        };
        let (snapshot, prepared) = match tokio::time::timeout_at(deadline, prepared).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                return fail(
                    ExecStatus::Error,
                    format!("ptc-sidecar could not prepare the SDK: {e}"),
                );
            }
            Err(_) => {
                return fail(
                    ExecStatus::Timeout,
                    format!(
                        "the run waited {:.1} s for its catalog's SDK to be prepared and timed out before starting",
                        timeout.as_secs_f64()
                    ),
                );
            }
        };
        let functions = (req.lang == Lang::Bash).then(|| bash::functions(&snapshot.catalog));
        let workspace = req.workspace.as_ref();
        // The data directory's path, where the code says /mnt/data (a path that needs no
        // quoting in either language; any other is left alone, and so is the code).
        let data_path = workspace
            .map(|w| w.dir.to_string_lossy().into_owned())
            .filter(|p| {
                p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
            });
        let code = match &data_path {
            Some(path) => replace_path(&req.code, MODEL_DATA_DIR, path),
            None => req.code,
        };
        let limits = CallLimits {
            max_calls: cfg.max_calls_per_run,
            max_in_flight: cfg.max_in_flight_per_run,
        };
        let mut run = RunCtx::new(id.to_string(), snapshot, prepared.clone(), req.host, limits);
        run.session = req.session.clone();
        run.files = req.files.clone();
        run.span = span.clone();
        let run = Arc::new(run);
        let registration = self.inner.calls.register(run.clone());

        let mut job = json!({
            "code": code,
            "ipc": self.ipc_addr().to_string(),
            "token": registration.token(),
            "call_timeout": (cfg.tool_timeout + CALL_TIMEOUT_MARGIN).as_secs_f64(),
            "allow_subprocess": cfg.allow_subprocess,
        });
        let run_end = |status, output: Captured, exit_code, session| {
            // What the code printed names its data directory as the code did.
            let (stdout, stderr) = match &data_path {
                Some(path) => (
                    replace_path(&output.stdout, path, MODEL_DATA_DIR),
                    replace_path(&output.stderr, path, MODEL_DATA_DIR),
                ),
                None => (output.stdout, output.stderr),
            };
            let mut files = run.saved();
            files.extend(output.files);
            ExecResult {
                status,
                truncated: output.truncated,
                stdout,
                stderr,
                exit_code,
                duration_ms: ms(started.elapsed()),
                tool_calls: run.calls(),
                session,
                files,
                content: Vec::new(),
            }
        };
        if let (Lang::Python, true, Some(session), Some(workspace)) =
            (req.lang, req.live, req.session.as_deref(), workspace)
        {
            let nonce = new_token()[..32].to_string();
            job["session"] = json!(true);
            job["nonce"] = json!(nonce);
            let live = LiveRun {
                session,
                id,
                job: job.clone(),
                nonce: &nonce,
                deadline,
                timeout,
                workspace,
                output: req.output,
                files: req.files.clone(),
            };
            let (status, output, exit_code, state) = self.run_live(&prepared, live).await;
            drop(registration);
            return run_end(status, output, exit_code, Some(state));
        }
        let job = job.to_string();
        let pool = &self.inner.pool;
        let started_child = match functions {
            None => {
                let dir = workspace.map(|w| w.dir.as_path());
                pool.start(&prepared, warm, id, job.as_bytes(), dir).await
            }
            Some(functions) => {
                let mut program = bash::program(
                    &code,
                    &pool.scratch_of(id),
                    self.ipc_addr().port(),
                    registration.token(),
                );
                program.files = vec![(bash::FUNCTIONS_FILE.into(), functions)];
                // The current catalog's fork server, when there is a warm pool to keep it.
                let fork_from = match cfg.warm_workers {
                    0 => None,
                    _ => preparations.current().await.ok().map(|(_, p)| p),
                };
                let fork_from = fork_from.as_ref().unwrap_or(&prepared);
                let dir = workspace.map(|w| w.dir.as_path());
                pool.start_program(fork_from, id, &program, dir).await
            }
        };
        let mut child = match started_child {
            Ok(c) => c,
            Err(e) => {
                let program = match req.lang {
                    Lang::Python => cfg.python.display().to_string(),
                    Lang::Bash => bash::BASH.to_string(),
                };
                return fail(
                    ExecStatus::Error,
                    format!("ptc-sidecar could not start {program}: {e}"),
                );
            }
        };

        let capture = Capture::start(
            child.stdout.take(),
            child.stderr.take(),
            cfg.max_output_bytes,
            req.output,
            output::spills(req.files.as_ref(), id),
        );
        let quota = self.quota(child.scratch(), workspace);
        // How the run ended, and why the sidecar stopped it if it did.
        let (status, exit_code, stopped) = tokio::select! {
            waited = tokio::time::timeout_at(deadline, child.wait()) => match waited {
                Ok(Ok(code)) => (
                    if code == 0 {
                        ExecStatus::Ok
                    } else {
                        ExecStatus::Error
                    },
                    Some(code),
                    None,
                ),
                Ok(Err(e)) => {
                    capture.note(&format!("ptc-sidecar lost track of the child: {e}"));
                    (ExecStatus::Error, None, None)
                }
                Err(_) => (
                    ExecStatus::Timeout,
                    None,
                    Some(format!("stopped after {:.1} s (timeout)", timeout.as_secs_f64())),
                ),
            },
            why = quota => (ExecStatus::Error, None, Some(format!("stopped: {why}"))),
            _ = stop.cancelled() => (ExecStatus::Error, None, Some(STOPPED_MESSAGE.into())),
        };
        if let Some(why) = stopped {
            child.kill_group();
            let _ = child.wait().await;
            capture.note(&format!("ptc-sidecar: {why}"));
        } else if let Some(why) = exit_code.and_then(child::killed_by) {
            capture.note(&format!("ptc-sidecar: {why}"));
        }
        // Anything the code left running dies with the run.
        child.kill_group();
        let output = capture.finish().await;
        drop(child);
        drop(registration);
        run_end(status, output, exit_code, None)
    }

    /// Resolves when the run's scratch directory, or its workspace, goes past its quota; with
    /// the reason.
    fn quota(
        &self,
        scratch: &Path,
        workspace: Option<&Workspace>,
    ) -> impl std::future::Future<Output = String> + use<> {
        let scratch_quota = scratch::watch(scratch.to_path_buf(), self.inner.cfg.scratch_quota);
        let workspace = workspace.map(|w| (w.dir.clone(), w.quota));
        async move {
            match workspace {
                None => scratch_quota.await,
                Some((dir, quota)) => tokio::select! {
                    why = scratch_quota => why,
                    why = scratch::watch_as(dir, quota, &scratch::SESSION) => why,
                },
            }
        }
    }

    /// One run on a session's live interpreter: the one it has, else a new one (and then why
    /// the state of the earlier runs is gone). The interpreter is kept, stopped, when the run
    /// ends by itself, and ends with the run otherwise.
    async fn run_live(
        &self,
        prepared: &Arc<Prepared>,
        run: LiveRun<'_>,
    ) -> (ExecStatus, Captured, Option<i32>, SessionState) {
        let cfg = &self.inner.cfg;
        let interpreters = &self.inner.live;
        let no_output = Captured::default;
        let state = |change, reason, runs| SessionState {
            id: run.session.to_string(),
            state: change,
            reason,
            run: runs,
        };
        let slot = interpreters.slot(run.session);
        let Ok(mut held) = tokio::time::timeout_at(run.deadline, slot.live.lock()).await else {
            let mut out = no_output();
            out.stderr = format!(
                "the run waited {:.1} s for session {}'s previous run to end and timed out \
                 before starting; run one at a time per session",
                run.timeout.as_secs_f64(),
                run.session
            );
            return (
                ExecStatus::Timeout,
                out,
                None,
                state(StateChange::Kept, None, 0),
            );
        };
        slot.begin();
        // The state of earlier runs: kept, or gone and why.
        let mut lost = slot.take_lost();
        let mut job = run.job;
        if let Some(live) = held.as_mut() {
            if live.child.has_exited() {
                lost = Some(Lost::Crashed);
                *held = None;
            } else if live.key != prepared.key {
                // A reload since the session's last run: the interpreter gets the new tool
                // functions with this job and keeps its state.
                match catalog_of(prepared).await {
                    Ok(catalog) => {
                        job["catalog"] = catalog;
                        live.key = prepared.key;
                    }
                    Err(e) => {
                        tracing::warn!(session = run.session, "cannot read the new catalog: {e}");
                        lost = Some(Lost::CatalogChanged);
                        *held = None;
                    }
                }
            }
        }
        let change = match (&*held, lost) {
            (Some(_), _) => StateChange::Kept,
            (None, Some(_)) => StateChange::Reset,
            (None, None) => StateChange::New,
        };
        if held.is_none() {
            interpreters.make_room(run.session);
            let started = async {
                let child = self
                    .inner
                    .pool
                    .start_live(prepared, run.id, &run.workspace.dir)
                    .await?;
                Live::new(child, prepared.key)
            };
            match started.await {
                Ok(live) => {
                    slot.started(live.child.pid());
                    *held = Some(live);
                }
                Err(e) => {
                    slot.end(lost);
                    let mut out = no_output();
                    out.stderr =
                        format!("ptc-sidecar could not start {}: {e}", cfg.python.display());
                    return (ExecStatus::Error, out, None, state(change, lost, 0));
                }
            }
        }
        let Some(live) = held.as_mut() else {
            unreachable!("an interpreter was found or started above");
        };
        let runs = slot.runs() + 1;
        live.child.resume();
        if let Err(e) = live.child.extend_cpu(cfg.limits.cpu_secs) {
            tracing::debug!(session = run.session, "cannot extend the CPU limit: {e}");
        }
        let spills = output::spills(run.files.as_ref(), run.id);
        live.output
            .begin(run.nonce, cfg.max_output_bytes, run.output, spills);
        if let (StateChange::Reset, Some(why)) = (change, lost) {
            live.output.note(&format!(
                "ptc-sidecar: state was reset: {}; the session's files are kept",
                why.explain(interpreters.max, interpreters.idle_ttl)
            ));
        }
        let sent = live.send(&job.to_string()).await;
        let quota = self.quota(live.child.scratch(), Some(run.workspace));
        let Live { child, output, .. } = live;
        // How the run ended: by itself (its exit code), or the interpreter with it, and why.
        let exited = |code: Option<i32>| {
            let why = code.and_then(child::killed_by);
            (
                Lost::Crashed,
                code,
                why.unwrap_or_else(|| "the interpreter exited".into()),
            )
        };
        let ended: Result<i32, (Lost, Option<i32>, String)> = if let Err(e) = sent {
            Err((
                Lost::Crashed,
                None,
                format!("the interpreter is gone ({e})"),
            ))
        } else {
            tokio::select! {
                code = output.ended() => match code {
                    Some(code) => Ok(code),
                    None => Err(exited(child.wait().await.ok())),
                },
                waited = child.wait() => Err(exited(waited.ok())),
                _ = tokio::time::sleep_until(run.deadline) => Err((
                    Lost::Timeout,
                    None,
                    format!("stopped after {:.1} s (timeout)", run.timeout.as_secs_f64()),
                )),
                why = quota => Err((Lost::Quota, None, format!("stopped: {why}"))),
                _ = self.inner.stop.cancelled() => Err((Lost::Crashed, None, STOPPED_MESSAGE.into())),
            }
        };
        match ended {
            Ok(code) => {
                let captured = output.finish(false).await;
                child.pause();
                slot.end(None);
                let status = if code == 0 {
                    ExecStatus::Ok
                } else {
                    ExecStatus::Error
                };
                (status, captured, Some(code), state(change, lost, runs))
            }
            Err((why, exit_code, what)) => {
                child.kill_group();
                output.note(&format!(
                    "ptc-sidecar: {what}; the session's state ended with it (the next run \
                     starts a new interpreter); its files are kept"
                ));
                let captured = output.finish(true).await;
                *held = None;
                slot.end(Some(why));
                let status = match why {
                    Lost::Timeout => ExecStatus::Timeout,
                    _ => ExecStatus::Error,
                };
                (
                    status,
                    captured,
                    exit_code,
                    state(StateChange::Ended, Some(why), runs),
                )
            }
        }
    }
}

/// The tools of a prepared catalog, as its `catalog.json` holds them (for a live interpreter
/// that loaded an older one).
async fn catalog_of(prepared: &Prepared) -> std::io::Result<serde_json::Value> {
    let text = tokio::fs::read(prepared.sdk_dir.join("catalog.json")).await?;
    serde_json::from_slice(&text).map_err(std::io::Error::other)
}

/// Counts a run waiting for a slot for as long as it lives (also when the run's future is
/// dropped while it waits).
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn on(queued: &'a std::sync::atomic::AtomicUsize) -> Waiting<'a> {
        queued.fetch_add(1, Ordering::Relaxed);
        Waiting(queued)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What [`Runner::run_live`] needs of a run.
struct LiveRun<'a> {
    session: &'a str,
    id: &'a str,
    job: serde_json::Value,
    nonce: &'a str,
    deadline: tokio::time::Instant,
    timeout: Duration,
    workspace: &'a Workspace,
    output: Option<mpsc::UnboundedSender<OutputChunk>>,
    files: Option<Files>,
}

/// `text` with every `from` that is a whole path (not followed by a character a file name
/// continues with: `/mnt/data/x` and `"/mnt/data"` are, `/mnt/database` is not) as `to`.
fn replace_path(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        let whole = !after
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        out.push_str(&rest[..at]);
        out.push_str(if whole { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Reports `exec.finished` once: with the result, or as `cancelled` when the run's future is
/// dropped before it has one (a client that went away).
struct FinishGuard<'a> {
    events: &'a Events,
    exec_id: &'a str,
    span: &'a SpanContext,
    session: Option<&'a str>,
    started: Instant,
    done: bool,
}

impl FinishGuard<'_> {
    fn finish(&mut self, result: &ExecResult) {
        self.done = true;
        let mut e = Event::new("exec.finished");
        e.exec_id = Some(self.exec_id.to_string());
        e.in_span(self.span);
        e.session_id = self.session.map(str::to_string);
        e.status = Some(match result.status {
            ExecStatus::Ok => "ok",
            ExecStatus::Error => "error",
            ExecStatus::Timeout => "timeout",
        });
        e.ok = Some(result.status == ExecStatus::Ok);
        e.exit_code = result.exit_code;
        e.duration_ms = Some(result.duration_ms);
        e.stdout_bytes = Some(result.stdout.len());
        e.stderr_bytes = Some(result.stderr.len());
        e.tool_calls = Some(result.tool_calls.len());
        self.events.emit(e);
    }
}

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut e = Event::new("exec.finished");
            e.exec_id = Some(self.exec_id.to_string());
            e.in_span(self.span);
            e.session_id = self.session.map(str::to_string);
            e.session_id = self.session.map(str::to_string);
            e.status = Some("error");
            e.ok = Some(false);
            e.duration_ms = Some(ms(self.started.elapsed()));
            e.error = Some(
                serde_json::json!({"type": "cancelled", "message": "the caller went away before the run finished"}),
            );
            self.events.emit(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_whole_paths_are_replaced() {
        let code =
            "open('/mnt/data/a.csv'); cd /mnt/data; ls /mnt/database /mnt/data_x \"/mnt/data\"";
        assert_eq!(
            replace_path(code, "/mnt/data", "/run/s1"),
            "open('/run/s1/a.csv'); cd /run/s1; ls /mnt/database /mnt/data_x \"/run/s1\""
        );
        assert_eq!(replace_path("none here", "/mnt/data", "/x"), "none here");
    }
}
