//! Processes as root sees them in `/proc`: the table, a process's family, whether it is gone.
//! For the tests that check nothing of a run outlives it, and the load bench.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a process of a run may take to disappear once the run is over.
pub const SETTLE: Duration = Duration::from_secs(5);

pub struct Proc {
    pub ppid: i32,
    pub cmdline: String,
}

pub fn processes() -> HashMap<i32, Proc> {
    let mut table = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid, ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("?");
        if state == "Z" || state == "X" {
            continue;
        }
        let ppid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        table.insert(
            pid,
            Proc {
                ppid,
                cmdline: cmdline(pid).unwrap_or_default(),
            },
        );
    }
    table
}

pub fn children(table: &HashMap<i32, Proc>, parent: i32) -> Vec<i32> {
    let mut c: Vec<i32> = table
        .iter()
        .filter(|(_, p)| p.ppid == parent)
        .map(|(pid, _)| *pid)
        .collect();
    c.sort();
    c
}

pub fn descendants(table: &HashMap<i32, Proc>, root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for c in children(table, p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

pub fn cmdline(pid: i32) -> Option<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
}

/// Running (a zombie is not).
pub fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .unwrap_or("X");
        state != "Z" && state != "X"
    })
}

pub async fn wait_dead(pids: &[i32]) -> Vec<i32> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let alive: Vec<i32> = pids.iter().copied().filter(|p| is_alive(*p)).collect();
        if alive.is_empty() || Instant::now() > deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The live processes whose command line contains `needle`: how a test finds, from outside, a
/// process a run started (inside its own PID namespace, the pid the run sees is not ours).
pub fn with_cmdline(needle: &str) -> Vec<i32> {
    let mut found: Vec<i32> = processes()
        .into_iter()
        .filter(|(pid, p)| p.cmdline.contains(needle) && is_alive(*pid))
        .map(|(pid, _)| pid)
        .collect();
    found.sort();
    found
}

/// A number no other test of this process uses, for a command line a test looks for.
pub fn marker() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) % 100_000) * 1000 + N.fetch_add(1, Ordering::Relaxed)
}

/// The live processes of the run whose scratch (or data) directory is `dir`, found from outside:
/// a run in a mount namespace of its own has `dir` mounted there (noexec), which no other
/// process has; a run without namespaces is found by its working directory. How a test finds a
/// run's processes when the pids it prints are its own PID namespace's.
pub fn of_run(dir: &str) -> Vec<i32> {
    let dir = dir.trim_end_matches('/');
    let mut found: Vec<i32> = processes()
        .into_keys()
        .filter(|pid| {
            let mounted = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(4) == Some(dir)));
            mounted
                || std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .is_ok_and(|cwd| cwd.to_str() == Some(dir))
        })
        .collect();
    found.sort();
    found
}

/// The pid in its own innermost PID namespace of process `pid` (the last of `NSpid`).
pub fn inner_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The process of the run with working directory `dir` whose own pid (inside the run) is
/// `inner`: the outer pid of what the run printed as `os.getpid()`.
pub fn outer_pid(dir: &str, inner: i32) -> Option<i32> {
    of_run(dir)
        .into_iter()
        .find(|pid| inner_pid(*pid) == Some(inner))
}

/// The inode of process `pid`'s PID namespace (`/proc/<pid>/ns/pid`): every process of a run in
/// a PID namespace of its own has it, and no other process while the run lives.
pub fn pid_ns(pid: i32) -> Option<u64> {
    namespace(pid, "pid")
}

/// The inode of process `pid`'s network namespace (`/proc/<pid>/ns/net`).
pub fn net_ns(pid: i32) -> Option<u64> {
    namespace(pid, "net")
}

/// The inode of process `pid`'s namespace of `kind` (`/proc/<pid>/ns/<kind>`).
fn namespace(pid: i32, kind: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok()?;
    link.to_str()?
        .strip_prefix(kind)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// When process `pid` started, in clock ticks after boot (`stat`'s 22nd field): with its pid,
/// a process that a later one given the same pid cannot be taken for.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: state (field 3), ..., starttime (field 22).
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The live processes in the PID namespace `ns` (see [`pid_ns`]).
pub fn in_pid_ns(ns: u64) -> Vec<i32> {
    let mut found: Vec<i32> = processes()
        .into_keys()
        .filter(|pid| pid_ns(*pid) == Some(ns))
        .collect();
    found.sort();
    found
}
