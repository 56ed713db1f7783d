//! The scratch quota: what a run may keep in its scratch directory (`PTC_SCRATCH_MAX_MB`,
//! `PTC_SCRATCH_MAX_FILES`).
//!
//! Two parts, because an unprivileged sidecar has no filesystem quota to set: `RLIMIT_FSIZE`
//! (the child's [`Limits::file_size`](super::child::Limits)) stops any one file at the size
//! quota with `EFBIG`, and [`watch`] measures the whole directory while the run lives and
//! reports the first measurement over either quota, so the runner stops the run. Between two
//! measurements a run can write past the quota by what it writes in [`CHECK_EVERY`] (longer for
//! a directory of many files, which takes longer to measure). It measures through descriptors
//! at any depth (`util::tree`), and a directory it cannot measure (nested deeper than
//! [`MAX_TREE_DEPTH`](crate::util::tree::MAX_TREE_DEPTH), unreadable) is over the quota: a
//! path-based walk once missed 180 MiB nested past `PATH_MAX`.

use crate::util::tree::{self, Unmeasurable};
use std::ops::ControlFlow;
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

    /// Why a directory that cannot be measured counts as over this quota.
    pub fn unmeasurable(&self, why: &Unmeasurable, names: &QuotaNames) -> String {
        format!(
            "{} cannot be measured ({why}), and what cannot be measured counts as over its \
             quota ({}); keep the files in fewer, shallower folders the sidecar can read",
            names.what, names.bytes
        )
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

/// Measures `dir` through descriptors (`util::tree`: at any depth, links not followed), every
/// entry counted: bytes as allocated on disk (a sparse file counts what it holds) or as long,
/// whichever is more. Stops counting once past `quota`. A `dir` that is gone holds nothing; one
/// that cannot be measured is an [`Unmeasurable`], which the watch counts as over the quota.
pub fn measure(dir: &Path, quota: &ScratchQuota) -> Result<Usage, Unmeasurable> {
    let mut usage = Usage::default();
    let top = match crate::util::dirfd::open_dir_path(dir) {
        Ok(top) => top,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(usage),
        Err(e) => return Err(Unmeasurable::Unreadable(e)),
    };
    tree::measure(top, |st| {
        usage.files += 1;
        usage.bytes += st.size.max(st.blocks * 512);
        if quota.exceeded(usage).is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok(usage)
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
        match measured {
            Ok(Ok(usage)) => {
                if let Some(why) = quota.exceeded_as(usage, names) {
                    return why;
                }
            }
            Ok(Err(unmeasurable)) => return quota.unmeasurable(&unmeasurable, names),
            // The measuring thread panicked: nothing was learned, measure again.
            Err(_) => {}
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
        let usage = measure(&dir, &quota).unwrap();
        assert_eq!(usage.files, 4, "{usage:?}");
        assert!(usage.bytes >= 10_002 && usage.bytes < 64 << 10, "{usage:?}");
        assert_eq!(quota.exceeded(usage), None);

        let tight = ScratchQuota {
            max_bytes: 1 << 20,
            max_files: 2,
        };
        let why = tight.exceeded(measure(&dir, &tight).unwrap()).unwrap();
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

    #[tokio::test]
    async fn bytes_past_path_max_count_and_a_tree_too_deep_is_over_quota() {
        use crate::util::tree::testing::{nest, remove};
        let quota = ScratchQuota {
            max_bytes: 1 << 20,
            max_files: 100_000,
        };
        // 40 levels of 250-byte names (a path of 10 KB) with 64 KiB in each: 2.5 MiB a
        // path-based walk could not reach.
        let dir = temp_dir();
        nest(&dir, 40, &"d".repeat(250), 64 << 10);
        let usage = measure(&dir, &quota).unwrap();
        assert!(usage.bytes > 1 << 20, "{usage:?}");
        let why = tokio::time::timeout(CHECK_EVERY * 20, watch(dir.clone(), quota))
            .await
            .unwrap();
        assert!(
            why.contains("more than 1 MiB (PTC_SCRATCH_MAX_MB)"),
            "{why}"
        );
        remove(&dir);

        // Folders take a block each: a quota they stay within, to see the depth refused.
        let roomy = ScratchQuota {
            max_bytes: 1 << 30,
            ..quota
        };
        let dir = temp_dir();
        nest(&dir, crate::util::tree::MAX_TREE_DEPTH + 1, "d", 0);
        let why = tokio::time::timeout(CHECK_EVERY * 50, watch(dir.clone(), roomy))
            .await
            .unwrap();
        assert_eq!(
            why,
            "the scratch directory cannot be measured (its folders are nested more than 4096 \
             deep), and what cannot be measured counts as over its quota (PTC_SCRATCH_MAX_MB); \
             keep the files in fewer, shallower folders the sidecar can read"
        );
        remove(&dir);
    }
}
