//! The search model's share of the sidecar when it embeds queries: how many forward passes run
//! at once and on how many threads, whose turn is next, and the vectors of queries asked before.
//!
//! A query's forward pass runs on [`Turns`]' own rayon pool of [`threads`] threads: candle's
//! matrix kernels (gemm) and softmax fan out over the rayon pool they are called from, so that
//! pool, not the machine's cores, bounds what queries take. At most as many passes run at once
//! as the pool has threads, and at most one per asker (a run): an asker's second search waits
//! for its first, then joins the queue behind every asker already waiting (the queue is first
//! come, first served, and holds one place per asker), so a run that floods searches waits
//! behind itself while every other run's search waits for at most one pass of each asker
//! ahead of it. A query asked before is answered from [`QueryCache`] without a pass or a turn.
//!
//! Owns the turns, the pool and the cache; it must not embed (`Model` does) nor choose what is
//! embedded (`catalog` does).

use super::EmbedError;
use super::store::Key;
use crate::util::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// Queries whose vectors are kept: repeated searches (a model retrying, many runs of one
/// agent asking alike) cost no pass, and the cache stays a few megabytes.
pub const MAX_CACHED_QUERIES: usize = 2048;

/// Bytes the cached query vectors may take at most (vectors, keys and the table's own
/// share): 2,048 vectors of 384 dimensions take about 3.3 MiB.
pub const MAX_CACHE_BYTES: usize = 4 << 20;

/// What one cached vector costs beyond its floats: its key, the `Arc`'s counts, the table's
/// slot and the age.
const ENTRY_OVERHEAD: usize = 96;

/// Threads the queries' pool has, which is also how many passes run at once: half the cores
/// (at least one), so runs searching as fast as they can leave the other half to the runs
/// themselves and to the sidecar.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The vectors of the latest queries, by the key of their text, least recently used first
/// out. Bounded by [`MAX_CACHED_QUERIES`] and [`MAX_CACHE_BYTES`].
pub struct QueryCache {
    entries: HashMap<Key, (Arc<[f32]>, u64)>,
    /// Counts lookups and insertions: an entry's age is the tick it was last used at.
    tick: u64,
    capacity: usize,
}

impl QueryCache {
    /// An empty cache for vectors of `dims` dimensions.
    pub fn new(dims: usize) -> QueryCache {
        let entry = dims * std::mem::size_of::<f32>() + ENTRY_OVERHEAD;
        QueryCache {
            entries: HashMap::new(),
            tick: 0,
            capacity: (MAX_CACHE_BYTES / entry).clamp(1, MAX_CACHED_QUERIES),
        }
    }

    /// The vector of the query keyed `key`, when cached (it becomes the most recent).
    pub fn get(&mut self, key: &Key) -> Option<Arc<[f32]>> {
        self.tick += 1;
        let (vector, used) = self.entries.get_mut(key)?;
        *used = self.tick;
        Some(vector.clone())
    }

    /// Keeps `vector` as the query keyed `key`'s, dropping the least recently used when full.
    pub fn put(&mut self, key: Key, vector: Arc<[f32]>) {
        self.tick += 1;
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            // A scan of at most a few thousand ages, once per forward pass (milliseconds).
            let oldest = self.entries.iter().min_by_key(|(_, (_, used))| *used);
            if let Some((&old, _)) = oldest {
                self.entries.remove(&old);
            }
        }
        self.entries.insert(key, (vector, self.tick));
    }

    /// Queries cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Most queries kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Whose forward pass runs next, and where it runs.
pub struct Turns {
    /// Each asker's own turn, while one of its searches holds or waits for it; a dead entry
    /// (no search of that asker left) is swept when a new asker comes.
    askers: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// The passes that may run at once; tokio's semaphore serves waiters first come, first
    /// served.
    passes: Arc<Semaphore>,
    pool: rayon::ThreadPool,
    threads: usize,
}

/// A turn to run one forward pass: the asker's own and a place among the passes at once,
/// both given back when dropped.
pub struct Turn {
    _pass: OwnedSemaphorePermit,
    _asker: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Turns for `threads` passes at once, on a pool of as many threads.
    pub fn new(threads: usize) -> Result<Turns, EmbedError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("ptc-embed-{i}"))
            .build()
            .map_err(|e| format!("cannot start the search model's {threads} threads: {e}"))?;
        Ok(Turns {
            askers: Mutex::new(HashMap::new()),
            passes: Arc::new(Semaphore::new(threads)),
            pool,
            threads,
        })
    }

    /// Waits for a turn: `asker`'s own first (none: a caller on its own), then a place among
    /// the passes at once. `None` only when the turns are closed (never, in practice).
    pub async fn take(&self, asker: Option<&str>) -> Option<Turn> {
        let asker = match asker {
            Some(name) => Some(self.asker(name).lock_owned().await),
            None => None,
        };
        let pass = self.passes.clone().acquire_owned().await.ok()?;
        Some(Turn {
            _pass: pass,
            _asker: asker,
        })
    }

    /// `asker`'s turn, made at its first search in flight.
    fn asker(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut askers = lock(&self.askers);
        if let Some(turn) = askers.get(name).and_then(Weak::upgrade) {
            return turn;
        }
        // Only askers with a search in flight keep an entry: the table is as long as that.
        askers.retain(|_, turn| turn.strong_count() > 0);
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        askers.insert(name.to_string(), Arc::downgrade(&turn));
        turn
    }

    /// Runs `work` on the pool and returns what it gives: every rayon task it starts (candle's
    /// kernels) runs on the pool's threads. Blocking: call it from a blocking thread.
    pub fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.pool.install(work)
    }

    /// Threads of the pool, and passes at once.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Askers with a search holding or waiting for a turn.
    pub fn askers(&self) -> usize {
        lock(&self.askers)
            .values()
            .filter(|t| t.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn vector(x: f32) -> Arc<[f32]> {
        vec![x; 4].into()
    }

    #[test]
    fn the_cache_drops_the_least_recently_used() {
        let mut cache = QueryCache::new(4);
        assert_eq!(cache.capacity(), MAX_CACHED_QUERIES);
        cache.capacity = 3;
        let key = |i: u8| [i; 32];
        for i in 0..3 {
            cache.put(key(i), vector(f32::from(i)));
        }
        assert!(cache.get(&key(0)).is_some()); // 0 is now the most recent, 1 the least
        cache.put(key(3), vector(3.0));
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&key(1)).is_none());
        for i in [0, 2, 3] {
            assert_eq!(cache.get(&key(i)).unwrap()[0], f32::from(i));
        }
        // Putting a key again replaces its vector and drops nothing.
        cache.put(key(2), vector(9.0));
        assert_eq!((cache.len(), cache.get(&key(2)).unwrap()[0]), (3, 9.0));
    }

    #[test]
    fn the_cache_is_bounded_in_bytes() {
        let cache = QueryCache::new(384);
        let bytes = cache.capacity() * (384 * 4 + ENTRY_OVERHEAD);
        assert!(bytes <= MAX_CACHE_BYTES, "{bytes}");
        assert!(cache.capacity() >= 1000, "{}", cache.capacity());
        assert_eq!(
            QueryCache::new(1 << 24).capacity(),
            1,
            "one vector at least"
        );
    }

    /// An asker's second turn waits for its first; another asker's does not wait for the
    /// first asker's queue, only for the pass running; the table forgets finished askers.
    #[tokio::test]
    async fn an_asker_waits_behind_itself_not_others() {
        let turns = Arc::new(Turns::new(1).unwrap());
        let first = turns.take(Some("a")).await.unwrap();
        let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiting = Vec::new();
        for i in 0..3 {
            let (turns, tx) = (turns.clone(), tx.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = turns.take(Some("a")).await;
                tx.send(format!("a{i}")).unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (t, tx2) = (turns.clone(), tx.clone());
        waiting.push(tokio::spawn(async move {
            let _turn = t.take(Some("b")).await;
            tx2.send("b".to_string()).unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(turns.askers(), 2);
        assert!(
            order.try_recv().is_err(),
            "every turn waits for the pass running"
        );
        drop(first);
        for task in waiting {
            task.await.unwrap();
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some(who) = order.recv().await {
            got.push(who);
        }
        // b asked after a's three more queued, and goes right after a's pass running, not
        // after a's last.
        assert_eq!(got, ["b", "a0", "a1", "a2"]);
        assert_eq!(turns.askers(), 0);
        assert!(lock(&turns.askers).len() <= 2);
    }

    #[test]
    fn the_pool_has_its_threads() {
        let turns = Turns::new(2).unwrap();
        let seen = turns.run(|| {
            (
                rayon::current_num_threads(),
                std::thread::current().name().map(String::from),
            )
        });
        assert_eq!(seen.0, 2);
        assert!(seen.1.unwrap().starts_with("ptc-embed-"));
        assert!(threads() >= 1);
    }
}
