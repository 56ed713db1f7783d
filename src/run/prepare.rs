//! The prepared-SDK cache: what is derived once per catalog for running code against it (the
//! SDK directory with its compiled modules, the argument validators), for the sidecar's current
//! catalog and for the catalogs requests bring along alike, keyed by [`CatalogKey`].
//!
//! Owns the SDK directories under the runtime directory: it writes them (`sdk::write`) and
//! removes the ones it evicts. It must not hold a run's snapshot (a run keeps its own: equal
//! keys mean equal SDKs, not equal callbacks) and must not start processes other than the
//! SDK's one-time compile.

use super::dispatch::Validators;
use super::sdk;
use crate::render::Snapshot;
use crate::util::lock;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OnceCell, watch};

/// Catalogs kept prepared; past this the least recently used one is dropped with its SDK
/// directory (never the current catalog's): requests that each bring new tools must not fill
/// the disk.
pub const MAX_PREPARED: usize = 32;

/// Which catalog a preparation, a warm child or a fork server belongs to. The SDK directory is
/// a function of it: `catalog.json` holds the version and what the fingerprint hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CatalogKey {
    pub version: u64,
    pub fingerprint: u64,
}

impl CatalogKey {
    pub fn of(snapshot: &Snapshot) -> CatalogKey {
        CatalogKey {
            version: snapshot.catalog.version,
            fingerprint: snapshot.catalog.fingerprint,
        }
    }
}

/// What is derived once per catalog for running code against it.
pub struct Prepared {
    pub key: CatalogKey,
    pub sdk_dir: PathBuf,
    pub validators: Validators,
    /// [`sdk::digest`] of `sdk_dir` as written: checked before a fork server starts from it.
    pub digest: u64,
    /// Set when `sdk_dir` was found changed (and removed): the next run prepares it again.
    pub tampered: AtomicBool,
}

impl Prepared {
    /// Whether `sdk_dir` still holds what was written. When it does not, says so in the log,
    /// removes the directory and marks this preparation for replacing.
    pub fn check(&self) -> bool {
        let found = sdk::digest(&self.sdk_dir);
        if matches!(found, Ok(d) if d == self.digest) {
            return true;
        }
        tracing::error!(
            "the SDK directory {} changed after it was written ({}); no process starts from it: \
             it is removed and prepared again",
            self.sdk_dir.display(),
            match found {
                Ok(_) => "its files differ".to_string(),
                Err(e) => e.to_string(),
            }
        );
        self.tampered.store(true, Ordering::Relaxed);
        sdk::remove(&self.sdk_dir);
        false
    }
}

/// One catalog's entry: empty until its preparation finished. Concurrent runs of a new
/// catalog wait for one preparation; runs of a prepared one find it filled and never wait.
type Slot = Arc<OnceCell<Arc<Prepared>>>;

/// The cache, shared by the runner and the pool's refill.
pub struct Preparations {
    runtime_dir: PathBuf,
    python: PathBuf,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    /// Least recently used first. The lock is held for lookups only, never across a
    /// preparation: the compile is a blocking `python -m py_compile` of ~100 ms.
    slots: Mutex<VecDeque<(CatalogKey, Slot)>>,
}

impl Preparations {
    pub fn new(
        runtime_dir: PathBuf,
        python: PathBuf,
        snapshots: watch::Receiver<Arc<Snapshot>>,
    ) -> Preparations {
        Preparations {
            runtime_dir,
            python,
            snapshots,
            slots: Mutex::new(VecDeque::new()),
        }
    }

    /// The sidecar's current catalog and its preparation.
    pub async fn current(&self) -> std::io::Result<(Arc<Snapshot>, Arc<Prepared>)> {
        let snapshot = self.snapshots.borrow().clone();
        let prepared = self.of(&snapshot).await?;
        Ok((snapshot, prepared))
    }

    /// The preparation of a catalog, made on first use off the async workers. A failed
    /// preparation is tried again by the next run that needs it.
    pub async fn of(&self, snapshot: &Arc<Snapshot>) -> std::io::Result<Arc<Prepared>> {
        let key = CatalogKey::of(snapshot);
        let slot = self.slot(key);
        slot.get_or_try_init(|| self.prepare(key, snapshot.clone()))
            .await
            .cloned()
    }

    /// The slot of a catalog, made most recently used; past [`MAX_PREPARED`] the least
    /// recently used other than the current catalog's goes.
    fn slot(&self, key: CatalogKey) -> Slot {
        let mut slots = lock(&self.slots);
        if let Some(i) = slots.iter().position(|(k, _)| *k == key)
            && let Some(entry) = slots.remove(i)
        {
            // A preparation found changed on disk is dropped here and made again below.
            if !entry
                .1
                .get()
                .is_some_and(|p| p.tampered.load(Ordering::Relaxed))
            {
                let slot = entry.1.clone();
                slots.push_back(entry);
                return slot;
            }
        }
        let slot = Slot::default();
        slots.push_back((key, slot.clone()));
        let current = CatalogKey::of(&self.snapshots.borrow());
        if slots.len() > MAX_PREPARED
            && let Some(i) = slots.iter().position(|(k, _)| *k != current)
            && let Some((_, old)) = slots.remove(i)
            // One still being prepared leaves its directory behind; rare, and harmless.
            && let Some(old) = old.get()
        {
            let dir = old.sdk_dir.clone();
            tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir));
        }
        slot
    }

    /// Writes and compiles the SDK on a blocking thread. If the run waiting for it goes away,
    /// the thread finishes anyway and the next run prepares again (`sdk::write` tolerates a
    /// concurrent writer of the same directory).
    async fn prepare(
        &self,
        key: CatalogKey,
        snapshot: Arc<Snapshot>,
    ) -> std::io::Result<Arc<Prepared>> {
        let (root, python) = (self.runtime_dir.clone(), self.python.clone());
        let (sdk_dir, digest) = tokio::task::spawn_blocking(move || {
            let dir = sdk::write(&root, &snapshot, &python)?;
            let digest = sdk::digest(&dir)?;
            Ok::<_, std::io::Error>((dir, digest))
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Arc::new(Prepared {
            key,
            sdk_dir,
            validators: Validators::default(),
            digest,
            tampered: AtomicBool::new(false),
        }))
    }
}
