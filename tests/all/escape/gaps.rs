//! The smaller gaps of issue 21's review, and what held there: new namespaces made by `clone`,
//! Unix datagram sockets, code written to scratch or to memory that runs despite W^X, and the
//! kernel interfaces no run needs.

use super::stage::set_mode;
use super::{Opts, against_both, attack, broken};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_namespaces_by_clone_are_refused_in_bash() {
    against_both("gaps_clone", Opts::default(), |s| async move {
        let run = s.attack_python_in_bash("gaps_clone.py", json!({})).await?;
        run.all_refused(5)
    })
    .await;
}

/// A Python run, then python3 in a bash run: both sandboxes have the same socket rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_datagram_sockets_are_refused() {
    against_both("gaps_socketpair", Opts::default(), |s| async move {
        let path = s.open_dir.join("log.sock");
        let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        set_mode(&path, 0o777);
        let args = json!({"dgram_path": path, "mark": s.mark});
        let python = s.attack("gaps_socketpair.py", args.clone()).await;
        let bash = s.attack_python_in_bash("gaps_socketpair.py", args).await;
        if socket.recv(&mut [0u8; 256]).is_ok() {
            return Err(attack(format!("a datagram reached {}", path.display())));
        }
        for run in [python?, bash?] {
            if run.said("STREAM_PAIR") != Some("ok") {
                return Err(broken(format!("a stream pair failed: {}", run.stdout)));
            }
            run.all_refused(3)?;
        }
        Ok(())
    })
    .await;
}

/// W^X for scratch: a binary or library copied there cannot run, by exec, the dynamic loader
/// or ctypes, and no executable memfd or execveat (bash run, then Python run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_written_to_scratch_cannot_run() {
    against_both("gaps_exec_scratch", Opts::default(), |s| async move {
        let bash = s.attack_bash("gaps_exec_scratch.sh", json!({})).await?;
        bash.all_refused(4)?;
        let python = s.attack("gaps_exec_scratch.py", json!({})).await?;
        python.all_refused(3)
    })
    .await;
}

/// W^X for memory: a memfd made without MFD_EXEC, executed through its `/proc/self/fd` link
/// (by execve, or by the dynamic loader), in a bash run. Fails today (ATTACK SUCCEEDED): the
/// kernel's default `vm.memfd_noexec` (0) makes such a memfd executable, and Landlock does not
/// check files of internal mounts (a memfd's), so both run `/bin/true` copied into memory.
/// Seccomp refusing memfd_create without MFD_NOEXEC_SEAL, or `vm.memfd_noexec` raised to 1 or
/// 2 for the run's PID namespace (the sysctl is per PID namespace and only goes up; the run's
/// first process may write it before it drops its capabilities), would close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_written_to_a_memfd_cannot_run() {
    against_both("gaps_memfd_exec", Opts::default(), |s| async move {
        let run = s.attack_bash("gaps_memfd_exec.sh", json!({})).await?;
        run.all_refused(2)
    })
    .await;
}

/// What held in the review: io_uring, bpf, perf, userfaultfd, keyctl, mount, unshare, ptrace and
/// process_vm_readv of the fork server, netlink, packet and abstract Unix sockets. In a Python
/// run and in python3 inside a bash run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interfaces_stay_refused() {
    against_both("held_kernel", Opts::default(), |s| async move {
        let server = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        let args = json!({"fork_server_pid": server});
        let python = s.attack("held_kernel.py", args.clone()).await?;
        let bash = s.attack_python_in_bash("held_kernel.py", args).await?;
        python.all_refused(12)?;
        bash.all_refused(12)
    })
    .await;
}

/// The seccomp program under every run (`base`) is the fork server's own, installed once, and
/// each run has it and the program of its kind: read from outside in the processes' status. A
/// server that lost it would leave every run with the few rules of its kind alone, and the
/// attacks above would show it too; this says which layer went missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_server_and_each_run_carry_their_seccomp_programs() {
    against_both("held_seccomp_stack", Opts::default(), |s| async move {
        let filters = |pid: i32| -> Option<u32> {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("Seccomp_filters:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        let server = s
            .fork_server()
            .ok_or_else(|| broken("no fork server is running"))?;
        if filters(server) != Some(1) {
            return Err(attack(format!(
                "the fork server has {:?} seccomp programs, not its own one",
                filters(server)
            )));
        }
        // A worker just forked (a refill) has only the server's program until it installs its
        // own, milliseconds later: one that keeps a single program for seconds lost its own.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let workers = s.warm_workers();
            if workers.is_empty() {
                return Err(broken("no warm worker is waiting"));
            }
            let short = workers.into_iter().find(|pid| filters(*pid) != Some(2));
            match short {
                None => return Ok(()),
                Some(pid) if std::time::Instant::now() > deadline => {
                    return Err(attack(format!(
                        "warm worker {pid} has {:?} seccomp programs, not base and its own",
                        filters(pid)
                    )));
                }
                Some(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    })
    .await;
}
