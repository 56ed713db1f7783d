//! Live sessions: one Python interpreter per session whose globals outlive a run (variables,
//! imports, functions, results of earlier tool calls), like a notebook's kernel.
//!
//! Owns the interpreters by session id, which one a run takes, why a session's state is gone
//! when it is ([`Lost`]), and the two bounds on them: at most `max` live at once (starting one
//! more stops the least recently used) and none idle for longer than `idle_ttl`. Between runs an
//! interpreter is stopped (`SIGSTOP`): what a run left running uses no CPU and makes no call.
//!
//! An interpreter is made like any run's child (`pool`), confined the same way with the
//! session's workspace as its writable directory; the runner drives one run on it. It must not
//! know the session store (files, ids) beyond the id it is given, nor HTTP.

use super::child::{Child, Stdin};
use super::ipc::Bridge;
use super::output::LiveOutput;
use super::prepare::CatalogKey;
use crate::util::lock;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// Sessions without an interpreter whose loss is still remembered, per live one allowed: the
/// table of slots stays bounded however many session ids clients send.
const REMEMBERED_PER_LIVE: usize = 16;

/// How often idle interpreters are looked for at most (and at least every quarter TTL).
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Why a session's interpreter, and with it the state of its earlier runs, is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lost {
    /// More sessions were live than `PTC_MAX_SESSIONS`; this was the least recently used.
    Evicted,
    /// Idle for longer than `PTC_SESSION_IDLE_TTL`.
    Expired,
    /// A run went past its timeout and was stopped with its interpreter.
    Timeout,
    /// The interpreter exited or was killed during a run (`os._exit`, a crash, out of memory).
    Crashed,
    /// A run went past its scratch or workspace quota and was stopped with its interpreter.
    Quota,
    /// The tool catalog changed: the interpreter's tool functions were the old ones.
    CatalogChanged,
    /// Deleted through the API.
    Deleted,
    /// The run asked for a fresh interpreter (`reset: true`).
    Reset,
    /// The caller of a run went away before it finished (an HTTP client that hung up, an MCP
    /// host's `notifications/cancelled`): the run was stopped with its interpreter.
    Cancelled,
}

impl Lost {
    /// What a run's stderr says about it.
    pub fn explain(self, max: usize, idle_ttl: Duration) -> String {
        match self {
            Lost::Evicted => format!(
                "more than PTC_MAX_SESSIONS ({max}) sessions were live and this one was used least recently"
            ),
            Lost::Expired => format!(
                "the session was idle for more than PTC_SESSION_IDLE_TTL ({} s)",
                idle_ttl.as_secs()
            ),
            Lost::Timeout => {
                "a run went past its timeout and was stopped with its interpreter".into()
            }
            Lost::Crashed => {
                "the interpreter exited during a run (os._exit, a crash or out of memory)".into()
            }
            Lost::Quota => "a run went past its quota and was stopped with its interpreter".into(),
            Lost::CatalogChanged => "the tool catalog changed".into(),
            Lost::Deleted => "the session was deleted".into(),
            Lost::Reset => "the run asked for a fresh interpreter (reset: true)".into(),
            Lost::Cancelled => {
                "a run's caller cancelled it or went away before it finished, and the run was \
                 stopped with its interpreter"
                    .into()
            }
        }
    }
}

/// A session's interpreter between runs, or taken by the run that uses it.
pub struct Live {
    pub child: Child,
    pub stdin: Stdin,
    pub output: LiveOutput,
    /// The catalog its tool functions were built from.
    pub key: CatalogKey,
    /// Its end of the IPC bridge (a network namespace of its own), bound to each run's token
    /// in turn and to none between runs.
    pub bridge: Option<Bridge>,
}

impl Live {
    pub fn new(mut child: Child, key: CatalogKey, bridge: Option<Bridge>) -> std::io::Result<Live> {
        let missing = || std::io::Error::other("the interpreter has no pipes");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let output = LiveOutput::start(stdout.ok_or_else(missing)?, stderr.ok_or_else(missing)?);
        Ok(Live {
            child,
            stdin,
            output,
            key,
            bridge,
        })
    }

    /// Sends one run's job (one line).
    pub async fn send(&mut self, job: &str) -> std::io::Result<()> {
        let mut line = Vec::with_capacity(job.len() + 1);
        line.extend_from_slice(job.as_bytes());
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await
    }
}

/// What `GET /v1/sessions` shows of a live interpreter.
#[derive(Debug, Clone, Serialize)]
pub struct LiveInfo {
    pub id: String,
    pub pid: i32,
    /// Seconds since the interpreter started.
    pub age_s: f64,
    /// Seconds since its last run ended (0 while one runs).
    pub idle_s: f64,
    pub runs: u64,
    pub running: bool,
    /// Proportional set size (`Pss` of /proc/PID/smaps_rollup: pages shared with the fork
    /// server counted in part), else the resident set; `None` when neither can be read.
    pub memory_bytes: Option<u64>,
}

/// One session's place: its interpreter when it has one, and why the last one is gone.
pub struct Slot {
    /// Owned by the run that holds it (`lock_owned`).
    pub live: Arc<tokio::sync::Mutex<Option<Live>>>,
    stats: Mutex<Stats>,
    /// Whether `live` holds an interpreter (readable without its lock, for counting).
    has_live: AtomicBool,
}

struct Stats {
    lost: Option<Lost>,
    started: Instant,
    used: Instant,
    runs: u64,
    pid: i32,
    running: bool,
}

impl Slot {
    fn new() -> Slot {
        let now = Instant::now();
        Slot {
            live: Arc::new(tokio::sync::Mutex::new(None)),
            stats: Mutex::new(Stats {
                lost: None,
                started: now,
                used: now,
                runs: 0,
                pid: 0,
                running: false,
            }),
            has_live: AtomicBool::new(false),
        }
    }

    /// Why the state is gone since the last run, once: the next run reads it and clears it.
    pub fn take_lost(&self) -> Option<Lost> {
        lock(&self.stats).lost.take()
    }

    /// Runs the current interpreter has done.
    pub fn runs(&self) -> u64 {
        lock(&self.stats).runs
    }

    /// A run begins on this slot.
    pub fn begin(&self) {
        let mut s = lock(&self.stats);
        s.running = true;
        s.used = Instant::now();
    }

    /// `live` now holds a new interpreter.
    pub fn started(&self, pid: i32) {
        let mut s = lock(&self.stats);
        s.started = Instant::now();
        s.runs = 0;
        s.pid = pid;
        self.has_live.store(true, Ordering::Relaxed);
    }

    /// A run ended: the interpreter was kept, or it is gone for `lost`.
    pub fn end(&self, lost: Option<Lost>) {
        let mut s = lock(&self.stats);
        s.running = false;
        s.used = Instant::now();
        s.runs += 1;
        if lost.is_some() {
            s.lost = lost;
            self.has_live.store(false, Ordering::Relaxed);
        }
    }

    /// Stops the interpreter if no run has it; false when a run has it.
    fn stop(&self, why: Lost) -> bool {
        let Ok(mut live) = self.live.try_lock() else {
            return false;
        };
        if live.take().is_some() {
            lock(&self.stats).lost = Some(why);
        }
        self.has_live.store(false, Ordering::Relaxed);
        true
    }

    fn idle(&self) -> Duration {
        let s = lock(&self.stats);
        if s.running {
            Duration::ZERO
        } else {
            s.used.elapsed()
        }
    }
}

/// The live interpreters by session id; cloneable handle.
#[derive(Clone)]
pub struct Interpreters {
    slots: Arc<Mutex<HashMap<String, Arc<Slot>>>>,
    pub max: usize,
    pub idle_ttl: Duration,
}

impl Interpreters {
    pub fn new(max: usize, idle_ttl: Duration) -> Interpreters {
        Interpreters {
            slots: Arc::default(),
            max: max.max(1),
            idle_ttl,
        }
    }

    /// The slot of session `id`, made when it has none.
    pub fn slot(&self, id: &str) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(id) {
            return slot.clone();
        }
        let remembered = self.max.saturating_mul(REMEMBERED_PER_LIVE);
        if slots.len() >= remembered {
            forget_oldest_empty(&mut slots);
        }
        let slot = Arc::new(Slot::new());
        slots.insert(id.to_string(), slot.clone());
        slot
    }

    /// Makes room for one more interpreter: while `max` are live, stops the least recently
    /// used one that no run has. Never stops `keep`'s.
    pub fn make_room(&self, keep: &str) {
        loop {
            let candidates: Vec<(String, Arc<Slot>)> = {
                let slots = lock(&self.slots);
                let live = slots
                    .values()
                    .filter(|s| s.has_live.load(Ordering::Relaxed))
                    .count();
                if live < self.max {
                    return;
                }
                let mut idle: Vec<_> = slots
                    .iter()
                    .filter(|(id, s)| *id != keep && s.has_live.load(Ordering::Relaxed))
                    .map(|(id, s)| (id.clone(), s.clone()))
                    .collect();
                idle.sort_by_key(|(_, s)| std::cmp::Reverse(s.idle()));
                idle
            };
            let Some((id, _)) = candidates.iter().find(|(_, s)| s.stop(Lost::Evicted)) else {
                // Every live one is running: this cannot happen while PTC_MAX_SESSIONS is at
                // least PTC_MAX_RUNS (config checks it), since each run holds a run slot.
                tracing::warn!("every live session is running; starting one more");
                return;
            };
            tracing::info!(session = %id, "stopped the least recently used session's interpreter");
        }
    }

    /// Stops session `id`'s interpreter between its runs, `why` being what its next run is
    /// told. False when it has none, or a run holds it.
    pub fn stop(&self, id: &str, why: Lost) -> bool {
        let slot = lock(&self.slots).get(id).cloned();
        slot.is_some_and(|slot| slot.stop(why))
    }

    /// Stops session `id`'s interpreter (when a run has it, the run's end stops it) and
    /// forgets the slot. True when there was one.
    pub fn remove(&self, id: &str) -> bool {
        let Some(slot) = lock(&self.slots).remove(id) else {
            return false;
        };
        if !slot.stop(Lost::Deleted) {
            // The run keeps its interpreter until it ends; kill it now instead.
            let pid = lock(&slot.stats).pid;
            crate::util::kill_group(pid);
        }
        true
    }

    /// The live interpreters, most recently used first.
    pub fn list(&self) -> Vec<LiveInfo> {
        let slots: Vec<(String, Arc<Slot>)> = lock(&self.slots)
            .iter()
            .filter(|(_, s)| s.has_live.load(Ordering::Relaxed))
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        let mut out: Vec<LiveInfo> = slots
            .into_iter()
            .map(|(id, slot)| {
                let idle = slot.idle();
                let s = lock(&slot.stats);
                LiveInfo {
                    id,
                    pid: s.pid,
                    age_s: s.started.elapsed().as_secs_f64(),
                    idle_s: idle.as_secs_f64(),
                    runs: s.runs,
                    running: s.running,
                    memory_bytes: memory_of(s.pid),
                }
            })
            .collect();
        out.sort_by(|a, b| a.idle_s.total_cmp(&b.idle_s));
        out
    }

    /// Number of live interpreters.
    pub fn live(&self) -> usize {
        lock(&self.slots)
            .values()
            .filter(|s| s.has_live.load(Ordering::Relaxed))
            .count()
    }

    /// Stops interpreters idle for longer than `idle_ttl`, and forgets slots idle for ten times
    /// that; until `shutdown`, when it stops them all.
    pub async fn sweep(self, shutdown: CancellationToken) {
        let every = (self.idle_ttl / 4).clamp(Duration::from_millis(100), SWEEP_EVERY);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            self.expire();
        }
        let slots: Vec<Arc<Slot>> = lock(&self.slots).drain().map(|(_, s)| s).collect();
        for slot in slots {
            slot.stop(Lost::Deleted);
        }
    }

    fn expire(&self) {
        let slots: Vec<(String, Arc<Slot>)> = lock(&self.slots)
            .iter()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        for (id, slot) in slots {
            let idle = slot.idle();
            if slot.has_live.load(Ordering::Relaxed) && idle > self.idle_ttl {
                if slot.stop(Lost::Expired) {
                    tracing::info!(session = %id, "stopped an idle session's interpreter");
                }
            } else if !slot.has_live.load(Ordering::Relaxed)
                && idle > self.idle_ttl.saturating_mul(10)
            {
                lock(&self.slots).remove(&id);
            }
        }
    }
}

/// Drops the slot without an interpreter that was used least recently.
fn forget_oldest_empty(slots: &mut HashMap<String, Arc<Slot>>) {
    let oldest = slots
        .iter()
        .filter(|(_, s)| !s.has_live.load(Ordering::Relaxed))
        .max_by_key(|(_, s)| s.idle())
        .map(|(id, _)| id.clone());
    if let Some(id) = oldest {
        slots.remove(&id);
    }
}

/// The memory a process uses: `Pss` from smaps_rollup, else `VmRSS`, in bytes.
pub fn memory_of(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let field = |file: &str, name: &str| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    field("smaps_rollup", "Pss:").or_else(|| field("status", "VmRSS:"))
}
