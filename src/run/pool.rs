//! The pool: where a run's child comes from. A warm child of the current catalog when one is
//! ready (pre-started, waiting for its job), else a fresh one: forked from the catalog's fork
//! server (~1 ms) when there is a warm pool, else started cold (~40 ms). The refill loop keeps
//! `warm_workers` children of the current catalog ready, and as many node children once a
//! JavaScript run asked for one (node's start, ~50 ms of CPU, is not a fork's).
//!
//! A child is made in exactly two places, [`Pool::cold`] and [`Pool::forked`]: how a child is
//! confined (today the resource limits of `SpawnSpec`) is applied there and nowhere else.
//!
//! Owns the warm children and the fork server. It must not read or judge a child's output, nor
//! decide how long a run may take (the runner's).

use super::child::{self, Child, SpawnSpec};
use super::javascript;
use super::prepare::{CatalogKey, Preparations, Prepared};
use super::zygote::{Program, Zygote};
use crate::render::Snapshot;
use crate::util::lock;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// After a fork server fails, children start cold for this long before another try: a server
/// that cannot start must not cost every run a failed attempt.
pub const ZYGOTE_RETRY_AFTER: Duration = Duration::from_secs(10);

/// How long a node child is not replaced while the JavaScript run that took it is going (when
/// another is ready): a run of `console.log(1)` takes 5 to 10 ms; runs back to back cannot
/// wait for their end.
const NODE_REFILL_DEFER: Duration = Duration::from_millis(25);

/// How often the refill loop looks again unwoken: a warm child may die while it waits, and
/// nothing else would notice until a run found it dead.
pub const REFILL_LOOK_AGAIN: Duration = Duration::from_secs(5);

/// Whether a fork server may be started now ([`Pool::current_zygote`]).
enum MayStart {
    Yes,
    No,
}

/// The fork server of one catalog, and when starting one last failed.
#[derive(Default)]
struct ZygoteSlot {
    current: Option<(CatalogKey, Arc<Zygote>)>,
    failed_at: Option<Instant>,
}

/// Which fork server makes a program's child ([`Pool::start_program`]): the one of
/// `prepared`'s catalog, or with `own` one of the run's own. `warm_node`: the program is
/// node's ([`javascript::program`]), and a pre-started one of that catalog may take the run.
pub struct OnServer<'a> {
    pub prepared: &'a Prepared,
    pub own: bool,
    pub warm_node: bool,
}

pub struct Pool {
    spec: SpawnSpec,
    warm_workers: usize,
    /// Ready children, each with the catalog it loaded.
    warm: Mutex<VecDeque<(CatalogKey, Child)>>,
    /// Ready node children (JavaScript runs), each with the catalog whose SDK it loaded,
    /// blocked reading its job: node's start (~50 ms of CPU) is paid before the run.
    warm_node: Mutex<VecDeque<(CatalogKey, Child)>>,
    /// Whether node children are kept warm, and whether they may start processes: set by the
    /// first JavaScript run (a sidecar that never runs JavaScript keeps none).
    node_wanted: Mutex<Option<bool>>,
    /// JavaScript runs going in a warm node child ([`NodeRun`]), and when the last took one:
    /// while one is going, no other node is started for up to [`NODE_REFILL_DEFER`] unless
    /// none is ready (node's start is ~50 ms of CPU, which would share the cores with it).
    node_runs: Arc<AtomicUsize>,
    node_taken: Mutex<Option<Instant>>,
    /// Wakes the refill loop (shared with it so it does not keep the pool alive).
    refill: Arc<Notify>,
    zygote: Mutex<ZygoteSlot>,
    /// Held while a fork server starts: the runs that want one meanwhile wait for it and share
    /// it, instead of each starting its own.
    zygote_start: tokio::sync::Mutex<()>,
    /// Numbers the warm children's scratch directories (`w0`, `w1`, ...).
    workers: AtomicU64,
}

impl Pool {
    pub fn new(spec: SpawnSpec, warm_workers: usize) -> Pool {
        Pool {
            spec,
            warm_workers,
            warm: Mutex::new(VecDeque::new()),
            warm_node: Mutex::new(VecDeque::new()),
            node_wanted: Mutex::new(None),
            node_runs: Arc::new(AtomicUsize::new(0)),
            node_taken: Mutex::new(None),
            refill: Arc::new(Notify::new()),
            zygote: Mutex::new(ZygoteSlot::default()),
            zygote_start: tokio::sync::Mutex::new(()),
            workers: AtomicU64::new(0),
        }
    }

    /// A child for one run of `prepared`, its job written and stdin closed. `warm` says it
    /// may be a warm child or a forked one (the current catalog's); else it starts cold. A
    /// run with a `workspace` (a session's data directory) is never a warm child: a child is
    /// confined before it waits, and a warm one's ruleset names no workspace.
    pub async fn start(
        &self,
        prepared: &Prepared,
        warm: bool,
        id: &str,
        job: &[u8],
        workspace: Option<&Path>,
    ) -> std::io::Result<Child> {
        if !warm {
            let mut c = self.cold(prepared, id, workspace).await?;
            write_job(&mut c, job).await?;
            return Ok(c);
        }
        if workspace.is_some() {
            let mut c = self.fresh(prepared, id, workspace).await?;
            write_job(&mut c, job).await?;
            return Ok(c);
        }
        let ready = self.take_warm(prepared.key);
        if self.warm_workers > 0 {
            self.refill.notify_one();
        }
        if let Some(mut c) = ready
            && write_job(&mut c, job).await.is_ok()
        {
            return Ok(c);
        }
        let mut c = self.fresh(prepared, id, None).await?;
        write_job(&mut c, job).await?;
        Ok(c)
    }

    /// A session's live interpreter: a fresh child (never a warm one: its ruleset must name the
    /// workspace) with its stdin left open for one job per run.
    pub async fn start_live(
        &self,
        prepared: &Prepared,
        id: &str,
        workspace: &Path,
    ) -> std::io::Result<Child> {
        self.fresh(prepared, id, Some(workspace)).await
    }

    /// A child for one run that becomes `program` once confined (a bash or JavaScript run),
    /// `job` written to its stdin, then closed. Forked by the fork server of `prepared` (its ruleset names that
    /// catalog's SDK directory: node reads the JavaScript SDK and `catalog.json` there; bash
    /// reads nothing, so pass the current catalog's, so as not to replace it) when there is a
    /// warm pool and not `own`, else by one of its own, started for this run and
    /// stopped with it. Never a cold child: a program may start processes, and the fork server
    /// is the subreaper that kills what it leaves behind.
    pub async fn start_program(
        &self,
        server: OnServer<'_>,
        id: &str,
        program: &Program,
        job: &[u8],
        workspace: Option<&Path>,
    ) -> std::io::Result<Child> {
        let prepared = server.prepared;
        if server.warm_node && !server.own && workspace.is_none() && self.warm_workers > 0 {
            *lock(&self.node_wanted) = Some(program.may_spawn);
            let ready = take_warm(&self.warm_node, prepared.key);
            self.refill.notify_one();
            if let Some(mut c) = ready
                && write_job(&mut c, job).await.is_ok()
            {
                c.hold(NodeRun::new(&self.node_runs, &self.refill));
                *lock(&self.node_taken) = Some(Instant::now());
                return Ok(c);
            }
        }
        let shared = match server.own {
            true => None,
            false => self.zygote_for(prepared).await,
        };
        let mut child = match shared {
            Some(zygote) => {
                zygote
                    .fork(&self.spec, id, Some(program), workspace)
                    .await?
            }
            None => {
                self.one_run_server(prepared)
                    .await?
                    .fork(&self.spec, id, Some(program), workspace)
                    .await?
            }
        };
        write_job(&mut child, job).await?;
        Ok(child)
    }

    /// The scratch directory a run of this id gets.
    pub fn scratch_of(&self, id: &str) -> std::path::PathBuf {
        self.spec.scratch_of(id)
    }

    /// A ready child of this catalog; children of another one, or that died waiting, are
    /// dropped on the way.
    fn take_warm(&self, key: CatalogKey) -> Option<Child> {
        take_warm(&self.warm, key)
    }

    /// A node child of `prepared`'s catalog, waiting for its job, forked by the catalog's
    /// fork server (none without one: a warm node is kept only beside a warm pool).
    async fn fresh_node(
        &self,
        prepared: &Prepared,
        id: &str,
        may_spawn: bool,
    ) -> std::io::Result<Child> {
        let zygote = self
            .zygote_for(prepared)
            .await
            .ok_or_else(|| std::io::Error::other("no fork server to pre-start node from"))?;
        let program = javascript::program(&prepared.sdk_dir, may_spawn);
        zygote.fork(&self.spec, id, Some(&program), None).await
    }
}

/// A ready child of this catalog from `warm`; children of another one, or that died waiting,
/// are dropped on the way.
fn take_warm(warm: &Mutex<VecDeque<(CatalogKey, Child)>>, key: CatalogKey) -> Option<Child> {
    let mut warm = lock(warm);
    while let Some((k, mut c)) = warm.pop_front() {
        if k == key && !c.has_exited() {
            return Some(c);
        }
    }
    None
}

impl Pool {
    /// A new child: forked from the catalog's fork server when there is one, else cold.
    async fn fresh(
        &self,
        prepared: &Prepared,
        id: &str,
        workspace: Option<&Path>,
    ) -> std::io::Result<Child> {
        if let Some(zygote) = self.zygote_for(prepared).await {
            match zygote.fork(&self.spec, id, None, workspace).await {
                Ok(c) => return Ok(c),
                // A cold start would meet the same limit.
                Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => return Err(e),
                Err(e) => tracing::warn!("fork server failed ({e}); starting the child directly"),
            }
        }
        self.cold(prepared, id, workspace).await
    }

    /// A child started from scratch; `child::spawn` confines it before exec. Where runs get
    /// namespaces of their own, or code may start processes, the child is instead forked by a
    /// fork server of its own, started for this run and gone with it: only a fork server's
    /// child makes a run's namespaces, and without them the server is the subreaper that kills
    /// what the run leaves behind, which from a cold child would go to init
    /// (docs/SECURITY.md). Either way only from an SDK directory that still holds what was
    /// written (~1 ms of a ~40 ms start).
    async fn cold(
        &self,
        prepared: &Prepared,
        id: &str,
        workspace: Option<&Path>,
    ) -> std::io::Result<Child> {
        if !self.spec.sandbox.runs_may_fork() && self.spec.sandbox.namespaces().is_none() {
            checked(prepared)?;
            return child::spawn(&self.spec, &prepared.sdk_dir, id, workspace).await;
        }
        // The child holds the server; dropping the child stops it.
        self.one_run_server(prepared)
            .await?
            .fork(&self.spec, id, None, workspace)
            .await
    }

    /// A fork server for one run, from an SDK directory that still holds what was written.
    async fn one_run_server(&self, prepared: &Prepared) -> std::io::Result<Arc<Zygote>> {
        checked(prepared)?;
        Ok(Arc::new(
            Zygote::start(&self.spec, &prepared.sdk_dir).await?,
        ))
    }

    /// The fork server of this catalog, started on first use; none without a warm pool, and
    /// none for [`ZYGOTE_RETRY_AFTER`] after one failed.
    async fn zygote_for(&self, prepared: &Prepared) -> Option<Arc<Zygote>> {
        if self.warm_workers == 0 {
            return None;
        }
        if let Ok(z) = self.current_zygote(prepared) {
            return Some(z);
        }
        let _starting = self.zygote_start.lock().await;
        match self.current_zygote(prepared) {
            Ok(z) => return Some(z),
            Err(MayStart::No) => return None,
            Err(MayStart::Yes) => {}
        }
        // A fork server serves every later run of its catalog: it starts only from an SDK
        // directory that still holds what was written.
        if !prepared.check() {
            return None;
        }
        match Zygote::start(&self.spec, &prepared.sdk_dir).await {
            Ok(z) => {
                let z = Arc::new(z);
                lock(&self.zygote).current = Some((prepared.key, z.clone()));
                Some(z)
            }
            Err(e) => {
                tracing::warn!("cannot start the fork server ({e}); children start directly");
                lock(&self.zygote).failed_at = Some(Instant::now());
                None
            }
        }
    }

    /// The live fork server of `prepared`'s catalog, or whether one may be started (not within
    /// [`ZYGOTE_RETRY_AFTER`] of a failed start). One of another catalog, or dead, is dropped.
    fn current_zygote(&self, prepared: &Prepared) -> Result<Arc<Zygote>, MayStart> {
        let mut slot = lock(&self.zygote);
        if let Some((k, z)) = &slot.current
            && *k == prepared.key
            && z.is_alive()
        {
            return Ok(z.clone());
        }
        slot.current = None;
        let failed_lately = slot
            .failed_at
            .is_some_and(|failed| failed.elapsed() < ZYGOTE_RETRY_AFTER);
        Err(if failed_lately {
            MayStart::No
        } else {
            MayStart::Yes
        })
    }

    /// Ready children of this catalog, after dropping the others and the dead.
    fn keep_only(&self, key: CatalogKey) -> usize {
        keep_only(&self.warm, key)
    }

    /// Warm children ready now.
    pub fn ready(&self) -> usize {
        lock(&self.warm).len()
    }

    /// Kills every warm child and the fork server (shutdown).
    pub fn clear(&self) {
        lock(&self.warm).clear();
        lock(&self.warm_node).clear();
        lock(&self.zygote).current = None;
    }
}

/// Ready children of this catalog in `warm`, after dropping the others and the dead.
fn keep_only(warm: &Mutex<VecDeque<(CatalogKey, Child)>>, key: CatalogKey) -> usize {
    let mut warm = lock(warm);
    warm.retain_mut(|(k, c)| *k == key && !c.has_exited());
    warm.len()
}

/// Whether `prepared`'s SDK directory still holds what was written (when it does not, it is
/// removed and prepared again for the next run).
fn checked(prepared: &Prepared) -> std::io::Result<()> {
    if prepared.check() {
        return Ok(());
    }
    Err(std::io::Error::other(
        "the SDK directory changed after it was written; it is being prepared again",
    ))
}

/// A JavaScript run going in a warm node child, counted in `Pool::node_runs` until the child
/// is dropped; then the refill loop is woken to replace it.
struct NodeRun {
    runs: Arc<AtomicUsize>,
    refill: Arc<Notify>,
}

impl NodeRun {
    fn new(runs: &Arc<AtomicUsize>, refill: &Arc<Notify>) -> NodeRun {
        runs.fetch_add(1, Ordering::Relaxed);
        NodeRun {
            runs: runs.clone(),
            refill: refill.clone(),
        }
    }
}

impl Drop for NodeRun {
    fn drop(&mut self) {
        self.runs.fetch_sub(1, Ordering::Relaxed);
        self.refill.notify_one();
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

/// Keeps `warm_workers` node children of `prepared`'s catalog ready, once a JavaScript run
/// asked for one (`node_wanted`), one at a time, and while a run is going in one only when none
/// is ready or [`NODE_REFILL_DEFER`] after it took one: a run that finds none forks its own.
async fn refill_node(pool: &Pool, prepared: &Prepared, shutdown: &CancellationToken) {
    let Some(may_spawn) = *lock(&pool.node_wanted) else {
        return;
    };
    loop {
        let ready = keep_only(&pool.warm_node, prepared.key);
        if ready >= pool.warm_workers || shutdown.is_cancelled() {
            return;
        }
        let taken = lock(&pool.node_taken).map_or(NODE_REFILL_DEFER, |t| t.elapsed());
        if ready > 0 && pool.node_runs.load(Ordering::Relaxed) > 0 && taken < NODE_REFILL_DEFER {
            // Woken when the run ends, or once the wait is over (runs back to back need it).
            let refill = pool.refill.clone();
            tokio::spawn(async move {
                tokio::time::sleep(NODE_REFILL_DEFER - taken).await;
                refill.notify_one();
            });
            return;
        }
        let id = format!("w{}", pool.workers.fetch_add(1, Ordering::Relaxed));
        match pool.fresh_node(prepared, &id, may_spawn).await {
            Ok(c) => lock(&pool.warm_node).push_back((prepared.key, c)),
            Err(e) => {
                tracing::warn!("cannot pre-start a node worker: {e}");
                return;
            }
        }
    }
}

/// Keeps `warm_workers` children of the current catalog ready until `shutdown` or until the
/// pool is dropped; woken when a run took a child and when the catalog changed.
pub async fn refill(
    pool: Weak<Pool>,
    preparations: Arc<Preparations>,
    mut changes: watch::Receiver<Arc<Snapshot>>,
    shutdown: CancellationToken,
) {
    loop {
        let Some(strong) = pool.upgrade() else {
            return;
        };
        if let Ok((_, prepared)) = preparations.current().await {
            loop {
                let missing = strong
                    .warm_workers
                    .saturating_sub(strong.keep_only(prepared.key));
                if missing == 0 || shutdown.is_cancelled() {
                    break;
                }
                // All at once: a worker takes milliseconds to make its namespaces its own,
                // which the fork server does not wait out, so two cores make two at a time.
                // Each joins the pool as soon as it is ready: a run waiting for one should not
                // wait for the slowest.
                let mut made: FuturesUnordered<_> = (0..missing)
                    .map(|_| {
                        let id = format!("w{}", strong.workers.fetch_add(1, Ordering::Relaxed));
                        let (strong, prepared) = (&strong, &prepared);
                        async move { strong.fresh(prepared, &id, None).await }
                    })
                    .collect();
                let mut failed = false;
                while let Some(c) = made.next().await {
                    match c {
                        Ok(c) => lock(&strong.warm).push_back((prepared.key, c)),
                        Err(e) => {
                            tracing::warn!("cannot pre-start a python worker: {e}");
                            failed = true;
                        }
                    }
                }
                if failed {
                    break;
                }
            }
            refill_node(&strong, &prepared, &shutdown).await;
        }
        let refill = strong.refill.clone();
        drop(strong);
        tokio::select! {
            _ = refill.notified() => {}
            _ = shutdown.cancelled() => return,
            Ok(()) = changes.changed() => {}
            _ = tokio::time::sleep(REFILL_LOOK_AGAIN) => {}
        }
    }
}
