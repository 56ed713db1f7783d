//! The scratch quota: what a run may keep in its scratch directory (`PTC_SCRATCH_MAX_MB`,
//! `PTC_SCRATCH_MAX_FILES`).
//!
//! Two parts, because an unprivileged sidecar has no filesystem quota to set: `RLIMIT_FSIZE`
//! (the child's [`Limits::file_size`](super::child::Limits)) stops any one file at the size
//! quota with `EFBIG`, and [`watch`] measures the whole directory while the run lives and
//! reports the first measurement over either quota, so the runner stops the run. Between two
//! measurements a run can write past the quota by what it writes in [`CHECK_EVERY`] (longer for
//! a directory of many files, which takes longer to measure).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a live run's scratch directory is measured, at most.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// A measurement may cost at most 1/this of the time between two: a run holding thousands of
/// files is measured less often rather than keeping a core busy...
const IDLE_PER_BUSY: u32 = 5;

/// ...but at least this often.
const CHECK_AT_LEAST_EVERY: Duration = Duration::from_millis(500);

/// What a run may keep in its scratch directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchQuota {
    pub max_bytes: u64,
    /// Files, directories and links, the scratch directory itself not counted.
    pub max_files: u64,
}

/// What a scratch directory holds (as far as it was counted: counting stops past a quota).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub files: u64,
}

impl ScratchQuota {
    /// Why `usage` is over this quota, or `None`.
    pub fn exceeded(&self, usage: Usage) -> Option<String> {
        self.exceeded_as(usage, &SCRATCH)
    }

    /// [`exceeded`](Self::exceeded), in the words of another directory's quota.
    pub fn exceeded_as(&self, usage: Usage, names: &QuotaNames) -> Option<String> {
        if usage.bytes > self.max_bytes {
            Some(format!(
                "{} holds more than {} MiB ({}); delete files the run no longer needs, or \
                 raise the quota",
                names.what,
                self.max_bytes >> 20,
                names.bytes
            ))
        } else if usage.files > self.max_files {
            Some(format!(
                "{} holds more than {} files ({}); keep fewer, larger files, or raise the quota",
                names.what, self.max_files, names.files
            ))
        } else {
            None
        }
    }
}

/// What a quota's messages call its directory and settings.
#[derive(Debug)]
pub struct QuotaNames {
    pub what: &'static str,
    pub bytes: &'static str,
    pub files: &'static str,
}

/// A run's scratch directory.
pub const SCRATCH: QuotaNames = QuotaNames {
    what: "the scratch directory",
    bytes: "PTC_SCRATCH_MAX_MB",
    files: "PTC_SCRATCH_MAX_FILES",
};

/// A session's data directory.
pub const SESSION: QuotaNames = QuotaNames {
    what: "the session's data directory",
    bytes: "PTC_SESSION_MAX_MB",
    files: "PTC_SESSION_MAX_FILES",
};

/// Measures `dir` without following links: bytes as allocated on disk (a sparse file counts
/// what it holds) or as long, whichever is more. Stops counting once past `quota`.
pub fn measure(dir: &Path, quota: &ScratchQuota) -> Usage {
    use std::os::unix::fs::MetadataExt;
    let mut usage = Usage::default();
    let mut pending: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        // A directory that vanished or cannot be read holds nothing we can count.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            usage.files += 1;
            usage.bytes += meta.len().max(meta.blocks() * 512);
            if meta.is_dir() {
                pending.push(entry.path());
            }
            if quota.exceeded(usage).is_some() {
                return usage;
            }
        }
    }
    usage
}

/// Measures `dir` every [`CHECK_EVERY`] (less often when measuring takes long) and returns why
/// it went over `quota` once it does; never returns while it stays within.
/// Resolves when a run's scratch directory, or its workspace (a session's data directory, with
/// its own quota), goes past its quota; with the reason.
pub fn watch_run(
    scratch: &Path,
    quota: ScratchQuota,
    workspace: Option<(&Path, ScratchQuota)>,
) -> impl std::future::Future<Output = String> + use<> {
    let scratch_quota = watch(scratch.to_path_buf(), quota);
    let workspace = workspace.map(|(dir, quota)| (dir.to_path_buf(), quota));
    async move {
        match workspace {
            None => scratch_quota.await,
            Some((dir, quota)) => tokio::select! {
                why = scratch_quota => why,
                why = watch_as(dir, quota, &SESSION) => why,
            },
        }
    }
}

pub async fn watch(dir: PathBuf, quota: ScratchQuota) -> String {
    watch_as(dir, quota, &SCRATCH).await
}

/// [`watch`], in the words of another directory's quota.
pub async fn watch_as(dir: PathBuf, quota: ScratchQuota, names: &'static QuotaNames) -> String {
    let mut wait = CHECK_EVERY;
    loop {
        tokio::time::sleep(wait).await;
        let started = std::time::Instant::now();
        let measured = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || measure(&dir, &quota)).await
        };
        if let Ok(usage) = measured
            && let Some(why) = quota.exceeded_as(usage, names)
        {
            return why;
        }
        wait = (started.elapsed() * IDLE_PER_BUSY).clamp(CHECK_EVERY, CHECK_AT_LEAST_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> PathBuf {
        crate::util::private_dir(&std::env::temp_dir(), "ptc-scratch-test").unwrap()
    }

    #[test]
    fn files_and_bytes_are_counted_and_links_not_followed() {
        let dir = temp_dir();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a"), vec![b'x'; 10_000]).unwrap();
        std::fs::write(dir.join("b"), b"hi").unwrap();
        // A link to a big tree outside counts as one small entry.
        std::os::unix::fs::symlink("/usr", dir.join("usr")).unwrap();
        let quota = ScratchQuota {
            max_bytes: 1 << 20,
            max_files: 100,
        };
        let usage = measure(&dir, &quota);
        assert_eq!(usage.files, 4, "{usage:?}");
        assert!(usage.bytes >= 10_002 && usage.bytes < 64 << 10, "{usage:?}");
        assert_eq!(quota.exceeded(usage), None);

        let tight = ScratchQuota {
            max_bytes: 1 << 20,
            max_files: 2,
        };
        let why = tight.exceeded(measure(&dir, &tight)).unwrap();
        assert!(
            why.contains("more than 2 files (PTC_SCRATCH_MAX_FILES)"),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn watch_reports_the_quota_once_it_is_passed() {
        let dir = temp_dir();
        let quota = ScratchQuota {
            max_bytes: 1 << 20,
            max_files: 1000,
        };
        let watching = tokio::spawn(watch(dir.clone(), quota));
        tokio::time::sleep(CHECK_EVERY * 3).await;
        assert!(
            !watching.is_finished(),
            "an empty directory is within quota"
        );
        std::fs::write(dir.join("big"), vec![b'x'; 2 << 20]).unwrap();
        let why = tokio::time::timeout(CHECK_EVERY * 20, watching)
            .await
            .expect("the watch saw the big file")
            .unwrap();
        assert!(
            why.contains("more than 1 MiB (PTC_SCRATCH_MAX_MB)"),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
