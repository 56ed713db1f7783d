//! What the session module's tests share: a scratch root to open a store in, and the names of
//! listed files. Built for tests only.

use std::path::PathBuf;
use std::time::Duration;

use super::{FileInfo, SessionConfig, Sessions};

/// A private folder under the temp dir holding a session root and an "outside" folder,
/// deleted when dropped.
pub(super) struct Scratch {
    base: PathBuf,
}

impl Scratch {
    pub(super) fn new() -> Scratch {
        let base =
            crate::util::private_dir(&std::env::temp_dir(), "ptc-session-test").expect("temp dir");
        std::fs::create_dir(base.join("outside")).unwrap();
        Scratch { base }
    }

    pub(super) fn root(&self) -> PathBuf {
        self.base.join("sessions")
    }

    pub(super) fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    pub(super) fn config(&self) -> SessionConfig {
        SessionConfig {
            root: self.root(),
            ttl: Duration::from_secs(3600),
            max_bytes: 1 << 20,
            max_files: 100,
            owner: None,
            uids: None,
            max_total_bytes: None,
        }
    }

    pub(super) fn sessions(&self) -> Sessions {
        Sessions::new(self.config()).unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

pub(super) fn names(files: &[FileInfo]) -> Vec<&str> {
    files.iter().map(|f| f.name.as_str()).collect()
}

/// The permission bits of `path` (not following a link).
pub(super) fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}
