//! Other runs: a concurrent run's memory and stdout, a waiting warm worker's stdin, a live
//! session's files, memory and job pipe, and the limits and scheduling of every process a run
//! could break the others through (the fork server, another run, a session, the sidecar). The
//! targets' pids are ours, found from outside: in its own PID namespace a run has no pid for
//! any of them.

use super::{Opts, Stage, against_both, attack, broken};
use crate::procs::outer_pid;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_another_runs_memory_is_refused() {
    against_both("other_runs_memory", Opts::default(), |s| async move {
        let victim = s.start_victim("victim.py", json!({})).await?;
        let pid = victim.outer.unwrap();
        let run = s
            .attack("other_runs_memory.py", json!({"victim_pid": pid}))
            .await;
        let v = s.finish_victim(victim).await?;
        v.ran_to_the_end()?;
        run?.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_another_runs_stdout_is_refused() {
    against_both("other_runs_stdout", Opts::default(), |s| async move {
        let victim = s.start_victim("victim.py", json!({})).await?;
        let pid = victim.outer.unwrap();
        let run = s
            .attack(
                "other_runs_stdout.py",
                json!({"victim_pid": pid, "mark": s.mark}),
            )
            .await;
        let v = s.finish_victim(victim).await?;
        if v.stdout.contains("INJECTED") {
            return Err(attack(format!("the victim's stdout: {}", v.stdout)));
        }
        v.ran_to_the_end()?;
        run?.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_a_warm_workers_stdin_is_refused() {
    against_both("other_runs_warm_stdin", Opts::default(), |s| async move {
        let warm = s.warm_workers();
        if warm.is_empty() {
            return Err(broken("no warm worker is waiting"));
        }
        let run = s
            .attack(
                "other_runs_warm_stdin.py",
                json!({"warm_pids": warm, "mark": s.mark}),
            )
            .await?;
        // The next runs are the ones a hijack would take over.
        for _ in 0..3 {
            let next = s
                .exec("print('next run')")
                .await
                .map_err(|e| attack(format!("the next run failed: {e}")))?;
            if next["status"] != "ok" || next["stdout"] != "next run\n" {
                return Err(attack(format!("the next run was taken over: {next}")));
            }
        }
        if run.attempts.is_empty() {
            return Err(broken(format!("no worker was attacked: {}", run.stdout)));
        }
        // The pool gave the attacking run one of the waiting workers: its own stdin was among
        // the targets, as the others'.
        if !run.outer.is_some_and(|me| warm.contains(&me)) {
            return Err(broken(format!(
                "the attacking run ({:?}) was not one of the waiting workers {warm:?}",
                run.outer
            )));
        }
        run.all_refused(run.attempts.len())
    })
    .await;
}

/// Starts the live session `id` with `SECRET` (the stage's mark) in its globals and in a file
/// of its folder; our pid of its interpreter, and its folder.
pub(super) async fn start_session(s: &Stage, id: &str) -> Result<(i32, String), super::Failure> {
    let setup = format!(
        "import os\nSECRET = {:?}\nopen('secret.txt', 'w').write(SECRET)\n\
         print(os.getpid(), os.getcwd().replace('/', '|'))",
        s.mark
    );
    let started = s
        .exec_body(json!({"code": setup, "session_id": id}))
        .await
        .map_err(|e| broken(format!("the session did not start: {e}")))?;
    let out = started["stdout"].as_str().unwrap_or_default().to_string();
    let Some((inner, dir)) = out.trim().split_once(' ') else {
        return Err(broken(format!("the session printed no pid: {started}")));
    };
    let inner: i32 = inner.parse().map_err(|_| broken(out.clone()))?;
    let dir = dir.replace('|', "/");
    // Between its runs the interpreter waits, stopped, in its own namespaces.
    let pid = outer_pid(&dir, inner)
        .ok_or_else(|| broken(format!("no process of the session in {dir}")))?;
    s.track(pid);
    Ok((pid, dir))
}

/// The session `id` still has its globals and its file, unchanged.
pub(super) async fn check_session_kept(s: &Stage, id: &str) -> Result<(), super::Failure> {
    let after = s
        .exec_body(json!({"code": "print(SECRET, open('secret.txt').read())", "session_id": id}))
        .await
        .map_err(|e| attack(format!("the session's next run failed: {e}")))?;
    let both = format!("{} {}\n", s.mark, s.mark);
    if after["stdout"] != both.as_str() || after["session"]["state"] != "kept" {
        return Err(attack(format!("the session was changed: {after}")));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_another_sessions_files_and_globals_is_refused() {
    against_both("other_sessions", Opts::default(), |s| async move {
        let (pid, dir) = start_session(&s, "victim-s").await?;
        let run = s
            .attack(
                "other_sessions.py",
                json!({"victim_pid": pid, "victim_dir": dir, "mark": s.mark}),
            )
            .await;
        check_session_kept(&s, "victim-s").await?;
        run?.all_refused(4)
    })
    .await;
}

/// What a run could change of another process from outside its own: its limits, nice value,
/// scheduling policy, CPUs and I/O priority, read from `/proc` and `ioprio_get`.
#[derive(Debug, PartialEq)]
struct Sched {
    limits: Vec<String>,
    nice: String,
    policy: String,
    cpus: String,
    ioprio: i64,
}

impl Sched {
    fn of(pid: i32) -> Option<Sched> {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
        let limits = limits
            .lines()
            .filter(|l| {
                ["Max cpu time", "Max processes", "Max open files"]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command name: state is field 3, nice 19, policy 41.
        let fields: Vec<String> = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
            .trim()
            .to_string();
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        // SAFETY: ioprio_get reads one process's I/O priority; no memory is passed.
        let ioprio = unsafe {
            libc::syscall(
                libc::SYS_ioprio_get,
                IOPRIO_WHO_PROCESS,
                libc::c_long::from(pid),
            )
        };
        Some(Sched {
            limits,
            nice: fields.get(16)?.clone(),
            policy: fields.get(38)?.clone(),
            cpus,
            ioprio,
        })
    }
}

/// Issue 21's "one run breaks the others": prlimit, setpriority, sched_set* and ioprio_set on
/// the fork server, a concurrent run, a live session's interpreter and the sidecar. Each is
/// refused; from outside, no target changed; afterwards the other run, the session and later
/// runs work, and `/healthz` is ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_other_processes_limits_and_scheduling_is_refused() {
    against_both("other_runs_limits", Opts::default(), |s| async move {
        let (session, _) = start_session(&s, "victim-limits").await?;
        let victim = s.start_victim("victim.py", json!({})).await?;
        let fork_server = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        let targets: Vec<(&str, i32)> = vec![
            ("the fork server", fork_server),
            ("a concurrent run", victim.outer.unwrap()),
            ("a live session's interpreter", session),
            ("the sidecar", s.pid),
        ];
        let before: Vec<Option<Sched>> = targets.iter().map(|(_, p)| Sched::of(*p)).collect();
        if let Some(i) = before.iter().position(Option::is_none) {
            return Err(broken(format!("cannot read {:?} from /proc", targets[i])));
        }
        let run = s
            .attack("other_runs_limits.py", json!({"targets": targets}))
            .await;
        let changed: Vec<String> = targets
            .iter()
            .zip(&before)
            .filter_map(|((name, pid), was)| {
                let now = Sched::of(*pid);
                (now.as_ref() != was.as_ref()).then(|| format!("{name} {pid}: {was:?} -> {now:?}"))
            })
            .collect();
        if !changed.is_empty() {
            return Err(attack(format!("changed from outside the run: {changed:?}")));
        }
        let v = s.finish_victim(victim).await?;
        if v.status() != "ok" || !v.stdout.ends_with("victim done\n") {
            return Err(attack(format!("the concurrent run: {}", v.result)));
        }
        check_session_kept(&s, "victim-limits").await?;
        s.check_a_run_works("after the attack").await?;
        s.check_healthy("the attack").await?;
        let run = run?;
        if run.said("CONTROL").is_none() {
            return Err(broken(format!(
                "the calls failed on the run itself: {}\n{}",
                run.stdout, run.stderr
            )));
        }
        let probes: Vec<&str> = run
            .stdout
            .lines()
            .filter(|l| l.starts_with("PROBE "))
            .collect();
        eprintln!("other_runs_limits {}: {probes:?}", s.who.label());
        run.all_refused(targets.len() * 9)
    })
    .await;
}

/// A network namespace serves run after run where the fork server can make them
/// (`ptc_zygote._NetSlots`, a root sidecar): a run leaves what it can in it (connections to
/// the bridge held open, more than a run may have; requests half sent; one sent whole with its
/// token), and the runs after it, one of them in the same namespace (checked from outside),
/// must find none of it usable: the run before's token refused, their own calls all through.
/// An unprivileged sidecar's runs each make their own namespace; the same holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_run_leaves_in_its_network_namespace_is_refused() {
    against_both("other_runs_reused_netns", Opts::default(), |s| async move {
        let before = s
            .attack("reuse_leave.py", json!({"connections": 100}))
            .await?;
        let (Some(token), Some(net)) = (before.said("TOKEN"), before.seen.net) else {
            return Err(broken(format!(
                "the run before printed no token or was not seen: {}\n{}",
                before.stdout, before.stderr
            )));
        };
        let mut shared = 0;
        for _ in 0..4 {
            let after = s.attack("reuse_after.py", json!({"token": token})).await?;
            if after.said("BRIDGE") != Some("70 calls of mine") {
                return Err(attack(format!(
                    "a run after it lost calls: {}\n{}",
                    after.stdout, after.stderr
                )));
            }
            after.all_refused(1)?;
            shared += usize::from(after.seen.net == Some(net));
        }
        // Root's fork server reuses namespaces: a run after this one must have had its
        // namespace, or this test tried nothing.
        if matches!(s.who, super::Who::Root) && shared == 0 {
            return Err(broken(format!(
                "no run after it was given its network namespace {net}"
            )));
        }
        Ok(())
    })
    .await;
}
