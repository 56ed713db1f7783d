//! A run's files: what `save_file` stores and where the full output of a stream that was cut
//! goes. The run layer only writes them; where they live and how they are served is the
//! [`FileStore`]'s (the API gives a session run its session's workspace, and any other run
//! artifacts of its own, kept for `PTC_ARTIFACT_TTL`).
//!
//! Owns [`RunFile`] (a file as a result shows it), [`FileStore`] and the [`NewFile`]s it
//! makes, each byte counted against the store's quotas before it is written, [`Budgeted`] (one
//! run's files bounded together by `PTC_SCRATCH_MAX_MB`) and [`ChunkReader`] (a body streamed
//! to a store's writer thread). It must not know sessions or HTTP.

use axum::body::Bytes;
use serde::Serialize;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest file one `save_file` call stores: files for the user, not a disk.
pub const MAX_SAVE_BYTES: usize = 32 << 20;

/// What a save copies from its body into the store at a time: the most of a `save_file` body
/// the sidecar holds (`save_file` once held whole bodies, 959 MiB in 4.6 s past 64 MiB quotas).
pub const SAVE_CHUNK: usize = 64 << 10;

/// Most of a stream's output saved in full when it is cut: a run printing without end fills
/// neither the disk nor the session's quota.
pub const MAX_SPILL_BYTES: u64 = 64 << 20;

/// A file a run made, and where the API serves it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFile {
    /// Its name in the session's workspace, or among the run's artifacts.
    pub name: String,
    pub size: u64,
    pub mime: String,
    /// The control API's path that serves it (same auth as the rest of the API).
    pub url: String,
}

/// Why a run's file could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The run keeps no files (a protocol without a file store).
    #[error("save_file is not available in this run: only runs of POST /v1/exec_code keep files")]
    NoStore,
    /// The store refused the name or could not make the file; its own error says which.
    #[error("{0}")]
    Store(Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot write {name}: {source}")]
    Write {
        name: String,
        source: std::io::Error,
    },
    /// The run's files together would pass what one run may keep.
    #[error(
        "{name:?} was not kept: the files this run saved would pass {} MiB together \
         (PTC_SCRATCH_MAX_MB, what one run may keep: its save_file files and the saved whole \
         of its output); save less, or raise PTC_SCRATCH_MAX_MB",
        max_bytes >> 20
    )]
    RunQuota { name: String, max_bytes: u64 },
    /// The body being saved broke off (the bridge's reader says why).
    #[error("{name:?} was not kept: its bytes did not arrive whole: {source}")]
    Body {
        name: String,
        source: std::io::Error,
    },
}

impl FileError {
    /// A store's own error.
    pub fn store(e: impl std::error::Error + Send + Sync + 'static) -> FileError {
        FileError::Store(Box::new(e))
    }
}

/// Where a run's files go. Every method blocks (file system calls): the run layer calls them
/// from a blocking thread or, for output, for one pipe chunk at a time.
pub trait FileStore: Send + Sync + std::fmt::Debug {
    /// A new file `name` (replacing one of that name) to write within the store's quotas, and
    /// how a result names it.
    fn create(&self, name: &str) -> Result<(Box<dyn NewFile>, RunFile), FileError>;

    /// How the model finds `file`, for the cut marker of a stream (a name in the session's
    /// workspace, or the URL of an artifact).
    fn locate(&self, file: &RunFile) -> String;

    /// The bytes of the file `name` when it is at most `max` bytes (an image to show).
    fn read(&self, name: &str, max: u64) -> Option<Vec<u8>>;
}

/// A shared [`FileStore`].
pub type Files = Arc<dyn FileStore>;

/// A file being written into a [`FileStore`], every byte counted against the store's quotas
/// before it is written. Dropped, it stays as written (the saved whole of a stream is kept
/// however far it got); [`discard`](NewFile::discard) removes it.
pub trait NewFile: Send {
    /// Appends `bytes`, all or nothing: refused, nothing written, past a quota (the error
    /// names it).
    fn append(&mut self, bytes: &[u8]) -> Result<(), FileError>;

    /// Bytes it may still take before a quota refuses it.
    fn room(&self) -> u64;

    /// Removes the file and gives back what it took.
    fn discard(self: Box<Self>);
}

/// Stores `reader`'s bytes as `name` in `files`, [`SAVE_CHUNK`] at a time, and says how a
/// result lists it. A failure (a quota, a broken body) leaves no file behind.
pub fn save(
    files: &dyn FileStore,
    name: &str,
    reader: &mut dyn Read,
) -> Result<RunFile, FileError> {
    let (mut file, mut info) = files.create(name)?;
    let mut buf = vec![0u8; SAVE_CHUNK];
    let mut size = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                file.discard();
                return Err(FileError::Body {
                    name: name.to_string(),
                    source,
                });
            }
        };
        if let Err(e) = file.append(&buf[..n]) {
            file.discard();
            return Err(e);
        }
        size += n as u64;
    }
    info.size = size;
    Ok(info)
}

/// A run's [`FileStore`]: another store, with what all the files of the run take together
/// bounded (`PTC_SCRATCH_MAX_MB`, as for what the run keeps in its scratch directory), so one
/// run cannot fill its session or the artifacts store by saving file after file.
#[derive(Debug)]
pub struct Budgeted {
    store: Files,
    budget: Arc<Budget>,
}

#[derive(Debug)]
struct Budget {
    max_bytes: u64,
    used: AtomicU64,
}

impl Budget {
    fn give_back(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

impl Budgeted {
    /// `store`, its files together bounded by `max_bytes`.
    pub fn new(store: Files, max_bytes: u64) -> Budgeted {
        Budgeted {
            store,
            budget: Arc::new(Budget {
                max_bytes,
                used: AtomicU64::new(0),
            }),
        }
    }
}

impl FileStore for Budgeted {
    fn create(&self, name: &str) -> Result<(Box<dyn NewFile>, RunFile), FileError> {
        let (file, info) = self.store.create(name)?;
        let file = BudgetedFile {
            file,
            budget: self.budget.clone(),
            name: info.name.clone(),
            written: 0,
        };
        Ok((Box::new(file), info))
    }

    fn locate(&self, file: &RunFile) -> String {
        self.store.locate(file)
    }

    fn read(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        self.store.read(name, max)
    }
}

/// A file of a [`Budgeted`] store: each append counted against the run's budget first.
struct BudgetedFile {
    file: Box<dyn NewFile>,
    budget: Arc<Budget>,
    name: String,
    written: u64,
}

impl NewFile for BudgetedFile {
    fn append(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        let n = bytes.len() as u64;
        let budget = &self.budget;
        if budget.used.fetch_add(n, Ordering::Relaxed) + n > budget.max_bytes {
            budget.give_back(n);
            return Err(FileError::RunQuota {
                name: self.name.clone(),
                max_bytes: budget.max_bytes,
            });
        }
        if let Err(e) = self.file.append(bytes) {
            budget.give_back(n);
            return Err(e);
        }
        self.written += n;
        Ok(())
    }

    fn room(&self) -> u64 {
        let budget = &self.budget;
        let left = budget
            .max_bytes
            .saturating_sub(budget.used.load(Ordering::Relaxed));
        self.file.room().min(left)
    }

    fn discard(self: Box<Self>) {
        self.budget.give_back(self.written);
        self.file.discard();
    }
}

/// A body's chunks, sent by the task reading it, as a blocking reader for the thread that
/// writes them into a store: an `Err` ends the reading with that error (the body broke off,
/// was too large, too slow), a closed channel is the body's end.
pub struct ChunkReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    chunk: Bytes,
}

impl ChunkReader {
    pub fn new(rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> ChunkReader {
        ChunkReader {
            rx,
            chunk: Bytes::new(),
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(next) => self.chunk = next?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// `bytes` for a person: `812 B`, `3.4 KB`, `1.2 MB`, `2.0 GB` (powers of 1024, one decimal).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    type Kept = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

    /// A store in memory, without quotas of its own.
    #[derive(Debug, Default)]
    struct Memory(Kept);

    struct MemoryFile(Kept, String);

    impl NewFile for MemoryFile {
        fn append(&mut self, bytes: &[u8]) -> Result<(), FileError> {
            let mut kept = self.0.lock().unwrap();
            kept.entry(self.1.clone())
                .or_default()
                .extend_from_slice(bytes);
            Ok(())
        }

        fn room(&self) -> u64 {
            u64::MAX
        }

        fn discard(self: Box<Self>) {
            self.0.lock().unwrap().remove(&self.1);
        }
    }

    impl FileStore for Memory {
        fn create(&self, name: &str) -> Result<(Box<dyn NewFile>, RunFile), FileError> {
            self.0.lock().unwrap().insert(name.into(), Vec::new());
            let info = RunFile {
                name: name.into(),
                size: 0,
                mime: "text/plain".into(),
                url: format!("/x/{name}"),
            };
            Ok((Box::new(MemoryFile(self.0.clone(), name.into())), info))
        }

        fn locate(&self, file: &RunFile) -> String {
            file.name.clone()
        }

        fn read(&self, _: &str, _: u64) -> Option<Vec<u8>> {
            None
        }
    }

    #[test]
    fn a_runs_files_together_stay_within_its_budget_and_a_refused_one_is_not_kept() {
        let kept = Kept::default();
        let store = Budgeted::new(Arc::new(Memory(kept.clone())), 100);
        let info = save(&store, "a", &mut &[1u8; 60][..]).unwrap();
        assert_eq!((info.name.as_str(), info.size), ("a", 60));
        // A body that breaks off leaves nothing, and gives its bytes back.
        let broken = &mut std::io::Read::chain(&[4u8; 30][..], Broken);
        assert!(matches!(
            save(&store, "e", broken),
            Err(FileError::Body { .. })
        ));
        let err = save(&store, "b", &mut &[2u8; 60][..]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"b\" was not kept: the files this run saved would pass 0 MiB together \
             (PTC_SCRATCH_MAX_MB, what one run may keep: its save_file files and the saved \
             whole of its output); save less, or raise PTC_SCRATCH_MAX_MB"
        );
        save(&store, "c", &mut &[3u8; 40][..]).unwrap();
        let (mut full, _) = store.create("d").unwrap();
        assert_eq!(full.room(), 0);
        assert!(matches!(full.append(b"x"), Err(FileError::RunQuota { .. })));
        full.discard();
        let names: Vec<String> = kept.lock().unwrap().keys().cloned().collect();
        assert_eq!(names, ["a", "c"]);
    }

    /// A reader that fails.
    struct Broken;

    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("the body broke off"))
        }
    }

    #[test]
    fn sizes_read_as_a_person_says_them() {
        let shown: Vec<String> = [0, 812, 1024, 3500, 1_258_291, 2 << 30]
            .into_iter()
            .map(human_bytes)
            .collect();
        assert_eq!(
            shown,
            ["0 B", "812 B", "1.0 KB", "3.4 KB", "1.2 MB", "2.0 GB"]
        );
    }
}
