//! Lifetime: killing the sidecar and its servers, processes that detach from the run
//! (`setsid`, a double fork, a chain whose bottom re-forks itself forever and attacks the fork
//! server's limits), and a sidecar killed or terminated under a run. Whatever a run starts, once
//! it is over (or the sidecar is gone) no process of it exists: read from the process table,
//! every process the harness saw is gone, and so is the run's PID namespace.

use super::script::InFlight;
use super::{Failure, Opts, Stage, Verdict, against_both, attack, broken};
use crate::procs::{
    SETTLE, cmdline, descendants, is_alive, marker, processes, wait_dead, with_cmdline,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_sidecar_and_its_servers_is_refused() {
    against_both("lifetime_kill", Opts::default(), |s| async move {
        let mcp = s.mcp_pid().ok_or_else(|| broken("no MCP server process"))?;
        let run = s
            .attack(
                "lifetime_kill.py",
                json!({"mcp_pid": mcp, "sidecar_pid": s.pid}),
            )
            .await?;
        if !s.alive() {
            return Err(attack("the sidecar was killed"));
        }
        if !is_alive(mcp) {
            return Err(attack(format!("the MCP server {mcp} was killed")));
        }
        run.all_refused(2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_processes_are_refused_by_default() {
    against_both("lifetime_detach_refused", Opts::default(), |s| async move {
        let run = s.attack("lifetime_detach.py", json!({})).await?;
        run.all_refused(2)
    })
    .await;
}

/// Only with `PTC_ALLOW_SUBPROCESS=true` (off by default, where `setsid` and `fork` are
/// refused: `detached_processes_are_refused_by_default`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_processes_die_with_the_run_when_allowed() {
    against_both(
        "lifetime_detach_allowed",
        Opts::subprocess(),
        check_detached,
    )
    .await;
}

/// The same for a cold run (a request's own catalog, or `PTC_WARM_WORKERS=0`): it is forked by
/// a fork server of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_processes_die_with_a_cold_run_when_allowed() {
    let opts = Opts {
        warm: 0,
        ..Opts::subprocess()
    };
    against_both("lifetime_detach_allowed_cold", opts, check_detached).await;
}

async fn check_detached(s: Stage) -> Verdict {
    // attack() checks that every process seen at the script's last checkpoint is gone once
    // the run is over, and its PID namespace with them.
    let run = s.attack("lifetime_detach.py", json!({})).await?;
    run.ran_to_the_end()?;
    let bad: Vec<_> = run
        .attempts
        .iter()
        .filter(|(_, o)| !o.starts_with("GOT "))
        .collect();
    if run.attempts.len() != 2 || !bad.is_empty() || run.spawned.len() != 3 {
        return Err(broken(format!(
            "expected a setsid child, a child and a grandchild: {}",
            run.stdout
        )));
    }
    // The run's process, the setsid child and the grandchild (the child between has exited).
    if run.seen.procs.len() < 3 {
        return Err(broken(format!(
            "the harness saw only {:?} of the run",
            run.seen.procs
        )));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_killed_sidecar() {
    against_both("lifetime_sidecar_killed", Opts::default(), |s| async move {
        let victim = s.start_victim("sleeper.py", json!({})).await?;
        check_sidecar_gone(&s, victim, libc::SIGKILL, None).await
    })
    .await;
}

/// With subprocesses allowed, a run's `setsid` process is not in its group and has no death
/// signal: it dies with the run's PID namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_killed_sidecar_when_subprocesses_are_allowed() {
    against_both(
        "lifetime_sidecar_killed_detached",
        Opts::subprocess(),
        |s| async move {
            let victim = s.start_victim("detached_sleeper.py", json!({})).await?;
            if victim.seen.procs.len() < 2 {
                return Err(broken(format!(
                    "the harness did not see the setsid child: {:?}",
                    victim.seen.procs
                )));
            }
            check_sidecar_gone(&s, victim, libc::SIGKILL, None).await
        },
    )
    .await;
}

/// Sends `signal` to the sidecar while `victim` is in flight, and checks that every process
/// the sidecar had, everything the harness saw of the run and its PID namespace, and every
/// process whose command line holds `mark`, are gone.
async fn check_sidecar_gone(
    s: &Stage,
    victim: InFlight,
    signal: libc::c_int,
    mark: Option<&str>,
) -> Verdict {
    let run = victim
        .outer
        .ok_or_else(|| broken("the run's process was not seen"))?;
    let family = descendants(&processes(), s.pid);
    if !family.contains(&run) {
        return Err(broken(format!(
            "the run's process {run} is not a descendant of the sidecar"
        )));
    }
    for p in &family {
        s.track(*p);
    }
    let seen = victim.seen.clone();
    let exited = s.signal_and_wait(signal).await;
    // The run's request ends with the sidecar.
    drop(victim);
    let mut left: Vec<String> = wait_dead(&family)
        .await
        .into_iter()
        .map(|p| format!("{p}: {}", cmdline(p).unwrap_or_default()))
        .collect();
    left.extend(seen.survivors_after(SETTLE).await);
    if let Some(mark) = mark {
        left.extend(
            with_cmdline(mark)
                .into_iter()
                .map(|p| format!("{p}: {}", cmdline(p).unwrap_or_default())),
        );
    }
    left.sort();
    left.dedup();
    if !left.is_empty() {
        return Err(attack(format!("outlived the sidecar: {left:?}")));
    }
    if !exited {
        return Err(broken(format!(
            "the sidecar did not exit on signal {signal}: {}",
            s.log_tail()
        )));
    }
    Ok(())
}

/// The fork server's `Max open files` line, read from outside.
fn open_files_limit(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// What a chain run is given, and what its test checks it against: the fork server (its pid
/// and open-files limit) and the mark in the chain's command lines.
struct Chain {
    server: i32,
    limit: Option<String>,
    mark: String,
}

impl Chain {
    fn new(s: &Stage) -> Result<Chain, Failure> {
        let server = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        Ok(Chain {
            server,
            limit: open_files_limit(server),
            mark: format!("chain{}", marker()),
        })
    }

    fn args(&self, then: &str) -> serde_json::Value {
        json!({"fork_server_pid": self.server, "mark": self.mark, "then": then})
    }

    /// The harness saw the run's first process and the chain's three members (by the mark in
    /// their command lines in bash; a Python chain's processes are all the interpreter). The
    /// bottom, a new process every 50 ms, may be between two of its generations as the harness
    /// looks: it is not counted.
    fn seen_enough(&self, seen: &super::seen::Seen, by_mark: bool) -> Verdict {
        let members = seen
            .procs
            .values()
            .filter(|(_, cmd)| !by_mark || cmd.contains(&self.mark))
            .count();
        if members < 4 {
            return Err(broken(format!(
                "the harness saw {members} processes of the chain, not 4: {:?}",
                seen.procs
            )));
        }
        Ok(())
    }

    /// The fork server lives, with the open-files limit it had.
    fn server_untouched(&self) -> Verdict {
        if !is_alive(self.server) {
            return Err(attack(format!("the fork server {} died", self.server)));
        }
        let now = open_files_limit(self.server);
        if now != self.limit {
            return Err(attack(format!(
                "the fork server's limit changed: {:?} -> {now:?}",
                self.limit
            )));
        }
        Ok(())
    }
}

/// Issue 21's "processes outlive runs": a bash run starts a `setsid` chain three deep whose
/// bottom re-forks itself forever (a new process every 50 ms, its parent gone at once), and one
/// member tries `prlimit` RLIMIT_NOFILE 0 on its parent, on the run's first process and on the
/// fork server. Each `prlimit` is refused; once the run is over nothing of it exists; the fork
/// server and later runs go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_chain_dies_with_its_bash_run() {
    against_both("lifetime_chain_bash", Opts::default(), |s| async move {
        let chain = Chain::new(&s)?;
        let run = s
            .attack_bash("lifetime_chain.sh", chain.args("end"))
            .await?;
        chain.seen_enough(&run.seen, true)?;
        let left = wait_gone(&chain.mark).await;
        if !left.is_empty() {
            return Err(attack(format!("outlived the run: {left:?}")));
        }
        chain.server_untouched()?;
        s.check_a_run_works("after the chain").await?;
        s.check_healthy("the chain").await?;
        run.all_refused(3)
    })
    .await;
}

/// The same chain, made by `os.fork` and `os.setsid` in a Python run with
/// `PTC_ALLOW_SUBPROCESS=true`, its `prlimit` calls through ctypes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_chain_dies_with_its_python_run_when_allowed() {
    against_both(
        "lifetime_chain_python",
        Opts::subprocess(),
        |s| async move {
            let chain = Chain::new(&s)?;
            let run = s.attack("lifetime_chain.py", chain.args("end")).await?;
            chain.seen_enough(&run.seen, false)?;
            chain.server_untouched()?;
            s.check_a_run_works("after the chain").await?;
            s.check_healthy("the chain").await?;
            run.all_refused(3)
        },
    )
    .await;
}

/// The bash chain with its run still in flight, and the sidecar told to stop (SIGTERM): once
/// it has exited, nothing of the run exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_chain_dies_with_a_terminated_sidecar() {
    against_both("lifetime_chain_sigterm", Opts::default(), |s| async move {
        check_chain_and_signal(&s, libc::SIGTERM).await
    })
    .await;
}

/// The same with the sidecar killed (SIGKILL): nobody tells the fork server; it and the run's
/// first process see their parent go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_chain_dies_with_a_killed_sidecar() {
    against_both("lifetime_chain_sigkill", Opts::default(), |s| async move {
        check_chain_and_signal(&s, libc::SIGKILL).await
    })
    .await;
}

async fn check_chain_and_signal(s: &Stage, signal: libc::c_int) -> Verdict {
    let chain = Chain::new(s)?;
    let victim = s
        .start_bash_victim("lifetime_chain.sh", chain.args("park"))
        .await?;
    chain.seen_enough(&victim.seen, true)?;
    chain.server_untouched()?;
    check_sidecar_gone(s, victim, signal, Some(&chain.mark)).await
}

/// The processes whose command line holds `mark` still there after [`SETTLE`].
async fn wait_gone(mark: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let left = with_cmdline(mark);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left
                .into_iter()
                .map(|p| format!("{p}: {}", cmdline(p).unwrap_or_default()))
                .collect();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
