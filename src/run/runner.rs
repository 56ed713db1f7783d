//! The runner: one `exec_code` run from code to result, and the start of everything runs need.
//!
//! Owns a run's lifecycle, one path for every run: a run slot, the catalog's preparation,
//! registering the run with the calls handle, the job, its [`Turn`] on an interpreter, the
//! deadline, its session held to its quota at its end (`scratch::hold_session`), the result and
//! the `exec.started` / `exec.finished` events. A run keeps the snapshot it started with. What
//! differs between a fresh run and a session run is the turn's (`turn`). It must not know how a
//! tool call is dispatched (`calls`), how a child is made (`pool`) or how output is read
//! (`output`).

mod hold;
mod start;

use super::bash;
use super::calls::{CallLimits, Calls, RunCtx};
use super::child::SpawnSpec;
use super::clock::RunClock;
use super::confine;
use super::cpu;
use super::dispatch::Backends;
use super::guards::{FinishGuard, Waiting};
use super::ipc;
use super::live::Interpreters;
use super::pool::{self, Pool};
use super::prepare::{Preparations, Prepared};
use super::request::{DataPath, ExecRequest, ExecResult, ExecStatus, Lang, RunnerConfig};
use super::scratch::{self, OverQuota};
use super::shapes::Shapes;
use super::turn::{Finished, Halt, STOPPED_MESSAGE, Turn, TurnRun};
use crate::events::Event;
use crate::render::Snapshot;
use crate::sandbox::{Mode, Sandbox, Status};
use crate::trace::SpanContext;
use crate::util::ms;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a run that asks to start after [`Runner::close`] is told (the control API answers 503
/// with [`ShuttingDown`] before it gets here; this is for any other way in).
pub const CLOSED_MESSAGE: &str =
    "ptc-sidecar is shutting down and takes no new runs; send the run to another instance";

/// Why a call waiting for a person (or asking for one) is denied once shutdown began.
pub const SHUTTING_DOWN_APPROVAL: &str =
    "the sidecar is shutting down, so no one can approve this call now; try again in a later run";

/// The runner takes no new runs: the sidecar is shutting down (SIGTERM or SIGINT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{CLOSED_MESSAGE}")]
pub struct ShuttingDown;

/// No run slot came within `PTC_TIMEOUT`, or the sidecar stopped first ([`Runner::slot`]): a
/// run's own message for it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoSlot(String);

/// Extra seconds the SDK waits for a `/call` answer beyond `PTC_TOOL_TIMEOUT`, so the sidecar's
/// own timeout (with its clear message) fires first.
pub const CALL_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// The directory of the runtime directory where every child's scratch directory is made.
pub const SCRATCH_DIR: &str = "runs";

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
    slots: Arc<Semaphore>,
    /// The IPC bridge's listeners: the loopback one, and each run's own.
    bridges: ipc::Bridges,
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
        let calls = Calls::new(backends, Shapes::load(cfg.shapes.clone()));
        let bridges = ipc::Bridges::new(calls.clone(), cfg.max_runs, shutdown.clone());
        tokio::spawn(bridges.clone().serve(listener));

        let confine::Confinement {
            sandbox,
            filters,
            python,
            own_tree,
        } = confine::setup(
            &cfg.sandbox,
            &cfg.python,
            cfg.allow_subprocess,
            &cfg.runtime_dir,
            ipc_addr.port(),
        )
        .await
        .map_err(std::io::Error::other)?;
        let mut cfg = cfg;
        cfg.python = python;
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
            own_tree: Arc::new(own_tree),
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
                slots: Arc::new(Semaphore::new(cfg.max_runs.max(1))),
                cfg,
                calls,
                preparations,
                pool,
                bridges,
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

    /// The uids runs and sessions each get one of (`PTC_SANDBOX_UIDS`), where they do.
    pub fn run_uids(&self) -> Option<Arc<crate::sandbox::Uids>> {
        self.inner.sandbox.uids().cloned()
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
        // A person will not answer in time: the runs going on get a denial they can handle.
        self.inner.calls.approvals().close(SHUTTING_DOWN_APPROVAL);
    }

    /// How `search_tools` ranks, for `/healthz`: BM25F alone, or with the search model.
    pub fn search_health(&self) -> serde_json::Value {
        match self.inner.calls.embeddings() {
            Some(embeddings) => embeddings.health(),
            None => serde_json::json!({"ranking": "bm25f"}),
        }
    }

    /// Whether `search_tools` ranks `snapshot`'s catalog with the search model now (always,
    /// without a model: BM25F is ready at once).
    pub fn search_ready(&self, snapshot: &Arc<Snapshot>) -> bool {
        self.inner
            .calls
            .embeddings()
            .is_none_or(|embeddings| embeddings.is_ready(snapshot))
    }

    /// The calls that wait for a person, for the doors that answer them.
    pub fn approvals(&self) -> &super::Approvals {
        self.inner.calls.approvals()
    }

    /// The limits per tool (`PTC_TOOL_LIMITS`), for a reload and the preview.
    pub fn limiter(&self) -> &Arc<super::Limiter> {
        self.inner.calls.limiter()
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

    /// One of the `max_runs` slots for work the sidecar does in a run's place (the JavaScript
    /// preview's reading of code, on a thread of its own): waited for as a run waits, within
    /// `PTC_TIMEOUT`, so that such work can never outnumber the runs and takes its turn among
    /// them, as the Python preview's analyzer run does.
    pub async fn slot(&self) -> Result<OwnedSemaphorePermit, NoSlot> {
        let timeout = self.inner.cfg.timeout;
        self.take_slot(tokio::time::Instant::now() + timeout, timeout)
            .await
            .map_err(|(_, why)| NoSlot(why))
    }

    /// Runs code to completion, timeout or error. Never panics on the code's behalf and leaves
    /// no process behind, even if this future is dropped. Reports `exec.started` and
    /// `exec.finished` (also when the future is dropped: `cancelled`).
    pub async fn exec(&self, req: ExecRequest) -> ExecResult {
        // Counted from here to its result, so that shutdown waits for its `exec.finished`.
        let _running = self.inner.runs.token();
        let id = format!("r{}", self.inner.counter.fetch_add(1, Ordering::Relaxed));
        if req.quiet {
            return self.exec_inner(req, &id, &SpanContext::for_run(None)).await;
        }
        let events = self.inner.calls.events();
        let span = SpanContext::for_run(req.traceparent.as_deref());
        let mut started = Event::new("exec.started");
        started.in_span(&span);
        started.exec_id = Some(id.clone());
        started.session_id = req.session.clone();
        started.for_user(req.user.as_deref());
        started.code_bytes = Some(req.code.len());
        if events.bodies() {
            started.code = Some(crate::events::excerpt(
                &req.code,
                crate::events::MAX_EVENT_EXCERPT,
            ));
        }
        events.emit(started);
        let (session, user) = (req.session.clone(), req.user.clone());
        let mut guard = FinishGuard {
            events,
            exec_id: &id,
            span: &span,
            session: session.as_deref(),
            user: user.as_deref(),
            started: Instant::now(),
            done: false,
        };
        let result = self.exec_inner(req, &id, &span).await;
        guard.finish(&result);
        result
    }

    /// One run, in the same steps whatever it runs on: admitted, a slot, its catalog prepared,
    /// registered (its token), its turn on an interpreter (a fresh child, or the session's live
    /// one: `turn`), waited for until it ends or is stopped, and its result.
    async fn exec_inner(&self, mut req: ExecRequest, id: &str, span: &SpanContext) -> ExecResult {
        let started = Instant::now();
        let cfg = &self.inner.cfg;
        let timeout = req.timeout.map_or(cfg.timeout, |t| t.min(cfg.timeout));
        let deadline = tokio::time::Instant::now() + timeout;
        let failed = |(status, stderr)| ExecResult::refused(started, status, stderr);
        if let Err(why) = self.admit(&req) {
            return failed(why);
        }
        // Shared with work done on other threads for the run (reading its JavaScript), which
        // holds the slot until it is done even if this run is dropped meanwhile.
        let slot = match self.take_slot(deadline, timeout).await {
            Ok(slot) => Arc::new(slot),
            Err(why) => return failed(why),
        };
        let (snapshot, prepared) = match self.prepare(req.snapshot.take(), deadline, timeout).await
        {
            Ok(p) => p,
            Err(why) => return failed(why),
        };
        let data = DataPath::of(req.workspace.as_ref());
        let code = data.into_code(std::mem::take(&mut req.code));
        let runs = match start::runs_of(req.lang, &snapshot.catalog, &code, slot.clone()).await {
            Ok(runs) => runs,
            Err(unreadable) => {
                let why = data.into_output(unreadable.to_string());
                let mut result = failed((ExecStatus::Error, why));
                // As node exits on a syntax error of its own.
                result.exit_code = Some(1);
                return result;
            }
        };
        let run = Arc::new(self.run_ctx(id, snapshot, prepared.clone(), &mut req, span, deadline));
        let registration = self.inner.calls.register(run.clone());

        let on = TurnRun {
            id,
            token: registration.token(),
            bridges: &self.inner.bridges,
            prepared: &prepared,
            deadline,
            timeout,
            workspace: req.workspace.as_ref(),
            reset: req.reset,
            output: req.output.clone(),
            files: req.files.as_ref(),
        };
        // Before any of the run's code runs: what its session held, to hold it to its quota at
        // the end.
        let before = match req.workspace.as_ref() {
            Some(workspace) => Some(hold::note_session(workspace).await),
            None => None,
        };
        let turn = self.turn(&req, on, &code, runs).await;
        let (finished, watched) = match turn {
            Ok(turn) => self.watch(turn, &req, &run.clock, timeout).await,
            Err(finished) => (finished, None),
        };
        drop(registration);
        let mut finished = finished;
        let mut quota = watched;
        if let (Some(workspace), Some(before)) = (req.workspace.as_ref(), before)
            && let Some(over) = self
                .hold_session(&req, workspace, before, &mut finished)
                .await
        {
            quota = Some(over);
        }
        let Finished {
            status,
            output,
            exit_code,
            session,
        } = finished;
        let mut files = run.saved();
        files.extend(output.files);
        if quota.as_ref().is_some_and(|q| q.removed) {
            // They were in the session, and went with what the run wrote.
            files.clear();
        }
        ExecResult {
            status,
            truncated: output.truncated,
            stdout: data.into_output(output.stdout),
            stderr: data.into_output(output.stderr),
            exit_code,
            duration_ms: ms(started.elapsed()),
            tool_calls: run.calls(),
            session,
            files,
            content: Vec::new(),
            quota: quota.map(Box::new),
        }
    }

    /// What the calls handle knows of the run while it lives: its catalog, its limits, whose
    /// it is, its clock, and who answers its calls (a request's host, a person's approval).
    fn run_ctx(
        &self,
        id: &str,
        snapshot: Arc<Snapshot>,
        prepared: Arc<Prepared>,
        req: &mut ExecRequest,
        span: &SpanContext,
        deadline: tokio::time::Instant,
    ) -> RunCtx {
        let cfg = &self.inner.cfg;
        let limits = CallLimits {
            max_calls: cfg.max_calls_per_run,
            max_in_flight: cfg.max_in_flight_per_run,
        };
        let mut run = RunCtx::new(id.to_string(), snapshot, prepared, req.host.take(), limits);
        run.session = req.session.clone();
        run.user = req.user.clone();
        run.files = req.files.clone();
        run.span = span.clone();
        run.clock = RunClock::new(deadline, self.inner.calls.approval_budget());
        run.asker = req.asker.take();
        run
    }

    /// The run's turn until it ends: its code's end, its deadline, its scratch (or session)
    /// past its quota, the CPU time of all its processes past their limit (`RLIMIT_CPU` counts
    /// one), a cancel or the shutdown; and what went past a quota, when something did.
    async fn watch(
        &self,
        mut turn: Turn,
        req: &ExecRequest,
        clock: &RunClock,
        timeout: Duration,
    ) -> (Finished, Option<OverQuota>) {
        let cfg = &self.inner.cfg;
        let mut watched = None;
        let scratch = scratch::watch_run(
            turn.child().scratch(),
            cfg.scratch_quota,
            req.workspace.as_ref().map(|w| (w.dir.as_path(), w.quota)),
        );
        let cpu = cpu::watch(turn.child().pid(), cfg.limits.cpu_secs);
        let quota = async {
            tokio::select! {
                over = scratch => {
                    let why = over.message.clone();
                    watched = Some(over);
                    why
                }
                why = cpu => why,
            }
        };
        let cancel = req.cancel.clone().unwrap_or_default();
        let stop = async {
            tokio::select! {
                _ = self.inner.stop.cancelled() => Halt::Shutdown,
                _ = cancel.cancelled() => Halt::Cancelled,
            }
        };
        let end = turn.until_end(clock, timeout, quota, stop).await;
        (turn.finish(end).await, watched)
    }

    /// Whether the run may start at all: the runner is open, and bash code fits one argument.
    fn admit(&self, req: &ExecRequest) -> Result<(), (ExecStatus, String)> {
        if self.inner.runs.is_closed() {
            return Err((ExecStatus::Error, CLOSED_MESSAGE.to_string()));
        }
        if req.lang == Lang::Bash && req.code.len() > bash::MAX_CODE_BYTES {
            return Err((
                ExecStatus::Error,
                format!(
                    "ptc-sidecar: bash code is limited to {} bytes (one argument of bash -c), \
                     this is {}; write long scripts to a file in a first run and run the file",
                    bash::MAX_CODE_BYTES,
                    req.code.len()
                ),
            ));
        }
        Ok(())
    }

    /// One of the `max_runs` slots, waited for within the deadline (and counted as queued
    /// meanwhile), unless the shutdown grace ends first.
    async fn take_slot(
        &self,
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<OwnedSemaphorePermit, (ExecStatus, String)> {
        let waiting = Waiting::on(&self.inner.queued);
        let slot = tokio::select! {
            slot = tokio::time::timeout_at(deadline, self.inner.slots.clone().acquire_owned()) => slot,
            _ = self.inner.stop.cancelled() => {
                return Err((ExecStatus::Error, format!("{STOPPED_MESSAGE}; it was waiting for a run slot")));
            }
        };
        drop(waiting);
        match slot {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err((
                ExecStatus::Timeout,
                format!(
                    "the run waited {:.1} s for one of the {} run slots and timed out before starting",
                    timeout.as_secs_f64(),
                    self.inner.cfg.max_runs
                ),
            )),
        }
    }

    /// The run's catalog and its prepared SDK: a request's own, or the sidecar's current one.
    async fn prepare(
        &self,
        own: Option<Arc<Snapshot>>,
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<(Arc<Snapshot>, Arc<Prepared>), (ExecStatus, String)> {
        let preparations = &self.inner.preparations;
        let prepared = async {
            match own {
                Some(s) => preparations.of(&s).await.map(|p| (s, p)),
                None => preparations.current().await,
            }
        };
        match tokio::time::timeout_at(deadline, prepared).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err((
                ExecStatus::Error,
                format!("ptc-sidecar could not prepare the SDK: {e}"),
            )),
            Err(_) => Err((
                ExecStatus::Timeout,
                format!(
                    "the run waited {:.1} s for its catalog's SDK to be prepared and timed out before starting",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }
}
