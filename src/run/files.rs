//! A run's files: what `save_file` stores and where the full output of a stream that was cut
//! goes. The run layer only writes them; where they live and how they are served is the
//! [`FileStore`]'s (the API gives a session run its session's workspace, and any other run
//! artifacts of its own, kept for `PTC_ARTIFACT_TTL`).
//!
//! Owns [`RunFile`] (a file as a result shows it) and [`FileStore`]. It must not know sessions
//! or HTTP.

use serde::Serialize;
use std::sync::Arc;

/// Largest file one `save_file` call stores: files for the user, not a disk.
pub const MAX_SAVE_BYTES: usize = 32 << 20;

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
    /// A new file `name` (replacing one of that name) to write, and how a result names it.
    fn create(&self, name: &str) -> Result<(std::fs::File, RunFile), FileError>;

    /// How the model finds `file`, for the cut marker of a stream (a name in the session's
    /// workspace, or the URL of an artifact).
    fn locate(&self, file: &RunFile) -> String;

    /// The bytes of the file `name` when it is at most `max` bytes (an image to show).
    fn read(&self, name: &str, max: u64) -> Option<Vec<u8>>;
}

/// A shared [`FileStore`].
pub type Files = Arc<dyn FileStore>;

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
