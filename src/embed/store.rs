//! Tool vectors kept across restarts and reloads: in memory by the SHA-256 of the text
//! embedded, and in `PTC_STATE_DIR/embeddings/<model id>.vec` when a state directory is set,
//! so a restart or a reload embeds only the tools whose text changed.
//!
//! The file is one per model (vectors of two models never mix): a header (magic, the model's
//! id, the dimensions), then records of the text's key and its vector, appended as tools are
//! embedded. It is a cache: anything wrong with it (another model's, a torn last record, a
//! vector that is not of length 1) is dropped and embedded again, never trusted. Memory and
//! file are bounded by [`MAX_FILE_BYTES`]; past it, only the vectors of the catalog in hand
//! are kept and the file is written again with just them.
//!
//! Blocking file I/O: called off the async workers, as embedding is.

use super::EmbedError;
use sha2::Digest;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest vector file read or kept: about 43,000 vectors of 384 dimensions, some eight
/// catalogs of 5,000 tools.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The directory of vector files within `PTC_STATE_DIR`.
pub const DIR: &str = "embeddings";

/// What begins every vector file (format version 1).
const MAGIC: &[u8; 8] = b"PTCVEC1\n";

/// The key of a text: its SHA-256.
pub type Key = [u8; 32];

/// The key of `text`.
pub fn key(text: &str) -> Key {
    sha2::Sha256::digest(text.as_bytes()).into()
}

/// The vectors of one model, in memory and (with a state directory) on disk.
pub struct Store {
    vectors: HashMap<Key, Arc<[f32]>>,
    dims: usize,
    /// The vector file; `None`: memory only (no state directory, or it cannot be written).
    file: Option<PathBuf>,
    header: Vec<u8>,
    /// Bytes the file holds (or will once written).
    file_bytes: u64,
}

impl Store {
    /// The store of the model `model_id` (`dims` dimensions): what its file in `state_dir`
    /// holds, when there is one. A file that cannot be used is said in the log and replaced.
    pub fn open(state_dir: Option<&Path>, model_id: &str, dims: usize) -> Store {
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(model_id.as_bytes());
        header.push(b'\n');
        header.extend_from_slice(&(dims as u32).to_le_bytes());
        let file = state_dir.map(|dir| {
            let name: String = model_id.chars().take(16).collect();
            dir.join(DIR).join(format!("{name}.vec"))
        });
        let mut store = Store {
            vectors: HashMap::new(),
            dims,
            file_bytes: header.len() as u64,
            header,
            file: None,
        };
        if let Some(path) = file {
            match store.read(&path) {
                Ok(()) => {}
                Err(why) => {
                    tracing::warn!("{}: {why}; tools are embedded again", path.display());
                    store.vectors.clear();
                    store.file_bytes = store.header.len() as u64;
                    let _ = std::fs::remove_file(&path);
                }
            }
            store.file = Some(path);
        }
        store
    }

    /// Reads the file's records into memory; a missing file is an empty store.
    fn read(&mut self, path: &Path) -> Result<(), EmbedError> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("cannot open: {e}").into()),
        };
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read: {e}"))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(EmbedError(format!("over {MAX_FILE_BYTES} bytes")));
        }
        if !bytes.starts_with(&self.header) {
            return Err(EmbedError("not this model's vectors".into()));
        }
        let record = self.record_bytes();
        let body = &bytes[self.header.len()..];
        // A torn last record (a write cut short) is left out; the next append rewrites it.
        let whole = body.len() / record * record;
        for chunk in body[..whole].chunks_exact(record) {
            let (k, v) = chunk.split_at(32);
            let vector: Vec<f32> = v
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if unit(&vector) {
                let mut key = [0u8; 32];
                key.copy_from_slice(k);
                self.vectors.insert(key, vector.into());
            }
        }
        self.file_bytes = (self.header.len() + whole) as u64;
        if whole != body.len() {
            // Appends go after whole records only.
            let file = std::fs::OpenOptions::new().write(true).open(path);
            let _ = file.and_then(|f| f.set_len(self.file_bytes));
        }
        Ok(())
    }

    fn record_bytes(&self) -> usize {
        32 + 4 * self.dims
    }

    /// The vector of the text keyed `key`, when known.
    pub fn get(&self, key: &Key) -> Option<Arc<[f32]>> {
        self.vectors.get(key).cloned()
    }

    /// Vectors known.
    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    /// The vector file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Adds `new` vectors and appends them to the file. Past [`MAX_FILE_BYTES`], only the
    /// vectors keyed in `keep` (the catalog in hand) stay, in memory and in a file written
    /// again. A file that cannot be written is said and memory serves alone.
    pub fn add(&mut self, new: Vec<(Key, Vec<f32>)>, keep: &HashSet<Key>) {
        let record = self.record_bytes() as u64;
        let mut appended = Vec::with_capacity(new.len() * record as usize);
        for (key, vector) in new {
            if vector.len() != self.dims || self.vectors.contains_key(&key) {
                continue;
            }
            encode(&mut appended, &key, &vector);
            self.vectors.insert(key, vector.into());
        }
        if appended.is_empty() {
            return;
        }
        let whole = self.header.len() as u64 + self.vectors.len() as u64 * record;
        let result =
            if whole > MAX_FILE_BYTES || self.file_bytes + appended.len() as u64 > MAX_FILE_BYTES {
                self.vectors.retain(|k, _| keep.contains(k));
                self.rewrite()
            } else {
                self.append(&appended)
            };
        if let Err(e) = result
            && let Some(path) = self.file.take()
        {
            tracing::warn!(
                "cannot write {}: {e}; tool vectors are kept in memory only",
                path.display()
            );
        }
    }

    fn append(&mut self, records: &[u8]) -> std::io::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let mut file = open_private(path, false)?;
        if file.metadata()?.len() == 0 {
            file.write_all(&self.header)?;
        }
        // One write of whole records: O_APPEND keeps two sidecars' batches apart.
        file.write_all(records)?;
        self.file_bytes = file.metadata()?.len();
        Ok(())
    }

    /// Writes the file again with the vectors in memory (a new file renamed over the old).
    fn rewrite(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let fresh = path.with_extension(format!("vec.{}", std::process::id()));
        let mut bytes = self.header.clone();
        for (key, vector) in &self.vectors {
            encode(&mut bytes, key, vector);
        }
        let mut file = open_private(&fresh, true)?;
        file.write_all(&bytes)?;
        std::fs::rename(&fresh, path)?;
        self.file_bytes = bytes.len() as u64;
        Ok(())
    }
}

/// Appends one record to `out`: the key, then the vector's values little-endian ([`Store::read`]
/// reads them back).
fn encode(out: &mut Vec<u8>, key: &Key, vector: &[f32]) {
    out.extend_from_slice(key);
    for x in vector {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Opens `path` for appending (or truncating), 0600 in a 0700 directory made if missing.
fn open_private(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).mode(0o600);
    match truncate {
        true => options.write(true).truncate(true),
        false => options.append(true),
    };
    options.open(path)
}

/// Whether `v` is a model's vector: finite, of length 1 (every vector is normalised, so a
/// garbled record is caught here).
fn unit(v: &[f32]) -> bool {
    let norm: f32 = v.iter().map(|x| x * x).sum();
    v.iter().all(|x| x.is_finite()) && (norm - 1.0).abs() < 1e-3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own, removed at the end of the test.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("ptc-vec-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn vector(dims: usize, seed: f32) -> Vec<f32> {
        let raw: Vec<f32> = (0..dims).map(|i| (i as f32 + seed).sin()).collect();
        let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt();
        raw.into_iter().map(|x| x / norm).collect()
    }

    #[test]
    fn vectors_come_back_after_a_restart_and_only_for_their_model() {
        let dir = TempDir::new();
        let mut store = Store::open(Some(dir.path()), "aaaa", 8);
        let (a, b) = (key("read a file"), key("write a file"));
        store.add(
            vec![(a, vector(8, 1.0)), (b, vector(8, 2.0))],
            &HashSet::new(),
        );
        store.add(vec![(a, vector(8, 3.0))], &HashSet::new()); // known: kept as it was
        let again = Store::open(Some(dir.path()), "aaaa", 8);
        assert_eq!(again.len(), 2);
        assert_eq!(&*again.get(&a).unwrap(), vector(8, 1.0).as_slice());
        assert_eq!(&*again.get(&b).unwrap(), vector(8, 2.0).as_slice());
        let path = again.path().unwrap().to_path_buf();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), store.header.len() + 2 * (32 + 32));
        // Another model's file name holds its id: nothing of "aaaa" is read as "bbbb"'s.
        assert!(Store::open(Some(dir.path()), "bbbb", 8).is_empty());
        // Same file name, other header (an id sharing 16 characters, or other dims): dropped.
        assert!(Store::open(Some(dir.path()), "aaaa", 4).is_empty());
        assert!(
            Store::open(Some(dir.path()), "aaaa", 8).is_empty(),
            "the bad file was replaced"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(dir.path().join(DIR))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
    }

    #[test]
    fn a_torn_or_garbled_file_loses_only_what_is_broken() {
        let dir = TempDir::new();
        let mut store = Store::open(Some(dir.path()), "cccc", 8);
        let keys: Vec<Key> = (0..3).map(|i| key(&i.to_string())).collect();
        store.add(
            keys.iter().map(|k| (*k, vector(8, k[0] as f32))).collect(),
            &HashSet::new(),
        );
        let path = store.path().unwrap().to_path_buf();
        let mut bytes = std::fs::read(&path).unwrap();
        let first = store.header.len();
        bytes[first + 32 + 3] ^= 0x20; // the first value's exponent: the vector is no longer of length 1
        bytes.truncate(bytes.len() - 5); // the last record torn
        std::fs::write(&path, &bytes).unwrap();
        let mut again = Store::open(Some(dir.path()), "cccc", 8);
        assert_eq!(again.len(), 1, "only the middle record is whole and sound");
        assert!(again.get(&keys[1]).is_some());
        again.add(vec![(keys[2], vector(8, 9.0))], &HashSet::new());
        assert_eq!(
            Store::open(Some(dir.path()), "cccc", 8).len(),
            2,
            "appended after whole records"
        );
    }

    #[test]
    fn past_its_bound_the_store_keeps_the_catalog_in_hand() {
        let dir = TempDir::new();
        let dims = 4096; // 16 KiB a record: the bound is reached in about 4,000
        let mut store = Store::open(Some(dir.path()), "dddd", dims);
        let record = 32 + 4 * dims as u64;
        let fit = (MAX_FILE_BYTES - store.header.len() as u64) / record;
        let batch: Vec<(Key, Vec<f32>)> = (0..fit)
            .map(|i| (key(&format!("old {i}")), vector(dims, i as f32)))
            .collect();
        store.add(batch, &HashSet::new());
        assert_eq!(store.len() as u64, fit);
        let new = key("new tool");
        let keep: HashSet<Key> = [new, key("old 0")].into();
        store.add(vec![(new, vector(dims, -1.0))], &keep);
        assert_eq!(store.len(), 2, "only the catalog in hand is kept");
        let size = std::fs::metadata(store.path().unwrap()).unwrap().len();
        assert_eq!(size, store.header.len() as u64 + 2 * record);
        assert_eq!(Store::open(Some(dir.path()), "dddd", dims).len(), 2);
    }

    #[test]
    fn without_a_state_directory_vectors_live_in_memory() {
        let mut store = Store::open(None, "eeee", 8);
        store.add(vec![(key("x"), vector(8, 1.0))], &HashSet::new());
        assert_eq!(store.len(), 1);
        assert!(store.path().is_none());
    }
}
