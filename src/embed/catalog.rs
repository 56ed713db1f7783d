//! The search model at run time: each catalog version's tool vectors, embedded once off the
//! async workers, and a query's cosine similarity to them.
//!
//! A published catalog (the first, each reload) is embedded as soon as it is published
//! ([`Embeddings::follow`]); a catalog a request brings (LibreChat's, the MCP front door's) at
//! its first search, inline when few of its tools are new ([`INLINE_TOOLS`]), else in the
//! background. A search whose catalog's vectors are not ready waits for them, within what its
//! caller allows ([`MODEL_WAIT`] and the run's time left); only past that does BM25F answer
//! alone, and the search says why. Vectors come from the [`Store`] by the text embedded, so
//! only new or changed tools meet the model. One catalog is embedded at a time.
//!
//! A query's vector is cached by its text ([`QueryCache`]); a query not cached takes a turn
//! ([`Turns`]: at most one pass per asker, a bounded number at once, on a pool of a bounded
//! number of threads), so a run that floods searches slows only itself.
//!
//! Owns when to embed and the catalog's matrix of vectors. It must not rank
//! (`render::search::Index::rank` does) nor answer requests (the IPC bridge does).

use super::share::{QueryCache, Turns};
use super::store::{self, Key, Store};
use super::{EmbedError, Model, ModelError};
use crate::render::Snapshot;
use crate::render::search::{embedded_text, typed_query};
use crate::util::lock;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// New tools a search embeds itself before answering: a request's catalog of a few dozen
/// tools costs about a second at most; more wait for the background while BM25F answers.
pub const INLINE_TOOLS: usize = 64;

/// How long a search waits for its catalog's vectors at most (a run's search waits no longer
/// than the run's time left, less a second): on two cores 330 new tools take 4 to 9 s and
/// 1,000 take 17 to 24 s (`cargo bench --bench catalogs`); 5,000 take one to two minutes, and
/// their searches rank by words alone until then, saying so.
pub const MODEL_WAIT: Duration = Duration::from_secs(30);

/// Catalog versions whose matrices are kept (the published one, the one before while its
/// runs finish, and a few of the requests').
const KEPT_MATRICES: usize = 4;

/// The search model, its vectors, and the catalogs embedded so far. Cheap to clone.
#[derive(Clone)]
pub struct Embeddings {
    inner: Arc<Inner>,
}

struct Inner {
    model: Model,
    store: Mutex<Store>,
    /// The matrices of the latest catalogs, newest last.
    ready: Mutex<VecDeque<(Weak<Snapshot>, Arc<Matrix>)>>,
    /// Catalogs being embedded in the background (by address).
    pending: Mutex<HashSet<usize>>,
    /// One catalog embedded at a time.
    embedding: Mutex<()>,
    /// What the last catalog embedded took (for `/healthz`).
    last: Mutex<Option<Value>>,
    /// The catalog being embedded now: tools done and in all (for a search that could not
    /// wait, and `/healthz`).
    progress: Mutex<Option<(usize, usize)>>,
    /// Bumped each time a catalog's embedding ends, made or failed: what searches waiting
    /// for their catalog's vectors wake on.
    finished: watch::Sender<u64>,
    /// Whose query is embedded next, and on which threads.
    turns: Turns,
    /// The vectors of the latest queries.
    cache: Mutex<QueryCache>,
    /// Forward passes made for queries, and queries answered from the cache (for `/healthz`
    /// and the tests).
    passes: AtomicU64,
    cached: AtomicU64,
    stop: CancellationToken,
}

/// Vectors by the key of their text.
type Vectors = HashMap<Key, Arc<[f32]>>;

/// Who makes a catalog's matrix: a search, inline (a few new tools at most, never waiting
/// for another catalog), or the background (every new tool).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Inline {
    Search,
    Background,
}

/// Why a search was ranked by words alone (BM25F) though a search model is set: the
/// catalog's vectors were not ready within the wait, or could not be made. Shown to the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordsAlone(pub String);

impl std::fmt::Display for WordsAlone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`Inner::pending`] knows a catalog by.
fn address(snapshot: &Arc<Snapshot>) -> usize {
    Arc::as_ptr(snapshot) as usize
}

/// A catalog's embedding under way: how far it is, in [`Inner::progress`] and (every few
/// seconds once it takes more than one) in the log, which `exec` shows on stderr.
struct Progress<'a> {
    at: &'a Mutex<Option<(usize, usize)>>,
    started: Instant,
    said: std::cell::Cell<Instant>,
}

/// How often a long embedding says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

impl<'a> Progress<'a> {
    fn begin(at: &'a Mutex<Option<(usize, usize)>>, tools: usize) -> Progress<'a> {
        *lock(at) = Some((0, tools));
        let now = Instant::now();
        Progress {
            at,
            started: now,
            said: std::cell::Cell::new(now),
        }
    }

    /// `tools` more are being embedded now.
    fn advance(&self, tools: usize) {
        let mut at = lock(self.at);
        let Some((done, of)) = at.as_mut() else {
            return;
        };
        let now = Instant::now();
        if now - self.said.get() >= PROGRESS_EVERY
            || (*done == 0 && now - self.started >= Duration::from_secs(1))
        {
            self.said.set(now);
            tracing::info!(
                target: PROGRESS,
                "search model: embedding the catalog's new tools, {done} of {of} done ({} s)",
                self.started.elapsed().as_secs()
            );
        }
        *done = (*done + tools).min(*of);
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        let at = lock(self.at).take();
        let took = self.started.elapsed();
        if let Some((done, of)) = at
            && took >= Duration::from_secs(1)
        {
            tracing::info!(
                target: PROGRESS,
                "search model: {done} of {of} new tools embedded in {:.1} s",
                took.as_secs_f64()
            );
        }
    }
}

/// The log target of an embedding's progress: `exec` shows it on stderr.
const PROGRESS: &str = "ptc_sidecar::embed::progress";

/// One catalog's vectors, a row per tool in the order of `Rendered::lines`.
pub struct Matrix {
    dims: usize,
    data: Vec<f32>,
}

impl Matrix {
    /// The cosine of `query` (a unit vector) to each tool.
    pub fn cosines(&self, query: &[f32]) -> Vec<f32> {
        self.data
            .chunks_exact(self.dims.max(1))
            .map(|row| row.iter().zip(query).map(|(a, b)| a * b).sum())
            .collect()
    }
}

impl Embeddings {
    /// Loads the model in `dir` and the vectors kept in `state_dir`, off the async workers.
    pub async fn load(
        dir: &Path,
        state_dir: Option<&Path>,
        stop: CancellationToken,
    ) -> Result<Embeddings, ModelError> {
        let shown = dir.display().to_string();
        let (dir, state_dir) = (dir.to_path_buf(), state_dir.map(Path::to_path_buf));
        let started = Instant::now();
        let loaded = tokio::task::spawn_blocking(move || {
            let model = Model::load(&dir)?;
            let store = Store::open(state_dir.as_deref(), &model.id, model.dims);
            Ok::<_, ModelError>((model, store))
        })
        .await
        .map_err(|e| ModelError {
            dir: shown,
            what: format!("loading stopped: {e}"),
        })?;
        let (model, store) = loaded?;
        let turns = Turns::new(super::share::threads()).map_err(|e| ModelError {
            dir: model.dir.display().to_string(),
            what: e.0,
        })?;
        tracing::info!(
            "search model {} loaded in {} ms ({} dimensions, {} tool vectors kept{})",
            model.dir.display(),
            started.elapsed().as_millis(),
            model.dims,
            store.len(),
            store
                .path()
                .map_or_else(String::new, |p| format!(" in {}", p.display()))
        );
        Ok(Embeddings {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                ready: Mutex::new(VecDeque::new()),
                pending: Mutex::new(HashSet::new()),
                embedding: Mutex::new(()),
                last: Mutex::new(None),
                progress: Mutex::new(None),
                finished: watch::Sender::new(0),
                cache: Mutex::new(QueryCache::new(model.dims)),
                model,
                turns,
                passes: AtomicU64::new(0),
                cached: AtomicU64::new(0),
                stop,
            }),
        })
    }

    /// Embeds every catalog `snapshots` publishes, as it is published.
    pub fn follow(&self, mut snapshots: watch::Receiver<Arc<Snapshot>>) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let snapshot = snapshots.borrow_and_update().clone();
                this.prepare(snapshot).await;
                tokio::select! {
                    changed = snapshots.changed() => if changed.is_err() { break },
                    () = this.inner.stop.cancelled() => break,
                }
            }
        });
    }

    /// The cosine of `query` to each PTC tool of `snapshot` (in `Rendered::lines` order), for
    /// `asker` (a run's id): at most one of its queries is embedded at a time, and it waits
    /// for its turn behind the askers already waiting (see [`Turns`]), so its own searches sent
    /// at once wait behind each other, not other runs'. A query asked before (by anyone) is
    /// answered from the cache at once. When the catalog's vectors are not ready it waits for
    /// them up to `wait`; past that, or when they cannot be made, why BM25F ranks alone.
    pub async fn cosines_for(
        &self,
        asker: &str,
        snapshot: &Arc<Snapshot>,
        query: &str,
        wait: Duration,
    ) -> Result<Vec<f32>, WordsAlone> {
        self.search(Some(asker), snapshot, query, wait).await
    }

    /// [`Self::cosines_for`] for a caller that is no run: it waits only for its place among
    /// the passes at once.
    pub async fn cosines(
        &self,
        snapshot: &Arc<Snapshot>,
        query: &str,
        wait: Duration,
    ) -> Result<Vec<f32>, WordsAlone> {
        self.search(None, snapshot, query, wait).await
    }

    async fn search(
        &self,
        asker: Option<&str>,
        snapshot: &Arc<Snapshot>,
        query: &str,
        wait: Duration,
    ) -> Result<Vec<f32>, WordsAlone> {
        if let Some(cosines) = self.try_search(asker, snapshot, query).await {
            return Ok(cosines);
        }
        if !self.ready_within(snapshot, wait).await {
            return Err(self.why_not_ready());
        }
        self.try_search(asker, snapshot, query)
            .await
            .ok_or_else(|| self.why_not_ready())
    }

    /// The cosines, when the catalog's vectors are ready or a few new tools can be embedded
    /// now; else `None`, its embedding under way in the background.
    async fn try_search(
        &self,
        asker: Option<&str>,
        snapshot: &Arc<Snapshot>,
        query: &str,
    ) -> Option<Vec<f32>> {
        // Being embedded in the background: nothing to look up until it is done (each search
        // would otherwise hash every tool's text again to find the catalog still unready).
        if lock(&self.inner.pending).contains(&address(snapshot)) {
            return None;
        }
        let key = store::key(query);
        // Asked before and the catalog ready: no pass, so no turn to wait for.
        let known = lock(&self.inner.cache).get(&key);
        if let (Some(vector), Some(matrix)) = (known, self.ready(snapshot)) {
            self.inner.cached.fetch_add(1, Ordering::Relaxed);
            let cosines = tokio::task::spawn_blocking(move || matrix.cosines(&vector));
            return cosines.await.ok();
        }
        let _turn = self.inner.turns.take(asker).await?;
        let (this, snap, query) = (self.clone(), snapshot.clone(), query.to_string());
        let found = tokio::task::spawn_blocking(move || {
            this.inner.turns.run(|| {
                let matrix = this.matrix(&snap, Inline::Search)?;
                Some(matrix.cosines(&this.query_vector(&query, &key)?))
            })
        })
        .await
        .ok()
        .flatten();
        if found.is_none() && !self.inner.stop.is_cancelled() {
            let (this, snap) = (self.clone(), snapshot.clone());
            tokio::spawn(async move { this.prepare(snap).await });
        }
        found
    }

    /// Waits up to `wait` for `snapshot`'s vectors, its embedding started if it is not under
    /// way; whether they are ready. A catalog whose embedding ended without them (the model
    /// failed) is not waited for.
    async fn ready_within(&self, snapshot: &Arc<Snapshot>, wait: Duration) -> bool {
        let mut finished = self.inner.finished.subscribe();
        if self.ready(snapshot).is_some() {
            return true;
        }
        if wait.is_zero() || self.inner.stop.is_cancelled() {
            return false;
        }
        if !lock(&self.inner.pending).contains(&address(snapshot)) {
            let (this, snap) = (self.clone(), snapshot.clone());
            tokio::spawn(async move { this.prepare(snap).await });
        }
        let until = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(until, finished.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.ready(snapshot).is_some(),
            }
            if self.ready(snapshot).is_some() {
                return true;
            }
            // Ended without its vectors, and not started again: they will not come.
            if !lock(&self.inner.pending).contains(&address(snapshot)) {
                tokio::task::yield_now().await;
                if !lock(&self.inner.pending).contains(&address(snapshot)) {
                    return self.ready(snapshot).is_some();
                }
            }
        }
    }

    /// Why a search ranks by words alone: its catalog still being embedded (how far), or the
    /// model's failure.
    fn why_not_ready(&self) -> WordsAlone {
        WordsAlone(self.why_not_ready_text())
    }

    fn why_not_ready_text(&self) -> String {
        if let Some((done, of)) = *lock(&self.inner.progress) {
            return format!(
                "ranked by words alone: the search model is still embedding this catalog \
                 ({done} of {of} new tools)"
            );
        }
        let failed = lock(&self.inner.last)
            .as_ref()
            .and_then(|l| l.get("error").and_then(Value::as_str).map(str::to_string));
        match failed {
            Some(error) => format!("ranked by words alone: the search model failed: {error}"),
            None => "ranked by words alone: this catalog's vectors are not ready yet".into(),
        }
    }

    /// Whether `snapshot`'s vectors are ready: every search of it ranks with the model.
    pub fn is_ready(&self, snapshot: &Arc<Snapshot>) -> bool {
        self.ready(snapshot).is_some()
    }

    /// Embeds `snapshot`'s catalog off the async workers (the tools the store lacks), unless
    /// it is ready or under way; returns when done.
    pub async fn prepare(&self, snapshot: Arc<Snapshot>) {
        let address = address(&snapshot);
        if self.ready(&snapshot).is_some() || !lock(&self.inner.pending).insert(address) {
            return;
        }
        let this = self.clone();
        let _ =
            tokio::task::spawn_blocking(move || this.matrix(&snapshot, Inline::Background)).await;
        lock(&self.inner.pending).remove(&address);
        self.inner.finished.send_modify(|n| *n += 1);
    }

    /// The vector of `query` (keyed `key`): cached (another search of it may have made it
    /// while this one waited for its turn), else embedded and cached. Blocking.
    fn query_vector(&self, query: &str, key: &Key) -> Option<Arc<[f32]>> {
        if let Some(vector) = lock(&self.inner.cache).get(key) {
            self.inner.cached.fetch_add(1, Ordering::Relaxed);
            return Some(vector);
        }
        // What BM25F reads too (`Index::rank`): each value followed by its kind.
        let vector: Arc<[f32]> = self
            .inner
            .model
            .embed_query(&typed_query(query))
            .ok()?
            .into();
        self.inner.passes.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.cache).put(*key, vector.clone());
        Some(vector)
    }

    /// Forward passes made for queries so far, and queries answered from the cache.
    pub fn query_counts(&self) -> (u64, u64) {
        (
            self.inner.passes.load(Ordering::Relaxed),
            self.inner.cached.load(Ordering::Relaxed),
        )
    }

    /// The matrix of `snapshot` kept from before.
    fn ready(&self, snapshot: &Arc<Snapshot>) -> Option<Arc<Matrix>> {
        lock(&self.inner.ready)
            .iter()
            .find(|(s, _)| s.upgrade().is_some_and(|s| Arc::ptr_eq(&s, snapshot)))
            .map(|(_, m)| m.clone())
    }

    /// The matrix of `snapshot`: kept, or made from the store after embedding the tools it
    /// lacks (for a search, only when they are few and no other catalog is being embedded).
    /// Blocking.
    fn matrix(&self, snapshot: &Arc<Snapshot>, how: Inline) -> Option<Arc<Matrix>> {
        if let Some(matrix) = self.ready(snapshot) {
            return Some(matrix);
        }
        let started = Instant::now();
        let texts: Vec<String> = snapshot
            .rendered
            .lines
            .iter()
            .map(|(name, _)| {
                snapshot
                    .catalog
                    .get(name)
                    .map(embedded_text)
                    .unwrap_or_default()
            })
            .collect();
        let keys: Vec<Key> = texts.iter().map(|t| store::key(t)).collect();
        let mut new: Vec<usize> = {
            let store = lock(&self.inner.store);
            let mut seen = HashSet::new();
            (0..keys.len())
                .filter(|&i| store.get(&keys[i]).is_none() && seen.insert(keys[i]))
                .collect()
        };
        if how == Inline::Search && new.len() > INLINE_TOOLS {
            return None;
        }
        let embedded = new.len();
        let made = match self.embed_new(&texts, &keys, &mut new, how) {
            Ok(Some(made)) => made,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(
                    "search model: embedding the catalog's tools failed: {e}; BM25F ranks alone"
                );
                *lock(&self.inner.last) = Some(json!({"tools": keys.len(), "error": e.0}));
                return None;
            }
        };
        let store = lock(&self.inner.store);
        let dims = self.inner.model.dims;
        let mut data = Vec::with_capacity(keys.len() * dims);
        for key in &keys {
            let vector = store.get(key).or_else(|| made.get(key).cloned())?;
            data.extend_from_slice(&vector);
        }
        drop(store);
        let matrix = Arc::new(Matrix { dims, data });
        let mut ready = lock(&self.inner.ready);
        ready.retain(|(s, _)| s.strong_count() > 0);
        if ready.len() >= KEPT_MATRICES {
            ready.pop_front();
        }
        ready.push_back((Arc::downgrade(snapshot), matrix.clone()));
        drop(ready);
        let ms = started.elapsed().as_millis();
        if embedded > 0 {
            tracing::info!(
                "search model: {embedded} of {} tools embedded in {ms} ms",
                keys.len()
            );
        }
        *lock(&self.inner.last) = Some(json!({
            "tools": keys.len(), "embedded": embedded, "from_store": keys.len() - embedded,
            "ms": ms,
        }));
        Some(matrix)
    }

    /// Embeds the tools at `new` (indexes into `texts`), one catalog at a time, storing each
    /// batch as it is done; returns what it made, or `None` for a search while another
    /// catalog is being embedded (the search holds a turn every run may be waiting for, so it
    /// must not wait minutes for a large catalog: the background embeds this one next).
    fn embed_new(
        &self,
        texts: &[String],
        keys: &[Key],
        new: &mut Vec<usize>,
        how: Inline,
    ) -> Result<Option<Vectors>, EmbedError> {
        let mut made = HashMap::new();
        if new.is_empty() {
            return Ok(Some(made));
        }
        let _one_catalog = match (how, self.inner.embedding.try_lock()) {
            (_, Ok(guard)) => guard,
            (_, Err(TryLockError::Poisoned(p))) => p.into_inner(),
            (Inline::Search, Err(TryLockError::WouldBlock)) => return Ok(None),
            (Inline::Background, Err(TryLockError::WouldBlock)) => lock(&self.inner.embedding),
        };
        // Another catalog embedded meanwhile may have stored some of these.
        new.retain(|&i| lock(&self.inner.store).get(&keys[i]).is_none());
        let keep: HashSet<Key> = keys.iter().copied().collect();
        // Texts of like length together across the whole catalog, not only within a chunk:
        // each chunk sorts its own by tokens, so its batches pad little.
        new.sort_by_key(|&i| texts[i].len());
        let progress = Progress::begin(&self.inner.progress, new.len());
        for chunk in new.chunks(4 * super::BATCH) {
            if self.inner.stop.is_cancelled() {
                return Err(EmbedError("the sidecar is shutting down".into()));
            }
            progress.advance(chunk.len());
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
            let vectors = self.inner.model.embed(&batch)?;
            let pairs: Vec<(Key, Vec<f32>)> = chunk.iter().map(|&i| keys[i]).zip(vectors).collect();
            for (key, vector) in &pairs {
                made.insert(*key, Arc::from(vector.as_slice()));
            }
            lock(&self.inner.store).add(pairs, &keep);
        }
        Ok(Some(made))
    }

    /// What `/healthz` says of search with a model.
    pub fn health(&self) -> Value {
        let model = &self.inner.model;
        let cache = lock(&self.inner.cache);
        let store = lock(&self.inner.store);
        json!({
            "ranking": "bm25f+embeddings",
            "model": {"dir": model.dir, "id": &model.id[..16.min(model.id.len())], "dims": model.dims},
            "vectors": {
                "known": store.len(),
                "file": store.path(),
                "embedding": !lock(&self.inner.pending).is_empty(),
                "progress": lock(&self.inner.progress).map(|(done, of)| json!({"done": done, "of": of})),
            },
            "last_embedded": *lock(&self.inner.last),
            "queries": {
                "passes": self.inner.passes.load(Ordering::Relaxed),
                "from_cache": self.inner.cached.load(Ordering::Relaxed),
                "cached": cache.len(),
                "cache_capacity": cache.capacity(),
                "passes_at_once": self.inner.turns.threads(),
                "threads": self.inner.turns.threads(),
                "askers": self.inner.turns.askers(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::source::ToolDef;
    use crate::catalog::{Catalog, CatalogInput, Policy, ServerTools};
    use std::time::Duration;

    fn tool(name: &str, description: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            output_schema: None,
            annotations: None,
        }
    }

    /// A small catalog, its vectors made.
    async fn ready() -> Option<(Embeddings, Arc<Snapshot>)> {
        let dir = super::super::model_dir_for_tests()?;
        let embeddings = Embeddings::load(&dir, None, CancellationToken::new())
            .await
            .unwrap();
        let input = CatalogInput {
            servers: vec![ServerTools {
                server: "fs".into(),
                tools: vec![
                    tool("read_file", "Read the complete contents of a file."),
                    tool("list_directory", "List the entries of a directory."),
                    tool("move_file", "Move or rename files and directories."),
                ],
            }],
            ..CatalogInput::default()
        };
        let policy = Policy {
            ptc_enabled: true,
            ..Policy::default()
        };
        let snapshot = Arc::new(Snapshot::new(Catalog::build(input, &policy, 1)));
        embeddings.prepare(snapshot.clone()).await;
        assert!(embeddings.ready(&snapshot).is_some());
        Some((embeddings, snapshot))
    }

    fn median(mut times: Vec<Duration>) -> Duration {
        times.sort();
        times[times.len() / 2]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeated_query_costs_no_forward_pass() {
        let Some((model, snap)) = ready().await else {
            return;
        };
        let query = "what is in this folder";
        let first = model.cosines(&snap, query, Duration::ZERO).await.unwrap();
        assert_eq!(first.len(), 3);
        assert_eq!(model.query_counts(), (1, 0));
        // Again, by a run and by no one: the cached vector, the same cosines.
        assert_eq!(
            model
                .cosines_for("run-1", &snap, query, Duration::ZERO)
                .await
                .unwrap(),
            first
        );
        assert_eq!(
            model.cosines(&snap, query, Duration::ZERO).await.unwrap(),
            first
        );
        assert_eq!(model.query_counts(), (1, 2));
        // Another text is another pass.
        model
            .cosines(&snap, "what is in this folder?", Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(model.query_counts(), (2, 2));
        let health = model.health();
        assert_eq!(health["queries"]["cached"], 2, "{health}");
        assert_eq!(health["queries"]["threads"], super::super::share::threads());
    }

    /// The review's attack: one run sends 16 searches at once; another run's one search
    /// answers within twice an idle search (medians of tries, an idle search measured just
    /// before each, so the machine's other load weighs on both alike), before the flood is
    /// done. It waits for the pass running (half a pass on average: it comes at a different
    /// moment of it each try), then makes its own. Without the turn per asker (the passes
    /// served in the order the searches came), it waits for every pass of the flood ahead of
    /// it, 16 and more times an idle search, and this fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_that_floods_searches_slows_only_itself() {
        let Some((model, snap)) = ready().await else {
            return;
        };
        // Queries of like length, each asked once (a cached one costs no pass).
        let query = |who: &str, i: usize| format!("{who} looks for the file number {i}");
        const TRIES: usize = 7;
        let (mut idle, mut victim, mut flood_left) = (Vec::new(), Vec::new(), 0);
        for attempt in 0..TRIES {
            let t = Instant::now();
            let q = query(&format!("idle {attempt}"), 0);
            assert!(
                model
                    .cosines_for("idle", &snap, &q, Duration::ZERO)
                    .await
                    .is_ok()
            );
            let alone = t.elapsed();
            idle.push(alone);
            let flood: Vec<_> = (0..16)
                .map(|i| {
                    let (model, snap) = (model.clone(), snap.clone());
                    let q = query(&format!("flood {attempt}"), i);
                    tokio::spawn(async move {
                        model.cosines_for("flood", &snap, &q, Duration::ZERO).await
                    })
                })
                .collect();
            // The victim comes at a different moment of the flood's first pass each try.
            tokio::time::sleep(alone * (2 * attempt as u32 + 1) / (2 * TRIES as u32)).await;
            let t = Instant::now();
            let q = query(&format!("victim {attempt}"), 0);
            let mine = model.cosines_for("victim", &snap, &q, Duration::ZERO).await;
            victim.push(t.elapsed());
            assert!(mine.is_ok());
            flood_left += flood.iter().filter(|f| !f.is_finished()).count();
            for f in flood {
                assert!(f.await.unwrap().is_ok());
            }
        }
        let (idle_median, victim_median) = (median(idle.clone()), median(victim.clone()));
        println!("idle searches {idle:?}; the victim's during a flood {victim:?}");
        assert!(
            victim_median <= idle_median * 2,
            "the victim's search took {victim_median:?} at the median ({victim:?}), an idle \
             one {idle_median:?} ({idle:?})"
        );
        assert!(
            flood_left >= TRIES * 8,
            "the flood was mostly done before the victim's search answered ({flood_left} \
             searches left over {TRIES} tries)"
        );
        assert_eq!(model.query_counts().0, TRIES as u64 * 18);
    }

    /// What queries take of the cores: 16 runs searching at once, the process's CPU time
    /// over the wall time (printed; other tests share the process, so it is not asserted).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_take_their_share_of_the_cores() {
        let Some((model, snap)) = ready().await else {
            return;
        };
        let cpu = || {
            // SAFETY: a zeroed rusage is a valid one, and getrusage writes the struct it is
            // given and nothing else.
            let usage = unsafe {
                let mut usage: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_SELF, &mut usage);
                usage
            };
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            secs(usage.ru_utime) + secs(usage.ru_stime)
        };
        let (t, before) = (Instant::now(), cpu());
        let searches: Vec<_> = (0..32)
            .map(|i| {
                let (model, snap) = (model.clone(), snap.clone());
                tokio::spawn(async move {
                    let q = format!("run {i} wants to read a file");
                    model
                        .cosines_for(&format!("run-{i}"), &snap, &q, Duration::ZERO)
                        .await
                })
            })
            .collect();
        for s in searches {
            assert!(s.await.unwrap().is_ok());
        }
        let (wall, used) = (t.elapsed().as_secs_f64(), cpu() - before);
        println!(
            "32 searches of 32 runs: {wall:.2} s, {used:.2} s of CPU: {:.2} cores (share: {})",
            used / wall,
            super::super::share::threads()
        );
        assert_eq!(
            model.inner.turns.askers(),
            0,
            "no asker is kept after its search"
        );
    }

    /// A catalog too large to embed inline: a search that may wait ranks with the model on
    /// its very first try; one that may not says why it ranks by words alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_search_of_a_large_catalog_waits_for_its_vectors() {
        let Some(dir) = super::super::model_dir_for_tests() else {
            return;
        };
        let embeddings = Embeddings::load(&dir, None, CancellationToken::new())
            .await
            .unwrap();
        let many = |n: usize, what: &str| -> Arc<Snapshot> {
            let tools = (0..n)
                .map(|i| tool(&format!("{what}_{i}"), &format!("Tool {i} about {what}.")))
                .collect();
            let input = CatalogInput {
                servers: vec![ServerTools {
                    server: "big".into(),
                    tools,
                }],
                ..CatalogInput::default()
            };
            let policy = Policy {
                ptc_enabled: true,
                ..Policy::default()
            };
            Arc::new(Snapshot::new(Catalog::build(input, &policy, 1)))
        };
        let n = INLINE_TOOLS + 40;
        let impatient = many(n, "weather");
        let why = embeddings
            .cosines(&impatient, "rain tomorrow", Duration::ZERO)
            .await
            .unwrap_err();
        assert!(why.0.starts_with("ranked by words alone"), "{why}");
        let patient = many(n, "invoices");
        let cosines = embeddings
            .cosines(&patient, "unpaid bills", MODEL_WAIT)
            .await
            .unwrap();
        assert_eq!(cosines.len(), n);
        assert!(embeddings.is_ready(&patient));
    }
}
