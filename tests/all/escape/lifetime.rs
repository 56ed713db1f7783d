//! Lifetime: killing the sidecar and its servers, processes that detach from the run
//! (`setsid`, a double fork), and a sidecar killed under a run. Whatever a run starts, once
//! it is over (or the sidecar is gone) no process of it exists: read from the process table,
//! every process the harness saw is gone, and so is the run's PID namespace.

use super::script::InFlight;
use super::{Opts, Stage, Verdict, against_both, attack, broken};
use crate::procs::{SETTLE, cmdline, descendants, is_alive, processes, wait_dead};
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
        check_sidecar_gone(&s, victim, libc::SIGKILL).await
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
            check_sidecar_gone(&s, victim, libc::SIGKILL).await
        },
    )
    .await;
}

/// Sends `signal` to the sidecar while `victim` is in flight, and checks that every process
/// the sidecar had, and everything the harness saw of the run and its PID namespace, are gone.
async fn check_sidecar_gone(s: &Stage, victim: InFlight, signal: libc::c_int) -> Verdict {
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
