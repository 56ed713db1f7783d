//! A run's turn on an interpreter: what differs between a fresh run and a session run.
//!
//! Every run has the same shape (the runner's): a slot, a prepared catalog, a registration,
//! then a [`Turn`], which owns the two things that differ: where the interpreter comes from (a
//! fresh child of its own from the pool, or the session's live interpreter, kept or started)
//! and how the run's output ends (the child's exit, or the end marker of a live interpreter,
//! which is paused again and kept). A turn always ends through [`Turn::finish`], which leaves
//! nothing of the run running: a fresh child's group is killed, a live interpreter is paused
//! or, when the run did not end by itself, killed and forgotten.
//!
//! It must not register runs, decide deadlines or build results (the runner's), nor know how
//! a child is made (`pool`) or how output is read (`output`).

use super::child::{self, Child};
use super::clock::RunClock;
use super::files::Files;
use super::ipc::{Bridge, Bridges};
use super::live::{Interpreters, Live, Lost, Slot};
use super::output::{self, Capture, Captured, OutputChunk};
use super::pool::{OnServer, Pool};
use super::prepare::Prepared;
use super::request::{ExecStatus, RunnerConfig, SessionState, StateChange, Workspace};
use super::zygote::Program;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedMutexGuard, mpsc};
use tokio::time::Instant;

/// What a run stopped by [`Runner::stop_runs`](super::Runner::stop_runs) says on its stderr.
pub const STOPPED_MESSAGE: &str =
    "stopped: the sidecar is shutting down and the run did not finish within PTC_SHUTDOWN_GRACE";

/// What a run cancelled by its caller says on its stderr.
pub const CANCELLED_MESSAGE: &str = "stopped: the caller cancelled the run";

/// Why a run was stopped before its end.
pub enum Halt {
    /// The sidecar is shutting down ([`STOPPED_MESSAGE`]).
    Shutdown,
    /// The caller cancelled it ([`CANCELLED_MESSAGE`]).
    Cancelled,
}

/// What a turn needs of its run.
pub struct TurnRun<'a> {
    pub id: &'a str,
    /// The run's token: what its end of the IPC bridge answers, when it has one.
    pub token: &'a str,
    pub bridges: &'a Bridges,
    pub prepared: &'a Arc<Prepared>,
    pub deadline: Instant,
    /// The run's whole budget (for messages).
    pub timeout: Duration,
    pub workspace: Option<&'a Workspace>,
    /// A session run on a fresh interpreter (`reset: true`).
    pub reset: bool,
    pub output: Option<mpsc::UnboundedSender<OutputChunk>>,
    pub files: Option<&'a Files>,
}

/// What a fresh child runs.
pub enum Job<'a> {
    /// The SDK's bootstrap reads `job`; `warm`: a warm or forked child of the current catalog
    /// may take it (else it starts cold).
    Python { job: &'a [u8], warm: bool },
    /// A program (a bash or JavaScript run) forked from the server `on` says, `job` on its
    /// stdin.
    Program {
        program: &'a Program,
        on: OnServer<'a>,
        job: &'a [u8],
    },
}

/// How a turn ended, before its output is taken.
pub enum End {
    /// The code's process (or, in a session, the run) ended by itself with this exit code.
    Exited(i32),
    /// The sidecar stopped it: why, and the status the run gets.
    Stopped {
        status: ExecStatus,
        why: String,
        lost: Lost,
    },
    /// The interpreter died or was lost during a session run (its exit code when known).
    Died { code: Option<i32>, why: String },
    /// The sidecar lost track of a fresh child.
    Untracked(std::io::Error),
}

/// How a turn came out: what the runner makes the result of.
pub struct Finished {
    pub status: ExecStatus,
    pub output: Captured,
    pub exit_code: Option<i32>,
    pub session: Option<SessionState>,
}

/// A run on its interpreter.
pub enum Turn {
    Fresh(Box<FreshTurn>),
    Live(LiveTurn),
}

/// A run on a fresh child of its own, its output captured from the start.
pub struct FreshTurn {
    child: Child,
    capture: Capture,
    /// Its end of the IPC bridge, when it has a network namespace of its own.
    _bridge: Option<Bridge>,
}

/// A run on a session's live interpreter: the session's slot held for the run.
pub struct LiveTurn {
    slot: Arc<Slot>,
    held: OwnedMutexGuard<Option<Live>>,
    state: SessionState,
    /// Set when the job could not be sent: the run is over before it began.
    gone: Option<String>,
    /// Set by [`finish`](Turn::finish); a turn dropped before it (its caller went away) stops
    /// the interpreter, which may still be running the code.
    finished: bool,
}

impl Drop for LiveTurn {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Dropping the interpreter kills its group; its files stay.
        if self.held.take().is_some() {
            self.slot.end(Some(Lost::Cancelled));
        }
    }
}

impl Turn {
    /// A fresh child of the run's own, its output captured from the start. The error says why
    /// it could not start.
    pub async fn fresh(
        pool: &Pool,
        cfg: &RunnerConfig,
        run: TurnRun<'_>,
        job: Job<'_>,
    ) -> std::io::Result<Turn> {
        let dir = run.workspace.map(|w| w.dir.as_path());
        let mut child = match job {
            Job::Python { job, warm } => pool.start(run.prepared, warm, run.id, job, dir).await?,
            Job::Program { program, on, job } => {
                pool.start_program(on, run.id, program, job, dir).await?
            }
        };
        let bridge = bridge_of(&mut child, run.bridges)?;
        if let Some(bridge) = &bridge {
            bridge.bind(run.token);
        }
        let capture = Capture::start(
            child.stdout.take(),
            child.stderr.take(),
            cfg.max_output_bytes,
            run.output,
            output::spills(run.files, run.id),
        );
        Ok(Turn::Fresh(Box::new(FreshTurn {
            child,
            capture,
            _bridge: bridge,
        })))
    }

    /// The session's live interpreter (the one it has, else a new one, and then why the state
    /// of the earlier runs is gone), resumed, with `job` sent. A run that cannot have it
    /// (another run holds it past the deadline, or no interpreter starts) is finished here.
    pub async fn live(
        pool: &Pool,
        cfg: &RunnerConfig,
        interpreters: &Interpreters,
        session: &str,
        run: TurnRun<'_>,
        mut job: serde_json::Value,
        nonce: &str,
    ) -> Result<Turn, Finished> {
        let failed = |status, stderr: String, state| Finished {
            status,
            output: Captured {
                stderr,
                ..Captured::default()
            },
            exit_code: None,
            session: Some(state),
        };
        let state = |change, reason, runs| SessionState {
            id: session.to_string(),
            state: change,
            reason,
            run: runs,
        };
        let slot = interpreters.slot(session);
        let Ok(mut held) =
            tokio::time::timeout_at(run.deadline, slot.live.clone().lock_owned()).await
        else {
            let why = format!(
                "the run waited {:.1} s for session {session}'s previous run to end and timed \
                 out before starting; run one at a time per session",
                run.timeout.as_secs_f64(),
            );
            return Err(failed(
                ExecStatus::Timeout,
                why,
                state(StateChange::Kept, None, 0),
            ));
        };
        slot.begin();
        let lost = keep_or_drop(&mut held, &slot, &run, &mut job, session).await;
        let change = match (&*held, lost) {
            (Some(_), _) => StateChange::Kept,
            (None, Some(_)) => StateChange::Reset,
            (None, None) => StateChange::New,
        };
        if held.is_none() {
            interpreters.make_room(session);
            match start_interpreter(pool, &run).await {
                Ok(live) => {
                    slot.started(live.child.pid());
                    *held = Some(live);
                }
                Err(e) => {
                    slot.end(lost);
                    let why = format!("ptc-sidecar could not start {}: {e}", cfg.python.display());
                    return Err(failed(ExecStatus::Error, why, state(change, lost, 0)));
                }
            }
        }
        let Some(live) = held.as_mut() else {
            unreachable!("an interpreter was found or started above");
        };
        if let Some(bridge) = &live.bridge {
            bridge.bind(run.token);
        }
        live.child.resume();
        if let Err(e) = live.child.extend_cpu(cfg.limits.cpu_secs) {
            tracing::debug!(session, "cannot extend the CPU limit: {e}");
        }
        let spills = output::spills(run.files, run.id);
        live.output
            .begin(nonce, cfg.max_output_bytes, run.output, spills);
        if let (StateChange::Reset, Some(why)) = (change, lost) {
            live.output.note(&format!(
                "ptc-sidecar: state was reset: {}; the session's files are kept",
                why.explain(interpreters.max, interpreters.idle_ttl)
            ));
        }
        let gone = live
            .send(&job.to_string())
            .await
            .err()
            .map(|e| format!("the interpreter is gone ({e})"));
        let runs = slot.runs() + 1;
        Ok(Turn::Live(LiveTurn {
            slot,
            held,
            state: state(change, lost, runs),
            gone,
            finished: false,
        }))
    }

    /// The child the run's code runs in.
    pub fn child(&self) -> &Child {
        match self {
            Turn::Fresh(turn) => &turn.child,
            Turn::Live(turn) => match turn.held.as_ref() {
                Some(live) => &live.child,
                None => unreachable!("a live turn holds its interpreter until it finishes"),
            },
        }
    }

    /// Waits for the run to end: by itself, or stopped when its `clock` runs out, when `quota`
    /// resolves (with why) or when `stop` does (the shutdown grace is over).
    pub async fn until_end(
        &mut self,
        clock: &RunClock,
        timeout: Duration,
        quota: impl Future<Output = String>,
        stop: impl Future<Output = Halt>,
    ) -> End {
        let timed_out = || End::Stopped {
            status: ExecStatus::Timeout,
            why: timed_out_why(timeout, clock.paused()),
            lost: Lost::Timeout,
        };
        let over_quota = |why| End::Stopped {
            status: ExecStatus::Error,
            why: format!("stopped: {why}"),
            lost: Lost::Quota,
        };
        let stopped = |halt| match halt {
            Halt::Shutdown => End::Stopped {
                status: ExecStatus::Error,
                why: STOPPED_MESSAGE.into(),
                lost: Lost::Crashed,
            },
            Halt::Cancelled => End::Stopped {
                status: ExecStatus::Error,
                why: CANCELLED_MESSAGE.into(),
                lost: Lost::Cancelled,
            },
        };
        match self {
            Turn::Fresh(turn) => tokio::select! {
                waited = turn.child.wait() => match waited {
                    Ok(code) => End::Exited(code),
                    Err(e) => End::Untracked(e),
                },
                _ = clock.expired() => timed_out(),
                why = quota => over_quota(why),
                halt = stop => stopped(halt),
            },
            Turn::Live(turn) => {
                if let Some(why) = turn.gone.take() {
                    return End::Died { code: None, why };
                }
                let Some(live) = turn.held.as_mut() else {
                    unreachable!("a live turn holds its interpreter until it finishes");
                };
                let Live { child, output, .. } = live;
                tokio::select! {
                    code = output.ended() => match code {
                        Some(code) => End::Exited(code),
                        None => died(child.wait().await.ok()),
                    },
                    waited = child.wait() => died(waited.ok()),
                    _ = clock.expired() => timed_out(),
                    why = quota => over_quota(why),
                    halt = stop => stopped(halt),
                }
            }
        }
    }

    /// The run's output, with nothing of it left running: a fresh child's group killed; a
    /// session's interpreter paused when the run ended by itself, else killed and forgotten
    /// (its files stay).
    pub async fn finish(self, end: End) -> Finished {
        match self {
            Turn::Fresh(turn) => finish_fresh(turn.child, turn.capture, end).await,
            Turn::Live(turn) => turn.finish(end).await,
        }
    }
}

/// Why a run that ran out of time was stopped: its budget, and how long its clock stood still
/// while calls waited for a person.
fn timed_out_why(timeout: Duration, paused: Duration) -> String {
    let budget = timeout.as_secs_f64();
    match paused.as_secs_f64() {
        p if p >= 0.05 => format!(
            "stopped after {budget:.1} s (timeout; not counting {p:.1} s of waiting for a person)"
        ),
        _ => format!("stopped after {budget:.1} s (timeout)"),
    }
}

/// A new live interpreter for a session run, in the session's data directory.
async fn start_interpreter(pool: &Pool, run: &TurnRun<'_>) -> std::io::Result<Live> {
    let Some(workspace) = run.workspace else {
        unreachable!("a session run has a workspace (the runner checks)");
    };
    let mut child = pool
        .start_live(run.prepared, run.id, &workspace.dir)
        .await?;
    let bridge = bridge_of(&mut child, run.bridges)?;
    Live::new(child, run.prepared.key, bridge)
}

/// The session's interpreter kept for this run, or dropped (and why the state is gone): the
/// run asked for a fresh one, it died since the last run, or a reload changed the catalog and
/// its new tool functions cannot be sent with the job.
async fn keep_or_drop(
    held: &mut Option<Live>,
    slot: &Slot,
    run: &TurnRun<'_>,
    job: &mut serde_json::Value,
    session: &str,
) -> Option<Lost> {
    let prepared = run.prepared;
    let mut lost = slot.take_lost();
    let Some(live) = held.as_mut() else {
        return lost;
    };
    if run.reset {
        // Dropping it kills its group: nothing an earlier run left goes on.
        *held = None;
        return Some(Lost::Reset);
    }
    if live.child.has_exited() {
        *held = None;
        return Some(Lost::Crashed);
    }
    if live.key != prepared.key {
        // A reload since the session's last run: the interpreter gets the new tool functions
        // with this job and keeps its state.
        match catalog_of(prepared).await {
            Ok(catalog) => {
                job["catalog"] = catalog;
                live.key = prepared.key;
            }
            Err(e) => {
                tracing::warn!(session, "cannot read the new catalog: {e}");
                lost = Some(Lost::CatalogChanged);
                *held = None;
            }
        }
    }
    lost
}

/// The child's own end of the IPC bridge, accepted on from here, when it has one.
fn bridge_of(child: &mut Child, bridges: &Bridges) -> std::io::Result<Option<Bridge>> {
    child
        .take_listener()
        .map(|listener| Bridge::start(bridges, listener))
        .transpose()
}

/// The tools of a prepared catalog, as its `catalog.json` holds them (for a live interpreter
/// that loaded an older one).
async fn catalog_of(prepared: &Prepared) -> std::io::Result<serde_json::Value> {
    let text = tokio::fs::read(prepared.sdk_dir.join("catalog.json")).await?;
    serde_json::from_slice(&text).map_err(std::io::Error::other)
}

/// A live interpreter that ended during a run, with its exit code when known.
fn died(code: Option<i32>) -> End {
    let why = code
        .and_then(child::killed_by)
        .unwrap_or_else(|| "the interpreter exited".into());
    End::Died { code, why }
}

async fn finish_fresh(mut child: Child, capture: Capture, end: End) -> Finished {
    let (status, exit_code) = match end {
        End::Exited(code) => {
            if let Some(why) = child::killed_by(code) {
                capture.note(&format!("ptc-sidecar: {why}"));
            }
            (exit_status(code), Some(code))
        }
        End::Untracked(e) => {
            capture.note(&format!("ptc-sidecar lost track of the child: {e}"));
            (ExecStatus::Error, None)
        }
        End::Stopped { status, why, .. } => {
            child.kill_group();
            let _ = child.wait().await;
            capture.note(&format!("ptc-sidecar: {why}"));
            (status, None)
        }
        End::Died { code, why } => {
            capture.note(&format!("ptc-sidecar: {why}"));
            (ExecStatus::Error, code)
        }
    };
    // Anything the code left running dies with the run.
    child.kill_group();
    let output = capture.finish().await;
    drop(child);
    Finished {
        status,
        output,
        exit_code,
        session: None,
    }
}

impl LiveTurn {
    async fn finish(mut self, end: End) -> Finished {
        self.finished = true;
        let Some(live) = self.held.as_mut() else {
            unreachable!("a live turn holds its interpreter until it finishes");
        };
        let (why, exit_code, what, status) = match end {
            End::Exited(code) => {
                let output = live.output.finish(false).await;
                live.child.pause();
                if let Some(bridge) = &live.bridge {
                    bridge.unbind();
                }
                self.slot.end(None);
                return Finished {
                    status: exit_status(code),
                    output,
                    exit_code: Some(code),
                    session: Some(self.state.clone()),
                };
            }
            End::Stopped { status, why, lost } => (lost, None, why, status),
            End::Died { code, why } => (Lost::Crashed, code, why, ExecStatus::Error),
            End::Untracked(e) => (Lost::Crashed, None, e.to_string(), ExecStatus::Error),
        };
        live.child.kill_group();
        // A run past its session's quota loses what it wrote there (the runner's end of a run).
        let files = match why {
            Lost::Quota => "",
            _ => "; its files are kept",
        };
        live.output.note(&format!(
            "ptc-sidecar: {what}; the session's state ended with it (the next run starts a new \
             interpreter){files}"
        ));
        let output = live.output.finish(true).await;
        *self.held = None;
        self.slot.end(Some(why));
        Finished {
            status,
            output,
            exit_code,
            session: Some(SessionState {
                state: StateChange::Ended,
                reason: Some(why),
                ..self.state.clone()
            }),
        }
    }
}

fn exit_status(code: i32) -> ExecStatus {
    match code {
        0 => ExecStatus::Ok,
        _ => ExecStatus::Error,
    }
}
