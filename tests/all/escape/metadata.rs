//! Issue 34: a run's files, folders and records are its own. Landlock does not cover metadata,
//! and the third review changed other runs' and the sidecar's files through it: `chmod 000` on
//! the next warm worker's folder, a session's folder, the SDK and the runtime dir (later runs
//! failed, a restarted sidecar could not start), `utime(0)` on a session's folder (its last use,
//! as a restart read it). Also here: a run that listens, and a run's capability bounding set.

use super::other_runs::{check_session_kept, start_session};
use super::{Opts, Stage, Who, against_both, attack, broken};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a metadata change would alter, read from outside: mode, owner, group, modification
/// time, and whether the attack's extended attribute is there.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    xattr: bool,
}

pub(super) fn meta(path: &Path) -> Option<Meta> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some(Meta {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        mtime: (m.mtime(), m.mtime_nsec()),
        xattr: has_xattr(path),
    })
}

fn has_xattr(path: &Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let name = c"user.ptc";
    // SAFETY: both strings are NUL-terminated and live through the call; size 0 asks only
    // whether the attribute exists (no buffer is written).
    unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

/// The folder of the fork server's SDK: where its `ptc_zygote.py` is.
pub(super) fn sdk_dir(s: &Stage) -> Option<PathBuf> {
    let server = s.fork_server()?;
    let cmd = std::fs::read(format!("/proc/{server}/cmdline")).ok()?;
    let zygote = cmd
        .split(|&b| b == 0)
        .map(|a| PathBuf::from(String::from_utf8_lossy(a).into_owned()))
        .find(|a| a.ends_with("ptc_zygote.py"))?;
    zygote.parent().map(Path::to_path_buf)
}

/// A chmod, utime, chown, lchown, setxattr, and fchmod and futimens through a descriptor, of
/// another warm worker's scratch folder, a session's folder, the SDK, the runtime dir and the
/// seccomp filter file, from a Python run and from python3 in a bash run: each refused, and
/// from outside each target unchanged. Then later runs and the session still work, and the
/// session's files are served. A run may not listen; its own file's metadata can be changed
/// through a descriptor where its uid is its own (the root sidecar's run user).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_of_other_runs_sessions_and_the_sidecar_is_refused() {
    against_both("metadata", Opts::default(), |s| async move {
        let own_uid = s.who.run_uids().is_some();
        metadata_attacks(s, own_uid).await
    })
    .await;
}

/// The same attacks where runs share one uid (`PTC_SANDBOX_UIDS=off`: root's runs all run as
/// the run user, the unprivileged sidecar's as itself, as on a machine without subordinate
/// ids): the seccomp rules alone keep them from each other's metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_is_refused_where_runs_share_a_uid() {
    let opts = Opts {
        env: &[("PTC_SANDBOX_UIDS", "off")],
        ..Opts::default()
    };
    against_both("metadata_shared_uid", opts, |s| async move {
        let h: serde_json::Value =
            serde_json::from_str(&s.health_text().await?).map_err(|e| broken(e.to_string()))?;
        if h["sandbox"]["uids"] != "shared" {
            return Err(broken(format!("runs do not share a uid: {}", h["sandbox"])));
        }
        // Root's run user owns nothing but runs' files; the unprivileged sidecar's runs have
        // its own uid.
        let own_uid = matches!(s.who, Who::Root);
        metadata_attacks(s, own_uid).await
    })
    .await;
}

/// The metadata attacks against `s`; `own_uid`: the runs' uid is not the sidecar's, so a run
/// may change its own file's metadata through a descriptor.
async fn metadata_attacks(s: Stage, own_uid: bool) -> super::Verdict {
    {
        let (_, session_dir) = start_session(&s, "victim-meta").await?;
        let runtime = s.dir.0.join("runtime");
        let sdk = sdk_dir(&s).ok_or_else(|| broken("no fork server, so no SDK folder"))?;
        let workers = s.warm_workers();
        if workers.len() < 2 {
            return Err(broken(format!("warm workers waiting: {workers:?}")));
        }
        // The Python run takes one of them: each is a target for the other runs.
        let mut targets: Vec<(&str, PathBuf)> = Vec::new();
        for pid in workers {
            let dir = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map_err(|e| broken(format!("the warm worker's folder: {e}")))?;
            targets.push(("a waiting warm worker's scratch folder", dir));
        }
        targets.extend([
            ("a session's folder", PathBuf::from(&session_dir)),
            ("the SDK", sdk),
            ("the runtime dir", runtime.clone()),
            ("the seccomp filter file", runtime.join("ptc_seccomp.json")),
        ]);
        let before: Vec<Option<Meta>> = targets.iter().map(|(_, p)| meta(p)).collect();
        if before.iter().any(Option::is_none) {
            return Err(broken(format!("a target is missing: {targets:?}")));
        }
        let args = json!({"targets": targets});
        let python = s.attack("metadata.py", args.clone()).await?;
        let bash = s.attack_python_in_bash("metadata.py", args).await?;
        let own = [python.scratch.as_deref(), bash.scratch.as_deref()];
        for (i, (what, path)) in targets.iter().enumerate() {
            let after = meta(path);
            // The run's own folder (gone with it) is not a target.
            if after.is_none() && own.contains(&path.to_str()) {
                continue;
            }
            if after != before[i] {
                return Err(attack(format!(
                    "{what} ({}) changed: {:?} -> {after:?}",
                    path.display(),
                    before[i]
                )));
            }
        }
        let own = if own_uid { "ok" } else { "refused" };
        for (run, by_path) in [(&python, format!("{own} 0o640")), (&bash, "refused".into())] {
            // Every target but the run's own folder (a warm worker's may be the run's).
            let aimed: usize = run
                .said("TARGETS")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if aimed + 1 < targets.len() {
                return Err(broken(format!(
                    "the run aimed at {aimed} targets: {}",
                    run.stdout
                )));
            }
            run.all_refused(aimed * 7 + 1)?;
            if run.said("OWN_BY_DESCRIPTOR") != Some(own) {
                return Err(broken(format!(
                    "a run's own file through a descriptor: expected {own}, {}",
                    run.stdout
                )));
            }
            // In a Python run os.chmod and shutil.copy go through a descriptor (ptc_files).
            let by_path = if own == "ok" {
                by_path
            } else {
                "refused".into()
            };
            if run.said("OWN_BY_PATH") != Some(by_path.trim()) {
                return Err(broken(format!(
                    "a run's own file by path: expected {by_path}, {}",
                    run.stdout
                )));
            }
        }
        for i in 0..4 {
            s.check_a_run_works(&format!("(#{i}) after the metadata attacks"))
                .await?;
        }
        check_session_kept(&s, "victim-meta").await?;
        let files = s.get("/v1/sessions/victim-meta/files").await?;
        if !files.to_string().contains("secret.txt") {
            return Err(attack(format!(
                "the session's files are not served: {files}"
            )));
        }
        s.check_healthy("the metadata attacks").await
    }
}

/// Every capability is out of a run's bounding set (it held CAP_SYS_ADMIN, unused but kept),
/// read from outside in each waiting warm worker's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_capability_bounding_set_is_empty() {
    against_both("capability_bounding_set", Opts::default(), |s| async move {
        let workers = s.warm_workers();
        if workers.is_empty() {
            return Err(broken("no warm worker is waiting"));
        }
        for pid in workers {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map_err(|e| broken(format!("/proc/{pid}/status: {e}")))?;
            let bounding = status
                .lines()
                .find_map(|l| l.strip_prefix("CapBnd:"))
                .map(str::trim)
                .ok_or_else(|| broken(format!("no CapBnd in /proc/{pid}/status")))?;
            if u64::from_str_radix(bounding, 16) != Ok(0) {
                return Err(attack(format!(
                    "warm worker {pid} keeps capabilities {bounding} in its bounding set"
                )));
            }
        }
        Ok(())
    })
    .await;
}

/// Root's runs and sessions each have a uid of their own (PTC_SANDBOX_UIDS), and so do an
/// unprivileged sidecar's where /etc/subuid grants its user ids (scripts/test grants
/// `ptc-test`), seen from outside: a session's folder and what its runs write are its uid's,
/// every run of it runs as that uid, another session and a run without one have others.
/// Without a grant, an unprivileged sidecar's runs all share its uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_and_session_has_a_uid_of_its_own() {
    against_both("uid_per_run", Opts::default(), |s| async move {
        let code = "import os; open('mine.txt', 'w').write('x'); print(os.getuid())";
        // Where the sidecar keeps sessions (a run sees its own as /mnt/data).
        let root = s.dir.0.join("runtime").join("sessions");
        let mut folder_uids = Vec::new();
        let mut run_uids = Vec::new();
        for id in ["uid-a", "uid-b"] {
            for _ in 0..2 {
                let r = s
                    .exec_body(json!({"code": code, "session_id": id}))
                    .await
                    .map_err(|e| broken(format!("the session's run: {e}")))?;
                let out = r["stdout"].as_str().unwrap_or_default().trim().to_string();
                let uid: u32 = out
                    .parse()
                    .map_err(|_| broken(format!("no uid printed: {r}")))?;
                let dir = root.join(id);
                let folder = std::fs::symlink_metadata(&dir)
                    .map_err(|e| broken(format!("{}: {e}", dir.display())))?;
                let file = std::fs::symlink_metadata(dir.join("mine.txt"))
                    .map_err(|e| broken(format!("{}/mine.txt: {e}", dir.display())))?;
                if folder.uid() != uid || file.uid() != uid {
                    return Err(attack(format!(
                        "session {id}'s run ran as {uid}, its folder is {}'s, its file {}'s",
                        folder.uid(),
                        file.uid()
                    )));
                }
                run_uids.push(uid);
            }
            folder_uids.push(run_uids[run_uids.len() - 1]);
        }
        let alone = s
            .exec("import os; print(os.getuid())")
            .await
            .map_err(broken)?;
        let alone: u32 = alone["stdout"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .parse()
            .map_err(|_| broken(format!("no uid: {alone}")))?;
        let same_session = run_uids[0] == run_uids[1] && run_uids[2] == run_uids[3];
        if !same_session {
            return Err(attack(format!(
                "a session's runs had different uids: {run_uids:?}"
            )));
        }
        let all = [folder_uids[0], folder_uids[1], alone];
        match s.who.run_uids() {
            Some(range) => {
                let distinct: std::collections::BTreeSet<_> = all.iter().collect();
                if distinct.len() != 3 || !all.iter().all(|u| range.contains(u)) {
                    return Err(attack(format!(
                        "two sessions and a run share uids, or have uids outside the range: \
                         {all:?}"
                    )));
                }
            }
            None => {
                if all.iter().any(|u| *u != all[0]) {
                    return Err(broken(format!("an unprivileged sidecar's runs: {all:?}")));
                }
            }
        }
        Ok(())
    })
    .await;
}
