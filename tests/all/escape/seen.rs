//! A run's processes as the harness sees them from outside, in `/proc`, while the run waits at
//! a checkpoint: the pids the run prints are its own PID namespace's, so they are found by what
//! only the run's processes have (its scratch or data directory mounted in its own mount
//! namespace: `procs::of_run`). Owns the judgement "nothing of the run outlives it": every
//! process seen is gone, and so is the run's PID namespace.

use crate::procs::{cmdline, in_pid_ns, inner_pid, is_alive, net_ns, of_run, pid_ns, start_time};
use std::collections::BTreeMap;

/// What the harness saw of one run.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The run's scratch (or data) directory, as the run printed it.
    pub dir: Option<String>,
    /// The run's PID namespace when it has one of its own, with its first process there (the
    /// run's PID 1) as `(pid, start time)`. While that process lives, so does the namespace, and
    /// every process in it is the run's; once it is gone the kernel has killed the rest, and a
    /// later namespace may be given the same number.
    ns: Option<(u64, i32, u64)>,
    /// Every process of the run the harness saw: pid → (start time, command line).
    pub procs: BTreeMap<i32, (u64, String)>,
    /// The network namespace of the run's first process, when the harness saw it.
    pub net: Option<u64>,
}

impl Seen {
    /// Looks at the processes of the run whose directory is `dir` now: records them, and
    /// returns each one's pid in the run (its own PID namespace's) with ours.
    pub fn look(&mut self, dir: &str) -> BTreeMap<i32, i32> {
        self.dir.get_or_insert_with(|| dir.to_string());
        let ours = pid_ns(std::process::id() as i32);
        let mut now = BTreeMap::new();
        for pid in of_run(dir) {
            let (Some(start), Some(inner)) = (start_time(pid), inner_pid(pid)) else {
                continue;
            };
            now.insert(inner, pid);
            if inner == 1 && self.net.is_none() {
                self.net = net_ns(pid);
            }
            if inner == 1
                && let Some(ns) = pid_ns(pid)
                && Some(ns) != ours
            {
                self.ns.get_or_insert((ns, pid, start));
            }
            self.procs
                .entry(pid)
                .or_insert_with(|| (start, cmdline(pid).unwrap_or_default()));
        }
        now
    }

    /// The processes of the run still alive (`pid: command line`): the ones seen, and while the
    /// run's first process lives, every process of its PID namespace.
    pub fn survivors(&self) -> Vec<String> {
        let same = |pid: i32, start: u64| is_alive(pid) && start_time(pid) == Some(start);
        let mut left: BTreeMap<i32, String> = self
            .procs
            .iter()
            .filter(|(pid, (start, _))| same(**pid, *start))
            .map(|(pid, (_, cmd))| (*pid, cmd.clone()))
            .collect();
        if let Some((ns, first, start)) = self.ns
            && same(first, start)
        {
            for pid in in_pid_ns(ns) {
                left.entry(pid)
                    .or_insert_with(|| cmdline(pid).unwrap_or_default());
            }
        }
        left.into_iter()
            .map(|(pid, cmd)| format!("{pid}: {cmd}"))
            .collect()
    }

    /// The survivors once `settle` has passed without them all going.
    pub async fn survivors_after(&self, settle: std::time::Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + settle;
        loop {
            let left = self.survivors();
            if left.is_empty() || std::time::Instant::now() > deadline {
                return left;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// The judgement itself, tried on a stand-in for a run (root only: it makes namespaces): a
/// first process in PID and mount namespaces of its own, with a directory mounted there, which
/// starts another process after the harness has looked. Both are survivors while the first
/// lives, the later one found by the namespace alone; once the first is killed, the kernel ends
/// the rest and nothing survives.
#[tokio::test]
async fn the_harness_sees_what_would_outlive_a_run() {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making namespaces needs root");
        return;
    }
    let dir = crate::common::TempDir::new("seen");
    let d = dir.0.to_str().unwrap().to_string();
    let script =
        format!("mount --bind {d} {d} && cd {d} && (sleep 0.5; sleep 30 & wait) & exec sleep 30");
    let mut unshare = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let mut seen = Seen::default();
    let mut first = None;
    for _ in 0..100 {
        first = seen.look(&d).get(&1).copied();
        if first.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let first = first.expect("the stand-in's first process is seen");
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let alive = seen.survivors();
    // SAFETY: kill(2) of the stand-in's first process, started by this test.
    unsafe { libc::kill(first, libc::SIGKILL) };
    let after = seen.survivors_after(crate::procs::SETTLE).await;
    let _ = unshare.kill();
    let _ = unshare.wait();
    let later: Vec<&String> = alive
        .iter()
        .filter(|l| {
            let pid: i32 = l.split(':').next().unwrap().parse().unwrap();
            !seen.procs.contains_key(&pid)
        })
        .collect();
    assert!(
        later.iter().any(|l| l.contains("sleep 30")),
        "the process started after the look is a survivor: {alive:?}"
    );
    assert!(
        after.is_empty(),
        "nothing survives its first process: {after:?}"
    );
}
