//! The runner: one `exec_code` run from code to result.
//!
//! Owns the live runs (each with its random bearer token, valid only while the run lives), the
//! warm pool of pre-started interpreters, and the per-snapshot preparation (the SDK directory,
//! the argument validators). A run keeps the snapshot it started with.

use super::child::{self, Child, Limits, SpawnSpec};
use super::dispatch::{self, Backends, CallError, PendingCall, Validators};
use super::output::CappedBuffer;
use super::sdk;
use super::zygote::Zygote;
use crate::catalog::Origin;
use crate::events::{Event, Events};
use crate::render::Snapshot;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;

/// How long a child's pipes may stay open after it exited (a grandchild holding them) before
/// the run stops reading: a run must not hang on a stray process.
pub const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// Extra seconds the SDK waits for a `/call` answer beyond `PTC_TOOL_TIMEOUT`, so the sidecar's
/// own timeout (with its clear message) fires first.
pub const CALL_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// Read size for a child's pipes.
const PIPE_CHUNK: usize = 64 * 1024;

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
    /// Let code start processes (off: the SDK refuses fork/exec/spawn).
    pub allow_subprocess: bool,
}

/// One request to run code.
#[derive(Debug, Default)]
pub struct ExecRequest {
    pub code: String,
    /// Capped by `PTC_TIMEOUT`.
    pub timeout: Option<Duration>,
    pub session_id: Option<String>,
    /// Run against this catalog instead of the sidecar's current one (a protocol that sends its
    /// tools with each request). Prepared once per distinct content; such runs start cold.
    pub snapshot: Option<Arc<Snapshot>>,
    /// Where host tool calls go when the catalog has no callback (attached protocols).
    pub host: Option<mpsc::Sender<PendingCall>>,
    /// Receives output chunks as they come (attached protocol).
    pub output: Option<mpsc::UnboundedSender<OutputChunk>>,
}

/// A piece of a run's output, as it is printed.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputChunk {
    Stdout(String),
    Stderr(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecStatus {
    Ok,
    Error,
    Timeout,
}

/// One tool call of a run, as the result lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub id: String,
    pub tool: String,
    pub ok: bool,
    pub duration_ms: f64,
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
}

/// What is derived once per catalog snapshot for running code against it.
pub struct Prepared {
    pub snapshot: Arc<Snapshot>,
    pub sdk_dir: PathBuf,
    pub validators: Validators,
}

/// A live run, reachable by its token from the IPC server.
pub struct RunCtx {
    pub id: String,
    pub prepared: Arc<Prepared>,
    host: Option<mpsc::Sender<PendingCall>>,
    calls: Mutex<Vec<CallRecord>>,
    started_calls: AtomicUsize,
    in_flight: Semaphore,
    max_calls: usize,
}

impl RunCtx {
    pub fn calls(&self) -> Vec<CallRecord> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The fork server of the current snapshot, keyed by it, and when starting one last failed.
#[derive(Default)]
struct ZygoteSlot {
    current: Option<(u64, Arc<Zygote>)>,
    failed_at: Option<Instant>,
}

/// A per-request catalog's identity: (fingerprint, version).
type AdhocKey = (u64, u64);

/// A cloneable handle to the runner.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: RunnerConfig,
    spawn: SpawnSpec,
    backends: Backends,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    prepared: Mutex<Option<Arc<Prepared>>>,
    runs: Mutex<HashMap<String, Arc<RunCtx>>>,
    slots: Semaphore,
    pool: Mutex<VecDeque<(u64, Child)>>,
    refill: Arc<Notify>,
    /// The fork server of the current snapshot (with a warm pool only), and when one last failed.
    zygote: Mutex<ZygoteSlot>,
    /// Preparations of per-request snapshots, oldest first.
    adhoc: Mutex<VecDeque<(AdhocKey, Arc<Prepared>)>>,
    ipc_addr: Mutex<Option<SocketAddr>>,
    counter: AtomicU64,
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
        let spawn = SpawnSpec {
            python: cfg.python.clone(),
            scratch_root: cfg.runtime_dir.join("runs"),
            path_env: cfg.path_env.clone(),
            limits: cfg.limits,
        };
        let inner = Arc::new(Inner {
            slots: Semaphore::new(cfg.max_runs.max(1)),
            cfg,
            spawn,
            backends,
            snapshots,
            prepared: Mutex::new(None),
            runs: Mutex::new(HashMap::new()),
            pool: Mutex::new(VecDeque::new()),
            refill: Arc::new(Notify::new()),
            zygote: Mutex::new(ZygoteSlot::default()),
            adhoc: Mutex::new(VecDeque::new()),
            ipc_addr: Mutex::new(None),
            counter: AtomicU64::new(0),
        });
        let runner = Runner { inner };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        *runner
            .inner
            .ipc_addr
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(listener.local_addr()?);
        tokio::spawn(super::ipc::serve(
            listener,
            runner.clone(),
            shutdown.clone(),
        ));
        if runner.inner.cfg.warm_workers > 0 {
            tokio::spawn(refill_loop(Arc::downgrade(&runner.inner), shutdown.clone()));
        }
        let inner = runner.inner.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            inner.pool.lock().unwrap_or_else(|p| p.into_inner()).clear();
            inner
                .zygote
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .current = None;
        });
        Ok(runner)
    }

    pub fn ipc_addr(&self) -> SocketAddr {
        self.inner
            .ipc_addr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.inner.cfg
    }

    /// The live run a token belongs to.
    pub fn run_for_token(&self, token: &str) -> Option<Arc<RunCtx>> {
        self.inner
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned()
    }

    /// Number of live runs.
    pub fn live_runs(&self) -> usize {
        self.inner
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// One tool call of a run: limits, lookup, argument check, backend.
    pub async fn call(&self, run: &RunCtx, tool: &str, args: Value) -> Result<Value, CallError> {
        let n = run.started_calls.fetch_add(1, Ordering::Relaxed);
        if n >= run.max_calls {
            return Err(CallError::Limit(format!(
                "this run already made {} tool calls, its limit; batch the work into fewer calls",
                run.max_calls
            )));
        }
        let id = format!("{}-{n}", run.id);
        let events = &self.inner.backends.events;
        let catalog = &run.prepared.snapshot.catalog;
        let found = match dispatch::lookup(catalog, tool)
            .and_then(|t| dispatch::check_args(&run.prepared.validators, t, &args).map(|()| t))
        {
            Ok(found) => found,
            Err(e) => {
                // Refused before dispatch: one event says what the code tried.
                let mut refused = Event::new("tool_call.finished");
                refused.exec_id = Some(run.id.clone());
                refused.call_id = Some(id);
                refused.tool = Some(tool.to_string());
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
        let mut started_event = Event::new("tool_call.started");
        started_event.exec_id = Some(run.id.clone());
        started_event.call_id = Some(id.clone());
        started_event.tool = Some(found.name.clone());
        started_event.source = Some(source);
        started_event.args_bytes = Some(json_len(&args));
        if events.bodies() {
            started_event.args = Some(args.clone());
        }
        events.emit(started_event);

        let started = Instant::now();
        let _permit = run
            .in_flight
            .acquire()
            .await
            .map_err(|_| CallError::Unavailable("the run is over".into()))?;
        let result = dispatch::route(
            &self.inner.backends,
            catalog,
            run.host.as_ref(),
            &id,
            found,
            args,
        )
        .await;
        let duration_ms = ms(started.elapsed());

        let mut finished = Event::new("tool_call.finished");
        finished.exec_id = Some(run.id.clone());
        finished.call_id = Some(id.clone());
        finished.tool = Some(found.name.clone());
        finished.source = Some(source);
        finished.ok = Some(result.is_ok());
        finished.duration_ms = Some(duration_ms);
        match &result {
            Ok(value) => {
                finished.result_bytes = Some(json_len(value));
                if events.bodies() {
                    finished.result = Some(value.clone());
                }
            }
            Err(e) => finished.error = Some(e.to_json()),
        }
        events.emit(finished);

        run.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(CallRecord {
                id,
                tool: found.name.clone(),
                ok: result.is_ok(),
                duration_ms,
            });
        result
    }

    /// Runs code to completion, timeout or error. Never panics on the code's behalf and leaves
    /// no process behind, even if this future is dropped. Reports `exec.started` and
    /// `exec.finished` (also when the future is dropped: `cancelled`).
    pub async fn exec(&self, req: ExecRequest) -> ExecResult {
        let id = format!("r{}", self.inner.counter.fetch_add(1, Ordering::Relaxed));
        let events = &self.inner.backends.events;
        let mut started = Event::new("exec.started");
        started.exec_id = Some(id.clone());
        started.code_bytes = Some(req.code.len());
        events.emit(started);
        let mut guard = FinishGuard {
            events,
            exec_id: &id,
            started: Instant::now(),
            done: false,
        };
        let result = self.exec_inner(req, &id).await;
        guard.finish(&result);
        result
    }

    async fn exec_inner(&self, req: ExecRequest, id: &str) -> ExecResult {
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
        };

        let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline, self.inner.slots.acquire()).await
        else {
            return fail(
                ExecStatus::Timeout,
                format!(
                    "the run waited {:.1} s for one of the {} run slots and timed out before starting",
                    timeout.as_secs_f64(),
                    cfg.max_runs
                ),
            );
        };
        let prepared = match req
            .snapshot
            .as_ref()
            .map_or_else(|| self.inner.prepared(), |s| self.inner.prepared_for(s))
        {
            Ok(p) => p,
            Err(e) => {
                return fail(
                    ExecStatus::Error,
                    format!("ptc-sidecar could not prepare the SDK: {e}"),
                );
            }
        };
        let id = id.to_string();
        let token = new_token();
        let ctx = Arc::new(RunCtx {
            id: id.clone(),
            prepared: prepared.clone(),
            host: req.host,
            calls: Mutex::new(Vec::new()),
            started_calls: AtomicUsize::new(0),
            in_flight: Semaphore::new(cfg.max_in_flight_per_run.max(1)),
            max_calls: cfg.max_calls_per_run,
        });
        let _registered = Registered::new(&self.inner, token.clone(), ctx.clone());

        let job = json!({
            "code": req.code,
            "ipc": self.ipc_addr().to_string(),
            "token": token,
            "call_timeout": (cfg.tool_timeout + CALL_TIMEOUT_MARGIN).as_secs_f64(),
            "allow_subprocess": cfg.allow_subprocess,
        })
        .to_string();
        let mut child = match self.inner.start_child(&prepared, &id, job.as_bytes()).await {
            Ok(c) => c,
            Err(e) => {
                return fail(
                    ExecStatus::Error,
                    format!("ptc-sidecar could not start {}: {e}", cfg.python.display()),
                );
            }
        };

        let stdout = Arc::new(Mutex::new(CappedBuffer::new(cfg.max_output_bytes)));
        let stderr = Arc::new(Mutex::new(CappedBuffer::new(cfg.max_output_bytes)));
        let out_task = child.stdout.take().map(|pipe| {
            tokio::spawn(drain(
                pipe,
                stdout.clone(),
                req.output.clone(),
                OutputChunk::Stdout,
            ))
        });
        let err_task = child.stderr.take().map(|pipe| {
            tokio::spawn(drain(
                pipe,
                stderr.clone(),
                req.output.clone(),
                OutputChunk::Stderr,
            ))
        });

        let (status, exit_code) = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(code)) => (
                if code == 0 {
                    ExecStatus::Ok
                } else {
                    ExecStatus::Error
                },
                Some(code),
            ),
            Ok(Err(e)) => {
                stderr_note(
                    &stderr,
                    &format!("ptc-sidecar lost track of the child: {e}"),
                );
                (ExecStatus::Error, None)
            }
            Err(_) => {
                child.kill_group();
                let _ = child.wait().await;
                stderr_note(
                    &stderr,
                    &format!(
                        "ptc-sidecar: stopped after {:.1} s (timeout)",
                        timeout.as_secs_f64()
                    ),
                );
                (ExecStatus::Timeout, None)
            }
        };
        // Anything the code left running dies with the run.
        child.kill_group();
        for task in [out_task, err_task].into_iter().flatten() {
            let abort = task.abort_handle();
            if tokio::time::timeout(DRAIN_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        drop(child);

        let (stdout, stderr) = (
            stdout.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            stderr.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        );
        ExecResult {
            status,
            truncated: stdout.truncated() || stderr.truncated(),
            stdout: stdout.text(),
            stderr: stderr.text(),
            exit_code,
            duration_ms: ms(started.elapsed()),
            tool_calls: ctx.calls(),
        }
    }
}

impl Inner {
    /// The preparation of a request's own snapshot, cached by content (bounded).
    fn prepared_for(&self, snapshot: &Arc<Snapshot>) -> std::io::Result<Arc<Prepared>> {
        /// Distinct per-request catalogs kept prepared; the oldest is dropped past this.
        const MAX_ADHOC: usize = 32;
        let key = (snapshot.catalog.fingerprint, snapshot.catalog.version);
        let mut cache = self.adhoc.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = cache.iter().position(|(k, _)| *k == key)
            && let Some((k, p)) = cache.remove(i)
        {
            cache.push_back((k, p.clone()));
            return Ok(p);
        }
        let sdk_dir = sdk::write(&self.cfg.runtime_dir, snapshot, &self.cfg.python)?;
        let prepared = Arc::new(Prepared {
            snapshot: snapshot.clone(),
            sdk_dir,
            validators: Validators::default(),
        });
        cache.push_back((key, prepared.clone()));
        if cache.len() > MAX_ADHOC
            && let Some((_, old)) = cache.pop_front()
        {
            let _ = std::fs::remove_dir_all(&old.sdk_dir);
        }
        Ok(prepared)
    }

    /// The preparation of the current snapshot, made when the snapshot changed.
    fn prepared(&self) -> std::io::Result<Arc<Prepared>> {
        let snapshot = self.snapshots.borrow().clone();
        let mut slot = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = slot.as_ref()
            && Arc::ptr_eq(&p.snapshot, &snapshot)
        {
            return Ok(p.clone());
        }
        let sdk_dir = sdk::write(&self.cfg.runtime_dir, &snapshot, &self.cfg.python)?;
        let prepared = Arc::new(Prepared {
            snapshot,
            sdk_dir,
            validators: Validators::default(),
        });
        *slot = Some(prepared.clone());
        // Warm children of the old snapshot would run the old SDK: drop them.
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.refill.notify_one();
        Ok(prepared)
    }

    /// A warm child of this snapshot when one is ready, else a cold one; the job written and
    /// stdin closed.
    async fn start_child(
        &self,
        prepared: &Arc<Prepared>,
        id: &str,
        job: &[u8],
    ) -> std::io::Result<Child> {
        let is_current = self
            .prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, prepared));
        if !is_current {
            // A per-request catalog: the warm pool and the fork server belong to the current one.
            let mut c = child::spawn(&self.spawn, &prepared.sdk_dir, id)?;
            write_job(&mut c, job).await?;
            return Ok(c);
        }
        let key = prepared.snapshot.catalog.fingerprint ^ prepared.snapshot.catalog.version;
        let warm = {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            let mut found = None;
            // Children of an older snapshot, or that died waiting, are dropped on the way.
            while let Some((k, mut c)) = pool.pop_front() {
                if k == key && !c.has_exited() {
                    found = Some(c);
                    break;
                }
            }
            found
        };
        if self.cfg.warm_workers > 0 {
            self.refill.notify_one();
        }
        if let Some(mut c) = warm
            && write_job(&mut c, job).await.is_ok()
        {
            return Ok(c);
        }
        let mut c = self.fresh_child(prepared, id).await?;
        write_job(&mut c, job).await?;
        Ok(c)
    }

    /// A new child for this snapshot: forked from its fork server when there is one (~1 ms),
    /// else started from scratch (~40 ms).
    async fn fresh_child(&self, prepared: &Arc<Prepared>, id: &str) -> std::io::Result<Child> {
        if let Some(zygote) = self.zygote_for(prepared) {
            match zygote.fork(&self.spawn, id, self.cfg.limits).await {
                Ok(c) => return Ok(c),
                Err(e) => tracing::warn!("fork server failed ({e}); starting the child directly"),
            }
        }
        child::spawn(&self.spawn, &prepared.sdk_dir, id)
    }

    /// The fork server of this snapshot, started on first use; none without a warm pool, and
    /// none for a while after one failed.
    fn zygote_for(&self, prepared: &Arc<Prepared>) -> Option<Arc<Zygote>> {
        /// After a fork server fails, children start directly for this long before another try.
        const RETRY_AFTER: Duration = Duration::from_secs(10);
        if self.cfg.warm_workers == 0 {
            return None;
        }
        let key = prepared.snapshot.catalog.fingerprint ^ prepared.snapshot.catalog.version;
        let mut slot = self.zygote.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, z)) = &slot.current
            && *k == key
            && z.is_alive()
        {
            return Some(z.clone());
        }
        slot.current = None;
        if slot
            .failed_at
            .is_some_and(|failed| failed.elapsed() < RETRY_AFTER)
        {
            return None;
        }
        match Zygote::start(&self.spawn, &prepared.sdk_dir) {
            Ok(z) => {
                let z = Arc::new(z);
                slot.current = Some((key, z.clone()));
                Some(z)
            }
            Err(e) => {
                tracing::warn!("cannot start the fork server ({e}); children start directly");
                slot.failed_at = Some(Instant::now());
                None
            }
        }
    }
}

async fn write_job(child: &mut Child, job: &[u8]) -> std::io::Result<()> {
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("child has no stdin"))?;
    stdin.write_all(job).await?;
    stdin.shutdown().await?;
    Ok(())
}

/// Keeps `warm_workers` children of the current snapshot ready.
async fn refill_loop(inner: std::sync::Weak<Inner>, shutdown: CancellationToken) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let want = strong.cfg.warm_workers;
        if let Ok(prepared) = strong.prepared() {
            let key = prepared.snapshot.catalog.fingerprint ^ prepared.snapshot.catalog.version;
            loop {
                let have = strong.pool.lock().unwrap_or_else(|p| p.into_inner()).len();
                if have >= want || shutdown.is_cancelled() {
                    break;
                }
                let id = format!("w{}", strong.counter.fetch_add(1, Ordering::Relaxed));
                match strong.fresh_child(&prepared, &id).await {
                    Ok(c) => strong
                        .pool
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back((key, c)),
                    Err(e) => {
                        tracing::warn!("cannot pre-start a python worker: {e}");
                        break;
                    }
                }
            }
        }
        let refill = strong.refill.clone();
        drop(strong);
        tokio::select! {
            _ = refill.notified() => {}
            _ = shutdown.cancelled() => return,
            // A worker may die while waiting; look again now and then.
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

async fn drain(
    mut pipe: impl AsyncRead + Unpin,
    buffer: Arc<Mutex<CappedBuffer>>,
    forward: Option<mpsc::UnboundedSender<OutputChunk>>,
    wrap: fn(String) -> OutputChunk,
) {
    let mut chunk = vec![0u8; PIPE_CHUNK];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                buffer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(&chunk[..n]);
                if let Some(tx) = &forward {
                    let _ = tx.send(wrap(String::from_utf8_lossy(&chunk[..n]).into_owned()));
                }
            }
        }
    }
}

fn stderr_note(stderr: &Arc<Mutex<CappedBuffer>>, note: &str) {
    let mut b = stderr.lock().unwrap_or_else(|p| p.into_inner());
    let sep = if b.total() > 0 { "\n" } else { "" };
    b.push(format!("{sep}{note}\n").as_bytes());
}

/// Keeps a run's token valid exactly as long as this value lives.
struct Registered<'a> {
    inner: &'a Inner,
    token: String,
}

impl<'a> Registered<'a> {
    fn new(inner: &'a Inner, token: String, ctx: Arc<RunCtx>) -> Self {
        inner
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), ctx);
        Registered { inner, token }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.inner
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.token);
    }
}

/// Reports `exec.finished` once: with the result, or as `cancelled` when the run's future is
/// dropped before it has one (a client that went away).
struct FinishGuard<'a> {
    events: &'a Events,
    exec_id: &'a str,
    started: Instant,
    done: bool,
}

impl FinishGuard<'_> {
    fn finish(&mut self, result: &ExecResult) {
        self.done = true;
        let mut e = Event::new("exec.finished");
        e.exec_id = Some(self.exec_id.to_string());
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

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map(|v| v.len()).unwrap_or(0)
}

/// 256 random bits, hex.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
