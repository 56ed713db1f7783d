//! A run's CPU time, all its processes together.
//!
//! `RLIMIT_CPU` counts one process (all its threads): a bash run, or a Python run allowed to
//! start processes, could spread its work over many and use its limit many times over. So
//! while a run lives, [`watch`] sums the CPU time of its process tree, from `/proc`: each
//! process's own time and that of the children it has reaped (`utime`, `stime`, `cutime`,
//! `cstime`), walking `/proc/<pid>/task/<tid>/children` down from the run's process. A child
//! that leaves its parent is re-parented within the tree (the run's process is PID 1 of its
//! PID namespace, or a child subreaper without namespaces), and one that exits is counted in
//! its reaper's `cutime`. Past the limit the run is stopped, like a run over its quota, and
//! the refusal counted (`cpu` in `ptc_run_share_refusals_total`).
//!
//! Measured every [`CHECK_EVERY`](super::scratch::CHECK_EVERY) on the quota watch's threads:
//! a run can pass its limit by what its processes use in that interval.

use super::budget::{self, Resource};
use super::scratch::{self, CHECK_EVERY};

/// Processes walked at most in one measure (`RLIMIT_NPROC` holds a run to 1,024 processes
/// and threads); a tree larger is measured in part, as what was walked.
const MAX_WALK: usize = 4096;

/// The clock ticks per second `/proc/<pid>/stat` counts in.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a system value.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .unwrap_or(100)
        .max(1)
}

/// CPU ticks of the process `pid` from `/proc/<pid>/stat`: its own (`utime`, `stime`) and the
/// children it reaped (`cutime`, `cstime`); `None` when it is gone.
pub fn stat_times(pid: i32) -> Option<[u64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold anything.
    let (_, after) = stat.rsplit_once(')')?;
    // utime, stime, cutime and cstime are fields 14 to 17, 12 to 15 after the name.
    let mut times = [0; 4];
    for (time, field) in times.iter_mut().zip(after.split_whitespace().skip(11)) {
        *time = field.parse().unwrap_or(0);
    }
    Some(times)
}

/// CPU ticks of the process `pid` and of the children it reaped; `None` when it is gone.
fn ticks_of(pid: i32) -> Option<u64> {
    stat_times(pid).map(|t| t.iter().sum())
}

/// The children of every thread of `pid`, into `into`.
fn children_of(pid: i32, into: &mut Vec<i32>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        if let Ok(list) = std::fs::read_to_string(&path) {
            into.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
}

/// CPU ticks of `root` and every process under it; `None` when `root` is gone.
pub fn tree_ticks(root: i32) -> Option<u64> {
    let mut total = ticks_of(root)?;
    let mut next = Vec::new();
    children_of(root, &mut next);
    let mut walked = 1;
    while let Some(pid) = next.pop() {
        if walked >= MAX_WALK {
            break;
        }
        walked += 1;
        // A process that exited between the two reads is in its reaper's cutime, or soon.
        if let Some(ticks) = ticks_of(pid) {
            total += ticks;
            children_of(pid, &mut next);
        }
    }
    Some(total)
}

/// Resolves, with the reason, once the processes under `root` used more than `limit_secs` of
/// CPU since the watch's first measure; never while they stay within, or once `root` is gone.
/// The first measure comes one interval in, so a run shorter than that costs nothing (what it
/// used before it counts for nothing: at most one interval of each process).
pub async fn watch(root: i32, limit_secs: u64) -> String {
    let hz = ticks_per_second();
    let limit = limit_secs.saturating_mul(hz);
    let mut start = None;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let measured = scratch::on_watch_thread(move || tree_ticks(root)).await;
        match measured {
            Some(Some(used)) => {
                let start = *start.get_or_insert(used);
                let spent = used.saturating_sub(start);
                if spent > limit {
                    budget::refused(Resource::Cpu);
                    return format!(
                        "the run's processes used {:.1} s of CPU together, past its limit of \
                         {limit_secs} s (PTC_TIMEOUT + 5 s)",
                        spent as f64 / hz as f64
                    );
                }
            }
            // Gone: its end is the runner's to see.
            Some(None) => return std::future::pending().await,
            // The queue was full: measure again.
            None => {}
        }
    }
}

/// How long one measure of a tree of `processes` busy processes takes (the watch's cost).
#[cfg(test)]
fn measure_cost(root: i32, times: u32) -> std::time::Duration {
    let started = std::time::Instant::now();
    for _ in 0..times {
        std::hint::black_box(tree_ticks(root));
    }
    started.elapsed() / times
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    /// A shell that starts `n` busy loops and waits for them.
    fn busy_tree(n: usize) -> std::process::Child {
        let script = format!("for i in $(seq {n}); do (while :; do :; done) & done; wait");
        Command::new("/bin/sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .spawn()
            .expect("sh starts")
    }

    fn kill_tree(mut child: std::process::Child) {
        let mut all = vec![];
        children_of(child.id() as i32, &mut all);
        for pid in all {
            // SAFETY: kill with a pid read from /proc just now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_tree_counts_every_process_under_the_root() {
        let child = busy_tree(3);
        let root = child.id() as i32;
        let hz = ticks_per_second();
        // The shell only waits: what the tree uses past its own is its loops'.
        let started = std::time::Instant::now();
        let mut seen = (0, 0);
        while started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
            seen = (ticks_of(root).unwrap_or(0), tree_ticks(root).unwrap_or(0));
            if seen.1 >= seen.0 + hz / 2 {
                break;
            }
        }
        let mut under = vec![];
        children_of(root, &mut under);
        let cost = measure_cost(root, 20);
        kill_tree(child);
        let (own, tree) = seen;
        assert!(
            under.len() >= 3,
            "the loops are the shell's children: {under:?}"
        );
        assert!(
            tree >= own + hz / 2,
            "the tree's {tree} ticks count the loops, not only the shell's {own}"
        );
        assert!(
            cost < Duration::from_millis(20),
            "one measure took {cost:?}"
        );
        assert!(tree_ticks(i32::MAX).is_none());
    }

    #[tokio::test]
    async fn a_tree_past_its_cpu_limit_is_stopped_with_the_reason() {
        let child = busy_tree(2);
        let root = child.id() as i32;
        let why = tokio::time::timeout(Duration::from_secs(10), watch(root, 1)).await;
        kill_tree(child);
        let why = why.expect("two busy loops pass 1 s of CPU within 10 s");
        assert!(
            why.contains("of CPU together, past its limit of 1 s"),
            "{why}"
        );
    }
}
