//! The search model at run time: each catalog version's tool vectors, embedded once off the
//! async workers, and a query's cosine similarity to them.
//!
//! A published catalog (the first, each reload) is embedded as soon as it is published
//! ([`Embeddings::follow`]); a catalog a request brings (LibreChat's, the MCP front door's) at
//! its first search, inline when few of its tools are new ([`INLINE_TOOLS`]), else in the
//! background while BM25F answers alone. Vectors come from the [`Store`] by the text
//! embedded, so only new or changed tools meet the model. One catalog is embedded at a time;
//! queries do not wait for it.
//!
//! Owns when to embed and the catalog's matrix of vectors. It must not rank
//! (`render::search::Index::rank` does) nor answer requests (the IPC bridge does).

use super::store::{self, Key, Store};
use super::{EmbedError, Model, ModelError};
use crate::render::Snapshot;
use crate::render::search::embedded_text;
use crate::util::lock;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// New tools a search embeds itself before answering: a request's catalog of a few dozen
/// tools costs about a second at most; more wait for the background while BM25F answers.
pub const INLINE_TOOLS: usize = 64;

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
    /// Queries embedded at once, one per core: a run sending searches as fast as it can takes
    /// the cores' share of one, not every blocking thread.
    queries: tokio::sync::Semaphore,
    stop: CancellationToken,
}

/// What [`Inner::pending`] knows a catalog by.
fn address(snapshot: &Arc<Snapshot>) -> usize {
    Arc::as_ptr(snapshot) as usize
}

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
                model,
                store: Mutex::new(store),
                ready: Mutex::new(VecDeque::new()),
                pending: Mutex::new(HashSet::new()),
                embedding: Mutex::new(()),
                last: Mutex::new(None),
                queries: tokio::sync::Semaphore::new(
                    std::thread::available_parallelism().map_or(2, |n| n.get()),
                ),
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

    /// The cosine of `query` to each PTC tool of `snapshot` (in `Rendered::lines` order), or
    /// `None` while the catalog's vectors are not ready (BM25F answers alone meanwhile).
    pub async fn cosines(&self, snapshot: &Arc<Snapshot>, query: &str) -> Option<Vec<f32>> {
        // Being embedded in the background: nothing to look up until it is done (each search
        // would otherwise hash every tool's text again to find the catalog still unready).
        if lock(&self.inner.pending).contains(&address(snapshot)) {
            return None;
        }
        let _turn = self.inner.queries.acquire().await.ok()?;
        let (this, snap, query) = (self.clone(), snapshot.clone(), query.to_string());
        let found = tokio::task::spawn_blocking(move || {
            let matrix = this.matrix(&snap, INLINE_TOOLS)?;
            let mut vectors = this.inner.model.embed(&[&query]).ok()?;
            Some(matrix.cosines(&vectors.pop()?))
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

    /// Embeds `snapshot`'s catalog off the async workers (the tools the store lacks), unless
    /// it is ready or under way; returns when done.
    pub async fn prepare(&self, snapshot: Arc<Snapshot>) {
        let address = address(&snapshot);
        if self.ready(&snapshot).is_some() || !lock(&self.inner.pending).insert(address) {
            return;
        }
        let this = self.clone();
        let _ = tokio::task::spawn_blocking(move || this.matrix(&snapshot, usize::MAX)).await;
        lock(&self.inner.pending).remove(&address);
    }

    /// The matrix of `snapshot` kept from before.
    fn ready(&self, snapshot: &Arc<Snapshot>) -> Option<Arc<Matrix>> {
        lock(&self.inner.ready)
            .iter()
            .find(|(s, _)| s.upgrade().is_some_and(|s| Arc::ptr_eq(&s, snapshot)))
            .map(|(_, m)| m.clone())
    }

    /// The matrix of `snapshot`: kept, or made from the store after embedding the tools it
    /// lacks, when they are at most `max_new`. Blocking.
    fn matrix(&self, snapshot: &Arc<Snapshot>, max_new: usize) -> Option<Arc<Matrix>> {
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
        if new.len() > max_new {
            return None;
        }
        let embedded = new.len();
        let made = match self.embed_new(&texts, &keys, &mut new) {
            Ok(made) => made,
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
    /// batch as it is done; returns what it made.
    fn embed_new(
        &self,
        texts: &[String],
        keys: &[Key],
        new: &mut Vec<usize>,
    ) -> Result<HashMap<Key, Arc<[f32]>>, EmbedError> {
        let mut made = HashMap::new();
        if new.is_empty() {
            return Ok(made);
        }
        let _one_catalog = lock(&self.inner.embedding);
        // Another catalog embedded meanwhile may have stored some of these.
        new.retain(|&i| lock(&self.inner.store).get(&keys[i]).is_none());
        let keep: HashSet<Key> = keys.iter().copied().collect();
        for chunk in new.chunks(4 * super::BATCH) {
            if self.inner.stop.is_cancelled() {
                return Err(EmbedError("the sidecar is shutting down".into()));
            }
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
            let vectors = self.inner.model.embed(&batch)?;
            let pairs: Vec<(Key, Vec<f32>)> = chunk.iter().map(|&i| keys[i]).zip(vectors).collect();
            for (key, vector) in &pairs {
                made.insert(*key, Arc::from(vector.as_slice()));
            }
            lock(&self.inner.store).add(pairs, &keep);
        }
        Ok(made)
    }

    /// What `/healthz` says of search with a model.
    pub fn health(&self) -> Value {
        let model = &self.inner.model;
        let store = lock(&self.inner.store);
        json!({
            "ranking": "bm25f+embeddings",
            "model": {"dir": model.dir, "id": &model.id[..16.min(model.id.len())], "dims": model.dims},
            "vectors": {
                "known": store.len(),
                "file": store.path(),
                "embedding": !lock(&self.inner.pending).is_empty(),
            },
            "last_embedded": *lock(&self.inner.last),
        })
    }
}
